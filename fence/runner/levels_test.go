package runner_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
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

// hangingLevel is a BMC that died with its machine: every call waits for
// the caller to give up. It notes the deadline each call came with.
type hangingLevel struct {
	mu        sync.Mutex
	deadlines []time.Duration // until the deadline, at the call; -1: none
}

func (h *hangingLevel) wait(ctx context.Context) error {
	h.mu.Lock()
	d := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	h.deadlines = append(h.deadlines, d)
	h.mu.Unlock()
	if d < 0 {
		return fmt.Errorf("%w: no answer within 10s", bmc.ErrTimeout) // the client's own timeout
	}
	<-ctx.Done()
	return ctx.Err()
}

func (h *hangingLevel) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	return bmc.PowerStatus{}, h.wait(ctx)
}
func (h *hangingLevel) PowerOff(ctx context.Context) (bmc.Result, error) {
	return bmc.Result{}, h.wait(ctx)
}
func (h *hangingLevel) PowerOn(ctx context.Context) (bmc.Result, error) {
	return bmc.Result{}, h.wait(ctx)
}
func (h *hangingLevel) Key() string                      { return "redfish://dead-bmc" }
func (h *hangingLevel) Verify(ctx context.Context) error { return h.wait(ctx) }

type withLevels struct {
	runner.PowerController
	levels []runner.PowerController
}

func (w withLevels) Levels() []runner.PowerController { return w.levels }

type levelInventory struct {
	fencesim.Cluster
	node string
	ctrl runner.PowerController
}

func (i levelInventory) Controller(n string) (runner.PowerController, bool) {
	if n == i.node {
		return i.ctrl, true
	}
	return i.Cluster.Controller(n)
}

// A BMC that could not fence at its last read is still read first, every
// time (an answer would be heard and never overruled), but within
// DeadLevelTimeout, not the BMC's own timeout: the fence through the
// outlets below it does not wait 10 s per reading.
func TestASilentBMCIsReadWithinTheDeadLevelTimeoutWhileALevelBelowFences(t *testing.T) {
	w, c, _ := pduWorld(t, false)
	w.SupplyFails(w.Node("n1").Host)
	dead := &hangingLevel{}
	sim, _ := fencesim.Cluster{W: w}.Controller("n1")
	ctrl := withLevels{PowerController: dead, levels: sim.(runner.Leveled).Levels()}
	r := newRunner(t, w, c, func(o *runner.Options) {
		o.Inventory = levelInventory{Cluster: fencesim.Cluster{W: w}, node: "n1", ctrl: ctrl}
		o.DeadLevelTimeout = 20 * time.Millisecond
	})
	syncFor(w, r, 40*time.Second)
	if w.Node("n1").Taint() != fence.TaintOurs {
		t.Fatalf("n1 not tainted through its outlets; events %v", events(w, "n1"))
	}
	dead.mu.Lock()
	defer dead.mu.Unlock()
	if len(dead.deadlines) < 3 || dead.deadlines[0] >= 0 {
		t.Fatalf("the dead BMC's calls came with %v; want the first without our bound, then more", dead.deadlines)
	}
	for i, d := range dead.deadlines[1:] {
		if d < 0 || d > 20*time.Millisecond {
			t.Errorf("call %d to the silent BMC: %v until its deadline, want at most the 20ms set", i+2, d)
		}
	}
}
