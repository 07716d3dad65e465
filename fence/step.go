package fence

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	unitmutant "github.com/bmcfence/bmcfence/internal/mutant"
)

// resync bounds how long a node goes without being re-evaluated when no
// timer of its own is pending.
const resync = 30 * time.Second

// minRecheck keeps RecheckAfter positive when a timer is already due.
const minRecheck = 10 * time.Millisecond

// Step advances one node's state by one input. It is pure and deterministic:
// the same (policy, state, input, now) always gives the same Output.
func Step(p Policy, s State, in Input, now time.Time) Output {
	st := stepper{p: p, s: s, in: in, now: now, prev: s.Phase, unsaved: s.Unsaved, held: s.HeldEvent, suspectedAt: s.Since, sideEffct: in.Write}
	st.run()
	return st.output()
}

type stepper struct {
	p    Policy
	s    State
	in   Input
	now  time.Time
	prev Phase
	// unsaved: the state stepped from was an unsaved suspicion, entered
	// at suspectedAt.
	unsaved bool
	// held: the Event the unsaved suspicion stepped from held
	// (State.HeldEvent), kept here since a step may start the State anew.
	held        Event
	suspectedAt time.Time

	acts      []Action
	sideEffct bool
	wakeAt    time.Duration
	// eventWait: how long until a power event's silence is reached, when
	// that alone refused an early ForceOff (events.go); 0 otherwise.
	eventWait time.Duration
}

func (st *stepper) run() {
	st.s.NotReadyFence = keepNotReadyFence(st.p, st.s, st.in.Node, st.now)
	switch st.in.Kind {
	case InputReading:
		rd := st.in.Reading
		rd.Failure = Clip(rd.Failure, MaxNoteLen)
		st.in.Reading = rd
		rd.Source = "" // for Events only; never persisted
		rd.Drawless = false
		rd.Begun = time.Time{}
		st.s.Last = rd
		st.s.Evidence.add(Record{At: rd.At, Until: rd.At, Kind: RecReading, Phase: st.s.Phase, Power: rd.Power, Note: readingNote(rd)})
		if st.targetChanged(rd.Target) {
			return
		}
	case InputResult:
		r := st.in.Result
		note := "ok"
		switch {
		case r.AlreadyInState:
			note = "already in that state (the BMC did nothing): " + r.Err
		case r.Err != "":
			note = r.Err
		}
		st.s.Evidence.add(Record{At: st.now, Kind: RecResult, Phase: st.s.Phase, Action: r.Action, Note: note})
		if r.Action == ActPowerOff && st.targetChanged(r.Target) {
			return
		}
	case InputCommand:
		st.command()
		st.sideEffct = true // a command is always worth persisting
		// The phase handler then runs as on a tick, so entry actions
		// (a read, a taint) happen now.
		st.in.Kind = InputTick
	case InputTick:
	}
	st.handle()
}

func (st *stepper) handle() {
	switch st.s.Phase {
	case Healthy:
		st.healthy()
	case Suspect:
		st.suspect()
	case ConfirmingOff:
		st.confirmingOff()
	case PoweringOff:
		st.poweringOff()
	case Tainting:
		st.tainting()
	case Detaching:
		st.detaching()
	case Fenced:
		st.fenced()
	case PoweringOn:
		st.poweringOn()
	case Recovering:
		st.recovering()
	case Untainting:
		st.untainting()
	case Stuck:
		st.stuck()
	case Maintenance:
		st.maintenance()
	default:
		// Only a corrupt State gets here; Decode refuses those. Hold the
		// node for a human rather than guess.
		st.enterStuck(StuckAborted, "unknown phase")
	}
}

func (st *stepper) output() Output {
	persist := st.s.Phase != st.prev || st.sideEffct
	if st.unsaved || st.s.Unsaved {
		persist = st.settleUnsaved()
	}
	acts := st.acts
	if persist {
		acts = append(acts, Action{})
		copy(acts[1:], acts)
		acts[0] = Action{Kind: ActPersist}
	}
	wake := st.wakeAt
	if wake == 0 || wake > resync {
		wake = resync
	}
	if wake < minRecheck {
		wake = minRecheck
	}
	return Output{State: st.s, Actions: acts, RecheckAfter: wake}
}

// ---- small helpers ---------------------------------------------------------

func (st *stepper) emit(k ActionKind) {
	st.acts = append(st.acts, Action{Kind: k})
	switch k {
	case ActPowerOff, ActPowerOn, ActApplyTaint, ActRemoveTaint, ActForgetTaint, ActDiagnose:
		st.sideEffct = true
		st.s.Evidence.add(Record{At: st.now, Kind: RecAction, Phase: st.s.Phase, Action: k})
	case ActPersist, ActReadPower, ActDeletePods, ActEvent:
	}
}

func (st *stepper) event(warning bool, reason, format string, args ...any) {
	st.acts = append(st.acts, Action{Kind: ActEvent, Event: Event{Warning: warning, Reason: reason, Message: fmt.Sprintf(format, args...)}})
}

// wake asks for a Step no later than d from now.
func (st *stepper) wake(d time.Duration) {
	if d <= 0 {
		d = minRecheck
	}
	if st.wakeAt == 0 || d < st.wakeAt {
		st.wakeAt = d
	}
}

func (st *stepper) wakeAtTime(t time.Time) { st.wake(t.Sub(st.now)) }

func (st *stepper) enter(ph Phase, note string) {
	st.s.Evidence.add(Record{At: st.now, Kind: RecTransition, Phase: ph, From: st.s.Phase, Note: note})
	st.s.Phase = ph
	st.s.Since = st.now
	st.s.Warned = false
}

// reset returns the node to Healthy, forgetting the fence but keeping its
// evidence.
func (st *stepper) reset(note string) { st.resetTo(Healthy, note) }

// resetTo forgets the fence and enters ph.
func (st *stepper) resetTo(ph Phase, note string) {
	ev, writer := st.s.Evidence, st.s.Writer
	st.s = State{Writer: writer, Phase: st.s.Phase, Evidence: ev}
	st.enter(ph, note)
}

func readingNote(rd Reading) string {
	switch {
	case rd.Failure != "":
		return rd.Failure
	case rd.Drawless:
		return "drawless"
	case rd.OSRunning:
		return "OSRunning"
	default:
		return ""
	}
}

func (st *stepper) node() NodeView { return st.in.Node }

// renewedAfter: we observed the node renew its heartbeat after t. First
// sightings do not count (a restarted agent has seen no renewal yet).
func (st *stepper) renewedAfter(t time.Time) bool {
	return st.node().RenewedAt.After(t)
}

// recoveredAfterTaint: Ready, with a renewal observed after our taint
// (invariant 8's condition for removing it), and written after our last
// keep-off ForceOff (renewalWrittenAfter): a machine we have just powered
// off again is not back, whatever it renewed before.
func (st *stepper) recoveredAfterTaint() bool {
	return st.node().Ready == ReadyTrue && !st.s.TaintedAt.IsZero() && st.renewedAfter(st.s.TaintedAt) &&
		(st.s.KeptOffAt.IsZero() || st.renewalWrittenAfter(st.s.KeptOffAt))
}

// renewalWrittenAfter: the node's last renewal was written after t. One a
// Lease list brought in was written after HeartbeatFrom (the start of the
// list before), and may have been written before t unless that is after t:
// a list taking 6 s brings in, after our ForceOff, a renewal written before
// it. A renewal placed nowhere (the Node watch's Ready heartbeat) counts
// from when we took it in.
//
// The Node watch's heartbeat is placed nowhere and counts from when we took
// it in: a watch that lags behind a renewal it delivers after our ForceOff
// is the one hole left (a list always places its renewal).
func (st *stepper) renewalWrittenAfter(t time.Time) bool {
	n := st.node()
	switch {
	case !n.RenewedAt.After(t):
		return false
	case unitmutant.On(unitmutant.KeepOffRenewal):
		return true
	case !n.RenewedAt.Equal(n.HeartbeatAt) || n.HeartbeatFrom.After(n.HeartbeatAt):
		// The placement found is not this renewal's: wait for the next.
		return false
	case n.HeartbeatFrom.IsZero():
		return true
	}
	return n.HeartbeatFrom.After(t)
}

// notReadyOptIn: the PowerOffNotReadyAfter opt-in holds for the node now:
// the policy has it, and we have watched the node NotReady that long, on
// our clock (NotReadySince is when we saw Ready leave True, or our first
// sighting of a NotReady node).
func notReadyOptIn(p Policy, n NodeView, now time.Time) bool {
	d := p.PowerOffNotReadyAfter
	return d > 0 && n.Ready != ReadyTrue && !n.NotReadySince.IsZero() && now.Sub(n.NotReadySince) >= d
}

// keepNotReadyFence re-derives, at every step and on adoption, whether a
// fence may still rest on NotReady: a state says what held when it was
// written, possibly by another process under another policy; what holds now
// is the current policy's call, on our clock. A fence whose opt-in no longer
// holds is an ordinary fence from now on: the Lease rules decide (a renewal
// since the failure began ends it). A node Ready again keeps the flag, so
// that the fence ends for that reason (leavePreTaint).
func keepNotReadyFence(p Policy, s State, n NodeView, now time.Time) bool {
	if !s.NotReadyFence {
		return false
	}
	return n.Ready == ReadyTrue || notReadyOptIn(p, n, now)
}

// suspectDue reports whether the node is a suspect: its Lease silent for
// SuspectAfter on our clock (invariant 2), or, only with the explicit
// PowerOffNotReadyAfter opt-in, NotReady that long while still renewing.
func (st *stepper) suspectDue() (due, notReadyFence bool) {
	n := st.node()
	if SilentFor(n, st.now) >= st.p.SuspectAfter {
		return true, false
	}
	if !Enabled(CheckLeaseWitness) && UnhealthyFor(n, st.now) >= st.p.SuspectAfter {
		return true, false // the mutant: NotReady alone is suspicion
	}
	if notReadyOptIn(st.p, n, st.now) {
		return true, true
	}
	return false, false
}

// offNotBefore is the time every counting Off reading must follow: the start
// of the failure and our last power-off request (invariant 1).
func (st *stepper) offNotBefore() time.Time {
	if st.s.PowerOffAt.After(st.s.FailureStart) {
		return st.s.PowerOffAt
	}
	return st.s.FailureStart
}

// exactOff: an exact-Off reading, after the failure began and our last
// ForceOff, from the fence's BMC, with no OS claimed running.
func (st *stepper) exactOff(rd Reading) bool {
	return OffRun{}.Observe(rd, st.offNotBefore(), st.p.MaxReadGap).Count == 1
}

