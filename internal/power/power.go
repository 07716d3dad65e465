// Package power drives a BMC to a state and proves it: a hard power-off
// confirmed only by an Off we caused (fence.OffRun, the agent's own rule),
// and a power-on optionally awaited. The CLI's bmc, power and drain
// commands share it.
//
// It imports nothing of Kubernetes: kubectl-fence's bmc commands build
// without it (see cmd/kubectl-fence).
package power

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
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
	// Sent is the last command put on the wire, in the protocol's words
	// ("redfish ComputerSystem.Reset ForceOff", "ipmi chassis power off");
	// empty when nothing was sent. Commands counts the commands sent.
	Sent     string `json:"sent,omitempty"`
	Commands int    `json:"commands"`
	// Answer is the BMC's answer to the last command: "accepted",
	// "already in that state", or empty when none was sent.
	Answer   string `json:"answer,omitempty"`
	OffReads int    `json:"offReads,omitempty"`
	OffSpan  string `json:"offSpan,omitempty"`
	// Note says why a confirmation took the path it took (an Off we did
	// not cause, a BMC contradicting itself).
	Note    string `json:"note,omitempty"`
	Elapsed string `json:"elapsed"`
	// Error says why the operation failed, for JSON and YAML readers; the
	// CLI fills it.
	Error *ErrorInfo `json:"error,omitempty"`
}

// ErrorInfo is a failure in structured output.
type ErrorInfo struct {
	// Reason is bmc.Reason's label ("auth", "unreachable", ...) or the
	// CLI's ("not-off", ...).
	Reason   string `json:"reason"`
	Message  string `json:"message"`
	ExitCode int    `json:"exitCode"`
}

const (
	answerAccepted = "accepted"
	answerAlready  = "already in that state"
)

// OffConfirmed sends ForceOff and proves the machine is off by its own
// doing, the rule the agent applies before it taints a node:
//
//   - if the BMC accepts the command, only exact-Off reads sent after it
//     count, and they must settle: Policy.SettleReads consecutive reads
//     spanning Policy.SettleWindow;
//   - if the BMC answers "already in that state" (bmc.ErrAlreadyInState:
//     iDRAC's 409, iLO's 400, IPMI 0xD5), it did nothing, and a restart's
//     off-dwell answers the same: reads go on, any On, PoweringOn or
//     PoweringOff reading sends ForceOff again, and an Off counts only when
//     its run spans Policy.UnassistedSettleWindow, longer than any restart's
//     off-dwell; the report says so;
//   - any other failure of the command ends it at once, with that error:
//     nothing is polled when nothing was accepted.
//
// It gives up with ErrNotOff after Policy.PowerTimeout from the last
// accepted command (from the first command plus UnassistedSettleWindow when
// none was accepted).
func OffConfirmed(ctx context.Context, ctrl bmc.Controller, p fence.Policy, say Say) (Report, error) {
	return offConfirmed(ctx, clock.RealClock{}, ctrl, p, say)
}

