// Command bmc-watchdog arms the BMC's host watchdog through the kernel's
// ipmi_watchdog driver and pets it while this node's OS runs, so that a
// hung kernel leaves evidence in the BMC's log (see internal/watchdog). It
// runs as a DaemonSet (deploy/overlays/watchdog), needs the device and
// nothing of the Kubernetes API, and on SIGTERM disarms the watchdog with
// the magic close.
//
//	bmc-watchdog [--device /dev/watchdog] [--timeout 30s] [--interval 10s]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/internal/version"
	"github.com/bmcfence/bmcfence/internal/watchdog"
)

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1 // the watchdog could not be kept petted: it stays armed and will expire
	exitUsage  = 2 // bad flags: nothing was opened
	exitDevice = 3 // the device is missing, not the BMC's, or refused the timeout
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr, watchdog.OpenDevice)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stderr io.Writer, open watchdog.Opener) int {
	fs := flag.NewFlagSet("bmc-watchdog", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := watchdog.Config{Identity: watchdog.IPMIIdentity}
	fs.StringVar(&cfg.Device, "device", watchdog.DefaultDevice, "the BMC watchdog's device (ipmi_watchdog's misc device)")
	fs.DurationVar(&cfg.Timeout, "timeout", watchdog.DefaultTimeout, "the watchdog's timeout, whole seconds: a hang is logged by the BMC this long after the last pet")
	fs.DurationVar(&cfg.Interval, "interval", watchdog.DefaultInterval, "how often to pet it; below --timeout")
	anyDriver := fs.Bool("any-driver", false, "accept a watchdog that does not identify as IPMI (only for a BMC driver you know to be one)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *showVersion {
		fmt.Fprintln(stderr, "bmc-watchdog", version.Get())
		return exitOK
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bmc-watchdog: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *anyDriver {
		cfg.Identity = ""
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "bmc-watchdog: %v\n", err)
		return exitUsage
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	err := watchdog.Run(ctx, cfg, open, clock.RealClock{}, logf)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, watchdog.ErrDevice):
		fmt.Fprintf(stderr, "bmc-watchdog: %v\n", err)
		return exitDevice
	default:
		fmt.Fprintf(stderr, "bmc-watchdog: %v\n", err)
		return exitFailed
	}
}
