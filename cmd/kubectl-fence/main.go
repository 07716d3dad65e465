// Command kubectl-fence is bmcfence's manual fence CLI, installable as a
// kubectl plugin (`kubectl fence …`): it drives the agent's own safe sequence
// by hand, and talks to BMCs directly (`kubectl fence bmc …`).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
