package drain

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/cluster"
)

// TestMakePlanTreatsInlineHostPathAsLocalData: a single-replica Deployment
// keeping its data in an inline hostPath would be restarted onto another
// node, which starts with an empty directory: refused like emptyDir and
// local PersistentVolumes, unless DeleteLocalData.
func TestMakePlanTreatsInlineHostPathAsLocalData(t *testing.T) {
	web, webRS := deployment("web", 1, 1)
	objects := objs(web, webRS, pod("web-a", "n1", inDeployment("web"), hostPath("data", "/var/lib/web")))
	tests := []struct {
		name string
		opts Options
		want []PodPlan
	}{{
		name: "refused",
		want: []PodPlan{{Pod: "shop/web-a", Owner: "Deployment/web", Action: ActionRefuse, Would: ActionRolloutRestart,
			Target: "n2", LocalStorage: []string{"hostPath data (/var/lib/web)"}}},
	}, {
		name: "DeleteLocalData moves it",
		opts: Options{DeleteLocalData: true},
		want: []PodPlan{{Pod: "shop/web-a", Owner: "Deployment/web", Action: ActionRolloutRestart,
			Target: "n2", LocalStorage: []string{"hostPath data (/var/lib/web)"}}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := planFor(t, objects, tc.opts)
			if diff := cmp.Diff(tc.want, plan.Pods, decisionOnly); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMakePlanRefusesAPodUnderTwoBudgets: the Eviction API answers 500 for
// a pod that two PodDisruptionBudgets select, every time; the plan refuses
// it up front, naming both budgets, instead of retrying until the timeout.
func TestMakePlanRefusesAPodUnderTwoBudgets(t *testing.T) {
	web, webRS := deployment("web", 3, 3, unavailable(2))
	plan := planFor(t, objs(web, webRS, budget("web-pdb", "web", 1, 3, 2), budget("all-pdb", "web", 1, 3, 2),
		pod("web-a", "n1", inDeployment("web")), pod("web-b", "n2", inDeployment("web")), pod("web-c", "n2", inDeployment("web"))), Options{Force: true})
	want := []PodPlan{{Pod: "shop/web-a", Owner: "Deployment/web", Action: ActionRefuse, Would: ActionEvict, Target: "n2"}}
	if diff := cmp.Diff(want, plan.Pods, decisionOnly); diff != "" {
		t.Fatalf("plan (-want +got):\n%s", diff)
	}
	if r := plan.Pods[0].Reason; !strings.Contains(r, "shop/all-pdb") || !strings.Contains(r, "shop/web-pdb") {
		t.Errorf("reason %q does not name both budgets", r)
	}
}

// TestUndrainUndoesOnlyWhatTheDrainDid: the drain records whether it
// cordoned the node; undrain removes our mark and only our cordon, and does
// nothing at all on a node without our mark.
func TestUndrainUndoesOnlyWhatTheDrainDid(t *testing.T) {
	tests := []struct {
		name         string
		node         nodeOpt
		drain        bool
		wantCordoned bool
		wantWrites   []string
		wantEvents   []string
	}{{
		name:         "a node the drain cordoned is uncordoned",
		node:         func(*corev1.Node) {},
		drain:        true,
		wantCordoned: false,
		wantWrites:   []string{"patch nodes", "create events"},
		wantEvents:   []string{ReasonUndrained},
	}, {
		name:         "an admin's cordon from before the drain stays",
		node:         cordoned(),
		drain:        true,
		wantCordoned: true,
		wantWrites:   []string{"patch nodes", "create events"},
		wantEvents:   []string{ReasonUndrained},
	}, {
		name:         "a cordoned node never in maintenance is left alone",
		node:         cordoned(),
		wantCordoned: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(node("n1", tc.node), node("n2"))
			opts, fc := fakeOptions()
			if tc.drain {
				if rep, err := planAndExecute(t, c, opts, fc, 1<<30); err != nil || !rep.Complete {
					t.Fatalf("drain: %+v, %v", rep, err)
				}
			}
			c.ClearActions()
			if _, err := Undrain(context.Background(), c, "n1", opts); err != nil {
				t.Fatalf("Undrain: %v", err)
			}
			n, _ := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
			if n.Spec.Unschedulable != tc.wantCordoned || cluster.InMaintenance(n) {
				t.Errorf("after Undrain: cordoned=%v (want %v), maintenance=%q", n.Spec.Unschedulable, tc.wantCordoned, n.Annotations[cluster.AnnotationMaintenance])
			}
			if diff := cmp.Diff(tc.wantWrites, writes(c)); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEvents, eventReasons(c)); diff != "" {
				t.Errorf("Events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExecuteGivesANodeThatGoesDownBackToFencing: the eviction is accepted,
// then the node goes NotReady and its pod stays Terminating. The drain
// stops as soon as it sees the node down (not at its timeout), removes its
// maintenance mark so that the agent may fence the node, keeps the cordon,
// and says so.
func TestExecuteGivesANodeThatGoesDownBackToFencing(t *testing.T) {
	c := fake.NewClientset(node("n1"), node("n2"), pod("batch-x", "n1", controlledBy("Job", "batch")))
	opts, fc := fakeOptions()
	opts.Timeout = 10 * time.Minute
	var ev evictions
	ev.react(c, fc, func(_ int, name string) error {
		obj, err := c.Tracker().Get(podsResource, ns, name)
		if err != nil {
			return err
		}
		p := obj.(*corev1.Pod).DeepCopy()
		p.DeletionTimestamp = &metav1.Time{Time: fc.Now()}
		p.Finalizers = []string{"test/keep"}
		if err := c.Tracker().Update(podsResource, p, ns); err != nil {
			return err
		}
		// The node dies: the node lifecycle controller marks it Unknown.
		nobj, err := c.Tracker().Get(nodesResource, "", "n1")
		if err != nil {
			return err
		}
		n := nobj.(*corev1.Node).DeepCopy()
		n.Status.Conditions[0].Status = corev1.ConditionUnknown
		n.ResourceVersion = "100"
		return c.Tracker().Update(nodesResource, n, "")
	})
	// The clock never moves: only seeing the node go down can end the
	// drain (a hang fails after 20 s of real time).
	rep, err := planAndExecute(t, c, opts, fc, 1<<30)
	t.Logf("Execute: %v", err)
	if !errors.Is(err, ErrIncomplete) || !errors.Is(err, ErrNodeDown) {
		t.Fatalf("Execute error = %v, want ErrIncomplete and ErrNodeDown", err)
	}
	if !rep.NodeDown || !rep.Released || rep.MaintenanceFor != "" {
		t.Errorf("report: nodeDown=%v released=%v maintenanceFor=%q; want the node down and released", rep.NodeDown, rep.Released, rep.MaintenanceFor)
	}
	if diff := cmp.Diff([]string{ReasonDrainStarted, ReasonDrainIncomplete}, eventReasons(c)); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
	n, _ := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if cluster.InMaintenance(n) || !n.Spec.Unschedulable {
		t.Errorf("n1 after the drain: maintenance=%q cordoned=%v; want the mark gone (fenceable again) and the cordon kept",
			n.Annotations[cluster.AnnotationMaintenance], n.Spec.Unschedulable)
	}
	if rep.TimedOut || fc.Since(t0) > 0 {
		t.Errorf("the drain ran %s (timed out: %v); it should stop once it sees the node down", fc.Since(t0), rep.TimedOut)
	}
}

// TestMakePlanKeepsADeploymentWithinItsStrategy: evicting every pod a
// Deployment has on the node at once must not take it below what its own
// strategy allows (replicas − maxUnavailable). With maxUnavailable 0 no
// eviction is allowed at all: the surge of a rollout restart is the way;
// with room for one, the pods go one at a time, each replacement available
// before the next; with room for all, they go at once.
func TestMakePlanKeepsADeploymentWithinItsStrategy(t *testing.T) {
	threeOnN1 := func(dep ...deployOpt) []runtime.Object {
		d, rs := deployment("web", 4, 4, dep...)
		return objs(d, rs, pod("web-a", "n1", inDeployment("web")), pod("web-b", "n1", inDeployment("web")),
			pod("web-c", "n1", inDeployment("web")), pod("web-d", "n2", inDeployment("web")))
	}
	tests := []struct {
		name    string
		objects []runtime.Object
		want    Action
	}{
		{"maxUnavailable 0 (the issue's case): rollout restart", threeOnN1(), ActionRolloutRestart},
		{"maxUnavailable 1: one at a time", threeOnN1(unavailable(1)), ActionEvictOneAtATime},
		{"maxUnavailable 3: all at once", threeOnN1(unavailable(3)), ActionEvict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := planFor(t, tc.objects, Options{})
			for _, p := range plan.Pods {
				if p.Action != tc.want {
					t.Errorf("%s: %s (%s), want %s", p.Pod, p.Action, p.Reason, tc.want)
				}
			}
		})
	}
}

// replicaSetController is the ReplicaSet controller and kwok, instantly,
// for Deployment web on a fake clientset: an evicted pod is gone and its
// replacement scheduled on n2, Ready 5 s later; the Deployment's status
// follows. It records when each eviction came and the fewest available
// replicas the Deployment ever had.
type replicaSetController struct {
	c  *fake.Clientset
	fc interface{ Now() time.Time }

	mu           sync.Mutex
	readyAt      map[string]time.Time
	minAvailable int32
	ev           evictions
}

func newReplicaSetController(c *fake.Clientset, fc *clocktesting.FakeClock) *replicaSetController {
	r := &replicaSetController{c: c, fc: fc, readyAt: map[string]time.Time{}, minAvailable: 1 << 30}
	for _, verb := range []string{"get", "list"} {
		for _, resource := range []string{"pods", "deployments"} {
			c.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) { r.settle(); return false, nil, nil })
		}
	}
	r.ev.react(c, fc, func(_ int, name string) error {
		deletePod(c, name)
		replacement := pod(name+"-new", "n2", inDeployment("web"), notReadyPod())
		if err := c.Tracker().Create(podsResource, replacement, ns); err != nil {
			return err
		}
		r.mu.Lock()
		r.readyAt[replacement.Name] = fc.Now().Add(5 * time.Second)
		r.mu.Unlock()
		return nil
	})
	return r
}

func (r *replicaSetController) settle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, at := range r.readyAt {
		if r.fc.Now().Before(at) {
			continue
		}
		obj, err := r.c.Tracker().Get(podsResource, ns, name)
		if err != nil {
			panic(err)
		}
		p := obj.(*corev1.Pod).DeepCopy()
		p.Status.Conditions[0].Status = corev1.ConditionTrue
		if err := r.c.Tracker().Update(podsResource, p, ns); err != nil {
			panic(err)
		}
		delete(r.readyAt, name)
	}
	list, err := r.c.Tracker().List(podsResource, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, ns)
	if err != nil {
		panic(err)
	}
	var ready int32
	for _, p := range list.(*corev1.PodList).Items {
		if p.Labels["app"] == "web" && podReady(&p) && p.DeletionTimestamp == nil {
			ready++
		}
	}
	obj, err := r.c.Tracker().Get(deploymentsResource, ns, "web")
	if err != nil {
		panic(err)
	}
	d := obj.(*appsv1.Deployment).DeepCopy()
	d.Status.AvailableReplicas = ready
	r.minAvailable = min(r.minAvailable, ready)
	if err := r.c.Tracker().Update(deploymentsResource, d, ns); err != nil {
		panic(err)
	}
}

// TestExecuteDeploymentOneAtATimeWaitsForReplacements: replicas 4,
// maxUnavailable 1, three pods on n1. Each eviction waits until the
// previous pod's replacement is available (5 s after the eviction), so the
// Deployment never has fewer than 3 available.
func TestExecuteDeploymentOneAtATimeWaitsForReplacements(t *testing.T) {
	dep, rs := deployment("web", 4, 4, unavailable(1))
	c := fake.NewClientset(node("n1"), node("n2"), dep, rs,
		pod("web-a", "n1", inDeployment("web")), pod("web-b", "n1", inDeployment("web")),
		pod("web-c", "n1", inDeployment("web")), pod("web-d", "n2", inDeployment("web")))
	opts, fc := fakeOptions()
	ctrl := newReplicaSetController(c, fc)
	rep, err := planAndExecute(t, c, opts, fc, 2)
	if err != nil || !rep.Complete {
		t.Fatalf("Execute = %+v, %v; want complete", rep, err)
	}
	if diff := cmp.Diff([]time.Duration{0, 5 * time.Second, 10 * time.Second}, ctrl.ev.at); diff != "" {
		t.Errorf("evictions at (-want +got): each must wait for the previous replacement\n%s", diff)
	}
	if ctrl.minAvailable < 3 {
		t.Errorf("the Deployment fell to %d available; its strategy keeps 3", ctrl.minAvailable)
	}
}

// TestExecuteEvictionsAtOnceStillKeepTheBound: the plan evicts web's two
// pods on n1 at once (replicas 4, maxUnavailable 2, two replicas on n2);
// by the time the drain runs one of those on n2 is no longer Ready. The
// evictions, checked against the bound under the workload's lock, go one
// at a time: never fewer than 2 available.
func TestExecuteEvictionsAtOnceStillKeepTheBound(t *testing.T) {
	dep, rs := deployment("web", 4, 4, unavailable(2))
	c := fake.NewClientset(node("n1"), node("n2"), dep, rs,
		pod("web-a", "n1", inDeployment("web")), pod("web-b", "n1", inDeployment("web")),
		pod("web-c", "n2", inDeployment("web")), pod("web-d", "n2", inDeployment("web")))
	opts, fc := fakeOptions()
	plan, err := MakePlan(context.Background(), c, "n1", opts)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Count(ActionEvict) != 2 {
		t.Fatalf("plan: %+v, want both evicted at once", plan.Pods)
	}
	obj, _ := c.Tracker().Get(podsResource, ns, "web-d")
	sick := obj.(*corev1.Pod).DeepCopy()
	sick.Status.Conditions[0].Status = corev1.ConditionFalse
	if err := c.Tracker().Update(podsResource, sick, ns); err != nil {
		t.Fatal(err)
	}
	ctrl := newReplicaSetController(c, fc)
	var rep Report
	drive(t, fc, 2, opts.PollInterval, func() { rep, err = Execute(context.Background(), c, plan, opts) })
	if err != nil || !rep.Complete {
		t.Fatalf("Execute = %+v, %v; want complete", rep, err)
	}
	if ctrl.minAvailable < 2 {
		t.Errorf("the Deployment fell to %d available; its strategy keeps 2", ctrl.minAvailable)
	}
	if len(ctrl.ev.at) != 2 || ctrl.ev.at[1] < 5*time.Second {
		t.Errorf("evictions at %v: the second must wait for the first replacement (5 s)", ctrl.ev.at)
	}
}

// TestExecuteMarkHoldsOnlyWhileItIsNeeded: the mark a running drain writes
// lapses its timeout + 2 m after the agent sees it (a drain that dies does
// not hold the node); an incomplete drain on a Ready node leaves it so and
// says when; a complete drain makes it last until undrain, or for
// MaintenanceFor. A drain run again renews a lapsing mark and keeps a
// lasting one.
func TestExecuteMarkHoldsOnlyWhileItIsNeeded(t *testing.T) {
	markOf := func(t *testing.T, c *fake.Clientset) cluster.Maintenance {
		t.Helper()
		n, _ := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
		m, err := cluster.DecodeMaintenance(n.Annotations[cluster.AnnotationMaintenance])
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	t.Run("incomplete: the running mark stays, and lapses", func(t *testing.T) {
		c := budgetCase()
		opts, fc := fakeOptions()
		opts.Timeout = 30 * time.Second
		var ev evictions
		ev.react(c, fc, func(int, string) error { return tooManyRequests("web-pdb") })
		rep, err := planAndExecute(t, c, opts, fc, 2)
		if !errors.Is(err, ErrIncomplete) || rep.MaintenanceFor != "2m30s" {
			t.Fatalf("Execute = %v, maintenanceFor %q; want incomplete, 2m30s", err, rep.MaintenanceFor)
		}
		if got := markOf(t, c).Expiry(); got != 150*time.Second {
			t.Errorf("mark expires after %s, want 2m30s", got)
		}
	})
	t.Run("complete: until undrain, or for MaintenanceFor", func(t *testing.T) {
		for _, d := range []time.Duration{0, time.Hour} {
			c := fake.NewClientset(node("n1"), node("n2"))
			opts, fc := fakeOptions()
			opts.MaintenanceFor = d
			if rep, err := planAndExecute(t, c, opts, fc, 2); err != nil || rep.MaintenanceFor != markFor(mustEncode(t, d)) {
				t.Fatalf("Execute = %v, maintenanceFor %q", err, rep.MaintenanceFor)
			}
			if got := markOf(t, c).Expiry(); got != d {
				t.Errorf("MaintenanceFor %s: the mark expires after %s", d, got)
			}
		}
	})
	t.Run("run again: a lapsing mark is renewed, a lasting one kept", func(t *testing.T) {
		lapsing := `{"by":"bob","reason":"kernel","since":"2025-03-01T09:00:00Z","cordoned":true,"for":"12m0s"}`
		lasting := `{"by":"bob","reason":"kernel","since":"2025-03-01T09:00:00Z","cordoned":true}`
		for _, tc := range []struct {
			mark       string
			wantSince  time.Time
			wantReason string
		}{{lapsing, t0, "firmware"}, {lasting, t0.Add(-time.Hour), "kernel"}} {
			c := fake.NewClientset(node("n1", cordoned(), maintenance(tc.mark)), node("n2"))
			opts, _ := fakeOptions()
			if _, _, err := markMaintenance(context.Background(), c, "n1", opts.withDefaults()); err != nil {
				t.Fatal(err)
			}
			m := markOf(t, c)
			if !m.Since.Equal(tc.wantSince) || !m.Cordoned || m.Reason != tc.wantReason {
				t.Errorf("mark %s after a second drain: %+v; want since %s, reason %s, cordoned kept", tc.mark, m, tc.wantSince, tc.wantReason)
			}
		}
	})
}

func mustEncode(t *testing.T, d time.Duration) string {
	t.Helper()
	m := cluster.Maintenance{}
	if d > 0 {
		m.For = &metav1.Duration{Duration: d}
	}
	v, err := cluster.EncodeMaintenance(m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestReleaseGivesADownNodeBackToFencing: `undrain --release` on a node in
// maintenance that is not Ready removes the mark at once, keeps the cordon
// and says so; on a node without the mark it does nothing.
func TestReleaseGivesADownNodeBackToFencing(t *testing.T) {
	c := fake.NewClientset(node("n1", notReady(), cordoned(), maintenance(`{"by":"bob","since":"2025-03-01T09:00:00Z","cordoned":true,"for":"12m0s"}`)), node("n2", cordoned()))
	opts, _ := fakeOptions()
	released, err := Release(context.Background(), c, "n1", opts)
	if err != nil || !released {
		t.Fatalf("Release = %v, %v; want released", released, err)
	}
	n, _ := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if cluster.InMaintenance(n) || !n.Spec.Unschedulable {
		t.Errorf("after Release: maintenance=%q cordoned=%v; want no mark, cordon kept", n.Annotations[cluster.AnnotationMaintenance], n.Spec.Unschedulable)
	}
	if diff := cmp.Diff([]string{ReasonMaintenanceReleased}, eventReasons(c)); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
	c.ClearActions()
	if released, err := Release(context.Background(), c, "n2", opts); err != nil || released || len(writes(c)) > 0 {
		t.Errorf("Release of a node without the mark = %v, %v, wrote %v; want nothing", released, err, writes(c))
	}
}