// drawless: a fencing level's reading, from the fence's target, that its
// outlets are on and draw about 0 W (Reading.Drawless), after the failure
// began and our last ForceOff, like an exact Off: a power loss.
func (st *stepper) drawless(rd Reading) bool {
	return rd.Drawless && rd.Failure == "" && rd.Power == PowerOn && !rd.OSRunning &&
		(rd.Target == "" || rd.Target == st.s.Target) && rd.At.After(st.offNotBefore())
}

// extend is the current run extended by rd (empty if rd breaks it).
func (st *stepper) extend(rd Reading) OffRun {
	return st.s.OffRun.Observe(rd, st.offNotBefore(), st.p.MaxReadGap)
}

// ours: the Off being watched follows a ForceOff of ours that the BMC
// accepted (invariant 1). Otherwise it settles only over the unassisted
// window, which outlasts any restart's off-dwell.
func (st *stepper) ours() bool { return st.oursFor(st.s.OffRun) }

// oursFor: the Off of run is ours: a ForceOff of ours, sent in this fence,
// that the BMC accepted; no machine ran after an acceptance of this BMC in
// this fence; and the run began within OwnOffWithin of that ForceOff (a
// later Off is a watchdog's power cycle, a restart, anything but us).
func (st *stepper) oursFor(run OffRun) bool {
	if !Enabled(CheckOurOwnOff) {
		return true
	}
	if !st.s.PowerOffAccepted || !st.forceOffSent() {
		return false
	}
	if st.s.AcceptanceUntrusted && Enabled(CheckUntrustedAcceptance) {
		return false
	}
	if run.Count > 0 && run.First.After(st.forceOffFrom().Add(st.p.OwnOffWithin)) && Enabled(CheckOwnOffWithin) {
		return false
	}
	return true
}

// forceOffFrom is when our last ForceOff went out: the runner's send time
// for it (PowerOffSentAt), which the state write, the recheck and the
// identity check put after the decision (PowerOffAt) by up to 13 s on a
// loaded API server; the decision when no send time of this ForceOff is
// known. Never later than the BMC received it, so ownOffWithin still ends
// within that long of the BMC's acceptance.
func (st *stepper) forceOffFrom() time.Time {
	if st.s.PowerOffSentAt.Before(st.s.PowerOffAt) {
		return st.s.PowerOffAt
	}
	return st.s.PowerOffSentAt
}

// forceOffSent: a ForceOff of ours went out in this fence, after the
// failure began.
func (st *stepper) forceOffSent() bool {
	return !st.s.PowerOffAt.IsZero() && !st.s.PowerOffAt.Before(st.s.FailureStart)
}

func (st *stepper) settleWindow() time.Duration { return st.settleWindowFor(st.s.OffRun) }

func (st *stepper) settleWindowFor(run OffRun) time.Duration {
	if st.oursFor(run) {
		return st.p.SettleWindow
	}
	return st.p.UnassistedSettleWindow
}

// settled: the run proves off. Never without a ForceOff of ours sent in this
// fence, accepted or not: every fence sends its own.
func (st *stepper) settled(run OffRun) bool {
	if !st.forceOffSent() && Enabled(CheckOurOwnOff) {
		return false
	}
	return run.SettledOver(st.settleWindowFor(run), st.p.SettleReads)
}

func (st *stepper) readNow() {
	st.emit(ActReadPower)
	// Until the reading arrives, another tick must not read again.
	st.s.NextReadAt = st.now.Add(st.p.ReadInterval)
	st.wake(st.p.ReadInterval)
}

func (st *stepper) readIfDue() {
	if !st.now.Before(st.s.NextReadAt) {
		st.readNow()
		return
	}
	st.wakeAtTime(st.s.NextReadAt)
}

func (st *stepper) scheduleRead(after time.Duration) {
	st.s.NextReadAt = st.now.Add(after)
	st.wake(after)
}

func (st *stepper) backoff(base time.Duration) time.Duration {
	d := base
	for i := 1; i < st.s.ReadFailures && d < st.p.ReadBackoffMax; i++ {
		d *= 2
	}
	if d > st.p.ReadBackoffMax {
		d = st.p.ReadBackoffMax
	}
	return d
}

// readFailed records a failed read: announce the first of a streak, back off.
func (st *stepper) readFailed(rd Reading, base time.Duration) {
	st.s.ReadFailures++
	if st.s.ReadFailures == 1 && !st.s.UnfenceableSaid {
		st.reportUnfenceable(rd)
	}
	st.scheduleRead(st.backoff(base))
}

// reportUnfenceable says, once per episode, that nothing the agent can
// reach (the BMC, or a fencing level below it) proves the machine off; the
// runner appends the command that fences the node by hand.
func (st *stepper) reportUnfenceable(rd Reading) {
	st.s.UnfenceableSaid = true
	st.acts = append(st.acts, Action{Kind: ActEvent, Event: Event{Warning: true, Reason: "FenceCannotVerify", ManualFence: true,
		Message: fmt.Sprintf("cannot read the BMC or any fencing level (%s): nothing proves the machine off, so the node stays untouched until one answers; said once for this failure", rd.Failure)}})
}

// targetChanged handles a reading or result from another BMC target than the
// fence's (the inventory entry changed, invariant 3): before the taint,
// everything learned from the old target is void and the fence starts over
// from Suspect against the new one, this input included. It reports whether
// it handled the input.
func (st *stepper) targetChanged(target string) bool {
	if target == "" || target == st.s.Target {
		return false
	}
	old := st.s.Target
	st.s.Target = target
	if old == "" || !st.s.Phase.PreTaint() || st.s.Phase == Healthy || (st.s.Phase == Tainting && st.s.Attested) {
		return false
	}
	st.event(true, "FenceTargetChanged", "the node's BMC entry changed during the fence (%s → %s): nothing the old BMC said counts; starting over", old, target)
	st.s.OffRun = OffRun{}
	st.s.PowerOffAt, st.s.PowerOffSentAt, st.s.PowerOffAccepted, st.s.AcceptanceUntrusted = time.Time{}, time.Time{}, false, false
	st.s.NextReadAt = time.Time{}
	st.enter(Suspect, "BMC target changed")
	if st.in.Kind == InputReading {
		st.suspect()
	} else {
		st.readNow()
	}
	return true
}

// ---- the storm guard ----------------------------------------------------------

// admitPowerOff consults the storm guard before a ForceOff (invariant 6),
// knowing what the BMC read last (rd). A machine that reads exactly Off is
// a power loss, not what a partition can fake: AdmitPowerLoss. Any other
// reading may be a running machine: the first ForceOff of a fence needs the
// whole guard (Admit); a human's, and every later one of an admitted fence
// still in flight, its absolute part (a fresh view, no storm or
// partition). A fence that left flight (back in Suspect: taken over by
// another leader, or its power-off no longer due) gave up its place among
// MaxConcurrentFences, and others may have taken it: it is admitted again
// like a new one; so is a power-loss fence whose machine now reads other
// than Off.
func (st *stepper) admitPowerOff(rd Reading) bool {
	if !st.silentLongEnough(false) && !st.offEventLicence(rd) {
		return false
	}
	if why := st.controlPlaneRefusal(); why != "" {
		st.refuseControlPlane(why)
		return false
	}
	if st.ownNodeRefused() {
		return false
	}
	inFlight := !st.s.AdmittedAt.IsZero() && st.s.Phase.InFlight()
	if st.s.Manual {
		return st.guard(StillSafe(st.p, st.in.Fleet, st.now))
	}
	if st.exactOff(rd) || st.drawless(rd) || !Enabled(CheckPowerLossOff) {
		if inFlight && st.s.PowerLoss {
			return st.guard(Fresh(st.p, st.in.Fleet, st.now))
		}
		if inFlight {
			// Admitted on an On reading, in flight, now Off: it
			// keeps the place it holds.
			return st.guard(StillSafe(st.p, st.in.Fleet, st.now))
		}
		st.s.PowerLoss = true
		return st.guard(AdmitPowerLoss(st.p, st.in.Fleet, st.now))
	}
	if inFlight && !st.s.PowerLoss {
		return st.guard(StillSafe(st.p, st.in.Fleet, st.now))
	}
	if st.s.PowerLoss && st.s.Phase.InFlight() {
		// Admitted as a power loss, now reading On (or nothing): a
		// ForceOff that may stop a running machine, admitted anew.
		st.s.AdmittedAt = time.Time{}
	}
	st.s.PowerLoss = false
	return st.guard(Admit(st.p, st.in.Fleet, st.now))
}

// admitTaint: a taint of the Off run run re-checks the fresh view every
// time, a retry or a resumed fence included. The storm check applies too,
// unless the Off is ours (oursFor: accepted, trusted, begun within
// OwnOffWithin): that machine is physically off by our hand, and tainting
// it is not what a partition can fake (a rack's power loss trips the storm
// fraction at once, and must still fail over). An Off merely accepted is
// not ours when the engine itself says so. A human's attestation does not
// stand in for the cluster's view: a stale view may hide the node's
// renewals.
func (st *stepper) admitTaint(run OffRun) bool {
	if !st.forced() && !st.silentLongEnough(true) {
		return false
	}
	r := StillSafe(st.p, st.in.Fleet, st.now)
	exempt := st.oursFor(run)
	if !Enabled(CheckStormExemptionOurs) {
		exempt = st.s.PowerOffAccepted && st.forceOffSent() // the mutant: accepted is enough
	}
	if r.Reason != RefuseAPIStale && (st.s.Attested || exempt) {
		r = Refusal{}
	}
	return st.guard(r)
}

// silentLongEnough: the Lease witness holds on our clock right now (invariant
// 2). A fence this process adopted from another (Adopt) saw the node first
// when it started: it waits until that first sighting is SuspectAfter old.
// A fence under the NotReady opt-in powers off a node that renews (that is
// the opt-in), but its taint waits until the Lease has been silent for
// SuspectAfter since our ForceOff as well: the kubelet renewed until we
// acted, so a BMC that says Off while the machine runs meets the next
// renewal (a contradiction) before the taint, whatever its phase.
func (st *stepper) silentLongEnough(forTaint bool) bool {
	if !Enabled(CheckLeaseWitness) {
		return true
	}
	silent := SilentFor(st.node(), st.now)
	if st.s.NotReadyFence && !st.s.Attested {
		if !forTaint || !Enabled(CheckNotReadyLease) {
			return true
		}
		if !st.forceOffSent() {
			return false
		}
		silent = min(silent, st.now.Sub(st.s.PowerOffAt))
	}
	if silent >= st.p.SuspectAfter {
		return true
	}
	st.wake(st.p.SuspectAfter - silent)
	return false
}

