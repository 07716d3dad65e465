package drain

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/fence"
)

var (
	deploymentsResource = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	nodesResource       = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
)

// progressLog collects Progress calls.
type progressLog struct {
	mu  sync.Mutex
	all []Progress
}

func (l *progressLog) record(p Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, p)
}

func (l *progressLog) states(workload string) []State {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []State
	for _, p := range l.all {
		if p.Workload == workload && (len(out) == 0 || out[len(out)-1] != p.State) {
			out = append(out, p.State)
		}
	}
	return out
}

func (l *progressLog) mentions(fragment string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.all {
		if strings.Contains(p.Message, fragment) {
			return true
		}
	}
	return false
}

// planAndExecute plans a drain of n1 on c and executes it while driving the
// fake clock (see drive).
func planAndExecute(t *testing.T, c *fake.Clientset, opts Options, fc *clocktesting.FakeClock, waiters int) (Report, error) {
	t.Helper()
	plan, err := MakePlan(context.Background(), c, "n1", opts)
	if err != nil {
		t.Fatalf("MakePlan: %v", err)
	}
	c.ClearActions()
	var rep Report
	drive(t, fc, waiters, opts.PollInterval, func() { rep, err = Execute(context.Background(), c, plan, opts) })
	return rep, err
}

var workloadOutcome = cmpopts.IgnoreFields(WorkloadReport{}, "Message", "Elapsed")

