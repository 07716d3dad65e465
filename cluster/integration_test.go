package cluster

// Integration tests against a real control plane (test/controlplane): a real
// kube-apiserver's conflict behaviour, the real node lifecycle controller
// and taint manager, and kwok kubelets that renew their Leases every 10 s.
// One control plane serves the whole package; each test owns its nodes.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"k8s.io/client-go/util/retry"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zaptest"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/kube"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
	"github.com/bmcfence/bmcfence/test/controlplane"
)

// The nodes of the shared control plane, one role each, so that tests can
// run in parallel without stepping on each other.
const (
	nodeAlive       = "alive"       // a healthy reference node; Events
	nodeCAS         = "cas"         // SaveState races
	nodeTaint       = "taint"       // taint round trips (live, no pods)
	nodeSilent      = "silent"      // killed: heartbeats stop
	nodeTerminating = "terminating" // killed and tainted: a Terminating pod
	nodeFenced      = "fenced"      // the runner fences it, then it comes back
)

var shared struct {
	once    sync.Once
	cp      *controlplane.ControlPlane
	workDir string
	err     error
}

// controlPlane returns the package's control plane, starting it on first
// use (so unit tests alone never pay for it). Missing binaries fail the test
// with the `make e2e-bins` hint: CI can never pass by testing nothing.
func controlPlane(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	if err := controlplane.BinariesAvailable(""); err != nil {
		t.Fatal(err)
	}
	shared.once.Do(func() {
		shared.workDir, shared.err = os.MkdirTemp("", "bmcfence-cluster-e2e-")
		if shared.err != nil {
			return
		}
		// Bring-up takes ~10 s; three minutes absorbs a cold page cache.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var nodes []controlplane.NodeSpec
		for i, name := range []string{nodeAlive, nodeCAS, nodeTaint, nodeSilent, nodeTerminating, nodeFenced} {
			nodes = append(nodes, controlplane.NodeSpec{Name: name, SystemUUID: fmt.Sprintf("4c4c4544-0000-0000-0000-%012d", i)})
		}
		start := time.Now()
		shared.cp, shared.err = controlplane.Start(ctx, controlplane.Options{WorkDir: shared.workDir, Nodes: nodes, Logf: verboseLogf})
		verboseLogf("cluster tests: control plane up in %.1fs", time.Since(start).Seconds())
	})
	if shared.err != nil {
		t.Fatalf("start control plane: %v", shared.err)
	}
	return shared.cp
}

func verboseLogf(format string, args ...any) {
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.cp != nil {
		if code != 0 {
			fmt.Fprintf(os.Stderr, "control plane logs (kept in %s):\n%s", shared.workDir, shared.cp.LogTails(25))
		}
		shared.cp.Stop()
		if code == 0 {
			_ = os.RemoveAll(shared.workDir)
		}
	}
	os.Exit(code)
}

