//go:build footprint

package memlimit

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestFootprintWithAndWithoutABudget shows what the budget buys on a
// process shaped like the agent at rest: a live set of small objects
// (LIVE_MIB, default 40) replaced steadily (decoded Lease renewals, pod
// updates), for 10 s. It runs itself as a child with and without
// GOMEMLIMIT=90MiB and prints each child's RSS:
//
//	go test -tags footprint -run Footprint -v ./internal/memlimit/
func TestFootprintWithAndWithoutABudget(t *testing.T) {
	if os.Getenv("FOOTPRINT_CHILD") != "" {
		churn(t)
		return
	}
	for _, env := range []string{"", "GOMEMLIMIT=90MiB"} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestFootprintWithAndWithoutABudget$", "-test.v")
		cmd.Env = append(os.Environ(), "FOOTPRINT_CHILD=1", "GOGC=")
		if env != "" {
			cmd.Env = append(cmd.Env, env)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "footprint:") {
				name := env
				if name == "" {
					name = "no GOMEMLIMIT"
				}
				fmt.Printf("%-17s %s\n", name, strings.TrimSpace(l))
			}
		}
	}
}

func churn(t *testing.T) {
	live := 40
	fmt.Sscan(os.Getenv("LIVE_MIB"), &live)
	const objSize = 512
	objs := make([][]byte, live<<20/objSize)
	for i := range objs {
		objs[i] = make([]byte, objSize)
	}
	var rssSum, n float64
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) {
		// About 20 MiB a second replaced: a busy agent's allocation rate.
		for range 20 << 20 / objSize / 10 {
			objs[rand.IntN(len(objs))] = make([]byte, objSize)
		}
		time.Sleep(100 * time.Millisecond)
		rssSum += float64(statusKiB(t, "VmRSS"))
		n++
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("footprint: live %d MiB: RSS mean %.1f MiB, peak %.1f MiB, heap in use %.1f MiB, GC cycles %d, GC CPU %.2f%%\n",
		live, rssSum/n/1024, float64(statusKiB(t, "VmHWM"))/1024, float64(ms.HeapInuse)/(1<<20), ms.NumGC, ms.GCCPUFraction*100)
}

func statusKiB(t *testing.T, key string) int {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			var kib int
			fmt.Sscan(rest, &kib)
			return kib
		}
	}
	return 0
}
