package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// The tests in this file are named for the defects the third safety review
// found in the cluster adapter (issue 17). Each failed before its fix.

var (
	nodesGVR = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	podsGVR  = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
)

// enforceDeletePreconditions makes the fake API server answer a pod delete
// whose preconditions (UID, resourceVersion) do not hold with 409
// Conflict, as the real one does; the fake clientset's tracker ignores
// them.
func enforceDeletePreconditions(h *harness) {
	h.client.PrependReactor("delete", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		d := a.(clienttesting.DeleteAction)
		pre := d.GetDeleteOptions().Preconditions
		if pre == nil {
			return false, nil, nil
		}
		obj, err := h.client.Tracker().Get(podsGVR, d.GetNamespace(), d.GetName())
		if err != nil {
			return false, nil, nil // the tracker answers NotFound
		}
		p := obj.(*corev1.Pod)
		if (pre.UID != nil && *pre.UID != p.UID) || (pre.ResourceVersion != nil && *pre.ResourceVersion != p.ResourceVersion) {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, p.Name,
				fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v; resourceVersion %v, %v", pre.UID, p.UID, pre.ResourceVersion, p.ResourceVersion))
		}
		return false, nil, nil
	})
}

// afterList runs do once, right after the first list of pods is answered:
// what a leader paused between its list and its deletes lets happen.
func afterList(h *harness, do func()) {
	done := false
	h.client.PrependReactor("list", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if done {
			return false, nil, nil
		}
		done = true
		obj, err := h.client.Tracker().List(podsGVR, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, a.GetNamespace())
		do()
		return true, obj, err
	})
}

func (h *harness) updateServer(gvr schema.GroupVersionResource, ns, name string, change func(runtime.Object)) {
	h.t.Helper()
	obj, err := h.client.Tracker().Get(gvr, ns, name)
	if err != nil {
		h.t.Fatal(err)
	}
	obj = obj.DeepCopyObject()
	change(obj)
	if err := h.client.Tracker().Update(gvr, obj, ns); err != nil {
		h.t.Fatal(err)
	}
}

func podDeletes(actions []clienttesting.Action) []string {
	var out []string
	for _, a := range actions {
		if d, ok := a.(clienttesting.DeleteAction); ok && a.GetResource().Resource == "pods" {
			out = append(out, d.GetName())
		}
	}
	return out
}

// Defect 5: DeleteTerminatingPods checked the fencing token, listed the
// node's pods and deleted them; a leader paused between the list and the
// deletes deleted pods after another leader had moved on (here: taken the
// node over and found the node back, its taint removed). The token and
// the taint are checked again right before each delete.
func TestAPausedLeaderDeletesNoPodOnceAnotherMovedOn(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(*corev1.Node)
	}{
		{"another leader wrote the state", func(n *corev1.Node) { n.Annotations[AnnotationState] = "S-by-the-new-leader" }},
		{"the taint was removed", func(n *corev1.Node) { n.Spec.Taints = nil; delete(n.Annotations, AnnotationTaintOwner) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, node("w1", withState(token), withTaint(oos), ownedByUs()),
				pod("db", "db-0", "w1", terminating(at(0))), pod("db", "db-1", "w1", terminating(at(0))))
			enforceDeletePreconditions(h)
			afterList(h, func() {
				h.updateServer(nodesGVR, "", "w1", func(o runtime.Object) {
					n := o.(*corev1.Node)
					tt.change(n)
					n.ResourceVersion = "2"
				})
			})
			n, err := h.c.DeleteTerminatingPods(context.Background(), "w1", token)
			if dels := podDeletes(h.client.Actions()); len(dels) > 0 || n != 0 {
				t.Fatalf("a stale leader force-deleted %v (returned %d, %v) after %s", dels, n, err, tt.name)
			}
			if err == nil {
				t.Errorf("no error: the caller must learn that nothing was deleted and why")
			}
		})
	}
}

// Defect 5: a pod its kubelet touched between our list and our delete (the
// node came back and runs it) was deleted anyway: the delete carried only
// the pod's UID. It carries the listed resourceVersion too.
func TestAPodTouchedSinceTheListIsNotForceDeleted(t *testing.T) {
	h := newHarness(t, node("w1", withState(token), withTaint(oos), ownedByUs()),
		pod("db", "db-0", "w1", terminating(at(0))), pod("db", "db-1", "w1", terminating(at(0))))
	enforceDeletePreconditions(h)
	afterList(h, func() {
		h.updateServer(podsGVR, "db", "db-0", func(o runtime.Object) {
			p := o.(*corev1.Pod)
			p.Status.Phase = corev1.PodRunning
			p.ResourceVersion = "2"
		})
	})
	n, err := h.c.DeleteTerminatingPods(context.Background(), "w1", token)
	if err != nil || n != 1 {
		t.Fatalf("DeleteTerminatingPods = %d, %v; want 1 (db-1), nil", n, err)
	}
	if _, err := h.client.Tracker().Get(podsGVR, "db", "db-0"); err != nil {
		t.Errorf("db-0, touched by its kubelet after our list, was deleted: %v", err)
	}
}

