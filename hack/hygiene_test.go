package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A loop that runs work at most N at a time is errgroup.Group with SetLimit
// (golang.org/x/sync/errgroup), not a channel of N empty structs and a
// WaitGroup by hand (issue 23 found five). A channel of capacity 1 is a
// wake-up signal, not a limit; the runner's semaphore is one too, but
// shared by every node's worker for the runner's life, not a loop.
func TestNoHandRolledBoundedParallelLoops(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files", "*.go").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	sem := regexp.MustCompile(`make\(chan struct\{\}, ([^)]+)\)`)
	allowed := map[string]string{
		"fence/runner/runner.go": "opts.BMCConcurrency", // BMC calls of all workers, for the runner's life
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			continue // deleted in the work tree
		}
		for _, m := range sem.FindAllStringSubmatch(string(b), -1) {
			if m[1] == "1" || allowed[f] == m[1] {
				continue
			}
			t.Errorf("%s: %s: a bounded-parallel loop by hand; use errgroup.Group with SetLimit", f, m[0])
		}
	}
}
