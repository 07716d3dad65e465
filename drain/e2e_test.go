package drain_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/drain"
	"github.com/bmcfence/bmcfence/test/controlplane"
)

// The tests below run on one real control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, a kwok per node), started by the
// first test that needs it and stopped by TestMain: the unit tests of the
// package run without it. Three nodes: n1 is the one drained, n2 and n3
// take the pods. The real deployment, ReplicaSet, StatefulSet and
// disruption controllers do the rollouts and the evictions' follow-up; kwok
// makes scheduled pods Running and Ready at once and finishes deletions.

const drained = "n1"

var (
	cpOnce sync.Once
	cp     *controlplane.ControlPlane
	cpErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cp != nil {
		if code != 0 {
			fmt.Fprintln(os.Stderr, cp.LogTails(20))
		}
		cp.Stop()
	}
	os.Exit(code)
}

// controlPlane starts the shared control plane on first use. Missing
// binaries fail the test with the `make e2e-bins` hint.
func controlPlane(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	cpOnce.Do(func() {
		if cpErr = controlplane.BinariesAvailable(""); cpErr != nil {
			return
		}
		logf := func(string, ...any) {}
		if testing.Verbose() {
			logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
		}
		// Bring-up takes ~10 s; three minutes absorbs a cold cache.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cp, cpErr = controlplane.Start(ctx, controlplane.Options{Logf: logf, Nodes: []controlplane.NodeSpec{
			{Name: "n1"}, {Name: "n2"}, {Name: "n3"},
		}})
	})
	if cpErr != nil {
		t.Fatalf("control plane: %v", cpErr)
	}
	return cp
}

// env is one scenario: its namespace, its start, the shared cluster.
type env struct {
	t     *testing.T
	cp    *controlplane.ControlPlane
	c     kubernetes.Interface
	ns    string
	start time.Time
	// earlier holds the Events on n1 from before this scenario: Event
	// times have second precision, so time cannot tell them apart.
	earlier map[types.UID]bool
}

// nsSeq makes namespace names unique per run: with -count=N a scenario's
// earlier namespace may still be terminating.
var nsSeq atomic.Int32

// newEnv resets the nodes (schedulable, no maintenance) and creates a
// namespace, deleted at cleanup once its pods are gone, so the next
// scenario finds n1 empty.
func newEnv(t *testing.T, prefix string) *env {
	t.Helper()
	cp := controlPlane(t)
	namespace := fmt.Sprintf("%s-%d", prefix, nsSeq.Add(1))
	e := &env{t: t, cp: cp, c: cp.Client(), ns: namespace, start: time.Now()}
	ctx := context.Background()
	for _, n := range []string{"n1", "n2", "n3"} {
		e.setNode(n, false, true)
	}
	if err := cp.CreateNamespace(ctx, namespace); err != nil {
		t.Fatal(err)
	}
	e.earlier = map[types.UID]bool{}
	for _, ev := range e.nodeEvents(drained) {
		e.earlier[ev.UID] = true
	}
	t.Cleanup(func() {
		if err := e.c.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace %s: %v", namespace, err)
		}
		// The namespace controller takes ~5 s to get to the pods; a
		// terminating namespace admits no new pods, so deleting them now
		// is final.
		if err := e.c.CoreV1().Pods(namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
			t.Errorf("delete the pods of %s: %v", namespace, err)
		}
		e.waitFor(time.Minute, "the pods of namespace "+namespace+" gone", func() (bool, error) {
			list, err := e.c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
			return err == nil && len(list.Items) == 0, nil
		})
	})
	return e
}

// setNode cordons or uncordons a node and optionally clears maintenance,
// conflict-safe (kwok and the controllers write nodes too). Uncordoning
// waits for the node lifecycle controller to remove its
// node.kubernetes.io/unschedulable taint: until then the scheduler, and
// the placement check, still see the node as closed.
func (e *env) setNode(name string, unschedulable, clearMaintenance bool) {
	e.t.Helper()
	ctx := context.Background()
	for attempt := 0; ; attempt++ {
		n, err := e.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		_, inMaintenance := n.Annotations[cluster.AnnotationMaintenance]
		if n.Spec.Unschedulable == unschedulable && (!clearMaintenance || !inMaintenance) {
			break
		}
		n.Spec.Unschedulable = unschedulable
		if clearMaintenance {
			delete(n.Annotations, cluster.AnnotationMaintenance)
		}
		_, err = e.c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || attempt > 10 {
			e.t.Fatalf("update node %s: %v", name, err)
		}
	}
	if unschedulable {
		return
	}
	e.waitFor(30*time.Second, name+" without the unschedulable taint", func() (bool, error) {
		n, err := e.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, t := range n.Spec.Taints {
			if t.Key == corev1.TaintNodeUnschedulable {
				return false, nil
			}
		}
		return true, nil
	})
}

