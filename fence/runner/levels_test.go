package runner_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// levelRecorder counts taints by fencing level.
type levelRecorder struct {
	runner.NopRecorder
	mu     sync.Mutex
	levels []string
}

func (l *levelRecorder) LevelFence(level string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.levels = append(l.levels, level)
}

// pduWorld: three healthy nodes; n1's entry has a PDU level of two
// outlets that feed its machine, each with a recorded identity proof
// unless unproven.
func pduWorld(t *testing.T, unproven bool) (*fencesim.World, *cluster, []*fencesim.Outlet) {
	t.Helper()
	w := fencesim.NewWorld(t0, fence.DefaultPolicy(), 1)
	for _, n := range []string{"n1", "n2", "n3"} {
		w.AddNode(n, "a", machine.Timing{})
	}
	m := w.Node("n1").Host
	var outs []*fencesim.Outlet
	for _, name := range []string{"pdu-a/3", "pdu-b/3"} {
		o := w.AddOutlet(name, m)
		if !unproven {
			o.ProofFor = m
		}
		outs = append(outs, o)
	}
	w.Entry("n1").Outlets = outs
	return w, &cluster{Cluster: fencesim.Cluster{W: w}}, outs
}

// A machine whose supplies failed takes its BMC with it: level 1 cannot
// fence (unreachable), and level 2, the outlets (on, drawing nothing),
// fences it as a power loss: both switched off, read back Off, settled,
// tainted well before fenceAfter.
func TestDeadBMCIsFencedThroughItsOutlets(t *testing.T) {
	w, c, outs := pduWorld(t, false)
	w.SupplyFails(w.Node("n1").Host)
	rec := &levelRecorder{}
	r := newRunner(t, w, c, func(o *runner.Options) { o.Recorder = rec })
	syncFor(w, r, 40*time.Second)
	if w.Node("n1").Taint() != fence.TaintOurs {
		t.Fatalf("n1 not tainted within 40 s; events %v", events(w, "n1"))
	}
	for _, o := range outs {
		if o.On() {
			t.Errorf("outlet %s still on after the taint", o.Name)
		}
	}
	if !slices.Equal(rec.levels, []string{"2"}) {
		t.Errorf("fences by level = %v, want [2]", rec.levels)
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
}

// An outlet without a recorded identity proof (and without the opt-in) is
// never switched: the level gives no reading, so the node waits for a
// human.
func TestOutletWithoutProofIsNeverSwitched(t *testing.T) {
	w, c, outs := pduWorld(t, true)
	w.SupplyFails(w.Node("n1").Host)
	r := newRunner(t, w, c)
	syncFor(w, r, 2*time.Minute)
	if w.Node("n1").Taint() != fence.TaintAbsent {
		t.Fatal("n1 tainted through outlets without an identity proof")
	}
	for _, o := range outs {
		if !o.On() {
			t.Errorf("outlet %s switched off without an identity proof", o.Name)
		}
	}
	said := slices.ContainsFunc(w.Records, func(r fencesim.Record) bool {
		return r.Node == "n1" && r.Kind == "event" && strings.Contains(r.Msg, "no outlet identity proof")
	})
	if !said {
		t.Errorf("no event says why: %v", events(w, "n1"))
	}
}

// A BMC that answers is never overruled by the level below it: a power
// loss with the BMC up is fenced by the BMC, the outlets untouched.
func TestBMCThatAnswersIsNeverOverruled(t *testing.T) {
	w, c, outs := pduWorld(t, false)
	if err := w.Node("n1").BMC.Event(machine.EventPowerLoss); err != nil {
		t.Fatal(err)
	}
	rec := &levelRecorder{}
	r := newRunner(t, w, c, func(o *runner.Options) { o.Recorder = rec })
	syncFor(w, r, 60*time.Second)
	if w.Node("n1").Taint() != fence.TaintOurs {
		t.Fatalf("n1 not tainted; events %v", events(w, "n1"))
	}
	for _, o := range outs {
		if !o.On() {
			t.Errorf("outlet %s switched off though the BMC answered", o.Name)
		}
	}
	if !slices.Equal(rec.levels, []string{"1"}) {
		t.Errorf("fences by level = %v, want [1]", rec.levels)
	}
}
