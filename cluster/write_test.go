package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

var nodesResource = schema.GroupResource{Resource: "nodes"}

// verbs lists the actions on nodes as "verb" strings, in order.
func nodeVerbs(actions []clienttesting.Action) []string {
	var out []string
	for _, a := range actions {
		if a.GetResource().Resource == "nodes" {
			out = append(out, a.GetVerb())
		}
	}
	return out
}

// patches returns the bodies of node patches.
func patches(t *testing.T, actions []clienttesting.Action) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, a := range actions {
		p, ok := a.(clienttesting.PatchAction)
		if !ok || a.GetResource().Resource != "nodes" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(p.GetPatch(), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// raceOnFirstPatch makes the first node patch lose a race: before it
// reaches the "server", change mutates the stored node (another writer),
// and the patch is answered 409 Conflict, as the API server answers a patch
// whose resourceVersion precondition no longer holds. Later patches pass.
func raceOnFirstPatch(h *harness, change func(*corev1.Node)) {
	fired := false
	h.client.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if fired {
			return false, nil, nil
		}
		fired = true
		obj, err := h.client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", a.(clienttesting.PatchAction).GetName())
		if err != nil {
			return true, nil, err
		}
		n := obj.(*corev1.Node).DeepCopy()
		change(n)
		n.ResourceVersion = "2"
		if err := h.client.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, n, ""); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewConflict(nodesResource, n.Name, errors.New("the object has been modified"))
	})
}

func serverNode(t *testing.T, h *harness, name string) *corev1.Node {
	t.Helper()
	n, err := h.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSaveState(t *testing.T) {
	tests := []struct {
		name        string
		node        *corev1.Node
		race        func(*corev1.Node) // another writer, between our read and our write
		old, new    string
		ack         string
		wantErr     error
		wantVerbs   []string
		wantState   string
		wantRequest bool
	}{{
		name: "absent annotation equals old \"\"",
		node: node("w1"), old: "", new: "S1",
		wantVerbs: []string{"get", "patch"}, wantState: "S1",
	}, {
		name: "the annotation still holds old",
		node: node("w1", withState("S1")), old: "S1", new: "S2",
		wantVerbs: []string{"get", "patch"}, wantState: "S2",
	}, {
		name: "someone else advanced it: conflict, nothing written",
		node: node("w1", withState("S9")), old: "S1", new: "S2",
		wantErr: runner.ErrConflict, wantVerbs: []string{"get"}, wantState: "S9",
	}, {
		name: "someone removed it: conflict",
		node: node("w1"), old: "S1", new: "S2",
		wantErr: runner.ErrConflict, wantVerbs: []string{"get"}, wantState: "",
	}, {
		name: "an unrelated write between read and write: read again and retry",
		node: node("w1", withState("S1")), old: "S1", new: "S2",
		race: func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
		},
		wantVerbs: []string{"get", "patch", "get", "patch"}, wantState: "S2",
	}, {
		name: "another agent's state write between read and write: conflict",
		node: node("w1", withState("S1")), old: "S1", new: "S2",
		race:    func(n *corev1.Node) { n.Annotations[AnnotationState] = "theirs" },
		wantErr: runner.ErrConflict, wantVerbs: []string{"get", "patch", "get"}, wantState: "theirs",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.node)
			if tt.race != nil {
				raceOnFirstPatch(h, tt.race)
			}
			err := h.c.SaveState(context.Background(), "w1", tt.old, tt.new, tt.ack)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("SaveState = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.wantVerbs, nodeVerbs(h.client.Actions())); diff != "" {
				t.Errorf("node actions (-want +got):\n%s", diff)
			}
			n := serverNode(t, h, "w1")
			if got := n.Annotations[AnnotationState]; got != tt.wantState {
				t.Errorf("state on the server = %q, want %q", got, tt.wantState)
			}
			if _, got := n.Annotations[AnnotationRequest]; got != tt.wantRequest {
				t.Errorf("request annotation present = %v, want %v", got, tt.wantRequest)
			}
		})
	}
}

