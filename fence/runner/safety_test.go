package runner_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// The tests in this file are named for the defects the safety review found
// in the runner (issue "Safety, proven against a world that can break it").

// callLog records BMC and cluster calls in order.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

func (l *callLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// loggedBMC logs every call, under its target key.
type loggedBMC struct {
	verifying
	log *callLog
}

func (b loggedBMC) Verify(ctx context.Context) error {
	b.log.add("verify " + b.Key())
	return b.verifying.Verify(ctx)
}

func (b loggedBMC) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	b.log.add("status " + b.Key())
	return b.Fake.PowerStatus(ctx)
}

func (b loggedBMC) PowerOff(ctx context.Context) (bmc.Result, error) {
	b.log.add("off " + b.Key())
	return b.Fake.PowerOff(ctx)
}

type loggedCluster struct {
	*cluster
	log *callLog
}

func (c loggedCluster) ApplyTaint(ctx context.Context, node, token string) error {
	c.log.add("taint")
	return c.cluster.ApplyTaint(ctx, node, token)
}

// Why 3: PowerOff never verified the BMC's identity, and a verification was
// remembered per node. Now the target is checked right before every
// ForceOff and right before the taint.
func TestPowerOffAndTaintVerifyTheTargetRightBefore(t *testing.T) {
	w, c := world(t)
	log := &callLog{}
	inv := inventory{}
	for _, n := range w.Nodes {
		inv[n.Name] = loggedBMC{verifying: verifying{Fake: n.BMC, key: "bmc-" + n.Name}, log: log}
	}
	r := newRunner(t, w, loggedCluster{c, log}, func(o *runner.Options) { o.Inventory = inv })
	syncFor(w, r, 30*time.Second)
	if w.Node("n1").Taint() != fence.TaintOurs {
		t.Fatalf("n1 not fenced; events %v", events(w, "n1"))
	}
	calls := log.all()
	var offs, taints int
	for i, c := range calls {
		switch {
		case c == "off bmc-n1":
			offs++
			if i == 0 || calls[i-1] != "verify bmc-n1" {
				t.Errorf("ForceOff #%d not right after an identity check: %v", offs, calls[max(0, i-3):i+1])
			}
		case c == "taint":
			taints++
			if i == 0 || calls[i-1] != "verify bmc-n1" {
				t.Errorf("taint not right after an identity check: %v", calls[max(0, i-3):i+1])
			}
		}
	}
	if offs == 0 || taints != 1 {
		t.Fatalf("%d ForceOffs, %d taints: %v", offs, taints, calls)
	}
}

// Why 3: after an inventory change mid-fence, readings from a never-verified
// BMC counted. A new target is verified before its first reading, and the
// fence starts over against it.
func TestANewTargetIsVerifiedBeforeItsFirstReading(t *testing.T) {
	w, c := world(t)
	log := &callLog{}
	inv := inventory{}
	for _, n := range w.Nodes {
		inv[n.Name] = loggedBMC{verifying: verifying{Fake: n.BMC, key: "old"}, log: log}
	}
	r := newRunner(t, w, c, func(o *runner.Options) { o.Inventory = inv })
	syncFor(w, r, 4*time.Second) // suspected, ForceOff sent, reading Off
	inv["n1"] = loggedBMC{verifying: verifying{Fake: w.Node("n1").BMC, key: "new"}, log: log}
	syncFor(w, r, 30*time.Second)
	calls := log.all()
	first := slices.IndexFunc(calls, func(c string) bool { return strings.HasSuffix(c, " new") })
	if first < 0 || calls[first] != "verify new" {
		t.Fatalf("first call to the new target: %v", calls[first:min(len(calls), first+3)])
	}
	if !slices.Contains(events(w, "n1"), "FenceTargetChanged") {
		t.Errorf("events %v, want FenceTargetChanged", events(w, "n1"))
	}
}

