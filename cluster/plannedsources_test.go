package cluster

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

func TestEarliestOpenPlannedSignalWinsAndKeepsItsFirstSight(t *testing.T) {
	h := newHarness(t)
	h.deliver(node("w1", ready(at(0))), node("w2", ready(at(0))))
	h.changed()
	want := func(step string, node string, open bool, since time.Duration, by string) {
		t.Helper()
		v := h.view(node).View
		if v.PlannedReboot != open || (open && (!v.PlannedRebootAt.Equal(at(since)) || v.PlannedRebootBy != by)) {
			t.Fatalf("%s: %s PlannedReboot %v at %s by %q; want %v at %s by %q", step, node, v.PlannedReboot, v.PlannedRebootAt.Sub(t0), v.PlannedRebootBy, open, since, by)
		}
	}
	h.clock.SetTime(at(10 * time.Second))
	h.c.SetPlanned(SourceNodeMaintenance, map[string]map[string]string{"w1": {"nm-w1": "NodeMaintenance nm-w1"}})
	want("a NodeMaintenance", "w1", true, 10*time.Second, "NodeMaintenance nm-w1")
	want("another node", "w2", false, 0, "")
	if got := h.changed(); !slices.Contains(got, "w1") || slices.Contains(got, "w2") {
		t.Fatalf("notified %v, want w1 only", got)
	}

	h.clock.SetTime(at(20 * time.Second))
	h.c.SetPlanned(SourceKured, map[string]map[string]string{"w1": {"w1": SignalKuredLock}})
	want("a later kured lock", "w1", true, 10*time.Second, "NodeMaintenance nm-w1")

	h.clock.SetTime(at(30 * time.Second))
	h.c.SetPlanned(SourceNodeMaintenance, map[string]map[string]string{"w1": {"nm-w1": "NodeMaintenance nm-w1"}})
	want("the same NodeMaintenance listed again", "w1", true, 10*time.Second, "NodeMaintenance nm-w1")

	h.c.SetPlanned(SourceNodeMaintenance, nil)
	want("the NodeMaintenance deleted: the lock remains", "w1", true, 20*time.Second, SignalKuredLock)

	h.clock.SetTime(at(40 * time.Second))
	h.c.SetPlanned(SourceClusterAPI, map[string]map[string]string{"w1": {"default/m1": "Cluster API Machine default/m1 remediated by MachineSet default/ms"}})
	h.c.SetPlanned(SourceKured, nil)
	want("the lock released", "w1", true, 40*time.Second, "Cluster API Machine default/m1 remediated by MachineSet default/ms")
	h.clock.SetTime(at(50 * time.Second))
	h.c.SetPlanned(SourceClusterAPI, map[string]map[string]string{"w1": {"default/m1": "Cluster API Machine default/m1 deleted"}})
	want("the same Machine, now deleted: its first sight holds", "w1", true, 40*time.Second, "Cluster API Machine default/m1 deleted")

	h.c.SetPlanned(SourceClusterAPI, nil)
	want("the Machine gone", "w1", false, 0, "")
	h.clock.SetTime(at(60 * time.Second))
	h.c.SetPlanned(SourceKured, map[string]map[string]string{"w1": {"w1": SignalKuredLock}})
	want("a new lock is a new signal", "w1", true, 60*time.Second, SignalKuredLock)
}

func TestGracefulShutdownSeenFirstWinsOverALaterSignal(t *testing.T) {
	h := newHarness(t)
	h.deliver(node("w1", ready(at(0))))
	h.clock.SetTime(at(10 * time.Second))
	h.deliver(node("w1", shuttingDown(at(10*time.Second)), rv("2")))
	h.clock.SetTime(at(20 * time.Second))
	h.c.SetPlanned(SourceKured, map[string]map[string]string{"w1": {"w1": SignalKuredLock}})
	if v := h.view("w1").View; !v.PlannedRebootAt.Equal(at(10*time.Second)) || v.PlannedRebootBy != SignalGracefulShutdown {
		t.Fatalf("PlannedReboot at %s by %q, want the graceful shutdown at 10s", v.PlannedRebootAt.Sub(t0), v.PlannedRebootBy)
	}
	h.clock.SetTime(at(5 * time.Minute))
	h.deliver(node("w1", ready(at(5*time.Minute)), rv("3")))
	if v := h.view("w1").View; !v.PlannedRebootAt.Equal(at(20*time.Second)) || v.PlannedRebootBy != SignalKuredLock {
		t.Fatalf("Ready again, the lock still held: PlannedReboot at %s by %q, want the kured lock at 20s", v.PlannedRebootAt.Sub(t0), v.PlannedRebootBy)
	}
}

