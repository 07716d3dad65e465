package runner

import (
	"context"
	"slices"
	"sync"

	"github.com/bmcfence/bmcfence/fence"
)

// bmcSlots bounds the BMC calls in flight across nodes (bmc.concurrency)
// and decides who gets a slot when they run short. Calls are of two kinds.
//
// A fence before its taint races the clock: its settle reads must come
// within maxReadGap of each other or its Off run starts over, and every
// second it waits is a second of failover. Its calls (and every power
// command) wait for a slot, first come first served, ahead of the rest.
//
// The reads of a node past its taint (keep-off while it detaches, a Stuck
// node's slow reads, the read-back of a power-on) only watch. They never
// wait: with no slot free beyond the reserved ones, or a fence waiting,
// the read gives up its turn and the node is synced again when a slot
// frees (wake). At 1000 nodes, 97 tainted nodes reading every 3 s took
// every slot and, waiting for one, every worker, and the three fences
// still before their taint got a read every 20 s (issue 22).
type bmcSlots struct {
	mu   sync.Mutex
	free int
	// reserved is how many slots a background read may never take: a
	// fence's first call gets one at once while background reads hang on
	// slow BMCs.
	reserved int
	// waiting are the fences' callers, in order; release hands its slot
	// to the first.
	waiting []chan struct{}
	// parked are the nodes whose background read found no slot, in
	// order, each once; release wakes the first when a slot frees.
	parked   []string
	isParked map[string]bool
	wake     func(node string)
}

// newBMCSlots returns n slots, a quarter of them (at least one, when
// there are two or more) reserved for fences before their taint.
func newBMCSlots(n int, wake func(node string)) *bmcSlots {
	reserved := 0
	if n > 1 {
		reserved = max(1, n/4)
	}
	return &bmcSlots{free: n, reserved: reserved, isParked: map[string]bool{}, wake: wake}
}

// acquire waits for a slot, ahead of every background read, until ctx
// ends.
func (s *bmcSlots) acquire(ctx context.Context) error {
	turn := s.queue()
	if turn == nil {
		return nil
	}
	return s.await(ctx, turn)
}

// queue takes a free slot (nil) or joins the fences waiting for one: the
// returned channel is closed when release hands it a slot.
func (s *bmcSlots) queue() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free > 0 && len(s.waiting) == 0 {
		s.free--
		return nil
	}
	turn := make(chan struct{})
	s.waiting = append(s.waiting, turn)
	return turn
}

// await waits for turn (queue) until ctx ends; a slot handed over as ctx
// ended is passed on.
func (s *bmcSlots) await(ctx context.Context, turn chan struct{}) error {
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if i := slices.Index(s.waiting, turn); i >= 0 {
		s.waiting = slices.Delete(s.waiting, i, i+1)
		s.mu.Unlock()
		return ctx.Err()
	}
	s.mu.Unlock()
	s.release()
	return ctx.Err()
}

// tryBackground takes a slot for node's background read if one is free
// beyond the reserved ones and no fence waits for one. Otherwise it parks
// node, to be woken when a slot frees, and reports false.
func (s *bmcSlots) tryBackground(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) == 0 && s.free > s.reserved {
		s.free--
		if s.isParked[node] {
			delete(s.isParked, node)
			s.parked = slices.DeleteFunc(s.parked, func(n string) bool { return n == node })
		}
		return true
	}
	if !s.isParked[node] {
		s.isParked[node] = true
		s.parked = append(s.parked, node)
	}
	return false
}

// release frees a slot: to the first fence waiting, or back to the pool,
// waking the first parked node if a background read could now take it.
func (s *bmcSlots) release() {
	s.mu.Lock()
	if len(s.waiting) > 0 {
		ch := s.waiting[0]
		s.waiting = slices.Delete(s.waiting, 0, 1)
		s.mu.Unlock()
		close(ch)
		return
	}
	s.free++
	wake := ""
	if s.free > s.reserved && len(s.parked) > 0 {
		wake = s.parked[0]
		s.parked = slices.Delete(s.parked, 0, 1)
		delete(s.isParked, wake)
	}
	s.mu.Unlock()
	if wake != "" && s.wake != nil {
		s.wake(wake)
	}
}

// urgentRead reports whether a read asked for by a node in state s races
// the clock: from the first suspicion until the taint is on. Past the
// taint a read only watches (keep-off, a Stuck node, a power-on's read
// back).
func urgentRead(s fence.State) bool {
	switch s.Phase {
	case fence.Detaching, fence.Fenced, fence.PoweringOn, fence.Recovering, fence.Untainting, fence.Stuck, fence.Maintenance:
		return false
	}
	return true
}