func TestSaveStatePatchIsPreconditioned(t *testing.T) {
	h := newHarness(t, node("w1", rv("41")))
	if err := h.c.SaveState(context.Background(), "w1", "", "S1", ""); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{{"metadata": map[string]any{
		"resourceVersion": "41",
		"annotations":     map[string]any{AnnotationState: "S1"},
	}}}
	if diff := cmp.Diff(want, patches(t, h.client.Actions())); diff != "" {
		t.Errorf("patch (-want +got):\n%s", diff)
	}
}

func TestSaveStateGivesUpOnEndlessConflicts(t *testing.T) {
	h := newHarness(t, node("w1"))
	h.c.writeBackoff.Duration = 0 // the retries, not their pacing, are under test
	h.client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(nodesResource, "w1", errors.New("the object has been modified"))
	})
	err := h.c.SaveState(context.Background(), "w1", "", "S1", "")
	if !apierrors.IsConflict(err) || errors.Is(err, runner.ErrConflict) {
		t.Fatalf("SaveState = %v, want an API conflict that is not runner.ErrConflict (the state did not change)", err)
	}
	if got, want := len(patches(t, h.client.Actions())), writeBackoff.Steps; got != want {
		t.Errorf("%d patches, want %d (bounded)", got, want)
	}
}

func TestCurrentStateReadsTheServer(t *testing.T) {
	h := newHarness(t, node("w1", withState("server")))
	h.deliver(node("w1", withState("cache")))
	got, err := h.c.CurrentState(context.Background(), "w1")
	if err != nil || got != "server" {
		t.Errorf("CurrentState = %q, %v; want the server's %q", got, err, "server")
	}
	if _, err := h.c.CurrentState(context.Background(), "nope"); !apierrors.IsNotFound(err) {
		t.Errorf("CurrentState(missing node) = %v, want NotFound", err)
	}
}

func TestApplyTaint(t *testing.T) {
	now := at(90 * time.Second)
	ours := oos
	ours.TimeAdded = ptr.To(metav1.NewTime(now))
	tests := []struct {
		name       string
		node       *corev1.Node
		race       func(*corev1.Node)
		wantVerbs  []string
		wantTaints []corev1.Taint
		wantOwner  bool
	}{{
		name: "adds the taint and the owner annotation in one write",
		node: node("w1"), wantVerbs: []string{"get", "patch"},
		wantTaints: []corev1.Taint{ours}, wantOwner: true,
	}, {
		name: "keeps other taints",
		node: node("w1", withTaint(otherTaint)), wantVerbs: []string{"get", "patch"},
		wantTaints: []corev1.Taint{otherTaint, ours}, wantOwner: true,
	}, {
		name: "already ours: nothing to do",
		node: node("w1", withTaint(oos), ownedByUs()), wantVerbs: []string{"get"},
		wantTaints: []corev1.Taint{oos}, wantOwner: true,
	}, {
		name: "a foreign taint is never claimed",
		node: node("w1", withTaint(oos)), wantVerbs: []string{"get"},
		wantTaints: []corev1.Taint{oos},
	}, {
		name: "a foreign taint with another effect: the node is out of service already",
		node: node("w1", withTaint(foreign(corev1.TaintEffectNoSchedule))), wantVerbs: []string{"get"},
		wantTaints: []corev1.Taint{foreign(corev1.TaintEffectNoSchedule)},
	}, {
		name: "a taint added between our read and write is kept (patch computed again)",
		node: node("w1"), race: func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, otherTaint) },
		wantVerbs:  []string{"get", "patch", "get", "patch"},
		wantTaints: []corev1.Taint{otherTaint, ours}, wantOwner: true,
	}, {
		name: "someone else tainted it between our read and write: not claimed",
		node: node("w1"), race: func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, oos) },
		wantVerbs:  []string{"get", "patch", "get"},
		wantTaints: []corev1.Taint{oos},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, withTokenOn(tt.node))
			h.clock.SetTime(now)
			if tt.race != nil {
				raceOnFirstPatch(h, tt.race)
			}
			if err := h.c.ApplyTaint(context.Background(), "w1", token); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantVerbs, nodeVerbs(h.client.Actions())); diff != "" {
				t.Errorf("node actions (-want +got):\n%s", diff)
			}
			n := serverNode(t, h, "w1")
			if diff := cmp.Diff(tt.wantTaints, n.Spec.Taints); diff != "" {
				t.Errorf("taints (-want +got):\n%s", diff)
			}
			if got := TaintStateOf(n) == fence.TaintOurs; got != tt.wantOwner {
				t.Errorf("owner annotation = %v, want %v", got, tt.wantOwner)
			}
			for _, p := range patches(t, h.client.Actions()) {
				if p["metadata"].(map[string]any)["resourceVersion"] == nil {
					t.Errorf("patch without a resourceVersion precondition: %v", p)
				}
			}
		})
	}
}

