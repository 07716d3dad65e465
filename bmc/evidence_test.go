package bmc

import (
	"testing"
	"time"
)

func TestFirstSeenKeepsTheFirstSightingOnOurClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := Evidence{Key: "SEL/1", Kind: EvidenceWatchdogExpired}
	b := Evidence{Key: "SEL/2", Kind: EvidenceOSCriticalStop}
	var f FirstSeen
	if got := f.Observe(t0, []Evidence{a}); !got[0].Equal(t0) {
		t.Fatalf("first read: %v", got)
	}
	// A read that misses a (a log service did not answer) forgets nothing.
	f.Observe(t0.Add(time.Second), []Evidence{b})
	got := f.Observe(t0.Add(time.Minute), []Evidence{b, a})
	if !got[0].Equal(t0.Add(time.Second)) || !got[1].Equal(t0) {
		t.Errorf("first seen %v, want b at +1s and a at +0s (never made new again)", got)
	}
}
