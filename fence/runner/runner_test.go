package runner_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
	"github.com/bmcfence/bmcfence/fence/runner"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// cluster wraps the simulated world so a test can break one method.
type cluster struct {
	fencesim.Cluster
	saveErr error
	// saveTakes is how long each state write takes on the world's clock.
	saveTakes time.Duration
	// deleteTakes is how long each force-delete pass takes.
	deleteTakes time.Duration
	recheck     *runner.Recheck
	saves       atomic.Int64
	taints      atomic.Int64
	deletePods  atomic.Int64
}

func (c *cluster) SaveState(ctx context.Context, node, old, new, ack string) error {
	if c.saveErr != nil {
		return c.saveErr
	}
	c.saves.Add(1)
	c.W.Clock.Step(c.saveTakes)
	return c.Cluster.SaveState(ctx, node, old, new, ack)
}

func (c *cluster) ApplyTaint(ctx context.Context, node, token string) error {
	c.taints.Add(1)
	return c.Cluster.ApplyTaint(ctx, node, token)
}

func (c *cluster) DeleteTerminatingPods(ctx context.Context, node, token string) (int, error) {
	c.deletePods.Add(1)
	c.W.Clock.Step(c.deleteTakes)
	return c.Cluster.DeleteTerminatingPods(ctx, node, token)
}

func (c *cluster) Recheck(ctx context.Context, node string) (runner.Recheck, error) {
	got, err := c.Cluster.Recheck(ctx, node)
	if c.recheck != nil {
		rc := *c.recheck
		rc.State = got.State
		return rc, err
	}
	return got, err
}

// world returns three healthy nodes; n1 lost power 30 s ago and has not
// renewed its lease since.
func world(t *testing.T) (*fencesim.World, *cluster) {
	t.Helper()
	w := fencesim.NewWorld(t0, fence.DefaultPolicy(), 1)
	for _, n := range []string{"n1", "n2", "n3"} {
		w.AddNode(n, "a", machine.Timing{})
	}
	if err := w.Node("n1").BMC.Event(machine.EventPowerLoss); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		w.Clock.Step(time.Second)
		w.Advance()
	}
	return w, &cluster{Cluster: fencesim.Cluster{W: w}}
}

