package fence

import (
	"fmt"
	"time"
)

// t0 is an arbitrary, fixed origin for test timelines.
var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func sec(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }

// ---- node view builders ----

type nodeOpt func(*NodeView)

func view(opts ...nodeOpt) NodeView {
	n := NodeView{Ready: ReadyTrue, HeartbeatAt: t0, RenewedAt: t0, HasBMC: true}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func heartbeat(d time.Duration) nodeOpt {
	return func(n *NodeView) { n.HeartbeatAt, n.RenewedAt = at(d), at(d) }
}

// firstSeen: an agent that started at d has seen the node but no renewal.
func firstSeen(d time.Duration) nodeOpt {
	return func(n *NodeView) { n.HeartbeatAt, n.RenewedAt = at(d), time.Time{} }
}
func notReady(since time.Duration) nodeOpt {
	return func(n *NodeView) { n.Ready, n.NotReadySince = ReadyUnknown, at(since) }
}
func readyFalse(since time.Duration) nodeOpt {
	return func(n *NodeView) { n.Ready, n.NotReadySince = ReadyFalse, at(since) }
}
func withTaint(ts TaintState) nodeOpt { return func(n *NodeView) { n.Taint = ts } }
func maintenance() nodeOpt            { return func(n *NodeView) { n.Maintenance = true } }
func excluded() nodeOpt               { return func(n *NodeView) { n.Excluded = true } }
func noBMC() nodeOpt                  { return func(n *NodeView) { n.HasBMC = false } }
func pods(p, va int) nodeOpt          { return func(n *NodeView) { n.Pods, n.VolumeAttachments = p, va } }
func terminating(k int) nodeOpt       { return func(n *NodeView) { n.Terminating = k } }
func blockers(b ...string) nodeOpt    { return func(n *NodeView) { n.Blockers = b } }

// freshFleet is a calm three-node cluster whose API view is fresh at now.
func freshFleet(now time.Time) FleetView {
	return FleetView{Nodes: 3, Unhealthy: 1, APIFreshAt: now}
}

func tick(n NodeView, now time.Time) Input {
	return Input{Kind: InputTick, Node: n, Fleet: freshFleet(now)}
}

func reading(n NodeView, now time.Time, p Power) Input {
	return Input{Kind: InputReading, Node: n, Fleet: freshFleet(now), Reading: Reading{At: now, Power: p}}
}

func failedReading(n NodeView, now time.Time, why string) Input {
	return Input{Kind: InputReading, Node: n, Fleet: freshFleet(now), Reading: Reading{At: now, Failure: why}}
}

func result(n NodeView, now time.Time, k ActionKind, err string) Input {
	return Input{Kind: InputResult, Node: n, Fleet: freshFleet(now), Result: Result{Action: k, Err: err}}
}

// alreadyOff is the BMC's "already in that state" answer to a ForceOff
// (iDRAC's 409, iLO's 400, IPMI 0xD5): it did nothing.
func alreadyOff(n NodeView, now time.Time) Input {
	return Input{Kind: InputResult, Node: n, Fleet: freshFleet(now), Result: Result{Action: ActPowerOff, Err: "HTTP 409: already off", AlreadyInState: true}}
}

func readingFrom(n NodeView, now time.Time, p Power, target string) Input {
	in := reading(n, now, p)
	in.Reading.Target = target
	return in
}

// command is a human's request seen just now (SeenAt set, unless the
// caller set it).
func command(n NodeView, now time.Time, c Command) Input {
	if c.SeenAt.IsZero() {
		c.SeenAt = now
	}
	return Input{Kind: InputCommand, Node: n, Fleet: freshFleet(now), Command: c}
}

// kinds lists the action kinds of an output, for compact assertions.
func kinds(o Output) []ActionKind {
	var ks []ActionKind
	for _, a := range o.Actions {
		ks = append(ks, a.Kind)
	}
	return ks
}

func has(o Output, k ActionKind) bool {
	for _, a := range o.Actions {
		if a.Kind == k {
			return true
		}
	}
	return false
}

func eventReasons(o Output) []string {
	var rs []string
	for _, a := range o.Actions {
		if a.Kind == ActEvent {
			rs = append(rs, a.Event.Reason)
		}
	}
	return rs
}

// checkInvariants is the oracle of docs/design.md §2 for one Step. It is shared by
// the table tests, the exhaustive test and the fuzz target. It judges the
// engine by the rules themselves, from the inputs and the state it was given.
func checkInvariants(p Policy, before State, in Input, now time.Time, out Output) error {
	n := in.Node
	s := out.State
	for i, a := range out.Actions {
		switch a.Kind {
		case ActPersist:
			if i != 0 {
				return fmt.Errorf("Persist at position %d, must come first", i)
			}
		case ActApplyTaint:
			if err := taintAllowed(p, in, now, s); err != nil {
				return err
			}
		case ActPowerOff:
			if err := powerOffAllowed(p, before, in, now, s); err != nil {
				return err
			}
		case ActRemoveTaint:
			// Invariant 8. From Untainting: only our taint, only when the
			// node is back. Anywhere else only with the taint gone (the
			// owner mark is cleared).
			if n.Taint == TaintAbsent {
				break
			}
			if !s.TaintOwned || n.Taint != TaintOurs {
				return fmt.Errorf("RemoveTaint of a taint that is not ours (owned %v, node %v)", s.TaintOwned, n.Taint)
			}
			if n.Ready != ReadyTrue || !n.RenewedAt.After(s.TaintedAt) {
				return fmt.Errorf("RemoveTaint while Ready=%v, renewal %v not after taint %v", n.Ready, n.RenewedAt, s.TaintedAt)
			}
		case ActForgetTaint:
			if n.Taint != TaintAbsent {
				return fmt.Errorf("ForgetTaint while the node shows a taint (%v)", n.Taint)
			}
		case ActReadPower, ActPowerOn, ActDeletePods, ActEvent:
		}
	}
	if s.Phase >= numPhases {
		return fmt.Errorf("output phase %d out of range", s.Phase)
	}
	if out.RecheckAfter <= 0 {
		return fmt.Errorf("RecheckAfter %s not positive", out.RecheckAfter)
	}
	if (s.Phase != before.Phase || has(out, ActPowerOff) || has(out, ActApplyTaint) || has(out, ActRemoveTaint) || has(out, ActPowerOn)) && !has(out, ActPersist) {
		return fmt.Errorf("state change %v→%v with side effects %v but no Persist", before.Phase, s.Phase, kinds(out))
	}
	return nil
}

// taintAllowed: invariants 1, 2, 6 and 9 for an ApplyTaint.
func taintAllowed(p Policy, in Input, now time.Time, s State) error {
	n := in.Node
	switch {
	case n.Taint != TaintAbsent:
		return fmt.Errorf("ApplyTaint on a node that already carries the taint (%v)", n.Taint)
	case n.Maintenance || n.Excluded:
		return fmt.Errorf("ApplyTaint on a node in maintenance or excluded")
	case s.Phase != Tainting:
		return fmt.Errorf("ApplyTaint from phase %v", s.Phase)
	case StillSafe(p, in.Fleet, now).Reason == RefuseAPIStale:
		return fmt.Errorf("ApplyTaint on a stale view of the API server")
	}
	if s.Attested {
		if now.Sub(s.AttestedAt) >= p.AttestationTTL {
			return fmt.Errorf("ApplyTaint on an attestation %s old (TTL %s)", now.Sub(s.AttestedAt), p.AttestationTTL)
		}
		if !s.Forced && (n.RenewedAt.After(s.AttestedAt) || SilentFor(n, now) < p.SuspectAfter) {
			return fmt.Errorf("ApplyTaint on an attestation contradicted by the Lease (renewed %v, attested %v)", n.RenewedAt, s.AttestedAt)
		}
		return nil
	}
	// A storm does not hold back the taint of an Off that settled after
	// our own accepted ForceOff (the machine is physically off); every
	// other taint needs the guard's absolute part.
	ourOff := s.PowerOffAccepted && !s.PowerOffAt.IsZero() && !s.PowerOffAt.Before(s.FailureStart)
	if r := StillSafe(p, in.Fleet, now); !r.Admitted() && !ourOff {
		return fmt.Errorf("ApplyTaint refused by the storm guard (%v) but emitted", r)
	}
	if !n.HasBMC {
		return fmt.Errorf("ApplyTaint without a BMC and without a human's attestation")
	}
	if s.PowerOffAt.IsZero() || s.PowerOffAt.Before(s.FailureStart) {
		return fmt.Errorf("ApplyTaint without a ForceOff of ours in this fence (power-off %v, failure %v)", s.PowerOffAt, s.FailureStart)
	}
	window := p.SettleWindow
	if !s.PowerOffAccepted {
		window = p.UnassistedSettleWindow
	}
	run := s.OffRun
	if !run.SettledOver(window, p.SettleReads) {
		return fmt.Errorf("ApplyTaint with run %+v, not settled over %s (accepted %v)", run, window, s.PowerOffAccepted)
	}
	if !run.First.After(s.FailureStart) || !run.First.After(s.PowerOffAt) {
		return fmt.Errorf("ApplyTaint with a run starting %v, not after failure start %v and power-off %v", run.First, s.FailureStart, s.PowerOffAt)
	}
	if in.Kind != InputReading || in.Reading.Power != PowerOff || in.Reading.Failure != "" || in.Reading.OSRunning || !in.Reading.At.Equal(run.Last) {
		return fmt.Errorf("ApplyTaint not on a fresh exact-Off reading (input %v, reading %+v, run last %v)", in.Kind, in.Reading, run.Last)
	}
	if in.Reading.Target != "" && s.Target != "" && in.Reading.Target != s.Target {
		return fmt.Errorf("ApplyTaint on a reading from target %q, not the fence's %q", in.Reading.Target, s.Target)
	}
	// Invariant 2: the Lease is silent, with no renewal after the failure
	// began (or after our ForceOff, for the NotReady opt-in).
	if !s.NotReadyFence && (SilentFor(n, now) < p.SuspectAfter || n.RenewedAt.After(s.FailureStart)) {
		return fmt.Errorf("ApplyTaint while the Lease renews (renewed %v, silent %s, failure %v)", n.RenewedAt, SilentFor(n, now), s.FailureStart)
	}
	if n.RenewedAt.After(s.PowerOffAt) {
		return fmt.Errorf("ApplyTaint after a renewal (%v) later than our ForceOff (%v)", n.RenewedAt, s.PowerOffAt)
	}
	return nil
}

// powerOffAllowed: invariants 2, 6 and 7 for a PowerOff.
func powerOffAllowed(p Policy, before State, in Input, now time.Time, s State) error {
	n := in.Node
	switch {
	case n.Maintenance || n.Excluded || !n.HasBMC:
		return fmt.Errorf("PowerOff on a node in maintenance, excluded or without BMC")
	case s.Phase == Detaching:
		// Keep-off (invariant 7): the machine read On while detaching.
		if in.Kind != InputReading || !(in.Reading.Power == PowerOn || in.Reading.Power == PowerPoweringOn || in.Reading.OSRunning) {
			return fmt.Errorf("keep-off PowerOff without an On reading (%v %+v)", in.Kind, in.Reading)
		}
		return nil
	case s.Attested:
		return fmt.Errorf("PowerOff on a human's attestation")
	case s.Phase != PoweringOff:
		return fmt.Errorf("PowerOff from phase %v", s.Phase)
	}
	if r := Fresh(p, in.Fleet, now); !r.Admitted() {
		return fmt.Errorf("PowerOff on a stale view (%v) but emitted", r)
	}
	// Invariant 6: a ForceOff to a machine that may run (any reading but
	// exactly Off) passes the whole guard; one to a machine that reads Off
	// (a power loss) the power-loss bound.
	readsOff := in.Kind == InputReading && in.Reading.Power == PowerOff && in.Reading.Failure == "" && !in.Reading.OSRunning
	first := before.AdmittedAt.IsZero() || !before.Phase.InFlight()
	switch {
	case before.Manual || !readsOff:
		if r := StillSafe(p, in.Fleet, now); !r.Admitted() {
			return fmt.Errorf("PowerOff refused by the storm guard's absolute part (%v) but emitted", r)
		}
		if !before.Manual && (first || before.PowerLoss) && !Admit(p, in.Fleet, now).Admitted() {
			return fmt.Errorf("first PowerOff of a fence (or of one back from Suspect) refused by the storm guard (%v) but emitted", Admit(p, in.Fleet, now))
		}
	case first && !AdmitPowerLoss(p, in.Fleet, now).Admitted():
		return fmt.Errorf("first PowerOff of a power-loss fence refused by the guard (%v) but emitted", AdmitPowerLoss(p, in.Fleet, now))
	}
	if !s.NotReadyFence && SilentFor(n, now) < p.SuspectAfter {
		return fmt.Errorf("PowerOff of a node whose Lease renewed %s ago", SilentFor(n, now))
	}
	if !s.NotReadyFence && n.RenewedAt.After(s.FailureStart) {
		return fmt.Errorf("PowerOff of a node that renewed (%v) since the failure began (%v)", n.RenewedAt, s.FailureStart)
	}
	on := in.Kind == InputReading && (in.Reading.Power == PowerOn || in.Reading.Power == PowerPoweringOn)
	if on && before.PowerOffs == 0 && !s.Manual && !s.NotReadyFence && SilentFor(n, now) < p.FenceAfter {
		return fmt.Errorf("PowerOff of a machine reading On after only %s of silence (fenceAfter %s)", SilentFor(n, now), p.FenceAfter)
	}
	return nil
}