// A drain's maintenance mark that lands between the runner's recheck and
// the taint stops the taint: the two writes exclude each other.
func TestApplyTaintRefusesAMaintenanceMark(t *testing.T) {
	for _, tt := range []struct {
		name string
		node *corev1.Node
		race func(*corev1.Node)
	}{
		{name: "marked before our read", node: node("w1", withAnnotation(AnnotationMaintenance, `{"by":"alice"}`))},
		{name: "marked between our read and write", node: node("w1"),
			race: func(n *corev1.Node) { n.Annotations[AnnotationMaintenance] = `{"by":"alice"}` }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, withTokenOn(tt.node))
			if tt.race != nil {
				raceOnFirstPatch(h, tt.race)
			}
			if err := h.c.ApplyTaint(context.Background(), "w1", token); !errors.Is(err, ErrMaintenance) {
				t.Fatalf("ApplyTaint = %v, want ErrMaintenance", err)
			}
			if n := serverNode(t, h, "w1"); HasOutOfServiceTaint(n) {
				t.Errorf("tainted a node in maintenance: %v", n.Spec.Taints)
			}
		})
	}
}

func TestApplyTaintIsIdempotent(t *testing.T) {
	h := newHarness(t, node("w1", withState(token)))
	for range 3 {
		if err := h.c.ApplyTaint(context.Background(), "w1", token); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(patches(t, h.client.Actions())); got != 1 {
		t.Errorf("%d patches for three ApplyTaint calls, want 1", got)
	}
	if got := len(serverNode(t, h, "w1").Spec.Taints); got != 1 {
		t.Errorf("%d taints, want 1", got)
	}
}

// Why 4 (issue "Safety…"): a paused old leader could land a taint after the
// new leader moved on. Every irreversible write carries the fencing token,
// checked against the node it writes, in that same write.
func TestWritesRefuseALostFencingToken(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name  string
		token string
		want  error
	}{
		{"another agent wrote the state since", "S-old", runner.ErrConflict},
		{"a write without a token is refused", runner.NoToken, nil},
		{"an empty token is refused", "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, node("w1", withState(token), withTaint(oos), ownedByUs()), pod("db", "a", "w1", terminating(at(0))))
			errs := []error{h.c.ApplyTaint(ctx, "w1", tt.token), h.c.RemoveTaint(ctx, "w1", tt.token)}
			_, err := h.c.DeleteTerminatingPods(ctx, "w1", tt.token)
			errs = append(errs, err)
			for i, err := range errs {
				if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
					t.Errorf("write %d = %v, want a refusal (%v)", i, err, tt.want)
				}
			}
			if got := len(patches(t, h.client.Actions())); got != 0 {
				t.Errorf("%d patches written without the token", got)
			}
		})
	}
	t.Run("the state changes between our read and our taint", func(t *testing.T) {
		h := newHarness(t, node("w1", withState(token)))
		raceOnFirstPatch(h, func(n *corev1.Node) { n.Annotations[AnnotationState] = "S-new-leader" })
		if err := h.c.ApplyTaint(ctx, "w1", token); !errors.Is(err, runner.ErrConflict) {
			t.Fatalf("ApplyTaint = %v, want ErrConflict", err)
		}
		if n := serverNode(t, h, "w1"); HasOutOfServiceTaint(n) {
			t.Errorf("tainted after the state changed: %v", n.Spec.Taints)
		}
	})
}

