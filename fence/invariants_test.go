package fence

import (
	"reflect"
	"testing"
	"time"
)

// TestInvariants names each invariant of doc.go that the engine owns,
// on the situation most likely to break it. The exhaustive test and FuzzStep
// check the same invariants (checkInvariants) over every combination, and the
// simulation checks them against the machines' truth.
func TestInvariants(t *testing.T) {
	t.Run("1 a taint only after our own accepted ForceOff and a settled exact-Off run later than it", func(t *testing.T) {
		// A restart's Off dwell, an Off read before our ForceOff,
		// BootProgress claiming an OS: none may taint.
		d := newDriver(t)
		d.p.FenceAfter = d.p.SuspectAfter
		n := view()
		d.suspect(n)
		d.step(reading(n, at(sec(20)), PowerOn), at(sec(20)))
		d.wantPhase(PoweringOff)
		d.step(result(n, at(sec(20)), ActPowerOff, ""), at(sec(20)))
		for i, rd := range []Reading{
			{At: at(sec(19)), Power: PowerOff},                  // sent before our ForceOff
			{At: at(sec(22)), Power: PowerOff, OSRunning: true}, // contradiction
			{At: at(sec(24)), Power: PowerPoweringOff},          // not off yet
		} {
			in := reading(n, rd.At, 0)
			in.Reading = rd
			if out := d.step(in, at(sec(25+float64(i)))); has(out, ActApplyTaint) {
				t.Fatalf("tainted on %+v", rd)
			}
		}
		var tainted bool
		for s := 30.0; s <= 36; s += 3 {
			out := d.step(reading(n, at(sec(s)), PowerOff), at(sec(s)))
			tainted = tainted || has(out, ActApplyTaint)
			if has(out, ActApplyTaint) && s < 36 {
				t.Fatalf("tainted at %vs, before the run spanned the settle window", s)
			}
		}
		if !tainted {
			t.Fatal("a settled run after our ForceOff did not taint")
		}
	})
	t.Run("6 power-off only when the storm guard admits it", func(t *testing.T) {
		d := newDriver(t)
		d.p.FenceAfter = d.p.SuspectAfter
		n := view()
		d.suspect(n)
		in := reading(n, at(sec(20)), PowerOn)
		in.Fleet = FleetView{Nodes: 5, Unhealthy: 3, APIFreshAt: at(sec(20))}
		if out := d.step(in, at(sec(20))); has(out, ActPowerOff) {
			t.Fatal("powered off during a storm")
		}
		in = reading(n, at(sec(25)), PowerOn)
		in.Fleet = FleetView{Nodes: 5, Unhealthy: 1, APIFreshAt: at(-time.Minute)}
		if out := d.step(in, at(sec(25))); has(out, ActPowerOff) {
			t.Fatal("powered off on a stale view of the API server")
		}
		if out := d.step(reading(n, at(sec(30)), PowerOn), at(sec(30))); !has(out, ActPowerOff) {
			t.Fatal("no power-off once the guard admits it")
		}
	})
	t.Run("8 only our taint is removed and only when the node is Ready with a renewal after the taint", func(t *testing.T) {
		for name, n := range map[string]NodeView{
			"foreign taint":             view(withTaint(TaintForeign), heartbeat(sec(100))),
			"stale Ready":               view(withTaint(TaintOurs), heartbeat(sec(10))),
			"first sighting only":       view(withTaint(TaintOurs), firstSeen(sec(100))),
			"renewed but not Ready yet": view(withTaint(TaintOurs), heartbeat(sec(100)), notReady(sec(50))),
		} {
			d := newDriver(t)
			d.s = State{Phase: Fenced, TaintOwned: true, TaintedAt: at(sec(30))}
			if out := d.step(tick(n, at(sec(101))), at(sec(101))); has(out, ActRemoveTaint) {
				t.Errorf("%s: removed the taint", name)
			}
		}
	})
	t.Run("11 maintenance, exclusion and a missing BMC are never fenced", func(t *testing.T) {
		for name, opt := range map[string]nodeOpt{"maintenance": maintenance(), "excluded": excluded(), "no BMC": noBMC()} {
			d := newDriver(t)
			d.p.FenceAfter = d.p.SuspectAfter
			n := view(opt)
			for s := 20.0; s < 120; s += 3 {
				for _, in := range []Input{tick(n, at(sec(s))), reading(n, at(sec(s)), PowerOff), reading(n, at(sec(s)), PowerOn)} {
					if out := d.step(in, at(sec(s))); has(out, ActApplyTaint) || has(out, ActPowerOff) {
						t.Fatalf("%s: %v", name, kinds(out))
					}
				}
			}
		}
	})
	t.Run("12 Step is deterministic", func(t *testing.T) {
		s := State{Phase: ConfirmingOff, FailureStart: t0, OffRun: OffRun{First: at(sec(20)), Last: at(sec(23)), Count: 2}}
		in := reading(view(), at(sec(26)), PowerOff)
		first := Step(DefaultPolicy(), s, in, at(sec(26)))
		for i := 0; i < 100; i++ {
			if again := Step(DefaultPolicy(), s, in, at(sec(26))); !reflect.DeepEqual(first, again) {
				t.Fatal("two Steps on the same arguments differ")
			}
		}
	})
}
