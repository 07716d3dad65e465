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
func podsUnknown() nodeOpt            { return func(n *NodeView) { n.PodsUnknown = true } }

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
		case ActDiagnose:
			if err := diagnoseAllowed(p, before, in, now, s); err != nil {
				return err
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
	// An unsaved suspicion (docs/design.md §1) is the one phase change
	// not written: Healthy → Suspect on silence alone, and back, with
	// nothing but reads, and nothing said.
	unsaved := !has(out, ActPersist) && !has(out, ActEvent) &&
		((before.Phase == Healthy && !before.Unsaved && s.Phase == Suspect && s.Unsaved && !s.Manual && !s.NotReadyFence) ||
			(before.Phase == Suspect && before.Unsaved && (s.Phase == Healthy || s.Phase == Suspect && s.Unsaved)))
	if (s.Phase != before.Phase && !unsaved || has(out, ActPowerOff) || has(out, ActDiagnose) || has(out, ActApplyTaint) || has(out, ActRemoveTaint) || has(out, ActPowerOn)) && !has(out, ActPersist) {
		return fmt.Errorf("state change %v→%v with side effects %v but no Persist", before.Phase, s.Phase, kinds(out))
	}
	if s.HeldEvent.Reason != "" && !s.Unsaved {
		return fmt.Errorf("a held %s Event without an unsaved suspicion", s.HeldEvent.Reason)
	}
	if s.Unsaved && has(out, ActEvent) {
		return fmt.Errorf("an unsaved suspicion says %v", kinds(out))
	}
	if s.Unsaved && (s.Phase != Suspect || has(out, ActPersist)) {
		return fmt.Errorf("an unsaved suspicion in %v, persisted %v", s.Phase, has(out, ActPersist))
	}
	if s.Unsaved && before.Phase == Suspect && before.Unsaved && now.Sub(s.Since) >= p.SuspectAfter {
		return fmt.Errorf("a suspicion %s old (suspectAfter %s) still unsaved", now.Sub(s.Since), p.SuspectAfter)
	}
	return nil
}

// The checker's own definitions, written from docs/safety.md and
// docs/design.md §2. They never call the engine's helpers (SilentFor,
// StillSafe, Admit, OffRun.Settled, ...): a checker that shares the
// engine's definition of a rule cannot find the engine's mistakes in it
// (issue 17, defect 3). Only plain data (Policy, State, Input) is shared.

// docSilence is how long the node's Lease has been silent on our clock:
// since the last sign of life we observed (HeartbeatAt). A node never
// observed is not silent.
func docSilence(n NodeView, now time.Time) time.Duration {
	if n.HeartbeatAt.IsZero() || !now.After(n.HeartbeatAt) {
		return 0
	}
	return now.Sub(n.HeartbeatAt)
}

// docFresh: "a fresh view of the API server": proven fresh within
// maxAPIStaleness.
func docFresh(p Policy, f FleetView, now time.Time) bool {
	return !f.APIFreshAt.IsZero() && now.Sub(f.APIFreshAt) <= p.MaxAPIStaleness
}

// docStorm: "at least maxUnhealthyFraction of nodes, and stormMinUnhealthy
// of them, unhealthy, per zone and overall".
func docStorm(p Policy, f FleetView) bool {
	storm := func(u, n int) bool {
		return n > 0 && u >= p.StormMinUnhealthy && float64(u) >= p.MaxUnhealthyFraction*float64(n)
	}
	if storm(f.Unhealthy, f.Nodes) {
		return true
	}
	for _, z := range f.Zones {
		if storm(z.Unhealthy, z.Nodes) {
			return true
		}
	}
	return false
}

// docWholeGuard: a fresh view, no storm, fewer than maxConcurrentFences
// such fences in flight, and the cooldown since the last admission.
func docWholeGuard(p Policy, f FleetView, now time.Time) bool {
	return docFresh(p, f, now) && !docStorm(p, f) && f.InFlight < p.MaxConcurrentFences &&
		(f.LastFenceAt.IsZero() || now.Sub(f.LastFenceAt) >= p.Cooldown)
}

// docPowerLossGuard: a fresh view and fewer than
// maxConcurrentPowerLossFences such fences in flight.
func docPowerLossGuard(p Policy, f FleetView, now time.Time) bool {
	return docFresh(p, f, now) && f.InFlightPowerLoss < p.MaxConcurrentPowerLossFences
}

// docOptIn: the powerOffNotReadyAfter opt-in holds now, under the policy
// given and on our clock: NotReady observed for that long.
func docOptIn(p Policy, n NodeView, now time.Time) bool {
	return p.PowerOffNotReadyAfter > 0 && n.Ready != ReadyTrue && !n.NotReadySince.IsZero() &&
		now.Sub(n.NotReadySince) >= p.PowerOffNotReadyAfter
}