func offConfirmed(ctx context.Context, clk clock.Clock, ctrl bmc.Controller, p fence.Policy, say Say) (Report, error) {
	r := Report{Action: "off"}
	start := clk.Now()
	var (
		accepted  bool      // a ForceOff of ours was accepted
		untrusted bool      // the machine ran after an accepted ForceOff: acceptances prove nothing
		notBefore time.Time // reads count only after the command that mattered
		limit     time.Time
	)
	send := func() error {
		sentAt := clk.Now()
		res, err := ctrl.PowerOff(ctx)
		noteSent(&r, res, err, "ForceOff")
		r.Elapsed = clk.Since(start).Round(time.Millisecond).String()
		switch {
		case err == nil:
			accepted, notBefore = true, sentAt
			limit = sentAt.Add(p.PowerTimeout)
			r.Answer = answerAccepted
			say("%s accepted; waiting for %d Off reads over %s", r.Sent, p.SettleReads, p.SettleWindow)
			return nil
		case errors.Is(err, bmc.ErrAlreadyInState):
			r.Answer = answerAlready
			if notBefore.IsZero() {
				notBefore = sentAt
				limit = sentAt.Add(p.UnassistedSettleWindow + p.PowerTimeout)
			}
			say("%s: the BMC did nothing (%v); an Off we did not cause counts only after %d Off reads over %s, longer than any restart's off-dwell",
				r.Sent, shortReason(err), p.SettleReads, p.UnassistedSettleWindow)
			return nil
		}
		if r.Sent == "" {
			say("power-off not sent: %v", err)
		} else {
			say("%s failed: %v", r.Sent, err)
		}
		return err
	}
	if err := send(); err != nil {
		return r, err
	}

	var run fence.OffRun
	var last bmc.PowerStatus
	var lastErr error
	wait := p.PowerPollInterval
	for {
		if err := sleep(ctx, clk, wait); err != nil {
			return r, err
		}
		readAt := clk.Now()
		last, lastErr = ctrl.PowerStatus(ctx)
		rd := readingOf(readAt, last, lastErr)
		wasOff := run.Count > 0
		run = run.Observe(rd, notBefore, p.MaxReadGap)
		if accepted && lastErr == nil && (last.State == bmc.PowerOn || last.State == bmc.PoweringOn) &&
			(wasOff || !readAt.Before(notBefore.Add(p.OwnOffWithin))) {
			// The machine came up after our Off (someone powered it on,
			// and may power-cycle it), or runs long after the BMC
			// accepted our ForceOff (it ignores commands): from now on
			// no acceptance makes an Off ours.
			untrusted = true
			if wasOff {
				accepted = false // send it again, below
			}
		}
		r.PowerState, r.OffReads = last.State, run.Count
		r.Elapsed = clk.Since(start).Round(time.Millisecond).String()
		switch {
		case lastErr != nil:
			say("read failed: %v", lastErr)
		case run.Count > 0:
			say("reads Off (%d of %d)", run.Count, p.SettleReads)
		case last.State == bmc.PowerOff && last.OSRunning():
			say("reads Off, but BootProgress says %s: a BMC contradicting itself proves nothing", last.BootProgress)
		default:
			say("reads %s", last.State)
		}

		if !accepted && lastErr == nil {
			switch last.State {
			case bmc.PowerOn, bmc.PoweringOn, bmc.PoweringOff:
				// The machine has power after all (a restart's off-dwell
				// ended): the BMC will take a ForceOff now.
				run = fence.OffRun{}
				if err := send(); err != nil {
					return r, err
				}
			case bmc.PowerOff, bmc.PowerUnknown:
			}
		}

		window := p.SettleWindow
		late := accepted && run.Count > 0 && (untrusted || run.First.After(notBefore.Add(p.OwnOffWithin)))
		if !accepted || late {
			window = p.UnassistedSettleWindow
		}
		if late && limit.Before(run.First.Add(p.UnassistedSettleWindow+p.PowerTimeout)) {
			limit = run.First.Add(p.UnassistedSettleWindow + p.PowerTimeout)
		}
		if run.SettledOver(window, p.SettleReads) {
			r.Confirmed = true
			r.OffSpan = run.Last.Sub(run.First).Round(time.Millisecond).String()
			if late {
				r.Note = fmt.Sprintf("the machine ran after an accepted ForceOff, or read Off only %s after it (later than %s, Policy.OwnOffWithin): a BMC that accepts and ignores says accepted too, so the machine had to read Off for %s, longer than any restart's off-dwell",
					run.First.Sub(notBefore).Round(time.Millisecond), p.OwnOffWithin, p.UnassistedSettleWindow)
				say("confirmed Off over %s; %s", r.OffSpan, r.Note)
			}
			if !accepted {
				r.Note = fmt.Sprintf("the Off was not caused by us: the BMC answered %q to every ForceOff, so the machine had to read Off for %s (Policy.UnassistedSettleWindow), longer than any restart's off-dwell",
					answerAlready, p.UnassistedSettleWindow)
				say("confirmed Off over %s; %s", r.OffSpan, r.Note)
			}
			return r, nil
		}
		if !clk.Now().Before(limit) {
			why := fmt.Sprintf("still reads %s", last.State)
			switch {
			case lastErr != nil:
				why = "cannot be read: " + lastErr.Error()
			case last.State == bmc.PowerOff && last.OSRunning():
				why = fmt.Sprintf("reads Off while BootProgress says %s, which contradicts it", last.BootProgress)
				r.Note = "a BMC that reads Off while claiming the OS runs proves nothing"
			}
			if !accepted {
				return r, fmt.Errorf("%w: it %s, and no ForceOff of ours was accepted (the BMC answered %q); an Off we did not cause needs %d Off reads over %s",
					ErrNotOff, why, answerAlready, p.SettleReads, p.UnassistedSettleWindow)
			}
			return r, fmt.Errorf("%w: it %s %s after ForceOff was accepted (it may ignore commands)", ErrNotOff, why, p.PowerTimeout)
		}
		wait = p.PowerPollInterval
		if run.Count > 0 {
			wait = p.SettleInterval()
		}
	}
}

