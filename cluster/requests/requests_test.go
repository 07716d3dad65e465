package requests

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/client/clientset/versioned/fake"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

type fakeCluster struct {
	nodes   map[string]bool
	offered map[string]fence.Command // node/id
	vouch   map[string]func() error  // node/id: the offer's check
	events  []fence.Event
	taken   func(node, id string)
}

func (f *fakeCluster) Node(name string) (runner.NodeInfo, bool) {
	return runner.NodeInfo{Name: name}, f.nodes[name]
}
func (f *fakeCluster) SetRequest(node, id string, cmd fence.Command) {
	f.OfferRequest(node, id, cmd, nil)
}
func (f *fakeCluster) OfferRequest(node, id string, cmd fence.Command, vouch func() error) {
	f.offered[node+"/"+id] = cmd
	f.vouch[node+"/"+id] = vouch
}
func (f *fakeCluster) WithdrawRequest(node, id string)        { delete(f.offered, node+"/"+id) }
func (f *fakeCluster) OnRequestTaken(h func(node, id string)) { f.taken = h }
func (f *fakeCluster) Event(_ string, ev fence.Event)         { f.events = append(f.events, ev) }

func request(name string, action v1alpha1.RequestAction) *v1alpha1.BMCFenceRequest {
	return &v1alpha1.BMCFenceRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0)},
		Spec:       v1alpha1.BMCFenceRequestSpec{NodeName: "w1", Action: action, RequestedBy: "alice", Reason: "pulled the plug"},
	}
}

type world struct {
	c       *Controller
	cluster *fakeCluster
	client  *fake.Clientset
	clock   *clocktesting.FakeClock
}