// onlyOn makes the scheduler put what create makes on the given nodes: the
// others are cordoned while create runs and until wait holds.
func (e *env) onlyOn(nodes []string, create func(), desc string, wait func() (bool, error)) {
	e.t.Helper()
	keep := map[string]bool{}
	for _, n := range nodes {
		keep[n] = true
	}
	var others []string
	for _, n := range []string{"n1", "n2", "n3"} {
		if !keep[n] {
			others = append(others, n)
			e.setNode(n, true, false)
		}
	}
	defer func() {
		for _, n := range others {
			e.setNode(n, false, false)
		}
	}()
	create()
	// A set-up, not a measurement: it ends when the pods are Ready. A
	// StatefulSet's pods start one after the other, each after its claim
	// binds, and under a loaded make test (two cores, every package's
	// control plane at once) db-0 and db-1 once took more than a minute.
	e.waitFor(3*time.Minute, desc, wait)
}

func (e *env) waitFor(limit time.Duration, desc string, cond func() (bool, error)) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := e.cp.WaitFor(ctx, desc, cond); err != nil {
		e.t.Fatalf("%s: %v", desc, err)
	}
}

// readyPods returns the Running, Ready, not terminating pods labelled
// app=app, by node.
func (e *env) readyPods(app string) map[string][]corev1.Pod {
	list, err := e.c.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p)
		}
	}
	return out
}

