package runner_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// Issue 22: Run kept a goroutine and a timer per node (3052 goroutines at
// 1000 nodes). It now costs a fixed pool of workers and one timer, however
// many nodes it drives, and the one timer still brings every node back.
func TestRunCostsAFixedPoolAndOneTimerWhateverTheFleetSize(t *testing.T) {
	const nodes, workers = 200, 4
	w := fencesim.NewWorld(t0, fence.DefaultPolicy(), 1)
	for i := 0; i < nodes; i++ {
		w.AddNode(fmt.Sprintf("n%03d", i), "a", fencesimTiming)
	}
	w.Clock.Step(time.Second)
	w.Advance()
	seen := make(chan string, 4*nodes)
	r := newRunner(t, w, fencesim.Cluster{W: w}, func(o *runner.Options) {
		o.Recorder = phaseRecorder{seen: seen}
		o.Workers, o.BMCConcurrency = workers, workers
	})
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	synced := map[string]bool{}
	for deadline := time.After(30 * time.Second); len(synced) < nodes; {
		select {
		case n := <-seen:
			synced[n] = true
		case <-deadline:
			t.Fatalf("%d of %d nodes synced", len(synced), nodes)
		}
	}
	// Run's goroutine and its workers (the goroutine running Run counts).
	if got, want := runtime.NumGoroutine()-before, workers+1; got > want {
		buf := make([]byte, 1<<20)
		t.Errorf("Run holds %d goroutines for %d nodes, want at most %d (its loop and %d workers):\n%s", got, nodes, want, workers, buf[:runtime.Stack(buf, true)])
	}
	if got := w.Clock.Waiters(); got > 2 {
		t.Errorf("Run holds %d timers and tickers for %d nodes, want at most 2 (one timer, the resync ticker)", got, nodes)
	}
	// Every node is due again within a minute: the one timer must bring
	// each back. A sync still in flight when the clock moves is due a
	// minute after it ends, so the clock moves a minute at a time.
	clear(synced)
	for len(seen) > 0 {
		<-seen
	}
	for round := 0; len(synced) < nodes; round++ {
		if round == 10 {
			t.Fatalf("%d of %d nodes synced again in 10 minutes", len(synced), nodes)
		}
		w.Clock.Step(time.Minute)
		for quiet := time.After(2 * time.Second); len(synced) < nodes; {
			select {
			case n := <-seen:
				synced[n] = true
				continue
			case <-quiet:
			}
			break
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
}
