//go:build scale

package scale

import "testing"

// The harness runs the agent with the DaemonSet's memory budget, read from
// the manifest: none set there, the agent takes 90% of limits.memory (256Mi)
// in its container, and so must the harness's agent, which runs outside
// one. A budget that changed silently would measure another agent than the
// one users run.
func TestManifestMemoryBudgetIsTheDaemonSets(t *testing.T) {
	if got, want := manifestMemoryBudget(t), "241591910"; got != want {
		t.Fatalf("deploy/base's memory budget = %q bytes; want %s (90%% of 256Mi; update this test with the manifest)", got, want)
	}
}