func (e *env) countReady(app string) int {
	n := 0
	for _, ps := range e.readyPods(app) {
		n += len(ps)
	}
	return n
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// options: fast polls (a loopback API server), progress in the test log.
func (e *env) options(timeout time.Duration) drain.Options {
	return drain.Options{
		Timeout: timeout, PollInterval: 200 * time.Millisecond, User: "e2e", Reason: e.t.Name(),
		Progress: func(p drain.Progress) {
			e.t.Logf("  +%5.2fs %-32s %-8s %s", time.Since(e.start).Seconds(), p.Workload, p.State, p.Message)
		},
	}
}

func (e *env) plan(opts drain.Options) drain.Plan {
	e.t.Helper()
	plan, err := drain.MakePlan(context.Background(), e.c, drained, opts)
	if err != nil {
		e.t.Fatalf("MakePlan: %v", err)
	}
	return plan
}

// events returns the reasons of this scenario's bmcfence Events on a node.
func (e *env) events(node string) []string {
	var out []string
	for _, ev := range e.nodeEvents(node) {
		if !e.earlier[ev.UID] && ev.Source.Component == cluster.DefaultComponent {
			out = append(out, ev.Reason)
		}
	}
	return out
}

func (e *env) nodeEvents(node string) []corev1.Event {
	list, err := e.c.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
	if err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

func deploymentObject(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			// The seed's strategy: one extra pod at a time, none missing.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
}

// deploy creates a Deployment with all replicas on nodes and waits until
// it is available.
func (e *env) deploy(d *appsv1.Deployment, nodes ...string) {
	e.t.Helper()
	ctx := context.Background()
	want := int(ptr.Deref(d.Spec.Replicas, 1))
	e.onlyOn(nodes, func() {
		if _, err := e.c.AppsV1().Deployments(e.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}, fmt.Sprintf("Deployment %s: %d Ready pods on %v", d.Name, want, nodes), func() (bool, error) {
		got, err := e.c.AppsV1().Deployments(e.ns).Get(ctx, d.Name, metav1.GetOptions{})
		if err != nil || got.Status.ObservedGeneration != got.Generation || int(got.Status.AvailableReplicas) != want ||
			int(got.Status.UpdatedReplicas) != want || int(got.Status.Replicas) != want {
			return false, nil
		}
		return e.countReady(d.Name) == want, nil
	})
}

// ---- watching availability ----

// availability watches a workload's pods and its Deployment during a drain
// and keeps the minimum number of Ready, not terminating pods, and of the
// Deployment's available and ready replicas, over every event.
type availability struct {
	mu                 sync.Mutex
	pods               map[types.UID]bool // Ready and not terminating
	minPods            int
	minAvailable       int32
	minReadyReplicas   int32
	podEvents, dEvents int
	timeline           []string
	closedEarly        bool
	start              time.Time
	stop               context.CancelFunc
	done               sync.WaitGroup
}

func (e *env) watchAvailability(app string, deployment bool) *availability {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &availability{pods: map[types.UID]bool{}, minPods: 1 << 30, minAvailable: 1 << 30, minReadyReplicas: 1 << 30, start: time.Now(), stop: cancel}
	list, err := e.c.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range list.Items {
		a.pods[p.UID] = podReady(&p) && p.DeletionTimestamp == nil
	}
	a.notePods()
	pw, err := e.c.CoreV1().Pods(e.ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=" + app, ResourceVersion: list.ResourceVersion})
	if err != nil {
		e.t.Fatal(err)
	}
	a.done.Add(1)
	go func() {
		defer a.done.Done()
		for ev := range pw.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			a.mu.Lock()
			a.podEvents++
			ready := ev.Type != watch.Deleted && podReady(p) && p.DeletionTimestamp == nil
			if was, seen := a.pods[p.UID]; !seen || was != ready {
				state := "not Ready"
				switch {
				case ev.Type == watch.Deleted:
					state = "deleted"
				case p.DeletionTimestamp != nil:
					state = "terminating"
				case ready:
					state = "Ready"
				}
				a.timeline = append(a.timeline, fmt.Sprintf("+%.2fs %s %s on %s", time.Since(a.start).Seconds(), p.Name, state, p.Spec.NodeName))
			}
			a.pods[p.UID] = ready
			if ev.Type == watch.Deleted {
				delete(a.pods, p.UID)
			}
			a.notePodsLocked()
			a.mu.Unlock()
		}
		if ctx.Err() == nil {
			a.mu.Lock()
			a.closedEarly = true
			a.mu.Unlock()
		}
	}()
	if !deployment {
		return a
	}
	d, err := e.c.AppsV1().Deployments(e.ns).Get(ctx, app, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	a.noteDeployment(d)
	dw, err := e.c.AppsV1().Deployments(e.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + app, ResourceVersion: d.ResourceVersion})
	if err != nil {
		e.t.Fatal(err)
	}
	a.done.Add(1)
	go func() {
		defer a.done.Done()
		for ev := range dw.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok {
				a.noteDeployment(d)
			}
		}
		if ctx.Err() == nil {
			a.mu.Lock()
			a.closedEarly = true
			a.mu.Unlock()
		}
	}()
	return a
}

func (a *availability) notePods() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.notePodsLocked()
}

func (a *availability) notePodsLocked() {
	n := 0
	for _, ready := range a.pods {
		if ready {
			n++
		}
	}
	a.minPods = min(a.minPods, n)
}

func (a *availability) noteDeployment(d *appsv1.Deployment) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dEvents++
	a.minAvailable = min(a.minAvailable, d.Status.AvailableReplicas)
	a.minReadyReplicas = min(a.minReadyReplicas, d.Status.ReadyReplicas)
}

// finish stops the watches; it reports an error if one closed early (its
// minimum would prove nothing about the time after).
func (a *availability) finish(t *testing.T) {
	t.Helper()
	a.stop()
	a.done.Wait()
	if a.closedEarly {
		t.Error("a watch closed before the scenario ended: its minimum does not cover the whole drain")
	}
	t.Logf("pod timeline:\n  %s", strings.Join(a.timeline, "\n  "))
}

// ---- scenarios ----

