package fence

import (
	"testing"
)

// Right after the taint, the taint manager evicts the node's pods, and the
// agent force-deletes them as soon as it sees them terminating. The first
// keep-off read comes one SettleInterval after the taint, the cadence of
// every keep-off read after it (the Off was read just before the taint),
// not at the first tick: through a fencing level below a silent BMC a read
// first waits the runner's DeadLevelTimeout (2 s), and a read started at
// the tick that saw our own taint held the node's sync while the pods
// turned terminating, so their force-delete came that much later.
func TestFirstKeepOffReadComesOneSettleIntervalAfterTheTaint(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.toTainting(n)
	tainted := view(withTaint(TaintOurs), pods(2, 1))
	d.step(result(tainted, at(sec(28.3)), ActApplyTaint, ""), at(sec(28.3)))
	d.wantPhase(Detaching)
	// The tick that sees our own taint on the Node, before the eviction.
	out := d.step(tick(tainted, at(sec(28.35))), at(sec(28.35)))
	if has(out, ActReadPower) {
		t.Errorf("the tick right after the taint reads the BMC (actions %v): a keep-off read now holds the node while its pods turn terminating; want the first one SettleInterval (%s) after the taint", kinds(out), d.p.SettleInterval())
	}
	out = d.step(tick(view(withTaint(TaintOurs), pods(2, 1), terminating(2)), at(sec(28.4))), at(sec(28.4)))
	if !has(out, ActDeletePods) || has(out, ActReadPower) {
		t.Errorf("actions = %v, want DeletePods and no read yet", kinds(out))
	}
	if want := at(sec(28.3)).Add(d.p.SettleInterval()); !d.s.NextReadAt.Equal(want) {
		t.Errorf("next keep-off read at %s, want %s (the taint plus SettleInterval)", d.s.NextReadAt.Sub(t0), want.Sub(t0))
	}
	out = d.step(tick(view(withTaint(TaintOurs), pods(1, 1), terminating(1)), at(sec(31.3))), at(sec(31.3)))
	if !has(out, ActReadPower) {
		t.Errorf("actions = %v at the taint plus SettleInterval, want the keep-off read", kinds(out))
	}
}

// Reading.Begun only schedules the next settle read; the proof is each
// reading's At. Readings that began long before they were taken (a slow
// level above the one that answered), arriving back to back, must not
// settle the run before their At span SettleWindow (a review asked for a
// direct test of it).
func TestReadingsBegunLongAgoSettleNoSoonerThanTheirAtSpanTheWindow(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.offAccepted(n) // the run's first Off at 22.2 s
	end := at(sec(22.2)).Add(d.p.SettleWindow)
	for now := at(sec(22.5)); now.Before(end); now = now.Add(sec(0.5)) {
		in := reading(n, now, PowerOff)
		in.Reading.Begun = now.Add(-sec(10))
		d.step(in, now)
		if d.s.Phase != ConfirmingOff {
			t.Fatalf("phase %s at +%s: readings begun 10 s before they were taken settled a run whose At span %s, less than SettleWindow %s",
				d.s.Phase, now.Sub(t0), now.Sub(at(sec(22.2))), d.p.SettleWindow)
		}
	}
	in := reading(n, end, PowerOff)
	in.Reading.Begun = end.Add(-sec(10))
	d.step(in, end)
	d.wantPhase(Tainting)
}
