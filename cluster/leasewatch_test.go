package cluster

import (
	"testing"

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

// The Lease watch's store hands our handlers what a shared informer would:
// the first list as initial adds, a known Lease as an update with its old
// version, a relist's missing Leases as tombstones, and everything slimmed
// by the transform.
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
	fat.ManagedFields = append(fat.ManagedFields, fat.ManagedFields...)
	fat.Labels = map[string]string{"big": "yes"}
	must(s.Replace([]any{fat, withRV(lease("w2", at(0)), "1")}, "1"))
	if !s.synced.Load() {
		t.Error("not synced after the first list")
	}
	must(s.Add(withRV(lease("w3", at(0)), "2")))
	must(s.Update(withRV(lease("w1", at(10)), "3")))
	must(s.Delete(withRV(lease("w2", at(0)), "4")))
	// A relist after a broken watch: w1 renewed, w3 gone, w4 new.
	must(s.Replace([]any{withRV(lease("w1", at(20)), "5"), withRV(lease("w4", at(20)), "5")}, "5"))
	want := []string{
		"add w1 (initial)", "add w2 (initial)",
		"add w3", "update w1 1->3", "delete w2",
		"update w1 3->5", "add w4", "delete w3 (tombstone)",
	}
	if diff := cmp.Diff(want, h.calls); diff != "" {
		t.Errorf("handler calls (-want +got):\n%s", diff)
	}
	if keys := s.items.ListKeys(); len(keys) != 2 {
		t.Errorf("store holds %v, want w1 and w4", keys)
	}
	obj, _, _ := s.items.GetByKey(fat.Namespace + "/w1")
	if l := obj.(*coordinationv1.Lease); l.Labels != nil || l.ManagedFields != nil {
		t.Errorf("the store holds an unslimmed Lease: %+v", l.ObjectMeta)
	}
}
