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
	"strconv"
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
	Address string `json:"address"`
	System  string `json:"system,omitempty"`
	// Action is a stable token: "off" or "on".
	Action string `json:"action"`
	// DryRun: nothing was sent; Plan says what would have been.
	DryRun bool   `json:"dryRun,omitempty"`
	Plan   string `json:"plan,omitempty"`
	// UUID is the system's UUID as the BMC reports it (dry runs).
	UUID       string         `json:"uuid,omitempty"`
	PowerState bmc.PowerState `json:"powerState"`
	// Trusted is the resource whose power the last reading trusted, and
	// why (the Redfish system's PowerState, its chassis's, both).
	Trusted   *bmc.PowerSource `json:"trusted,omitempty"`
	Confirmed bool             `json:"confirmed"`
	// Sent is the last command put on the wire, in the protocol's words
	// ("redfish ComputerSystem.Reset ForceOff", "ipmi chassis power off");
	// empty when nothing was sent. Commands counts the commands sent.
	Sent     string `json:"sent,omitempty"`
	Commands int    `json:"commands"`
	// Answer is the BMC's answer to the last command: "accepted",
	// "already in that state", or empty when none was sent.
	Answer string `json:"answer,omitempty"`
	// Reply is the BMC's own words when it did not simply accept: an IPMI
	// completion code, a Redfish status and MessageId.
	Reply string `json:"reply,omitempty"`
	// CipherSuite is the IPMI cipher suite the session used.
	CipherSuite int    `json:"cipherSuite,omitempty"`
	OffReads    int    `json:"offReads,omitempty"`
	OffSpan     string `json:"offSpan,omitempty"`
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

// Names are how the reader spells the settings a report or an error
// points at: the agent's configuration keys, or the CLI's flags.
type Names struct {
	SettleWindow, SettleReads, UnassistedSettleWindow, OwnOffWithin, PowerTimeout string
}

// AgentNames are the agent's policy keys.
var AgentNames = Names{
	SettleWindow: "policy.settleWindow", SettleReads: "policy.settleReads", UnassistedSettleWindow: "policy.unassistedSettleWindow",
	OwnOffWithin: "policy.ownOffWithin", PowerTimeout: "policy.powerTimeout",
}

// OffOptions configure OffConfirmedWith.
type OffOptions struct {
	Policy fence.Policy
	// Limit, when positive, bounds the whole operation's wall time, every
	// BMC request included: past it, nothing more is sent or read. Zero:
	// the policy's PowerTimeout from the last accepted command (from the
	// first command plus UnassistedSettleWindow when none was accepted).
	Limit time.Duration
	// Names spell the settings in the reader's words; zero: AgentNames.
	Names Names
	Say   Say
}

// OffConfirmed is OffConfirmedWith the agent's policy, words and limits.
func OffConfirmed(ctx context.Context, ctrl bmc.Controller, p fence.Policy, say Say) (Report, error) {
	return OffConfirmedWith(ctx, ctrl, OffOptions{Policy: p, Say: say})
}

// OffConfirmedWith sends ForceOff and proves the machine is off by its own
// doing, the rule the agent applies before it taints a node:
//
//   - if the BMC accepts the command, only exact-Off reads sent after it
//     count, and they must settle: settleReads consecutive reads spanning
//     the settle window;
//   - if the BMC answers "already in that state" (bmc.ErrAlreadyInState:
//     iDRAC's 409, iLO's 400, IPMI 0xD5), it did nothing, and a restart's
//     off-dwell answers the same: reads go on, any On, PoweringOn or
//     PoweringOff reading sends ForceOff again (at most PowerOffAttempts
//     commands: a BMC that refuses while the machine has power will not
//     power it off), and an Off counts only when its run spans the
//     unassisted settle window, longer than any restart's off-dwell; the
//     report says so;
//   - any other failure of the command ends it at once, with that error:
//     nothing is polled when nothing was accepted.
//
// It gives up with ErrNotOff at Limit, or, without one, after the
// policy's PowerTimeout from the last accepted command (from the first
// command plus the unassisted settle window when none was accepted).
func OffConfirmedWith(ctx context.Context, ctrl bmc.Controller, o OffOptions) (Report, error) {
	return offConfirmed(ctx, clock.RealClock{}, ctrl, o)
}

func (o OffOptions) names() Names {
	if o.Names == (Names{}) {
		return AgentNames
	}
	return o.Names
}