// Why 7: when our taint was removed by hand the owner annotation stayed, so
// a later taint by someone else counted as ours. The mark names our taint by
// its TimeAdded: a later one is foreign, and RemoveTaint leaves it.
func TestAStaleOwnerMarkNeverClaimsALaterTaint(t *testing.T) {
	later := foreign(corev1.TaintEffectNoExecute)
	later.Value = TaintValue
	later.TimeAdded = ptr.To(metav1.NewTime(at(10 * time.Minute)))
	n := node("w1", withTaint(later), ownedByUs(), withState(token))
	if got := TaintStateOf(n); got != fence.TaintForeign {
		t.Fatalf("TaintStateOf = %v, want foreign: the mark names another taint", got)
	}
	h := newHarness(t, n)
	if err := h.c.RemoveTaint(context.Background(), "w1", token); err != nil {
		t.Fatal(err)
	}
	got := serverNode(t, h, "w1")
	if !HasOutOfServiceTaint(got) || got.Annotations[AnnotationTaintOwner] != "" {
		t.Errorf("after RemoveTaint: taints %v, owner %q; want the later taint kept and the stale mark gone", got.Spec.Taints, got.Annotations[AnnotationTaintOwner])
	}
}

// ForgetTaint clears a mark whose taint is gone, and never removes a taint:
// a caller whose view lagged behind our own taint must not undo it.
func TestForgetTaintNeverRemovesATaint(t *testing.T) {
	for _, tt := range []struct {
		name      string
		node      *corev1.Node
		wantTaint bool
		wantMark  bool
	}{
		{"our taint is there after all: nothing changes", node("w1", withTaint(oos), ownedByUs(), withState(token)), true, true},
		{"our taint is gone: the mark goes", node("w1", ownedByUs(), withState(token)), false, false},
		{"a later taint by someone else: kept, the stale mark goes", node("w1", withTaint(foreign(corev1.TaintEffectNoExecute)), ownedByUs(), withState(token)), true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.node)
			if err := h.c.ForgetTaint(context.Background(), "w1", token); err != nil {
				t.Fatal(err)
			}
			n := serverNode(t, h, "w1")
			_, mark := n.Annotations[AnnotationTaintOwner]
			if HasOutOfServiceTaint(n) != tt.wantTaint || mark != tt.wantMark {
				t.Errorf("taints %v, mark %v; want taint %v, mark %v", n.Spec.Taints, mark, tt.wantTaint, tt.wantMark)
			}
		})
	}
}

func TestRemoveTaint(t *testing.T) {
	tests := []struct {
		name       string
		node       *corev1.Node
		wantVerbs  []string
		wantTaints []corev1.Taint
	}{{
		name: "ours: taint and annotation go in one write, other taints stay",
		node: node("w1", withTaint(otherTaint), withTaint(oos), ownedByUs(), ready(at(0))), wantVerbs: []string{"get", "patch"},
		wantTaints: []corev1.Taint{otherTaint},
	}, {
		name: "a foreign taint is never removed",
		node: node("w1", withTaint(oos)), wantVerbs: []string{"get"},
		wantTaints: []corev1.Taint{oos},
	}, {
		name: "absent: nothing to do",
		node: node("w1", withTaint(otherTaint)), wantVerbs: []string{"get"},
		wantTaints: []corev1.Taint{otherTaint},
	}, {
		name: "our annotation without our taint: the stale annotation goes, foreign taints stay",
		node: node("w1", withTaint(foreign(corev1.TaintEffectNoSchedule)), ownedByUs()), wantVerbs: []string{"get", "patch"},
		wantTaints: []corev1.Taint{foreign(corev1.TaintEffectNoSchedule)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, withTokenOn(tt.node))
			if err := h.c.RemoveTaint(context.Background(), "w1", token); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantVerbs, nodeVerbs(h.client.Actions())); diff != "" {
				t.Errorf("node actions (-want +got):\n%s", diff)
			}
			n := serverNode(t, h, "w1")
			if diff := cmp.Diff(tt.wantTaints, n.Spec.Taints); diff != "" {
				t.Errorf("taints (-want +got):\n%s", diff)
			}
			if _, owned := n.Annotations[AnnotationTaintOwner]; owned {
				t.Error("owner annotation still present")
			}
		})
	}
}