func newWorld(t *testing.T, guard Voucher, objs ...*v1alpha1.BMCFenceRequest) *world {
	t.Helper()
	client := fake.NewSimpleClientset()
	for _, o := range objs {
		if _, err := client.FencingV1alpha1().BMCFenceRequests().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	fc := &fakeCluster{nodes: map[string]bool{"w1": true}, offered: map[string]fence.Command{}, vouch: map[string]func() error{}}
	clk := clocktesting.NewFakeClock(t0)
	c, err := New(Options{Client: client.FencingV1alpha1(), Cluster: fc, Guard: guard, MaxRequestAge: 15 * time.Minute, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return &world{c: c, cluster: fc, client: client, clock: clk}
}

func (w *world) reconcile(t *testing.T, name string) *v1alpha1.BMCFenceRequest {
	t.Helper()
	ctx := context.Background()
	reqs := w.client.FencingV1alpha1().BMCFenceRequests()
	r, err := reqs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.c.Reconcile(ctx, r); err != nil {
		t.Fatal(err)
	}
	r, err = reqs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A request is offered to the engine with who asked (the admitted
// requestedBy) and when we first saw it; the state write that takes it in
// marks it Taken.
func TestRequestIsOfferedThenTaken(t *testing.T) {
	w := newWorld(t, nil, request("w1-confirm-1", v1alpha1.ActionConfirm))
	r := w.reconcile(t, "w1-confirm-1")
	if r.Status.Outcome != v1alpha1.OutcomePending || r.Status.SeenAt == nil || !r.Status.SeenAt.Time.Equal(t0) {
		t.Errorf("status = %+v, want Pending, seen at %s", r.Status, t0)
	}
	want := map[string]fence.Command{"w1/w1-confirm-1": {Kind: fence.CmdConfirm, User: "alice", Reason: "pulled the plug", SeenAt: t0}}
	if diff := cmp.Diff(want, w.cluster.offered); diff != "" {
		t.Fatalf("offered (-want +got):\n%s", diff)
	}
	w.cluster.taken("w1", "w1-confirm-1")
	if r := w.reconcile(t, "w1-confirm-1"); r.Status.Outcome != v1alpha1.OutcomeTaken {
		t.Errorf("outcome = %q after the engine took it, want Taken", r.Status.Outcome)
	}
}

// unvouched is a guard that refuses every request.
type unvouched struct{}

func (unvouched) Vouch(*v1alpha1.BMCFenceRequest, time.Time) error {
	return fmt.Errorf("%w: the binding is missing", ErrUnauthenticated)
}
func (unvouched) Confirm(context.Context) {}

// Requests expire maxRequestAge after we first saw them (fence and confirm;
// an abort only makes things safer), and are refused while the admission
// policy that vouches for requestedBy is not in force.
func TestRequestRefusals(t *testing.T) {
	unbound := unvouched{}
	tests := []struct {
		name        string
		action      v1alpha1.RequestAction
		node        string
		policy      Voucher
		age         time.Duration
		wantOutcome v1alpha1.RequestOutcome
	}{
		{"fresh fence", v1alpha1.ActionFence, "w1", nil, 15 * time.Minute, v1alpha1.OutcomePending},
		{"stale fence", v1alpha1.ActionFence, "w1", nil, 15*time.Minute + time.Second, v1alpha1.OutcomeExpired},
		{"stale confirm", v1alpha1.ActionConfirm, "w1", nil, time.Hour, v1alpha1.OutcomeExpired},
		{"old abort still counts", v1alpha1.ActionAbort, "w1", nil, time.Hour, v1alpha1.OutcomePending},
		{"no such node", v1alpha1.ActionFence, "w9", nil, 0, v1alpha1.OutcomeRefused},
		{"admission policy not bound", v1alpha1.ActionConfirm, "w1", unbound, 0, v1alpha1.OutcomeRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := request("req", tt.action)
			r.Spec.NodeName = tt.node
			w := newWorld(t, tt.policy, r)
			w.reconcile(t, "req") // first seen
			w.clock.Step(tt.age)
			got := w.reconcile(t, "req")
			if got.Status.Outcome != tt.wantOutcome {
				t.Errorf("outcome = %q (%s), want %q", got.Status.Outcome, got.Status.Message, tt.wantOutcome)
			}
			if tt.wantOutcome != v1alpha1.OutcomePending && len(w.cluster.offered) != 0 {
				t.Errorf("still offered to the engine: %v", w.cluster.offered)
			}
		})
	}
}

// A fence or confirm request another process saw first (a previous leader)
// is not taken: its age is on a clock we cannot compare with ours, and it
// may have been taken already. An abort still is.
func TestInheritedRequests(t *testing.T) {
	for _, tt := range []struct {
		action v1alpha1.RequestAction
		want   v1alpha1.RequestOutcome
	}{
		{v1alpha1.ActionFence, v1alpha1.OutcomeExpired},
		{v1alpha1.ActionConfirm, v1alpha1.OutcomeExpired},
		{v1alpha1.ActionAbort, v1alpha1.OutcomePending},
	} {
		t.Run(string(tt.action), func(t *testing.T) {
			r := request("req", tt.action)
			seen := metav1.NewTime(t0.Add(-time.Minute))
			r.Status = v1alpha1.BMCFenceRequestStatus{Outcome: v1alpha1.OutcomePending, SeenAt: &seen}
			w := newWorld(t, nil, r)
			if got := w.reconcile(t, "req"); got.Status.Outcome != tt.want {
				t.Errorf("outcome = %q (%s), want %q", got.Status.Outcome, got.Status.Message, tt.want)
			}
		})
	}
}

// A fence request created long before any agent saw it is not taken.
func TestRequestCreatedLongAgo(t *testing.T) {
	r := request("req", v1alpha1.ActionFence)
	r.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
	w := newWorld(t, nil, r)
	if got := w.reconcile(t, "req"); got.Status.Outcome != v1alpha1.OutcomeExpired {
		t.Errorf("outcome = %q (%s), want Expired", got.Status.Outcome, got.Status.Message)
	}
}

func TestCommandKind(t *testing.T) {
	if _, err := commandKind("reboot"); !errors.Is(err, ErrUnknownAction) {
		t.Errorf("commandKind(reboot) = %v, want ErrUnknownAction", err)
	}
}

// drain handles every node queued now (not those waiting out a backoff).
func drain(ctx context.Context, c *Controller) {
	for c.queue.Len() > 0 {
		c.ProcessNext(ctx)
	}
}

// countingGuard vouches for every request and counts the guard's calls.
type countingGuard struct{ vouches, confirms int }

func (g *countingGuard) Vouch(*v1alpha1.BMCFenceRequest, time.Time) error { g.vouches++; return nil }
func (g *countingGuard) Confirm(context.Context)                          { g.confirms++ }

// At rest (every request answered) a resync asks the API server nothing,
// not even for the admission policy. It used to read the policy's binding
// every 2 s.
func TestResyncAtRestAsksNothing(t *testing.T) {
	guard := &countingGuard{}
	done := request("old", v1alpha1.ActionFence)
	done.Status.Outcome = v1alpha1.OutcomeTaken
	w := newWorld(t, guard, done)
	t.Cleanup(w.c.queue.ShutDown)
	if err := w.c.informer.GetStore().Add(done); err != nil {
		t.Fatal(err)
	}
	w.client.ClearActions()
	ctx := context.Background()
	for range 10 {
		w.c.Resync()
		drain(ctx, w.c)
	}
	if guard.confirms != 0 || len(w.client.Actions()) != 0 {
		t.Errorf("10 resyncs at rest read the admission policy %d times and made %d requests, want none", guard.confirms, len(w.client.Actions()))
	}
}

// Through the work queue, a pending request is seen, the admission policy
// read again (Confirm), and the request refused when the guard does not
// vouch for it, or offered with the guard's vouch when it does: the engine
// takes it only while the guard still vouches for it.
func TestQueuedRequestsAskTheGuard(t *testing.T) {
	ctx := context.Background()
	t.Run("not vouched for: refused", func(t *testing.T) {
		w := newWorld(t, unvouched{}, request("r1", v1alpha1.ActionFence))
		t.Cleanup(w.c.queue.ShutDown)
		r, err := w.client.FencingV1alpha1().BMCFenceRequests().Get(ctx, "r1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.c.informer.GetStore().Add(r); err != nil {
			t.Fatal(err)
		}
		w.c.Resync()
		drain(ctx, w.c)
		got, err := w.client.FencingV1alpha1().BMCFenceRequests().Get(ctx, "r1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Outcome != v1alpha1.OutcomeRefused || len(w.cluster.offered) != 0 {
			t.Errorf("outcome = %q (%s), offered %v; want Refused, nothing offered", got.Status.Outcome, got.Status.Message, w.cluster.offered)
		}
	})
	t.Run("vouched for: offered with the vouch", func(t *testing.T) {
		guard := &countingGuard{}
		w := newWorld(t, guard, request("r1", v1alpha1.ActionFence))
		t.Cleanup(w.c.queue.ShutDown)
		r, err := w.client.FencingV1alpha1().BMCFenceRequests().Get(ctx, "r1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.c.informer.GetStore().Add(r); err != nil {
			t.Fatal(err)
		}
		w.c.Resync()
		drain(ctx, w.c)
		if guard.confirms != 1 {
			t.Errorf("the admission policy was read %d times for one pending request, want once", guard.confirms)
		}
		check := w.cluster.vouch["w1/r1"]
		if _, ok := w.cluster.offered["w1/r1"]; !ok || check == nil {
			t.Fatalf("offered %v, vouch set %t; want r1 offered with the guard's vouch", w.cluster.offered, check != nil)
		}
		before := guard.vouches
		if err := check(); err != nil || guard.vouches != before+1 {
			t.Errorf("the offer's vouch = %v after %d calls to the guard, want it to ask the guard", err, guard.vouches-before)
		}
	})
}

// A node whose request's status cannot be written is retried with a
// backoff of its own; the resyncs leave it alone meanwhile.
func TestFailedStatusWriteBacksOff(t *testing.T) {
	w := newWorld(t, nil, request("r1", v1alpha1.ActionFence))
	t.Cleanup(w.c.queue.ShutDown)
	writes := 0
	w.client.PrependReactor("update", "bmcfencerequests", func(clienttesting.Action) (bool, runtime.Object, error) {
		writes++
		return true, nil, errors.New("the API server refuses")
	})
	r, err := w.client.FencingV1alpha1().BMCFenceRequests().Get(context.Background(), "r1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.c.informer.GetStore().Add(r); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 10 {
		w.c.Resync()
		drain(ctx, w.c)
	}
	if writes != 1 {
		t.Errorf("the status write was tried %d times in 10 resyncs, want once (then backoff)", writes)
	}
}

// A finished request is deleted by a resync once its TTL has passed, even
// when nothing else about its node changes: the resyncs queue it then, and
// only then (before, a resync queued pending requests only, and a finished
// one stayed for ever at rest).
func TestResyncCollectsAFinishedRequestAfterItsTTL(t *testing.T) {
	done := request("old", v1alpha1.ActionFence)
	finished := metav1.NewTime(t0)
	done.Status = v1alpha1.BMCFenceRequestStatus{Outcome: v1alpha1.OutcomeTaken, FinishedAt: &finished}
	w := newWorld(t, nil, done)
	t.Cleanup(w.c.queue.ShutDown)
	if err := w.c.informer.GetStore().Add(done); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w.c.Resync()
	drain(ctx, w.c)
	if _, err := w.client.FencingV1alpha1().BMCFenceRequests().Get(ctx, "old", metav1.GetOptions{}); err != nil {
		t.Fatalf("deleted before its TTL: %v", err)
	}
	w.clock.SetTime(t0.Add(DefaultTTL + time.Second))
	w.c.Resync()
	drain(ctx, w.c)
	if _, err := w.client.FencingV1alpha1().BMCFenceRequests().Get(ctx, "old", metav1.GetOptions{}); err == nil {
		t.Error("a resync after its TTL left the finished request in place")
	}
}

// A request's final outcome is stamped with when it got it, on our clock.
func TestFinishStampsFinishedAt(t *testing.T) {
	w := newWorld(t, nil, request("w1-abort-1", v1alpha1.ActionAbort))
	w.reconcile(t, "w1-abort-1")
	w.clock.Step(3 * time.Second)
	w.cluster.taken("w1", "w1-abort-1")
	r := w.reconcile(t, "w1-abort-1")
	if r.Status.Outcome != v1alpha1.OutcomeTaken || r.Status.FinishedAt == nil || !r.Status.FinishedAt.Time.Equal(t0.Add(3*time.Second)) {
		t.Errorf("status = %+v, want Taken, finished at %s", r.Status, t0.Add(3*time.Second))
	}
}

// Finished requests are deleted requests.ttl after their outcome (and
// after their creation: no one clock that is off deletes an answer its
// requester has not read); pending ones never; each deletion is counted
// by outcome.
func TestFinishedRequestsAreCollectedAfterTheirTTL(t *testing.T) {
	const ttl = 24 * time.Hour
	at := func(d time.Duration) *metav1.Time { m := metav1.NewTime(t0.Add(d)); return &m }
	tests := []struct {
		name    string
		status  v1alpha1.BMCFenceRequestStatus
		created time.Duration // relative to t0
		now     time.Duration
		deleted bool
	}{
		{"taken a day ago", v1alpha1.BMCFenceRequestStatus{Outcome: v1alpha1.OutcomeTaken, SeenAt: at(0), FinishedAt: at(time.Minute)}, 0, time.Minute + ttl, true},
		{"taken a minute short of a day ago", v1alpha1.BMCFenceRequestStatus{Outcome: v1alpha1.OutcomeTaken, SeenAt: at(0), FinishedAt: at(time.Minute)}, 0, ttl, false},
		{"refused a day ago", v1alpha1.BMCFenceRequestStatus{Outcome: v1alpha1.OutcomeRefused, FinishedAt: at(0)}, 0, ttl, true},
		{"expired a day ago", v1alpha1.BMCFenceRequestStatus{Outcome: v1alpha1.OutcomeExpired, FinishedAt: at(15 * time.Minute)}, 0, 15*time.Minute + ttl, true},
		{"expired just now, created long ago", v1alpha1.BMCFenceRequestStatus{Outcome: v1alpha1.OutcomeExpired, FinishedAt: at(48 * time.Hour)}, 0, 48 * time.Hour, false},
		{"a finishedAt from a clock far behind, created just now", v1alpha1.BMCFenceRequestStatus{Outcome: v1alpha1.OutcomeTaken, FinishedAt: at(-72 * time.Hour)}, 0, time.Hour, false},
		{"finished by an older agent (no finishedAt), seen two days ago", v1alpha1.BMCFenceRequestStatus{Outcome: v1alpha1.OutcomeTaken, SeenAt: at(0)}, 0, 2 * ttl, true},
		{"finished by an older agent, seen an hour ago", v1alpha1.BMCFenceRequestStatus{Outcome: v1alpha1.OutcomeTaken, SeenAt: at(47 * time.Hour)}, 0, 48 * time.Hour, false},
		{"pending for two days", v1alpha1.BMCFenceRequestStatus{Outcome: v1alpha1.OutcomePending, SeenAt: at(0)}, 0, 2 * ttl, false},
		{"never seen, two days old", v1alpha1.BMCFenceRequestStatus{}, 0, 2 * ttl, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := request("w1-fence-1", v1alpha1.ActionFence)
			r.CreationTimestamp = metav1.NewTime(t0.Add(tt.created))
			r.Status = tt.status
			w := newWorld(t, nil, r)
			collected := map[v1alpha1.RequestOutcome]int{}
			w.c.opts.TTL = ttl
			w.c.opts.Collected = func(o v1alpha1.RequestOutcome) { collected[o]++ }
			w.clock.SetTime(t0.Add(tt.now))
			ctx := context.Background()
			got, err := w.client.FencingV1alpha1().BMCFenceRequests().Get(ctx, r.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if did := w.c.collect(ctx, got); did != tt.deleted {
				t.Errorf("collect = %v, want %v", did, tt.deleted)
			}
			_, err = w.client.FencingV1alpha1().BMCFenceRequests().Get(ctx, r.Name, metav1.GetOptions{})
			if gone := err != nil; gone != tt.deleted {
				t.Errorf("deleted = %v (%v), want %v", gone, err, tt.deleted)
			}
			want := map[v1alpha1.RequestOutcome]int{}
			if tt.deleted {
				want[tt.status.Outcome] = 1
			}
			if diff := cmp.Diff(want, collected); diff != "" {
				t.Errorf("collected (-want +got):\n%s", diff)
			}
		})
	}
}

// A pending request whose object is deleted (a human's cancel: kubectl
// delete bmcfencerequest) is withdrawn from the engine when its node is
// reconciled; before, it stayed offered, and its check kept passing.
func TestDeletedPendingRequestIsWithdrawnFromTheEngine(t *testing.T) {
	ctx := context.Background()
	guard := &countingGuard{}
	w := newWorld(t, guard, request("r1", v1alpha1.ActionFence))
	t.Cleanup(w.c.queue.ShutDown)
	r, err := w.client.FencingV1alpha1().BMCFenceRequests().Get(ctx, "r1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = w.c.informer.GetStore().Add(r)
	w.c.Resync()
	drain(ctx, w.c)
	if _, ok := w.cluster.offered["w1/r1"]; !ok {
		t.Fatalf("not offered: %v", w.cluster.offered)
	}
	_ = w.c.informer.GetStore().Delete(r)
	w.c.queue.Add("w1") // what the informer's delete handler does
	drain(ctx, w.c)
	w.clock.Step(time.Hour)
	w.c.Resync()
	drain(ctx, w.c)
	if _, ok := w.cluster.offered["w1/r1"]; ok {
		t.Errorf("the deleted request r1 is still offered to the engine an hour later")
	}
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	if len(w.c.seen) != 0 || len(w.c.offered) != 0 {
		t.Errorf("the controller still remembers the deleted request: seen %v, offered %v", w.c.seen, w.c.offered)
	}
}