// docOurForceOff: a ForceOff of ours was sent in this fence, after the
// failure began.
func docOurForceOff(s State) bool {
	return !s.PowerOffAt.IsZero() && !s.PowerOffAt.Before(s.FailureStart)
}

// docOurs: the Off run is ours. docs/safety.md: an accepted ForceOff makes
// Off reads after it settle over settleWindow "if the machine reads Off
// within ownOffWithin of it"; once the machine ran after an acceptance
// ("reads On ownOffWithin later, or comes up again after reading Off"),
// "for the rest of this fence no acceptance of this BMC counts"; "an Off
// that begins later than ownOffWithin after an acceptance counts the same
// way". An answer "already in that state" or a failed ForceOff is no
// acceptance. ownOffWithin counts from the ForceOff's send (the runner's
// PowerOffSentAt, when it is of this ForceOff: not before its decision),
// else from its decision.
func docOurs(p Policy, s State, run OffRun) bool {
	sent := s.PowerOffAt
	if !s.PowerOffSentAt.IsZero() && !s.PowerOffSentAt.Before(s.PowerOffAt) {
		sent = s.PowerOffSentAt
	}
	return docOurForceOff(s) && s.PowerOffAccepted && !s.AcceptanceUntrusted &&
		!run.First.After(sent.Add(p.OwnOffWithin))
}

// docSettled: settleReads consecutive reads spanning the window.
func docSettled(run OffRun, window time.Duration, reads int) bool {
	return run.Count >= reads && run.Last.Sub(run.First) >= window
}

