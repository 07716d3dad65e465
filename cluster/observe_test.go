package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/fence"
)

// event is one thing an informer delivers at a moment of our clock.
type event struct {
	at     time.Duration // our clock, from t0
	obj    runtime.Object
	delete bool
}

// liveness is the part of the view the observation builder stamps.
type liveness struct {
	Ready         fence.Readiness
	NotReadySince time.Time
	HeartbeatAt   time.Time
	RenewedAt     time.Time
}

func TestObservationStampsOurClock(t *testing.T) {
	tests := []struct {
		name   string
		events []event
		want   liveness
	}{{
		name: "first sighting counts for silence but is no renewal, whatever old times the node wrote",
		events: []event{
			{at: 5 * time.Minute, obj: node("w1", ready(at(-time.Hour)))},
			{at: 5 * time.Minute, obj: lease("w1", at(-time.Hour))},
		},
		want: liveness{Ready: fence.ReadyTrue, HeartbeatAt: at(5 * time.Minute)},
	}, {
		name: "a lease seen before its node starts the clock",
		events: []event{
			{at: 0, obj: lease("w1", at(0))},
			{at: 3 * time.Second, obj: node("w1", ready(at(0)))},
		},
		// The node's first Ready heartbeat value is news too.
		want: liveness{Ready: fence.ReadyTrue, HeartbeatAt: at(3 * time.Second)},
	}, {
		name: "a lease renewal is stamped when we observe it, not with its renewTime",
		events: []event{
			{at: 0, obj: node("w1", ready(at(0)))},
			{at: 0, obj: lease("w1", at(0))},
			{at: 12 * time.Second, obj: lease("w1", at(time.Hour))}, // node clock an hour ahead
		},
		want: liveness{Ready: fence.ReadyTrue, HeartbeatAt: at(12 * time.Second), RenewedAt: at(12 * time.Second)},
	}, {
		name: "a renewal with an earlier timestamp still counts: a rebooted node's clock may lag",
		events: []event{
			{at: 0, obj: node("w1", ready(at(0)))},
			{at: 0, obj: lease("w1", at(0))},
			{at: 20 * time.Second, obj: lease("w1", at(-10*time.Minute))},
		},
		want: liveness{Ready: fence.ReadyTrue, HeartbeatAt: at(20 * time.Second), RenewedAt: at(20 * time.Second)},
	}, {
		name: "a lease event without a new renewTime is no sign of life",
		events: []event{
			{at: 0, obj: node("w1", ready(at(0)))},
			{at: 0, obj: lease("w1", at(0))},
			{at: 30 * time.Second, obj: withRV(lease("w1", at(0)), "99")},
		},
		want: liveness{Ready: fence.ReadyTrue, HeartbeatAt: at(0)},
	}, {
		name: "a Ready heartbeat change counts like a renewal",
		events: []event{
			{at: 0, obj: node("w1", ready(at(0)))},
			{at: 40 * time.Second, obj: node("w1", ready(at(40*time.Second)), rv("2"))},
		},
		want: liveness{Ready: fence.ReadyTrue, HeartbeatAt: at(40 * time.Second), RenewedAt: at(40 * time.Second)},
	}, {
		name: "the node controller marking a silent node Unknown is no heartbeat",
		events: []event{
			{at: 0, obj: node("w1", ready(at(0)))},
			{at: 0, obj: lease("w1", at(0))},
			{at: 50 * time.Second, obj: node("w1", readyUnknown(at(0)), rv("2"))},
		},
		want: liveness{Ready: fence.ReadyUnknown, NotReadySince: at(50 * time.Second), HeartbeatAt: at(0)},
	}, {
		name: "a deleted lease is no sign of life, nor is the same renewal re-created",
		events: []event{
			{at: 0, obj: node("w1", ready(at(0)))},
			{at: 0, obj: lease("w1", at(0))},
			{at: 10 * time.Second, obj: lease("w1", at(0)), delete: true},
			{at: 20 * time.Second, obj: lease("w1", at(0))},
		},
		want: liveness{Ready: fence.ReadyTrue, HeartbeatAt: at(0)},
	}, {
		name: "a re-created lease with a new renewal is a heartbeat (kubelet restarted)",
		events: []event{
			{at: 0, obj: node("w1", ready(at(0)))},
			{at: 0, obj: lease("w1", at(0))},
			{at: 10 * time.Second, obj: lease("w1", at(0)), delete: true},
			{at: 25 * time.Second, obj: lease("w1", at(25*time.Second))},
		},
		want: liveness{Ready: fence.ReadyTrue, HeartbeatAt: at(25 * time.Second), RenewedAt: at(25 * time.Second)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			for _, ev := range tt.events {
				h.clock.SetTime(at(ev.at))
				if ev.delete {
					h.remove(ev.obj)
				} else {
					h.deliver(ev.obj)
				}
			}
			v := h.view("w1").View
			got := liveness{Ready: v.Ready, NotReadySince: v.NotReadySince, HeartbeatAt: v.HeartbeatAt, RenewedAt: v.RenewedAt}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("view (-want +got):\n%s", diff)
			}
		})
	}
}

