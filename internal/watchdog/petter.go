// Package watchdog is the node-side half of hung-node evidence: it arms the
// BMC's host watchdog through the kernel's ipmi_watchdog driver
// (/dev/watchdog) and pets it while this OS runs, so that a hung kernel is
// something the BMC logs (an SMS/OS "Watchdog 2" expiry) and a fence can
// read, from a source the hung OS does not control.
//
// Only the driver is used: never raw in-band IPMI (/dev/ipmi0), which can
// also rewrite the BMC's users and network. The device is the only file
// opened. A stop on purpose (SIGTERM: the DaemonSet's pod deleted, the
// node drained) writes the magic close 'V' before closing, and the driver
// disarms the watchdog; any other end (SIGKILL, an OOM kill, a crash)
// closes without it, the driver leaves the timer running, and the BMC
// logs an expiry one timeout later on a machine that may well be alive:
// evidence is weighed by the fence, never taken alone.
//
// What the BMC does on expiry is the driver's module parameter action
// (ipmi_watchdog action=reset|none|power_off|power_cycle, default reset):
// "none" leaves the decision to the fence; docs/failures.md says which to
// choose.
package watchdog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/utils/clock"
)

// Defaults: the timeout bounds how soon a hang becomes evidence (a fence
// can start ForceOff only after the expiry, and the Lease's suspectAfter
// of 20 s has passed by then); three pets per timeout ride out a petter
// delayed by a busy node (CPU starvation, a slow container runtime) for up
// to two intervals.
const (
	DefaultDevice   = "/dev/watchdog"
	DefaultTimeout  = 30 * time.Second
	DefaultInterval = 10 * time.Second
	// IPMIIdentity is what ipmi_watchdog answers WDIOC_GETSUPPORT with.
	// softdog, iTCO_wdt and other kernel watchdogs answer otherwise: the
	// BMC never sees them, so they prove nothing.
	IPMIIdentity = "IPMI"
	// maxTimeout: IPMI counts the timeout in tenths of a second in 16 bits.
	maxTimeout = 6553 * time.Second
)

// magicClose is the byte that tells the driver the next close is on
// purpose (Documentation/watchdog/watchdog-api.rst).
const magicClose = "V"

// pet is what each keepalive writes: any byte but 'V'.
const pet = "\x00"

// Config is the petter's configuration.
type Config struct {
	Device   string
	Timeout  time.Duration
	Interval time.Duration
	// Identity the device must report; "" accepts any (tests, and drivers
	// a user vouches for).
	Identity string
}

// ErrConfig wraps every configuration problem.
var ErrConfig = errors.New("invalid watchdog configuration")

// ErrDevice wraps problems with the device before anything is armed:
// missing, not the BMC's, refusing the timeout.
var ErrDevice = errors.New("watchdog device")

// ErrPetting wraps failures once the watchdog is armed: it stays armed and
// will expire.
var ErrPetting = errors.New("watchdog petting failed")

// Validate reports every problem, one per line.
func (c Config) Validate() error {
	var errs []error
	if c.Device == "" {
		errs = append(errs, fmt.Errorf("%w: --device: required (the BMC watchdog's device, %s)", ErrConfig, DefaultDevice))
	}
	if c.Timeout < time.Second || c.Timeout > maxTimeout || c.Timeout%time.Second != 0 {
		errs = append(errs, fmt.Errorf("%w: --timeout %v: want whole seconds from 1s to %v (the driver takes seconds)", ErrConfig, c.Timeout, maxTimeout))
	}
	if c.Interval <= 0 || c.Interval >= c.Timeout {
		errs = append(errs, fmt.Errorf("%w: --interval %v: want more than 0 and less than --timeout %v (a third of it leaves room for two late pets)", ErrConfig, c.Interval, c.Timeout))
	}
	return errors.Join(errs...)
}

// Device is an open watchdog device: writes pet it (a 'V' arms the magic
// close), and two ioctls configure it.
type Device interface {
	io.WriteCloser
	// Identity is WDIOC_GETSUPPORT's identity string.
	Identity() (string, error)
	// SetTimeout is WDIOC_SETTIMEOUT; it returns the timeout the driver
	// took (it may round).
	SetTimeout(seconds int) (int, error)
}

// Opener opens the device at a path. It is the only way the petter opens
// anything.
type Opener func(path string) (Device, error)

// Run arms the watchdog and pets it every Interval until ctx ends, then
// writes the magic close and closes the device (the driver disarms the
// watchdog). logf receives one line per notable event. An error before the
// watchdog is armed leaves it as it was; an error while petting returns at
// once without the magic close: the timer runs on and expires, which is
// what a petter that cannot pet must let happen.
func Run(ctx context.Context, cfg Config, open Opener, clk clock.WithTicker, logf func(string, ...any)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	dev, err := open(cfg.Device)
	if err != nil {
		return fmt.Errorf("%w: opening %s: %v (is ipmi_watchdog loaded? is the device mounted into the pod?)", ErrDevice, cfg.Device, err)
	}
	if cfg.Identity != "" {
		id, err := dev.Identity()
		id = strings.TrimRight(id, "\x00")
		if err != nil || id != cfg.Identity {
			// Closing without the magic close: nothing was armed by us, but a
			// device opened by a previous petter stays as it was.
			_ = dev.Close()
			if err != nil {
				return fmt.Errorf("%w: %s: reading its identity: %v", ErrDevice, cfg.Device, err)
			}
			return fmt.Errorf("%w: %s is %q, not the BMC's watchdog (%q): a kernel-only watchdog is invisible to the BMC; load ipmi_watchdog or point --device at its node",
				ErrDevice, cfg.Device, id, cfg.Identity)
		}
	}
	secs := int(cfg.Timeout / time.Second)
	got, err := dev.SetTimeout(secs)
	if err != nil {
		_ = dev.Close()
		return fmt.Errorf("%w: %s: setting the timeout to %ds: %v", ErrDevice, cfg.Device, secs, err)
	}
	if time.Duration(got)*time.Second <= cfg.Interval {
		_, _ = dev.Write([]byte(magicClose))
		_ = dev.Close()
		return fmt.Errorf("%w: %s took a timeout of %ds, not above --interval %v", ErrDevice, cfg.Device, got, cfg.Interval)
	}
	if _, err := dev.Write([]byte(pet)); err != nil {
		return fmt.Errorf("%w: %s: first pet: %v (the watchdog stays armed and will expire)", ErrPetting, cfg.Device, err)
	}
	logf("watchdog: %s armed, timeout %ds, petting every %v", cfg.Device, got, cfg.Interval)
	t := clk.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if _, err := dev.Write([]byte(magicClose)); err != nil {
				_ = dev.Close()
				return fmt.Errorf("%w: %s: the magic close was not written (%v): the watchdog stays armed", ErrPetting, cfg.Device, err)
			}
			if err := dev.Close(); err != nil {
				return fmt.Errorf("%w: %s: closing after the magic close: %v", ErrPetting, cfg.Device, err)
			}
			logf("watchdog: stopped on purpose; %s disarmed (magic close)", cfg.Device)
			return nil
		case <-t.C():
			if _, err := dev.Write([]byte(pet)); err != nil {
				// No magic close: the timer runs on.
				return fmt.Errorf("%w: %s: pet failed: %v (the watchdog stays armed and will expire)", ErrPetting, cfg.Device, err)
			}
		}
	}
}
