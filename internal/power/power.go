// Package power drives a BMC to a state and proves it: a hard power-off
// confirmed by a settled Off read-back (the agent's own rule, fence.OffRun),
// and a power-on optionally awaited. The CLI's bmc, power and drain commands
// share it.
package power

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// ErrNotOff is wrapped when the BMC never read back a settled Off.
var ErrNotOff = errors.New("the BMC did not power off")

// ErrNotOn is wrapped when the BMC did not read On in time.
var ErrNotOn = errors.New("the BMC did not power on")

// Say reports progress (the CLI prints it on a terminal).
type Say func(format string, args ...any)

// Report says what a power operation did.
type Report struct {
	Address    string         `json:"address"`
	System     string         `json:"system,omitempty"`
	Action     string         `json:"action"`
	PowerState bmc.PowerState `json:"powerState"`
	Confirmed  bool           `json:"confirmed"`
	OffReads   int            `json:"offReads,omitempty"`
	OffSpan    string         `json:"offSpan,omitempty"`
	Elapsed    string         `json:"elapsed"`
}

// OffConfirmed sends ForceOff and reads back until the reads settle on
// Off (fence.OffRun, the agent's own rule: consecutive exact-Off reads, all
// sent after our request, spanning the window) or the limit passes.
func OffConfirmed(ctx context.Context, ctrl bmc.Controller, p fence.Policy, say Say) (Report, error) {
	r := Report{Action: "off"}
	start := time.Now()
	sent := start
	if _, err := ctrl.PowerOff(ctx); err != nil {
		if ctx.Err() != nil {
			return r, err
		}
		// A refusal (409 when already off) proves nothing either way.
		say("ForceOff: %v; reading back anyway", err)
	} else {
		say("ForceOff sent; waiting for %d Off reads over %s", p.SettleReads, p.SettleWindow)
	}
	var run fence.OffRun
	var last bmc.PowerStatus
	var lastErr error
	wait := p.PowerPollInterval
	for {
		if err := sleep(ctx, wait); err != nil {
			return r, err
		}
		readAt := time.Now()
		last, lastErr = ctrl.PowerStatus(ctx)
		run = run.Observe(runner.ReadingOf(readAt, last, lastErr), sent, p.MaxReadGap)
		r.PowerState, r.OffReads, r.Elapsed = last.State, run.Count, time.Since(start).Round(time.Millisecond).String()
		switch {
		case lastErr != nil:
			say("read failed: %v", lastErr)
		case run.Count > 0:
			say("reads Off (%d of %d)", run.Count, p.SettleReads)
		default:
			say("reads %s", last.State)
		}
		if run.Settled(p) {
			r.Confirmed = true
			r.OffSpan = run.Last.Sub(run.First).Round(time.Millisecond).String()
			return r, nil
		}
		if time.Since(sent) >= p.PowerTimeout {
			why := fmt.Sprintf("still reads %s", last.State)
			if lastErr != nil {
				why = "cannot be read: " + lastErr.Error()
			}
			return r, fmt.Errorf("%w: it %s %s after ForceOff (it may ignore commands)", ErrNotOff, why, p.PowerTimeout)
		}
		wait = p.PowerPollInterval
		if run.Count > 0 {
			wait = p.SettleInterval()
		}
	}
}

// On sends a power-on; with wait, it waits until the BMC reads On.
func On(ctx context.Context, ctrl bmc.Controller, wait bool, limit, poll time.Duration, say Say) (Report, error) {
	r := Report{Action: "on"}
	start := time.Now()
	if _, err := ctrl.PowerOn(ctx); err != nil {
		return r, err
	}
	say("power-on sent")
	for {
		st, err := ctrl.PowerStatus(ctx)
		r.Elapsed = time.Since(start).Round(time.Millisecond).String()
		if err == nil {
			r.PowerState = st.State
			say("reads %s", st.State)
		}
		if err == nil && st.State == bmc.PowerOn {
			r.Confirmed = true
			return r, nil
		}
		if !wait {
			return r, nil
		}
		if time.Since(start) >= limit {
			return r, fmt.Errorf("%w: it did not read On within %s (reads %s)", ErrNotOn, limit, r.PowerState)
		}
		if err := sleep(ctx, poll); err != nil {
			return r, err
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
