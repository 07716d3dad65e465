package fence

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The tests in this file are named for the defects the third, independent
// safety review found (issue 17, "Safety, round three"). Each failed on the
// engine before its fix.

// Defect 1: under the powerOffNotReadyAfter opt-in the kubelet renews until
// our ForceOff. Behind a BMC that accepts the ForceOff and reads Off while
// the machine runs, the 2 s poll and the 6 s settle fit between two 10 s
// renewals: in some renewal phases the node was tainted before its next
// renewal could contradict the BMC. The Lease must have been silent for
// suspectAfter since our ForceOff before such a taint.
func TestANotReadyFenceTaintsOnlyAfterTheLeaseIsSilentPastOurForceOff(t *testing.T) {
	p := DefaultPolicy()
	p.PowerOffNotReadyAfter = time.Minute
	for ph := time.Duration(0); ph < 10*time.Second; ph += 500 * time.Millisecond {
		// The kubelet renews every 10 s, at ph + 10 s × k; the runtime is
		// down, so the node is NotReady (Ready=False) throughout.
		renewing := func(now time.Time) NodeView {
			last := t0.Add(ph + now.Sub(t0.Add(ph)).Truncate(10*time.Second))
			if last.After(now) {
				last = last.Add(-10 * time.Second)
			}
			return view(heartbeat(last.Sub(t0)), readyFalse(0))
		}
		// The BMC accepts our ForceOff, ignores it and reads Off.
		lies := func(_ time.Time, firstOff time.Time) Power {
			if firstOff.IsZero() {
				return PowerOn
			}
			return PowerOff
		}
		tainted, firstOff, s := runWorld(t, p, bmcWorld{node: renewing, power: lies, answerOff: accepted}, 5*time.Minute)
		if !tainted.IsZero() {
			n := renewing(tainted)
			t.Errorf("renewal phase %s: tainted %s after our ForceOff, the kubelet's last renewal %s before the taint (its next one comes %s later): the Lease never had the chance to contradict the BMC (phase %v)",
				ph, tainted.Sub(firstOff), tainted.Sub(n.RenewedAt), n.RenewedAt.Add(10*time.Second).Sub(tainted), s.Phase)
			continue
		}
		if s.Phase != Stuck || s.Stuck != StuckContradiction {
			t.Errorf("renewal phase %s: ended %v (%v), want Stuck on the contradiction", ph, s.Phase, s.Stuck)
		}
	}
}

// Defect 2: fence.Adopt kept the NotReady-fence flag, and the engine
// trusted it. An operator who turned the opt-in off and restarted the agent
// still got a ForceOff to a renewing node whose BMC reads On. Whether a
// fence may rest on NotReady is the current policy's call, on our clock.
func TestANotReadyFenceNeedsTheOptInNowOnOurClock(t *testing.T) {
	optIn := DefaultPolicy()
	optIn.PowerOffNotReadyAfter = 2 * time.Minute
	now := at(10 * time.Minute)
	theirs := State{Writer: "old-agent", Phase: Suspect, Since: at(5 * time.Minute), FailureStart: at(5 * time.Minute),
		NotReadyFence: true, AdmittedAt: at(5 * time.Minute)}
	tests := []struct {
		name  string
		p     Policy
		s     State
		since time.Duration // NotReady since, on our clock
	}{
		{"opt-in turned off, state adopted from the old agent", DefaultPolicy(), theirs, 0},
		{"opt-in turned off, our own state", DefaultPolicy(), func() State { s := theirs; s.Writer = "us"; return s }(), 0},
		{"opt-in on, but we have seen the node NotReady only 30 s", optIn, theirs, 10*time.Minute - 30*time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The kubelet renews (3 s ago); the runtime is down.
			n := view(heartbeat(now.Add(-3*time.Second).Sub(t0)), readyFalse(tt.since))
			s := Adopt(tt.p, tt.s, "us", n, now)
			out := Step(tt.p, s, reading(n, now, PowerOn), now)
			if has(out, ActPowerOff) {
				t.Fatalf("ForceOff to a renewing node whose BMC reads On (opt-in %s, NotReady for %s on our clock): %v",
					tt.p.PowerOffNotReadyAfter, now.Sub(n.NotReadySince), eventReasons(out))
			}
			if out.State.NotReadyFence {
				t.Errorf("the fence still rests on NotReady: %+v", out.State)
			}
		})
	}
}