func newRunner(t *testing.T, w *fencesim.World, c runner.Cluster, opts ...func(*runner.Options)) *runner.Runner {
	t.Helper()
	o := runner.Options{Policy: w.Policy, Clock: w.Clock, Cluster: c, Inventory: fencesim.Cluster{W: w}}
	for _, f := range opts {
		f(&o)
	}
	r, err := runner.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// syncFor syncs n1 once a second for d of simulated time.
func syncFor(w *fencesim.World, r *runner.Runner, d time.Duration) {
	for end := w.Clock.Now().Add(d); w.Clock.Now().Before(end); {
		w.Clock.Step(time.Second)
		w.Advance()
		for _, n := range w.Nodes {
			r.Sync(context.Background(), n.Name)
		}
	}
}

func events(w *fencesim.World, node string) []string {
	var out []string
	for _, r := range w.Records {
		if r.Node == node && r.Kind == "event" {
			out = append(out, r.Detail)
		}
	}
	return out
}

func TestSyncFencesAPoweredOffNode(t *testing.T) {
	w, c := world(t)
	r := newRunner(t, w, c)
	syncFor(w, r, 20*time.Second)
	if w.Node("n1").Taint() != fence.TaintOurs {
		t.Fatalf("n1 not tainted; events %v", events(w, "n1"))
	}
	if got := w.Node("n1").Phase(); got != "Fenced" {
		t.Errorf("phase = %s, want Fenced", got)
	}
	if c.deletePods.Load() == 0 {
		t.Error("terminating pods were not force-deleted")
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
}

// No side effect runs unless its intent is on the Node first.
func TestSyncTakesNoSideEffectWithoutPersisting(t *testing.T) {
	w, c := world(t)
	c.saveErr = errors.New("apiserver unavailable")
	r := newRunner(t, w, c)
	syncFor(w, r, time.Minute)
	if c.taints.Load() != 0 {
		t.Fatalf("tainted %d times without persisting the decision", c.taints.Load())
	}
}

func TestSyncHoldsANodeWhoseStateItCannotRead(t *testing.T) {
	w, c := world(t)
	garbage := `{"v":7,"ph":"Tainting"}`
	if err := c.Cluster.SaveState(context.Background(), "n1", "", garbage, ""); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, w, c)
	syncFor(w, r, time.Minute)
	if c.taints.Load() != 0 || c.saves.Load() != 0 {
		t.Fatalf("acted on an unreadable state: %d taints, %d saves", c.taints.Load(), c.saves.Load())
	}
	if !slices.Contains(events(w, "n1"), "FenceStateUnreadable") {
		t.Errorf("events = %v, want FenceStateUnreadable", events(w, "n1"))
	}
}

// Two runners acting at once (a split brain): the compare-and-swap on the
// annotation lets one win each step, and each adopts what the other wrote
// onto its own clock, so neither taints on a proof the other collected.
// Once one stops, the other fences the node, once.
func TestPerNodeLockLetsOneOfTwoAgentsAct(t *testing.T) {
	w, c := world(t)
	a, b := newRunner(t, w, c), newRunner(t, w, c)
	for end := w.Clock.Now().Add(30 * time.Second); w.Clock.Now().Before(end); {
		w.Clock.Step(time.Second)
		w.Advance()
		for _, n := range w.Nodes {
			a.Sync(context.Background(), n.Name)
			b.Sync(context.Background(), n.Name)
		}
	}
	if c.taints.Load() > 1 {
		t.Errorf("taint applied %d times during the split brain, want at most once", c.taints.Load())
	}
	syncFor(w, a, 30*time.Second)
	if c.taints.Load() != 1 {
		t.Errorf("taint applied %d times, want exactly once", c.taints.Load())
	}
	if w.Node("n1").Phase() != "Fenced" {
		t.Errorf("phase = %s", w.Node("n1").Phase())
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
}

// The cached view says the node may be fenced; the server says it went into
// maintenance, was excluded, or renewed its Lease (alive while its BMC reads
// Off: the wrong BMC). The server wins: no ForceOff, so no taint.
func TestFreshRecheckBlocksTheFence(t *testing.T) {
	for name, recheck := range map[string]runner.Recheck{
		"maintenance":   {Maintenance: true},
		"excluded":      {Excluded: true},
		"lease renewed": {LeaseRenewed: true},
	} {
		t.Run(name, func(t *testing.T) {
			w, c := world(t)
			c.recheck = &recheck
			r := newRunner(t, w, c)
			syncFor(w, r, time.Minute)
			if w.Node("n1").Taint() != fence.TaintAbsent || c.taints.Load() != 0 {
				t.Fatalf("tainted a node the server says: %+v", recheck)
			}
			if !slices.Contains(events(w, "n1"), "FencePowerOffNotSent") {
				t.Errorf("events = %v, want FencePowerOffNotSent naming the recheck", events(w, "n1"))
			}
			// Nothing reached the BMC, so no attempt was spent: the
			// fence keeps trying, never Stuck for a BMC that lied.
			if ph := w.Node("n1").Phase(); ph == "Stuck" {
				t.Errorf("phase = %s after a minute of ForceOffs that were never sent", ph)
			}
		})
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	w, c := world(t)
	r := newRunner(t, w, c, func(o *runner.Options) { o.DryRun = true })
	syncFor(w, r, time.Minute)
	if c.saves.Load() != 0 || c.taints.Load() != 0 || c.deletePods.Load() != 0 || w.Node("n1").Taint() != fence.TaintAbsent {
		t.Fatalf("dry run wrote: %d saves, %d taints, %d pod deletions", c.saves.Load(), c.taints.Load(), c.deletePods.Load())
	}
	would := 0
	for _, e := range events(w, "n1") {
		if e == "WouldApplyTaint" {
			would++
		}
	}
	if would != 1 {
		t.Errorf("events = %v, want exactly one WouldApplyTaint", events(w, "n1"))
	}
}

// verifying wraps a fake BMC with an identity check, which fails with err,
// and a target key.
type verifying struct {
	*bmctest.Fake
	key string
	err error
	// verified counts identity checks.
	verified *atomic.Int64
}

func (v verifying) Verify(context.Context) error {
	if v.verified != nil {
		v.verified.Add(1)
	}
	return v.err
}
func (v verifying) Key() string {
	if v.key == "" {
		return "fake"
	}
	return v.key
}

type inventory map[string]runner.PowerController

func (i inventory) Controller(n string) (runner.PowerController, bool) {
	c, ok := i[n]
	return c, ok
}

func TestWrongMachineGivesNoReadings(t *testing.T) {
	w, c := world(t)
	inv := inventory{}
	for _, n := range w.Nodes {
		inv[n.Name] = verifying{Fake: n.BMC}
	}
	inv["n1"] = verifying{Fake: w.Node("n1").BMC, err: errors.New("BMC UUID 1111 is not the node's systemUUID 2222")}
	r := newRunner(t, w, c, func(o *runner.Options) { o.Inventory = inv })
	syncFor(w, r, time.Minute)
	if c.taints.Load() != 0 {
		t.Fatal("tainted through a BMC that failed its identity check")
	}
	if !slices.Contains(events(w, "n1"), "FenceCannotVerify") {
		t.Errorf("events = %v", events(w, "n1"))
	}
}

// blockingBMC holds every PowerStatus until released or cancelled, and
// counts how many are in flight.
type blockingBMC struct {
	verifying
	inFlight, max *atomic.Int64
	started       chan<- struct{}
	release       <-chan struct{}
	cancelled     *atomic.Int64
}

func (b blockingBMC) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	n := b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	for {
		m := b.max.Load()
		if n <= m || b.max.CompareAndSwap(m, n) {
			break
		}
	}
	b.started <- struct{}{}
	select {
	case <-b.release:
		return b.Fake.PowerStatus(ctx)
	case <-ctx.Done():
		b.cancelled.Add(1)
		return bmc.PowerStatus{}, ctx.Err()
	}
}

func blockingWorld(t *testing.T, nodes int) (*fencesim.World, inventory, *atomic.Int64, *atomic.Int64, chan struct{}, chan struct{}) {
	w := fencesim.NewWorld(t0, fence.DefaultPolicy(), 1)
	inv := inventory{}
	var inFlight, max, cancelled atomic.Int64
	started, release := make(chan struct{}, 100), make(chan struct{})
	for i := 0; i < nodes; i++ {
		n := w.AddNode(string(rune('a'+i)), "a", machine.Timing{})
		n.KubeletEnabled = false // silent from the start: every node is suspected
		inv[n.Name] = blockingBMC{verifying: verifying{Fake: n.BMC}, inFlight: &inFlight, max: &max, started: started, release: release, cancelled: &cancelled}
	}
	w.Clock.Step(25 * time.Second)
	w.Advance()
	return w, inv, &max, &cancelled, started, release
}

func TestRunBoundsBMCConcurrency(t *testing.T) {
	w, inv, max, _, started, release := blockingWorld(t, 6)
	r := newRunner(t, w, fencesim.Cluster{W: w}, func(o *runner.Options) { o.Inventory = inv; o.BMCConcurrency = 2 })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	<-started
	<-started
	// Six nodes want a read; two may be in flight. Let the rest through one
	// at a time and check the bound held throughout.
	for i := 0; i < 4; i++ {
		release <- struct{}{}
		<-started
	}
	close(release)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if got := max.Load(); got != 2 {
		t.Errorf("at most %d BMC calls were in flight, want exactly the limit 2", got)
	}
}

func TestRunCancelsInFlightWorkWhenLeadershipIsLost(t *testing.T) {
	w, inv, _, cancelled, started, _ := blockingWorld(t, 2)
	r := newRunner(t, w, fencesim.Cluster{W: w}, func(o *runner.Options) { o.Inventory = inv })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	<-started
	<-started
	cancel() // leadership lost
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if got := cancelled.Load(); got != 2 {
		t.Errorf("%d in-flight BMC calls saw the cancellation, want 2", got)
	}
}

// Mixed versions (docs/safety.md): a state written by a newer version, one
// this runner cannot read exactly, is never acted on and never overwritten:
// no BMC command, no taint, no state write, the annotation as it was; the
// node's Event says a newer bmcfence may have written it.
func TestSyncRefusesAStateFromANewerVersion(t *testing.T) {
	for name, state := range map[string]string{
		"newer version":            `{"v":3,"ph":"Tainting","wr":"newer"}`,
		"a field it does not know": `{"v":2,"ph":"ConfirmingOff","wr":"newer","po":1,"poa":true,"lsa":1}`,
		"a phase it does not know": `{"v":2,"ph":"PoweringOffOutlets","wr":"newer"}`,
	} {
		t.Run(name, func(t *testing.T) {
			w, c := world(t)
			if err := c.Cluster.SaveState(context.Background(), "n1", "", state, ""); err != nil {
				t.Fatal(err)
			}
			r := newRunner(t, w, c)
			syncFor(w, r, 2*time.Minute)
			if c.taints.Load() != 0 || c.saves.Load() != 0 {
				t.Fatalf("acted on it: %d taints, %d state writes", c.taints.Load(), c.saves.Load())
			}
			for _, rec := range w.Records {
				if rec.Node == "n1" && (rec.Kind == "power-off" || rec.Kind == "power-on") {
					t.Errorf("sent a %s", rec.Kind)
				}
			}
			if got, _ := c.Cluster.CurrentState(context.Background(), "n1"); got != state {
				t.Errorf("the annotation is now %s, want it untouched", got)
			}
			var msg string
			for _, rec := range w.Records {
				if rec.Node == "n1" && rec.Kind == "event" && rec.Detail == "FenceStateUnreadable" {
					msg = rec.Msg
				}
			}
			if !strings.Contains(msg, "newer bmcfence") || !strings.Contains(msg, "will not act on this node") {
				t.Errorf("Event FenceStateUnreadable %q; want it to say a newer bmcfence may have written it and that this agent will not act", msg)
			}
		})
	}
}

// A node whose machine lost power with its BMC: nothing can fence it. The
// agent says so once, with the command that fences it by hand.
func TestAnUnfenceableNodeIsReportedOnceWithTheCommandToFenceItByHand(t *testing.T) {
	w, c := world(t)
	inv := inventory{}
	for _, n := range w.Nodes {
		inv[n.Name] = verifying{Fake: n.BMC}
	}
	inv["n1"] = verifying{Fake: w.Node("n1").BMC, err: errors.New("BMC did not answer in time")}
	if err := w.Node("n1").BMC.Event(machine.EventPowerLoss); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, w, c, func(o *runner.Options) { o.Inventory = inv })
	syncFor(w, r, 10*time.Minute)
	var msgs []string
	for _, rec := range w.Records {
		if rec.Node == "n1" && rec.Kind == "event" && rec.Detail == "FenceCannotVerify" {
			msgs = append(msgs, rec.Msg)
		}
	}
	if len(msgs) != 1 {
		t.Fatalf("FenceCannotVerify %d times in 10 minutes, want once: %q", len(msgs), msgs)
	}
	if want := `fence it by hand: kubectl fence confirm n1 --reason "`; !strings.Contains(msgs[0], want) {
		t.Errorf("Event %q does not end with %s...", msgs[0], want)
	}
}

// phaseCounter counts the runner's steps per node (Recorder.Phase is
// called once per step).
type phaseCounter struct {
	runner.NopRecorder
	steps map[string]int
}

func (p *phaseCounter) Phase(node string, _ fence.Phase) { p.steps[node]++ }

func TestSyncOfAHealthyNodeThatOnlyRenewedStepsNothingUntilItsWake(t *testing.T) {
	w, c := world(t)
	rec := &phaseCounter{steps: map[string]int{}}
	r := newRunner(t, w, c, func(o *runner.Options) { o.Recorder = rec })
	ctx := context.Background()
	after, _ := r.Sync(ctx, "n2")
	if rec.steps["n2"] != 1 || after <= 2*time.Second {
		t.Fatalf("first sync: %d steps, after %s; want 1 step and a wake ahead", rec.steps["n2"], after)
	}
	wake := w.Clock.Now().Add(after)
	renewed := w.Clock.Now()
	for w.Clock.Now().Add(time.Second).Before(wake) {
		w.Clock.Step(time.Second)
		w.Advance() // the healthy nodes renew their Leases
		got, _ := r.Sync(ctx, "n2")
		if want := wake.Sub(w.Clock.Now()); got != want {
			t.Fatalf("a renewal-only sync asked for %s, want the last tick's wake (%s)", got, want)
		}
		if v, _ := c.Node("n2"); v.View.RenewedAt.After(renewed) {
			renewed = v.View.RenewedAt
		}
	}
	if rec.steps["n2"] != 1 {
		t.Fatalf("%d steps while n2 only renewed, want 1", rec.steps["n2"])
	}
	if !renewed.After(t0.Add(30 * time.Second)) {
		t.Fatal("n2 did not renew in the test: it proves nothing")
	}
	w.Clock.SetTime(wake)
	w.Advance()
	r.Sync(ctx, "n2")
	if rec.steps["n2"] != 2 {
		t.Fatalf("%d steps at the wake, want 2", rec.steps["n2"])
	}
}

func TestSyncOfANodeInAFenceStepsEveryTime(t *testing.T) {
	w, c := world(t)
	rec := &phaseCounter{steps: map[string]int{}}
	r := newRunner(t, w, c, func(o *runner.Options) { o.Recorder = rec })
	ctx := context.Background()
	r.Sync(ctx, "n1") // silent 30 s: a fence starts
	if p := w.Node("n1").Phase(); p == "Healthy" || p == "" {
		t.Fatalf("n1 phase %q, want a fence", p)
	}
	for i := 0; i < 5; i++ {
		before := rec.steps["n1"]
		w.Clock.Step(100 * time.Millisecond)
		w.Advance()
		r.Sync(ctx, "n1")
		if rec.steps["n1"] == before {
			t.Fatalf("sync %d of n1 in phase %s stepped nothing", i, w.Node("n1").Phase())
		}
	}
}

// Found at 1000 × 30 (issue 19): a node's next sync counted its step's
// RecheckAfter from the end of the step's actions, so a settle read due
// 3 s after the one before came 3 s after a state write that took 4 s.
// It counts from the step's decision now.
func TestTheNextSyncCountsFromTheDecisionNotFromTheWrite(t *testing.T) {
	for _, takes := range []time.Duration{0, 2 * time.Second} {
		w, c := world(t)
		c.saveTakes = takes
		r := newRunner(t, w, c)
		var after time.Duration
		for i := 0; w.Node("n1").Phase() != "ConfirmingOff"; i++ {
			if i == 20 {
				t.Fatalf("writes taking %s: phase %s after %d syncs, want ConfirmingOff", takes, w.Node("n1").Phase(), i)
			}
			w.Clock.Step(after)
			w.Advance()
			after, _ = r.Sync(context.Background(), "n1")
		}
		if want := w.Policy.SettleInterval() - takes; after > want+100*time.Millisecond {
			t.Errorf("writes taking %s: next sync after %s, want at most %s (the settle read is due %s after the last, counted from the decision)",
				takes, after, want, w.Policy.SettleInterval())
		}
	}
}

// Found in review: counted from the decision, a force-delete pass slower
// than its poll started the next one at once, over and over, on the API
// server whose slowness made it slow. Its poll counts from its end.
func TestAForceDeletePassIsPolledFromItsEnd(t *testing.T) {
	w, c := world(t)
	c.deleteTakes = 3 * time.Second
	r := newRunner(t, w, c)
	var after time.Duration
	for i := 0; c.deletePods.Load() == 0; i++ {
		if i == 40 {
			t.Fatalf("no force-delete pass after %d syncs; phase %s", i, w.Node("n1").Phase())
		}
		w.Clock.Step(max(after, 100*time.Millisecond))
		w.Advance()
		after, _ = r.Sync(context.Background(), "n1")
	}
	// The step asks for its next within DetachPoll; the pass took
	// longer than that, and the next must not follow at once.
	if after < 500*time.Millisecond {
		t.Errorf("next sync after %s, want the step's own wait (at most the poll's %s) from the pass's end", after, w.Policy.DetachPoll)
	}
	// Found in review: the steps that took in the sync's keep-off read
	// and its result asked for the pass again, on the same view.
	if got := c.deletePods.Load(); got != 1 {
		t.Errorf("%d force-delete passes in one sync, want 1", got)
	}
}
