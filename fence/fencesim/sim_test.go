package fencesim

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/fence"
)

var simStart = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// TestSimulation runs seeded random scenarios through the real runner and
// the simulated cluster, with the safety oracle judging every write against
// the world's truth. It runs 100000 scenarios (fewer under -short or the
// race detector), prints the seed and plan of any failure, one summary
// line, and a line per fault class with how often the world produced it.
// Then (subtest "mutants") it proves the checks carry weight: every mutant
// build, one safety check disabled, must make the simulation fail.
//
// Reproduce a failure with: go test ./fence/fencesim -run 'TestSimulation$' -seed=N -v
func TestSimulation(t *testing.T) {
	if *mutantsOnly {
		t.Run("mutants", testMutants)
		return
	}
	n := simScenarios()
	if *seedFlag != 0 {
		n = 1
	}
	var next atomic.Uint64
	var failed atomic.Int64
	var first atomic.Uint64 // the lowest violating seed (stop-first)
	var mu sync.Mutex
	var reports []string
	report := map[uint64]string{}
	tally := &Tally{}
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
				if f := first.Load(); *stopFirst && f != 0 && i > f {
					return
				}
				seed := i
				if *seedFlag != 0 {
					seed = *seedFlag
				}
				violations, plan, w, faults := RunRandom(seed, simStart)
				tally.Add(faults)
				if *seedFlag != 0 {
					fmt.Printf("seed %d plan:\n  %s\nend: %s\n", seed, strings.Join(plan, "\n  "), w.Summary())
					for _, r := range w.Records {
						fmt.Printf("  +%-10s %-4s %-9s %s %s\n", r.At.Sub(simStart).Round(time.Millisecond), r.Node, r.Kind, r.Detail, r.Msg)
					}
				}
				if len(violations) == 0 {
					continue
				}
				for {
					f := first.Load()
					if (f != 0 && f <= seed) || first.CompareAndSwap(f, seed) {
						break
					}
				}
				r := fmt.Sprintf("seed %d: %d invariant violations\n  %s\n  plan:\n    %s\n  end: %s",
					seed, len(violations), strings.Join(violations, "\n  "), strings.Join(plan, "\n    "), w.Summary())
				mu.Lock()
				report[seed] = r
				if failed.Add(1) <= 5 {
					reports = append(reports, r)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if *stopFirst {
		// The mutation test's child: the parent reads these lines.
		if f := first.Load(); f != 0 {
			fmt.Printf("first violation: seed %d after %d scenarios\n%s\n", f, f, report[f])
		} else {
			fmt.Printf("no violation in %d scenarios\n", n)
		}
		return
	}
	for _, r := range reports {
		t.Error(r)
	}
	if len(report) > len(reports) {
		seeds := make([]uint64, 0, len(report))
		for s := range report {
			seeds = append(seeds, s)
		}
		slices.Sort(seeds)
		t.Errorf("all failing seeds: %v", seeds)
	}
	fmt.Printf("simulation: %d scenarios, %d invariant violations\n", n, failed.Load())
	tally.Print(os.Stdout)
	if missing := tally.Missing(); len(missing) > 0 && n >= 10000 && *seedFlag == 0 {
		t.Errorf("fault classes the world never produced in %d scenarios:\n  %s", n, strings.Join(missing, "\n  "))
	}
	t.Run("mutants", testMutants)
}

// mutantBudget is how many scenarios a mutant may take before it counts as
// surviving: every check is killed in a few hundred today; the budget is
// generous, so a mutant that survives it means the world cannot see that
// hazard.
const mutantBudget = 20000

var firstViolation = regexp.MustCompile(`first violation: seed (\d+) after (\d+) scenarios`)

// testMutants builds this package's test once per safety check with that
// check disabled (build tag "mutant", fence.mutant set at link time) and
// runs the simulation in it until the first violation. A check whose
// mutant survives is one the simulation cannot see.
func testMutants(t *testing.T) {
	switch {
	case testing.Short():
		t.Skip("-short: the mutants need a build per check")
	case raceEnabled:
		t.Skip("race detector: the mutants run in the full simulation")
	case *seedFlag != 0 || *scenariosFlag != 0:
		t.Skip("a partial run")
	case fence.Mutant() != "":
		t.Skip("this is a mutant")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	dir := t.TempDir()
	checks := fence.Checks()
	killed := 0
	for _, c := range checks {
		begin := time.Now()
		bin := filepath.Join(dir, "mutant-"+string(c)+".test")
		build := exec.Command(goTool, "test", "-c", "-o", bin, "-tags", "mutant",
			"-ldflags", "-X github.com/bmcfence/bmcfence/fence.mutant="+string(c), ".")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building the %s mutant: %v\n%s", c, err, out)
		}
		var out bytes.Buffer
		run := exec.Command(bin, "-test.run", "^TestSimulation$", "-test.count=1", "-stop-first", "-scenarios", strconv.Itoa(mutantBudget))
		run.Stdout, run.Stderr = &out, &out
		_ = run.Run() // a violation is what we want; the output says
		m := firstViolation.FindStringSubmatch(out.String())
		if m == nil {
			t.Errorf("mutant %s survived %d scenarios: the simulation cannot see this hazard\n%s", c, mutantBudget, tail(out.String(), 2000))
			fmt.Printf("  mutant %-20s SURVIVED %d scenarios (%s)\n", c, mutantBudget, time.Since(begin).Round(time.Second))
			continue
		}
		killed++
		what := ""
		if i := strings.Index(out.String(), m[0]); i >= 0 {
			rest := strings.SplitN(out.String()[i+len(m[0]):], "\n", 4)
			if len(rest) > 2 {
				what = strings.TrimSpace(rest[2])
			}
		}
		fmt.Printf("  mutant %-20s killed by seed %s after %s scenarios (%s): %s\n", c, m[1], m[2], time.Since(begin).Round(time.Second), what)
	}
	fmt.Printf("mutants: %d of %d killed\n", killed, len(checks))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