// TestSeedCaseKeepsBothReplicasReady is the article's case: a Deployment
// with replicas 2, maxSurge 1, maxUnavailable 0, both pods on the drained
// node. The drain restarts the rollout instead of evicting, and a watch on
// the pods and the Deployment never sees fewer than 2 Ready replicas.
func TestSeedCaseKeepsBothReplicasReady(t *testing.T) {
	e := newEnv(t, "drain-seed")
	ctx := context.Background()
	e.deploy(deploymentObject(e.ns, "nginx", 2), drained)

	opts := e.options(time.Minute)
	plan := e.plan(opts)
	for _, p := range plan.Pods {
		if p.Action != drain.ActionRolloutRestart {
			t.Errorf("plan for %s: %s (%s), want rollout-restart", p.Pod, p.Action, p.Reason)
		}
	}
	if b, err := json.MarshalIndent(plan, "", "  "); err == nil {
		t.Logf("plan:\n%s", b)
	}

	watched := e.watchAvailability("nginx", true)
	began := time.Now()
	rep, err := drain.Execute(ctx, e.c, plan, opts)
	took := time.Since(began)
	if err != nil || !rep.Complete {
		t.Fatalf("Execute = %+v, %v; want complete", rep, err)
	}
	// The watch runs a moment longer: the last old pod's deletion arrives
	// after the rollout status says done.
	e.waitFor(10*time.Second, "2 Ready nginx pods off n1", func() (bool, error) {
		pods := e.readyPods("nginx")
		return len(pods[drained]) == 0 && e.countReady("nginx") == 2, nil
	})
	watched.finish(t)
	t.Logf("drain took %s; min Ready pods %d, min Deployment available %d, ready %d (over %d pod and %d Deployment events)",
		took.Round(time.Millisecond), watched.minPods, watched.minAvailable, watched.minReadyReplicas, watched.podEvents, watched.dEvents)
	if watched.minPods < 2 || watched.minAvailable < 2 || watched.minReadyReplicas < 2 {
		t.Errorf("availability dipped: min Ready pods %d, Deployment available %d, ready %d; want ≥ 2 throughout",
			watched.minPods, watched.minAvailable, watched.minReadyReplicas)
	}
	if watched.podEvents < 4 {
		t.Errorf("only %d pod events watched: the watch missed the rollout", watched.podEvents)
	}
	d, err := e.c.AppsV1().Deployments(e.ns).Get(ctx, "nginx", metav1.GetOptions{})
	if err != nil || d.Spec.Template.Annotations[drain.RestartedAtAnnotation] == "" {
		t.Errorf("Deployment template lacks %s: %v", drain.RestartedAtAnnotation, err)
	}
	if got := e.events(drained); !contains(got, drain.ReasonDrainStarted) || !contains(got, drain.ReasonDrainCompleted) {
		t.Errorf("Events on n1 = %v, want DrainStarted and DrainCompleted", got)
	}
	n, _ := e.c.CoreV1().Nodes().Get(ctx, drained, metav1.GetOptions{})
	if m, err := cluster.DecodeMaintenance(n.Annotations[cluster.AnnotationMaintenance]); err != nil || m.By != "e2e" || !n.Spec.Unschedulable {
		t.Errorf("n1 after the drain: unschedulable=%v maintenance=%+v (%v)", n.Spec.Unschedulable, m, err)
	}
}

// TestPlainEvictionDipsBelowDesired is the control experiment: what
// `kubectl drain` does to the same Deployment (evict both pods at once)
// takes it below its 2 desired replicas.
func TestPlainEvictionDipsBelowDesired(t *testing.T) {
	e := newEnv(t, "drain-control")
	ctx := context.Background()
	e.deploy(deploymentObject(e.ns, "nginx", 2), drained)
	e.setNode(drained, true, false)
	watched := e.watchAvailability("nginx", true)
	// kubectl drain evicts every pod at once, one goroutine each.
	var wg sync.WaitGroup
	for _, p := range e.readyPods("nginx")[drained] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.c.PolicyV1().Evictions(e.ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: p.Name}}); err != nil {
				t.Errorf("evict %s: %v", p.Name, err)
			}
		}()
	}
	wg.Wait()
	e.waitFor(30*time.Second, "2 Ready nginx pods off n1", func() (bool, error) {
		pods := e.readyPods("nginx")
		return len(pods[drained]) == 0 && e.countReady("nginx") == 2, nil
	})
	watched.finish(t)
	t.Logf("plain eviction: min Ready pods %d, min Deployment available %d", watched.minPods, watched.minAvailable)
	if watched.minPods >= 2 {
		t.Errorf("plain eviction kept %d Ready pods; the control experiment should show the dip", watched.minPods)
	}
}