// The adapter's calls, in order: the node (token, taint), the list, then
// before each delete the node again. fence/fencesim models
// DeleteTerminatingPods call by call in this order (its Cluster), so the
// simulation can pause a leader, or fail a call, between any two of them.
func TestDeleteTerminatingPodsCallsInTheSimulatedOrder(t *testing.T) {
	h := newHarness(t, node("w1", withState(token), withTaint(oos), ownedByUs()),
		pod("db", "db-0", "w1", terminating(at(0))), pod("db", "db-1", "w1", terminating(at(0))))
	if _, err := h.c.DeleteTerminatingPods(context.Background(), "w1", token); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range h.client.Actions() {
		call := a.GetVerb() + " " + a.GetResource().Resource
		if d, ok := a.(clienttesting.DeleteAction); ok {
			o := d.GetDeleteOptions()
			if o.Preconditions == nil || o.Preconditions.UID == nil || o.Preconditions.ResourceVersion == nil {
				t.Errorf("delete of %s without UID and resourceVersion preconditions: %+v", d.GetName(), o.Preconditions)
			}
		}
		got = append(got, call)
	}
	want := []string{"get nodes", "list pods", "get nodes", "delete pods", "get nodes", "delete pods"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// Defect 8: the state persist before a ForceOff reads the node from the
// server (SaveState → getNode) and our view takes in what it read
// (adoptNode), a Ready heartbeat included. The server recheck that follows
// compared the server with that view: a kubelet status update that reached
// the server before its Lease renewal, and that the persist absorbed, was
// nothing new to it, and the ForceOff went out to a node that had just
// come back. The recheck compares with the view the engine decided on.
func TestAHeartbeatTheStatePersistTookInStopsTheForceOff(t *testing.T) {
	p := fence.DefaultPolicy()
	p.FenceAfter = 30 * time.Second
	h := newHarness(t, node("w1", readyUnknown(at(0))), lease("w1", at(0)))
	h.deliver(node("w1", readyUnknown(at(0))), lease("w1", at(0)))
	machine := bmctest.New(h.clock, bmctest.WithKey("bmc-w1"))
	r, err := runner.New(runner.Options{Policy: p, Clock: h.clock, Cluster: h.c, Inventory: oneBMC{"w1", machine}, ID: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	// fresh keeps our view of the API server fresh: another Lease event
	// (the same renewal, a new resourceVersion), as other kubelets' would.
	fresh := func() {
		l := lease("w1", at(0))
		l.ResourceVersion = h.clock.Now().Format("150405")
		h.deliver(l)
	}
	ctx := context.Background()
	h.clock.Step(25 * time.Second)
	fresh()
	r.Sync(ctx, "w1") // silent 25 s: Suspect, the BMC reads On, ForceOff not due yet
	// The suspicion is unsaved (docs/safety.md, "Unsaved suspicions"):
	// nothing written yet, the BMC read.
	if raw := h.view("w1").State; raw != "" || machine.Count(bmc.OpPowerStatus) == 0 {
		t.Fatalf("after 25 s of silence: state %q written, %d reads; want the suspicion unsaved and the BMC read", raw, machine.Count(bmc.OpPowerStatus))
	}
	// The kubelet comes back: its status update (a new Ready heartbeat)
	// reaches the server; our informer has not delivered it, and its
	// Lease renewal is yet to come.
	h.updateServer(nodesGVR, "", "w1", func(o runtime.Object) {
		n := o.(*corev1.Node)
		ready(at(26 * time.Second))(n)
		n.ResourceVersion = "26"
	})
	h.clock.Step(6 * time.Second)
	fresh()
	r.Sync(ctx, "w1") // silent 31 s on the view: a ForceOff is due, persisted first
	if n := machine.Count(bmc.OpPowerOff); n != 0 {
		t.Fatalf("%d ForceOff sent to a node whose kubelet had just updated its status (the persist took it in; the recheck saw nothing new)", n)
	}
}