// noteSent records a command that reached the BMC: one the adapter says it
// sent, or one the BMC answered (accepted, or "already in that state").
func noteSent(r *Report, res bmc.Result, err error, what string) {
	switch {
	case res.Sent != "":
		r.Sent = res.Provider + " " + res.Sent
	case err == nil || errors.Is(err, bmc.ErrAlreadyInState):
		r.Sent = what
	default:
		return
	}
	r.Commands++
}

// readingOf turns a power read into the engine's Reading (the agent's own
// mapping, fence/runner.ReadingOf, without its dependencies).
func readingOf(at time.Time, st bmc.PowerStatus, err error) fence.Reading {
	if err != nil {
		return fence.Reading{At: at, Failure: bmc.Reason(err) + ": " + err.Error()}
	}
	var pw fence.Power
	switch st.State {
	case bmc.PowerOn:
		pw = fence.PowerOn
	case bmc.PowerOff:
		pw = fence.PowerOff
	case bmc.PoweringOn:
		pw = fence.PowerPoweringOn
	case bmc.PoweringOff:
		pw = fence.PowerPoweringOff
	case bmc.PowerUnknown:
		pw = fence.PowerUnknown
	}
	return fence.Reading{At: at, Power: pw, OSRunning: st.OSRunning()}
}

// shortReason is the error's text after the OpError's preamble.
func shortReason(err error) string {
	var op *bmc.OpError
	if errors.As(err, &op) {
		return op.Err.Error()
	}
	return err.Error()
}

// On sends a power-on; with wait, it waits until the BMC reads On. A BMC
// that answers "already in that state" did nothing, which for a power-on
// is fine: the read that follows says where the machine is.
func On(ctx context.Context, ctrl bmc.Controller, wait bool, limit, poll time.Duration, say Say) (Report, error) {
	return on(ctx, clock.RealClock{}, ctrl, wait, limit, poll, say)
}

func on(ctx context.Context, clk clock.Clock, ctrl bmc.Controller, wait bool, limit, poll time.Duration, say Say) (Report, error) {
	r := Report{Action: "on"}
	start := clk.Now()
	res, err := ctrl.PowerOn(ctx)
	noteSent(&r, res, err, "power-on")
	switch {
	case err == nil:
		r.Answer = answerAccepted
		say("%s accepted", r.Sent)
	case errors.Is(err, bmc.ErrAlreadyInState):
		r.Answer = answerAlready
		say("%s: the BMC did nothing (%v)", r.Sent, shortReason(err))
	default:
		r.Elapsed = clk.Since(start).Round(time.Millisecond).String()
		return r, err
	}
	for {
		st, err := ctrl.PowerStatus(ctx)
		r.Elapsed = clk.Since(start).Round(time.Millisecond).String()
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
		if clk.Since(start) >= limit {
			return r, fmt.Errorf("%w: it did not read On within %s (reads %s)", ErrNotOn, limit, r.PowerState)
		}
		if err := sleep(ctx, clk, poll); err != nil {
			return r, err
		}
	}
}

// sleep waits d on clk or until ctx ends.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