// The engine removes our taint when its view has the node Ready with a
// renewal after the taint; a view that lags (a stalled watch) may still
// show Ready after the node died again. The write reads the node from the
// server for its fencing token anyway: our taint goes only if the server
// has the node Ready too. (The simulation found it: a node back after its
// fence renews, loses power, and the view stalls while the untaint write
// is refused; when writes work again the stale view untaints it.)
func TestRemoveTaintNeedsTheServersReady(t *testing.T) {
	for _, tt := range []struct {
		name      string
		cond      nodeOpt
		wantTaint bool
	}{
		{"Ready on the server: removed", ready(at(0)), false},
		{"Unknown on the server: kept", readyUnknown(at(0)), true},
		{"NotReady on the server: kept", notReady(at(0)), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, node("w1", withTaint(oos), ownedByUs(), withState(token), tt.cond))
			err := h.c.RemoveTaint(context.Background(), "w1", token)
			if got := HasOutOfServiceTaint(serverNode(t, h, "w1")); got != tt.wantTaint {
				t.Fatalf("RemoveTaint = %v; tainted after it: %v, want %v", err, got, tt.wantTaint)
			}
			if tt.wantTaint && (err == nil || !strings.Contains(err.Error(), "Ready")) {
				t.Errorf("RemoveTaint = %v, want an error that says the node is not Ready on the server", err)
			}
			if !tt.wantTaint && err != nil {
				t.Errorf("RemoveTaint = %v", err)
			}
		})
	}
}

func TestRemoveTaintIsIdempotent(t *testing.T) {
	h := newHarness(t, node("w1", withTaint(oos), ownedByUs(), withState(token), ready(at(0))))
	for range 3 {
		if err := h.c.RemoveTaint(context.Background(), "w1", token); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(patches(t, h.client.Actions())); got != 1 {
		t.Errorf("%d patches for three RemoveTaint calls, want 1", got)
	}
}

func TestDeleteTerminatingPods(t *testing.T) {
	h := newHarness(t, node("w1", withState(token), withTaint(oos), ownedByUs()),
		pod("db", "db-0", "w1", terminating(at(0))),
		pod("db", "web-0", "w1", terminating(at(0))),
		pod("db", "db-1", "w1"),                     // running: not ours to delete
		pod("db", "db-2", "w2", terminating(at(0))), // another node
		pod("db", "vanished", "w1", terminating(at(0))),
	)
	h.client.PrependReactor("delete", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.DeleteAction).GetName() == "vanished" {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "vanished")
		}
		return false, nil, nil
	})
	n, err := h.c.DeleteTerminatingPods(context.Background(), "w1", token)
	if err != nil || n != 2 {
		t.Fatalf("DeleteTerminatingPods = %d, %v; want 2, nil", n, err)
	}
	type del struct {
		Name  string
		Grace int64
		UID   string
	}
	var got []del
	for _, a := range h.client.Actions() {
		d, ok := a.(clienttesting.DeleteAction)
		if !ok {
			continue
		}
		o := d.GetDeleteOptions()
		var uid string
		if o.Preconditions != nil && o.Preconditions.UID != nil {
			uid = string(*o.Preconditions.UID)
		}
		got = append(got, del{d.GetName(), ptr.Deref(o.GracePeriodSeconds, -1), uid})
	}
	// The API server lists by namespace/name.
	want := []del{{"db-0", 0, "uid-db-db-0"}, {"vanished", 0, "uid-db-vanished"}, {"web-0", 0, "uid-db-web-0"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deletes (-want +got):\n%s", diff)
	}
}

func TestDeleteTerminatingPodsReportsFailures(t *testing.T) {
	h := newHarness(t, node("w1", withState(token), withTaint(oos), ownedByUs()), pod("db", "a", "w1", terminating(at(0))), pod("db", "b", "w1", terminating(at(0))))
	h.client.PrependReactor("delete", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.DeleteAction).GetName() == "a" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "a", errors.New("no"))
		}
		return false, nil, nil
	})
	n, err := h.c.DeleteTerminatingPods(context.Background(), "w1", token)
	if n != 1 || !apierrors.IsForbidden(err) {
		t.Errorf("DeleteTerminatingPods = %d, %v; want 1 and the Forbidden error", n, err)
	}
}

