package runner_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// slowDeletes is an API server slow to answer the force-deletes of
// terminating pods (a LIST of the node's pods, a GET of the node and a
// DELETE per pod): until hold, the deletes do nothing (the pods stay
// terminating); after it, each waits for open on the wall clock.
type slowDeletes struct {
	fencesim.Cluster
	holding atomic.Bool
	open    chan struct{}
	entered atomic.Int64
}

func (c *slowDeletes) DeleteTerminatingPods(ctx context.Context, node, token string) (int, error) {
	if !c.holding.Load() {
		return 0, nil
	}
	c.entered.Add(1)
	select {
	case <-c.open:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return c.Cluster.DeleteTerminatingPods(ctx, node, token)
}

// Issue 22, 1000 nodes × 30 pods (docs/scale/n1000): when the leader lost
// its Lease 130 s into 100 power losses, 31 of its 32 workers were in
// Detaching force-deletes, every detachPoll, on an API server that took up
// to 60 s to answer, and a suspect's first look had waited 85 s for a
// worker. A fence before its taint races the clock; force-deleting pods
// that the pod GC deletes too only hastens the detach. So at most a
// sixteenth of the workers force-delete at once, and a node that finds them
// all busy skips its pass (detachPoll brings it back): its worker is free
// for the next node.
func TestForceDeletesOnASlowAPIServerLeaveTheWorkersToFences(t *testing.T) {
	w := fencesim.NewWorld(t0, fence.DefaultPolicy(), 1)
	for i := 1; i <= 10; i++ {
		w.AddNode(fmt.Sprintf("n%02d", i), "a", machine.Timing{})
	}
	var tainted []string
	for i := 1; i <= 8; i++ {
		n := fmt.Sprintf("n%02d", i)
		tainted = append(tainted, n)
		if err := w.Node(n).BMC.Event(machine.EventPowerLoss); err != nil {
			t.Fatal(err)
		}
	}
	c := &slowDeletes{Cluster: fencesim.Cluster{W: w}, open: make(chan struct{})}
	const workers, share = 32, 2 // a sixteenth
	r := newRunner(t, w, c, func(o *runner.Options) { o.Workers, o.BMCConcurrency = workers, 4 })
	detaching := func() bool {
		for _, n := range tainted {
			if w.Node(n).Phase() != fence.Detaching.String() {
				return false
			}
		}
		return true
	}
	for i := 0; !detaching(); i++ {
		if i == 300 {
			t.Fatalf("the power losses were not all tainted in 5 minutes: %s", w.Summary())
		}
		syncFor(w, r, time.Second)
	}
	// The taint manager marks their pods terminating on the next tick;
	// the pod GC deletes them only PodGCInterval later.
	w.Clock.Step(time.Second)
	w.Advance()
	c.holding.Store(true)
	var wg sync.WaitGroup
	defer func() {
		close(c.open)
		wg.Wait()
	}()
	returned := make(chan string, len(tainted))
	for _, n := range tainted {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Sync(context.Background(), n)
			returned <- n
		}()
	}
	deadline := time.After(10 * time.Second)
	for back := 0; back < len(tainted)-share; back++ {
		select {
		case <-returned:
		case <-deadline:
			t.Fatalf("%d of %d Detaching syncs returned while the API server hung their force-deletes (%d in them): more than %d of %d workers would wait there", back, len(tainted), c.entered.Load(), share, workers)
		}
	}
	if got := c.entered.Load(); got != share {
		t.Errorf("%d force-deletes went to the hung API server, want %d (a sixteenth of %d workers): the others skip their pass", got, share, workers)
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
}
