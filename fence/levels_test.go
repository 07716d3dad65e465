package fence

import (
	"strings"
	"testing"
	"time"
)

const pduLevel = "pdu-level:snmp://10.0.0.9:161/3"

// drawlessFrom is a fencing level's reading: its outlets on, drawing
// about 0 W.
func drawlessFrom(n NodeView, now time.Time, target string) Input {
	in := readingFrom(n, now, PowerOn, target)
	in.Reading.Drawless = true
	return in
}

// A machine whose BMC died with it (a failed PSU, a pulled cord) is fenced
// through its outlets as a power loss: outlets on, drawing nothing, is a
// dead machine; our own off through them, read back Off and settled,
// taints it long before fenceAfter.
func TestDeadMachineBehindDrawlessOutletsIsFencedAsAPowerLoss(t *testing.T) {
	d := newDriver(t)
	n := view(notReady(sec(10)))
	d.suspect(n)
	out := d.step(drawlessFrom(n, at(sec(21)), pduLevel), at(sec(21)))
	if !has(out, ActPowerOff) {
		t.Fatalf("actions = %v at 21 s, want a PowerOff through the outlets (a power loss: no fenceAfter)", kinds(out))
	}
	if !d.s.PowerLoss || d.s.Target != pduLevel {
		t.Fatalf("PowerLoss = %v, Target = %q; want a power-loss admission on the PDU level", d.s.PowerLoss, d.s.Target)
	}
	d.step(result(n, at(sec(21.2)), ActPowerOff, ""), at(sec(21.2)))
	now := 22.0
	for ; d.s.Phase != Tainting && now < 60; now++ {
		d.step(readingFrom(n, at(sec(now)), PowerOff, pduLevel), at(sec(now)))
	}
	d.wantPhase(Tainting)
	if now >= float64(DefaultPolicy().FenceAfter/time.Second) {
		t.Errorf("tainted at %v s, want before fenceAfter (%s)", now, DefaultPolicy().FenceAfter)
	}
}

// An outlet that draws power may feed a running machine behind a
// partition: its On is a plain On, fenced only after fenceAfter with the
// whole storm guard, as for a BMC that reads On.
func TestOutletDrawingPowerWaitsForFenceAfter(t *testing.T) {
	d := newDriver(t)
	n := view(notReady(sec(10)))
	d.suspect(n)
	p := DefaultPolicy()
	for s := 21.0; s < float64(p.FenceAfter/time.Second); s += 2 {
		if out := d.step(readingFrom(n, at(sec(s)), PowerOn, pduLevel), at(sec(s))); has(out, ActPowerOff) {
			t.Fatalf("PowerOff at %v s through an outlet that draws power, before fenceAfter (%s)", s, p.FenceAfter)
		}
	}
	at1 := p.FenceAfter + time.Second
	if out := d.step(readingFrom(n, at(at1), PowerOn, pduLevel), at(at1)); !has(out, ActPowerOff) {
		t.Fatalf("no PowerOff at fenceAfter: %v", kinds(out))
	}
	if d.s.PowerLoss {
		t.Errorf("PowerLoss admission for an outlet that draws power")
	}
}

// A drawless reading from a target that is not the fence's, or from before
// our last off, proves nothing.
func TestDrawlessReadingCountsOnlyFromTheFencesTargetAfterOurOff(t *testing.T) {
	st := stepper{s: State{Target: pduLevel, FailureStart: at(0), PowerOffAt: at(sec(30))}}
	for _, tc := range []struct {
		name string
		rd   Reading
		want bool
	}{
		{"after our off", Reading{At: at(sec(31)), Power: PowerOn, Drawless: true, Target: pduLevel}, true},
		{"before our off", Reading{At: at(sec(29)), Power: PowerOn, Drawless: true, Target: pduLevel}, false},
		{"another target", Reading{At: at(sec(31)), Power: PowerOn, Drawless: true, Target: "redfish://bmc"}, false},
		{"not drawless", Reading{At: at(sec(31)), Power: PowerOn, Target: pduLevel}, false},
		{"failed", Reading{At: at(sec(31)), Power: PowerOn, Drawless: true, Failure: "x", Target: pduLevel}, false},
	} {
		if got := st.drawless(tc.rd); got != tc.want {
			t.Errorf("%s: drawless = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The Events of a fence through a fencing level say the outlets read Off,
// not the BMC; the taint's evidence too.
func TestAFenceThroughOutletsSaysTheOutletsReadOff(t *testing.T) {
	d := newDriver(t)
	n := view(notReady(sec(10)))
	d.suspect(n)
	level := func(in Input) Input { in.Reading.Level = 2; return in }
	d.step(level(drawlessFrom(n, at(sec(21)), pduLevel)), at(sec(21)))
	d.step(result(n, at(sec(21.2)), ActPowerOff, ""), at(sec(21.2)))
	var msgs []string
	for now := 22.0; d.s.Phase != Tainting && now < 60; now++ {
		out := d.step(level(readingFrom(n, at(sec(now)), PowerOff, pduLevel)), at(sec(now)))
		for _, a := range out.Actions {
			if a.Kind == ActEvent {
				msgs = append(msgs, a.Event.Reason+": "+a.Event.Message)
			}
		}
	}
	d.wantPhase(Tainting)
	joined := strings.Join(msgs, "\n")
	for _, want := range []string{"FenceConfirmingOff: level-2 PDU outlets read Off", "FenceConfirmedOff: level-2 PDU outlets read Off"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no %q in the Events:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "BMC read") {
		t.Errorf("an Event says the BMC read what the outlets did:\n%s", joined)
	}
	if got := (&stepper{s: d.s}).evidenceSummary(); !strings.HasPrefix(got, "level-2 PDU outlets read Off") {
		t.Errorf("the taint's evidence = %q", got)
	}
}