func TestRecheckAsksTheServer(t *testing.T) {
	tests := []struct {
		name   string
		cached []runtime.Object // what our informers delivered
		server []runtime.Object // what the API server holds now
		want   runner.Recheck
	}{{
		name:   "nothing new on the server",
		cached: []runtime.Object{node("w1", readyUnknown(at(0))), lease("w1", at(0))},
		server: []runtime.Object{node("w1", readyUnknown(at(0))), lease("w1", at(0))},
		want:   runner.Recheck{},
	}, {
		name:   "a lease renewal the cache has not delivered",
		cached: []runtime.Object{node("w1", readyUnknown(at(0))), lease("w1", at(0))},
		server: []runtime.Object{node("w1", readyUnknown(at(0))), lease("w1", at(10*time.Second))},
		want:   runner.Recheck{LeaseRenewed: true},
	}, {
		name:   "a renewal with an older timestamp is still a renewal",
		cached: []runtime.Object{node("w1", readyUnknown(at(0))), lease("w1", at(0))},
		server: []runtime.Object{node("w1", readyUnknown(at(0))), lease("w1", at(-time.Hour))},
		want:   runner.Recheck{LeaseRenewed: true},
	}, {
		name:   "a Ready heartbeat the cache has not delivered",
		cached: []runtime.Object{node("w1", readyUnknown(at(0))), lease("w1", at(0))},
		server: []runtime.Object{node("w1", ready(at(30*time.Second))), lease("w1", at(0))},
		want:   runner.Recheck{LeaseRenewed: true},
	}, {
		name:   "maintenance and exclusion as the server has them",
		cached: []runtime.Object{node("w1", readyUnknown(at(0))), lease("w1", at(0))},
		server: []runtime.Object{node("w1", readyUnknown(at(0)), withAnnotation(AnnotationMaintenance, "x"), withLabel(LabelExclude, "true")), lease("w1", at(0))},
		want:   runner.Recheck{Maintenance: true, Excluded: true},
	}, {
		name:   "no lease at all",
		cached: []runtime.Object{node("w1", readyUnknown(at(0)))},
		server: []runtime.Object{node("w1", readyUnknown(at(0)))},
		want:   runner.Recheck{LeaseMissing: true},
	}, {
		name:   "a node we never observed counts as alive",
		server: []runtime.Object{node("w1", readyUnknown(at(0))), lease("w1", at(0))},
		want:   runner.Recheck{LeaseRenewed: true},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.server...)
			h.deliver(tt.cached...)
			got, err := h.c.Recheck(context.Background(), "w1")
			if err != nil {
				t.Fatal(err)
			}
			// Our view's own times: TestAHeartbeatTheStatePersistTookInStopsTheForceOff.
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(runner.Recheck{}, "HeartbeatAt", "RenewedAt")); diff != "" {
				t.Errorf("Recheck (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOwnWritesAreVisibleAtOnce: the runner re-reads the view right after
// each action; it must see its own taint and its own acknowledgement before
// the informer delivers them, and a late event from before the write must
// not roll the view back.
func TestOwnWritesAreVisibleAtOnce(t *testing.T) {
	h := newHarness(t, node("w1", rv("5"), withState("S1")))
	h.deliver(node("w1", rv("5"), withState("S1")))
	h.c.SetRequest("w1", "r1", fence.Command{Kind: fence.CmdFence, User: "alice", SeenAt: at(0)})
	ctx := context.Background()

	if err := h.c.SaveState(ctx, "w1", "S1", "S2", "r1"); err != nil {
		t.Fatal(err)
	}
	if err := h.c.ApplyTaint(ctx, "w1", "S2"); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		State   string
		Command *fence.Command
		Taint   fence.TaintState
	}
	look := func() seen {
		info := h.view("w1")
		return seen{info.State, info.Command, info.View.Taint}
	}
	want := seen{State: "S2", Taint: fence.TaintOurs}
	if diff := cmp.Diff(want, look()); diff != "" {
		t.Fatalf("right after our writes (-want +got):\n%s", diff)
	}

	// An event from before our writes arrives late.
	h.deliver(node("w1", rv("4"), withState("S1")))
	if diff := cmp.Diff(want, look()); diff != "" {
		t.Errorf("after a late, older event (-want +got):\n%s", diff)
	}
	// The informer catches up, then someone removes the taint.
	h.deliver(node("w1", rv("6"), withState("S2"), withTaint(oos), ownedByUs()))
	h.deliver(node("w1", rv("7"), withState("S2")))
	if diff := cmp.Diff(seen{State: "S2", Taint: fence.TaintAbsent}, look()); diff != "" {
		t.Errorf("after the informer caught up (-want +got):\n%s", diff)
	}
}

func TestAdoptedNodeYieldsToTheInformerEventually(t *testing.T) {
	h := newHarness(t, node("w1", rv("abc"), withState(token))) // a server whose versions are not integers
	h.deliver(node("w1", rv("xyz"), withState(token)))
	if err := h.c.ApplyTaint(context.Background(), "w1", token); err != nil {
		t.Fatal(err)
	}
	h.deliver(node("w1", rv("def")))
	if got := h.view("w1").View.Taint; got != fence.TaintOurs {
		t.Fatalf("unprovable order, within adoptTTL: Taint = %v, want ours", got)
	}
	h.clock.Step(adoptTTL)
	h.deliver(node("w1", rv("ghi")))
	if got := h.view("w1").View.Taint; got != fence.TaintAbsent {
		t.Errorf("after adoptTTL: Taint = %v, want the informer's (absent)", got)
	}
}

// preconditionReactor answers a node patch whose resourceVersion
// precondition no longer holds with 409, as the API server does (the fake
// tracker does not check it).
func preconditionReactor(h *harness) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	h.client.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		pa := a.(clienttesting.PatchAction)
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &body); err != nil {
			return true, nil, err
		}
		obj, err := h.client.Tracker().Get(gvr, "", pa.GetName())
		if err != nil {
			return true, nil, err
		}
		cur := obj.(*corev1.Node)
		if rv := body.Metadata.ResourceVersion; rv != "" && rv != cur.ResourceVersion {
			return true, nil, apierrors.NewConflict(nodesResource, cur.Name, errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
}

// bumpVersion stands for another writer: the server's node changes (a
// status update) and gets a new resourceVersion.
func bumpVersion(t *testing.T, h *harness, name, rv string, change func(*corev1.Node)) {
	t.Helper()
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	obj, err := h.client.Tracker().Get(gvr, "", name)
	if err != nil {
		t.Fatal(err)
	}
	n := obj.(*corev1.Node).DeepCopy()
	change(n)
	n.ResourceVersion = rv
	if err := h.client.Tracker().Update(gvr, n, ""); err != nil {
		t.Fatal(err)
	}
}

// Issue 19 at 1000 × 30: each guarded write read the node before its
// patch, a round trip of 1 to 2.5 s under load, four times on a fence's
// way to its taint. A write now checks the node as the server last
// answered us and patches with its resourceVersion: a node changed since
// fails the precondition, and the write reads it and tries again.
func TestAGuardedWriteChecksTheNodeTheServerLastAnswered(t *testing.T) {
	ctx := context.Background()
	// writtenOnce: node w1 whose state we wrote once, S1 → S2.
	writtenOnce := func(t *testing.T) *harness {
		t.Helper()
		h := newHarness(t, node("w1", withState("S1")))
		preconditionReactor(h)
		if err := h.c.SaveState(ctx, "w1", "S1", "S2", ""); err != nil {
			t.Fatal(err)
		}
		return h
	}

	t.Run("a second state write patches at once", func(t *testing.T) {
		h := writtenOnce(t)
		if err := h.c.SaveState(ctx, "w1", "S2", "S3", ""); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"get", "patch", "patch"}, nodeVerbs(h.client.Actions())); diff != "" {
			t.Errorf("node actions (-want +got):\n%s", diff)
		}
		if got := serverNode(t, h, "w1").Annotations[AnnotationState]; got != "S3" {
			t.Errorf("state %q, want S3", got)
		}
	})

	t.Run("a node changed since: 409, read, write", func(t *testing.T) {
		h := writtenOnce(t)
		bumpVersion(t, h, "w1", "77", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
		})
		if err := h.c.SaveState(ctx, "w1", "S2", "S3", ""); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"get", "patch", "patch", "get", "patch"}, nodeVerbs(h.client.Actions())); diff != "" {
			t.Errorf("node actions (-want +got):\n%s", diff)
		}
	})

	t.Run("another agent's state since: 409, read, conflict", func(t *testing.T) {
		h := writtenOnce(t)
		bumpVersion(t, h, "w1", "78", func(n *corev1.Node) { n.Annotations[AnnotationState] = "theirs" })
		if err := h.c.SaveState(ctx, "w1", "S2", "S3", ""); !errors.Is(err, runner.ErrConflict) {
			t.Fatalf("SaveState = %v, want ErrConflict", err)
		}
		if got := serverNode(t, h, "w1").Annotations[AnnotationState]; got != "theirs" {
			t.Errorf("state %q, want theirs kept", got)
		}
	})

	t.Run("the taint after the recheck patches at once", func(t *testing.T) {
		h := newHarness(t, node("w1", withState("S1")))
		preconditionReactor(h)
		if _, err := h.c.Recheck(ctx, "w1"); err != nil {
			t.Fatal(err)
		}
		if err := h.c.ApplyTaint(ctx, "w1", "S1"); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"get", "patch"}, nodeVerbs(h.client.Actions())); diff != "" {
			t.Errorf("node actions (-want +got):\n%s", diff)
		}
		if !HasOutOfServiceTaint(serverNode(t, h, "w1")) {
			t.Error("no taint on the server")
		}
	})

	t.Run("nothing to write on a served node: decided again on a read", func(t *testing.T) {
		// The served node has our taint; someone removed it since. A
		// no-op decided on the served node would leave the node without
		// the taint the engine then counts on.
		h := newHarness(t, node("w1", withState("S1")))
		preconditionReactor(h)
		if err := h.c.ApplyTaint(ctx, "w1", "S1"); err != nil {
			t.Fatal(err)
		}
		bumpVersion(t, h, "w1", "79", func(n *corev1.Node) { n.Spec.Taints = nil })
		if err := h.c.ApplyTaint(ctx, "w1", "S1"); err != nil {
			t.Fatal(err)
		}
		if !HasOutOfServiceTaint(serverNode(t, h, "w1")) {
			t.Error("the taint removed since was not applied again")
		}
	})
}

