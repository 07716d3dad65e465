package runner_test

import (
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// hungWorld: three nodes running the watchdog petter (10 s); n1's OS hangs
// at t0+10 s.
func hungWorld(t *testing.T, ev machine.Event) (*fencesim.World, *cluster) {
	t.Helper()
	w := fencesim.NewWorld(t0, fence.DefaultPolicy(), 1)
	for _, n := range []string{"n1", "n2", "n3"} {
		w.AddNode(n, "a", machine.Timing{}).Petter = 10 * time.Second
	}
	for i := 0; i < 10; i++ {
		w.Clock.Step(time.Second)
		w.Advance()
	}
	if err := w.Node("n1").BMC.Event(ev); err != nil {
		t.Fatal(err)
	}
	return w, &cluster{Cluster: fencesim.Cluster{W: w}}
}

func firstPowerOff(w *fencesim.World, node string) (time.Time, string) {
	for _, r := range w.Records {
		if r.Node == node && r.Kind == "event" && strings.HasPrefix(r.Detail, "FencePowerOff") {
			return r.At, r.Detail + " " + r.Msg
		}
	}
	return time.Time{}, ""
}

// TestHungNodeWithBMCEvidenceIsPoweredOffLongBeforeFenceAfter: a hung
// kernel whose BMC logged the watchdog's SMS/OS expiry (or an OS critical
// stop, on a panic) is powered off once its Lease has been silent for
// suspectAfter, not fenceAfter, and fenced.
func TestHungNodeWithBMCEvidenceIsPoweredOffLongBeforeFenceAfter(t *testing.T) {
	for _, ev := range []machine.Event{machine.EventOSHang, machine.EventOSPanic} {
		t.Run(string(ev), func(t *testing.T) {
			w, c := hungWorld(t, ev)
			r := newRunner(t, w, c)
			syncFor(w, r, 2*time.Minute)
			at, ev := firstPowerOff(w, "n1")
			if at.IsZero() {
				t.Fatalf("n1 never powered off; events %v", events(w, "n1"))
			}
			if d := at.Sub(t0.Add(10 * time.Second)); d > time.Minute {
				t.Errorf("ForceOff %s after the hang, want well before fenceAfter (%s)", d, w.Policy.FenceAfter)
			}
			if !strings.Contains(ev, "the BMC logged") {
				t.Errorf("the ForceOff's Event does not name its evidence: %s", ev)
			}
			if w.Node("n1").Taint() != fence.TaintOurs {
				t.Errorf("n1 not tainted; events %v", events(w, "n1"))
			}
			if len(w.Violations) > 0 {
				t.Fatal(w.Violations)
			}
		})
	}
}

// TestEvidenceIsReadOnlyForASuspectNodeAtABoundedRate: no evidence read
// for healthy nodes (nothing at rest), and a suspect node's at most once
// per EvidenceInterval.
func TestEvidenceIsReadOnlyForASuspectNodeAtABoundedRate(t *testing.T) {
	w, c := hungWorld(t, machine.EventOSHang)
	w.Node("n1").BMC.SetHideTimerUse(true) // nothing counts: it waits for fenceAfter
	r := newRunner(t, w, c, func(o *runner.Options) { o.EvidenceInterval = 20 * time.Second })
	syncFor(w, r, 2*time.Minute)
	for _, n := range []string{"n2", "n3"} {
		if got := w.Node(n).BMC.Count(bmc.OpReadEvidence); got != 0 {
			t.Errorf("%s (healthy) had its evidence read %d times", n, got)
		}
	}
	calls := w.Node("n1").BMC.Calls()
	var last time.Time
	reads := 0
	for _, c := range calls {
		if c.Op != bmc.OpReadEvidence {
			continue
		}
		reads++
		if !last.IsZero() && c.At.Sub(last) < 20*time.Second {
			t.Errorf("evidence read again %s after the last", c.At.Sub(last))
		}
		last = c.At
	}
	if reads == 0 {
		t.Fatal("the suspect node's evidence was never read")
	}
	if at, _ := firstPowerOff(w, "n1"); !at.IsZero() && at.Sub(t0) < w.Policy.FenceAfter {
		t.Errorf("powered off at +%s on evidence that does not count", at.Sub(t0))
	}
}
