package remediation

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/client/clientset/versioned/fake"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

type condition struct {
	Type, Status, Reason string
}

func brief(cs []metav1.Condition) []condition {
	out := make([]condition, 0, len(cs))
	for _, c := range cs {
		out = append(out, condition{c.Type, string(c.Status), c.Reason})
	}
	return out
}

func want(processing, processingReason, succeeded, succeededReason string) []condition {
	return []condition{
		{v1alpha1.ConditionProcessing, processing, processingReason},
		{v1alpha1.ConditionSucceeded, succeeded, succeededReason},
		{v1alpha1.ConditionPermanentNodeDeletionExpected, "False", v1alpha1.ReasonNodeKept},
	}
}

// The conditions NodeHealthCheck reads: Succeeded=False whenever fencing
// cannot proceed, so that NHC escalates; True once the node is tainted.
func TestConditions(t *testing.T) {
	found := Situation{Node: "w1", NodeFound: true}
	with := func(f func(*Situation)) Situation { s := found; f(&s); return s }
	tests := []struct {
		name string
		s    Situation
		want []condition
	}{
		{"waiting for silence", found, want("True", "Waiting", "Unknown", "Waiting")},
		{"suspect", with(func(s *Situation) { s.Phase = fence.Suspect }), want("True", "Fencing", "Unknown", "Fencing")},
		{"powering off", with(func(s *Situation) { s.Phase = fence.PoweringOff }), want("True", "Fencing", "Unknown", "Fencing")},
		{"tainting", with(func(s *Situation) { s.Phase = fence.Tainting }), want("True", "Fencing", "Unknown", "Fencing")},
		{"detaching", with(func(s *Situation) { s.Phase = fence.Detaching }), want("False", "Fenced", "True", "Fenced")},
		{"fenced", with(func(s *Situation) { s.Phase = fence.Fenced }), want("False", "Fenced", "True", "Fenced")},
		{"recovered after the fence stays succeeded", with(func(s *Situation) { s.Fenced = true }), want("False", "Fenced", "True", "Fenced")},
		{"stuck", with(func(s *Situation) { s.Phase, s.Stuck = fence.Stuck, fence.StuckPowerOffIgnored }), want("False", "CannotFence", "False", "CannotFence")},
		{"maintenance", with(func(s *Situation) { s.Phase = fence.Maintenance }), want("False", "CannotFence", "False", "CannotFence")},
		{"no BMC", with(func(s *Situation) { s.Unfenceable = "no inventory entry" }), want("False", "CannotFence", "False", "CannotFence")},
		{"no such node", Situation{Node: "w9"}, want("False", "CannotFence", "False", "CannotFence")},
		{"machine without nodeRef", Situation{Unresolved: "no nodeRef"}, want("False", "CannotFence", "False", "CannotFence")},
		{"timed out", with(func(s *Situation) { s.TimedOut = true; s.Phase = fence.Suspect }), want("False", "TimedOut", "False", "TimedOut")},
		{"timed out after the taint is still fenced", with(func(s *Situation) { s.TimedOut = true; s.Phase = fence.Fenced }), want("False", "Fenced", "True", "Fenced")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, brief(Conditions(tt.s))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

type fakeNodes struct {
	infos      map[string]runner.NodeInfo
	remediated map[string]string
}

func (f *fakeNodes) Node(name string) (runner.NodeInfo, bool) {
	i, ok := f.infos[name]
	return i, ok
}
func (f *fakeNodes) SetRemediated(n map[string]string) { f.remediated = n }

func nodeIn(t *testing.T, name string, phase fence.Phase) runner.NodeInfo {
	t.Helper()
	st := fence.State{Phase: phase}
	raw, err := fence.Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	return runner.NodeInfo{Name: name, State: raw}
}

type crOpt func(*v1alpha1.BMCFenceRemediation)

func remediationCR(name string, opts ...crOpt) *v1alpha1.BMCFenceRemediation {
	cr := &v1alpha1.BMCFenceRemediation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "nhc", Generation: 1}}
	for _, o := range opts {
		o(cr)
	}
	return cr
}

func annotated(k, v string) crOpt {
	return func(cr *v1alpha1.BMCFenceRemediation) {
		if cr.Annotations == nil {
			cr.Annotations = map[string]string{}
		}
		cr.Annotations[k] = v
	}
}

func ownedByMachine(name string) crOpt {
	return func(cr *v1alpha1.BMCFenceRemediation) {
		cr.OwnerReferences = append(cr.OwnerReferences, metav1.OwnerReference{APIVersion: "cluster.x-k8s.io/v1beta1", Kind: "Machine", Name: name})
	}
}

func deleting() crOpt {
	return func(cr *v1alpha1.BMCFenceRemediation) {
		ts := metav1.NewTime(t0)
		cr.DeletionTimestamp = &ts
		cr.Finalizers = []string{v1alpha1.FinalizerRemediation}
	}
}

func machine(name, node string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
		"metadata": map[string]any{"name": name, "namespace": "nhc"},
	}}
	if node != "" {
		_ = unstructured.SetNestedField(u.Object, node, "status", "nodeRef", "name")
	}
	return u
}

