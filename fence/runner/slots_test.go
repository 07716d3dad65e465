package runner

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/fence"
)

// wakes records the nodes bmcSlots wakes.
type wakes struct{ got []string }

func (w *wakes) wake(n string) { w.got = append(w.got, n) }

func TestBMCSlotsKeepAReserveForFences(t *testing.T) {
	for _, tc := range []struct {
		size, watching int // slots, and how many watching reads get one
	}{
		{1, 1}, // nothing to reserve: the one slot is shared, fences first
		{2, 1},
		{4, 3},
		{8, 6},
		{32, 24},
	} {
		s := newBMCSlots(tc.size, nil)
		got := 0
		for i := 0; i < tc.size; i++ {
			if s.tryWatch("b") {
				got++
			}
		}
		if got != tc.watching {
			t.Errorf("%d slots: %d watching reads got one, want %d", tc.size, got, tc.watching)
		}
		// A fence's calls take every slot left at once.
		for i := got; i < tc.size; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if err := s.acquire(ctx); err != nil {
				t.Errorf("%d slots, %d held by watching reads: a fence's call %d waited: %v", tc.size, got, i-got+1, err)
			}
			cancel()
		}
	}
}

// A slot that frees goes to the fence waiting, even when background
// reads asked earlier; a parked node is woken, once and in order, only
// when a slot beyond the reserve is free for it.
func TestBMCSlotsServeFencesFirstAndWakeParkedReads(t *testing.T) {
	var w wakes
	s := newBMCSlots(4, w.wake) // one reserved
	ctx := context.Background()
	if err := s.acquire(ctx); err != nil { // a fence's call
		t.Fatal(err)
	}
	for _, n := range []string{"keep-off-1", "keep-off-2"} {
		if !s.tryWatch(n) {
			t.Fatalf("%s found no slot with one free beyond the reserve", n)
		}
	}
	for _, n := range []string{"keep-off-3", "keep-off-3", "keep-off-4"} {
		if s.tryWatch(n) {
			t.Fatalf("%s took the reserved slot", n)
		}
	}
	if err := s.acquire(ctx); err != nil { // the reserved slot, at once
		t.Fatal(err)
	}
	turn := s.queue()
	if turn == nil {
		t.Fatal("a fifth call got one of four slots")
	}
	s.release()
	if err := s.await(ctx, turn); err != nil {
		t.Fatal(err)
	}
	if len(w.got) != 0 {
		t.Fatalf("woke %v while a fence took the freed slot", w.got)
	}
	s.release() // the reserve is free again: no watching read fits
	if len(w.got) != 0 {
		t.Fatalf("woke %v for the reserved slot", w.got)
	}
	s.release()
	if !slices.Equal(w.got, []string{"keep-off-3"}) {
		t.Fatalf("woke %v, want keep-off-3 (parked first, once)", w.got)
	}
	// keep-off-4's own retry comes before the woken keep-off-3's: it
	// takes the slot and is parked no more; keep-off-3 is parked again,
	// and woken by the next slot that frees.
	if !s.tryWatch("keep-off-4") {
		t.Fatal("keep-off-4 found no slot")
	}
	if s.tryWatch("keep-off-3") {
		t.Fatal("keep-off-3 took the reserved slot")
	}
	s.release()
	if !s.tryWatch("keep-off-3") {
		t.Fatal("the woken node found no slot")
	}
	for i := 0; i < 3; i++ {
		s.release()
	}
	if !slices.Equal(w.got, []string{"keep-off-3", "keep-off-3"}) {
		t.Fatalf("woke %v, want keep-off-3 twice (keep-off-4 took its turn unwoken)", w.got)
	}
	if s.free != 4 || len(s.watches.order) != 0 || len(s.watches.in) != 0 {
		t.Fatalf("slots not all back: free %d, parked %v", s.free, s.watches.order)
	}
}

