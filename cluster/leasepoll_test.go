package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/fence"
)

// recordingHandler writes down each handler call as "add w1 (initial)",
// "update w1 3->4", "delete w1", "delete w1 (tombstone)".
type recordingHandler struct{ calls []string }

func (r *recordingHandler) OnAdd(obj any, initial bool) {
	s := "add " + obj.(*coordinationv1.Lease).Name
	if initial {
		s += " (initial)"
	}
	r.calls = append(r.calls, s)
}

func (r *recordingHandler) OnUpdate(oldObj, newObj any) {
	o, n := oldObj.(*coordinationv1.Lease), newObj.(*coordinationv1.Lease)
	r.calls = append(r.calls, "update "+n.Name+" "+o.ResourceVersion+"->"+n.ResourceVersion)
}

func (r *recordingHandler) OnDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		r.calls = append(r.calls, "delete "+t.Obj.(*coordinationv1.Lease).Name+" (tombstone)")
		return
	}
	r.calls = append(r.calls, "delete "+obj.(*coordinationv1.Lease).Name)
}

// Each list hands our handlers what a shared informer's relist would: the
// first list as initial adds, a Lease whose version changed as an update
// with its old version, a Lease no longer listed as a tombstone, nothing
// for a Lease listed again unchanged, and everything slimmed by the
// transform.
func TestLeaseStoreCallsTheHandlersAsAnInformer(t *testing.T) {
	h := &recordingHandler{}
	s := newLeaseStore(h)
	replace := func(ls ...*coordinationv1.Lease) {
		t.Helper()
		if _, err := s.Replace(leaseListOf(t, ls...)); err != nil {
			t.Fatal(err)
		}
	}
	fat := withRV(lease("w1", at(0)), "1")
	fat.Labels = map[string]string{"big": "yes"}
	replace(fat, withRV(lease("w2", at(0)), "1"))
	replace(withRV(lease("w1", at(0)), "1"), withRV(lease("w2", at(0)), "1"), withRV(lease("w3", at(0)), "2"))
	replace(withRV(lease("w1", at(20)), "3"), withRV(lease("w3", at(0)), "2"))
	// A Lease without a resourceVersion is never taken for unchanged.
	replace(withRV(lease("w1", at(20)), "3"), withRV(lease("w3", at(0)), ""))
	replace(withRV(lease("w1", at(20)), "3"), withRV(lease("w3", at(0)), ""))
	want := []string{
		"add w1 (initial)", "add w2 (initial)",
		"add w3",
		"update w1 1->3", "delete w2 (tombstone)",
		"update w3 2->", "update w3 ->",
	}
	if diff := cmp.Diff(want, h.calls); diff != "" {
		t.Errorf("handler calls (-want +got):\n%s", diff)
	}
	if keys := s.items.ListKeys(); len(keys) != 2 {
		t.Errorf("store holds %v, want w1 and w3", keys)
	}
	obj, _, _ := s.items.GetByKey(fat.Namespace + "/w1")
	if l := obj.(*coordinationv1.Lease); l.Labels != nil {
		t.Errorf("the store holds an unslimmed Lease: %+v", l.ObjectMeta)
	}
}

// A list whose Leases are all unchanged builds nothing: at rest the
// agent lists a thousand Leases a second, and each one built would be
// garbage for the collector (most of the agent's CPU at rest, in make
// scale's profiles, before).
func TestAListOfUnchangedLeasesAllocatesNothing(t *testing.T) {
	s := newLeaseStore(&recordingHandler{})
	var ls []*coordinationv1.Lease
	for i := range 1000 {
		ls = append(ls, withRV(lease(fmt.Sprintf("w%d", i), at(0)), fmt.Sprint(i+1)))
	}
	raw := leaseListOf(t, ls...)
	if _, err := s.Replace(raw); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := s.Replace(raw); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("a list of 1000 unchanged Leases made %.0f allocations, want none", allocs)
	}
}

