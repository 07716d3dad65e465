package fence

import (
	"testing"
	"time"
)

// A world of one node for the engine alone: the node view and the BMC's
// power as functions of time, and the BMC's answer to a ForceOff.
type bmcWorld struct {
	node      func(now time.Time) NodeView
	power     func(now time.Time, firstOff time.Time) Power
	answerOff func(n NodeView, now time.Time) Input
}

// runWorld steps the engine against w for up to d and reports the first
// taint (zero if none), the first ForceOff, and the final state.
func runWorld(t *testing.T, p Policy, w bmcWorld, d time.Duration) (tainted, firstOff time.Time, s State) {
	t.Helper()
	now := at(0)
	var pending []Input
	for now.Before(at(d)) {
		n := w.node(now)
		in := tick(n, now)
		if len(pending) > 0 {
			in, pending = pending[0], pending[1:]
			in.Node, in.Fleet = n, freshFleet(now)
		}
		out := Step(p, s, in, now)
		s = out.State
		for _, a := range out.Actions {
			switch a.Kind {
			case ActApplyTaint:
				return now, firstOff, s
			case ActReadPower:
				pending = append(pending, reading(n, now, w.power(now, firstOff)))
			case ActPowerOff:
				if firstOff.IsZero() {
					firstOff = now
				}
				pending = append(pending, w.answerOff(n, now))
			}
		}
		if len(pending) == 0 {
			now = now.Add(out.RecheckAfter)
		} else {
			now = now.Add(100 * time.Millisecond)
		}
	}
	return time.Time{}, firstOff, s
}

func accepted(n NodeView, now time.Time) Input { return result(n, now, ActPowerOff, "") }

// hungNode: the kubelet renewed last at t0 and is NotReady since +40 s.
func hungNode(time.Time) NodeView { return view(heartbeat(0), notReady(40*time.Second)) }

// powerAfterOff: On until our first ForceOff, then the phases given as
// (until, power) after it.
func powerAfterOff(phases ...struct {
	until time.Duration
	power Power
}) func(now, firstOff time.Time) Power {
	return func(now, firstOff time.Time) Power {
		if firstOff.IsZero() {
			return PowerOn
		}
		d := now.Sub(firstOff)
		for _, ph := range phases {
			if d < ph.until {
				return ph.power
			}
		}
		return PowerOn
	}
}

type phase = struct {
	until time.Duration
	power Power
}

// BMCs that accept a command and ignore it, machines powered on again
// behind our back, and ForceOffs that never left the agent: none of them
// may end in a taint during an Off we did not cause, nor in a node Stuck
// for a command no BMC ever saw. Found by an independent review.
func TestHostileBMCs(t *testing.T) {
	notReadyOptIn := DefaultPolicy()
	notReadyOptIn.PowerOffNotReadyAfter = time.Minute
	tests := []struct {
		name   string
		policy Policy
		world  bmcWorld
		// noTaintWithin: no taint in [firstOff+from, firstOff+to).
		from, to time.Duration
		noTaint  bool // no taint at all
	}{
		{
			// The kubelet renews every 10 s; Ready=False (runtime down).
			// Its BMC entry reads Off (a caching BMC, or another
			// machine) and answers "already off": the Lease says alive.
			name:   "NotReady opt-in, renewing node, BMC stuck at Off",
			policy: notReadyOptIn,
			world: bmcWorld{
				node: func(now time.Time) NodeView {
					return view(heartbeat(now.Sub(t0).Truncate(10*time.Second)), readyFalse(0))
				},
				power:     func(time.Time, time.Time) Power { return PowerOff },
				answerOff: alreadyOff,
			},
			noTaint: true,
		},
		{
			// Our ForceOff took; then the machine was powered on
			// (power restore, a button) and its POST power-cycles it
			// with a 20 s off-dwell: that Off is not ours.
			name:   "accepted ForceOff, machine On again, then a restart's dwell",
			policy: DefaultPolicy(),
			world: bmcWorld{node: hungNode, answerOff: accepted, power: powerAfterOff(
				phase{4 * time.Second, PowerOff}, phase{20 * time.Second, PowerOn}, phase{40 * time.Second, PowerOff})},
			from: 20 * time.Second, to: 40 * time.Second,
		},
		{
			// The BMC accepts our ForceOff and does nothing (busy, or
			// a liar); 20 s later the hung OS's watchdog power-cycles
			// the machine with a 20 s off-dwell.
			name:   "accepted but ignored ForceOff, then a watchdog power cycle",
			policy: DefaultPolicy(),
			world: bmcWorld{node: hungNode, answerOff: accepted, power: powerAfterOff(
				phase{20 * time.Second, PowerOn}, phase{40 * time.Second, PowerOff})},
			from: 20 * time.Second, to: 40 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tainted, firstOff, s := runWorld(t, tt.policy, tt.world, 10*time.Minute)
			switch {
			case tt.noTaint && !tainted.IsZero():
				t.Fatalf("tainted at +%s (phase %s, evidence %v)", tainted.Sub(t0), s.Phase, s.Evidence.Records())
			case !tainted.IsZero() && !tainted.Before(firstOff.Add(tt.from)) && tainted.Before(firstOff.Add(tt.to)):
				t.Fatalf("tainted %s after our first ForceOff, inside an off-dwell we did not cause (evidence %v)", tainted.Sub(firstOff), s.Evidence.Records())
			}
		})
	}
}

// A ForceOff the runner never sent (its server recheck or the identity
// check failed first) is not an attempt the BMC ignored: it must not
// spend PowerOffAttempts, nor make the node Stuck.
func TestForceOffNotSentIsNotAnAttempt(t *testing.T) {
	notSent := func(n NodeView, now time.Time) Input {
		in := result(n, now, ActPowerOff, "not acting: cannot read the node from the API server: etcdserver: request timed out")
		in.Result.NotSent = true
		return in
	}
	_, _, s := runWorld(t, DefaultPolicy(), bmcWorld{node: hungNode, answerOff: notSent,
		power: func(time.Time, time.Time) Power { return PowerOn }}, 10*time.Minute)
	if s.Phase == Stuck {
		t.Fatalf("Stuck (%v) though no ForceOff reached the BMC (evidence %v)", s.Stuck, s.Evidence.Records())
	}
	if s.PowerOffs != 0 {
		t.Errorf("PowerOffs = %d, want 0: none was sent", s.PowerOffs)
	}
}
