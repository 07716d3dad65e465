package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/bmcfence/bmcfence/internal/version"
)

// streams are the command's standard streams, injectable for tests.
type streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// run executes the CLI and returns the process exit code. Errors are one
// line on stderr, never a stack trace or a usage dump.
func run(ctx context.Context, args []string, s streams) int {
	root := newRoot(s)
	root.SetArgs(args)
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	if ctx.Err() != nil {
		code = exitInterrupted
	}
	fmt.Fprintf(s.Err, "kubectl-fence: %s\n", oneLine(err.Error()))
	return code
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func newRoot(s streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-fence",
		Short: "Fence dead Kubernetes nodes through their BMCs, safely",
		Long: `kubectl fence powers off, confirms and taints dead nodes the way the bmcfence
agent does, by hand: a node is tainted out-of-service only after its BMC has
read back a settled Off.

` + exitCodesHelp,
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("kubectl-fence {{.Version}}\n")
	// Cobra's own flag errors ("unknown flag") are usage errors.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return withCode(exitUsage, err) })
	root.AddCommand(newBMCCmd(s))
	return root
}

// isTerminal reports whether f is a terminal (progress and prompts go only
// there). /dev/null is a character device but not a terminal, hence the
// ioctl-based check.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}