// typedList is a poller's list of a typed one, encoded as the API server
// sends it.
func typedList(f func(context.Context) (*coordinationv1.LeaseList, error)) func(context.Context, *bytes.Buffer) ([]byte, error) {
	return func(ctx context.Context, _ *bytes.Buffer) ([]byte, error) {
		l, err := f(ctx)
		if err != nil {
			return nil, err
		}
		return l.Marshal()
	}
}

// leaseListOf is a LeaseList message of ls, as listLeases returns it.
func leaseListOf(t *testing.T, ls ...*coordinationv1.Lease) []byte {
	t.Helper()
	l := &coordinationv1.LeaseList{}
	for _, x := range ls {
		l.Items = append(l.Items, *x)
	}
	b, err := l.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A list proves the view fresh as of its start, not its end: a renewal
// written while the list was under way may be missing from it. What it
// brings in is stamped at its end. A list that fails proves nothing.
func TestALeaseListStampsItsStart(t *testing.T) {
	h := newHarness(t)
	p := h.leasePoller()
	fail := false
	p.list = typedList(func(context.Context) (*coordinationv1.LeaseList, error) {
		h.clock.Step(3 * time.Second) // the list takes 3 s
		if fail {
			return nil, errors.New("the API server is away")
		}
		return &coordinationv1.LeaseList{Items: []coordinationv1.Lease{*lease("w1", at(0))}}, nil
	})
	h.deliver(node("w1", ready(at(0))))
	h.clock.SetTime(at(10 * time.Second))
	if _, err := p.poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.c.APIFreshAt(); !got.Equal(at(10 * time.Second)) {
		t.Errorf("APIFreshAt = %v after a list from +10s to +13s, want its start +10s", got)
	}
	// A sign of life is stamped when the list brought it in, its end:
	// silence can only look shorter than it is.
	if hb := h.view("w1").View.HeartbeatAt; !hb.Equal(at(13 * time.Second)) {
		t.Errorf("HeartbeatAt = %v, want the list's end +13s", hb)
	}
	fail = true
	h.clock.SetTime(at(20 * time.Second))
	if _, err := p.poll(context.Background()); err == nil {
		t.Fatal("a failed list reported no error")
	}
	if got := h.c.APIFreshAt(); !got.Equal(at(10 * time.Second)) {
		t.Errorf("APIFreshAt = %v after a failed list, want the last good list's start +10s", got)
	}
}

// A renewal a list brings in is placed after the start of the last
// complete list before it (HeartbeatFrom): it was not in that one. The
// first list places nothing, and a Ready heartbeat from the Node watch
// places nothing either.
func TestALeaseListPlacesARenewalAfterTheListBeforeIt(t *testing.T) {
	h := newHarness(t)
	p := h.leasePoller()
	renew := at(0)
	p.list = typedList(func(context.Context) (*coordinationv1.LeaseList, error) {
		h.clock.Step(time.Second) // the list takes 1 s
		return &coordinationv1.LeaseList{Items: []coordinationv1.Lease{*lease("w1", renew)}}, nil
	})
	h.deliver(node("w1", ready(at(0))))
	poll := func(start time.Duration) fence.NodeView {
		t.Helper()
		h.clock.SetTime(at(start))
		if _, err := p.poll(context.Background()); err != nil {
			t.Fatal(err)
		}
		return h.view("w1").View
	}
	if v := poll(10 * time.Second); !v.HeartbeatFrom.IsZero() {
		t.Errorf("the first list placed its renewal from %v, want nowhere", v.HeartbeatFrom)
	}
	renew = at(12 * time.Second)
	v := poll(13 * time.Second) // failed or not, lists in between change nothing: this one follows +10s
	if !v.HeartbeatAt.Equal(at(14*time.Second)) || !v.HeartbeatFrom.Equal(at(10*time.Second)) {
		t.Errorf("a renewal brought in by the list of +13s..+14s: HeartbeatAt %v, HeartbeatFrom %v; want +14s and the list before's start +10s", v.HeartbeatAt, v.HeartbeatFrom)
	}
	if v := poll(15 * time.Second); !v.HeartbeatFrom.Equal(at(10 * time.Second)) {
		t.Errorf("a list with no renewal moved HeartbeatFrom to %v", v.HeartbeatFrom)
	}
	h.clock.SetTime(at(20 * time.Second))
	h.deliver(node("w1", ready(at(19*time.Second))))
	if v := h.view("w1").View; !v.HeartbeatAt.Equal(at(20*time.Second)) || !v.HeartbeatFrom.IsZero() {
		t.Errorf("after a Ready heartbeat: HeartbeatAt %v, HeartbeatFrom %v; want +20s and nowhere", v.HeartbeatAt, v.HeartbeatFrom)
	}
}

// A list is taken in by the handlers before its stamp: a handler that runs
// while the list is taken in never sees the stamp of the list it is part
// of, and Start (HasSynced) waits for the stamp.
func TestALeaseListIsTakenInBeforeItIsStamped(t *testing.T) {
	h := newHarness(t)
	p := h.leasePoller()
	var seen []time.Time
	handlers := p.store.handler
	p.store.handler = cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(obj any, initial bool) {
		seen = append(seen, h.c.APIFreshAt())
		handlers.OnAdd(obj, initial)
	}}
	p.list = typedList(func(context.Context) (*coordinationv1.LeaseList, error) {
		if p.HasSynced() {
			t.Error("synced before the first list returned")
		}
		return &coordinationv1.LeaseList{Items: []coordinationv1.Lease{*lease("w1", at(0)), *lease("w2", at(0))}}, nil
	})
	h.clock.SetTime(at(10 * time.Second))
	if _, err := p.poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, f := range seen {
		if !f.IsZero() {
			t.Errorf("a handler saw APIFreshAt %v while its list was being taken in", f)
		}
	}
	if len(seen) != 2 || !p.HasSynced() || !h.c.APIFreshAt().Equal(at(10*time.Second)) {
		t.Errorf("after the list: %d adds, synced %v, APIFreshAt %v", len(seen), p.HasSynced(), h.c.APIFreshAt())
	}
}