// taintAllowed: invariants 1, 2, 6 and 9 for an ApplyTaint, as
// docs/safety.md states them.
func taintAllowed(p Policy, in Input, now time.Time, s State) error {
	n := in.Node
	switch {
	case n.Taint != TaintAbsent:
		return fmt.Errorf("ApplyTaint on a node that already carries the taint (%v)", n.Taint)
	case n.Maintenance || n.Excluded:
		return fmt.Errorf("ApplyTaint on a node in maintenance or excluded")
	case s.Phase != Tainting:
		return fmt.Errorf("ApplyTaint from phase %v", s.Phase)
	case !docFresh(p, in.Fleet, now):
		// "A taint always needs a fresh view."
		return fmt.Errorf("ApplyTaint on a stale view of the API server (fresh at %v)", in.Fleet.APIFreshAt)
	}
	if s.Attested {
		if now.Sub(s.AttestedAt) >= p.AttestationTTL {
			return fmt.Errorf("ApplyTaint on an attestation %s old (TTL %s)", now.Sub(s.AttestedAt), p.AttestationTTL)
		}
		if !s.Forced && (n.RenewedAt.After(s.AttestedAt) || docSilence(n, now) < p.SuspectAfter) {
			return fmt.Errorf("ApplyTaint on an attestation contradicted by the Lease (renewed %v, attested %v)", n.RenewedAt, s.AttestedAt)
		}
		return nil
	}
	if !n.HasBMC {
		return fmt.Errorf("ApplyTaint without a BMC and without a human's attestation")
	}
	if !docOurForceOff(s) {
		return fmt.Errorf("ApplyTaint without a ForceOff of ours in this fence (power-off %v, failure %v)", s.PowerOffAt, s.FailureStart)
	}
	run := s.OffRun
	ours := docOurs(p, s, run)
	// "A taint ... also needs no storm, unless the Off being confirmed
	// settled after a ForceOff of ours that the BMC accepted" (ours, as
	// defined above: not an untrusted acceptance, not a late Off).
	if docStorm(p, in.Fleet) && !ours {
		return fmt.Errorf("ApplyTaint during a storm on an Off that is not ours (accepted %v, untrusted %v, run from %v, ForceOff %v)",
			s.PowerOffAccepted, s.AcceptanceUntrusted, run.First, s.PowerOffAt)
	}
	window := p.UnassistedSettleWindow
	if ours {
		window = p.SettleWindow
	}
	if !docSettled(run, window, p.SettleReads) {
		return fmt.Errorf("ApplyTaint with run %+v, not settled over %s (ours %v)", run, window, ours)
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
	// Invariant 2: the Lease silent for suspectAfter on our clock, and no
	// renewal after our ForceOff. A fence that rests on the NotReady
	// opt-in (flagged so, and the opt-in holds now) saw its kubelet renew
	// until we acted: its Lease must have been silent for suspectAfter
	// since our ForceOff. Any other fence: no renewal since the failure
	// began.
	if silent := docSilence(n, now); silent < p.SuspectAfter {
		return fmt.Errorf("ApplyTaint while the Lease is silent only %s (suspectAfter %s)", silent, p.SuspectAfter)
	}
	if n.RenewedAt.After(s.PowerOffAt) {
		return fmt.Errorf("ApplyTaint after a renewal (%v) later than our ForceOff (%v)", n.RenewedAt, s.PowerOffAt)
	}
	if s.NotReadyFence && docOptIn(p, n, now) {
		if since := now.Sub(s.PowerOffAt); since < p.SuspectAfter {
			return fmt.Errorf("ApplyTaint of a NotReady-opt-in fence %s after our ForceOff: its kubelet renewed until then, and its next renewal may not have come yet (suspectAfter %s)", since, p.SuspectAfter)
		}
	} else if n.RenewedAt.After(s.FailureStart) {
		return fmt.Errorf("ApplyTaint while the Lease renews (renewed %v, failure %v; NotReady fence %v, opt-in holds %v)", n.RenewedAt, s.FailureStart, s.NotReadyFence, docOptIn(p, n, now))
	}
	return nil
}

// powerOffAllowed: invariants 2, 6 and 7 for a PowerOff, as docs/safety.md
// states them.
func powerOffAllowed(p Policy, before State, in Input, now time.Time, s State) error {
	n := in.Node
	switch {
	case n.Maintenance || n.Excluded || !n.HasBMC:
		return fmt.Errorf("PowerOff on a node in maintenance, excluded or without BMC")
	case n.RunsThisAgent:
		return fmt.Errorf("PowerOff to the node the leader runs on")
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
	case !docFresh(p, in.Fleet, now):
		return fmt.Errorf("PowerOff on a stale view (fresh at %v) but emitted", in.Fleet.APIFreshAt)
	}
	// Invariant 6: a ForceOff to a machine that may run (any reading but
	// exactly Off) passes the whole guard; later ForceOffs of a fence in
	// flight, and a human's, its absolute part (fresh, no storm). One to a
	// machine that reads exactly Off (a power loss) the power-loss bound.
	readsOff := in.Kind == InputReading && in.Reading.Power == PowerOff && in.Reading.Failure == "" && !in.Reading.OSRunning
	// A fencing level's outlets on and drawing about 0 W: a power loss too.
	readsOff = readsOff || (in.Kind == InputReading && in.Reading.Drawless && in.Reading.Power == PowerOn && in.Reading.Failure == "" && !in.Reading.OSRunning)
	first := before.AdmittedAt.IsZero() || !before.Phase.InFlight()
	switch {
	case before.Manual || !readsOff:
		if docStorm(p, in.Fleet) {
			return fmt.Errorf("PowerOff during a storm (%d of %d unhealthy) but emitted", in.Fleet.Unhealthy, in.Fleet.Nodes)
		}
		if !before.Manual && (first || before.PowerLoss) && !docWholeGuard(p, in.Fleet, now) {
			return fmt.Errorf("first PowerOff of a fence (or of one back from Suspect) refused by the storm guard (fleet %+v) but emitted", in.Fleet)
		}
	case first && !docPowerLossGuard(p, in.Fleet, now):
		return fmt.Errorf("first PowerOff of a power-loss fence refused by the guard (fleet %+v) but emitted", in.Fleet)
	}
	// Invariant 2: the Lease silent for suspectAfter on our clock with no
	// renewal since the failure began; only a fence that rests on the
	// NotReady opt-in, and only while the opt-in holds now (our policy,
	// our clock), powers off a node that renews.
	optIn := s.NotReadyFence && docOptIn(p, n, now)
	if !optIn && docSilence(n, now) < p.SuspectAfter && !(readsOff && docEventEarly(p, before, in, now)) {
		return fmt.Errorf("PowerOff of a node whose Lease renewed %s ago (NotReady fence %v, opt-in holds %v)", docSilence(n, now), s.NotReadyFence, docOptIn(p, n, now))
	}
	if !optIn && n.RenewedAt.After(s.FailureStart) {
		return fmt.Errorf("PowerOff of a node that renewed (%v) since the failure began (%v)", n.RenewedAt, s.FailureStart)
	}
	on := in.Kind == InputReading && (in.Reading.Power == PowerOn || in.Reading.Power == PowerPoweringOn) && !in.Reading.Drawless
	if on && before.PowerOffs == 0 && !s.Manual && !optIn && docSilence(n, now) < p.FenceAfter {
		return fmt.Errorf("PowerOff of a machine reading On after only %s of silence (fenceAfter %s)", docSilence(n, now), p.FenceAfter)
	}
	if s.PowerOffs > p.PowerOffAttempts {
		return fmt.Errorf("ForceOff #%d of %d attempts", s.PowerOffs, p.PowerOffAttempts)
	}
	return nil
}

// docEventEarly: docs/safety.md, "Power events": a ForceOff before
// suspectAfter to a machine that reads exactly Off needs a power-off event
// that names the node's own system, is no replay and follows no gap, came
// on a stream connected before the node's last sign of life and after that
// sign, once the Lease has been silent for eventSilence plus the view's
// staleness; never for a NotReady fence.
func docEventEarly(p Policy, before State, in Input, now time.Time) bool {
	n, ev := in.Node, in.Node.OffEvent
	return p.EventSilence > 0 && !before.NotReadyFence && !ev.Received.IsZero() &&
		ev.System != "" && ev.System == n.BMCSystem && !ev.Replay && !ev.AfterGap &&
		!n.HeartbeatAt.IsZero() && ev.Received.After(n.HeartbeatAt) &&
		!ev.ConnectedAt.IsZero() && !ev.ConnectedAt.After(n.HeartbeatAt) &&
		docViewFreshAt(in).After(time.Time{}) && docSilence(n, now) >= p.EventSilence+max(now.Sub(docViewFreshAt(in)), 0)
}

// docViewFreshAt: docs/safety.md, "Power events: a live Lease read": our
// view of this node is fresh as of the later of APIFreshAt and the start
// of a live read of its Lease that found our renewal still the latest.
func docViewFreshAt(in Input) time.Time {
	f := in.Fleet.APIFreshAt
	if in.Node.LeaseReadAt.After(f) {
		f = in.Node.LeaseReadAt
	}
	return f
}

// diagnosePolicy is the defaults with the crash dump before the off.
func diagnosePolicy() Policy {
	p := DefaultPolicy()
	p.DiagnoseBeforeOff = true
	return p
}

// diagnoseAllowed: docs/safety.md, "Crash dump before the off". The
// diagnostic interrupt goes only where the agent's own first ForceOff to a
// machine reading exactly On would: under the policy, from Suspect, to a
// node that may be fenced, with no human's request or attestation and no
// NotReady opt-in behind it, after FenceAfter of silence (or with hung-node
// evidence handed in), no renewal since the failure began, no planned
// reboot open, a fresh view, the whole storm guard, and no other
// control-plane node in a fence.
func diagnoseAllowed(p Policy, before State, in Input, now time.Time, s State) error {
	n := in.Node
	rd := in.Reading
	switch {
	case !p.DiagnoseBeforeOff:
		return fmt.Errorf("Diagnose without policy diagnoseBeforeOff")
	case n.Maintenance || n.Excluded || !n.HasBMC:
		return fmt.Errorf("Diagnose on a node in maintenance, excluded or without BMC")
	case s.Phase != Suspect || !before.Phase.PreTaint():
		return fmt.Errorf("Diagnose from phase %v→%v", before.Phase, s.Phase)
	case in.Kind != InputReading || rd.Failure != "" || rd.Power != PowerOn:
		return fmt.Errorf("Diagnose without a reading of exactly On (%v %+v)", in.Kind, rd)
	case before.Manual || s.Attested || s.NotReadyFence:
		return fmt.Errorf("Diagnose in a human's fence or a NotReady fence")
	case before.PowerOffs > 0 || !before.DiagnoseAt.IsZero():
		return fmt.Errorf("Diagnose after a ForceOff or a diagnose of this fence")
	case !docFresh(p, in.Fleet, now) || docStorm(p, in.Fleet) || !docWholeGuard(p, in.Fleet, now):
		return fmt.Errorf("Diagnose refused by the storm guard (fleet %+v) but emitted", in.Fleet)
	case docSilence(n, now) < p.SuspectAfter || n.RenewedAt.After(s.FailureStart):
		return fmt.Errorf("Diagnose of a node that renews (silent %s, renewed %v since %v)", docSilence(n, now), n.RenewedAt, s.FailureStart)
	case docSilence(n, now) < p.FenceAfter && in.Host.At.IsZero():
		return fmt.Errorf("Diagnose after only %s of silence (fenceAfter %s) and no hung-node evidence", docSilence(n, now), p.FenceAfter)
	case n.PlannedReboot && (n.PlannedRebootAt.IsZero() || now.Sub(n.PlannedRebootAt) < p.RebootWindow):
		return fmt.Errorf("Diagnose during a planned reboot (%s)", n.PlannedRebootBy)
	case n.ControlPlane && in.Fleet.ControlPlaneInFlight > 0:
		return fmt.Errorf("Diagnose of a control-plane node while another is in a fence")
	}
	return nil
}