func (st *stepper) guard(r Refusal) bool {
	if r.Admitted() {
		st.s.Refusal = Admitted
		if st.s.AdmittedAt.IsZero() || !st.s.Phase.InFlight() {
			// A new admission (or a readmission): the fleet's
			// cooldown counts from now.
			st.s.AdmittedAt = st.now
		}
		return true
	}
	if !r.Reason.sameSay(st.s.Refusal) {
		st.event(true, "FenceRefused", "not fencing: %s", r)
		st.s.Evidence.add(Record{At: st.now, Kind: RecRefusal, Phase: st.s.Phase, Note: r.Reason.String()})
	}
	st.s.Refusal = r.Reason
	return false
}

// ---- pre-taint phases --------------------------------------------------------

// leavePreTaint handles what ends or stops a fence before the taint:
// maintenance, a node we may not fence, a sign of life, an expired
// attestation. It reports whether it moved the node.
func (st *stepper) leavePreTaint() bool {
	n := st.node()
	if st.s.Phase != Tainting {
		// An attestation belongs to the taint it was given for; outside
		// Tainting it means nothing.
		st.s.Attested, st.s.AttestedAt, st.s.Forced = false, time.Time{}, false
	}
	switch {
	case n.Taint == TaintOurs:
		// Our taint is on the node: the result of our patch, or an agent
		// that died between the patch and the persist. Either way it is on.
		note := "our taint was already on the node"
		if st.in.Kind == InputResult && st.in.Result.Action == ActApplyTaint && st.in.Result.Err == "" {
			note = st.evidenceSummary()
		}
		st.taintApplied(note)
		return true
	case n.Maintenance:
		st.resetTo(Maintenance, "maintenance")
		st.event(false, "FenceMaintenance", "node is under maintenance; fence abandoned before any taint")
		return true
	case n.Excluded || (!n.HasBMC && !st.s.Attested):
		// An attestation stands in for a BMC's proof; it does not
		// override an exclusion.
		st.reset("not fenceable")
		st.event(true, "FenceNotFenceable", "node is %s; fence abandoned before any taint", unfenceableWhy(n))
		return true
	case !st.p.Detection.startsOnSilence() && !n.Remediation && !st.s.Manual && !st.s.PowerOffAccepted && !st.s.Attested:
		// Detection external: the remediation CR that started this fence
		// is gone (its creator saw the node healthy) or timed out. Before
		// the BMC accepted a ForceOff nothing was done that needs
		// finishing; after it, the node is off and the fence completes.
		st.reset("remediation withdrawn")
		st.event(false, "FenceWithdrawn", "the remediation request for this node is gone or timed out; fence abandoned before any power-off was accepted")
		return true
	case st.contradicted():
		what := "after the BMC accepted our ForceOff at " + stamp(st.s.PowerOffAt) + ": the BMC is not this node's machine (a wrong inventory entry?) or it reports a cached power state"
		if st.s.Attested {
			what = "after " + st.s.By + " attested it off at " + stamp(st.s.AttestedAt)
		}
		st.enterStuck(StuckContradiction, "renewal after our power-off")
		st.event(true, "FenceContradiction", "the node renewed its Lease at %s, %s. The node is alive: not tainting. Check the inventory, then `kubectl fence abort`, or `confirm --force` with a reason",
			stamp(st.node().RenewedAt), what)
		return true
	case st.renewedAfter(st.s.FailureStart) && !st.s.NotReadyFence && !st.forced():
		// A renewal since the failure began, before any accepted
		// ForceOff: the kubelet runs. Whatever the BMC read (a restart's
		// off-dwell, a cached state) is not a fence.
		what := "nothing was done"
		if st.s.PowerOffs > 0 {
			what = "our ForceOff was not accepted (the BMC said it was already off), so it did nothing"
		}
		st.reset("alive")
		st.event(false, "FenceRecovered", "node renewed its Lease again; %s", what)
		return true
	case st.s.NotReadyFence && st.node().Ready == ReadyTrue:
		// The premise of a NotReady fence is gone. Not "Ready with a
		// renewal after the failure began": a fence adopted from another
		// process starts its failure at our latest sighting, which may be
		// the very renewal that said Ready.
		st.reset("Ready again")
		st.event(false, "FenceRecovered", "node is Ready again; nothing was done")
		return true
	case st.s.Attested && st.now.Sub(st.s.AttestedAt) >= st.p.AttestationTTL:
		by := st.s.By
		st.s.Attested, st.s.AttestedAt, st.s.Forced = false, time.Time{}, false
		st.event(true, "FenceAttestationExpired", "the attestation by %s expired after %s without a taint; confirm again if the node is still off", by, st.p.AttestationTTL)
		st.backToSuspect("attestation expired")
		return true
	}
	return false
}

// forced: a human's attestation given with --force stands against the live
// witnesses; outside an attestation Forced means nothing.
func (st *stepper) forced() bool { return st.s.Attested && st.s.Forced }