// Defect 3: the taint waived the storm check when our ForceOff was
// accepted, including when the engine itself held that the Off was not
// ours (the machine ran after the acceptance, or the Off began later than
// ownOffWithin after it). Only an Off of ours is exempt.
func TestStormHoldsBackAnOffThatIsNotOurs(t *testing.T) {
	storm := func(in Input, now time.Time) Input {
		in.Fleet = FleetView{Nodes: 5, Unhealthy: 3, APIFreshAt: now}
		return in
	}
	tests := []struct {
		name string
		// power is what the BMC reads s seconds after our accepted
		// ForceOff at 20 s.
		power func(s float64) Power
	}{
		{"the machine ran after the acceptance", func(s float64) Power {
			if s < 12 {
				return PowerOn
			}
			return PowerOff
		}},
		{"the Off began later than ownOffWithin", func(s float64) Power {
			if s < 9 {
				return PowerOn
			}
			if s < 11 {
				return PowerPoweringOff
			}
			return PowerOff
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(t)
			d.p.FenceAfter = d.p.SuspectAfter
			n := view()
			d.suspect(n)
			d.step(reading(n, at(sec(20)), PowerOn), at(sec(20)))
			d.wantPhase(PoweringOff)
			d.step(result(n, at(sec(20.1)), ActPowerOff, ""), at(sec(20.1)))
			for s := 2.0; s < 120; s += 2 {
				now := at(sec(20 + s))
				if out := d.step(storm(reading(n, now, tt.power(s)), now), now); has(out, ActApplyTaint) {
					t.Fatalf("tainted during a storm %gs after our ForceOff, on an Off that is not ours (accepted %v, untrusted %v, run %+v)",
						s, d.s.PowerOffAccepted, d.s.AcceptanceUntrusted, d.s.OffRun)
				}
			}
		})
	}
}

// "attempt 4 of 3": an adopted fence kept the other process's count of
// ForceOffs, sent its own anyway and numbered it past the limit. A new
// process counts its own attempts.
func TestAnAdoptedFenceCountsItsOwnAttempts(t *testing.T) {
	p := DefaultPolicy()
	now := at(10 * time.Minute)
	theirs := State{Writer: "old-agent", Phase: PoweringOff, Since: at(9 * time.Minute), FailureStart: t0,
		AdmittedAt: at(8 * time.Minute), PowerOffAt: at(9 * time.Minute), PowerOffs: 3, PowerOffAccepted: true}
	n := view(notReady(sec(40)))
	s := Adopt(p, theirs, "us", n, now)
	out := Step(p, s, reading(n, now, PowerOn), now)
	for _, a := range out.Actions {
		if a.Kind == ActEvent && a.Event.Reason == "FencePowerOff" && !strings.Contains(a.Event.Message, "attempt 1 of 3") {
			t.Errorf("our first ForceOff says %q, want attempt 1 of 3", a.Event.Message)
		}
	}
	if !has(out, ActPowerOff) {
		t.Fatalf("adopted fence: actions %v, want our own ForceOff", kinds(out))
	}
}

// A fence back in Suspect with every attempt spent (its power-off stopped
// being due, then became due again) numbered its next ForceOff past the
// limit. The BMC ignored all of them: the node is held for a human.
func TestAFenceWithItsAttemptsSpentIsHeldNotPoweredOffAgain(t *testing.T) {
	p := DefaultPolicy()
	now := at(10 * time.Minute)
	s := State{Writer: "us", Phase: Suspect, Since: at(9 * time.Minute), FailureStart: t0, AdmittedAt: at(9 * time.Minute),
		PowerOffAt: at(8 * time.Minute), PowerOffs: p.PowerOffAttempts}
	out := Step(p, s, reading(view(notReady(sec(40))), now, PowerOn), now)
	if has(out, ActPowerOff) {
		t.Fatalf("ForceOff #%d of %d: %v", s.PowerOffs+1, p.PowerOffAttempts, kinds(out))
	}
	if out.State.Phase != Stuck || out.State.Stuck != StuckPowerOffIgnored || !slices.Contains(eventReasons(out), "FenceStuck") {
		t.Errorf("phase %v (%v), events %v; want Stuck, PowerOffIgnored", out.State.Phase, out.State.Stuck, eventReasons(out))
	}
}

// Found by the simulation's split brains over a partition (seeds 22777 and
// 71908): the cooldown counted from a fence's admission, not from its
// latest ForceOff. A fence admitted long ago re-sent its ForceOff to a
// running machine (its BMC had ignored the first), then left flight (the
// node renewed: a contradiction); another fence was admitted two seconds
// later, and two running machines were powered off within a few seconds
// with maxConcurrentFences 1. Every ForceOff restarts the cooldown.
func TestAResentForceOffRestartsTheCooldown(t *testing.T) {
	d := newDriver(t)
	d.p.FenceAfter = d.p.SuspectAfter
	n := view()
	d.suspect(n)
	d.step(reading(n, at(sec(20)), PowerOn), at(sec(20)))
	d.step(result(n, at(sec(20.1)), ActPowerOff, ""), at(sec(20.1)))
	var resent time.Time
	for s := 22.0; s < 120 && resent.IsZero(); s += 2 {
		now := at(sec(s))
		if out := d.step(reading(n, now, PowerOn), now); has(out, ActPowerOff) {
			resent = now
		}
	}
	if resent.IsZero() {
		t.Fatal("the ForceOff was never sent again")
	}
	if !d.s.AdmittedAt.Equal(resent) {
		t.Errorf("after our ForceOff again at +%s: AdmittedAt +%s; the cooldown must count from the latest ForceOff", resent.Sub(t0), d.s.AdmittedAt.Sub(t0))
	}
}