// TestExecuteRollsOutTheSeedCase: the Deployment whose two replicas both
// run on n1 is rollout-restarted, not evicted; the node is cordoned and in
// maintenance first; Events and progress tell the story.
func TestExecuteRollsOutTheSeedCase(t *testing.T) {
	dep, rs := deployment("web", 2, 2)
	c := fake.NewClientset(node("n1"), node("n2"), dep, rs,
		pod("web-a", "n1", inDeployment("web")), pod("web-b", "n1", inDeployment("web")))
	// The deployment controller, instantly: the restart is observed, the
	// new ReplicaSet's pods are available elsewhere, the old ones gone.
	var restartedAt string
	c.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		var patch struct {
			Spec struct {
				Template struct {
					Metadata struct {
						Annotations map[string]string `json:"annotations"`
					} `json:"metadata"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &patch); err != nil {
			return true, nil, err
		}
		restartedAt = patch.Spec.Template.Metadata.Annotations[RestartedAtAnnotation]
		obj, err := c.Tracker().Get(deploymentsResource, ns, "web")
		if err != nil {
			return true, nil, err
		}
		d := obj.(*appsv1.Deployment).DeepCopy()
		d.Spec.Template.Annotations = patch.Spec.Template.Metadata.Annotations
		d.Generation++
		d.Status.ObservedGeneration = d.Generation
		d.Annotations[revisionAnnotation] = "2"
		if err := c.Tracker().Update(deploymentsResource, d, ns); err != nil {
			return true, nil, err
		}
		deletePod(c, "web-a")
		deletePod(c, "web-b")
		return true, d, nil
	})
	opts, fc := fakeOptions()
	var progress progressLog
	opts.Progress = progress.record

	rep, err := planAndExecute(t, c, opts, fc, 2)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	wantWorkloads := []WorkloadReport{{Workload: "Deployment shop/web", Action: ActionRolloutRestart, Pods: []string{"shop/web-a", "shop/web-b"}, State: StateDone}}
	if diff := cmp.Diff(wantWorkloads, rep.Workloads, workloadOutcome); diff != "" {
		t.Errorf("workloads (-want +got):\n%s", diff)
	}
	if !rep.Complete || len(rep.Left) > 0 {
		t.Errorf("report: complete=%v left=%v, want complete and nothing left", rep.Complete, rep.Left)
	}
	if restartedAt != t0.Format(time.RFC3339) {
		t.Errorf("restartedAt = %q, want %q (the injected clock, kubectl's format)", restartedAt, t0.Format(time.RFC3339))
	}
	// The mark a running drain holds expires (a drain that dies does not
	// hold the node for ever); once complete, it holds until undrain.
	wantWrites := []string{"patch nodes", "create events", "patch deployments", "patch nodes", "create events"}
	if diff := cmp.Diff(wantWrites, writes(c)); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{ReasonDrainStarted, ReasonDrainCompleted}, eventReasons(c)); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
	n, err := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cluster.DecodeMaintenance(n.Annotations[cluster.AnnotationMaintenance])
	if err != nil {
		t.Fatalf("maintenance annotation: %v", err)
	}
	if diff := cmp.Diff(cluster.Maintenance{By: "ops@example.com", Reason: "firmware", Since: t0, Cordoned: true}, m); diff != "" || !n.Spec.Unschedulable {
		t.Errorf("node: unschedulable=%v, maintenance (-want +got):\n%s", n.Spec.Unschedulable, diff)
	}
	if diff := cmp.Diff([]State{StateStarted, StateWaiting, StateDone}, progress.states("Deployment shop/web")); diff != "" {
		t.Errorf("progress states (-want +got):\n%s", diff)
	}
}

// tooManyRequests is the API server's answer to an eviction a
// PodDisruptionBudget forbids.
func tooManyRequests(budgetName string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause,
		Message: "The disruption budget " + budgetName + " needs 2 healthy pods and has 2 currently"}}
	return err
}

// evictions records eviction attempts (pod name and fake time) and
// answers them with answer.
type evictions struct {
	mu       sync.Mutex
	attempts []string
	at       []time.Duration
}

func (e *evictions) react(c *fake.Clientset, fc *clocktesting.FakeClock, answer func(n int, name string) error) {
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name
		e.mu.Lock()
		e.attempts = append(e.attempts, name)
		e.at = append(e.at, fc.Since(t0))
		n := len(e.attempts)
		e.mu.Unlock()
		return true, nil, answer(n, name)
	})
}

func (e *evictions) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.attempts)
}

// budgetCase: web has three replicas, web-a on n1 and two on n2, and a
// PodDisruptionBudget web-pdb that allows no disruption.
func budgetCase() *fake.Clientset {
	dep, rs := deployment("web", 3, 3, unavailable(1))
	return fake.NewClientset(node("n1"), node("n2"), dep, rs, budget("web-pdb", "web", 0, 3, 3),
		pod("web-a", "n1", inDeployment("web")), pod("web-b", "n2", inDeployment("web")), pod("web-c", "n2", inDeployment("web")))
}

func TestExecuteRetriesEvictionsABudgetRefuses(t *testing.T) {
	c := budgetCase()
	opts, fc := fakeOptions()
	var progress progressLog
	opts.Progress = progress.record
	var ev evictions
	ev.react(c, fc, func(n int, name string) error {
		if n <= 2 {
			return tooManyRequests("web-pdb")
		}
		deletePod(c, name)
		return nil
	})
	rep, err := planAndExecute(t, c, opts, fc, 2)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	// Backoff from the poll interval, doubling: 1 s, then 2 s.
	if diff := cmp.Diff([]time.Duration{0, time.Second, 3 * time.Second}, ev.at); diff != "" {
		t.Errorf("eviction attempts at (-want +got):\n%s", diff)
	}
	if !progress.mentions("PodDisruptionBudget shop/web-pdb (allows 0 disruption(s): 3 healthy, 3 required)") {
		t.Errorf("progress never named the blocking budget: %+v", progress.all)
	}
	if !rep.Complete {
		t.Errorf("report not complete: %+v", rep)
	}
}

func TestExecuteTimeoutReportsTheBlockingBudget(t *testing.T) {
	c := budgetCase()
	opts, fc := fakeOptions()
	opts.Timeout = 30 * time.Second
	var ev evictions
	ev.react(c, fc, func(int, string) error { return tooManyRequests("web-pdb") })

	rep, err := planAndExecute(t, c, opts, fc, 2)
	if !errors.Is(err, ErrIncomplete) {
		t.Fatalf("Execute error = %v, want ErrIncomplete", err)
	}
	if !rep.TimedOut || rep.Complete || rep.Elapsed != "30s" {
		t.Errorf("report: timedOut=%v complete=%v elapsed=%s, want a timeout after 30s", rep.TimedOut, rep.Complete, rep.Elapsed)
	}
	wantLeft := []LeftPod{{Pod: "shop/web-a", Owner: "Deployment/web", BlockedBy: []string{"shop/web-pdb"}}}
	if diff := cmp.Diff(wantLeft, rep.Left, cmpopts.IgnoreFields(LeftPod{}, "Reason")); diff != "" {
		t.Errorf("left (-want +got):\n%s", diff)
	}
	if len(rep.Left) == 1 && !strings.Contains(rep.Left[0].Reason, "PodDisruptionBudget shop/web-pdb") {
		t.Errorf("left reason %q does not name the budget", rep.Left[0].Reason)
	}
	if diff := cmp.Diff([]string{ReasonDrainStarted, ReasonDrainIncomplete}, eventReasons(c)); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
	// The final word names the budget and promises no retry: none comes.
	if len(rep.Workloads) != 1 || rep.Workloads[0].State != StateWaiting ||
		!strings.Contains(rep.Workloads[0].Message, "shop/web-pdb") || strings.Contains(rep.Workloads[0].Message, "retrying") {
		t.Errorf("workloads: %+v; want web waiting, naming shop/web-pdb, no retry promised", rep.Workloads)
	}
	if _, err := c.CoreV1().Pods(ns).Get(context.Background(), "web-a", metav1.GetOptions{}); err != nil {
		t.Errorf("web-a: %v; the budget must keep it", err)
	}
	// 1+2+4+8+10 s of backoff, then the timeout: six attempts.
	if got := ev.count(); got != 6 {
		t.Errorf("%d eviction attempts in 30 s, want 6 (backoff 1, 2, 4, 8, 10 s)", got)
	}
}

// TestExecuteStatefulSetOneAtATime: the second eviction waits until the
// first pod's replacement is Ready (5 s after it was created).
func TestExecuteStatefulSetOneAtATime(t *testing.T) {
	c := fake.NewClientset(node("n1"), node("n2"), statefulSet("db", 2, appsv1.OnDeleteStatefulSetStrategyType),
		pod("db-0", "n1", inStatefulSet("db")), pod("db-1", "n1", inStatefulSet("db")))
	opts, fc := fakeOptions()
	readyAt := map[string]time.Time{}
	var mu sync.Mutex
	var ev evictions
	ev.react(c, fc, func(_ int, name string) error {
		deletePod(c, name)
		// The StatefulSet controller recreates it on n2, not Ready yet.
		replacement := pod(name, "n2", inStatefulSet("db"), notReadyPod())
		replacement.UID = types.UID("uid-" + name + "-new")
		mu.Lock()
		readyAt[name] = fc.Now().Add(5 * time.Second)
		mu.Unlock()
		return c.Tracker().Create(podsResource, replacement, ns)
	})
	// kwok, after 5 s: the replacement turns Ready.
	c.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		name := a.(k8stesting.GetAction).GetName()
		mu.Lock()
		at, ok := readyAt[name]
		mu.Unlock()
		if !ok || fc.Now().Before(at) {
			return false, nil, nil
		}
		obj, err := c.Tracker().Get(podsResource, ns, name)
		if err != nil {
			return true, nil, err
		}
		p := obj.(*corev1.Pod).DeepCopy()
		if p.Status.Conditions[0].Status != corev1.ConditionTrue {
			// Ready from now on, for lists too.
			p.Status.Conditions[0].Status = corev1.ConditionTrue
			if err := c.Tracker().Update(podsResource, p, ns); err != nil {
				return true, nil, err
			}
		}
		return true, p, nil
	})
	rep, err := planAndExecute(t, c, opts, fc, 2)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if diff := cmp.Diff([]string{"db-1", "db-0"}, ev.attempts); diff != "" {
		t.Errorf("eviction order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]time.Duration{0, 5 * time.Second}, ev.at); diff != "" {
		t.Errorf("evictions at (-want +got): the second must wait for the first replacement Ready\n%s", diff)
	}
	if !rep.Complete {
		t.Errorf("report not complete: %+v", rep)
	}
}

// TestExecuteDoesNotWaitForReplacementsOfUnsupportedOwners: a Job's pod, a
// custom controller's and a bare ReplicaSet's are evicted; the drain is
// done when they are gone, with no clock step at all.
func TestExecuteDoesNotWaitForReplacementsOfUnsupportedOwners(t *testing.T) {
	c := fake.NewClientset(node("n1"), node("n2"), bareReplicaSet("cache", 2),
		pod("batch-x", "n1", controlledBy("Job", "batch")), pod("x-0", "n1", controlledBy("CloneSet", "x")),
		pod("cache-a", "n1", controlledBy("ReplicaSet", "cache")))
	opts, fc := fakeOptions()
	var ev evictions
	ev.react(c, fc, func(_ int, name string) error { deletePod(c, name); return nil })
	rep, err := planAndExecute(t, c, opts, fc, 1<<30) // never step
	if err != nil || !rep.Complete {
		t.Fatalf("Execute = %+v, %v; want complete", rep, err)
	}
	if got := ev.count(); got != 3 {
		t.Errorf("%d evictions, want 3", got)
	}
}

func TestExecuteRefusedPlanChangesNothing(t *testing.T) {
	c := fake.NewClientset(node("n1"), node("n2"), pod("debug", "n1"))
	opts, fc := fakeOptions()
	rep, err := planAndExecute(t, c, opts, fc, 2)
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("Execute error = %v, want ErrRefused", err)
	}
	if w := writes(c); len(w) > 0 || rep.Complete {
		t.Errorf("a refused drain wrote %v (complete=%v); want nothing", w, rep.Complete)
	}
}

// TestExecuteRefusesANodeAFenceHandles: a fence that begins between the
// plan and Execute (the agent confirming Off, or its taint) stops the drain
// in the write that would mark maintenance: nothing is changed.
func TestExecuteRefusesANodeAFenceHandles(t *testing.T) {
	confirming, err := fence.Encode(fence.State{Phase: fence.ConfirmingOff})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		fence func(*corev1.Node)
	}{
		{"the agent is confirming Off", func(n *corev1.Node) {
			n.Annotations = map[string]string{cluster.AnnotationState: confirming}
		}},
		{"the out-of-service taint is on", func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, cluster.OutOfServiceTaint())
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientset(node("n1"), node("n2"))
			opts, _ := fakeOptions()
			plan, err := MakePlan(context.Background(), c, "n1", opts)
			if err != nil {
				t.Fatal(err)
			}
			obj, _ := c.Tracker().Get(nodesResource, "", "n1")
			n := obj.(*corev1.Node).DeepCopy()
			tt.fence(n)
			n.ResourceVersion = "2"
			if err := c.Tracker().Update(nodesResource, n, ""); err != nil {
				t.Fatal(err)
			}
			c.ClearActions()
			if _, err := Execute(context.Background(), c, plan, opts); !errors.Is(err, ErrFenced) {
				t.Fatalf("Execute = %v, want ErrFenced", err)
			}
			if w := writes(c); len(w) > 0 {
				t.Errorf("a drain of a node being fenced wrote %v", w)
			}
		})
	}
}

// TestExecuteContinuesAHalfDoneDrain: n1 is already cordoned and in
// maintenance, and the Deployment is mid-rollout (its pod on n1 is in the
// old ReplicaSet). A second drain neither rewrites the node nor restarts the
// rollout again; it waits for the rollout to finish.
func TestExecuteContinuesAHalfDoneDrain(t *testing.T) {
	earlier := `{"by":"alice","reason":"kernel","since":"2025-03-01T09:00:00Z"}`
	dep, rs1 := deployment("web", 1, 1)
	dep.Generation, dep.Status.ObservedGeneration = 2, 2
	dep.Annotations[revisionAnnotation] = "2"
	dep.Status.Replicas, dep.Status.UpdatedReplicas = 2, 1 // the old pod is still there
	_, rs2 := deployment("web", 1, 1)
	rs2.Name, rs2.UID, rs2.Annotations[revisionAnnotation] = "web-rs2", "uid-web-rs2", "2"
	c := fake.NewClientset(node("n1", cordoned(), maintenance(earlier)), node("n2"), dep, rs1, rs2,
		pod("web-a", "n1", inDeployment("web")), pod("web-new", "n2", inDeployment("web")))
	opts, fc := fakeOptions()
	// The deployment controller finishes the rollout 3 s in.
	c.PrependReactor("get", "deployments", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		if fc.Since(t0) < 3*time.Second {
			return false, nil, nil
		}
		obj, err := c.Tracker().Get(deploymentsResource, ns, "web")
		if err != nil {
			return true, nil, err
		}
		d := obj.(*appsv1.Deployment).DeepCopy()
		d.Status.Replicas = 1
		if _, err := c.Tracker().Get(podsResource, ns, "web-a"); err == nil {
			deletePod(c, "web-a")
		}
		return true, d, nil
	})
	rep, err := planAndExecute(t, c, opts, fc, 2)
	if err != nil || !rep.Complete {
		t.Fatalf("Execute = %+v, %v; want complete", rep, err)
	}
	if diff := cmp.Diff([]string{"create events", "create events"}, writes(c)); diff != "" {
		t.Errorf("writes (-want +got): no node write, no second restart\n%s", diff)
	}
	n, _ := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if got := n.Annotations[cluster.AnnotationMaintenance]; got != earlier {
		t.Errorf("maintenance = %s, want the earlier drain's %s kept", got, earlier)
	}
}

// TestExecuteBoundsParallelism: five pods, Parallelism 2: two evictions at
// a time, the next two only when those pods are gone.
func TestExecuteBoundsParallelism(t *testing.T) {
	var objects []k8sruntime.Object
	names := []string{"a", "b", "c", "d", "e"}
	for _, n := range names {
		objects = append(objects, pod(n, "n1", controlledBy("Job", "job-"+n)))
	}
	c := fake.NewClientset(append(objects, node("n1"), node("n2"))...)
	opts, fc := fakeOptions()
	opts.Parallelism = 2
	var ev evictions
	// Evicted pods terminate until the test deletes them.
	ev.react(c, fc, func(_ int, name string) error {
		obj, err := c.Tracker().Get(podsResource, ns, name)
		if err != nil {
			return err
		}
		p := obj.(*corev1.Pod).DeepCopy()
		p.DeletionTimestamp = &metav1.Time{Time: fc.Now()}
		return c.Tracker().Update(podsResource, p, ns)
	})
	plan, err := MakePlan(context.Background(), c, "n1", opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Execute(context.Background(), c, plan, opts); done <- err }()

	waitForWaiters := func(n int) {
		t.Helper()
		guard := time.After(20 * time.Second)
		for fc.Waiters() != n {
			select {
			case <-guard:
				t.Fatalf("waiting for %d timers, have %d", n, fc.Waiters())
			default:
				runtime.Gosched()
			}
		}
	}
	for _, batch := range [][]string{{"a", "b"}, {"c", "d"}, {"e"}} {
		waitForWaiters(1 + len(batch)) // the timeout + one poll per running task
		if got, want := ev.count(), len(names[:strings.Index("abcde", batch[len(batch)-1])+1]); got != want {
			t.Fatalf("%d evictions so far, want %d (parallelism 2)", got, want)
		}
		for _, n := range batch {
			deletePod(c, n)
		}
		fc.Step(time.Second)
	}
	if err := <-done; err != nil {
		t.Fatalf("Execute: %v", err)
	}
}

func TestMarkMaintenanceRetriesConflicts(t *testing.T) {
	c := fake.NewClientset(node("n1"))
	var bodies []string
	c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		bodies = append(bodies, string(a.(k8stesting.PatchAction).GetPatch()))
		if len(bodies) == 1 {
			// Someone (the agent, a kubelet) wrote the node in between.
			obj, _ := c.Tracker().Get(nodesResource, "", "n1")
			n := obj.(*corev1.Node).DeepCopy()
			n.ResourceVersion = "2"
			_ = c.Tracker().Update(nodesResource, n, "")
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	opts, _ := fakeOptions()
	n, _, err := markMaintenance(context.Background(), c, "n1", opts.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 2 || !strings.Contains(bodies[0], `"resourceVersion":"1"`) || !strings.Contains(bodies[1], `"resourceVersion":"2"`) {
		t.Errorf("patches %q: want a retry carrying the fresh resourceVersion", bodies)
	}
	if !n.Spec.Unschedulable || !cluster.InMaintenance(n) {
		t.Errorf("node after markMaintenance: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
}

func TestUndrain(t *testing.T) {
	c := fake.NewClientset(node("n1", cordoned(), maintenance(`{"by":"alice","reason":"kernel","since":"2025-03-01T09:00:00Z","cordoned":true}`)))
	opts, _ := fakeOptions()
	if _, err := Undrain(context.Background(), c, "n1", opts); err != nil {
		t.Fatal(err)
	}
	n, _ := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if n.Spec.Unschedulable || cluster.InMaintenance(n) {
		t.Errorf("after Undrain: unschedulable=%v maintenance=%q", n.Spec.Unschedulable, n.Annotations[cluster.AnnotationMaintenance])
	}
	if diff := cmp.Diff([]string{"patch nodes", "create events"}, writes(c)); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{ReasonUndrained}, eventReasons(c)); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
	c.ClearActions()
	if _, err := Undrain(context.Background(), c, "n1", opts); err != nil {
		t.Fatal(err)
	}
	if w := writes(c); len(w) > 0 {
		t.Errorf("a second Undrain wrote %v; want nothing", w)
	}
}

func lease(renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "n1"},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renew}}}
}

func TestWaitReady(t *testing.T) {
	tests := []struct {
		name     string
		node     *corev1.Node
		renewals func(now time.Time) time.Time // the Lease's renewTime at now
		wantErr  error
		wantAt   time.Duration
	}{{
		name:     "a renewal we see happen",
		node:     node("n1"),
		renewals: func(now time.Time) time.Time { return now.Truncate(10 * time.Second) },
		wantAt:   10 * time.Second,
	}, {
		name:     "a renewTime after since that never changes is not trusted (node clock skew)",
		node:     node("n1"),
		renewals: func(time.Time) time.Time { return t0.Add(time.Hour) },
		wantErr:  ErrNotReady,
		wantAt:   30 * time.Second,
	}, {
		name:     "a node clock a minute behind still counts: we judge by the renewal we saw",
		node:     node("n1"),
		renewals: func(now time.Time) time.Time { return now.Add(-time.Minute).Truncate(10 * time.Second) },
		wantAt:   10 * time.Second,
	}, {
		name:     "a node that is not Ready",
		node:     node("n1", notReady()),
		renewals: func(now time.Time) time.Time { return now.Truncate(10 * time.Second) },
		wantErr:  ErrNotReady,
		wantAt:   30 * time.Second,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(tc.node)
			opts, fc := fakeOptions()
			opts.Timeout = 30 * time.Second
			c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
				return true, lease(tc.renewals(fc.Now())), nil
			})
			var err error
			drive(t, fc, 2, time.Second, func() { err = WaitReady(context.Background(), c, "n1", opts) })
			if !errors.Is(err, tc.wantErr) && !(tc.wantErr == nil && err == nil) {
				t.Errorf("WaitReady = %v, want %v", err, tc.wantErr)
			}
			if got := fc.Since(t0); got != tc.wantAt {
				t.Errorf("returned at +%s, want +%s", got, tc.wantAt)
			}
		})
	}
}

func TestRolloutStatus(t *testing.T) {
	base := func(mod func(*appsv1.Deployment)) *appsv1.Deployment {
		d, _ := deployment("web", 2, 2)
		mod(d)
		return d
	}
	tests := []struct {
		name     string
		d        *appsv1.Deployment
		wantDone bool
		wantErr  error
	}{
		{"rolled out", base(func(*appsv1.Deployment) {}), true, nil},
		{"spec change not observed yet", base(func(d *appsv1.Deployment) { d.Generation = 2 }), false, nil},
		{"not all replicas updated", base(func(d *appsv1.Deployment) { d.Status.UpdatedReplicas = 1 }), false, nil},
		{"old replicas pending termination", base(func(d *appsv1.Deployment) { d.Status.Replicas = 3 }), false, nil},
		{"updated replicas not available", base(func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 1 }), false, nil},
		{"progress deadline exceeded", base(func(d *appsv1.Deployment) {
			d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
		}), false, errProgressDeadline},
		{"one replica by default", base(func(d *appsv1.Deployment) {
			d.Spec.Replicas = nil
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}
		}), true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg, done, err := rolloutStatus(tc.d)
			if done != tc.wantDone || !errors.Is(err, tc.wantErr) || (err == nil && msg == "") {
				t.Errorf("rolloutStatus = %q, %v, %v; want done=%v err=%v", msg, done, err, tc.wantDone, tc.wantErr)
			}
		})
	}
}

// A long Event message is cut at a character boundary, within the cap.
func TestRecordEventCutsLongMessagesAtACharacter(t *testing.T) {
	c := fake.NewClientset(node("n1"))
	opts, _ := fakeOptions()
	n, _ := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err := recordEvent(context.Background(), c, n, opts.withDefaults(), corev1.EventTypeNormal, ReasonDrainStarted, "x"+strings.Repeat("é", maxEventMessage)); err != nil {
		t.Fatal(err)
	}
	evs, _ := c.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 1 {
		t.Fatalf("%d Events, want 1", len(evs.Items))
	}
	if m := evs.Items[0].Message; len(m) > maxEventMessage || !utf8.ValidString(m) || !strings.HasSuffix(m, "…") {
		t.Errorf("message of %d bytes (valid UTF-8: %v) does not end in an ellipsis within %d bytes", len(m), utf8.ValidString(m), maxEventMessage)
	}
}
