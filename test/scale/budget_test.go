//go:build scale

package scale

import "testing"

// The harness runs the agent with the DaemonSet's memory budget, read from
// the manifest: a budget that vanished from deploy/base would silently
// measure another agent than the one users run.
func TestManifestMemoryBudgetIsTheDaemonSets(t *testing.T) {
	if got := manifestMemoryBudget(t); got != "90MiB" {
		t.Fatalf("deploy/base's GOMEMLIMIT = %q; want 90MiB (update this test with the manifest)", got)
	}
}
