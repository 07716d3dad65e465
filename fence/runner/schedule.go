package runner

import (
	"container/heap"
	"time"
)

// dueHeap orders nodes by when they next want stepping: the scheduling
// loop's one timer waits for its earliest entry. Each node has at most one
// entry (index finds it), so the heap never holds more than the fleet.
type dueHeap struct {
	entries []*dueEntry
	index   map[string]*dueEntry
}

type dueEntry struct {
	name string
	at   time.Time
	pos  int
}

func newDueHeap() *dueHeap { return &dueHeap{index: map[string]*dueEntry{}} }

// set makes name due at at, replacing any earlier due time.
func (h *dueHeap) set(name string, at time.Time) {
	if e, ok := h.index[name]; ok {
		e.at = at
		heap.Fix(h, e.pos)
		return
	}
	e := &dueEntry{name: name, at: at}
	h.index[name] = e
	heap.Push(h, e)
}

// at is name's due time; ok is false when it has none (queued, running or
// not started).
func (h *dueHeap) at(name string) (at time.Time, ok bool) {
	if e, ok := h.index[name]; ok {
		return e.at, true
	}
	return time.Time{}, false
}

// remove forgets name's due time, if it has one.
func (h *dueHeap) remove(name string) {
	if e, ok := h.index[name]; ok {
		heap.Remove(h, e.pos)
	}
}

// next is the earliest due time; ok is false when nothing is due.
func (h *dueHeap) next() (at time.Time, ok bool) {
	if len(h.entries) == 0 {
		return time.Time{}, false
	}
	return h.entries[0].at, true
}

// popDue removes and returns the earliest node if it is due by now.
func (h *dueHeap) popDue(now time.Time) (string, bool) {
	if len(h.entries) == 0 || h.entries[0].at.After(now) {
		return "", false
	}
	return heap.Pop(h).(*dueEntry).name, true
}

// heap.Interface; use set, remove, next and popDue instead.

func (h *dueHeap) Len() int           { return len(h.entries) }
func (h *dueHeap) Less(i, j int) bool { return h.entries[i].at.Before(h.entries[j].at) }
func (h *dueHeap) Swap(i, j int) {
	h.entries[i], h.entries[j] = h.entries[j], h.entries[i]
	h.entries[i].pos, h.entries[j].pos = i, j
}
func (h *dueHeap) Push(x any) {
	e := x.(*dueEntry)
	e.pos = len(h.entries)
	h.entries = append(h.entries, e)
}
func (h *dueHeap) Pop() any {
	last := len(h.entries) - 1
	e := h.entries[last]
	h.entries[last] = nil
	h.entries = h.entries[:last]
	delete(h.index, e.name)
	return e
}

// readyQueue holds the nodes waiting for a worker, in two FIFOs: fences in
// flight (inFlight: their ForceOff decided or sent, until the taint) are
// handed out ahead of every other node, three in four turns while others
// wait (firstShare). A node is in it at most once, and
// never while a worker syncs it: a change seen meanwhile is remembered
// (again) and queues it when that sync ends, so a node's Syncs never
// overlap and no change is lost.
//
// A fence's settle reads must come within maxReadGap of each other, and a
// worker is what runs them. At 1000 nodes × 30 pods on a saturated control
// plane, 500 live nodes whose Lease renewals came late flipped between
// Healthy and Suspect every minute, each flip a state write of 1 to 3 s,
// and a fence in flight waited behind them in one FIFO (issue 22).
//
// Strict priority starved the rest in turn: at 1000 nodes × 30 pods a power
// loss of 100 put 91 fences in flight, each holding a worker through state
// writes of 4 s on an API server busy with the dead nodes' pods, and nine
// more suspects waited about 40 s for the worker of their first look (the
// look that tells a power loss) while the fences kept coming back (issue
// 19). So while both FIFOs wait, every (firstShare+1)th handout is the
// rest's.
type readyQueue struct {
	first, rest []string
	queued      map[string]bool
	running     map[string]bool
	again       map[string]bool
	inFlight    func(name string) bool
	// firstRun counts the fences in flight handed out in a row while the
	// rest waited.
	firstRun int
}

// firstShare is how many fences in flight are handed out in a row while
// other nodes wait: at least three of every four handouts (not of the
// workers: a slower sync holds its worker longer).
const firstShare = 3

func newReadyQueue(inFlight func(name string) bool) *readyQueue {
	return &readyQueue{queued: map[string]bool{}, running: map[string]bool{}, again: map[string]bool{}, inFlight: inFlight}
}

// add queues name, or marks it to run again if a worker has it now.
func (q *readyQueue) add(name string) {
	switch {
	case q.running[name]:
		q.again[name] = true
	case !q.queued[name]:
		q.queued[name] = true
		if q.inFlight != nil && q.inFlight(name) {
			q.first = append(q.first, name)
		} else {
			q.rest = append(q.rest, name)
		}
	}
}

// fromFirst reports whether the next handout is a fence in flight.
func (q *readyQueue) fromFirst() bool {
	return len(q.first) > 0 && (len(q.rest) == 0 || q.firstRun < firstShare)
}

// head is the next node to hand out, if any.
func (q *readyQueue) head() (string, bool) {
	switch {
	case q.fromFirst():
		return q.first[0], true
	case len(q.rest) > 0:
		return q.rest[0], true
	}
	return "", false
}

// take marks the head as handed to a worker.
func (q *readyQueue) take() {
	fifo := &q.rest
	if q.fromFirst() {
		fifo = &q.first
		if len(q.rest) > 0 {
			q.firstRun++
		}
	} else {
		q.firstRun = 0
	}
	name := (*fifo)[0]
	(*fifo)[0] = ""
	*fifo = (*fifo)[1:]
	if len(*fifo) == 0 {
		*fifo = nil // let a burst's backing array go
	}
	delete(q.queued, name)
	q.running[name] = true
}

// done marks name's sync as ended, and reports whether a change arrived
// during it (the caller queues it again).
func (q *readyQueue) done(name string) (again bool) {
	delete(q.running, name)
	again = q.again[name]
	delete(q.again, name)
	return again
}
