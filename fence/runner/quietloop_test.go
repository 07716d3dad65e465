package runner_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// A Lease renewal of a quiet Healthy node (a hundred a second at 1000
// nodes) is not handed to a worker: its sync would step nothing and ask
// for the wake the node is already due at. Anything else about the node,
// here a human's request, still is.
func TestRunHandsAQuietNodesRenewalsToNoWorker(t *testing.T) {
	w := fencesim.NewWorld(t0, fence.DefaultPolicy(), 1)
	w.AddNode("n1", "a", fencesimTiming)
	w.Clock.Step(time.Second)
	w.Advance()
	r := newRunner(t, w, fencesim.Cluster{W: w})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v", err)
		}
	}()
	changed := fencesim.Cluster{W: w}.Changed()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (%d syncs handed)", what, runner.Handed(r))
			}
			time.Sleep(time.Millisecond) // real time: the loop runs in its goroutine
		}
	}
	// The first sync steps n1 once (Healthy, nothing to do: quiet).
	waitFor("n1's first sync", func() bool { return runner.Handed(r) >= 1 && len(changed) == 0 })
	// Let that sync end: its wake is set only when the worker reports.
	waitFor("n1 due", func() bool { return len(changed) == 0 && runner.Idle(r) })
	before := runner.Handed(r)
	for range 100 {
		// A change notice with the view as it was (the clock does not
		// move, so the kubelet renews nothing): the skip's own cost.
		w.Advance()
		w.Notify("n1")
		waitFor("the loop to take the renewal", func() bool { return len(changed) == 0 })
	}
	if got := runner.Handed(r) - before; got != 0 {
		t.Errorf("100 renewals of a quiet node handed %d syncs to workers, want none", got)
	}
	// A renewal that moves the node's signs of life (the kubelet renews
	// every LeaseRenewInterval), before the wake its last tick asked for.
	w.Clock.Step(fencesim.LeaseRenewInterval)
	w.Advance()
	w.Notify("n1")
	waitFor("the loop to take the renewal", func() bool { return len(changed) == 0 })
	if got := runner.Handed(r) - before; got != 0 {
		t.Errorf("a renewal %s later handed %d syncs to workers, want none", fencesim.LeaseRenewInterval, got)
	}
	w.Request("n1", fence.Command{Kind: fence.CmdUnfence, User: "alice", SeenAt: w.Clock.Now()})
	waitFor("the request's sync", func() bool { return runner.Handed(r) > before })
}