func offConfirmed(ctx context.Context, clk clock.Clock, ctrl bmc.Controller, o OffOptions) (Report, error) {
	p, say, n := o.Policy, o.Say, o.names()
	if say == nil {
		say = func(string, ...any) {}
	}
	r := Report{Action: "off"}
	start := clk.Now()
	var wall time.Time
	if o.Limit > 0 {
		// Several reads fit in a short limit: one poll never spans it.
		p.PowerPollInterval = max(min(p.PowerPollInterval, o.Limit/5), 50*time.Millisecond)
		wall = start.Add(o.Limit)
		var cancel context.CancelFunc
		// The BMC requests are bounded by the same limit, on the real
		// clock (clk is a fake one in tests).
		ctx, cancel = context.WithTimeout(ctx, o.Limit)
		defer cancel()
	}
	// pastWall reports whether the operation's own limit ended it (and not
	// the caller: an interrupt stays an interrupt).
	pastWall := func() bool { return !wall.IsZero() && !clk.Now().Before(wall) }
	var (
		accepted  bool      // a ForceOff of ours was accepted
		untrusted bool      // the machine ran after an accepted ForceOff: acceptances prove nothing
		notBefore time.Time // reads count only after the command that mattered
		limit     time.Time
		refusals  int // "already in that state" answers sent while the machine read power
	)
	send := func() error {
		sentAt := clk.Now()
		res, err := ctrl.PowerOff(ctx)
		noteSent(&r, res, err, "ForceOff")
		r.Reply, r.CipherSuite = res.Reply, res.CipherSuite
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
			say("%s: the BMC did nothing; it answered %s. An Off we did not cause counts only after %d Off reads over %s (%s), longer than any restart's off-dwell",
				r.Sent, replyOf(res, err), p.SettleReads, p.UnassistedSettleWindow, n.UnassistedSettleWindow)
			return nil
		}
		if pastWall() {
			return fmt.Errorf("%w: %s of %s ended during the command (%s)", ErrNotOff, n.PowerTimeout, o.Limit, shortReason(err))
		}
		// The error itself is the one line the caller prints.
		return err
	}
	if err := send(); err != nil {
		return r, err
	}
	if !wall.IsZero() {
		limit = wall
	}

	var run fence.OffRun
	var last bmc.PowerStatus
	var lastErr error
	wait := p.PowerPollInterval
	for {
		if !wall.IsZero() {
			wait = min(wait, max(wall.Sub(clk.Now()), 0))
		}
		if err := sleep(ctx, clk, wait); err != nil && !pastWall() {
			return r, err
		}
		readAt := clk.Now()
		if pastWall() {
			r.Elapsed = clk.Since(start).Round(time.Millisecond).String()
			return r, giveUp(&r, p, o, n, accepted, last, lastErr)
		}
		last, lastErr = ctrl.PowerStatus(ctx)
		if pastWall() && lastErr != nil {
			r.Elapsed = clk.Since(start).Round(time.Millisecond).String()
			return r, giveUp(&r, p, o, n, accepted, last, nil)
		}
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
		if lastErr == nil && last.Trusted.Resource != "" {
			tr := last.Trusted
			r.Trusted = &tr
		}
		r.Elapsed = clk.Since(start).Round(time.Millisecond).String()
		window := p.SettleWindow
		late := accepted && run.Count > 0 && (untrusted || run.First.After(notBefore.Add(p.OwnOffWithin)))
		if !accepted || late {
			window = p.UnassistedSettleWindow
		}
		switch {
		case lastErr != nil:
			say("read failed: %v", lastErr)
		case run.Count > 0:
			say("reads Off: %s over %s; needs %d over %s", plural(run.Count, "read"), run.Last.Sub(run.First).Round(time.Second), p.SettleReads, window)
		case last.State == bmc.PowerOff && last.OSRunning():
			say("reads Off, but BootProgress says %s: a BMC contradicting itself proves nothing", last.BootProgress)
		default:
			say("reads %s (%s)", last.State, last.Trusted)
		}

		if !accepted && lastErr == nil {
			switch last.State {
			case bmc.PowerOn, bmc.PoweringOn, bmc.PoweringOff:
				// The machine has power after all (a restart's off-dwell
				// ended): the BMC will take a ForceOff now, unless it
				// refuses whatever the state (then it never will).
				if r.Answer == answerAlready {
					refusals++
				}
				if refusals >= p.PowerOffAttempts {
					return r, fmt.Errorf("%w: the BMC answered %s to %d ForceOffs while the machine reads %s: it refuses to power it off",
						ErrNotOff, r.Reply, r.Commands, last.State)
				}
				run = fence.OffRun{}
				if err := send(); err != nil {
					return r, err
				}
				if !wall.IsZero() {
					limit = wall
				}
			case bmc.PowerOff, bmc.PowerUnknown:
			}
		}

		if late && wall.IsZero() && limit.Before(run.First.Add(p.UnassistedSettleWindow+p.PowerTimeout)) {
			limit = run.First.Add(p.UnassistedSettleWindow + p.PowerTimeout)
		}
		if run.SettledOver(window, p.SettleReads) {
			r.Confirmed = true
			r.OffSpan = run.Last.Sub(run.First).Round(time.Millisecond).String()
			if late {
				r.Note = fmt.Sprintf("the machine ran after an accepted ForceOff, or read Off only %s after it (later than %s, the agent's ownOffWithin): a BMC that accepts and ignores says accepted too, so the machine had to read Off for %s (%s), longer than any restart's off-dwell",
					run.First.Sub(notBefore).Round(time.Millisecond), p.OwnOffWithin, p.UnassistedSettleWindow, n.UnassistedSettleWindow)
				say("confirmed Off over %s; %s", r.OffSpan, r.Note)
			}
			if !accepted {
				r.Note = fmt.Sprintf("the Off was not caused by us: the BMC answered %q to every ForceOff, so the machine had to read Off for %s (%s), longer than any restart's off-dwell",
					answerAlready, p.UnassistedSettleWindow, n.UnassistedSettleWindow)
				say("confirmed Off over %s; %s", r.OffSpan, r.Note)
			}
			return r, nil
		}
		if !clk.Now().Before(limit) {
			return r, giveUp(&r, p, o, n, accepted, last, lastErr)
		}
		wait = p.PowerPollInterval
		if run.Count > 0 {
			wait = p.SettleInterval()
		}
	}
}

