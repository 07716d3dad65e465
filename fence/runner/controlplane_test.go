package runner_test

import (
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
)

// A control-plane node whose fence was abandoned before its taint (a
// maintenance mark came) after our ForceOff powered its machine off is
// still in a fence while the machine stays off: the fence forgot its state,
// not the ForceOff. No second control-plane node is powered off meanwhile
// (fencesim found it: seed 6506 powered off n4, then n1, while n3 was off by
// our hand and in maintenance).
func TestAbandonedControlPlaneFenceCountsWhileItsMachineIsOffByUs(t *testing.T) {
	p := fence.DefaultPolicy()
	w := fencesim.NewWorld(t0, p, 1)
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5", "w1", "w2", "w3", "w4", "w5"} {
		w.AddNode(n, "a", machine.Timing{})
		w.Node(n).ControlPlane = strings.HasPrefix(n, "n")
	}
	c := &cluster{Cluster: fencesim.Cluster{W: w}}
	r := newRunner(t, w, c)
	w.Node("n1").KubeletEnabled = false
	for i := 0; i < 600 && !w.Node("n1").Host.BMC.StaysOff(time.Hour); i++ {
		syncFor(w, r, time.Second)
	}
	if !w.Node("n1").Host.BMC.StaysOff(time.Hour) {
		t.Fatalf("n1 was never powered off; events %v", events(w, "n1"))
	}
	w.Node("n1").Maintenance = true
	syncFor(w, r, 5*time.Second)
	if got := w.Node("n1").Phase(); got != "Maintenance" {
		t.Fatalf("n1 phase %s, want Maintenance (its fence abandoned before the taint)", got)
	}

	w.Node("n2").KubeletEnabled = false
	syncFor(w, r, p.FenceAfter+time.Minute)
	for _, rec := range w.Records {
		if rec.Node == "n2" && rec.Kind == "power-off" {
			t.Fatalf("n2 powered off at %s while n1's machine was off by our ForceOff; n2's events %v", rec.At.Sub(t0), events(w, "n2"))
		}
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
	if !strings.Contains(strings.Join(events(w, "n2"), " "), "FenceControlPlane") {
		t.Errorf("n2's events do not say why it waits: %v", events(w, "n2"))
	}
}