// A fence whose wait ends (leadership lost) leaves the queue, and a slot
// handed to it as its wait ended is passed on, not lost.
func TestBMCSlotsAWaitThatEndsLosesNoSlot(t *testing.T) {
	for _, handedOver := range []bool{false, true} {
		s := newBMCSlots(1, nil)
		if err := s.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		turn := s.queue()
		if turn == nil {
			t.Fatal("a second call got the one slot")
		}
		if handedOver {
			s.release() // closes turn: the hand-over races the end
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := s.await(ctx, turn)
		if !handedOver && !errors.Is(err, context.Canceled) {
			t.Fatalf("await = %v, want cancelled", err)
		}
		if err == nil {
			s.release() // the hand-over won: the caller holds the slot
		}
		if !handedOver {
			s.release()
		}
		if s.free != 1 || len(s.waiting) != 0 {
			t.Fatalf("handed over %v: free %d, waiting %d; want 1, 0", handedOver, s.free, len(s.waiting))
		}
	}
}

// A suspect's first look tells a power loss from a node that may run: it
// takes any free slot, the reserved one too, and a parked first look is
// woken before every watching read; but it never waits, and never goes
// ahead of a fence in flight.
func TestBMCSlotsLetAFirstLookTakeAnyFreeSlot(t *testing.T) {
	var w wakes
	s := newBMCSlots(2, w.wake) // one reserved
	ctx := context.Background()
	if !s.tryWatch("keep-off") {
		t.Fatal("a watching read found no slot with one free beyond the reserve")
	}
	if s.tryWatch("suspect-reads-on") {
		t.Fatal("a watching read took the reserved slot")
	}
	if !s.tryLook("look-1") {
		t.Fatal("a first look did not get the free reserved slot")
	}
	if s.tryLook("look-2") {
		t.Fatal("a first look got a slot with none free")
	}
	turn := s.queue() // a fence in flight waits, first in line
	if turn == nil {
		t.Fatal("a fence got a slot with none free")
	}
	s.release()
	if err := s.await(ctx, turn); err != nil {
		t.Fatal(err)
	}
	if len(w.got) != 0 {
		t.Fatalf("woke %v while a fence took the freed slot", w.got)
	}
	s.release() // free 1 (the reserved): the first look is woken, not the watching read
	if !slices.Equal(w.got, []string{"look-2"}) {
		t.Fatalf("woke %v, want look-2", w.got)
	}
	if s.tryWatch("suspect-reads-on") {
		t.Fatal("a watching read went ahead of a parked first look")
	}
	if !s.tryLook("look-2") {
		t.Fatal("the woken first look found no slot")
	}
	s.release()
	s.release() // free 2 > reserved: the watching read's turn
	if !slices.Equal(w.got, []string{"look-2", "suspect-reads-on"}) {
		t.Fatalf("woke %v, want look-2 then suspect-reads-on", w.got)
	}
	if s.free != 2 {
		t.Fatalf("free %d, want 2", s.free)
	}
}

func TestReadKind(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		s    fence.State
		want slotKind
	}{
		{"suspect, not read yet", fence.State{Phase: fence.Suspect, Since: t0}, slotLook},
		{"suspect, read before it was", fence.State{Phase: fence.Suspect, Since: t0, Last: fence.Reading{At: t0.Add(-time.Minute)}}, slotLook},
		{"suspect reading On", fence.State{Phase: fence.Suspect, Since: t0, Last: fence.Reading{At: t0.Add(time.Second), Power: fence.PowerOn}}, slotWatch},
		{"suspect with a crash dump under way", fence.State{Phase: fence.Suspect, Since: t0, DiagnoseAt: t0}, slotFence},
		{"powering off", fence.State{Phase: fence.PoweringOff}, slotFence},
		{"confirming off", fence.State{Phase: fence.ConfirmingOff}, slotFence},
		{"tainting", fence.State{Phase: fence.Tainting}, slotFence},
		{"detaching (keep-off)", fence.State{Phase: fence.Detaching}, slotWatch},
		{"stuck", fence.State{Phase: fence.Stuck}, slotWatch},
		{"powering on", fence.State{Phase: fence.PoweringOn}, slotWatch},
		{"healthy", fence.State{}, slotWatch},
	} {
		if got := readKind(tc.s); got != tc.want {
			t.Errorf("%s: kind %d, want %d", tc.name, got, tc.want)
		}
	}
}

// Found in review: a first look parked while the slots were busy, whose
// node then left Suspect (its Lease renewed) and never asked again, kept
// every watching read out while it stayed parked, and with every slot free
// nothing released to pop it. Parked looks are woken first; they do not
// bar a watching read from a slot beyond the reserve.
func TestBMCSlotsAStaleParkedLookBarsNoWatchingRead(t *testing.T) {
	var w wakes
	s := newBMCSlots(4, w.wake) // one reserved
	for _, n := range []string{"a", "b", "c", "d"} {
		if !s.tryLook(n) {
			t.Fatal(n)
		}
	}
	for _, n := range []string{"e", "f", "g", "h", "i"} {
		if s.tryLook(n) {
			t.Fatal(n)
		}
	}
	for i := 0; i < 4; i++ {
		s.release()
	}
	// i renewed its Lease: Healthy, it never asks again.
	if !s.tryWatch("suspect-reading-on") {
		t.Fatalf("all %d slots free, no fence, yet a watching read got none (looks parked %v, woken %v)", s.free, s.looks.order, w.got)
	}
}