// giveUp is the ErrNotOff that ends an operation whose time ran out.
func giveUp(r *Report, p fence.Policy, o OffOptions, n Names, accepted bool, last bmc.PowerStatus, lastErr error) error {
	why := fmt.Sprintf("still reads %s", last.State)
	switch {
	case lastErr != nil:
		why = "cannot be read: " + lastErr.Error()
	case last.State == bmc.PowerOff && last.OSRunning():
		why = fmt.Sprintf("reads Off while BootProgress says %s, which contradicts it", last.BootProgress)
		r.Note = "a BMC that reads Off while claiming the OS runs proves nothing"
	case last.State != bmc.PowerOff && last.Trusted.Resource != "":
		why += " (" + last.Trusted.String() + ")"
	}
	if !accepted {
		err := fmt.Errorf("%w: it %s, and no ForceOff of ours was accepted (the BMC answered %s); an Off we did not cause needs %d Off reads over %s (%s)",
			ErrNotOff, why, orAlready(r.Reply), p.SettleReads, p.UnassistedSettleWindow, n.UnassistedSettleWindow)
		if o.Limit > 0 && o.Limit < p.UnassistedSettleWindow+p.SettleInterval() {
			err = fmt.Errorf("%w; %s %s is shorter: give it at least %s", err, n.PowerTimeout, o.Limit, (p.UnassistedSettleWindow + 2*p.SettleInterval() + p.PowerPollInterval).Round(time.Second))
		}
		return err
	}
	within := p.PowerTimeout
	if o.Limit > 0 {
		within = o.Limit
	}
	return fmt.Errorf("%w: it %s %s after ForceOff was accepted (it may ignore commands)", ErrNotOff, why, within)
}

func orAlready(reply string) string {
	if reply == "" {
		return strconv.Quote(answerAlready)
	}
	return reply
}

// replyOf is the BMC's own answer to a refused command.
func replyOf(res bmc.Result, err error) string {
	if res.Reply != "" {
		return res.Reply
	}
	return strconv.Quote(answerAlready) + " (" + shortReason(err) + ")"
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
		r.Reply = res.Reply
		say("%s: the BMC did nothing; it answered %s", r.Sent, replyOf(res, err))
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

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
