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

// isTerminal reports whether f is a terminal (progress and prompts go only
// there). /dev/null is a character device but not a terminal, hence the
// ioctl-based check.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}