// TestBudgetBlockingAnEvictionIsReported: web has one pod on n1 and one on
// n2, a strategy that allows one missing replica, and a
// PodDisruptionBudget (minAvailable 2) that allows no eviction.
// The drain evicts (a replica runs elsewhere), is refused, retries until
// its timeout, and reports the budget by name; the pod stays.
func TestBudgetBlockingAnEvictionIsReported(t *testing.T) {
	e := newEnv(t, "drain-pdb")
	ctx := context.Background()
	// maxUnavailable 1: the strategy allows the eviction, the budget not.
	d := deploymentObject(e.ns, "web", 1)
	d.Spec.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	e.deploy(d, drained)
	e.onlyOn([]string{"n2"}, func() {
		if _, err := e.c.AppsV1().Deployments(e.ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}, "web scaled to 2, the new pod on n2", func() (bool, error) {
		pods := e.readyPods("web")
		return len(pods[drained]) == 1 && len(pods["n2"]) == 1, nil
	})
	e.webPDB(policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2))}, 2)
	victim := e.readyPods("web")[drained][0]

	opts := e.options(4 * time.Second)
	plan := e.plan(opts)
	if got := actionOf(plan, e.ns+"/"+victim.Name); got != drain.ActionEvict {
		t.Fatalf("plan for %s: %s, want evict (a replica runs on n2)", victim.Name, got)
	}
	rep, err := drain.Execute(ctx, e.c, plan, opts)
	if !errors.Is(err, drain.ErrIncomplete) || !rep.TimedOut {
		t.Fatalf("Execute = %v (timedOut=%v), want ErrIncomplete after the timeout", err, rep.TimedOut)
	}
	if b, err := json.MarshalIndent(rep, "", "  "); err == nil {
		t.Logf("report:\n%s", b)
	}
	if len(rep.Left) != 1 || rep.Left[0].Pod != e.ns+"/"+victim.Name ||
		len(rep.Left[0].BlockedBy) != 1 || rep.Left[0].BlockedBy[0] != e.ns+"/web-pdb" ||
		!strings.Contains(rep.Left[0].Reason, "PodDisruptionBudget "+e.ns+"/web-pdb") {
		t.Errorf("left = %+v, want %s blocked by %s/web-pdb", rep.Left, victim.Name, e.ns)
	}
	p, err := e.c.CoreV1().Pods(e.ns).Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil || p.UID != victim.UID || p.DeletionTimestamp != nil {
		t.Errorf("the budget's pod after the drain: %v; want it untouched", err)
	}
	if got := e.events(drained); !contains(got, drain.ReasonDrainIncomplete) {
		t.Errorf("Events on n1 = %v, want DrainIncomplete", got)
	}
}

