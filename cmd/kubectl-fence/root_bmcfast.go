//go:build bmcfast

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bmcfence/bmcfence/internal/version"
)

// kubectl-fence as make builds it (go build -tags bmcfast) is this front:
// the bmc commands and --version, and nothing of Kubernetes. Everything
// else it hands to the whole CLI, built from the same package without the
// tag and installed beside it as bmcfence-cli, by exec: the same process
// id, arguments, environment and standard streams.
//
// Why: Go initialises every package a binary links before main runs, and
// the cluster commands link client-go and the Kubernetes API types, whose
// init alone (type registration into the client-go scheme, ~290 packages)
// costs about 10 ms on a 2-core machine, several times what `bmc status`
// needs for the BMC itself. The front starts in a few milliseconds; the
// cluster commands pay one extra exec (about a millisecond) against
// requests to an API server.

func newRoot(s streams) *cobra.Command {
	root := &cobra.Command{
		Use: "kubectl-fence",
		// kubectl runs it as "kubectl fence": help and usage say so.
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl fence"},
		Short:         "Fence dead Kubernetes nodes through their BMCs, safely",
		Long:          "kubectl fence's BMC commands.\n\n" + exitCodesHelp,
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("kubectl-fence {{.Version}}\n")
	// A flag the front does not know may be one of the whole CLI's (the
	// kubeconfig flags are persistent there): let it decide. Nothing has
	// been done yet.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &handOverError{err} })
	root.AddCommand(newBMCCmd(s))
	argsAreUsage(root)
	// "bmc stat" is a usage error with a suggestion, as in the whole CLI,
	// not bmc's help and exit 0.
	unknownCommandsAreUsage(root)
	return root
}

// handOverError asks run to hand the command to the whole CLI.
type handOverError struct{ err error }

func (e *handOverError) Error() string { return e.err.Error() }

// handOver passes every command but bmc and --version to the whole CLI.
func handOver(_ context.Context, args []string, s streams) (int, bool) {
	if len(args) > 0 && (args[0] == "bmc" || args[0] == "--version") {
		return 0, false
	}
	return execFullCLI(args, s), true
}

func handOverOn(_ context.Context, err error, args []string, s streams) (int, bool) {
	var h *handOverError
	if !errors.As(err, &h) {
		return 0, false
	}
	return execFullCLI(args, s), true
}

// execFullCLI replaces this process with the whole CLI; it returns only if
// that fails.
func execFullCLI(args []string, s streams) int {
	path, err := fullCLIPath()
	if err != nil {
		fmt.Fprintf(s.Err, "kubectl-fence: %v\n", err)
		return exitFailed
	}
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	fmt.Fprintf(s.Err, "kubectl-fence: running %s: %v\n", path, err)
	return exitFailed
}

// fullCLIPath finds bmcfence-cli beside this binary, else on PATH.
func fullCLIPath() (string, error) {
	if self, err := os.Executable(); err == nil {
		if self, err = filepath.EvalSymlinks(self); err == nil {
			p := filepath.Join(filepath.Dir(self), fullCLIName)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p, nil
			}
		}
	}
	if p, err := exec.LookPath(fullCLIName); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("this kubectl-fence holds only the bmc commands; the others are in %s, which is neither beside it nor on PATH (make build puts both in bin/; install them together)", fullCLIName)
}
