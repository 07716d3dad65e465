package fence

import (
	"testing"
	"time"
)

// A ForceOff decided at 20.2 s goes out only after the state write and the
// server recheck; on a loaded API server those took 13 s (the 1000-node
// scale run, docs/scale/n1000/). The machine read Off 0.1 s after the BMC
// answered: that Off is ours, and settles over settleWindow. ownOffWithin
// counts from when the runner sent the ForceOff (Result.SentAt), not from
// the step that decided it.
func TestOwnOffWithinCountsFromTheSendNotTheDecision(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.suspect(n)
	if out := d.step(reading(n, at(sec(20.1)), PowerOff), at(sec(20.2))); !has(out, ActPowerOff) {
		t.Fatalf("actions = %v, want PowerOff", kinds(out))
	}
	res := result(n, at(sec(33.3)), ActPowerOff, "")
	res.Result.SentAt = at(sec(33.2))
	d.step(res, at(sec(33.3)))
	d.step(reading(n, at(sec(33.4)), PowerOff), at(sec(33.4)))
	d.wantPhase(ConfirmingOff)
	d.step(reading(n, at(sec(36.4)), PowerOff), at(sec(36.4)))
	out := d.step(reading(n, at(sec(39.4)), PowerOff), at(sec(39.4)))
	d.wantPhase(Tainting)
	if !has(out, ActApplyTaint) {
		t.Fatalf("actions = %v, want ApplyTaint after settleWindow", kinds(out))
	}
}

// The reference is the send, not when the answer came: a BMC that took 8 s
// to answer and whose machine read Off only 12 s after the send has an Off
// that began later than ownOffWithin after our ForceOff reached it. It is
// not ours (a watchdog's power cycle looks the same), and settles over the
// unassisted window only. A send time that is not of this ForceOff (before
// its decision, or later than the answer) is ignored: the decision counts.
func TestOwnOffWithinIsNotCountedFromTheAnswer(t *testing.T) {
	for _, tt := range []struct {
		name   string
		sentAt float64
		off    float64
		ours   bool
	}{
		{"answered 8 s after the send, Off 12 s after it", 21, 33, false},
		{"answered at once, Off 9 s after the send", 21, 30, true},
		{"send time before the decision: the decision counts", 10, 30.5, false},
		{"send time after the answer: the decision counts", 40, 30.5, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(t)
			n := view()
			d.suspect(n)
			d.step(reading(n, at(sec(20.1)), PowerOff), at(sec(20.2)))
			res := result(n, at(sec(29)), ActPowerOff, "")
			res.Result.SentAt = at(sec(tt.sentAt))
			d.step(res, at(sec(29)))
			for s := tt.off; s < tt.off+7; s += 3 {
				d.step(reading(n, at(sec(s)), PowerOff), at(sec(s)))
			}
			if got := d.s.Phase == Tainting; got != tt.ours {
				t.Fatalf("phase %v after an Off run from %.1f s over 6 s; want it tainting: %v", d.s.Phase, tt.off, tt.ours)
			}
		})
	}
}

// A BMC whose machine still reads On ownOffWithin after the decision, but
// only 2 s after the send, has not ignored the ForceOff yet.
func TestAcceptedButIgnoredCountsFromTheSend(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.suspect(n)
	d.step(reading(n, at(sec(20.1)), PowerOff), at(sec(20.2)))
	res := result(n, at(sec(33.3)), ActPowerOff, "")
	res.Result.SentAt = at(sec(33.2))
	d.step(res, at(sec(33.3)))
	d.step(reading(n, at(sec(35.2)), PowerOn), at(sec(35.2)))
	if d.s.AcceptanceUntrusted {
		t.Fatal("the BMC's acceptance was voided 2 s after the send (15 s after the decision)")
	}
	d.step(reading(n, at(sec(43.3)), PowerOn), at(sec(43.3)))
	if !d.s.AcceptanceUntrusted {
		t.Fatal("the machine read On 10.1 s after the send and the acceptance still counts")
	}
}

// A ForceOff that went out 55 s after its decision (persist, recheck, slot
// wait, identity check on a loaded API server), accepted, and ignored: the
// machine reads On. The BMC must be found out (AcceptanceUntrusted) before
// any second ForceOff goes out, or the second acceptance, followed by a
// watchdog's power cycle, would make an Off that is not ours look ours.
// powerTimeout counts from the send too, as ownOffWithin does; the policy
// keeps ownOffWithin <= powerTimeout, so the finding comes first (found by
// review: powerTimeout still counted from the decision).
func TestAnIgnoredForceOffIsFoundOutBeforeItIsSentAgain(t *testing.T) {
	for _, tt := range []struct {
		name  string
		delay float64
		pol   func(*Policy)
	}{
		{"defaults, sent 55 s after the decision", 55, func(*Policy) {}},
		{"ownOffWithin = powerTimeout = 30 s, sent 3 s after", 3, func(p *Policy) { p.OwnOffWithin, p.PowerTimeout = 30*time.Second, 30*time.Second }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(t)
			tt.pol(&d.p)
			n := view()
			d.suspect(n)
			d.step(reading(n, at(sec(20.1)), PowerOff), at(sec(20.2)))
			sent := 20.2 + tt.delay
			res := result(n, at(sec(sent+0.1)), ActPowerOff, "")
			res.Result.SentAt = at(sec(sent))
			d.step(res, at(sec(sent+0.1)))
			for s := sent + 0.2; s < sent+120; s += 2 {
				out := d.step(reading(n, at(sec(s)), PowerOn), at(sec(s)))
				if has(out, ActPowerOff) && !d.s.AcceptanceUntrusted {
					t.Fatalf("ForceOff sent again at %.1f s (%.1f s after the first went out) while the BMC that ignored it is still trusted", s, s-sent)
				}
			}
			if !d.s.AcceptanceUntrusted {
				t.Fatal("the BMC accepted a ForceOff the machine ignored for two minutes and is still trusted")
			}
		})
	}
}