// newClient is a separate clientset, as a separate agent would have; wrap,
// if set, observes its HTTP exchanges.
func newClient(t *testing.T, cp *controlplane.ControlPlane, wrap func(http.RoundTripper) http.RoundTripper) kubernetes.Interface {
	t.Helper()
	cfg := cp.RESTConfig()
	if wrap != nil {
		cfg.Wrap(wrap)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// agent is a started Cluster on the real clock; stop ends its informers.
type agent struct {
	*Cluster
	stop context.CancelFunc
}

func startAgent(t *testing.T, cp *controlplane.ControlPlane) agent {
	t.Helper()
	return startAgentWith(t, cp, Options{})
}

func startAgentWith(t *testing.T, cp *controlplane.ControlPlane, o Options) agent {
	t.Helper()
	c, err := New(clientgo.Wrap(newClient(t, cp, nil)), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := c.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return agent{Cluster: c, stop: cancel}
}

func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func waitFor(t *testing.T, ctx context.Context, desc string, cond func() (bool, error)) {
	t.Helper()
	if err := controlplane.WaitFor(ctx, t.Logf, desc, cond); err != nil {
		t.Fatal(err)
	}
}

func (a agent) view(t *testing.T, name string) fence.NodeView {
	t.Helper()
	info, ok := a.Node(name)
	if !ok {
		t.Fatalf("node %s not in the agent's view", name)
	}
	return info.View
}

// observedRenewal is the Lease renewTime the agent's informers delivered.
func (c *Cluster) observedRenewal(name string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[name]; e != nil {
		return e.obs.lease.value
	}
	return time.Time{}
}

// conflictCounter counts 409 answers to node PATCHes.
type conflictCounter struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c conflictCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil && r.Method == http.MethodPatch && resp.StatusCode == http.StatusConflict {
		c.n.Add(1)
	}
	return resp, err
}

// The two slowest tests (they wait out the node controller's grace period)
// come first, so the others run while they wait.

// TestIntegrationKilledNodeGoesSilent: once a node's kubelet dies, its
// HeartbeatAt stops while a live node's keeps advancing; the node controller
// marks it Unknown and we stamp NotReadySince; Recheck agrees that nothing
// was renewed, and sees a renewal our (stopped) cache has not.
func TestIntegrationKilledNodeGoesSilent(t *testing.T) {
	t.Parallel()
	cp := controlPlane(t)
	ctx := testContext(t, 2*time.Minute)
	a := startAgent(t, cp)

	if err := cp.KillNode(nodeSilent); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// The last renewal may still be in flight; wait until the agent has
	// delivered whatever the server holds: from then on nothing changes.
	l, err := cp.Lease(ctx, nodeSilent)
	if err != nil {
		t.Fatal(err)
	}
	lastRenewal := l.Spec.RenewTime.Time
	waitFor(t, ctx, "the agent has the dead node's last renewal", func() (bool, error) {
		return a.observedRenewal(nodeSilent).Equal(lastRenewal), nil
	})
	silentBeat := a.view(t, nodeSilent).HeartbeatAt
	aliveBeats := map[time.Time]bool{}
	var notReady fence.NodeView
	waitFor(t, ctx, "two renewals of the live node, and the dead node not Ready", func() (bool, error) {
		if got := a.view(t, nodeSilent).HeartbeatAt; !got.Equal(silentBeat) {
			return false, fmt.Errorf("the dead node's HeartbeatAt moved from %v to %v", silentBeat, got)
		}
		if hb := a.view(t, nodeAlive).HeartbeatAt; hb.After(killed) {
			aliveBeats[hb] = true
		}
		notReady = a.view(t, nodeSilent)
		return len(aliveBeats) >= 2 && notReady.Ready != fence.ReadyTrue, nil
	})
	if notReady.Ready != fence.ReadyUnknown || notReady.NotReadySince.Before(killed) {
		t.Errorf("dead node: Ready=%v NotReadySince=%v (killed %v); want Unknown, stamped after the kill", notReady.Ready, notReady.NotReadySince, killed)
	}
	t.Logf("dead node silent since %v; NotReady observed %.1fs after the kill; APIFreshAt %.1fs ago",
		silentBeat.Format(time.TimeOnly), notReady.NotReadySince.Sub(killed).Seconds(), time.Since(a.APIFreshAt()).Seconds())
	if age := time.Since(a.APIFreshAt()); age > 15*time.Second {
		t.Errorf("APIFreshAt is %s old with a live node renewing every 10 s", age)
	}

	rc, err := a.Recheck(ctx, nodeSilent)
	if err != nil {
		t.Fatal(err)
	}
	if rc.LeaseRenewed {
		t.Error("Recheck of the dead node: LeaseRenewed, want not")
	}
	if rc.LeaseMissing {
		t.Error("Recheck of the dead node: LeaseMissing, though the server holds its Lease")
	}

	// Freeze the agent's view, then renew the Lease on the server: only
	// Recheck can know.
	a.stop()
	waitFor(t, ctx, "the agent's informers stopped", func() (bool, error) {
		for _, ni := range a.informers {
			if !ni.informer.IsStopped() {
				return false, nil
			}
		}
		return true, nil
	})
	l, err = cp.Lease(ctx, nodeSilent)
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
	if _, err := cp.Client().CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err = a.Recheck(ctx, nodeSilent)
	if err != nil {
		t.Fatal(err)
	}
	if !rc.LeaseRenewed {
		t.Error("Recheck after a renewal the cache has not seen: LeaseRenewed false")
	}
	if got := a.view(t, nodeSilent).HeartbeatAt; !got.Equal(silentBeat) {
		t.Errorf("the stopped cache's HeartbeatAt moved to %v", got)
	}
}

// oneNode shows the runner a single node of the shared control plane, so
// that it never touches the nodes other tests own. Everything else (the
// Lease-driven APIFreshAt, the writes) is the real Cluster's.
type oneNode struct {
	*Cluster
	name    string
	changed chan string
}

func (o oneNode) Nodes() []runner.NodeInfo {
	if info, ok := o.Cluster.Node(o.name); ok {
		return []runner.NodeInfo{info}
	}
	return nil
}

func (o oneNode) Node(name string) (runner.NodeInfo, bool) {
	if name != o.name {
		return runner.NodeInfo{}, false
	}
	return o.Cluster.Node(name)
}

func (o oneNode) Changed() <-chan string { return o.changed }

// oneBMC is the inventory: one fake BMC for the one node.
type oneBMC struct {
	name string
	bmc  *bmctest.Fake
}

func (i oneBMC) Controller(node string) (runner.PowerController, bool) {
	if node != i.name {
		return nil, false
	}
	return i.bmc, true
}

func phaseOf(t *testing.T, n *corev1.Node) fence.Phase {
	t.Helper()
	raw := n.Annotations[AnnotationState]
	if raw == "" {
		return fence.Healthy
	}
	s, err := fence.Decode(raw)
	if err != nil {
		t.Fatalf("state annotation: %v", err)
	}
	return s.Phase
}

// TestIntegrationRunnerFencesAndRecoversANode drives the real runner with
// this Cluster: a node with a pod shuts down (BMC reads Off, kubelet gone);
// the runner proves it off, taints it, force-deletes the evicted pod and
// reaches Fenced; the node comes back and our taint comes off. This is the
// contract fencesim's World models, on a real API server.
func TestIntegrationRunnerFencesAndRecoversANode(t *testing.T) {
	t.Parallel()
	cp := controlPlane(t)
	ctx := testContext(t, 2*time.Minute)
	admin := cp.Client()
	const ns = "fenced"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pods := admin.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: nodeFenced,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "db-0 Running", func() (bool, error) {
		p, err := pods.Get(ctx, "db-0", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})

	a := startAgent(t, cp)
	view := oneNode{Cluster: a.Cluster, name: nodeFenced, changed: make(chan string, changedBuffer)}
	runCtx, stopRunner := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() {
		for {
			select {
			case <-runCtx.Done():
				return
			case name := <-a.Changed():
				if name == nodeFenced {
					select {
					case view.changed <- name:
					default:
					}
				}
			}
		}
	})
	// Short enough for a test, the default's shape otherwise: suspect
	// after 12 s of silence (one missed 10 s renewal and a margin), settle
	// on two Off reads a second apart. MaxAPIStaleness may not exceed
	// SuspectAfter; three live kwoks renew every 10 s, so the view stays
	// fresh.
	policy := fence.DefaultPolicy()
	policy.SuspectAfter, policy.FenceAfter, policy.MaxAPIStaleness = 12*time.Second, 12*time.Second, 12*time.Second
	policy.SettleWindow, policy.SettleReads, policy.ReadInterval = time.Second, 2, 500*time.Millisecond
	policy.DetachPoll, policy.Cooldown = 500*time.Millisecond, 0
	machine := bmctest.New(clock.RealClock{})
	r, err := runner.New(runner.Options{Policy: policy, Clock: clock.RealClock{}, Cluster: view,
		Inventory: oneBMC{name: nodeFenced, bmc: machine}, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	bg.Go(func() { _ = r.Run(runCtx) })
	defer func() { stopRunner(); bg.Wait() }()

	// The machine shuts down: power off, and its kubelet with it.
	if err := cp.KillNode(nodeFenced); err != nil {
		t.Fatal(err)
	}
	machine.SetPower(false)
	down := time.Now()
	var n *corev1.Node
	waitFor(t, ctx, "the runner fences the node (tainted, pod gone, Fenced)", func() (bool, error) {
		if n, err = admin.CoreV1().Nodes().Get(ctx, nodeFenced, metav1.GetOptions{}); err != nil {
			return false, err
		}
		_, err := pods.Get(ctx, "db-0", metav1.GetOptions{})
		return phaseOf(t, n) == fence.Fenced && apierrors.IsNotFound(err), ignoreNotFound(err)
	})
	if TaintStateOf(n) != fence.TaintOurs {
		t.Fatalf("fenced node: taints %+v, owner %q; want ours", n.Spec.Taints, n.Annotations[AnnotationTaintOwner])
	}
	t.Logf("fenced %.1fs after the shutdown (suspect after %s)", time.Since(down).Seconds(), policy.SuspectAfter)
	// It read Off, and the runner still sent its own ForceOff: an Off it
	// did not cause proves nothing.
	if got := machine.Count(bmc.OpPowerOff); got != 1 {
		t.Errorf("%d power-offs sent, want our own one", got)
	}

	// It comes back, after the node controller has noticed it was gone
	// (RestartNode waits for kwok to mark the node Ready again, which kwok
	// only does for a node that is not Ready).
	waitFor(t, ctx, "the node controller marks the node not Ready", func() (bool, error) {
		return a.view(t, nodeFenced).Ready != fence.ReadyTrue, nil
	})
	machine.SetPower(true)
	back := time.Now()
	if err := cp.RestartNode(ctx, nodeFenced); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the runner removes our taint and returns to Healthy", func() (bool, error) {
		if n, err = admin.CoreV1().Nodes().Get(ctx, nodeFenced, metav1.GetOptions{}); err != nil {
			return false, err
		}
		return phaseOf(t, n) == fence.Healthy && !HasOutOfServiceTaint(n), nil
	})
	t.Logf("untainted %.1fs after power-on", time.Since(back).Seconds())
	if n.Annotations[AnnotationTaintOwner] != "" {
		t.Errorf("owner annotation left behind: %q", n.Annotations[AnnotationTaintOwner])
	}

	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.name": nodeFenced, "source": DefaultComponent}.String()})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range evs.Items {
		reasons = append(reasons, e.Reason)
	}
	t.Logf("Events on %s: %v", nodeFenced, reasons)
	if len(reasons) == 0 {
		t.Error("no Events on the fenced node")
	}
}

