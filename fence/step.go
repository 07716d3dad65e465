package fence

import (
	"fmt"
	"time"
)

// resync bounds how long a node goes without being re-evaluated when no
// timer of its own is pending.
const resync = 30 * time.Second

// minRecheck keeps RecheckAfter positive when a timer is already due.
const minRecheck = 10 * time.Millisecond

// Step advances one node's state by one input. It is pure and deterministic:
// the same (policy, state, input, now) always gives the same Output.
func Step(p Policy, s State, in Input, now time.Time) Output {
	st := stepper{p: p, s: s, in: in, now: now, prev: s.Phase}
	st.run()
	return st.output()
}

type stepper struct {
	p    Policy
	s    State
	in   Input
	now  time.Time
	prev Phase

	acts      []Action
	sideEffct bool
	wakeAt    time.Duration
}

func (st *stepper) run() {
	switch st.in.Kind {
	case InputReading:
		rd := st.in.Reading
		st.s.Last = rd
		st.s.Evidence.add(Record{At: rd.At, Until: rd.At, Kind: RecReading, Phase: st.s.Phase, Power: rd.Power, Note: readingNote(rd)})
	case InputResult:
		note := "ok"
		if st.in.Result.Err != "" {
			note = st.in.Result.Err
		}
		st.s.Evidence.add(Record{At: st.now, Kind: RecResult, Phase: st.s.Phase, Action: st.in.Result.Action, Note: note})
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
	acts := st.acts
	if st.s.Phase != st.prev || st.sideEffct {
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
	case ActPowerOff, ActPowerOn, ActApplyTaint, ActRemoveTaint:
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
	ev := st.s.Evidence
	st.s = State{Phase: st.s.Phase, Evidence: ev}
	st.enter(ph, note)
}

func readingNote(rd Reading) string {
	switch {
	case rd.Failure != "":
		return rd.Failure
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

// recovered: Ready, with a renewal observed after the failure began.
func (st *stepper) recovered() bool {
	return st.node().Ready == ReadyTrue && st.renewedAfter(st.s.FailureStart)
}

// recoveredAfterTaint: Ready, with a renewal observed after our taint
// (invariant 4's condition for removing it).
func (st *stepper) recoveredAfterTaint() bool {
	return st.node().Ready == ReadyTrue && !st.s.TaintedAt.IsZero() && st.renewedAfter(st.s.TaintedAt)
}

// looksAlive: Ready with a heartbeat inside SuspectAfter; what a human
// command must not override.
func (st *stepper) looksAlive() bool {
	n := st.node()
	return n.Ready == ReadyTrue && UnhealthyFor(n, st.now) < st.p.SuspectAfter
}

// offNotBefore is the time every counting Off reading must follow: the start
// of the failure and our last power-off request (invariant 1 a, c).
func (st *stepper) offNotBefore() time.Time {
	if st.s.PowerOffAt.After(st.s.FailureStart) {
		return st.s.PowerOffAt
	}
	return st.s.FailureStart
}

func (st *stepper) validOff(rd Reading) bool {
	return OffRun{}.Observe(rd, st.offNotBefore(), st.p.MaxReadGap).Count == 1
}

// extend is the current run extended by rd (empty if rd breaks it).
func (st *stepper) extend(rd Reading) OffRun {
	return st.s.OffRun.Observe(rd, st.offNotBefore(), st.p.MaxReadGap)
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
	if st.s.ReadFailures == 1 {
		st.event(true, "FenceCannotVerify", "cannot read the BMC (%s); the node stays untouched until the BMC answers", rd.Failure)
	}
	st.scheduleRead(st.backoff(base))
}

// admit consults the storm guard (invariant 2). A human's fence request
// bypasses it: the human has seen the cluster. (An attestation does not: it
// replaces the BMC's proof, never licenses a power-off.)
func (st *stepper) admit() bool {
	if st.s.Manual {
		return true
	}
	r := Admit(st.p, st.in.Fleet, st.now)
	if r.Admitted() {
		st.s.Refusal = Admitted
		if st.s.AdmittedAt.IsZero() {
			st.s.AdmittedAt = st.now
		}
		return true
	}
	if r.Reason != st.s.Refusal {
		st.event(true, "FenceRefused", "not fencing: %s", r)
		st.s.Evidence.add(Record{At: st.now, Kind: RecRefusal, Phase: st.s.Phase, Note: r.Reason.String()})
	}
	st.s.Refusal = r.Reason
	return false
}

// ---- pre-taint phases --------------------------------------------------------

// leavePreTaint handles what ends a fence before the taint: maintenance, a
// node we may not fence, recovery. It reports whether it moved the node.
// Recovery needs evidence (a renewal observed while Ready), never just a
// short apparent silence: an agent that restarts mid-fence sees every node
// for the first time, and must not drop the fence for that.
func (st *stepper) leavePreTaint() bool {
	n := st.node()
	if st.s.Phase != Tainting {
		// An attestation belongs to the taint it was given for; outside
		// Tainting it means nothing.
		st.s.Attested = false
	}
	switch {
	case n.Taint == TaintOurs:
		// Our taint is on the node: the result of our patch, or an agent
		// that died between the patch and the persist. Either way it is on.
		note := "our taint was already on the node"
		if st.in.Kind == InputResult && st.in.Result.Action == ActApplyTaint && st.in.Result.Err == "" {
			note = evidenceSummary(st.s)
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
	case st.recovered():
		st.reset("recovered")
		st.event(false, "FenceRecovered", "node is Ready again with a fresh heartbeat; nothing was done")
		return true
	}
	if st.renewedAfter(st.s.FailureStart) {
		// A renewal after the failure began, from a node still not
		// Ready: the machine runs. Any Off so far is contradicted.
		st.s.FailureStart = n.RenewedAt
		if st.s.OffRun.Count > 0 {
			st.s.OffRun = OffRun{}
			st.event(true, "FenceOffRunBroken", "node sent a heartbeat while its BMC read Off; not proof of off (wrong BMC in the inventory?)")
		}
		if st.s.Phase == ConfirmingOff || (st.s.Phase == Tainting && !st.s.Attested) {
			st.backFromOffRun("heartbeat observed")
			return true
		}
	}
	return false
}

func unfenceableWhy(n NodeView) string {
	switch {
	case n.Excluded:
		return "excluded from fencing by label"
	case !n.HasBMC:
		return "without a BMC entry in the inventory"
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
	d := UnhealthyFor(n, st.now)
	if d < st.p.SuspectAfter {
		st.s.Warned = false
		st.wake(st.p.SuspectAfter - d)
		return
	}
	if n.Excluded || !n.HasBMC {
		if !st.s.Warned {
			st.s.Warned = true
			st.event(true, "FenceNotFenceable", "node unhealthy for %s but %s; it will not be fenced", d.Round(time.Second), unfenceableWhy(n))
		}
		return
	}
	st.enterSuspect(fmt.Sprintf("unhealthy for %s", d.Round(time.Second)))
}

func (st *stepper) enterSuspect(note string) {
	n := st.node()
	st.s.FailureStart = n.HeartbeatAt
	st.s.Attested = false // a new attempt needs new proof
	st.s.NextReadAt = time.Time{}
	st.enter(Suspect, note)
	st.event(false, "FenceSuspect", "no heartbeat observed for %s (Ready=%s); reading the BMC",
		st.now.Sub(n.HeartbeatAt).Round(time.Second), n.Ready)
	st.readNow()
}

func (st *stepper) suspect() {
	if st.leavePreTaint() {
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
	d := UnhealthyFor(st.node(), st.now)
	switch {
	case st.validOff(rd):
		if !st.admit() {
			st.scheduleRead(st.p.ReadInterval)
			return
		}
		st.enterConfirming(rd)
	case rd.Power == PowerOn && st.powerOffDue():
		if !st.admit() {
			st.scheduleRead(st.p.ReadInterval)
			return
		}
		st.sendPowerOff()
	default:
		st.noteNotOff(rd, d)
		st.scheduleRead(st.p.ReadInterval)
		if rd.Power == PowerOn && !st.s.Manual {
			st.wake(st.p.FenceAfter - d)
		}
	}
}

// noteNotOff announces a reading that is not proof, once per change.
func (st *stepper) noteNotOff(rd Reading, unhealthy time.Duration) {
	if prev := st.s.Evidence.last(); prev != nil && prev.Kind == RecReading && prev.Count > 1 {
		return // the same answer as last time: already said
	}
	switch {
	case rd.Power == PowerOff && rd.OSRunning:
		st.event(true, "FenceBMCContradiction", "BMC reads Off but BootProgress says the OS is running; not proof of off")
	case rd.Power == PowerOff:
		st.event(false, "FenceWaiting", "BMC reads Off, but not after the failure began; reading again")
	case rd.Power == PowerOn && !st.s.Manual:
		st.event(false, "FenceWaiting", "BMC reads On; the node will be powered off if it stays unhealthy for %s (now %s)",
			st.p.FenceAfter, unhealthy.Round(time.Second))
	default:
		st.event(false, "FenceWaiting", "BMC reads %s; not proof of off, reading again", rd.Power)
	}
}

func (st *stepper) enterConfirming(rd Reading) {
	st.s.OffRun = OffRun{}.Observe(rd, st.offNotBefore(), st.p.MaxReadGap)
	st.enter(ConfirmingOff, "BMC read Off")
	st.event(false, "FenceConfirmingOff", "BMC reads Off; confirming it stays off (%d reads over %s)", st.p.SettleReads, st.p.SettleWindow)
	st.scheduleRead(st.p.SettleInterval())
}

func (st *stepper) sendPowerOff() {
	st.s.PowerOffAt = st.now
	st.s.PowerOffs++
	st.s.OffRun = OffRun{}
	if st.s.Phase != PoweringOff {
		st.enter(PoweringOff, "powering off")
	}
	st.event(true, "FencePowerOff", "sending ForceOff (attempt %d of %d): the node is unhealthy for %s and its BMC reads On",
		st.s.PowerOffs, st.p.PowerOffAttempts, UnhealthyFor(st.node(), st.now).Round(time.Second))
	st.emit(ActPowerOff)
	st.scheduleRead(st.p.PowerPollInterval)
}

// backFromOffRun returns to where a broken run came from: PoweringOff if we
// powered the node off in this fence (its timeout still runs), else Suspect.
func (st *stepper) backFromOffRun(note string) {
	st.s.OffRun = OffRun{}
	if !st.s.PowerOffAt.IsZero() {
		st.enter(PoweringOff, note)
		st.scheduleRead(st.p.PowerPollInterval)
		return
	}
	st.enter(Suspect, note)
	st.scheduleRead(st.p.ReadInterval)
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
	run := st.extend(rd)
	if run.Count == 0 {
		st.event(true, "FenceOffRunBroken", "BMC read %s after %d Off reads; not proof of off, starting over", readingText(rd), st.s.OffRun.Count)
		if rd.Failure != "" {
			st.s.ReadFailures++
		}
		st.backFromOffRun("off run broken")
		return
	}
	st.s.ReadFailures = 0
	st.s.OffRun = run
	if !run.Settled(st.p) {
		st.scheduleRead(st.p.SettleInterval())
		return
	}
	if !st.admit() {
		st.scheduleRead(st.p.SettleInterval())
		return
	}
	st.enter(Tainting, "off settled")
	st.event(false, "FenceConfirmedOff", "BMC read Off %d times over %s (from %s to %s), all after the failure began at %s",
		run.Count, run.Last.Sub(run.First).Round(time.Millisecond), stamp(run.First), stamp(run.Last), stamp(st.s.FailureStart))
	st.applyTaint()
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

func (st *stepper) poweringOff() {
	if st.leavePreTaint() {
		return
	}
	switch st.in.Kind {
	case InputResult:
		if st.in.Result.Action == ActPowerOff && st.in.Result.Err != "" {
			// A refusal (409 when already off, an error) proves nothing
			// either way: read back.
			st.event(true, "FencePowerOffFailed", "ForceOff failed: %s; reading back anyway", st.in.Result.Err)
		}
		st.readIfDue()
		return
	case InputReading:
	case InputTick, InputCommand:
		st.readIfDue()
		return
	}
	rd := st.in.Reading
	if st.validOff(rd) {
		st.s.ReadFailures = 0
		st.enterConfirming(rd)
		return
	}
	if rd.Failure != "" {
		st.s.ReadFailures++
	} else {
		st.s.ReadFailures = 0
	}
	if st.now.Sub(st.s.PowerOffAt) < st.p.PowerTimeout {
		st.scheduleRead(st.backoff(st.p.PowerPollInterval))
		return
	}
	if st.s.PowerOffs >= st.p.PowerOffAttempts {
		st.enterStuck(StuckPowerOffIgnored, "power-off ignored")
		st.event(true, "FenceStuck", "BMC accepted ForceOff %d times but still reads %s after %s; not tainting. Check the machine, then `kubectl fence confirm` or `abort`",
			st.s.PowerOffs, readingText(rd), st.p.PowerTimeout)
		return
	}
	if !st.powerOffDue() {
		// The node showed life since our request; reconsider from Suspect.
		st.enter(Suspect, "power-off no longer due")
		st.scheduleRead(st.p.ReadInterval)
		return
	}
	if !st.admit() {
		st.scheduleRead(st.p.PowerPollInterval)
		return
	}
	st.sendPowerOff()
}

// powerOffDue: the node has been unhealthy for FenceAfter, or a human asked.
// Every ForceOff, first or repeated, needs it.
func (st *stepper) powerOffDue() bool {
	return !st.s.Attested && (st.s.Manual || UnhealthyFor(st.node(), st.now) >= st.p.FenceAfter)
}

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
	st.s.TaintOwned = true
	st.s.TaintedAt = st.now
	st.s.NextReadAt = time.Time{}
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
			st.taintApplied(evidenceSummary(st.s))
			return
		}
		st.s.ReadFailures++
		st.event(true, "FenceTaintFailed", "applying the taint failed: %s; will re-read the BMC and retry", st.in.Result.Err)
		st.scheduleRead(st.backoff(st.p.PowerPollInterval))
	case InputReading:
		rd := st.in.Reading
		if st.s.Attested {
			st.retryTaintIfDue()
			return
		}
		run := st.extend(rd)
		switch {
		case run.Count == 0:
			st.event(true, "FenceOffRunBroken", "BMC read %s just before the taint; not tainting", readingText(rd))
			st.backFromOffRun("off run broken before taint")
		case !run.Settled(st.p):
			// Too long since the run's last read (an agent resuming here):
			// the machine was not watched, so confirm again.
			st.s.OffRun = run
			st.enter(ConfirmingOff, "off run restarted")
			st.scheduleRead(st.p.SettleInterval())
		default:
			st.s.OffRun = run
			st.applyTaint()
		}
	case InputTick, InputCommand:
		if st.s.Attested {
			st.retryTaintIfDue()
			return
		}
		// Never taint on an old reading: a retry, or an agent resuming
		// here, reads the BMC first (invariant 1, fresh Off).
		st.readIfDue()
	}
}

func (st *stepper) retryTaintIfDue() {
	if st.now.Before(st.s.NextReadAt) {
		st.wakeAtTime(st.s.NextReadAt)
		return
	}
	st.applyTaint()
}

func evidenceSummary(s State) string {
	if s.Attested {
		return "off attested by " + s.By
	}
	return fmt.Sprintf("BMC read Off %d times over %s", s.OffRun.Count, s.OffRun.Last.Sub(s.OffRun.First).Round(time.Millisecond))
}

// ---- after the taint --------------------------------------------------------

// taintLost handles our taint vanishing under us (someone removed it). The
// node starts over: if it is still down it is suspected and proven off again.
func (st *stepper) taintLost() bool {
	if st.node().Taint != TaintAbsent {
		return false
	}
	st.reset("taint removed by someone else")
	st.event(true, "FenceTaintLost", "the out-of-service taint was removed by someone else; starting over")
	return true
}

func (st *stepper) detaching() {
	if st.taintLost() {
		return
	}
	if st.recoveredAfterTaint() {
		st.enterUntainting()
		return
	}
	n := st.node()
	if n.Pods == 0 && n.VolumeAttachments == 0 {
		st.s.FencedAt = st.now
		st.event(false, "FenceDetached", "no pods or VolumeAttachments left on the node, %s after the taint", st.now.Sub(st.s.TaintedAt).Round(time.Millisecond))
		st.enter(Fenced, "detached")
		if st.p.PowerOnAfterDetach {
			st.enterPoweringOn("policy powerOnAfterDetach")
		}
		return
	}
	if st.p.ForceDeletePods && n.Terminating > 0 {
		st.emit(ActDeletePods)
	}
	if !st.now.Before(st.s.NextReadAt) {
		st.s.NextReadAt = st.now.Add(st.p.DetachPoll)
	}
	st.wakeAtTime(st.s.NextReadAt)
	waited := st.now.Sub(st.s.TaintedAt)
	if waited >= st.p.DetachTimeout && !st.s.Warned {
		st.s.Warned = true
		st.event(true, "FenceDetachBlocked", "%d pods and %d VolumeAttachments still bound %s after the taint: %s",
			n.Pods, n.VolumeAttachments, waited.Round(time.Second), blockerList(n.Blockers))
	} else if !st.s.Warned {
		st.wake(st.p.DetachTimeout - waited)
	}
}

func blockerList(b []string) string {
	if len(b) == 0 {
		return "(none named)"
	}
	out := ""
	for i, s := range b {
		if i > 0 {
			out += ", "
		}
		out += s
	}
	return out
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
		if st.in.Result.Action == ActPowerOn && st.in.Result.Err != "" {
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
// and goes back to Healthy (invariant 4).
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
	st.s.Attested = false
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
	if st.recovered() {
		st.reset("recovered")
		st.event(false, "FenceRecovered", "node is Ready again with a fresh heartbeat; released from Stuck")
		return
	}
	if st.s.Stuck == StuckAborted || n.Excluded || !n.HasBMC {
		return // held until a human acts or the node recovers
	}
	// Keep watching slowly: if someone powers the machine off by hand,
	// the settle rule still decides. No power command is sent from here.
	if st.in.Kind != InputReading {
		st.readIfDue()
		return
	}
	rd := st.in.Reading
	if st.validOff(rd) && st.admit() {
		st.enterConfirming(rd)
		return
	}
	st.scheduleRead(st.p.StuckReadInterval)
}

func (st *stepper) maintenance() {
	if !st.node().Maintenance {
		st.reset("maintenance over")
		st.healthy()
	}
}

// ---- human commands ---------------------------------------------------------

func (st *stepper) command() {
	c := st.in.Command
	n := st.node()
	st.s.Evidence.add(Record{At: st.now, Kind: RecCommand, Phase: st.s.Phase, Note: commandNote(c)})
	refuse := func(why string) {
		// Recorded in the state as well as said in an Event: the write
		// that acknowledges the request carries it, so whoever waits on the
		// request reads the answer with the acknowledgement (Events trail).
		st.s.Evidence.add(Record{At: st.now, Kind: RecRefusal, Phase: st.s.Phase, Note: why})
		st.event(true, "FenceCommandRefused", "%s requested by %s refused: %s", c.Kind, c.User, why)
	}
	switch c.Kind {
	case CmdFence:
		switch {
		case n.Maintenance:
			refuse("the node is under maintenance")
		case n.Excluded || !n.HasBMC:
			refuse("the node is " + unfenceableWhy(n) + " (use confirm if you know it is off)")
		case st.looksAlive():
			refuse("the node is Ready with a fresh heartbeat")
		case st.s.Phase.InFlight():
			// The agent may have started this fence a moment before the
			// request arrived. Refusing would race the human against the
			// agent; what they asked for is under way, so it goes on as
			// theirs: no thresholds, no storm guard, nothing else changes.
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
			// count (invariant 1 c).
			st.s.PowerOffs = 0
			st.event(false, "FenceManual", "fence requested by %s: %s", c.User, c.Reason)
			if keep {
				st.s.NextReadAt = time.Time{}
				return
			}
			st.enterSuspect("manual fence by " + c.User)
		}
	case CmdConfirm:
		switch {
		case n.Maintenance:
			refuse("the node is under maintenance")
		case n.Excluded:
			refuse("the node is excluded from fencing by label")
		case !st.s.Phase.PreTaint() && st.s.Phase != Stuck || n.Taint == TaintOurs:
			refuse("the node is already tainted (" + st.s.Phase.String() + ")")
		case st.looksAlive():
			refuse("the node is Ready with a fresh heartbeat")
		default:
			if st.s.Phase == Healthy || st.s.FailureStart.IsZero() {
				st.s.FailureStart = n.HeartbeatAt
			}
			st.s.Attested, st.s.By, st.s.Stuck = true, c.User, StuckNone
			st.event(true, "FenceConfirmedByHuman", "%s attests the node is off: %s", c.User, c.Reason)
			st.enter(Tainting, "off attested by "+c.User)
			st.s.NextReadAt = time.Time{}
		}
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

func commandNote(c Command) string {
	note := c.Kind.String() + " by " + c.User
	if c.Reason != "" {
		note += ": " + c.Reason
	}
	return note
}