// Why 4: a paused old leader could land a taint after the new leader moved
// on: ApplyTaint never checked that the state annotation was still the one
// this runner wrote.
func TestAPausedLeaderCannotLandATaint(t *testing.T) {
	w, c := world(t)
	var b *runner.Runner
	paused := false
	a := newRunner(t, w, c, func(o *runner.Options) {
		o.BeforeAct = func(node string, act fence.ActionKind, _ fence.State) {
			if node != "n1" || act != fence.ActApplyTaint || paused {
				return
			}
			// The leader stalls right before its taint. Meanwhile a new
			// leader takes the node over and writes its own state.
			paused = true
			b.Sync(context.Background(), "n1")
		}
	})
	b = newRunner(t, w, c)
	var pausedAt time.Time
	for end := w.Clock.Now().Add(30 * time.Second); w.Clock.Now().Before(end) && !paused; {
		w.Clock.Step(time.Second)
		w.Advance()
		a.Sync(context.Background(), "n1")
		pausedAt = w.Clock.Now()
	}
	if !paused {
		t.Fatal("the leader never reached its taint")
	}
	for _, r := range w.Records {
		if r.Node == "n1" && r.Kind == "taint" {
			t.Fatalf("the paused leader's taint landed at %s (paused at %s)", r.At.Sub(t0), pausedAt.Sub(t0))
		}
	}
	if !strings.HasPrefix(w.Node("n1").Phase(), "Suspect") && w.Node("n1").Phase() != "PoweringOff" {
		t.Errorf("phase %s: want the new leader's fence, started over", w.Node("n1").Phase())
	}
}

// Found by the randomized simulation (seed 212 of the new world; scenario
// leader-paused-before-taint): a new leader that adopted a state and had
// nothing to do wrote nothing, so the old leader, stalled right before its
// taint, still held a valid fencing token, and tainted a machine someone
// had powered on meanwhile. Taking a node over is now a write.
func TestTakingANodeOverVoidsTheOldLeadersToken(t *testing.T) {
	w, c := world(t)
	ctx := context.Background()
	a := newRunner(t, w, c, func(o *runner.Options) { o.ID = "a" })
	syncFor(w, a, 4*time.Second)
	token, err := c.CurrentState(ctx, "n1")
	if err != nil || token == "" {
		t.Fatalf("no state written by the first leader: %q, %v", token, err)
	}
	// A replica that starts now: it has watched n1 for less than
	// suspectAfter, so it sends nothing; it must still claim the node.
	b := newRunner(t, w, fencesim.Cluster{W: w, Since: w.Clock.Now()}, func(o *runner.Options) { o.ID = "b" })
	b.Sync(ctx, "n1")
	now, err := c.CurrentState(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if now == token {
		t.Fatal("the new leader took n1 over without writing: the stalled leader's fencing token is still valid")
	}
	if s, err := fence.Decode(now); err != nil || s.Writer != "b" {
		t.Errorf("state after the takeover written by %q (%v), want b", s.Writer, err)
	}
}

// Found by the randomized simulation (seed 34478): the takeover write of
// the test above failed (the API server answered 503), and the runner,
// whose state in memory was adopted already, never tried it again: the
// stalled leader's token stayed valid. The annotation decides.
func TestAFailedTakeoverWriteIsRetried(t *testing.T) {
	w, c := world(t)
	ctx := context.Background()
	a := newRunner(t, w, c, func(o *runner.Options) { o.ID = "a" })
	syncFor(w, a, 4*time.Second)
	token, err := c.CurrentState(ctx, "n1")
	if err != nil || token == "" {
		t.Fatalf("no state written by the first leader: %q, %v", token, err)
	}
	bc := &cluster{Cluster: fencesim.Cluster{W: w, Since: w.Clock.Now()}, saveErr: errors.New("503")}
	b := newRunner(t, w, bc, func(o *runner.Options) { o.ID = "b" })
	b.Sync(ctx, "n1")
	bc.saveErr = nil
	w.Clock.Step(time.Second)
	b.Sync(ctx, "n1")
	if now, _ := c.CurrentState(ctx, "n1"); now == token {
		t.Fatal("after a failed takeover write, the new leader never wrote: the stalled leader's fencing token is still valid")
	}
}

// skewed is the world's clock seen by a replica whose clock runs ahead.
type skewed struct {
	*clocktesting.FakeClock
	by time.Duration
}

func (s skewed) Now() time.Time                  { return s.FakeClock.Now().Add(s.by) }
func (s skewed) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

// Why 5: an Off run persisted by one replica was extended with another's
// clock; a replica 10 s ahead saw the settle window already spanned. Now
// the new leader adopts the state, sends its own ForceOff and collects its
// own run on its own clock.
func TestAReplicaWithASkewedClockProvesOffAgain(t *testing.T) {
	w, c := world(t)
	a := newRunner(t, w, c, func(o *runner.Options) { o.ID = "a" })
	syncFor(w, a, 4*time.Second)
	if got := w.Node("n1").Phase(); got != "ConfirmingOff" {
		t.Fatalf("phase %s, want ConfirmingOff before the failover", got)
	}
	failover := w.Clock.Now()
	// A replica that starts now, its clock 10 s ahead.
	ahead := 10 * time.Second
	c.Skew, c.Since = ahead, failover
	b := newRunner(t, w, c, func(o *runner.Options) { o.ID = "b"; o.Clock = skewed{w.Clock, ahead} })
	syncFor(w, b, 30*time.Second)
	var offAt, taintAt time.Time
	for _, r := range w.Records {
		if r.Node != "n1" || r.At.Before(failover) {
			continue
		}
		if r.Kind == "power-off" && offAt.IsZero() {
			offAt = r.At
		}
		if r.Kind == "taint" && taintAt.IsZero() {
			taintAt = r.At
		}
	}
	if offAt.IsZero() || taintAt.IsZero() {
		t.Fatalf("after the failover: ForceOff at %v, taint at %v; want both", offAt, taintAt)
	}
	if d := taintAt.Sub(offAt); d < w.Policy.SettleWindow {
		t.Errorf("tainted %s after the new leader's own ForceOff, want at least the settle window %s", d, w.Policy.SettleWindow)
	}
}

// Why 7: two workers could both be admitted with maxConcurrentFences=1: the
// admission was published only after the persist.
func TestAdmissionIsAtomicAcrossWorkers(t *testing.T) {
	w := fencesim.NewWorld(t0, partitionPolicy(), 1)
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
		w.AddNode(n, "a", fencesimTiming)
	}
	// Running machines cut off from the API server: their BMCs read On,
	// so each ForceOff is one the storm guard bounds.
	for _, n := range []string{"n1", "n2"} {
		w.Node(n).Partitioned = true
	}
	for i := 0; i < 30; i++ {
		w.Clock.Step(time.Second)
		w.Advance()
	}
	var r *runner.Runner
	nested := false
	r = newRunner(t, w, fencesim.Cluster{W: w}, func(o *runner.Options) {
		o.BeforeAct = func(node string, act fence.ActionKind, decided fence.State) {
			// n1's worker has decided to fence and not yet written it:
			// n2's worker runs in that gap.
			if node == "n1" && act == fence.ActPersist && decided.Phase == fence.PoweringOff && !nested {
				nested = true
				r.Sync(context.Background(), "n2")
			}
		}
	})
	for i := 0; i < 3; i++ {
		r.Sync(context.Background(), "n1")
		r.Sync(context.Background(), "n2")
	}
	if !nested {
		t.Fatal("n1 never decided a ForceOff")
	}
	var offs []string
	for _, rec := range w.Records {
		if rec.Kind == "power-off" {
			offs = append(offs, rec.Node)
		}
	}
	if len(offs) != 1 {
		t.Fatalf("ForceOffs to %v with maxConcurrentFences=1", offs)
	}
}