// Found in review: at servedKeep nodes remembered, a newer answer for a
// node already remembered was dropped, and each of its writes met a 409.
// And a slow answer coming after a newer one must not replace it.
func TestTheServedNodeIsTheNewestAnswer(t *testing.T) {
	h := newHarness(t)
	at := func(name, rv string) *corev1.Node {
		n := node(name)
		n.ResourceVersion = rv
		return n
	}
	for i := range servedKeep {
		h.c.serve(at(fmt.Sprintf("n%03d", i), "10"))
	}
	h.c.serve(at("n007", "12"))
	if got := h.c.servedNode("n007"); got == nil || got.ResourceVersion != "12" {
		t.Fatalf("served n007 = %v, want resourceVersion 12", got)
	}
	h.c.serve(at("n007", "11"))
	if got := h.c.servedNode("n007"); got.ResourceVersion != "12" {
		t.Errorf("a slower, older answer replaced the newer: resourceVersion %s", got.ResourceVersion)
	}
	h.c.serve(at("new", "5"))
	if h.c.servedNode("new") == nil || len(h.c.served) > servedKeep {
		t.Errorf("a new node past the bound: served %v, %d remembered (bound %d)", h.c.servedNode("new") != nil, len(h.c.served), servedKeep)
	}
	h.clock.Step(servedTTL)
	if h.c.servedNode("n007") != nil {
		t.Error("an answer servedTTL old is still used")
	}
}