func withRV(l *coordinationv1.Lease, v string) *coordinationv1.Lease {
	l.ResourceVersion = v
	return l
}

func TestNotReadySinceIsWhenWeSawReadyLeaveTrue(t *testing.T) {
	tests := []struct {
		name   string
		events []event
		want   liveness
	}{{
		name:   "first seen not ready: since first sight",
		events: []event{{at: 7 * time.Second, obj: node("w1", notReady(at(-time.Hour)))}},
		want:   liveness{Ready: fence.ReadyFalse, NotReadySince: at(7 * time.Second), HeartbeatAt: at(7 * time.Second)},
	}, {
		name:   "no Ready condition reads Unknown",
		events: []event{{at: 0, obj: node("w1")}},
		want:   liveness{Ready: fence.ReadyUnknown, NotReadySince: at(0), HeartbeatAt: at(0)},
	}, {
		name: "True → Unknown → False keeps the first transition",
		events: []event{
			{at: 0, obj: node("w1", ready(at(0)))},
			{at: 50 * time.Second, obj: node("w1", readyUnknown(at(0)), rv("2"))},
			{at: 70 * time.Second, obj: node("w1", notReady(at(0)), rv("3"))},
		},
		want: liveness{Ready: fence.ReadyFalse, NotReadySince: at(50 * time.Second), HeartbeatAt: at(0)},
	}, {
		name: "back to Ready clears it",
		events: []event{
			{at: 0, obj: node("w1", ready(at(0)))},
			{at: 50 * time.Second, obj: node("w1", readyUnknown(at(0)), rv("2"))},
			{at: 90 * time.Second, obj: node("w1", ready(at(89*time.Second)), rv("3"))},
		},
		want: liveness{Ready: fence.ReadyTrue, HeartbeatAt: at(90 * time.Second), RenewedAt: at(90 * time.Second)},
	}, {
		name: "an unrelated node update does not move it",
		events: []event{
			{at: 0, obj: node("w1", ready(at(0)))},
			{at: 50 * time.Second, obj: node("w1", readyUnknown(at(0)), rv("2"))},
			{at: 60 * time.Second, obj: node("w1", readyUnknown(at(0)), withState("x"), rv("3"))},
		},
		want: liveness{Ready: fence.ReadyUnknown, NotReadySince: at(50 * time.Second), HeartbeatAt: at(0)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			for _, ev := range tt.events {
				h.clock.SetTime(at(ev.at))
				h.deliver(ev.obj)
			}
			v := h.view("w1").View
			got := liveness{Ready: v.Ready, NotReadySince: v.NotReadySince, HeartbeatAt: v.HeartbeatAt, RenewedAt: v.RenewedAt}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("view (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWorkOnTheNode(t *testing.T) {
	type counts struct {
		Pods, VolumeAttachments int
		Blockers                []string
	}
	tests := []struct {
		name string
		objs []runtime.Object
		want counts
	}{{
		name: "nothing bound: nothing blocks",
		want: counts{},
	}, {
		name: "running, pending and terminating pods count; finished ones do not",
		objs: []runtime.Object{
			pod("db", "db-0", "w1"),
			pod("db", "db-1", "w1", phase(corev1.PodPending)),
			pod("db", "db-2", "w1", terminating(at(0))),
			pod("batch", "done", "w1", phase(corev1.PodSucceeded)),
			pod("batch", "crashed", "w1", phase(corev1.PodFailed)),
		},
		want: counts{Pods: 3, Blockers: []string{"pod db/db-0", "pod db/db-1", "pod db/db-2"}},
	}, {
		name: "pods and VolumeAttachments of other nodes do not count",
		objs: []runtime.Object{pod("db", "db-0", "w2"), va("csi-1", "w2", "pv-1")},
		want: counts{},
	}, {
		name: "DaemonSet and mirror pods belong to the node (like kubectl drain)",
		objs: []runtime.Object{
			pod("kube-system", "kube-proxy-x", "w1", ownedByDaemonSet(), toleratingEverything()),
			pod("kube-system", "etcd-w1", "w1", mirror()),
		},
		want: counts{},
	}, {
		name: "pods the taint will not evict first, then other pods, then volumes; five at most",
		objs: []runtime.Object{
			va("csi-b", "w1", "pv-b"),
			va("csi-a", "w1", ""),
			pod("z", "plain", "w1"),
			pod("a", "plain", "w1"),
			pod("m", "stubborn", "w1", toleratingOutOfService()),
			pod("b", "operator", "w1", toleratingEverything()),
		},
		want: counts{Pods: 4, VolumeAttachments: 2, Blockers: []string{
			"pod b/operator tolerates the out-of-service taint",
			"pod m/stubborn tolerates the out-of-service taint",
			"pod a/plain",
			"pod z/plain",
			"VolumeAttachment csi-a (inline volume)",
		}},
	}, {
		name: "a VolumeAttachment names its PV",
		objs: []runtime.Object{va("csi-1", "w1", "pv-1")},
		want: counts{VolumeAttachments: 1, Blockers: []string{"VolumeAttachment csi-1 (PV pv-1)"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.deliver(node("w1", ready(at(0))), node("w2", ready(at(0))))
			h.deliver(tt.objs...)
			v := h.view("w1").View
			got := counts{Pods: v.Pods, VolumeAttachments: v.VolumeAttachments, Blockers: v.Blockers}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("work on w1 (-want +got):\n%s", diff)
			}
		})
	}
}

func TestViewFollowsPodsAndVolumesLeaving(t *testing.T) {
	h := newHarness(t)
	h.deliver(node("w1", ready(at(0))))
	p, v := pod("db", "db-0", "w1"), va("csi-1", "w1", "pv-1")
	h.deliver(p, v)
	if got := h.view("w1").View; got.Pods != 1 || got.VolumeAttachments != 1 {
		t.Fatalf("before: pods=%d vas=%d, want 1 and 1", got.Pods, got.VolumeAttachments)
	}
	h.changed()

	h.remove(p)
	h.remove(v)
	got := h.view("w1").View
	if got.Pods != 0 || got.VolumeAttachments != 0 || got.Blockers != nil {
		t.Errorf("after: pods=%d vas=%d blockers=%q, want none", got.Pods, got.VolumeAttachments, got.Blockers)
	}
	if diff := cmp.Diff([]string{"w1", "w1"}, h.changed()); diff != "" {
		t.Errorf("Changed() (-want +got):\n%s", diff)
	}
}

func TestTaintOwnership(t *testing.T) {
	tests := []struct {
		name string
		node *corev1.Node
		want fence.TaintState
	}{
		{"no taint", node("w1"), fence.TaintAbsent},
		{"our taint with our annotation", node("w1", withTaint(oos), ownedByUs()), fence.TaintOurs},
		{"the taint without our annotation is foreign", node("w1", withTaint(oos)), fence.TaintForeign},
		{"another effect with the key is foreign even with our annotation", node("w1", withTaint(foreign(corev1.TaintEffectNoSchedule)), ownedByUs()), fence.TaintForeign},
		{"our annotation alone is no taint", node("w1", ownedByUs()), fence.TaintAbsent},
		{"other taints do not count", node("w1", withTaint(otherTaint)), fence.TaintAbsent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.deliver(tt.node)
			if got := h.view("w1").View.Taint; got != tt.want {
				t.Errorf("Taint = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNodeMetadataInTheView(t *testing.T) {
	h := newHarness(t)
	h.deliver(
		node("w1", withAnnotation(AnnotationMaintenance, `{"by":"ops"}`), withLabel(LabelZone, "z1"), withState("S1")),
		node("w2", withLabel(LabelExclude, "true")),
		node("w3", withLabel(LabelExclude, "false"), withAnnotation(AnnotationMaintenance, "")),
	)
	type meta struct {
		Zone, State           string
		Maintenance, Excluded bool
	}
	var got []meta
	for _, n := range h.c.Nodes() {
		got = append(got, meta{n.Zone, n.State, n.View.Maintenance, n.View.Excluded})
	}
	want := []meta{
		{Zone: "z1", State: "S1", Maintenance: true},
		{Excluded: true},
		{},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Nodes() (-want +got):\n%s", diff)
	}
}

func TestNodesAreSortedAndDeletedNodesGone(t *testing.T) {
	h := newHarness(t)
	h.deliver(node("w3"), node("w1"), node("w2"), lease("orphan", at(0)))
	h.remove(node("w2"))
	var names []string
	for _, n := range h.c.Nodes() {
		names = append(names, n.Name)
	}
	if diff := cmp.Diff([]string{"w1", "w3"}, names); diff != "" {
		t.Errorf("Nodes() (-want +got):\n%s", diff)
	}
	if _, ok := h.c.Node("w2"); ok {
		t.Error("Node(w2) found after deletion")
	}
	if _, ok := h.c.Node("orphan"); ok {
		t.Error("Node(orphan) found: a Lease alone is not a node")
	}
}

// Node-patch rights alone trigger nothing: a request annotation (the
// channel of an old kubectl-fence) never reaches the engine, and the agent
// says so once per value.
func TestRequestAnnotationIsNeverActedOn(t *testing.T) {
	valid := Request{ID: "r1", Kind: fence.CmdConfirm, User: "alice", Reason: "pulled the plug", At: at(0)}
	h := newHarness(t, node("w1"))
	for i := range 3 {
		h.deliver(node("w1", withRequest(t, valid), rv(fmt.Sprint(2+i))))
	}
	if info := h.view("w1"); info.Command != nil || info.CommandID != "" {
		t.Errorf("Command = %+v, CommandID = %q; want none", info.Command, info.CommandID)
	}
	flush(t, h.c)
	if got := reasons(h.client.Actions()); !cmp.Equal(got, []string{"Warning/FenceRequestInvalid"}) {
		t.Errorf("Events = %q, want exactly one Warning/FenceRequestInvalid", got)
	}
}

// An authenticated request (SetRequest) is offered until the state write
// that takes it in; a newer one replaces it; a withdrawn one goes.
func TestSetRequest(t *testing.T) {
	h := newHarness(t, node("w1", rv("5"), withState("S1")))
	h.deliver(node("w1", rv("5"), withState("S1")))
	var taken []string
	h.c.OnRequestTaken(func(node, id string) { taken = append(taken, node+"/"+id) })
	confirm := fence.Command{Kind: fence.CmdConfirm, User: "alice", SeenAt: h.clock.Now()}
	abort := fence.Command{Kind: fence.CmdAbort, User: "bob", SeenAt: h.clock.Now()}
	h.c.SetRequest("w1", "r1", confirm)
	h.c.SetRequest("w1", "r2", abort)
	if info := h.view("w1"); info.CommandID != "r2" || !cmp.Equal(info.Command, &abort) {
		t.Fatalf("Command = %+v (%q), want the newer request r2", info.Command, info.CommandID)
	}
	h.c.WithdrawRequest("w1", "r1") // not the pending one: nothing changes
	if info := h.view("w1"); info.CommandID != "r2" {
		t.Fatalf("CommandID = %q after withdrawing r1, want r2", info.CommandID)
	}
	if err := h.c.SaveState(context.Background(), "w1", "S1", "S2", "r2"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"w1/r2"}, taken); diff != "" {
		t.Errorf("taken (-want +got):\n%s", diff)
	}
	if info := h.view("w1"); info.Command != nil {
		t.Errorf("Command = %+v after it was taken, want none", info.Command)
	}
	h.c.SetRequest("w1", "r3", confirm)
	h.c.WithdrawRequest("w1", "r3")
	if info := h.view("w1"); info.Command != nil {
		t.Errorf("Command = %+v after withdrawal, want none", info.Command)
	}
}

// Issue 17, defect 4: a request offered with the admission guard's check
// (OfferRequest) is seen by the runner only while the check passes, and the
// state write that would take it in asks the check again, right before the
// write: a request the guard stopped vouching for in between is not taken,
// and nothing is written.
func TestOfferedRequestIsTakenOnlyWhileVouchedFor(t *testing.T) {
	h := newHarness(t, node("w1", rv("5"), withState("S1")))
	h.deliver(node("w1", rv("5"), withState("S1")))
	var taken []string
	h.c.OnRequestTaken(func(node, id string) { taken = append(taken, node+"/"+id) })
	var vouch error
	confirm := fence.Command{Kind: fence.CmdConfirm, User: "alice", SeenAt: h.clock.Now()}
	h.c.OfferRequest("w1", "r1", confirm, func() error { return vouch })
	if info := h.view("w1"); info.CommandID != "r1" {
		t.Fatalf("a vouched-for request is not offered: %+v", info)
	}
	vouch = errors.New("the admission policy was deleted")
	if info := h.view("w1"); info.Command != nil {
		t.Errorf("offered while the guard refuses it: %+v", info.Command)
	}
	err := h.c.SaveState(context.Background(), "w1", "S1", "S2", "r1")
	if !errors.Is(err, ErrRequestNotVouched) {
		t.Fatalf("SaveState taking it in = %v, want %v", err, ErrRequestNotVouched)
	}
	if n, err := h.client.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{}); err != nil || n.Annotations[AnnotationState] != "S1" || len(taken) != 0 {
		t.Errorf("state %v (%v), taken %v: want nothing written, nothing taken", n.Annotations, err, taken)
	}
	vouch = nil
	if err := h.c.SaveState(context.Background(), "w1", "S1", "S2", "r1"); err != nil || len(taken) != 1 {
		t.Errorf("SaveState once vouched for again = %v, taken %v", err, taken)
	}
}

// A request refused or withdrawn while the runner's state write that would
// take it in was on its way (the runner read the node while the guard still
// vouched) is not taken: the take needs the request still pending, with its
// check passing, right before the write.
func TestRefusedAndWithdrawnRequestIsNotTakenByALateStateWrite(t *testing.T) {
	h := newHarness(t, node("w1", rv("5"), withState("S1")))
	h.deliver(node("w1", rv("5"), withState("S1")))
	var vouch error
	confirm := fence.Command{Kind: fence.CmdConfirm, User: "alice", SeenAt: h.clock.Now()}
	h.c.OfferRequest("w1", "r1", confirm, func() error { return vouch })
	if info := h.view("w1"); info.CommandID != "r1" {
		t.Fatalf("not offered: %+v", info)
	}
	vouch = errors.New("the admission policy was deleted")
	h.c.WithdrawRequest("w1", "r1") // what the requests controller's refusal does
	err := h.c.SaveState(context.Background(), "w1", "S1", "S2", "r1")
	n, _ := h.client.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if !errors.Is(err, ErrRequestNotVouched) || n.Annotations[AnnotationRequestTaken] == "r1" || n.Annotations[AnnotationState] != "S1" {
		t.Fatalf("SaveState taking the refused, withdrawn r1 = %v; node annotations %v: want %v and nothing written", err, n.Annotations, ErrRequestNotVouched)
	}
}

// The check is asked right before every patch of the write, not once before
// its retries: a request the guard stops vouching for while the write
// retries after a 409 is not taken.
func TestRequestRefusedDuringA409RetryIsNotTaken(t *testing.T) {
	h := newHarness(t, node("w1", rv("5"), withState("S1")))
	h.deliver(node("w1", rv("5"), withState("S1")))
	var vouch error
	confirm := fence.Command{Kind: fence.CmdConfirm, User: "alice", SeenAt: h.clock.Now()}
	h.c.OfferRequest("w1", "r1", confirm, func() error { return vouch })
	raceOnFirstPatch(h, func(n *corev1.Node) {
		n.Labels = map[string]string{"status": "written"}
		vouch = errors.New("the admission policy was deleted")
	})
	err := h.c.SaveState(context.Background(), "w1", "S1", "S2", "r1")
	n, _ := h.client.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if !errors.Is(err, ErrRequestNotVouched) || n.Annotations[AnnotationRequestTaken] == "r1" {
		t.Fatalf("SaveState = %v; node annotations %v: taken in after the guard stopped vouching (during the 409 retry)", err, n.Annotations)
	}
}

func TestChangedNotifiesWithoutBlocking(t *testing.T) {
	h := newHarness(t)
	h.deliver(node("w1", ready(at(0))), lease("w1", at(0)))
	h.changed()

	h.deliver(withRV(lease("w1", at(0)), "7")) // no new renewal
	h.deliver(pod("db", "db-0", "w1"))
	h.deliver(lease("w1", at(10*time.Second)))
	if diff := cmp.Diff([]string{"w1", "w1"}, h.changed()); diff != "" {
		t.Errorf("Changed() (-want +got):\n%s", diff)
	}

	// Nobody reads: the handlers must not block, the buffer just fills.
	for i := range changedBuffer + 100 {
		h.deliver(node("w1", ready(at(0)), rv(fmt.Sprint(10+i))))
	}
	if got := len(h.changed()); got != changedBuffer {
		t.Errorf("buffered %d names, want %d (the rest dropped)", got, changedBuffer)
	}
}

func TestPodStatusChurnDoesNotNotify(t *testing.T) {
	h := newHarness(t)
	h.deliver(node("w1"))
	p := pod("db", "db-0", "w1")
	h.deliver(p)
	h.changed()
	churn := p.DeepCopy()
	churn.ResourceVersion = "2"
	churn.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	h.deliver(churn)
	if got := h.changed(); len(got) != 0 {
		t.Errorf("Changed() = %q after a status-only update, want nothing", got)
	}
	gone := churn.DeepCopy()
	gone.ResourceVersion = "3"
	gone.DeletionTimestamp = ptr.To(metav1.NewTime(at(0)))
	h.deliver(gone)
	if diff := cmp.Diff([]string{"w1"}, h.changed()); diff != "" {
		t.Errorf("Changed() after deletion started (-want +got):\n%s", diff)
	}
}

// Only a list of the Leases proves the view fresh (TestALeaseListStampsItsStart):
// no object taken in does, a Lease renewal included.
func TestAPIFreshAtFollowsLeaseListsOnly(t *testing.T) {
	h := newHarness(t)
	for i, obj := range []runtime.Object{node("w1"), lease("w1", at(0)), pod("db", "db-0", "w1"), va("csi-1", "w1", "pv-1"), lease("w1", at(7*time.Second))} {
		h.clock.SetTime(at(time.Duration(i+1) * time.Second))
		h.deliver(obj)
		if got := h.c.APIFreshAt(); !got.IsZero() {
			t.Errorf("after %T: APIFreshAt = %v, want zero (no list yet)", obj, got)
		}
	}
	h.c.onLeaseList(at(10 * time.Second))
	h.c.onLeaseList(at(9 * time.Second)) // an older list finishing late
	if got := h.c.APIFreshAt(); !got.Equal(at(10 * time.Second)) {
		t.Errorf("APIFreshAt = %v, want the newest list's start +10s", got)
	}
}

func TestTransformsKeepWhatTheViewReads(t *testing.T) {
	p := pod("db", "db-0", "w1", terminating(at(0)), toleratingOutOfService(), ownedByDaemonSet())
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "x", Env: []corev1.EnvVar{{Name: "BIG", Value: "..."}}}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}}
	p.Annotations = map[string]string{"big": "annotation"}
	p.ResourceVersion = "42"
	slim, _ := summarizePod(p)
	again, _ := summarizePod(slim)
	want := &podSummary{namespace: "db", name: "db-0", resourceVersion: "42", nodeName: "w1", phase: corev1.PodRunning,
		deleting: true, ownedByNode: true, toleratesOutOfService: true}
	if diff := cmp.Diff(want, again, cmp.AllowUnexported(podSummary{})); diff != "" {
		t.Errorf("summarizePod (-want +got):\n%s", diff)
	}
	m, _ := summarizePod(pod("kube-system", "etcd-w1", "w1", mirror(), phase(corev1.PodPending)))
	if diff := cmp.Diff(&podSummary{namespace: "kube-system", name: "etcd-w1", resourceVersion: "1", nodeName: "w1", phase: corev1.PodPending, ownedByNode: true},
		m, cmp.AllowUnexported(podSummary{})); diff != "" {
		t.Errorf("summarizePod of a mirror pod (-want +got):\n%s", diff)
	}

	n := node("w1", ready(at(0)), withAnnotation(corev1.LastAppliedConfigAnnotation, "{}"), withAnnotation(AnnotationBMCAddress, "https://bmc"))
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"big/image"}}}
	n.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
	n.Status.VolumesInUse = []corev1.UniqueVolumeName{"kubernetes.io/csi/x^vol-1"}
	n.Status.VolumesAttached = []corev1.AttachedVolume{{Name: "kubernetes.io/csi/x^vol-1"}}
	n.Status.RuntimeHandlers = []corev1.NodeRuntimeHandler{{Name: "runc"}}
	n.Status.NodeInfo.SystemUUID = "4c4c4544-0001"
	slimN, _ := slimNode(n.DeepCopy())
	wantN := node("w1", ready(at(0)), withAnnotation(AnnotationBMCAddress, "https://bmc"))
	wantN.Status.NodeInfo.SystemUUID = "4c4c4544-0001"
	if diff := cmp.Diff(wantN, slimN); diff != "" {
		t.Errorf("slimNode (-want +got):\n%s", diff)
	}

	v := va("csi-1", "w1", "pv-1")
	v.Spec.Source.InlineVolumeSpec = &corev1.PersistentVolumeSpec{StorageClassName: "big"}
	slimV, _ := slimVolumeAttachment(v)
	if diff := cmp.Diff(va("csi-1", "w1", "pv-1"), slimV); diff != "" {
		t.Errorf("slimVolumeAttachment (-want +got):\n%s", diff)
	}

	l := lease("w1", at(0))
	l.Spec.LeaseDurationSeconds = new(int32)
	slimL, _ := slimLease(l)
	if diff := cmp.Diff(lease("w1", at(0)), slimL); diff != "" {
		t.Errorf("slimLease (-want +got):\n%s", diff)
	}

	tomb := struct{}{}
	for _, f := range []func(any) (any, error){slimNode, summarizePod, slimLease, slimVolumeAttachment} {
		if got, _ := f(tomb); got != tomb {
			t.Errorf("a transform changed a foreign object: %v", got)
		}
	}
}