// TestOnDeleteStatefulSetCompletes: an OnDelete StatefulSet (which a
// rollout restart would never roll) with both pods and their volumes on n1
// moves one pod at a time, and the drain completes.
func TestOnDeleteStatefulSetCompletes(t *testing.T) {
	e := newEnv(t, "drain-sts")
	ctx := context.Background()
	sts := controlplane.StatefulSet(e.ns, "db", 2)
	sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	e.onlyOn([]string{drained}, func() {
		if _, err := e.c.AppsV1().StatefulSets(e.ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}, "db-0 and db-1 Ready on n1", func() (bool, error) { return len(e.readyPods("db")[drained]) == 2, nil })
	before := map[string]types.UID{}
	for _, p := range e.readyPods("db")[drained] {
		before[p.Name] = p.UID
	}

	opts := e.options(time.Minute)
	plan := e.plan(opts)
	if plan.Count(drain.ActionEvictOneAtATime) != 2 {
		t.Fatalf("plan: %+v, want both pods evict-one-at-a-time", plan.Pods)
	}
	watched := e.watchAvailability("db", false)
	began := time.Now()
	rep, err := drain.Execute(ctx, e.c, plan, opts)
	if err != nil || !rep.Complete {
		t.Fatalf("Execute = %+v, %v; want complete", rep, err)
	}
	watched.finish(t)
	t.Logf("OnDelete StatefulSet drained in %s; min Ready pods %d", time.Since(began).Round(time.Millisecond), watched.minPods)
	if watched.minPods < 1 {
		t.Errorf("min Ready db pods %d: one at a time must keep the other Ready", watched.minPods)
	}
	pods := e.readyPods("db")
	if len(pods[drained]) != 0 || e.countReady("db") != 2 {
		t.Errorf("db pods after the drain: %v, want 2 Ready off n1", pods)
	}
	for _, ps := range pods {
		for _, p := range ps {
			if p.UID == before[p.Name] {
				t.Errorf("%s kept its UID: not replaced", p.Name)
			}
		}
	}
}

// TestUnsupportedOwnersDoNotHang: a bare ReplicaSet's pod and a pod of a
// "custom controller" (a ConfigMap as its controller owner) are evicted and
// the drain ends as soon as they are gone; nothing waits for a replacement
// that a custom controller might never make.
func TestUnsupportedOwnersDoNotHang(t *testing.T) {
	e := newEnv(t, "drain-owners")
	ctx := context.Background()
	labels := map[string]string{"app": "cache"}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "cache"},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}},
	}
	owner, err := e.c.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "custom"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	custom := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "custom-0", Labels: map[string]string{"app": "custom"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	e.onlyOn([]string{drained}, func() {
		if _, err := e.c.AppsV1().ReplicaSets(e.ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.CoreV1().Pods(e.ns).Create(ctx, custom, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}, "cache and custom-0 Ready on n1", func() (bool, error) {
		return len(e.readyPods("cache")[drained]) == 1 && len(e.readyPods("custom")[drained]) == 1, nil
	})

	opts := e.options(30 * time.Second)
	plan := e.plan(opts)
	if plan.Count(drain.ActionEvict) != 2 {
		t.Fatalf("plan: %+v, want 2 evictions", plan.Pods)
	}
	began := time.Now()
	rep, err := drain.Execute(ctx, e.c, plan, opts)
	took := time.Since(began)
	if err != nil || !rep.Complete {
		t.Fatalf("Execute = %+v, %v; want complete", rep, err)
	}
	t.Logf("bare ReplicaSet + custom owner drained in %s", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("drain took %s; evicting two pods should take seconds", took)
	}
	e.waitFor(30*time.Second, "the ReplicaSet's replacement Ready off n1", func() (bool, error) {
		pods := e.readyPods("cache")
		return len(pods[drained]) == 0 && e.countReady("cache") == 1, nil
	})
}

// TestNodeSelectorPinnedPodIsRefused: a pod pinned to n1 by its
// nodeSelector has nowhere to go: the plan says so, and Execute refuses
// without touching anything (resourceVersions unchanged, no Events).
func TestNodeSelectorPinnedPodIsRefused(t *testing.T) {
	e := newEnv(t, "drain-pinned")
	ctx := context.Background()
	d := deploymentObject(e.ns, "pinned", 1)
	d.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: drained}
	e.deploy(d, drained, "n2", "n3")
	before := e.stableVersions("pinned")

	opts := e.options(30 * time.Second)
	plan := e.plan(opts)
	pinned := e.readyPods("pinned")[drained][0]
	var pp drain.PodPlan
	for _, p := range plan.Pods {
		if p.Pod == e.ns+"/"+pinned.Name {
			pp = p
		}
	}
	want := []drain.Unfit{{Cause: drain.UnfitNodeAffinity, Nodes: []string{"n2", "n3"}}}
	if pp.Action != drain.ActionRefuse || pp.Would != drain.ActionRolloutRestart || fmt.Sprint(pp.Nowhere) != fmt.Sprint(want) {
		t.Errorf("plan for the pinned pod: %+v; want refused (would rollout-restart), nowhere %v", pp, want)
	}
	t.Logf("refusal: %s", plan.Err())
	_, err := drain.Execute(ctx, e.c, plan, opts)
	if !errors.Is(err, drain.ErrRefused) {
		t.Fatalf("Execute error = %v, want ErrRefused", err)
	}
	if after := e.versions("pinned"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("resourceVersions changed by a refused drain:\nbefore %v\nafter  %v", before, after)
	}
	if got := e.events(drained); len(got) > 0 {
		t.Errorf("a refused drain recorded Events %v", got)
	}
}

// TestDryRunChangesNothing: MakePlan only reads (node, workloads, pods and
// budget keep their resourceVersions).
func TestDryRunChangesNothing(t *testing.T) {
	e := newEnv(t, "drain-dry")
	e.deploy(deploymentObject(e.ns, "web", 2), drained)
	e.webPDB(policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}, 2)
	before := e.stableVersions("web")
	plan := e.plan(e.options(time.Minute))
	if plan.Count(drain.ActionRolloutRestart) != 2 {
		t.Errorf("plan: %+v, want 2 rollout-restart", plan.Pods)
	}
	if after := e.versions("web"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("resourceVersions changed by MakePlan:\nbefore %v\nafter  %v", before, after)
	}
	if got := e.events(drained); len(got) > 0 {
		t.Errorf("MakePlan recorded Events %v", got)
	}
}

