package runner

import (
	"context"
	"slices"
	"sync"

	"github.com/bmcfence/bmcfence/fence"
)

// bmcSlots bounds the BMC calls in flight across nodes (bmc.concurrency)
// and decides who gets a slot when they run short. Calls are of three
// kinds, first served first:
//
//   - A fence in flight (its ForceOff decided or sent, until the taint:
//     fence.Phase.InFlight) races the clock: its settle reads must come
//     within maxReadGap of each other or its Off run starts over, and every
//     second it waits is a second of failover. Its calls, and every power
//     command, wait for a slot, ahead of the rest.
//   - A suspect's first look (no reading yet since it became Suspect)
//     tells a power loss, which fences at once, from a node that may run.
//     It takes any free slot no fence waits for.
//   - Every other read only watches: a suspect that reads On waiting for
//     fenceAfter, keep-off while a tainted node detaches, a Stuck node, a
//     power-on's read-back. It never takes the reserved slots.
//
// Only fences in flight wait. A read of the two other kinds that finds no
// slot gives up its turn, and its node is synced again when one frees
// (wake): waiting, it held a worker too. At 1000 nodes × 30 pods on a
// saturated control plane, 500 live nodes whose Lease renewals came late
// went Suspect, and with 97 tainted nodes' keep-off reads they held the
// slots and the workers; fences in flight got a read every 20 s and
// tainted at +576 s (issue 22).
type bmcSlots struct {
	mu   sync.Mutex
	free int
	// reserved is how many slots a watching read may never take: a
	// fence's calls get one at once while watching reads hang on slow
	// BMCs.
	reserved int
	// waiting are the fences' callers, in order; release hands its slot
	// to the first.
	waiting []chan struct{}
	// looks and watches are the nodes whose first look or watching read
	// found no slot, in order, each once; release wakes the first when a
	// slot frees that it could take.
	looks, watches parkedNodes
	wake           func(node string)
}

// parkedNodes is a FIFO of node names, each at most once.
type parkedNodes struct {
	order []string
	in    map[string]bool
}

func (p *parkedNodes) park(node string) {
	if p.in == nil {
		p.in = map[string]bool{}
	}
	if !p.in[node] {
		p.in[node] = true
		p.order = append(p.order, node)
	}
}

func (p *parkedNodes) unpark(node string) {
	if p.in[node] {
		delete(p.in, node)
		p.order = slices.DeleteFunc(p.order, func(n string) bool { return n == node })
	}
}

func (p *parkedNodes) pop() (string, bool) {
	if len(p.order) == 0 {
		return "", false
	}
	node := p.order[0]
	p.order = slices.Delete(p.order, 0, 1)
	delete(p.in, node)
	return node, true
}

// newBMCSlots returns n slots, a quarter of them (at least one, when
// there are two or more) reserved from watching reads.
func newBMCSlots(n int, wake func(node string)) *bmcSlots {
	reserved := 0
	if n > 1 {
		reserved = max(1, n/4)
	}
	return &bmcSlots{free: n, reserved: reserved, wake: wake}
}

// acquire waits for a slot, ahead of every read that does not wait, until ctx
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

// tryLook takes a slot for a suspect's first look if one is free and no
// fence waits for one. Otherwise it parks node, to be woken when a slot
// frees, and reports false.
func (s *bmcSlots) tryLook(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) == 0 && s.free > 0 {
		s.free--
		s.looks.unpark(node)
		return true
	}
	s.looks.park(node)
	return false
}

// tryWatch takes a slot for node's watching read if one is free beyond
// the reserved ones and no fence waits. Otherwise it parks node, to be
// woken when a slot frees, and reports false. A parked first look does not
// bar it: that node may have left Suspect and never ask again (release
// wakes looks first instead).
func (s *bmcSlots) tryWatch(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tryExtraLocked() {
		s.watches.unpark(node)
		return true
	}
	s.watches.park(node)
	return false
}

// tryExtra takes a slot beyond the reserved ones if one is free and no
// fence waits, for a read that is worth doing only now (a suspect's
// hung-node evidence); it parks nobody.
func (s *bmcSlots) tryExtra() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tryExtraLocked()
}

func (s *bmcSlots) tryExtraLocked() bool {
	if len(s.waiting) == 0 && s.free > s.reserved {
		s.free--
		return true
	}
	return false
}

// release frees a slot: to the first fence waiting, or back to the pool,
// waking the first parked node that could take it.
func (s *bmcSlots) release() {
	s.mu.Lock()
	if len(s.waiting) > 0 {
		turn := s.waiting[0]
		s.waiting = slices.Delete(s.waiting, 0, 1)
		s.mu.Unlock()
		close(turn)
		return
	}
	s.free++
	var wake []string
	if n, ok := s.looks.pop(); ok {
		wake = append(wake, n)
	}
	if s.free > s.reserved {
		// Woken with the look (which may have left Suspect and not come
		// back): one of them takes the slot, the other parks again.
		if n, ok := s.watches.pop(); ok {
			wake = append(wake, n)
		}
	}
	s.mu.Unlock()
	if s.wake != nil {
		for _, n := range wake {
			s.wake(n)
		}
	}
}

// slotKind is which of the three kinds (bmcSlots) a read asked for by a
// node in state s is.
type slotKind uint8

const (
	slotFence slotKind = iota // a fence in flight: waits, first in line
	slotLook                  // a suspect's first look: any free slot
	slotWatch                 // the rest: never the reserved slots
)

func readKind(s fence.State) slotKind {
	switch {
	case s.FleetPhase().InFlight():
		return slotFence
	case s.Phase == fence.Suspect && s.Last.At.Before(s.Since):
		return slotLook
	}
	return slotWatch
}
