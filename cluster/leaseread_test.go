package cluster

import (
	"context"
	"testing"
	"time"
)

// The runner's live Lease read (fence/runner/leaseread.go) is Recheck: a
// node whose Lease the server holds, renewed as our view has it, reads as
// not renewed with its Lease present; one whose Lease is gone (a 404)
// reads as missing, which proves nothing of its renewals.
func TestRecheckSaysWhenTheLeaseIsMissing(t *testing.T) {
	h := newHarness(t, node("w1", readyUnknown(at(0))), lease("w1", at(0)))
	h.deliver(node("w1", readyUnknown(at(0))), lease("w1", at(0)))
	h.clock.SetTime(at(15 * time.Second))
	got, err := h.c.Recheck(context.Background(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	if got.LeaseRenewed || got.LeaseMissing {
		t.Fatalf("Recheck of a silent node with its Lease: LeaseRenewed %v LeaseMissing %v, want both false", got.LeaseRenewed, got.LeaseMissing)
	}

	h2 := newHarness(t, node("w2", readyUnknown(at(0))))
	h2.deliver(node("w2", readyUnknown(at(0))), lease("w2", at(0)))
	got, err = h2.c.Recheck(context.Background(), "w2")
	if err != nil {
		t.Fatal(err)
	}
	if !got.LeaseMissing {
		t.Fatal("Recheck of a node whose Lease the server does not hold: LeaseMissing false")
	}
}