// The state generation (cluster/history skips its pass while it stands)
// moves when a node comes, goes or changes its state annotation, and not on
// anything else a node or its Lease does at rest.
func TestStateGenerationMovesOnlyWithNodesAndTheirState(t *testing.T) {
	h := newHarness(t)
	steps := []struct {
		what  string
		do    func()
		moves bool
	}{
		{"a node appears", func() { h.deliver(node("w1", ready(at(0)))) }, true},
		{"its Lease renews", func() { h.deliver(lease("w1", at(10*time.Second))) }, false},
		{"its heartbeat and labels change", func() {
			n := node("w1", ready(at(20*time.Second)), rv("2"))
			n.Labels = map[string]string{"zone": "a"}
			h.deliver(n)
		}, false},
		{"its state annotation is written", func() {
			h.deliver(node("w1", ready(at(20*time.Second)), rv("3"), withAnnotation(AnnotationState, `{"phase":"Suspect"}`)))
		}, true},
		{"the same state comes again", func() {
			h.deliver(node("w1", ready(at(30*time.Second)), rv("4"), withAnnotation(AnnotationState, `{"phase":"Suspect"}`)))
		}, false},
		{"the node is deleted", func() { h.remove(node("w1", rv("4"))) }, true},
	}
	for _, s := range steps {
		before := h.c.StateGeneration()
		s.do()
		if moved := h.c.StateGeneration() != before; moved != s.moves {
			t.Errorf("%s: generation moved = %v, want %v", s.what, moved, s.moves)
		}
	}
}