// phaseRecorder signals each Phase call.
type phaseRecorder struct {
	runner.NopRecorder
	seen chan string
}

func (p phaseRecorder) Phase(node string, _ fence.Phase) {
	select {
	case p.seen <- node:
	default:
	}
}

// Why 7: a node deleted and re-created under the same name never got a
// worker again.
func TestARecreatedNodeGetsAWorker(t *testing.T) {
	w, c := world(t)
	seen := make(chan string, 100)
	r := newRunner(t, w, c, func(o *runner.Options) { o.Recorder = phaseRecorder{seen: seen} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor := func(node string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case n := <-seen:
				if n == node {
					return
				}
			case <-deadline:
				t.Fatalf("no worker synced %s", node)
			}
		}
	}
	waitFor("n2")
	w.DeleteNode("n2")
	waitFor("n2") // the worker notices and ends (Phase Healthy on the way out)
	w.AddNode("n2", "a", fencesimTiming)
	w.Notify("n2")
	waitFor("n2")
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatal(err)
	}
}

// Why 7: a BMC error body that echoes the login put the password in the
// reading's failure, and from there in Events, logs and the annotation.
// The inventory redacts every error before it leaves the adapter (tested in
// internal/inventory); the engine clips what it keeps.
func TestAFailureTextIsClippedInTheState(t *testing.T) {
	s := fence.State{Phase: fence.Suspect}
	out := fence.Step(fence.DefaultPolicy(), s, fence.Input{Kind: fence.InputReading,
		Node:    fence.NodeView{HeartbeatAt: t0, HasBMC: true},
		Reading: fence.Reading{At: t0.Add(time.Minute), Failure: strings.Repeat("x", 100000)}}, t0.Add(time.Minute))
	enc, err := fence.Encode(out.State)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fence.Decode(enc); err != nil {
		t.Fatalf("Decode(Encode(state with a 100 kB failure)) = %v", err)
	}
	if len(enc) > 16<<10 {
		t.Errorf("state with a long failure encodes to %d bytes", len(enc))
	}
}