func TestLeaseListPeriodGrowsWithTheFleet(t *testing.T) {
	for _, tt := range []struct {
		leases int
		want   time.Duration
	}{{0, 500 * time.Millisecond}, {12, 500 * time.Millisecond}, {500, 500 * time.Millisecond}, {600, 600 * time.Millisecond},
		{1000, time.Second}, {4000, 4 * time.Second}, {10000, 4 * time.Second}} {
		if got := leaseListPeriod(tt.leases); got != tt.want {
			t.Errorf("leaseListPeriod(%d) = %s, want %s", tt.leases, got, tt.want)
		}
	}
}

// Lists that keep failing are retried later and later (1, 2, 4, 8, 8 s)
// and reported once, then once a minute; the first list that works goes
// back to the fleet's period.
func TestFailingLeaseListsBackOffAndAreReportedOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	var mu sync.Mutex
	var starts []string
	reports := 0
	p := &leasePoller{
		list: typedList(func(context.Context) (*coordinationv1.LeaseList, error) {
			mu.Lock()
			defer mu.Unlock()
			starts = append(starts, clk.Since(t0).String())
			if len(starts) <= 11 {
				return nil, errors.New("the API server is away")
			}
			return &coordinationv1.LeaseList{}, nil
		}),
		store:  newLeaseStore(&recordingHandler{}),
		now:    clk.Now,
		timer:  clk,
		onList: func(time.Time) {},
		onErr:  func(error) { mu.Lock(); reports++; mu.Unlock() },
	}
	listed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(starts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.RunWithContext(ctx); close(done) }()
	for listed() < 13 {
		if clk.HasWaiters() {
			clk.Step(500 * time.Millisecond)
		}
		runtime.Gosched()
	}
	cancel()
	<-done
	if !p.IsStopped() {
		t.Error("not stopped after its context ended")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"0s", "1s", "3s", "7s", "15s", "23s", "31s", "39s", "47s", "55s", "1m3s", "1m11s", "1m11.5s"}
	if diff := cmp.Diff(want, starts[:13]); diff != "" {
		t.Errorf("list starts (-want +got):\n%s", diff)
	}
	if reports != 2 {
		t.Errorf("%d reports of eleven failed lists over 63 s, want 2 (the first, then a minute later)", reports)
	}
}