// TestIntegrationSaveStateOneWriterWins: two agents race to advance the same
// node from the same state, while a third party keeps writing an unrelated
// annotation. Every round exactly one wins and the other gets ErrConflict;
// the unrelated writes only cost retries.
func TestIntegrationSaveStateOneWriterWins(t *testing.T) {
	t.Parallel()
	cp := controlPlane(t)
	ctx := testContext(t, time.Minute)
	admin := cp.Client()

	t.Run("the API server refuses a patch with a stale resourceVersion", func(t *testing.T) {
		n, err := admin.CoreV1().Nodes().Get(ctx, nodeCAS, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().Nodes().Patch(ctx, nodeCAS, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"test/noise":"first"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		stale := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:"S"}}}`, n.ResourceVersion, AnnotationState)
		_, err = admin.CoreV1().Nodes().Patch(ctx, nodeCAS, types.MergePatchType, []byte(stale), metav1.PatchOptions{})
		if !apierrors.IsConflict(err) {
			t.Fatalf("stale patch = %v, want 409 Conflict", err)
		}
	})

	var conflicts atomic.Int64
	count := func(rt http.RoundTripper) http.RoundTripper { return conflictCounter{next: rt, n: &conflicts} }
	agents := make([]*Cluster, 2)
	for i := range agents {
		c, err := New(clientgo.Wrap(newClient(t, cp, count)), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
		agents[i] = c
	}

	// The third party: an unrelated annotation, every 20 ms.
	noiseCtx, stopNoise := context.WithCancel(ctx)
	var noise sync.WaitGroup
	noise.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"test/noise":"%d"}}}`, i)
			_, _ = admin.CoreV1().Nodes().Patch(noiseCtx, nodeCAS, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			select {
			case <-noiseCtx.Done():
				return
			case <-tick.C:
			}
		}
	})
	defer func() { stopNoise(); noise.Wait() }()

	const rounds = 25
	wins := [2]int{}
	for round := range rounds {
		old, err := agents[0].CurrentState(ctx, nodeCAS)
		if err != nil {
			t.Fatal(err)
		}
		var errs [2]error
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i, a := range agents {
			wg.Go(func() {
				<-gate
				errs[i] = a.SaveState(ctx, nodeCAS, old, fmt.Sprintf("round-%d-agent-%d", round, i), "")
			})
		}
		close(gate)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: both agents advanced the node from %q", round, old)
				}
				winner = i
			case !errors.Is(err, runner.ErrConflict):
				t.Fatalf("round %d: agent %d: %v, want nil or ErrConflict", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody won: %v", round, errs)
		}
		wins[winner]++
		got, err := agents[1].CurrentState(ctx, nodeCAS)
		if want := fmt.Sprintf("round-%d-agent-%d", round, winner); err != nil || got != want {
			t.Fatalf("round %d: state on the server = %q, %v; want the winner's %q", round, got, err, want)
		}
	}
	t.Logf("%d rounds: wins %v; the API server answered %d patches with 409 (lost races, retried or refused)", rounds, wins, conflicts.Load())
	if conflicts.Load() == 0 {
		t.Error("no 409 at all: the race was never exercised")
	}
}