// Reconcile: the node a CR names (NHC by name or annotation, MHC through
// the Machine's nodeRef), whether it asks for a fence, our finalizer, and
// never a deletion of the CR.
func TestReconcile(t *testing.T) {
	tests := []struct {
		name          string
		cr            *v1alpha1.BMCFenceRemediation
		wantNode      string
		wantAsks      bool
		wantFinalizer bool
		wantSucceeded string
	}{
		{"NHC: named after the node", remediationCR("w1"), "w1", true, true, "Unknown"},
		{"NHC with multiple templates: the node-name annotation", remediationCR("w1-abcde", annotated(v1alpha1.AnnotationNodeName, "w1")), "w1", true, true, "Unknown"},
		{"NHC timed out: stop asking", remediationCR("w1", annotated(v1alpha1.AnnotationNHCTimedOut, "2026-11-23T12:00:00Z")), "w1", false, true, "False"},
		{"no such node: escalate", remediationCR("w9"), "w9", false, true, "False"},
		{"MHC: the Machine's nodeRef", remediationCR("m1", ownedByMachine("m1")), "w1", true, true, "Unknown"},
		{"MHC: a Machine without nodeRef cannot be fenced", remediationCR("m2", ownedByMachine("m2")), "", false, true, "False"},
		{"deleted by its creator: finalizer released", remediationCR("w1", deleting()), "", false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewSimpleClientset(tt.cr)
			scheme := runtime.NewScheme()
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
				map[schema.GroupVersionResource]string{{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machines"}: "MachineList"},
				machine("m1", "w1"), machine("m2", ""))
			nodes := &fakeNodes{infos: map[string]runner.NodeInfo{"w1": nodeIn(t, "w1", fence.Healthy)}}
			c, err := New(Options{Client: client.FencingV1alpha1(), Nodes: nodes, Machines: DynamicMachines{Client: dyn},
				Clock: clocktesting.NewFakeClock(t0)})
			if err != nil {
				t.Fatal(err)
			}
			node, asks, err := c.Reconcile(context.Background(), tt.cr)
			if err != nil {
				t.Fatal(err)
			}
			if node != tt.wantNode || asks != tt.wantAsks {
				t.Errorf("Reconcile = (%q, %v), want (%q, %v)", node, asks, tt.wantNode, tt.wantAsks)
			}
			got, err := client.FencingV1alpha1().BMCFenceRemediations("nhc").Get(context.Background(), tt.cr.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the CR is gone: %v (we never delete it)", err)
			}
			if has := len(got.Finalizers) == 1 && got.Finalizers[0] == v1alpha1.FinalizerRemediation; has != tt.wantFinalizer {
				t.Errorf("finalizers %v, want ours: %v", got.Finalizers, tt.wantFinalizer)
			}
			var succeeded string
			for _, c := range got.Status.Conditions {
				if c.Type == v1alpha1.ConditionSucceeded {
					succeeded = string(c.Status)
				}
			}
			if succeeded != tt.wantSucceeded {
				t.Errorf("Succeeded = %q, want %q (conditions %v)", succeeded, tt.wantSucceeded, brief(got.Status.Conditions))
			}
			for _, a := range client.Actions() {
				if a.GetVerb() == "delete" {
					t.Errorf("%s %s: the agent must never delete a remediation CR", a.GetVerb(), a.GetResource().Resource)
				}
			}
		})
	}
}

