package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/cache"
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
func TestHandlingStoreCallsTheHandlersAsAnInformer(t *testing.T) {
	h := &recordingHandler{}
	s := newHandlingStore(h, slimLease)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	fat := withRV(lease("w1", at(0)), "1")
	fat.Labels = map[string]string{"big": "yes"}
	must(s.Replace([]any{fat, withRV(lease("w2", at(0)), "1")}))
	if !s.synced.Load() {
		t.Error("not synced after the first list")
	}
	must(s.Replace([]any{withRV(lease("w1", at(0)), "1"), withRV(lease("w2", at(0)), "1"), withRV(lease("w3", at(0)), "2")}))
	must(s.Replace([]any{withRV(lease("w1", at(20)), "3"), withRV(lease("w3", at(0)), "2")}))
	want := []string{
		"add w1 (initial)", "add w2 (initial)",
		"add w3",
		"update w1 1->3", "delete w2 (tombstone)",
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

// A list proves the view fresh as of its start, not its end: a renewal
// written while the list was under way may be missing from it. What it
// brings in is stamped at its end. A list that fails proves nothing.
func TestALeaseListStampsItsStart(t *testing.T) {
	h := newHarness(t)
	var p *leasePoller
	for _, ni := range h.c.informers {
		if ni.name == "leases" {
			p = ni.informer.(*leasePoller)
		}
	}
	fail := false
	p.list = func(context.Context) (*coordinationv1.LeaseList, error) {
		h.clock.Step(3 * time.Second) // the list takes 3 s
		if fail {
			return nil, errors.New("the API server is away")
		}
		return &coordinationv1.LeaseList{Items: []coordinationv1.Lease{*lease("w1", at(0))}}, nil
	}
	h.deliver(node("w1", ready(at(0))))
	h.clock.SetTime(at(10 * time.Second))
	if err := p.poll(context.Background()); err != nil {
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
	if err := p.poll(context.Background()); err == nil {
		t.Fatal("a failed list reported no error")
	}
	if got := h.c.APIFreshAt(); !got.Equal(at(10 * time.Second)) {
		t.Errorf("APIFreshAt = %v after a failed list, want the last good list's start +10s", got)
	}
}
