package runner_test

import (
	"slices"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
)

// diagnoseWorld: three nodes under diagnoseBeforeOff (diagnoseTimeout
// 60 s); n1's OS hangs at t0+10 s, with no BMC evidence (no petter): its
// fence is due at fenceAfter. setup sets n1's machine up first.
func diagnoseWorld(t *testing.T, setup func(m *fencesim.Machine)) (*fencesim.World, *cluster) {
	t.Helper()
	p := fence.DefaultPolicy()
	p.DiagnoseBeforeOff, p.DiagnoseTimeout = true, 60*time.Second
	w := fencesim.NewWorld(t0, p, 1)
	for _, n := range []string{"n1", "n2", "n3"} {
		w.AddNode(n, "a", machine.Timing{})
	}
	setup(w.Node("n1").Host)
	for i := 0; i < 10; i++ {
		w.Clock.Step(time.Second)
		w.Advance()
	}
	if err := w.Node("n1").BMC.Event(machine.EventOSHang); err != nil {
		t.Fatal(err)
	}
	return w, &cluster{Cluster: fencesim.Cluster{W: w}}
}

func firstEvent(w *fencesim.World, node, reason string) time.Time {
	for _, r := range w.Records {
		if r.Node == node && r.Kind == "event" && r.Detail == reason {
			return r.At
		}
	}
	return time.Time{}
}

// A hung node whose kernel is set up for kdump: the NMI at fenceAfter
// panics it, kdump writes its dump and reboots it, and the node renews its
// Lease within diagnoseTimeout: it is not powered off, not tainted.
func TestDiagnoseBeforeOffKdumpNodeThatRebootsHealthyIsNotFenced(t *testing.T) {
	w, c := diagnoseWorld(t, func(m *fencesim.Machine) { m.SetKdump(20 * time.Second) })
	r := newRunner(t, w, c)
	syncFor(w, r, w.Policy.FenceAfter+3*time.Minute)
	nmi := firstEvent(w, "n1", "FenceDiagnose")
	if nmi.IsZero() {
		t.Fatalf("no FenceDiagnose; events %v", events(w, "n1"))
	}
	if d := nmi.Sub(t0.Add(10 * time.Second)); d < w.Policy.FenceAfter-10*time.Second {
		t.Errorf("NMI %s after the hang, before fenceAfter (%s)", d, w.Policy.FenceAfter)
	}
	if got := w.Node("n1").BMC.Count(bmc.OpDiagnostic); got != 1 {
		t.Errorf("%d diagnostic interrupts sent, want 1", got)
	}
	if at, _ := firstPowerOff(w, "n1"); !at.IsZero() {
		t.Errorf("n1 powered off at +%s although kdump rebooted it healthy; events %v", at.Sub(t0), events(w, "n1"))
	}
	if w.Node("n1").Taint() != fence.TaintAbsent || !slices.Contains(events(w, "n1"), "FenceRecovered") {
		t.Errorf("n1 taint %v, events %v: want no taint and FenceRecovered", w.Node("n1").Taint(), events(w, "n1"))
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
}

// A hung node whose kernel is not set up for kdump stays hung after the
// NMI: the ForceOff follows diagnoseTimeout later, and the node is fenced.
func TestDiagnoseBeforeOffThenForcesOffANodeThatStaysHung(t *testing.T) {
	w, c := diagnoseWorld(t, func(*fencesim.Machine) {})
	r := newRunner(t, w, c)
	syncFor(w, r, w.Policy.FenceAfter+3*time.Minute)
	nmi := firstEvent(w, "n1", "FenceDiagnose")
	off, _ := firstPowerOff(w, "n1")
	if nmi.IsZero() || off.IsZero() {
		t.Fatalf("NMI at %v, ForceOff at %v; events %v", nmi, off, events(w, "n1"))
	}
	if d := off.Sub(nmi); d < w.Policy.DiagnoseTimeout || d > w.Policy.DiagnoseTimeout+10*time.Second {
		t.Errorf("ForceOff %s after the NMI, want diagnoseTimeout (%s) and a read", d, w.Policy.DiagnoseTimeout)
	}
	if w.Node("n1").Taint() != fence.TaintOurs {
		t.Errorf("n1 not tainted; events %v", events(w, "n1"))
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
}

// A BMC without a diagnostic interrupt (a Redfish system that does not
// list Nmi): no dump, an Event saying so, and the ForceOff without the
// wait.
func TestDiagnoseBeforeOffWithoutNMIIsSkippedAndFenced(t *testing.T) {
	w, c := diagnoseWorld(t, func(m *fencesim.Machine) { m.SetNoNMI(true) })
	r := newRunner(t, w, c)
	syncFor(w, r, w.Policy.FenceAfter+2*time.Minute)
	skipped := firstEvent(w, "n1", "FenceDiagnoseSkipped")
	off, _ := firstPowerOff(w, "n1")
	if skipped.IsZero() || off.IsZero() {
		t.Fatalf("skipped at %v, ForceOff at %v; events %v", skipped, off, events(w, "n1"))
	}
	if d := off.Sub(skipped); d > 5*time.Second {
		t.Errorf("ForceOff %s after the skip, want no wait", d)
	}
	if w.Node("n1").Taint() != fence.TaintOurs {
		t.Errorf("n1 not tainted; events %v", events(w, "n1"))
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
}

// Two nodes hang at once, maxConcurrentFences 1: the second node's NMI
// waits until the first node's fence has left flight (tainted), as its
// ForceOff would: a fence waiting on its dump is in flight for the others.
func TestDiagnoseBeforeOffCountsAsAFenceInFlight(t *testing.T) {
	w, c := diagnoseWorld(t, func(*fencesim.Machine) {})
	if err := w.Node("n2").BMC.Event(machine.EventOSHang); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, w, c)
	syncFor(w, r, w.Policy.FenceAfter+5*time.Minute)
	first, second := "n1", "n2"
	if a, b := firstEvent(w, "n1", "FenceDiagnose"), firstEvent(w, "n2", "FenceDiagnose"); b.Before(a) {
		first, second = "n2", "n1"
	}
	tainted := firstEvent(w, first, "FenceTainted")
	nmi := firstEvent(w, second, "FenceDiagnose")
	if tainted.IsZero() || nmi.IsZero() {
		t.Fatalf("%s tainted at %v, %s's NMI at %v; events %v / %v", first, tainted, second, nmi, events(w, first), events(w, second))
	}
	if nmi.Before(tainted) {
		t.Errorf("%s's NMI at +%s, while %s's fence was in flight (tainted at +%s)", second, nmi.Sub(t0), first, tainted.Sub(t0))
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
}