// TestIntegrationNodePatchRightsAloneTriggerNothing: a request written as
// the node annotation of old (anyone able to patch the Node, its own
// kubelet included, can write one naming any user) is never offered to the
// engine; the agent says why in a Warning Event. An authenticated request
// (SetRequest, from a BMCFenceRequest) is, and goes with the state write
// that takes it in.
func TestIntegrationNodePatchRightsAloneTriggerNothing(t *testing.T) {
	t.Parallel()
	cp := controlPlane(t)
	ctx := testContext(t, 30*time.Second)
	a := startAgent(t, cp)
	req, err := EncodeRequest(Request{ID: "req-1", Kind: fence.CmdConfirm, User: "alice", Reason: "pulled the plug", At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationRequest, req)
	if _, err := cp.Client().CoreV1().Nodes().Patch(ctx, nodeAlive, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "a FenceRequestInvalid Event for the annotation", func() (bool, error) {
		evs, err := cp.Client().CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + nodeAlive + ",reason=FenceRequestInvalid"})
		return err == nil && len(evs.Items) > 0, nil
	})
	if info, _ := a.Node(nodeAlive); info.Command != nil || info.CommandID != "" {
		t.Fatalf("the annotation reached the engine: Command = %+v, CommandID = %q", info.Command, info.CommandID)
	}

	var taken []string
	a.OnRequestTaken(func(node, id string) { taken = append(taken, node+"/"+id) })
	a.SetRequest(nodeAlive, "req-2", fence.Command{Kind: fence.CmdAbort, User: "alice", Reason: "false alarm"})
	info, _ := a.Node(nodeAlive)
	if info.Command == nil || info.CommandID != "req-2" {
		t.Fatalf("an authenticated request: Command = %+v, CommandID = %q", info.Command, info.CommandID)
	}
	if err := a.SaveState(ctx, nodeAlive, info.State, "after-abort", info.CommandID); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{nodeAlive + "/req-2"}, taken); diff != "" {
		t.Errorf("requests taken (-want +got):\n%s", diff)
	}
	if info, _ := a.Node(nodeAlive); info.Command != nil {
		t.Errorf("after the state write that took it in: Command = %+v, want none", info.Command)
	}
}

