package fence_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/fence/fencesim"
)

// TestScenarios runs every timeline in testdata/scenarios through the real
// runner and the simulated cluster (fence/fencesim), checking the script's
// expectations and, on every write, the safety oracle. The scripts read like
// the seed timelines: kubelet stopped under and over five minutes, a ~10 s
// reboot, shutdowns, unreachable and lying BMCs, PoweringOn falling back to
// Off, slow power-on, flapping readiness, a node returning after fencing,
// maintenance, storms, crashes and split brains.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario scripts: %v", err)
	}
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".txt")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			res, err := fencesim.RunScript(string(src), start, 1)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, failure := range res.Failures {
				t.Error(failure)
			}
			if t.Failed() {
				for _, r := range res.World.Records {
					if r.Kind != "phase" {
						t.Logf("+%-8s %-3s %-9s %s %s", r.At.Sub(start), r.Node, r.Kind, r.Detail, r.Msg)
					}
				}
			}
		})
	}
}
