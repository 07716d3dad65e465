package runner

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReadyQueueNeverHandsOutANodeTwiceAndKeepsAChangeSeenDuringItsSync(t *testing.T) {
	q := newReadyQueue(nil)
	q.add("a")
	q.add("b")
	q.add("a") // already queued: once
	var order []string
	for name, ok := q.head(); ok; name, ok = q.head() {
		order = append(order, name)
		q.take()
	}
	if !slices.Equal(order, []string{"a", "b"}) {
		t.Fatalf("handed out %v, want [a b]", order)
	}
	q.add("a") // changed while a worker has it: not handed out now
	if name, ok := q.head(); ok {
		t.Fatalf("handed out %s while it is being synced", name)
	}
	if !q.done("a") {
		t.Fatal("the change seen during a's sync was lost")
	}
	if q.done("b") {
		t.Fatal("b had no change during its sync, yet runs again")
	}
}

// Issue 22: a fence in flight waited for a worker behind hundreds of live
// nodes flipping between Healthy and Suspect, and its settle reads came
// 20 s apart. Fences in flight are handed out first, each FIFO in order.
func TestReadyQueueHandsOutFencesInFlightFirst(t *testing.T) {
	inFlight := map[string]bool{"f1": true, "f2": true}
	q := newReadyQueue(func(n string) bool { return inFlight[n] })
	for _, n := range []string{"a", "f1", "b", "f2", "c", "f1"} {
		q.add(n)
	}
	var order []string
	for name, ok := q.head(); ok; name, ok = q.head() {
		order = append(order, name)
		q.take()
	}
	if want := []string{"f1", "f2", "a", "b", "c"}; !slices.Equal(order, want) {
		t.Fatalf("handed out %v, want %v", order, want)
	}
}

func TestDueHeapKeepsOneDueTimePerNodeInOrder(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	h := newDueHeap()
	h.set("a", t0.Add(3*time.Second))
	h.set("b", t0.Add(1*time.Second))
	h.set("c", t0.Add(2*time.Second))
	h.set("b", t0.Add(4*time.Second)) // replaces b's earlier due time
	h.remove("c")
	h.remove("zz") // not there: nothing
	if at, _ := h.next(); !at.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("next = %v, want a's", at)
	}
	if name, ok := h.popDue(t0.Add(2 * time.Second)); ok {
		t.Fatalf("popped %s before it was due", name)
	}
	var got []string
	for name, ok := h.popDue(t0.Add(time.Minute)); ok; name, ok = h.popDue(t0.Add(time.Minute)) {
		got = append(got, name)
	}
	if !slices.Equal(got, []string{"a", "b"}) || h.Len() != 0 || len(h.index) != 0 {
		t.Fatalf("popped %v (left %d, index %d), want [a b] and nothing left", got, h.Len(), len(h.index))
	}
}

// Issue 19, 1000 nodes × 30 pods: a power loss of 100 put 91 fences in
// flight, each holding a worker for 4 s state writes on a busy API server,
// and the first looks of nine more suspects (in the second FIFO) waited
// about 40 s for a worker while the fences kept coming back. Fences in flight
// still go first, but the other nodes waiting get at least every fourth
// handout.
func TestReadyQueueServesTheRestWhileFencesInFlightKeepComing(t *testing.T) {
	q := newReadyQueue(func(n string) bool { return strings.HasPrefix(n, "f") })
	q.add("suspect")
	for i := range 20 {
		q.add(fmt.Sprintf("f%d", i))
	}
	fromFirst := 0
	for range 12 {
		name, ok := q.head()
		if !ok {
			t.Fatal("nothing to hand out")
		}
		q.take()
		if name == "suspect" {
			if fromFirst != firstShare {
				t.Fatalf("the suspect came after %d fences in flight, want %d", fromFirst, firstShare)
			}
			q.done(name)
			q.add("suspect") // back with more to do: served again within the share
			fromFirst = 0
			continue
		}
		fromFirst++
		if fromFirst > firstShare {
			t.Fatalf("%d fences in flight handed out in a row while the suspect waited, want at most %d", fromFirst, firstShare)
		}
		q.done(name)
		q.add(name) // a fence in flight comes straight back
	}
}