func TestKuredLockedNodesReadsKuredsLockAnnotation(t *testing.T) {
	tests := []struct {
		name, raw string
		want      []string
		err       bool
	}{
		{name: "no lock", raw: ""},
		{name: "one holder (kured 1.17)", raw: `{"nodeID":"w1","metadata":{"unschedulable":false},"created":"2026-11-26T05:00:00Z","TTL":0}`, want: []string{"w1"}},
		{name: "one holder (kured before 1.7)", raw: `{"nodeID":"w1","metadata":{"unschedulable":true}}`, want: []string{"w1"}},
		{name: "multi-lock, two holders", raw: `{"maxOwners":2,"locks":[{"nodeID":"w1","created":"2026-11-26T05:00:00Z","TTL":0},{"nodeID":"w2","created":"2026-11-26T05:00:01Z","TTL":0}]}`, want: []string{"w1", "w2"}},
		{name: "multi-lock, none held", raw: `{"maxOwners":2,"locks":[]}`},
		{name: "not JSON", raw: `w1`, err: true},
		{name: "no nodeID", raw: `{"metadata":{}}`, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := KuredLockedNodes(tt.raw)
			if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
				t.Fatalf("KuredLockedNodes = %v, %v; want %v, error %v", got, err, tt.want, tt.err)
			}
		})
	}
}

func machine(ns, name, nodeName string, mutate ...func(u *unstructured.Unstructured)) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"status":   map[string]any{},
	}}
	if nodeName != "" {
		u.Object["status"] = map[string]any{"nodeRef": map[string]any{"kind": "Node", "name": nodeName}}
	}
	for _, m := range mutate {
		m(u)
	}
	return u
}

func deleting(u *unstructured.Unstructured) {
	ts := metav1.NewTime(t0)
	u.SetDeletionTimestamp(&ts)
}

func conditionsAt(status string, path ...string) func(u *unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		conds := []any{
			map[string]any{"type": "HealthCheckSucceeded", "status": "False", "reason": "UnhealthyNode"},
			map[string]any{"type": "OwnerRemediated", "status": status, "reason": "WaitingForRemediation"},
		}
		if err := unstructured.SetNestedSlice(u.Object, conds, path...); err != nil {
			panic(err)
		}
	}
}

func ownedBy(kind, name string) func(u *unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		ctrl := true
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta1", Kind: kind, Name: name, Controller: &ctrl}})
	}
}

func TestMachineSignalIsDeletionOrRemediationByItsOwner(t *testing.T) {
	tests := []struct {
		name string
		m    *unstructured.Unstructured
		open bool
		node string
		by   string
	}{
		{name: "a running Machine", m: machine("default", "m1", "w1")},
		{name: "deleted", m: machine("default", "m1", "w1", deleting), open: true, node: "w1", by: "Cluster API Machine default/m1 deleted"},
		{name: "deleted before it had a node", m: machine("default", "m1", "", deleting)},
		{name: "remediated by its MachineSet (v1beta1 conditions)", m: machine("default", "m1", "w1", conditionsAt("False", "status", "conditions"), ownedBy("MachineSet", "ms")),
			open: true, node: "w1", by: "Cluster API Machine default/m1 remediated by MachineSet default/ms"},
		{name: "remediated (v1beta2 conditions in v1beta1)", m: machine("capi", "m2", "w2", conditionsAt("False", "status", "v1beta2", "conditions"), ownedBy("KubeadmControlPlane", "kcp")),
			open: true, node: "w2", by: "Cluster API Machine capi/m2 remediated by KubeadmControlPlane capi/kcp"},
		{name: "remediated (deprecated v1beta1 conditions in v1beta2), no owner", m: machine("default", "m1", "w1", conditionsAt("False", "status", "deprecated", "v1beta1", "conditions")),
			open: true, node: "w1", by: "Cluster API Machine default/m1 remediated by its owner"},
		{name: "remediation done", m: machine("default", "m1", "w1", conditionsAt("True", "status", "conditions"))},
		{name: "deleted while remediated: deleted", m: machine("default", "m1", "w1", conditionsAt("False", "status", "conditions"), deleting), open: true, node: "w1", by: "Cluster API Machine default/m1 deleted"},
		{name: "an external remediation (ours among them) is no signal", m: machine("default", "m1", "w1", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(u.Object, []any{
				map[string]any{"type": "HealthCheckSucceeded", "status": "False"},
				map[string]any{"type": "ExternalRemediationRequestAvailable", "status": "True"},
			}, "status", "conditions")
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, open := machineSignal(tt.m)
			if open != tt.open || (open && (s.node != tt.node || s.by != tt.by)) {
				t.Fatalf("machineSignal = %+v, %v; want node %q by %q, %v", s, open, tt.node, tt.by, tt.open)
			}
		})
	}
}