// A condition keeps its lastTransitionTime while its status holds, so
// NodeHealthCheck's view of when the remediation started is stable.
func TestReconcileKeepsTransitionTimes(t *testing.T) {
	cr := remediationCR("w1")
	client := fake.NewSimpleClientset(cr)
	clk := clocktesting.NewFakeClock(t0)
	nodes := &fakeNodes{infos: map[string]runner.NodeInfo{"w1": nodeIn(t, "w1", fence.Suspect)}}
	c, err := New(Options{Client: client.FencingV1alpha1(), Nodes: nodes, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	crs := client.FencingV1alpha1().BMCFenceRemediations("nhc")
	get := func() *v1alpha1.BMCFenceRemediation {
		t.Helper()
		got, err := crs.Get(context.Background(), "w1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if _, _, err := c.Reconcile(context.Background(), cr); err != nil {
		t.Fatal(err)
	}
	first := get()
	clk.Step(10 * time.Second)
	nodes.infos["w1"] = nodeIn(t, "w1", fence.PoweringOff)
	if _, _, err := c.Reconcile(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	second := get()
	if diff := cmp.Diff(first.Status.Conditions, second.Status.Conditions, cmpopts.IgnoreFields(metav1.Condition{}, "Message")); diff != "" {
		t.Errorf("conditions changed while their status held (-first +second):\n%s", diff)
	}
	if second.Status.Phase != "PoweringOff" {
		t.Errorf("status.phase = %q, want PoweringOff", second.Status.Phase)
	}
}

func TestNodeRefOfAMachineWithoutOne(t *testing.T) {
	_, err := nodeRef(machine("m2", ""))
	if !errors.Is(err, ErrNoNodeRef) {
		t.Errorf("err = %v, want ErrNoNodeRef", err)
	}
}

// drain reconciles every CR queued now (not those waiting out a backoff).
func drain(ctx context.Context, c *Controller) {
	for c.queue.Len() > 0 {
		c.ProcessNext(ctx)
	}
}

// A CR whose finalizer cannot be written is retried with a backoff of its
// own: the resyncs every 2 s leave it alone meanwhile, and keep serving the
// other CRs. Before the work queue every resync wrote every CR again.
func TestFailedReconcileBacksOff(t *testing.T) {
	bad, good := remediationCR("w1"), remediationCR("w2")
	client := fake.NewSimpleClientset(bad, good)
	updates := map[string]int{}
	client.PrependReactor("update", "bmcfenceremediations", func(a clienttesting.Action) (bool, runtime.Object, error) {
		name := a.(clienttesting.UpdateAction).GetObject().(*v1alpha1.BMCFenceRemediation).Name
		updates[name]++
		if name == "w1" {
			return true, nil, errors.New("the API server refuses")
		}
		return false, nil, nil
	})
	nodes := &fakeNodes{infos: map[string]runner.NodeInfo{"w1": nodeIn(t, "w1", fence.Healthy), "w2": nodeIn(t, "w2", fence.Healthy)}}
	c, err := New(Options{Client: client.FencingV1alpha1(), Nodes: nodes, Clock: clocktesting.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	for _, cr := range []*v1alpha1.BMCFenceRemediation{bad, good} {
		if err := c.informer.GetStore().Add(cr); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for range 10 {
		c.Resync()
		drain(ctx, c)
	}
	if updates["w1"] != 1 {
		t.Errorf("the failing CR was written %d times in 10 resyncs, want once (then backoff)", updates["w1"])
	}
	if updates["w2"] == 0 || nodes.remediated["w2"] == "" {
		t.Errorf("the other CR: %d writes, remediated %v: want it served", updates["w2"], nodes.remediated)
	}
}

// A MachineHealthCheck CR's Machine is read once: its nodeRef names the
// node for the Machine's life. A Machine without one is read again only
// after a backoff. Before, every resync (2 s) read every CR's Machine.
func TestMachineReadOncePerCR(t *testing.T) {
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machines"}: "MachineList"},
		machine("m1", "w1"), machine("m2", ""))
	withRef, withoutRef := remediationCR("m1", ownedByMachine("m1")), remediationCR("m2", ownedByMachine("m2"))
	withRef.UID, withoutRef.UID = "uid-1", "uid-2"
	client := fake.NewSimpleClientset(withRef, withoutRef)
	clk := clocktesting.NewFakeClock(t0)
	nodes := &fakeNodes{infos: map[string]runner.NodeInfo{"w1": nodeIn(t, "w1", fence.Healthy)}}
	c, err := New(Options{Client: client.FencingV1alpha1(), Nodes: nodes, Machines: DynamicMachines{Client: dyn}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	gets := func(name string) int {
		k := 0
		for _, a := range dyn.Actions() {
			if g, ok := a.(clienttesting.GetAction); ok && g.GetVerb() == "get" && g.GetName() == name {
				k++
			}
		}
		return k
	}
	ctx := context.Background()
	for range 11 { // at 0, 0.2, ..., 2.0 s
		for _, cr := range []*v1alpha1.BMCFenceRemediation{withRef, withoutRef} {
			if _, _, err := c.Reconcile(ctx, cr); err != nil {
				t.Fatal(err)
			}
		}
		clk.Step(200 * time.Millisecond)
	}
	if gets("m1") != 1 {
		t.Errorf("the Machine with a nodeRef was read %d times, want once", gets("m1"))
	}
	// 2 s of reconciles: the first read, and one after the 2 s backoff.
	if gets("m2") != 2 {
		t.Errorf("the Machine without a nodeRef was read %d times in 2 s, want twice (backoff 2 s)", gets("m2"))
	}
}