// contradicted: a renewal observed after a ForceOff of ours that the BMC
// accepted, or after a human's attestation (invariant 2). Either witness
// says off while the node says alive: never taint.
func (st *stepper) contradicted() bool {
	if !Enabled(CheckLeaseWitness) || st.forced() {
		return false
	}
	switch {
	case st.s.PowerOffAccepted && !st.s.PowerOffAt.IsZero() && st.renewedAfter(st.s.PowerOffAt):
		return true
	case st.s.Attested && st.renewedAfter(st.s.AttestedAt):
		return true
	case st.s.NotReadyFence && st.forceOffSent() && st.s.OffRun.Count > 0 &&
		st.renewedAfter(laterOf(st.s.PowerOffAt, st.s.OffRun.First)):
		// A NotReady fence's node renewed until our ForceOff. The BMC
		// reads Off, accepted or not, and the node still renews: the
		// entry is another machine, or the BMC caches its state.
		return true
	}
	return false
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func unfenceableWhy(n NodeView) string {
	switch {
	case n.Excluded:
		return "excluded from fencing by label"
	case !n.HasBMC:
		return "without a usable BMC entry in the inventory (missing, or its identity cannot be checked)"
	default:
		return "not fenceable"
	}
}

func (st *stepper) healthy() {
	n := st.node()
	if n.Maintenance {
		st.enter(Maintenance, "maintenance")
		st.event(false, "FenceMaintenance", "node is under maintenance; it will not be fenced")
		return
	}
	if n.Taint == TaintOurs {
		// Our taint on a node we hold no fence for (state lost, or a crash
		// between patch and persist). It stays until the node is Ready with
		// a heartbeat newer than now.
		st.s.TaintOwned = true
		st.s.TaintedAt = st.now
		st.enter(Recovering, "our taint found")
		st.recovering()
		return
	}
	due, notReady := st.suspectDue()
	if !due {
		st.s.Warned = false
		st.wake(st.p.SuspectAfter - SilentFor(n, st.now))
		st.offEventEntry()
		return
	}
	if n.Excluded || !n.HasBMC {
		if !st.s.Warned {
			st.s.Warned = true
			st.event(true, "FenceNotFenceable", "node silent for %s but %s; it will not be fenced", SilentFor(n, st.now).Round(time.Second), unfenceableWhy(n))
		}
		return
	}
	if !st.p.Detection.startsOnSilence() && !n.Remediation {
		// Detection external: silence is not enough; a health checker
		// (NodeHealthCheck, MachineHealthCheck) must ask. The runner
		// steps the node again when its remediation CR appears.
		if !st.s.Warned {
			st.s.Warned = true
			st.event(false, "FenceNotRequested", "node silent for %s; detection is external and no remediation CR asks for it, so it will not be fenced", SilentFor(n, st.now).Round(time.Second))
		}
		return
	}
	if notReady {
		st.enterSuspect(fmt.Sprintf("NotReady for %s while renewing (policy powerOffNotReadyAfter)", st.now.Sub(n.NotReadySince).Round(time.Second)))
		st.s.NotReadyFence = true
		return
	}
	st.enterSuspect(fmt.Sprintf("Lease silent for %s", SilentFor(n, st.now).Round(time.Second)))
	// Unsaved only from a written Healthy: the annotation must say what
	// a blip returns to. A human's fence, or one a health checker asked
	// for, is written at once.
	st.s.Unsaved = st.prev == Healthy && !st.unsaved && !st.s.Manual && !n.Remediation
	st.suspectedAt = st.now
}

// Unsaved suspicions. A live node whose renewals reach a slow API server
// late is silent for SuspectAfter and renews again seconds later: at 1000
// nodes, while 100 power losses were fenced, such flips wrote the state
// twice and sent an Event each, up to 714 writes a minute, to the API
// server whose slowness caused them (docs/scale/n1000/storm.txt). Entering
// Suspect on silence alone, and reading a machine that is On, decide
// nothing and do nothing irreversible; so that suspicion stays in memory,
// unwritten and unannounced, until it holds (suspicionHolds). A blip that
// ends before then writes and says nothing. No side effect is affected:
// any action with one is decided with a write first, as always.
//
// settleUnsaved reports whether this step's state is written, and drops
// or adds the suspicion's announcement.
func (st *stepper) settleUnsaved() bool {
	said := map[string]bool{}
	for _, a := range st.acts {
		if a.Kind == ActEvent {
			said[a.Event.Reason] = true
		}
	}
	blip := func() bool {
		for r := range said {
			if r != "FenceSuspect" && r != "FenceWaiting" && r != "FenceRecovered" {
				return false
			}
		}
		return true
	}
	held := st.held
	st.s.HeldEvent = Event{}
	switch {
	case st.sideEffct || (st.s.Phase != Suspect && st.s.Phase != Healthy):
	case st.s.Phase == Healthy && held.Reason != "":
		// Back, from a suspicion a power-off event started: a BMC that
		// pushed an Off for a machine that renews is worth knowing. Said
		// whole, as it happened (the suspicion, its event, the step's
		// own words), and written.
		st.s.Unsaved = false
		if said["FenceSuspect"] {
			st.announce(said, held)
			return true
		}
		acts := st.acts
		st.acts = nil
		since := ""
		if said["FenceRecovered"] {
			since = "; the node renewed its Lease since"
		}
		st.event(false, "FenceSuspect", "suspected since %s on a power-off event the BMC pushed (next Event)%s", stamp(st.suspectedAt), since)
		st.acts = append(st.acts, Action{Kind: ActEvent, Event: held})
		st.acts = append(st.acts, acts...)
		return true
	case st.s.Phase == Healthy:
		// Back: the annotation still says Healthy. A blip's own Events
		// go with it; anything else said (not fenceable, withdrawn) is
		// said, and written.
		st.s.Unsaved = false
		if blip() {
			st.acts = withoutEvents(st.acts)
			return false
		}
		return true
	case !st.suspicionHolds():
		st.s.Unsaved = true
		for _, a := range st.acts {
			if a.Kind == ActEvent && a.Event.Reason == "FencePowerEvent" {
				held = a.Event
			}
		}
		st.s.HeldEvent = held
		st.acts = withoutEvents(st.acts)
		st.wake(st.p.SuspectAfter - st.now.Sub(st.s.Since))
		return false
	}
	// It holds: written now, and announced (what the steps before said
	// nothing of) before this step's own Events, unless it ended in a
	// phase that is no fence (Maintenance, Healthy on a command): those
	// steps say why themselves, after the power-off event held, if any.
	st.s.Unsaved = false
	if !(st.s.Phase == Suspect || st.s.Phase.InFlight() || st.s.Phase == Stuck) {
		if held.Reason != "" {
			st.acts = append([]Action{{Kind: ActEvent, Event: held}}, st.acts...)
		}
		return true
	}
	st.announce(said, held)
	return true
}

// announce puts before this step's own Events what an unsaved suspicion
// did not say: the suspicion (unless this step says it), then the
// power-off event it held, if any, then why a machine read On is not off.
func (st *stepper) announce(said map[string]bool, held Event) {
	if said["FenceSuspect"] {
		if held.Reason == "" {
			return
		}
		// After this step's own FenceSuspect.
		i := slices.IndexFunc(st.acts, func(a Action) bool { return a.Kind == ActEvent && a.Event.Reason == "FenceSuspect" })
		st.acts = slices.Insert(st.acts, i+1, Action{Kind: ActEvent, Event: held})
		return
	}
	acts := st.acts
	st.acts = nil
	n := st.node()
	st.event(false, "FenceSuspect", "no Lease renewal observed for %s (Ready=%s), suspected since %s%s%s",
		SilentFor(n, st.now).Round(time.Second), n.Ready, stamp(st.suspectedAt), st.kubeletPortSays(), st.eventUnusedSays())
	if held.Reason != "" {
		st.acts = append(st.acts, Action{Kind: ActEvent, Event: held})
	}
	if rd := st.s.Last; st.s.Phase == Suspect && !said["FenceWaiting"] && rd.Failure == "" && !rd.At.Before(st.suspectedAt) && (rd.Power == PowerOn || rd.Power == PowerPoweringOn) {
		st.sayNotOff(rd)
	}
	st.acts = append(st.acts, acts...)
}

// suspicionHolds: an unsaved suspicion that goes on is written once it has
// lasted SuspectAfter (the node silent twice that, so `kubectl fence
// status`, the history and a health checker's remediation see it), or
// when anything but a machine read On happens: a failed or other reading,
// or anything else worth an Event.
func (st *stepper) suspicionHolds() bool {
	if st.now.Sub(st.s.Since) >= st.p.SuspectAfter {
		return true
	}
	if st.in.Kind == InputReading {
		if rd := st.in.Reading; rd.Failure != "" || (rd.Power != PowerOn && rd.Power != PowerPoweringOn) {
			return true
		}
	}
	for _, a := range st.acts {
		// The power-off event that started the suspicion is held, not
		// written: its read decides.
		if a.Kind == ActEvent && a.Event.Reason != "FenceSuspect" && a.Event.Reason != "FenceWaiting" && a.Event.Reason != "FencePowerEvent" {
			return true
		}
	}
	return false
}

func withoutEvents(acts []Action) []Action {
	out := acts[:0]
	for _, a := range acts {
		if a.Kind != ActEvent {
			out = append(out, a)
		}
	}
	return out
}

func (st *stepper) enterSuspect(note string) {
	n := st.node()
	st.s.FailureStart = n.HeartbeatAt
	st.s.Attested, st.s.AttestedAt, st.s.Forced = false, time.Time{}, false // a new attempt needs new proof
	st.s.NotReadyFence = false
	st.s.Target = ""
	st.s.OffRun = OffRun{}
	st.s.PowerOffAt, st.s.PowerOffSentAt, st.s.PowerOffAccepted, st.s.AcceptanceUntrusted = time.Time{}, time.Time{}, false, false
	st.s.NextReadAt = time.Time{}
	st.s.DiagnoseAt, st.s.DiagnoseSkipped = time.Time{}, false
	st.enter(Suspect, note)
	st.event(false, "FenceSuspect", "no Lease renewal observed for %s (Ready=%s); reading the BMC%s%s",
		SilentFor(n, st.now).Round(time.Second), n.Ready, st.kubeletPortSays(), st.eventUnusedSays())
	st.readNow()
}

// backToSuspect returns an admitted fence to Suspect, keeping who asked and
// the admission, to read and decide again.
func (st *stepper) backToSuspect(note string) {
	st.s.OffRun = OffRun{}
	st.enter(Suspect, note)
	st.scheduleRead(st.p.ReadInterval)
}

func (st *stepper) suspect() {
	if st.leavePreTaint() {
		return
	}
	if st.diagnoseResult() {
		return
	}
	if st.in.Kind != InputReading {
		st.readIfDue()
		return
	}
	rd := st.in.Reading
	if rd.Failure != "" {
		st.readFailed(rd, st.p.ReadInterval)
		return
	}
	st.s.ReadFailures = 0
	if st.diagnoseUngated(rd) {
		return
	}
	switch {
	case st.exactOff(rd) && !Enabled(CheckOurOwnOff):
		// The mutant: an Off we did not cause, taken as proof.
		if !st.admitPowerOff(rd) {
			st.scheduleRead(st.p.ReadInterval)
			return
		}
		st.s.OffRun = OffRun{}.Observe(rd, st.offNotBefore(), st.p.MaxReadGap)
		st.enter(ConfirmingOff, readPast(rd)+" Off")
		st.scheduleRead(st.p.SettleInterval())
	case st.exactOff(rd):
		// Off, but not by our hand: a restart's off-dwell reads Off too.
		// Our own ForceOff costs nothing on a machine that is off, and an
		// accepted one makes the Off ours.
		if st.attemptsSpent(rd) {
			return
		}
		if !st.admitPowerOff(rd) {
			st.scheduleRead(st.eventReadAfter(st.p.ReadInterval))
			return
		}
		st.sendPowerOff("the " + reads(rd) + " Off; sending our own ForceOff, since a restart's off-dwell reads Off too")
	case st.drawless(rd) && !st.s.Attested:
		// A fencing level's outlets are on and draw nothing: the machine
		// is dead, a power loss. Our own off through them now, admitted
		// as a power loss; the Off read back and settled still decides.
		if st.attemptsSpent(rd) {
			return
		}
		if !st.admitPowerOff(rd) {
			st.scheduleRead(st.p.ReadInterval)
			return
		}
		st.sendPowerOff(fmt.Sprintf("the node's Lease is silent for %s, its BMC cannot fence, and the outlets of %s draw about 0 W: the machine is dead", SilentFor(st.node(), st.now).Round(time.Second), rd.Target))
	case (rd.Power == PowerOn || rd.Power == PowerPoweringOn) && st.powerOffDue():
		if st.plannedRebootHolds(rd) {
			st.scheduleRead(st.p.ReadInterval)
			return
		}
		if st.attemptsSpent(rd) {
			return
		}
		if !st.admitPowerOff(rd) {
			st.scheduleRead(st.p.ReadInterval)
			return
		}
		why := ""
		if !st.s.Manual && !st.s.NotReadyFence && !st.in.Host.At.IsZero() {
			why = "; no BMC evidence of a hang counted: " + st.evidenceMissing(rd)
		}
		if st.diagnoseFirst(rd, fmt.Sprintf("the node's Lease is silent for %s and its BMC reads %s%s", SilentFor(st.node(), st.now).Round(time.Second), rd.Power, why)) {
			return
		}
		st.sendPowerOff(fmt.Sprintf("the node's Lease is silent for %s and its BMC reads %s%s", SilentFor(st.node(), st.now).Round(time.Second), rd.Power, why))
	case (rd.Power == PowerOn || rd.Power == PowerPoweringOn) && st.evidenceLicence(rd) != "" && st.evidenceAfterDiagnose(rd):
		// Hung-node evidence: the BMC logged that the OS stopped, in
		// this boot, after the node's last renewal. The ForceOff is due
		// before FenceAfter; the admission (the Lease silent for
		// SuspectAfter, the whole storm guard) is as for any On machine.
		if st.attemptsSpent(rd) {
			return
		}
		licence := st.evidenceLicence(rd)
		if !st.admitPowerOff(rd) {
			st.scheduleRead(st.p.ReadInterval)
			return
		}
		if st.diagnoseFirst(rd, fmt.Sprintf("the node's Lease is silent for %s, its BMC reads %s, and %s", SilentFor(st.node(), st.now).Round(time.Second), rd.Power, licence)) {
			return
		}
		st.sendPowerOff(fmt.Sprintf("the node's Lease is silent for %s, its BMC reads %s, and %s", SilentFor(st.node(), st.now).Round(time.Second), rd.Power, licence))
	default:
		st.noteNotOff(rd)
		st.scheduleRead(st.p.ReadInterval)
		if (rd.Power == PowerOn || rd.Power == PowerPoweringOn) && !st.s.Manual && !st.s.NotReadyFence {
			st.wake(st.p.FenceAfter - SilentFor(st.node(), st.now))
		}
	}
}

// noteNotOff announces a reading that is not proof, once per change.
func (st *stepper) noteNotOff(rd Reading) {
	if prev := st.s.Evidence.last(); prev != nil && prev.Kind == RecReading && prev.Count > 1 {
		return // the same answer as last time: already said
	}
	st.sayNotOff(rd)
}

// sayNotOff says why rd is not proof.
func (st *stepper) sayNotOff(rd Reading) {
	switch {
	case rd.Power == PowerOff && rd.OSRunning:
		st.event(true, "FenceBMCContradiction", "BMC reads Off but BootProgress says the OS is running; not proof of off")
	case rd.Power == PowerOff:
		st.event(false, "FenceWaiting", "%s Off, but not after the failure began; reading again", reads(rd))
	case rd.Power == PowerOn || rd.Power == PowerPoweringOn:
		st.event(false, "FenceWaiting", "%s %s%s; the node will be powered off if its Lease stays silent for %s (now %s)%s",
			reads(rd), rd.Power, trusted(rd), st.p.FenceAfter, SilentFor(st.node(), st.now).Round(time.Second), st.kubeletPortSays())
	default:
		st.event(false, "FenceWaiting", "%s %s; not proof of off, reading again", reads(rd), rd.Power)
	}
}

// powerOffDue: a ForceOff to a machine that may run is due once its Lease
// has been silent for FenceAfter, or a human asked, or the opt-in NotReady
// rule holds. A human's attestation never licenses one.
func (st *stepper) powerOffDue() bool {
	if st.s.Attested {
		return false
	}
	return st.s.Manual || st.s.NotReadyFence || SilentFor(st.node(), st.now) >= st.p.FenceAfter ||
		(!Enabled(CheckLeaseWitness) && UnhealthyFor(st.node(), st.now) >= st.p.FenceAfter)
}

func (st *stepper) sendPowerOff(why string) {
	st.s.PowerOffAt = st.now
	st.s.PowerOffSentAt = time.Time{}
	// The fleet's cooldown counts from the latest ForceOff, not only from
	// the admission: a fence that sends again to a machine that may run
	// and then leaves flight must not let the next one in at once.
	st.s.AdmittedAt = st.now
	st.s.PowerOffs++
	st.s.PowerOffAccepted = false
	st.s.OffRun = OffRun{}
	if st.s.Phase != PoweringOff {
		st.enter(PoweringOff, "powering off")
	}
	st.event(true, "FencePowerOff", "sending ForceOff (attempt %d of %d): %s%s", st.s.PowerOffs, st.p.PowerOffAttempts, why, st.kubeletPortSays())
	st.emit(ActPowerOff)
	st.scheduleRead(st.p.PowerPollInterval)
}

// resendPowerOff sends ForceOff again within the fence's attempts, or holds
// the node for a human when they are spent.
func (st *stepper) resendPowerOff(rd Reading, why string) {
	if st.plannedRebootHolds(rd) {
		st.backToSuspect("planned reboot")
		return
	}
	if st.attemptsSpent(rd) {
		return
	}
	if !st.admitPowerOff(rd) {
		st.scheduleRead(st.p.PowerPollInterval)
		return
	}
	st.sendPowerOff(why)
}

// attemptsSpent holds the node for a human when this fence has sent
// PowerOffAttempts ForceOffs already (the BMC ignored them all), instead of
// sending one more; it reports whether it did. A fence back in Suspect with
// its attempts spent (its power-off stopped being due, then became due
// again) ends here too.
func (st *stepper) attemptsSpent(rd Reading) bool {
	if st.s.PowerOffs < st.p.PowerOffAttempts {
		return false
	}
	st.enterStuck(StuckPowerOffIgnored, "power-off ignored")
	st.event(true, "FenceStuck", "sent ForceOff %d times but the BMC still reads %s; not tainting. Check the machine, then `kubectl fence confirm` or `abort`",
		st.s.PowerOffs, readingText(rd))
	return true
}

func (st *stepper) poweringOff() {
	if st.leavePreTaint() {
		return
	}
	switch st.in.Kind {
	case InputResult:
		r := st.in.Result
		if r.Action == ActPowerOff {
			switch {
			case r.NotSent:
				// Nothing reached the BMC: not an attempt it ignored.
				st.s.PowerOffs--
				st.s.PowerOffAt = time.Time{}
				st.s.PowerOffAccepted = false
				st.event(true, "FencePowerOffNotSent", "ForceOff not sent: %s; trying again", r.Err)
				st.backToSuspect("ForceOff not sent")
				return
			case r.Err == "":
				st.s.PowerOffAccepted = true
				if !r.SentAt.Before(st.s.PowerOffAt) && !r.SentAt.After(st.now) {
					st.s.PowerOffSentAt = r.SentAt
				}
				if st.readBackAtOnce() {
					st.readNow()
					return
				}
			case r.AlreadyInState:
				st.s.PowerOffAccepted = false
				st.event(true, "FencePowerOffNotAccepted", "the BMC answered that the machine is already off and did nothing (%s): an Off we did not cause counts only after %s of Off reads, longer than a restart's off-dwell",
					r.Err, st.p.UnassistedSettleWindow)
			default:
				st.s.PowerOffAccepted = false
				st.event(true, "FencePowerOffFailed", "ForceOff failed: %s; reading back (an Off now is not ours and counts only after %s)", r.Err, st.p.UnassistedSettleWindow)
			}
		}
		st.readIfDue()
		return
	case InputReading:
	case InputTick, InputCommand:
		st.readIfDue()
		return
	}
	rd := st.in.Reading
	if st.exactOff(rd) {
		st.s.ReadFailures = 0
		st.enterConfirming(rd)
		return
	}
	if rd.Failure != "" {
		st.s.ReadFailures++
	} else {
		st.s.ReadFailures = 0
	}
	if st.forceOffSent() && st.s.PowerOffAccepted && !st.s.AcceptanceUntrusted && rd.Failure == "" &&
		(rd.Power == PowerOn || rd.Power == PowerPoweringOn) && st.now.Sub(st.forceOffFrom()) >= st.p.OwnOffWithin {
		// Accepted, yet the machine still runs: this BMC accepts
		// commands it ignores. Its acceptances prove nothing from now on,
		// for whoever leads next too: persisted at once.
		st.s.AcceptanceUntrusted = true
		st.sideEffct = true
		st.event(true, "FencePowerOffIgnored", "the BMC accepted our ForceOff at %s but the machine still reads %s; its acceptance no longer makes an Off ours: an Off must last %s",
			stamp(st.forceOffFrom()), rd.Power, st.p.UnassistedSettleWindow)
	}
	if st.forceOffSent() && !st.s.PowerOffAccepted && (rd.Power == PowerOn || rd.Power == PowerPoweringOn) {
		// Our ForceOff did nothing (refused as "already off", or failed)
		// and the machine comes up: the Off was a restart's dwell. Now
		// a ForceOff can take.
		st.resendPowerOff(rd, fmt.Sprintf("the machine reads %s after the BMC did not act on our ForceOff", rd.Power))
		return
	}
	// powerTimeout counts from the send, as ownOffWithin does: with
	// ownOffWithin <= powerTimeout (Policy.Validate) a BMC that accepted
	// and ignored this ForceOff is found out above before it gets another.
	if st.now.Sub(st.forceOffFrom()) < st.p.PowerTimeout {
		st.scheduleRead(st.backoff(st.p.PowerPollInterval))
		return
	}
	if rd.Failure == "" && rd.Power != PowerOff && !st.powerOffDue() && st.evidenceLicence(rd) == "" {
		st.backToSuspect("power-off no longer due")
		return
	}
	st.resendPowerOff(rd, fmt.Sprintf("the %s still %s %s after our ForceOff", subject(rd), readingText(rd), st.p.PowerTimeout))
}

func (st *stepper) enterConfirming(rd Reading) {
	st.s.OffRun = OffRun{}.Observe(rd, st.offNotBefore(), st.p.MaxReadGap)
	st.enter(ConfirmingOff, readPast(rd)+" Off")
	if st.ours() {
		st.event(false, "FenceConfirmingOff", "%s Off%s after our accepted ForceOff; confirming it stays off (%d reads over %s)", reads(rd), trusted(rd), st.p.SettleReads, st.settleWindow())
	} else {
		st.event(false, "FenceConfirmingOff", "%s Off%s, but %s: the Off may be a restart's off-dwell, so it must stay off for %s", reads(rd), trusted(rd), st.notOursWhy(), st.settleWindow())
	}
	st.scheduleSettleRead()
}

func (st *stepper) confirmingOff() {
	if st.leavePreTaint() {
		return
	}
	if st.in.Kind != InputReading {
		st.readIfDue()
		return
	}
	rd := st.in.Reading
	if !st.forceOffSent() && Enabled(CheckOurOwnOff) {
		// No ForceOff of ours behind this run (a state from an older
		// agent): send one first.
		st.backToSuspect("no ForceOff of ours yet")
		st.suspect()
		return
	}
	run := st.extend(rd)
	if run.Count == 0 {
		if st.s.PowerOffAccepted && rd.Failure == "" && (rd.Power == PowerOn || rd.Power == PowerPoweringOn) {
			// The machine came up again after the Off: whatever our
			// ForceOff did was undone, by someone who may power-cycle
			// it again. poweringOff sends ForceOff again now, but no
			// Off of this fence is ours any more.
			st.s.PowerOffAccepted = false
			st.s.AcceptanceUntrusted = true
		}
		st.event(true, "FenceOffRunBroken", "%s %s after %d Off reads; not proof of off, starting over", readPast(rd), readingText(rd), st.s.OffRun.Count)
		st.s.OffRun = OffRun{}
		st.enter(PoweringOff, "off run broken")
		st.poweringOff()
		return
	}
	st.s.ReadFailures = 0
	st.s.OffRun = run
	if !st.settled(run) {
		st.scheduleSettleRead()
		return
	}
	if !st.admitTaint(run) {
		st.scheduleRead(st.taintReadAfter())
		return
	}
	st.enter(Tainting, "off settled")
	how := "after our accepted ForceOff at " + stamp(st.forceOffFrom())
	if !st.ours() {
		how = st.notOursWhy() + " (unassisted window)"
	}
	st.event(false, "FenceConfirmedOff", "%s Off %d times over %s (from %s to %s)%s, %s; the Lease has been silent since %s",
		readPast(st.in.Reading), run.Count, run.Last.Sub(run.First).Round(time.Millisecond), stamp(run.First), stamp(run.Last), trusted(st.in.Reading), how, stamp(st.s.FailureStart))
	st.applyTaint()
}

// trusted is " (power trusted: ...)" when the reading says whose power it
// is, for the Events that rest on it.
func trusted(rd Reading) string {
	if rd.Source == "" {
		return ""
	}
	return " (power trusted: " + rd.Source + ")"
}

func readingText(rd Reading) string {
	if rd.Failure != "" {
		return "an error (" + rd.Failure + ")"
	}
	if rd.OSRunning {
		return rd.Power.String() + " with the OS running"
	}
	return rd.Power.String()
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }

func (st *stepper) applyTaint() {
	switch st.node().Taint {
	case TaintOurs:
		st.taintApplied("our taint was already on the node")
	case TaintForeign:
		st.s.TaintOwned = false
		st.s.TaintedAt = st.now
		st.s.NextReadAt = time.Time{}
		st.event(false, "FenceForeignTaint", "the out-of-service taint is already on the node and is not ours; waiting for detach without claiming it")
		st.enter(Detaching, "foreign taint")
		st.detaching()
	case TaintAbsent:
		st.emit(ActApplyTaint)
		st.scheduleRead(st.p.SettleInterval()) // a retry re-reads first
	}
}

func (st *stepper) taintApplied(note string) {
	// An attestation is spent on the taint it was given for.
	st.s.Attested, st.s.AttestedAt, st.s.Forced = false, time.Time{}, false
	st.s.TaintOwned = true
	st.s.TaintedAt = st.now
	// The first keep-off read at the keep-off cadence, not at the next
	// tick: the Off was read just before the taint, and a read (through a
	// level below a silent BMC, one DeadLevelTimeout long) would hold the
	// node's sync while the taint manager evicts its pods, delaying their
	// force-delete (TestFirstKeepOffReadComesOneSettleIntervalAfterTheTaint).
	st.s.NextReadAt = st.now.Add(st.p.SettleInterval())
	st.s.ReadFailures = 0
	st.event(false, "FenceTainted", "applied node.kubernetes.io/out-of-service=nodeshutdown:NoExecute (%s)", note)
	st.enter(Detaching, "tainted")
	st.detaching()
}

func (st *stepper) tainting() {
	if st.leavePreTaint() {
		return
	}
	switch st.in.Kind {
	case InputResult:
		if st.in.Result.Action != ActApplyTaint {
			st.readIfDue()
			return
		}
		if st.in.Result.Err == "" {
			st.taintApplied(st.evidenceSummary())
			return
		}
		st.s.ReadFailures++
		st.event(true, "FenceTaintFailed", "applying the taint failed: %s; will re-read the BMC and retry", st.in.Result.Err)
		st.scheduleRead(st.backoff(st.p.PowerPollInterval))
	case InputReading:
		rd := st.in.Reading
		if st.s.Attested {
			st.attestedReading(rd)
			return
		}
		run := st.extend(rd)
		switch {
		case run.Count == 0:
			st.event(true, "FenceOffRunBroken", "%s %s just before the taint; not tainting", readPast(rd), readingText(rd))
			st.s.OffRun = OffRun{}
			st.enter(PoweringOff, "off run broken before taint")
			st.poweringOff()
		case !st.settled(run):
			// Too long since the run's last read (an agent resuming here):
			// the machine was not watched, so confirm again.
			st.s.OffRun = run
			st.enter(ConfirmingOff, "off run restarted")
			st.scheduleRead(st.p.SettleInterval())
		case !st.admitTaint(run):
			st.s.OffRun = run
			st.scheduleRead(st.taintReadAfter())
		default:
			st.s.OffRun = run
			st.applyTaint()
		}
	case InputTick, InputCommand:
		// Never taint on an old reading: a retry, or an agent resuming
		// here, reads the BMC first (invariant 1, fresh Off). An attested
		// node without a BMC has nothing to read.
		if st.s.Attested && !st.node().HasBMC {
			if st.now.Before(st.s.NextReadAt) {
				st.wakeAtTime(st.s.NextReadAt)
				return
			}
			if st.admitTaint(st.s.OffRun) {
				st.applyTaint()
			} else {
				st.scheduleRead(st.p.SettleInterval())
			}
			return
		}
		st.readIfDue()
	}
}

// attestedReading takes the BMC's word right before tainting on a human's
// attestation: a machine that reads On (or is coming up) is running, and a
// confirm never overrides that without --force. A failed read is why humans
// confirm: it does not stop the taint.
func (st *stepper) attestedReading(rd Reading) {
	if !st.forced() && rd.Failure == "" && (rd.Power == PowerOn || rd.Power == PowerPoweringOn || rd.Power == PowerPoweringOff || rd.OSRunning) {
		by := st.s.By
		st.s.Attested, st.s.AttestedAt, st.s.Forced = false, time.Time{}, false
		st.refuseRecord(fmt.Sprintf("confirm by %s refused: the BMC reads %s now", by, readingText(rd)))
		st.event(true, "FenceCommandRefused", "confirm by %s refused: the BMC reads %s now; the node may be running (use --force with a reason if you are sure)", by, readingText(rd))
		st.backToSuspect("attestation contradicted by the BMC")
		return
	}
	if !st.admitTaint(st.s.OffRun) {
		st.scheduleRead(st.p.SettleInterval())
		return
	}
	st.applyTaint()
}

func (st *stepper) evidenceSummary() string {
	s := st.s
	if s.Attested {
		how := "off attested by " + s.By
		if s.Forced {
			how += " (forced)"
		}
		return how
	}
	how := "after our accepted ForceOff"
	if !st.ours() {
		how = st.notOursWhy() + " (unassisted window)"
	}
	return fmt.Sprintf("%s Off %d times over %s, %s", readPast(s.Last), s.OffRun.Count, s.OffRun.Last.Sub(s.OffRun.First).Round(time.Millisecond), how)
}

// subject names who gave a reading, for the Events: the BMC, or the PDU
// outlets of a fencing level below it.
func subject(rd Reading) string {
	if rd.Level >= 2 {
		return fmt.Sprintf("level-%d PDU outlets", rd.Level)
	}
	return "BMC"
}

// reads is subject with its verb: "BMC reads", "level-2 PDU outlets read".
func reads(rd Reading) string {
	if rd.Level >= 2 {
		return subject(rd) + " read"
	}
	return "BMC reads"
}

// readPast is subject with its verb in the past: "BMC read", "level-2
// PDU outlets read".
func readPast(rd Reading) string { return subject(rd) + " read" }

// notOursWhy says why the Off being watched is not ours.
func (st *stepper) notOursWhy() string {
	switch {
	case !st.s.PowerOffAccepted:
		return "the BMC did not accept our ForceOff"
	case st.s.AcceptanceUntrusted:
		return "the machine ran after this BMC accepted a ForceOff, so its acceptance proves nothing"
	default:
		return fmt.Sprintf("the Off began more than %s (ownOffWithin) after the BMC accepted our ForceOff", st.p.OwnOffWithin)
	}
}

// ---- after the taint --------------------------------------------------------

// taintLost handles our taint vanishing under us (someone removed it). The
// node starts over: if it is still down it is suspected and proven off
// again. Our owner mark goes with it (ForgetTaint clears a mark whose taint
// is gone, and never removes a taint), so a later taint by someone else is
// never taken for ours.
func (st *stepper) taintLost() bool {
	if st.node().Taint != TaintAbsent {
		return false
	}
	owned := st.s.TaintOwned
	st.reset("taint removed by someone else")
	st.event(true, "FenceTaintLost", "the out-of-service taint was removed by someone else; starting over")
	if owned {
		st.emit(ActForgetTaint)
	}
	return true
}

func (st *stepper) detaching() {
	if st.taintLost() {
		return
	}
	if r := st.in.Result; st.in.Kind == InputResult && r.Action == ActPowerOff && !r.NotSent && !st.s.KeptOffAt.IsZero() {
		// The keep-off ForceOff went out after its decision (the
		// persist, the recheck, a BMC slot, the identity check): the
		// machine may have run until now. Never earlier: a call that
		// failed may still be carried out.
		st.s.KeptOffAt = laterOf(st.s.KeptOffAt, st.now)
	}
	if st.recoveredAfterTaint() {
		st.enterUntainting()
		return
	}
	n := st.node()
	// A node a human took into maintenance or excluded meanwhile is theirs:
	// we read and warn, but send nothing (invariant 11).
	mayAct := n.HasBMC && !n.Maintenance && !n.Excluded
	if st.in.Kind == InputReading && Enabled(CheckKeepOff) && mayAct {
		if st.keepOff(st.in.Reading) {
			return
		}
	}
	// Pods the adapter has not listed yet are not zero pods.
	podsKnown := !n.PodsUnknown || !Enabled(CheckPodsListed)
	if podsKnown && n.Pods == 0 && n.VolumeAttachments == 0 {
		st.s.FencedAt = st.now
		st.event(false, "FenceDetached", "no pods or VolumeAttachments left on the node, %s after the taint", st.now.Sub(st.s.TaintedAt).Round(time.Millisecond))
		st.enter(Fenced, "detached")
		if st.p.PowerOnAfterDetach {
			st.enterPoweringOn("policy powerOnAfterDetach")
		}
		return
	}
	// One pass a sync: the steps that take in the sync's own reads and
	// results see the view the tick saw, and would ask again.
	if st.p.ForceDeletePods && n.Terminating > 0 && (st.in.Kind == InputTick || st.in.Kind == InputCommand) {
		st.emit(ActDeletePods)
	}
	st.wake(st.p.DetachPoll)
	waited := st.now.Sub(st.s.TaintedAt)
	if waited >= st.p.DetachTimeout && !st.s.Warned {
		st.s.Warned = true
		pods := strconv.Itoa(n.Pods)
		if n.PodsUnknown {
			pods = "an unknown number of" // the adapter's list of them has not completed
		}
		st.event(true, "FenceDetachBlocked", "%s pods and %d VolumeAttachments still bound %s after the taint: %s",
			pods, n.VolumeAttachments, waited.Round(time.Second), blockerList(n.Blockers))
	} else if !st.s.Warned {
		st.wake(st.p.DetachTimeout - waited)
	}
	if !Enabled(CheckKeepOff) || !mayAct {
		return
	}
	// Keep it off until detach completes (invariant 7): the volumes are
	// being detached on the word that the machine is off.
	if st.in.Kind != InputReading && st.in.Kind != InputResult {
		st.readIfDue()
	}
}

// keepOff reacts to a reading while detaching: a machine found On, or
// coming up, is forced off again at once. It reports whether it acted.
func (st *stepper) keepOff(rd Reading) bool {
	switch {
	case rd.Failure != "":
		st.s.ReadFailures++
		st.scheduleRead(st.backoff(st.p.SettleInterval()))
		return false
	case (rd.Power == PowerOn || rd.Power == PowerPoweringOn || rd.OSRunning) && st.ownNodeRefused():
		st.s.ReadFailures = 0
		st.scheduleRead(st.p.SettleInterval())
		return false
	case rd.Power == PowerOn || rd.Power == PowerPoweringOn || rd.OSRunning:
		st.s.ReadFailures = 0
		st.s.KeptOff++
		st.s.KeptOffAt = st.now
		st.event(true, "FencePoweredOnDuringFence", "the machine reads %s while its workloads are still being detached: powered on during the fence; sending ForceOff again (%d)", readingText(rd), st.s.KeptOff)
		st.emit(ActPowerOff)
		st.scheduleRead(st.p.PowerPollInterval)
		return true
	default:
		st.s.ReadFailures = 0
		st.scheduleRead(st.p.SettleInterval())
		return false
	}
}

func blockerList(b []string) string {
	if len(b) == 0 {
		return "(none named)"
	}
	return strings.Join(b, ", ")
}

func (st *stepper) fenced() {
	if st.taintLost() {
		return
	}
	if st.recoveredAfterTaint() {
		st.enterUntainting()
	}
}

func (st *stepper) enterPoweringOn(note string) {
	st.s.PowerOnAt = st.now
	st.s.ReadFailures = 0
	st.enter(PoweringOn, note)
	st.event(false, "FencePowerOn", "powering the node on (%s)", note)
	st.emit(ActPowerOn)
	st.scheduleRead(st.p.PowerPollInterval)
}

func (st *stepper) poweringOn() {
	if st.taintLost() {
		return
	}
	if st.recoveredAfterTaint() {
		st.enterUntainting()
		return
	}
	switch st.in.Kind {
	case InputResult:
		if st.in.Result.Action == ActPowerOn && st.in.Result.Err != "" && !st.in.Result.AlreadyInState {
			st.event(true, "FencePowerOnFailed", "power-on failed: %s; the node stays fenced (retry with `kubectl fence unfence --power-on`)", st.in.Result.Err)
			st.enter(Fenced, "power-on failed")
			return
		}
		st.readIfDue()
	case InputReading:
		rd := st.in.Reading
		if rd.Failure == "" && rd.Power == PowerOn {
			st.enter(Recovering, "BMC reads On")
			st.event(false, "FenceRecovering", "BMC reads On; waiting for the node to be Ready before removing our taint")
			return
		}
		if st.now.Sub(st.s.PowerOnAt) >= st.p.PowerOnTimeout {
			st.event(true, "FencePowerOnFailed", "node did not power on within %s (BMC reads %s); it stays fenced", st.p.PowerOnTimeout, readingText(rd))
			st.enter(Fenced, "power-on timed out")
			return
		}
		st.scheduleRead(st.p.PowerPollInterval)
	case InputTick, InputCommand:
		st.readIfDue()
	}
}

func (st *stepper) recovering() {
	if st.taintLost() {
		return
	}
	if st.recoveredAfterTaint() {
		st.enterUntainting()
	}
}

// enterUntainting removes our taint, or, if the taint is not ours, leaves it
// and goes back to Healthy (invariant 8).
func (st *stepper) enterUntainting() {
	n := st.node()
	if !st.s.TaintOwned || n.Taint != TaintOurs {
		if n.Taint == TaintForeign {
			st.event(false, "FenceForeignTaint", "node is Ready again; the out-of-service taint is not ours and stays")
		}
		st.reset("recovered")
		return
	}
	st.enter(Untainting, "node Ready after fence")
	st.s.ReadFailures = 0
	st.removeTaint()
}

func (st *stepper) removeTaint() {
	st.emit(ActRemoveTaint)
	st.s.NextReadAt = st.now.Add(st.p.PowerPollInterval)
	st.wake(st.p.PowerPollInterval)
}

func (st *stepper) untainting() {
	n := st.node()
	if st.in.Kind == InputResult && st.in.Result.Action == ActRemoveTaint {
		if st.in.Result.Err == "" {
			st.event(false, "FenceUntainted", "node is Ready with a heartbeat at %s, after our taint at %s; removed our taint",
				stamp(n.RenewedAt), stamp(st.s.TaintedAt))
			st.reset("untainted")
			return
		}
		st.s.ReadFailures++
		st.event(true, "FenceUntaintFailed", "removing our taint failed: %s; retrying", st.in.Result.Err)
		st.scheduleRead(st.backoff(st.p.PowerPollInterval))
		return
	}
	if n.Taint != TaintOurs || !st.s.TaintOwned {
		st.reset("untainted")
		return
	}
	if !st.recoveredAfterTaint() {
		st.enter(Recovering, "node not Ready")
		return
	}
	if !st.now.Before(st.s.NextReadAt) {
		st.removeTaint()
		return
	}
	st.wakeAtTime(st.s.NextReadAt)
}

// ---- Stuck and Maintenance ----------------------------------------------------

func (st *stepper) enterStuck(r StuckReason, note string) {
	st.s.Stuck = r
	st.s.OffRun = OffRun{}
	st.s.Attested, st.s.AttestedAt, st.s.Forced = false, time.Time{}, false
	st.enter(Stuck, note)
	st.scheduleRead(st.p.StuckReadInterval)
}

func (st *stepper) stuck() {
	n := st.node()
	if n.Taint == TaintOurs && st.s.TaintOwned {
		if st.recoveredAfterTaint() {
			st.enterUntainting()
			return
		}
		st.wake(resync)
		return
	}
	if n.Taint == TaintOurs {
		st.leavePreTaint() // adopt a taint we applied but never recorded
		return
	}
	if n.Maintenance {
		st.resetTo(Maintenance, "maintenance")
		return
	}
	if n.Ready == ReadyTrue && st.renewedAfter(st.s.Since) {
		st.reset("recovered")
		st.event(false, "FenceRecovered", "node is Ready again with a fresh heartbeat; released from Stuck")
		return
	}
	if st.s.Stuck != StuckPowerOffIgnored || n.Excluded || !n.HasBMC {
		return // held until a human acts or the node recovers
	}
	// Keep watching slowly: if someone powers the machine off by hand,
	// the unassisted rule still decides (the BMC ignored our ForceOffs,
	// so nothing it reads is an Off we caused). No power command is sent
	// from here.
	if st.in.Kind != InputReading {
		st.readIfDue()
		return
	}
	rd := st.in.Reading
	if st.exactOff(rd) && !st.renewedAfter(st.s.FailureStart) {
		st.s.PowerOffAccepted = false
		st.enterConfirming(rd)
		return
	}
	st.scheduleRead(st.p.StuckReadInterval)
}

func (st *stepper) maintenance() {
	n := st.node()
	switch {
	case n.Maintenance:
	case n.MaintenanceExpired:
		st.event(true, "FenceMaintenanceExpired", "the maintenance mark's duration has passed (counted on this agent's clock from when it saw the mark): the node may be fenced again")
		st.reset(NoteMaintenanceExpired)
		st.healthy()
	default:
		st.reset("maintenance over")
		st.healthy()
	}
}

// ---- human commands ---------------------------------------------------------

// refuseRecord records a refusal in the state as well as in an Event: the
// write that acknowledges the request carries it, so whoever waits on the
// request reads the answer with the acknowledgement (Events trail).
func (st *stepper) refuseRecord(why string) {
	st.s.Evidence.add(Record{At: st.now, Kind: RecRefusal, Phase: st.s.Phase, Note: why})
}

func (st *stepper) command() {
	c := st.in.Command
	c.User, c.Reason = Clip(c.User, 64), Clip(c.Reason, 120)
	n := st.node()
	st.s.Evidence.add(Record{At: st.now, Kind: RecCommand, Phase: st.s.Phase, Note: commandNote(c)})
	refuse := func(why string) {
		st.refuseRecord(why)
		st.event(true, "FenceCommandRefused", "%s requested by %s refused: %s", c.Kind, c.User, why)
	}
	acts := c.Kind == CmdFence || c.Kind == CmdConfirm
	if acts && Enabled(CheckRequestAge) && (c.SeenAt.IsZero() || st.now.Sub(c.SeenAt) > st.p.MaxRequestAge) {
		age := "of unknown age"
		if !c.SeenAt.IsZero() {
			age = "first seen " + st.now.Sub(c.SeenAt).Round(time.Second).String() + " ago"
		}
		refuse(fmt.Sprintf("the request is %s; requests expire after %s, since what you saw may have changed: run kubectl fence again", age, st.p.MaxRequestAge))
		return
	}
	switch c.Kind {
	case CmdFence:
		st.fenceCommand(c, refuse)
	case CmdConfirm:
		st.confirmCommand(c, refuse)
	case CmdAbort:
		switch st.s.Phase {
		case Healthy, Maintenance, Untainting:
			refuse("there is no fence to abort (" + st.s.Phase.String() + ")")
		case Suspect, ConfirmingOff, PoweringOff, Tainting, Detaching, Fenced, PoweringOn, Recovering, Stuck:
			tainted := "no taint was applied"
			if st.s.TaintOwned {
				tainted = "our taint stays until `kubectl fence unfence`"
			}
			st.event(true, "FenceAborted", "fence aborted by %s: %s; %s", c.User, c.Reason, tainted)
			st.s.By = c.User
			st.enterStuck(StuckAborted, "aborted by "+c.User)
		}
	case CmdUnfence:
		if n.Taint != TaintOurs {
			if st.s.Phase.PreTaint() || st.s.Phase == Maintenance {
				refuse("there is no out-of-service taint of ours on the node")
				return
			}
			st.reset("unfenced by " + c.User)
			return
		}
		st.s.TaintOwned, st.s.By, st.s.Stuck = true, c.User, StuckNone
		if st.s.TaintedAt.IsZero() {
			st.s.TaintedAt = st.now
		}
		st.event(false, "FenceUnfence", "unfence requested by %s: %s", c.User, c.Reason)
		if c.PowerOn {
			st.enterPoweringOn("unfence by " + c.User)
			return
		}
		st.enter(Recovering, "unfence by "+c.User)
	case CmdNone:
	}
}

func (st *stepper) fenceCommand(c Command, refuse func(string)) {
	n := st.node()
	switch {
	case n.Maintenance:
		refuse("the node is under maintenance")
	case n.Excluded || !n.HasBMC:
		refuse("the node is " + unfenceableWhy(n) + " (use confirm if you know it is off)")
	case st.liveWitness() != "" && !st.s.NotReadyFence:
		refuse(st.liveWitness())
	case st.s.Phase.InFlight():
		// The agent may have started this fence a moment before the
		// request arrived. Refusing would race the human against the
		// agent; what they asked for is under way, so it goes on as
		// theirs: no thresholds, nothing else changes.
		st.s.Manual, st.s.By = true, c.User
		st.event(false, "FenceManual", "fence requested by %s: %s; following the fence already %s", c.User, c.Reason, st.s.Phase)
	case st.s.Phase == Detaching || st.s.Phase == Fenced:
		st.event(false, "FenceManual", "fence requested by %s: %s; the node is already tainted (%s)", c.User, c.Reason, st.s.Phase)
	case st.s.Phase == PoweringOn || st.s.Phase == Recovering:
		refuse("the node is being brought back (" + st.s.Phase.String() + "); abort that first")
	case st.s.Phase != Healthy && st.s.Phase != Suspect && st.s.Phase != Stuck:
		refuse("the node is " + st.s.Phase.String() + "; wait until that ends")
	default:
		keep := st.s.Phase == Suspect
		st.s.Manual, st.s.By, st.s.Stuck = true, c.User, StuckNone
		// A human asking again gets fresh power-off attempts; the time
		// of our last request stays, so older Off reads still do not
		// count (invariant 1).
		st.s.PowerOffs = 0
		st.event(false, "FenceManual", "fence requested by %s: %s", c.User, c.Reason)
		if keep {
			st.s.NextReadAt = time.Time{}
			return
		}
		st.enterSuspect("manual fence by " + c.User)
		st.s.Manual, st.s.By = true, c.User
	}
}

// confirmCommand takes a human's attestation that the node is off, when no
// BMC can say so. It never overrides a contrary live witness (a renewal,
// the BMC reading On: checked again right before the taint) without Force.
func (st *stepper) confirmCommand(c Command, refuse func(string)) {
	n := st.node()
	switch {
	case n.Maintenance:
		refuse("the node is under maintenance")
		return
	case n.Excluded:
		refuse("the node is excluded from fencing by label")
		return
	case !st.s.Phase.PreTaint() && st.s.Phase != Stuck || n.Taint == TaintOurs:
		refuse("the node is already tainted (" + st.s.Phase.String() + ")")
		return
	case c.Force && strings.TrimSpace(c.Reason) == "":
		refuse("--force needs a reason")
		return
	}
	if !c.Force {
		switch {
		case st.liveWitness() != "":
			refuse(st.liveWitness() + " (use --force with a reason if you are sure)")
			return
		case st.s.Phase != Healthy && !st.s.FailureStart.IsZero() && st.renewedAfter(st.s.FailureStart):
			refuse("the node renewed its Lease since the failure began (use --force with a reason if you are sure)")
			return
		case st.s.Last.Failure == "" && !st.s.Last.At.IsZero() && st.now.Sub(st.s.Last.At) < st.p.ReadBackoffMax &&
			(st.s.Last.Power == PowerOn || st.s.Last.Power == PowerPoweringOn):
			refuse(fmt.Sprintf("the BMC read %s at %s (use --force with a reason if you are sure)", st.s.Last.Power, stamp(st.s.Last.At)))
			return
		}
	}
	if st.s.Phase == Healthy || st.s.FailureStart.IsZero() {
		st.s.FailureStart = n.HeartbeatAt
	}
	st.s.Attested, st.s.AttestedAt, st.s.Forced, st.s.By, st.s.Stuck = true, st.now, c.Force, c.User, StuckNone
	forced := ""
	if c.Force {
		forced = " (forced, overriding the live witnesses)"
	}
	st.event(true, "FenceConfirmedByHuman", "%s attests the node is off%s: %s", c.User, forced, c.Reason)
	st.enter(Tainting, "off attested by "+c.User)
	st.s.NextReadAt = time.Time{}
}

// liveWitness says why the node looks alive to a human's request, or "": a
// Lease renewal we observed within SuspectAfter, or Ready with no silence
// long enough to doubt it. A process that has only just started (the CLI)
// has seen no renewal yet: that is no witness either way, and the power-off
// or taint waits until it has watched the node silent for SuspectAfter.
func (st *stepper) liveWitness() string {
	n := st.node()
	if !n.RenewedAt.IsZero() && st.now.Sub(n.RenewedAt) < st.p.SuspectAfter {
		return fmt.Sprintf("the node renewed its Lease %s ago: it is alive", st.now.Sub(n.RenewedAt).Round(time.Second))
	}
	if n.Ready == ReadyTrue && SilentFor(n, st.now) < st.p.SuspectAfter {
		return "the node is Ready with a fresh heartbeat: it is alive"
	}
	return ""
}

func commandNote(c Command) string {
	note := c.Kind.String() + " by " + c.User
	if c.Force {
		note += " (forced)"
	}
	if c.Reason != "" {
		note += ": " + c.Reason
	}
	return note
}

// ---- planned reboots ---------------------------------------------------------

// plannedRebootOpen: a planned-reboot signal names the node and was first
// seen (on our clock) less than RebootWindow ago. A signal without a time
// is taken as seen now: the window then holds, which only delays a fence.
func plannedRebootOpen(p Policy, n NodeView, now time.Time) bool {
	if !n.PlannedReboot {
		return false
	}
	return n.PlannedRebootAt.IsZero() || now.Sub(n.PlannedRebootAt) < p.RebootWindow
}

// plannedRebootHolds: during a planned reboot, the agent's own fence sends
// no ForceOff to a machine that reads anything but exact Off (a long POST
// reads On or PoweringOn while the Lease is silent for minutes). A human's
// fence request is theirs and goes on; so does an Off that stays off (a
// shutdown, not a reboot): that one is fenced as ever, with our own
// ForceOff, read back Off and settled. It reports whether it held the
// ForceOff back, and says why once per phase entered (Warned).
func (st *stepper) plannedRebootHolds(rd Reading) bool {
	n := st.node()
	if st.s.Manual || !plannedRebootOpen(st.p, n, st.now) || st.exactOff(rd) || !Enabled(CheckPlannedReboot) {
		return false
	}
	by := n.PlannedRebootBy
	if by == "" {
		by = "a planned-reboot signal"
	}
	until := n.PlannedRebootAt
	if until.IsZero() {
		until = st.now
	}
	until = until.Add(st.p.RebootWindow)
	if !st.s.Warned {
		st.s.Warned = true
		st.s.Evidence.add(Record{At: st.now, Kind: RecRefusal, Phase: st.s.Phase, Note: "planned reboot (" + by + ")"})
		st.event(false, "FencePlannedReboot", "planned reboot (%s), not powering off a machine that reads %s until %s (policy.rebootWindow %s from when the agent saw the signal); a machine that stays off is still fenced",
			by, readingText(rd), stamp(until), st.p.RebootWindow)
	}
	st.wakeAtTime(until)
	return true
}

// ---- control-plane nodes -------------------------------------------------------

// controlPlaneRefusal says why no ForceOff may go to this control-plane node
// now, or "": another control-plane node is in a fence (one at a time), or
// the other control-plane nodes whose machines may run would be fewer than
// a quorum of the etcd members (all control-plane nodes). Every ForceOff
// asks, a human's and a resent one included. The zero fleet view (a
// healthy node's tick) counts no members and refuses.
func (st *stepper) controlPlaneRefusal() string {
	n, f := st.node(), st.in.Fleet
	if !n.ControlPlane {
		return ""
	}
	if f.ControlPlaneInFlight > 0 && Enabled(CheckControlPlaneOne) {
		return fmt.Sprintf("another control-plane node is being fenced (%d in flight): control-plane nodes are fenced one at a time", f.ControlPlaneInFlight)
	}
	if st.p.ExternalEtcd || !Enabled(CheckEtcdQuorum) {
		return ""
	}
	members := max(f.ControlPlaneNodes, 1)
	quorum := members/2 + 1
	if f.ControlPlaneMayRun < quorum {
		return fmt.Sprintf("powering it off would leave %d of %d control-plane nodes whose machines may run, fewer than etcd's quorum of %d (policy.externalEtcd is false)",
			f.ControlPlaneMayRun, members, quorum)
	}
	return ""
}

// refuseControlPlane records a control-plane refusal, and says it once per
// phase entered (Warned).
func (st *stepper) refuseControlPlane(why string) {
	if st.s.Warned {
		return
	}
	st.s.Warned = true
	st.s.Evidence.add(Record{At: st.now, Kind: RecRefusal, Phase: st.s.Phase, Note: "control-plane node"})
	st.event(true, "FenceControlPlane", "not powering off control-plane node: %s", why)
}

// ---- the leader's own node -------------------------------------------------------

// ownNodeNote is the evidence record of an own-node refusal: it is said
// once per episode (since FailureStart), not at every retry.
const ownNodeNote = "own node: the leader runs on it"

// ownNodeRefused: the agent's own replica, the leader deciding now, runs on
// this node (NodeView.RunsThisAgent), so no power action that can cut the
// machine goes to it: a ForceOff through its BMC or its outlets would stop
// the leader in the middle of the fence, and a leader that runs proves the
// machine runs (if the node is truly dead, so is the leader, and another
// replica fences it once it leads). It reports whether it refused, and says
// why once per episode.
func (st *stepper) ownNodeRefused() bool {
	if !st.node().RunsThisAgent || !Enabled(CheckOwnNode) {
		return false
	}
	for _, r := range st.s.Evidence.Records() {
		if r.Kind == RecRefusal && r.Note == ownNodeNote && !r.At.Before(st.s.FailureStart) {
			return true
		}
	}
	st.s.Evidence.add(Record{At: st.now, Kind: RecRefusal, Phase: st.s.Phase, Note: ownNodeNote})
	st.event(true, ReasonRefusedOwnNode, "not powering off this node: the leader runs on this node; another replica fences it once it leads")
	return true
}

// ReasonRefusedOwnNode is the Event reason of an own-node refusal
// (ownNodeRefused); the runner counts it in its metrics.
const ReasonRefusedOwnNode = "FenceRefusedOwnNode"

// kubeletPortSays appends what the kubelet port answered, if it was probed,
// to an Event's message. It names the class only: it decides nothing.
func (st *stepper) kubeletPortSays() string {
	if c := st.node().KubeletPort.Class(); c != "" {
		return "; " + c
	}
	return ""
}

// scheduleSettleRead schedules the next settle read SettleInterval after
// the read in hand began (Reading.Begun), not after it ended: through a fencing
// level below a BMC that cannot answer, each read first waits the runner's
// DeadLevelTimeout on that BMC, and spacing from the end would add that
// wait to every interval, stretching the settle by it per read. Only the
// schedule changes: the run still needs SettleReads Off readings whose At
// span SettleWindow (SettledOver), each at most MaxReadGap apart, so reads
// that come closer together prove nothing sooner. The runner sets Begun
// for every reading of a node with fencing levels, level 1's too (a slow
// BMC's settle reads then come closer together, proving nothing sooner);
// without one (a node without levels) it is scheduleRead from now, as
// before.
func (st *stepper) scheduleSettleRead() {
	begun := st.in.Reading.Begun
	if st.in.Kind != InputReading || begun.IsZero() || begun.After(st.now) {
		st.scheduleRead(st.p.SettleInterval())
		return
	}
	next := begun.Add(st.p.SettleInterval())
	if next.Before(st.now) {
		next = st.now
	}
	st.s.NextReadAt = next
	st.wakeAtTime(next)
}
