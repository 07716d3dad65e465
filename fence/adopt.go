package fence

import "time"

// Adopt makes a state that another process wrote (another replica, an
// earlier run of this agent, the CLI) usable on our clock (invariant 5: one
// clock per proof). Its times were read off a clock we cannot compare with
// ours, skewed by up to tens of seconds, so none of them may enter a proof:
//
//   - an Off run and our knowledge of a ForceOff start over: this process
//     sends its own ForceOff and collects its own run;
//   - the failure starts at heartbeatAt, our own last sign of life for the
//     node (for a new process, when it first saw the node);
//   - a taint's time becomes now, so it is removed only after a renewal we
//     observed after adopting it;
//   - a human's attestation is dropped: its age cannot be told, and a
//     confirm stands only for AttestationTTL on the clock that took it;
//   - timers fire now, and an admission counts from now for the cooldown;
//   - the count of ForceOffs starts over: this process numbers and bounds
//     its own attempts (PowerOffAttempts);
//   - a fence that rested on NotReady (the powerOffNotReadyAfter opt-in)
//     does so only if the opt-in holds now, under our policy and on our
//     clock (n.NotReadySince is when this process saw the node NotReady);
//     otherwise it is an ordinary fence, which a renewal ends.
//
// What is kept: the phase where it still holds, who asked, the taint's
// ownership, a BMC's voided acceptances (AcceptanceUntrusted: what the
// machine did is no clock reading) and the evidence (its times are the
// writer's, for humans). n is our current view of the node: the failure
// starts at n.HeartbeatAt, our own last sign of life for it (for a new
// process, when it first saw the node).
func Adopt(p Policy, s State, writer string, n NodeView, now time.Time) State {
	if s.Writer == writer {
		return s
	}
	heartbeatAt := n.HeartbeatAt
	a := s
	a.Writer = writer
	a.Since = now
	a.NextReadAt = time.Time{}
	a.ReadFailures = 0
	a.OffRun = OffRun{}
	a.PowerOffAt, a.PowerOffAccepted, a.PowerOffs, a.PowerOffSentAt = time.Time{}, false, 0, time.Time{}
	a.NotReadyFence = keepNotReadyFence(p, a, n, now)
	a.Target = ""
	a.Last = Reading{}
	a.Warned = false
	if !a.AdmittedAt.IsZero() {
		a.AdmittedAt = now
	}
	if !a.FailureStart.IsZero() {
		a.FailureStart = heartbeatAt
	}
	if !a.TaintedAt.IsZero() {
		a.TaintedAt = now
		if a.KeptOff > 0 {
			// The writer may have just forced the machine off again
			// (KeptOffAt is not persisted): the node is back only on
			// a renewal written after now.
			a.KeptOffAt = now
		}
	}
	if !a.PowerOnAt.IsZero() {
		a.PowerOnAt = now
	}
	if !a.FencedAt.IsZero() {
		a.FencedAt = now
	}
	a.Attested, a.AttestedAt, a.Forced = false, time.Time{}, false
	if !a.DiagnoseAt.IsZero() {
		// A diagnostic interrupt went out: its wait starts over on our
		// clock (and no second one goes out).
		a.DiagnoseAt = now
	}
	switch a.Phase {
	case ConfirmingOff, PoweringOff, Tainting:
		// Everything these phases rest on was on the other clock.
		a.Phase = Suspect
		a.Evidence.add(Record{At: now, Kind: RecTransition, Phase: Suspect, From: s.Phase, Note: "adopted from another process: proving off again on our clock"})
	case Healthy, Suspect, Detaching, Fenced, PoweringOn, Recovering, Untainting, Stuck, Maintenance:
	}
	return a
}
