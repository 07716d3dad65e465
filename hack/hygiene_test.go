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
// wake-up signal, not a limit.
func TestNoHandRolledBoundedParallelLoops(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files", "*.go").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	sem := regexp.MustCompile(`make\(chan struct\{\}, ([^)]+)\)`)
	allowed := map[string]bool{
		"fence/runner/runner.go: kubeletProbeConcurrency":       true, // a try-acquire: a probe is skipped, not queued, when 4 run
		"fence/runner/runner.go: forceDeleteShare(opts.Workers": true, // a try-acquire: a force-delete pass is skipped, not queued, when a sixteenth of the workers run one
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
			if m[1] == "1" || allowed[f+": "+m[1]] {
				continue
			}
			t.Errorf("%s: %s: a bounded-parallel loop by hand; use errgroup.Group with SetLimit", f, m[0])
		}
	}
}

// hack/codegen.sh runs every generator hack/codegen/go.mod pins as a tool
// (Go 1.24+ `tool` directives) with `go tool`, never a `go build` of its
// own into a directory behind a stamp.
func TestCodegenRunsItsGeneratorsWithGoTool(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join("codegen", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("codegen.sh")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)\ntool \((.*?)\)`).FindSubmatch(mod)
	if block == nil {
		t.Fatal("hack/codegen/go.mod has no tool block")
	}
	code := regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(string(script), "")
	if !strings.Contains(code, "go tool -modfile=hack/codegen/go.mod") {
		t.Errorf("hack/codegen.sh does not run its generators with go tool -modfile=hack/codegen/go.mod")
	}
	if strings.Contains(code, "go build") {
		t.Errorf("hack/codegen.sh builds with go build; go tool builds and caches the pinned tools itself")
	}
	for _, pkg := range strings.Fields(string(block[1])) {
		name := filepath.Base(pkg)
		if !regexp.MustCompile(`\bgen ` + regexp.QuoteMeta(name) + `\b`).MatchString(code) {
			t.Errorf("hack/codegen.sh does not run the pinned tool %s (gen %s …)", pkg, name)
		}
	}
}
