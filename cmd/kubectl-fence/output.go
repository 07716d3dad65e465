package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"
)

// outputFormat is the value of -o.
type outputFormat string

const (
	outTable outputFormat = "table"
	outJSON  outputFormat = "json"
	outYAML  outputFormat = "yaml"
)

func (f *outputFormat) String() string { return string(*f) }
func (f *outputFormat) Type() string   { return "table|json|yaml" }
func (f *outputFormat) Set(v string) error {
	switch outputFormat(v) {
	case outTable, outJSON, outYAML:
		*f = outputFormat(v)
		return nil
	}
	return fmt.Errorf("output %q: want table, json or yaml", v)
}

// printObject writes v as JSON or YAML, or calls table for the table form.
func printObject(w io.Writer, f outputFormat, v any, table func(*tabwriter.Writer)) error {
	switch f {
	case outJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case outYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case outTable:
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// confirm asks before a destructive action. Without a terminal to ask on, it
// refuses rather than assume yes.
func confirm(s streams, yes bool, prompt string) error {
	if yes {
		return nil
	}
	if !isTerminal(s.In) {
		return usageError("%s: confirmation needed, and stdin is not a terminal; pass --yes", strings.TrimSuffix(prompt, "?"))
	}
	fmt.Fprintf(s.Err, "%s [y/N]: ", prompt)
	answer, _ := bufio.NewReader(s.In).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return withCode(exitDeclined, fmt.Errorf("not confirmed; nothing was done"))
}

// progress writes status lines to stderr when it is a terminal, so that
// piped output stays clean.
type progress struct {
	w  io.Writer
	on bool
}

func newProgress(s streams) progress { return progress{w: s.Err, on: isTerminal(s.Err)} }

func (p progress) say(format string, args ...any) {
	if p.on {
		fmt.Fprintf(p.w, format+"\n", args...)
	}
}

// bmcProgress writes the bmc commands' progress to stderr, also without a
// terminal: a minute of silence looks like a hang. Off a terminal each
// line starts with "progress: " and the seconds since the start, so a
// script can drop them (grep -v '^progress: ') and keep the one error
// line, which starts "kubectl fence: ".
type bmcProgress struct {
	w     io.Writer
	tty   bool
	quiet bool
	start time.Time
}

func newBMCProgress(s streams, quiet bool) bmcProgress {
	return bmcProgress{w: s.Err, tty: isTerminal(s.Err), quiet: quiet, start: time.Now()}
}

func (p bmcProgress) say(format string, args ...any) {
	switch {
	case p.quiet:
	case p.tty:
		fmt.Fprintf(p.w, format+"\n", args...)
	default:
		fmt.Fprintf(p.w, "progress: [%5.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
	}
}