// stableVersions waits until versions stops changing (controllers finish
// their status writes, the node lifecycle controller its taints) and
// returns it.
// webPDB creates web-pdb over the pods labelled app=web and waits until the
// disruption controller counts healthy of them: before that, evictions
// are judged against a budget it has not computed.
func (e *env) webPDB(spec policyv1.PodDisruptionBudgetSpec, healthy int32) {
	e.t.Helper()
	ctx := context.Background()
	spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "web-pdb"}, Spec: spec}
	if _, err := e.c.PolicyV1().PodDisruptionBudgets(e.ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor(30*time.Second, "the disruption controller to process web-pdb", func() (bool, error) {
		b, err := e.c.PolicyV1().PodDisruptionBudgets(e.ns).Get(ctx, "web-pdb", metav1.GetOptions{})
		return err == nil && b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy == healthy, nil
	})
}

func (e *env) stableVersions(app string) map[string]string {
	e.t.Helper()
	last := e.versions(app)
	var stable map[string]string
	e.waitFor(30*time.Second, "resourceVersions to settle", func() (bool, error) {
		cur := e.versions(app)
		if fmt.Sprint(cur) == fmt.Sprint(last) {
			stable = cur
			return true, nil
		}
		last = cur
		return false, nil
	})
	return stable
}

// versions maps node n1, the scenario's Deployment, ReplicaSets, pods and
// budgets to their resourceVersions.
func (e *env) versions(app string) map[string]string {
	e.t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	n, err := e.c.CoreV1().Nodes().Get(ctx, drained, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out["node/"+n.Name] = n.ResourceVersion
	d, err := e.c.AppsV1().Deployments(e.ns).Get(ctx, app, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out["deployment/"+d.Name] = d.ResourceVersion
	rss, _ := e.c.AppsV1().ReplicaSets(e.ns).List(ctx, metav1.ListOptions{})
	for _, rs := range rss.Items {
		out["replicaset/"+rs.Name] = rs.ResourceVersion
	}
	pods, _ := e.c.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		out["pod/"+p.Name] = p.ResourceVersion
	}
	pdbs, _ := e.c.PolicyV1().PodDisruptionBudgets(e.ns).List(ctx, metav1.ListOptions{})
	for _, b := range pdbs.Items {
		out["pdb/"+b.Name] = b.ResourceVersion
	}
	return out
}

// TestUndrainUncordonsAndClearsMaintenance: after a drain (nothing to
// move), WaitReady sees a fresh Lease renewal and Undrain uncordons n1 and
// ends its maintenance.
func TestUndrainUncordonsAndClearsMaintenance(t *testing.T) {
	e := newEnv(t, "drain-undrain")
	ctx := context.Background()
	opts := e.options(30 * time.Second)
	rep, err := drain.Execute(ctx, e.c, e.plan(opts), opts)
	if err != nil || !rep.Complete {
		t.Fatalf("Execute = %+v, %v", rep, err)
	}
	n, _ := e.c.CoreV1().Nodes().Get(ctx, drained, metav1.GetOptions{})
	if !n.Spec.Unschedulable || n.Annotations[cluster.AnnotationMaintenance] == "" {
		t.Fatalf("after the drain: unschedulable=%v maintenance=%q", n.Spec.Unschedulable, n.Annotations[cluster.AnnotationMaintenance])
	}

	since := time.Now()
	if err := drain.WaitReady(ctx, e.c, drained, opts); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	t.Logf("WaitReady saw a fresh Lease renewal after %s", time.Since(since).Round(time.Millisecond))

	if _, err := drain.Undrain(ctx, e.c, drained, opts); err != nil {
		t.Fatalf("Undrain: %v", err)
	}
	n, _ = e.c.CoreV1().Nodes().Get(ctx, drained, metav1.GetOptions{})
	if n.Spec.Unschedulable {
		t.Error("n1 still cordoned after Undrain")
	}
	if v, ok := n.Annotations[cluster.AnnotationMaintenance]; ok {
		t.Errorf("n1 still in maintenance after Undrain: %q", v)
	}
	if got := e.events(drained); !contains(got, drain.ReasonUndrained) {
		t.Errorf("Events on n1 = %v, want Undrained", got)
	}
}

func actionOf(p drain.Plan, pod string) drain.Action {
	for _, pp := range p.Pods {
		if pp.Pod == pod {
			return pp.Action
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