// TestIntegrationTaintRoundTrip: our taint goes on with the owner
// annotation and comes off with it; a foreign taint is neither claimed nor
// removed.
func TestIntegrationTaintRoundTrip(t *testing.T) {
	t.Parallel()
	cp := controlPlane(t)
	ctx := testContext(t, time.Minute)
	a := startAgent(t, cp)
	nodes := cp.Client().CoreV1().Nodes()
	get := func() *corev1.Node {
		t.Helper()
		n, err := nodes.Get(ctx, nodeTaint, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	viewTaint := func(want fence.TaintState) {
		t.Helper()
		waitFor(t, ctx, fmt.Sprintf("the agent's view of %s: taint %v", nodeTaint, want), func() (bool, error) {
			return a.view(t, nodeTaint).Taint == want, nil
		})
	}

	// The fencing token: the state annotation this agent last wrote.
	const token = `{"v":2,"ph":"Tainting"}`
	if err := a.SaveState(ctx, nodeTaint, "", token, ""); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Truncate(time.Second)
	for range 2 { // idempotent
		if err := a.ApplyTaint(ctx, nodeTaint, token); err != nil {
			t.Fatal(err)
		}
	}
	n := get()
	var ours []corev1.Taint
	for _, tt := range n.Spec.Taints {
		if tt.Key == TaintKey {
			ours = append(ours, tt)
		}
	}
	if len(ours) != 1 || ours[0].Value != TaintValue || ours[0].Effect != TaintEffect || ours[0].TimeAdded == nil ||
		ours[0].TimeAdded.Time.Before(before) || ours[0].TimeAdded.Time.After(time.Now()) {
		t.Fatalf("taints after ApplyTaint = %+v, want one %s=%s:%s added now", n.Spec.Taints, TaintKey, TaintValue, TaintEffect)
	}
	if n.Annotations[AnnotationTaintOwner] != TaintOwnerMark(ours[0]) {
		t.Fatalf("owner annotation = %q, want %q", n.Annotations[AnnotationTaintOwner], TaintOwnerMark(ours[0]))
	}
	viewTaint(fence.TaintOurs)

	for range 2 {
		if err := a.RemoveTaint(ctx, nodeTaint, token); err != nil {
			t.Fatal(err)
		}
	}
	n = get()
	if HasOutOfServiceTaint(n) || n.Annotations[AnnotationTaintOwner] != "" {
		t.Fatalf("after RemoveTaint: taints %+v, owner %q", n.Spec.Taints, n.Annotations[AnnotationTaintOwner])
	}
	viewTaint(fence.TaintAbsent)

	// A human applies the taint by hand.
	hand := n.DeepCopy()
	hand.Spec.Taints = append(hand.Spec.Taints, corev1.Taint{Key: TaintKey, Value: "by-hand", Effect: corev1.TaintEffectNoExecute})
	if _, err := nodes.Update(ctx, hand, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	viewTaint(fence.TaintForeign)
	if err := a.ApplyTaint(ctx, nodeTaint, token); err != nil {
		t.Fatal(err)
	}
	if err := a.RemoveTaint(ctx, nodeTaint, token); err != nil {
		t.Fatal(err)
	}
	n = get()
	if !HasOutOfServiceTaint(n) || n.Annotations[AnnotationTaintOwner] != "" {
		t.Errorf("foreign taint after ApplyTaint+RemoveTaint: taints %+v, owner %q; want it untouched and unclaimed", n.Spec.Taints, n.Annotations[AnnotationTaintOwner])
	}
	if got := a.view(t, nodeTaint).Taint; got != fence.TaintForeign {
		t.Errorf("view: %v, want foreign", got)
	}
}

// TestIntegrationDeleteTerminatingPodsOfAKilledNode: a pod on a dead,
// tainted node is evicted by the taint manager but stays Terminating (no
// kubelet finishes it); DeleteTerminatingPods removes it without waiting
// for pod GC. Beside the Cluster that caches every pod, one with
// PodsOfFencingNodesOnly (the agent's) says PodsUnknown until the node's
// state reaches Tainting, then counts the node's pods from its own watch,
// and stops watching once the state moves on.
func TestIntegrationDeleteTerminatingPodsOfAKilledNode(t *testing.T) {
	t.Parallel()
	cp := controlPlane(t)
	ctx := testContext(t, time.Minute)
	const ns = "terminating"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pods := cp.Client().CoreV1().Pods(ns)
	victim := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:   nodeTerminating, // no scheduler: this node, whatever its taints
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if _, err := pods.Create(ctx, victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "victim Running", func() (bool, error) {
		p, err := pods.Get(ctx, "victim", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
	a := startAgent(t, cp)
	waitFor(t, ctx, "the agent counts the pod", func() (bool, error) {
		v := a.view(t, nodeTerminating)
		return v.Pods == 1 && len(v.Blockers) == 1 && v.Blockers[0] == "pod terminating/victim", nil
	})
	f := startAgentWith(t, cp, Options{PodsOfFencingNodesOnly: true})
	if v := f.view(t, nodeTerminating); !v.PodsUnknown || v.Pods != 0 || !slices.Equal(v.Blockers, []string{"pods not listed yet"}) {
		t.Errorf("node not being fenced, pods of fencing nodes only: PodsUnknown %v, Pods %d, Blockers %q; want unknown, 0, [pods not listed yet]", v.PodsUnknown, v.Pods, v.Blockers)
	}
	// Other tests fence other nodes of the shared control plane at the
	// same time: only this node's watch is asked about.
	if f.WatchesPodsOf(nodeTerminating) {
		t.Errorf("the pods of %s watched before its fence", nodeTerminating)
	}

	if err := cp.KillNode(nodeTerminating); err != nil {
		t.Fatal(err)
	}
	// The node is still Ready for the grace period: pod GC will not touch
	// its pods, so whatever deletes the victim below is us.
	const token = `{"v":2,"ph":"Tainting"}`
	if err := a.SaveState(ctx, nodeTerminating, "", token, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the Cluster of fencing nodes' pods lists the node's pod once its state is Tainting", func() (bool, error) {
		v := f.view(t, nodeTerminating)
		return !v.PodsUnknown && v.Pods == 1 && slices.Equal(v.Blockers, []string{"pod terminating/victim"}), nil
	})
	if !f.WatchesPodsOf(nodeTerminating) {
		t.Errorf("the pods of %s not watched during its fence", nodeTerminating)
	}
	if err := a.ApplyTaint(ctx, nodeTerminating, token); err != nil {
		t.Fatal(err)
	}
	var uid types.UID
	waitFor(t, ctx, "the taint manager evicts the victim (Terminating, never finished)", func() (bool, error) {
		p, err := pods.Get(ctx, "victim", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		uid = p.UID
		return p.DeletionTimestamp != nil, nil
	})
	n, err := a.DeleteTerminatingPods(ctx, nodeTerminating, token)
	if err != nil || n != 1 {
		t.Fatalf("DeleteTerminatingPods = %d, %v; want 1", n, err)
	}
	if _, err := pods.Get(ctx, "victim", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("victim after DeleteTerminatingPods: %v, want NotFound", err)
	}
	waitFor(t, ctx, "the agent counts no pods", func() (bool, error) {
		return a.view(t, nodeTerminating).Pods == 0, nil
	})
	waitFor(t, ctx, "the Cluster of fencing nodes' pods counts no pods, known", func() (bool, error) {
		v := f.view(t, nodeTerminating)
		return !v.PodsUnknown && v.Pods == 0 && len(v.Blockers) == 0, nil
	})
	if n, err := a.DeleteTerminatingPods(ctx, nodeTerminating, token); err != nil || n != 0 {
		t.Errorf("second DeleteTerminatingPods = %d, %v; want 0", n, err)
	}
	// Past the detach the node's pods are not read: the watch ends.
	if err := a.SaveState(ctx, nodeTerminating, token, `{"v":2,"ph":"Fenced"}`, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the Cluster of fencing nodes' pods stops watching the fenced node's pods", func() (bool, error) {
		return f.view(t, nodeTerminating).PodsUnknown && !f.WatchesPodsOf(nodeTerminating), nil
	})
	t.Logf("victim %s force-deleted", uid)
}

// TestIntegrationEventsOnTheNode: Events land on the Node as kubectl
// describe node shows them.
func TestIntegrationEventsOnTheNode(t *testing.T) {
	t.Parallel()
	cp := controlPlane(t)
	ctx := testContext(t, 30*time.Second)
	a := startAgent(t, cp)
	node, err := cp.Client().CoreV1().Nodes().Get(ctx, nodeAlive, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.Event(nodeAlive, fence.Event{Warning: true, Reason: "FenceCannotVerify", Message: "BMC unreachable (integration test)"})
	a.Event(nodeAlive, fence.Event{Reason: "FenceRecovered", Message: "node back (integration test)"})
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := cp.Client().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": "Node", "involvedObject.name": nodeAlive, "source": DefaultComponent}.String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]corev1.Event{}
	for _, e := range list.Items {
		got[e.Reason] = e
	}
	for reason, typ := range map[string]string{"FenceCannotVerify": corev1.EventTypeWarning, "FenceRecovered": corev1.EventTypeNormal} {
		e, ok := got[reason]
		if !ok {
			t.Errorf("no %s Event on node %s (have %d)", reason, nodeAlive, len(list.Items))
			continue
		}
		if e.Type != typ || e.InvolvedObject.UID != node.UID || e.Source.Component != DefaultComponent {
			t.Errorf("%s Event: type %s uid %s source %q; want %s, %s, %q", reason, e.Type, e.InvolvedObject.UID, e.Source.Component, typ, node.UID, DefaultComponent)
		}
	}
}

// TestIntegrationLeaderElection: of two candidates exactly one runs;
// cancelling the leader hands over to the other; a leader whose Lease is
// taken from it stops, and leads again once it can.
func TestIntegrationLeaderElection(t *testing.T) {
	t.Parallel()
	cp := controlPlane(t)
	ctx := testContext(t, time.Minute)
	// Short timings keep the test short; the ratios are the defaults'.
	opts := func(id string) LeaderOptions {
		return LeaderOptions{Namespace: metav1.NamespaceDefault, Name: "bmcfence-test", Identity: id,
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 400 * time.Millisecond}
	}
	type candidate struct {
		id      string
		cancel  context.CancelFunc
		done    chan struct{}
		leading atomic.Bool
		terms   atomic.Int32
	}
	var running, overlaps atomic.Int32
	start := func(id string) *candidate {
		cctx, cancel := context.WithCancel(ctx)
		c := &candidate{id: id, cancel: cancel, done: make(chan struct{})}
		// The agent's own client, as the agent elects with.
		client, err := kube.NewForConfig(cp.RESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(c.done)
			if err := RunLeader(cctx, client, opts(id), func(runCtx context.Context) {
				if running.Add(1) > 1 {
					overlaps.Add(1)
				}
				c.terms.Add(1)
				c.leading.Store(true)
				<-runCtx.Done()
				c.leading.Store(false)
				running.Add(-1)
			}); err != nil {
				t.Error(err)
			}
		}()
		t.Cleanup(func() { cancel(); <-c.done })
		return c
	}
	a, b := start("agent-a"), start("agent-b")
	var leader, standby *candidate
	waitFor(t, ctx, "a leader", func() (bool, error) {
		switch {
		case a.leading.Load():
			leader, standby = a, b
		case b.leading.Load():
			leader, standby = b, a
		}
		return leader != nil, nil
	})
	if err := controlplane.Consistently(ctx, 2*time.Second, "exactly one leads", func() (bool, error) {
		return leader.leading.Load() && !standby.leading.Load(), nil
	}); err != nil {
		t.Fatal(err)
	}

	handover := time.Now()
	leader.cancel()
	waitFor(t, ctx, standby.id+" takes over", func() (bool, error) { return standby.leading.Load(), nil })
	<-leader.done
	t.Logf("handover after cancelling %s: %.1fs (the Lease is released, not left to expire)", leader.id, time.Since(handover).Seconds())

	// Someone else takes the Lease (as a partitioned leader would find on
	// its return): the leader must stop at its renew deadline, then campaign
	// again and lead once the intruder's Lease expires.
	lost := time.Now()
	leases := cp.Client().CoordinationV1().Leases(metav1.NamespaceDefault)
	// The leader renews the Lease meanwhile: a conflict means read again.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, "bmcfence-test", metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity = ptr.To("intruder")
		l.Spec.LeaseDurationSeconds = ptr.To[int32](2)
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, standby.id+" stops leading", func() (bool, error) { return !standby.leading.Load(), nil })
	t.Logf("%s stopped %.1fs after losing its Lease", standby.id, time.Since(lost).Seconds())
	waitFor(t, ctx, standby.id+" leads again", func() (bool, error) { return standby.leading.Load(), nil })
	if got := standby.terms.Load(); got != 2 {
		t.Errorf("%s led %d times, want 2", standby.id, got)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping terms", n)
	}
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// The agent's client asks for protobuf (cmd/fence-agent's withProtobuf),
// and its Lease lists are read field by field (decodeLeaseList): on the
// real API server, they hold what the typed list slimmed holds.
func TestIntegrationLeaseListReadsProtobuf(t *testing.T) {
	t.Parallel()
	cp := controlPlane(t)
	ctx := testContext(t, time.Minute)
	var mu sync.Mutex
	var contentType string
	cfg := cp.RESTConfig()
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && strings.HasSuffix(r.URL.Path, "/namespaces/kube-node-lease/leases") {
				mu.Lock()
				contentType = resp.Header.Get("Content-Type")
				mu.Unlock()
			}
			return resp, err
		})
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	leases := client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	if _, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "wire-read", Labels: map[string]string{"x": "y"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("wire-read"), RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	raw, err := listLeases(ctx, client.CoordinationV1().RESTClient(), leases, &buf)
	if err != nil {
		t.Fatal(err)
	}
	got := coordinationv1.LeaseList{Items: leaseItems(t, raw)}
	mu.Lock()
	if !strings.HasPrefix(contentType, runtime.ContentTypeProtobuf) {
		t.Errorf("the Lease list came as %q, want protobuf", contentType)
	}
	mu.Unlock()
	typed, err := leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*coordinationv1.Lease{}
	for i := range typed.Items {
		s, _ := slimLease(&typed.Items[i])
		want[typed.Items[i].Name] = s.(*coordinationv1.Lease)
	}
	if len(got.Items) == 0 || want["wire-read"] == nil {
		t.Fatalf("%d Leases read, typed list %d", len(got.Items), len(typed.Items))
	}
	for i := range got.Items {
		g := &got.Items[i]
		w := want[g.Name]
		if w == nil || w.ResourceVersion != g.ResourceVersion {
			continue // renewed between the two lists
		}
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("Lease %s (-typed, slimmed +read field by field):\n%s", g.Name, diff)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