// waitView waits (on the view's change notifications, at most 10 s) until
// the node's view satisfies ok.
func (h *harness) waitView(name string, ok func(fence.NodeView) bool, what string) {
	h.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if info, found := h.c.Node(name); found && ok(info.View) {
			return
		}
		select {
		case <-h.c.Changed():
		case <-deadline:
			info, _ := h.c.Node(name)
			h.t.Fatalf("%s: %s's view %+v (sources %+v)", what, name, info.View, h.c.PlannedSources())
		}
	}
}

func TestWatchPlannedTakesEachSourceFromTheAPI(t *testing.T) {
	lock, _ := json.Marshal(map[string]any{"nodeID": "w1", "metadata": map[string]any{"unschedulable": false}, "created": t0, "TTL": 0})
	kured := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kured", Namespace: "kube-system",
		Annotations: map[string]string{DefaultKuredAnnotation: string(lock)}}}
	other := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "not-kured", Namespace: "kube-system",
		Annotations: map[string]string{DefaultKuredAnnotation: `{"nodeID":"w4"}`}}}
	h := newHarness(t, kured, other)
	h.deliver(node("w1", ready(at(0))), node("w2", ready(at(0))), node("w3", ready(at(0))), node("w4", ready(at(0))))
	nm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
		"metadata": map[string]any{"name": "nm-w2"}, "spec": map[string]any{"nodeName": "w2", "reason": "firmware"},
	}}
	m := machine("default", "machine-w3", "w3", deleting)
	m.SetFinalizers([]string{"machine.cluster.x-k8s.io"})
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		NodeMaintenances: "NodeMaintenanceList", MachinesV1beta1: "MachineList", MachinesV1beta2: "MachineList",
	}, nm, m)
	disc := h.client.Discovery().(*fakediscovery.FakeDiscovery)
	disc.Resources = []*metav1.APIResourceList{
		{GroupVersion: "nodemaintenance.medik8s.io/v1beta1", APIResources: []metav1.APIResource{{Name: "nodemaintenances"}}},
		{GroupVersion: "cluster.x-k8s.io/v1beta1", APIResources: []metav1.APIResource{{Name: "machines"}}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.c.WatchPlanned(ctx, PlannedOptions{Client: clientgo.Wrap(h.client), Dynamic: dyn, Kured: DefaultKuredLock()})
	}()
	t.Cleanup(func() { cancel(); <-done })

	by := func(want string) func(fence.NodeView) bool {
		return func(v fence.NodeView) bool { return v.PlannedReboot && v.PlannedRebootBy == want }
	}
	h.waitView("w1", by(SignalKuredLock), "kured's lock")
	h.waitView("w2", by("NodeMaintenance nm-w2"), "the NodeMaintenance")
	h.waitView("w3", by("Cluster API Machine default/machine-w3 deleted"), "the deleted Machine")
	for _, s := range h.c.PlannedSources() {
		if s.State != PlannedWatched {
			t.Errorf("source %s: %s (%s), want %s", s.Source, s.State, s.Detail, PlannedWatched)
		}
	}
	if v := h.view("w4").View; v.PlannedReboot {
		t.Errorf("another DaemonSet's annotation made w4 a planned reboot (%s)", v.PlannedRebootBy)
	}

	// Each tool clears its signal.
	cur, _ := h.client.AppsV1().DaemonSets("kube-system").Get(ctx, "kured", metav1.GetOptions{})
	delete(cur.Annotations, DefaultKuredAnnotation)
	if _, err := h.client.AppsV1().DaemonSets("kube-system").Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dyn.Resource(NodeMaintenances).Delete(ctx, "nm-w2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dyn.Resource(MachinesV1beta1).Namespace("default").Delete(ctx, "machine-w3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	notPlanned := func(v fence.NodeView) bool { return !v.PlannedReboot }
	h.waitView("w1", notPlanned, "the lock released")
	h.waitView("w2", notPlanned, "the NodeMaintenance deleted")
	h.waitView("w3", notPlanned, "the Machine gone")
}

func TestWatchPlannedSaysWhichSourcesAreNotInstalled(t *testing.T) {
	h := newHarness(t)
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.c.WatchPlanned(ctx, PlannedOptions{Client: clientgo.Wrap(h.client), Dynamic: dyn, Kured: KuredLock{}, Recheck: time.Hour})
	}()
	t.Cleanup(func() { cancel(); <-done })
	want := map[string]string{SourceKured: PlannedOff, SourceNodeMaintenance: PlannedNotInstalled, SourceClusterAPI: PlannedNotInstalled}
	deadline := time.After(10 * time.Second)
	for {
		got := map[string]string{}
		for _, s := range h.c.PlannedSources() {
			got[s.Source] = s.State
		}
		if len(got) == len(want) && got[SourceKured] == want[SourceKured] && got[SourceNodeMaintenance] == want[SourceNodeMaintenance] && got[SourceClusterAPI] == want[SourceClusterAPI] {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("sources %v, want %v", got, want)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
