package fence

import (
	"testing"
	"time"
)

// runPowerLoss drives the engine as the runner does, on a fake clock, for a
// machine that lost power at its BMC's event (the Lease renewed at 0, the
// event at failAt): every Output's RecheckAfter is kept, a read answers
// Off after readLatency, a ForceOff is accepted after readLatency, our view
// of the API server is stale by stale. It returns when the taint was
// applied (zero if never) and when the ForceOff was sent.
func runPowerLoss(t *testing.T, p Policy, failAt, stale, readLatency time.Duration) (tainted, forceOff time.Duration) {
	t.Helper()
	n := view(heartbeat(0), notReady(0), offEvent(failAt))
	fleet := func(now time.Time) FleetView {
		f := freshFleet(now)
		f.APIFreshAt = now.Add(-stale)
		return f
	}
	s := State{}
	now := at(failAt)
	in := Input{Kind: InputTick, Node: n, Fleet: fleet(now)}
	for now.Before(at(time.Minute)) {
		out := stepChecked(t, p, s, in, now)
		s = out.State
		next := Input{Kind: InputTick, Node: n}
		wait := out.RecheckAfter
		for _, a := range out.Actions {
			switch a.Kind {
			case ActReadPower:
				next = Input{Kind: InputReading, Node: n, Reading: Reading{At: now, Power: PowerOff}}
				wait = readLatency
			case ActPowerOff:
				forceOff = now.Sub(t0)
				next = Input{Kind: InputResult, Node: n, Result: Result{Action: ActPowerOff}}
				wait = readLatency
			case ActApplyTaint:
				return now.Sub(t0), forceOff
			}
		}
		now = now.Add(wait)
		next.Fleet = fleet(now)
		in = next
	}
	return 0, forceOff
}

func TestAnEventStartedPowerLossIsTaintedWhenTheSilenceReachesSuspectAfter(t *testing.T) {
	p := DefaultPolicy()
	const latency = 20 * time.Millisecond
	for _, c := range []struct {
		name          string
		failAt, stale time.Duration
	}{
		{"failure right after a renewal, a fresh view", sec(0.5), 0},
		{"failure right after a renewal, a view 0.7 s stale", sec(0.5), sec(0.7)},
		{"failure 5 s after a renewal", sec(5), sec(0.3)},
		{"failure 9.5 s after a renewal", sec(9.5), sec(0.9)},
	} {
		t.Run(c.name, func(t *testing.T) {
			tainted, forceOff := runPowerLoss(t, p, c.failAt, c.stale, latency)
			if tainted == 0 {
				t.Fatalf("never tainted (ForceOff at +%s)", forceOff)
			}
			if tainted < p.SuspectAfter {
				t.Fatalf("tainted at +%s, before suspectAfter %s of silence", tainted, p.SuspectAfter)
			}
			// The floor is the Lease witness: a read sent the moment
			// the silence reaches suspectAfter, its answer, the taint.
			if limit := p.SuspectAfter + 2*latency; tainted > limit {
				t.Fatalf("tainted at +%s (ForceOff at +%s), want by +%s: the settle overlapped the silence, only its read at the floor remains", tainted, forceOff, limit)
			}
		})
	}
}

func TestAPowerLossFenceReadsBackAsSoonAsItsForceOffIsAccepted(t *testing.T) {
	p := DefaultPolicy()
	n := view(heartbeat(0), notReady(0))
	out := stepChecked(t, p, State{}, tick(n, at(sec(21))), at(sec(21)))
	out = stepChecked(t, p, out.State, reading(n, at(sec(21.1)), PowerOff), at(sec(21.1)))
	if !has(out, ActPowerOff) {
		t.Fatalf("actions %v, want a ForceOff to the machine reading Off", kinds(out))
	}
	out = stepChecked(t, p, out.State, result(n, at(sec(21.2)), ActPowerOff, ""), at(sec(21.2)))
	if !has(out, ActReadPower) {
		t.Fatalf("after the accepted ForceOff: actions %v (recheck after %s), want a read now", kinds(out), out.RecheckAfter)
	}

	// A ForceOff to a machine that read On (no power loss) keeps the
	// read-back cadence: it takes time to go off.
	n = view(heartbeat(0), notReady(0))
	out = stepChecked(t, p, State{}, tick(n, at(sec(21))), at(sec(21)))
	now := p.FenceAfter + sec(1)
	out = stepChecked(t, p, out.State, reading(n, at(now), PowerOn), at(now))
	if !has(out, ActPowerOff) {
		t.Fatalf("actions %v, want a ForceOff at fenceAfter", kinds(out))
	}
	out = stepChecked(t, p, out.State, result(n, at(now+sec(0.1)), ActPowerOff, ""), at(now+sec(0.1)))
	if has(out, ActReadPower) || out.RecheckAfter < p.PowerPollInterval-sec(0.2) {
		t.Fatalf("after the accepted ForceOff of a running machine: actions %v, recheck after %s; want the read-back at the power-poll cadence", kinds(out), out.RecheckAfter)
	}
}
