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

func command(n NodeView, now time.Time, c Command) Input {
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

// checkInvariants is the oracle of doc.go's invariants for one Step. It is shared by
// the table tests, the exhaustive test and the fuzz target.
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
			// Invariant 1.
			if n.Taint != TaintAbsent {
				return fmt.Errorf("ApplyTaint on a node that already carries the taint (%v)", n.Taint)
			}
			if n.Maintenance || n.Excluded {
				return fmt.Errorf("ApplyTaint on a node in maintenance or excluded")
			}
			if s.Phase != Tainting {
				return fmt.Errorf("ApplyTaint from phase %v", s.Phase)
			}
			if s.Attested {
				break
			}
			if !n.HasBMC {
				return fmt.Errorf("ApplyTaint without a BMC and without a human's attestation")
			}
			run := s.OffRun
			if !run.Settled(p) {
				return fmt.Errorf("ApplyTaint with an unsettled run %+v", run)
			}
			if !run.First.After(s.FailureStart) || (!s.PowerOffAt.IsZero() && !run.First.After(s.PowerOffAt)) {
				return fmt.Errorf("ApplyTaint with a run starting %v, not after failure start %v and power-off %v", run.First, s.FailureStart, s.PowerOffAt)
			}
			if in.Kind != InputReading || in.Reading.Power != PowerOff || in.Reading.Failure != "" || in.Reading.OSRunning || !in.Reading.At.Equal(run.Last) {
				return fmt.Errorf("ApplyTaint not on a fresh exact-Off reading (input %v, reading %+v, run last %v)", in.Kind, in.Reading, run.Last)
			}
		case ActPowerOff:
			// Invariants 2 and 6.
			if n.Maintenance || n.Excluded || !n.HasBMC {
				return fmt.Errorf("PowerOff on a node in maintenance, excluded or without BMC")
			}
			if !s.Manual && !Admit(p, in.Fleet, now).Admitted() {
				return fmt.Errorf("PowerOff refused by the storm guard (%v) but emitted", Admit(p, in.Fleet, now))
			}
			if !s.Manual && UnhealthyFor(n, now) < p.FenceAfter {
				return fmt.Errorf("PowerOff after only %s unhealthy (fenceAfter %s)", UnhealthyFor(n, now), p.FenceAfter)
			}
			if s.Phase != PoweringOff {
				return fmt.Errorf("PowerOff from phase %v", s.Phase)
			}
		case ActRemoveTaint:
			// Invariant 4.
			if !s.TaintOwned || n.Taint != TaintOurs {
				return fmt.Errorf("RemoveTaint of a taint that is not ours (owned %v, node %v)", s.TaintOwned, n.Taint)
			}
			if n.Ready != ReadyTrue || !n.RenewedAt.After(s.TaintedAt) {
				return fmt.Errorf("RemoveTaint while Ready=%v, renewal %v not after taint %v", n.Ready, n.RenewedAt, s.TaintedAt)
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
