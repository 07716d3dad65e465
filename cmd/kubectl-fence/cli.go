package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// This file is shared by both builds of the command: the whole CLI
// (root.go) and the BMC-only front that make installs as kubectl-fence
// (root_bmcfast.go).

// fullCLIName is the file name of the whole CLI as make installs it beside
// the BMC-only front (root_bmcfast.go): not kubectl-*, so kubectl does not
// list it as a plugin of its own.
const fullCLIName = "bmcfence-cli"

// streams are the command's standard streams, injectable for tests.
type streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// run executes the CLI and returns the process exit code. Errors are one
// line on stderr, never a stack trace or a usage dump.
func run(ctx context.Context, args []string, s streams) int {
	if code, done := handOver(ctx, args, s); done {
		return code
	}
	root := newRoot(s)
	root.SetArgs(args)
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	if code, done := handOverOn(ctx, err, args, s); done {
		return code
	}
	code := exitCode(err)
	if ctx.Err() != nil {
		code = exitInterrupted
	}
	fmt.Fprintf(s.Err, "kubectl fence: %s\n", oneLine(err.Error()))
	return code
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// argsAreUsage makes a wrong number of arguments a usage error (exit 2)
// that shows how the command is called.
func argsAreUsage(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return usageError("%v; usage: %s", err, c.UseLine())
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		argsAreUsage(sub)
	}
}

// unknownCommandsAreUsage makes every command with subcommands answer an
// unknown subcommand with a usage error (exit 2) and a suggestion, instead
// of cobra's help and exit 0 ("power reboot x") or exit 1 (a typo at the
// top level). Unknown flags after an unknown subcommand ("bmc cycle
// --address …") are not what went wrong, so they do not hide it.
func unknownCommandsAreUsage(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		unknownCommandsAreUsage(sub)
	}
	if !cmd.HasSubCommands() || cmd.Runnable() {
		return
	}
	cmd.Args = cobra.ArbitraryArgs
	// Not at the top: there an unknown flag is all that went wrong, and
	// ignoring it would print the help and exit 0.
	cmd.FParseErrWhitelist.UnknownFlags = cmd.HasParent()
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default, set only when cobra suggests itself
	}
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			if !c.HasParent() {
				return c.Help()
			}
			return usageError("%s needs a command: %s", c.CommandPath(), strings.Join(subcommandNames(c), ", "))
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if c.Name() == "bmc" && args[0] == "cycle" {
			msg += `: a power cycle can leave a machine on, so bmcfence never fences with one; "bmc off", then "bmc on"`
		} else if sugg := c.SuggestionsFor(args[0]); len(sugg) > 0 {
			msg += fmt.Sprintf("; did you mean %q?", sugg[0])
		} else {
			msg += "; commands: " + strings.Join(subcommandNames(c), ", ")
		}
		return usageError("%s", msg)
	}
}

func subcommandNames(c *cobra.Command) []string {
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	return names
}

// isTerminal reports whether f is a terminal (progress and prompts go only
// there). /dev/null is a character device but not a terminal, hence the
// ioctl-based check.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}
