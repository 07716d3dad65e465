package config

import (
	"strings"
	"testing"
)

// Every merged per-node policy is validated at load (issue 17, defect 7):
// the agent's policy with inventory.defaults' settle windows (what nodes from
// BareMetalHosts, annotations and entries without windows of their own get),
// and with each entry's own. A settle window at least as long as the
// unassisted window would let an Off we did not cause settle inside an
// off-dwell that long: refused, each with one line naming the field that
// set it and what to fix.
func TestMergedPolicySettleWindowsAreValidated(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // each the whole of one line, in order; nil: valid
	}{
		{"defaults longer than the unassisted window", "inventory:\n  defaults: {settleWindow: 90s}\n", []string{
			"inventory.defaults.settleWindow = 1m30s: not shorter than policy.unassistedSettleWindow = 1m0s, so an Off we did not cause could settle inside an off-dwell that long; nodes from BareMetalHosts, annotations and entries without settle windows of their own get both: set inventory.defaults.unassistedSettleWindow longer than 1m30s, or shorten inventory.defaults.settleWindow",
			"inventory.defaults: with inventory.defaults.settleWindow = 1m30s: policy.maxReadGap = 30s: must be between 45s (policy.settleWindow/(settleReads-1)) and 1h0m0s",
		}},
		{"defaults equal to the unassisted window", "inventory:\n  defaults: {settleWindow: 60s}\n", []string{
			"inventory.defaults.settleWindow = 1m0s: not shorter than policy.unassistedSettleWindow = 1m0s",
		}},
		{"defaults raise both", "inventory:\n  defaults: {settleWindow: 50s, unassistedSettleWindow: 3m}\n", nil},
		{"an entry's settle window", "inventory:\n  nodes:\n    - {name: w1, address: https://a, settleWindow: 60s}\n", []string{
			"inventory.nodes[0] (w1).settleWindow = 1m0s: not shorter than policy.unassistedSettleWindow = 1m0s, so an Off we did not cause could settle inside an off-dwell that long: set inventory.nodes[0].unassistedSettleWindow longer than 1m0s, or shorten inventory.nodes[0].settleWindow",
		}},
		{"an entry's unassisted window under the defaults' settle window", "inventory:\n  defaults: {settleWindow: 20s}\n  nodes:\n    - {name: w1, address: https://a, unassistedSettleWindow: 15s}\n", []string{
			"inventory.nodes[0] (w1).unassistedSettleWindow = 15s: not longer than inventory.defaults.settleWindow = 20s",
		}},
		{"the policy itself", "policy:\n  settleWindow: 60s\n", []string{
			"policy.settleWindow = 1m0s: not shorter than policy.unassistedSettleWindow = 1m0s",
		}},
		{"an entry's settle window breaks another rule", "inventory:\n  nodes:\n    - {name: w1, address: https://a, settleWindow: 70s, unassistedSettleWindow: 5m}\n", []string{
			"inventory.nodes[0] (w1): with inventory.nodes[0].settleWindow = 1m10s and inventory.nodes[0].unassistedSettleWindow = 5m0s: policy.maxReadGap = 30s: must be between 35s (policy.settleWindow/(settleReads-1)) and 1h0m0s",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadFile(t, tt.yaml, nil)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Load = %v, want valid", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Load succeeded, want %q", tt.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("line %d:\n got %s\nwant %s…", i+1, lines[i], w)
				}
			}
		})
	}
}