var (
	fencesimTiming        = machine.Timing{}
	machineEventPowerLoss = machine.EventPowerLoss
)

// Found by the randomized simulation (seed 57956; scenario
// storm-guard-node-deleted): a node deleted right after its ForceOff fell
// out of the fleet view, and its admission with it, so the cooldown no
// longer counted from it and another fence was admitted at once: two
// running, partitioned machines powered off within seconds. The cooldown
// counts from every admission, deleted nodes' included.
func TestTheCooldownSurvivesADeletedNode(t *testing.T) {
	w := fencesim.NewWorld(t0, partitionPolicy(), 1)
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
		w.AddNode(n, "a", fencesimTiming)
	}
	for _, n := range []string{"n1", "n2"} {
		w.Node(n).Partitioned = true
	}
	for i := 0; i < 30; i++ {
		w.Clock.Step(time.Second)
		w.Advance()
	}
	ctx := context.Background()
	r := newRunner(t, w, fencesim.Cluster{W: w})
	r.Sync(ctx, "n1")
	w.DeleteNode("n1")
	offs := func(node string) int {
		k := 0
		for _, rec := range w.Records {
			if rec.Node == node && rec.Kind == "power-off" {
				k++
			}
		}
		return k
	}
	if offs("n1") == 0 {
		t.Fatal("n1 was not powered off")
	}
	for i := 0; i < 20; i++ {
		w.Clock.Step(time.Second)
		w.Advance()
		r.Sync(ctx, "n2")
	}
	if offs("n2") != 0 {
		t.Fatalf("n2 powered off within %s of n1's admission (cooldown %s): the deleted node's admission was forgotten", 20*time.Second, w.Policy.Cooldown)
	}
	for i := 0; i < 20; i++ {
		w.Clock.Step(time.Second)
		w.Advance()
		r.Sync(ctx, "n2")
	}
	if offs("n2") == 0 {
		t.Fatal("n2 never powered off after the cooldown")
	}
}

// partitionPolicy is the default policy with fenceAfter at suspectAfter, so
// that a partitioned node's running machine is powered off (under the whole
// storm guard: its BMC reads On) as soon as it is suspected.
func partitionPolicy() fence.Policy {
	p := fence.DefaultPolicy()
	p.FenceAfter = p.SuspectAfter
	return p
}

// A storm makes one Event, not one per node refused: three of five nodes
// partitioned (their machines run, their BMCs read On) are each refused,
// and the cluster hears it once, as FenceStorm.
func TestAStormIsAnnouncedOnce(t *testing.T) {
	w := fencesim.NewWorld(t0, partitionPolicy(), 1)
	names := []string{"n1", "n2", "n3", "n4", "n5"}
	for _, n := range names {
		w.AddNode(n, "a", fencesimTiming)
	}
	for _, n := range names[:3] {
		w.Node(n).Partitioned = true
	}
	r := newRunner(t, w, fencesim.Cluster{W: w})
	for i := 0; i < 60; i++ {
		w.Clock.Step(time.Second)
		w.Advance()
		for _, n := range names {
			r.Sync(context.Background(), n)
		}
	}
	reasons := map[string]int{}
	for _, rec := range w.Records {
		if rec.Kind == "event" {
			reasons[rec.Detail]++
		}
		if rec.Kind == "power-off" {
			t.Errorf("%s powered off in a storm", rec.Node)
		}
	}
	if reasons["FenceStorm"] != 1 || reasons["FenceRefused"] != 0 {
		t.Errorf("events %v: want one FenceStorm and no per-node FenceRefused", reasons)
	}
}
