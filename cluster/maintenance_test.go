package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A drain's mark for 10 minutes, written by a laptop whose clock runs a
// day behind (Since): the expiry is counted on our clock, from when we
// first saw that value, never from Since.
const (
	markFor10m   = `{"by":"alice","reason":"kernel","since":"2025-02-28T10:00:00Z","cordoned":true,"for":"10m0s"}`
	markRenewed  = `{"by":"alice","reason":"kernel","since":"2025-02-28T10:05:00Z","cordoned":true,"for":"10m0s"}`
	markNoExpiry = `{"by":"alice","reason":"kernel","since":"2025-02-28T10:00:00Z","cordoned":true}`
)

func TestMaintenanceMarkExpiresOnOurClock(t *testing.T) {
	type look struct {
		at                   time.Duration
		mark                 string // delivered at that time ("" keeps the last)
		maintenance, expired bool
	}
	tests := []struct {
		name  string
		looks []look
	}{{
		name: "held for its duration from our first sight, then expired",
		looks: []look{
			{at: 0, mark: markFor10m, maintenance: true},
			{at: 9*time.Minute + 59*time.Second, maintenance: true},
			{at: 10 * time.Minute, expired: true},
			{at: time.Hour, expired: true},
		},
	}, {
		name: "a new value (the drain ran again) counts from when we see it",
		looks: []look{
			{at: 0, mark: markFor10m, maintenance: true},
			{at: 8 * time.Minute, mark: markRenewed, maintenance: true},
			{at: 17 * time.Minute, maintenance: true},
			{at: 18 * time.Minute, expired: true},
		},
	}, {
		name: "no duration: until undrain",
		looks: []look{
			{at: 0, mark: markNoExpiry, maintenance: true},
			{at: 1000 * time.Hour, maintenance: true},
		},
	}, {
		name: "a value set by hand: until removed",
		looks: []look{
			{at: 0, mark: "true", maintenance: true},
			{at: 1000 * time.Hour, maintenance: true},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			for i, l := range tt.looks {
				h.clock.SetTime(at(l.at))
				if l.mark != "" {
					h.deliver(node("w1", ready(at(l.at)), rv(string(rune('a'+i))), withAnnotation(AnnotationMaintenance, l.mark)))
				}
				v := h.view("w1").View
				if v.Maintenance != l.maintenance || v.MaintenanceExpired != l.expired {
					t.Errorf("at +%s: maintenance=%v expired=%v, want %v %v", l.at, v.Maintenance, v.MaintenanceExpired, l.maintenance, l.expired)
				}
			}
		})
	}
}

// The server-side checks before a taint (Recheck, ApplyTaint) judge the
// mark the same way: an expired mark does not stop the fence; a value we
// have not seen yet does, from now.
func TestExpiredMaintenanceMarkDoesNotStopTheFence(t *testing.T) {
	h := newHarness(t, withTokenOn(node("w1", readyUnknown(at(0)), withAnnotation(AnnotationMaintenance, markFor10m))), lease("w1", at(0)))
	h.deliver(withTokenOn(node("w1", readyUnknown(at(0)), withAnnotation(AnnotationMaintenance, markFor10m))), lease("w1", at(0)))
	h.clock.SetTime(at(10 * time.Minute))
	got, err := h.c.Recheck(context.Background(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Maintenance {
		t.Errorf("Recheck: maintenance with the mark expired on our clock")
	}
	if err := h.c.ApplyTaint(context.Background(), "w1", token); err != nil {
		t.Fatalf("ApplyTaint on a node whose mark expired: %v", err)
	}

	// A drain that runs again writes a new value: in force from now.
	h2 := newHarness(t, withTokenOn(node("w1", readyUnknown(at(0)), withAnnotation(AnnotationMaintenance, markRenewed))), lease("w1", at(0)))
	h2.deliver(withTokenOn(node("w1", readyUnknown(at(0)), withAnnotation(AnnotationMaintenance, markFor10m))), lease("w1", at(0)))
	h2.clock.SetTime(at(10 * time.Minute))
	got, err = h2.c.Recheck(context.Background(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(true, got.Maintenance); diff != "" {
		t.Errorf("Recheck of a mark the cache has not delivered: maintenance (-want +got):\n%s", diff)
	}
	if err := h2.c.ApplyTaint(context.Background(), "w1", token); !errors.Is(err, ErrMaintenance) {
		t.Fatalf("ApplyTaint = %v, want ErrMaintenance", err)
	}
}
