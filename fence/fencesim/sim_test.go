package fencesim

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSimulation runs seeded random scenarios through the real runner and
// the simulated cluster, with the safety oracle checking every write. It runs
// 100000 scenarios (fewer under -short or the race detector), prints the seed
// and plan of any failure, and ends with one summary line.
//
// Reproduce a failure with: go test ./fence/fencesim -run Simulation -seed=N
func TestSimulation(t *testing.T) {
	n := simScenarios()
	if *seedFlag != 0 {
		n = 1
	}
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var next atomic.Uint64
	var failed atomic.Int64
	var mu sync.Mutex
	var reports []string
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > uint64(n) {
					return
				}
				seed := i
				if *seedFlag != 0 {
					seed = *seedFlag
				}
				violations, plan, w := RunRandom(seed, start, 8*time.Minute)
				if len(violations) == 0 {
					continue
				}
				if failed.Add(1) > 5 {
					continue // enough to go on
				}
				mu.Lock()
				reports = append(reports, fmt.Sprintf("seed %d: %d invariant violations\n  %s\n  plan:\n    %s\n  end: %s",
					seed, len(violations), strings.Join(violations, "\n  "), strings.Join(plan, "\n    "), w.Summary()))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, r := range reports {
		t.Error(r)
	}
	fmt.Printf("simulation: %d scenarios, %d invariant violations\n", n, failed.Load())
}
