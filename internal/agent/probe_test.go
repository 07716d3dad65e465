package agent

import "testing"

// Issue 19: at rest with events on, polls fall to what the streams do not
// cover. A node whose BMC's stream is open is probed once in
// streamProbeEvery rounds, staggered; one without a stream, or not yet
// proven (never probed, or its last probe failed), every round; every
// node in the first.
func TestProbesFallWhileTheStreamIsOpen(t *testing.T) {
	const nodes = 25
	for _, c := range []struct {
		name              string
		connected, failed bool
		perNode           int // probes of each node in rounds 1..streamProbeEvery
	}{
		{"no stream", false, false, streamProbeEvery},
		{"stream open", true, false, 1},
		{"stream open, not proven (new node, last probe failed)", true, true, streamProbeEvery},
	} {
		for i := 0; i < nodes; i++ {
			if !probeDue(0, i, c.connected, c.failed) {
				t.Errorf("%s: node %d not probed in the first round", c.name, i)
			}
			n := 0
			for round := 1; round <= streamProbeEvery; round++ {
				if probeDue(round, i, c.connected, c.failed) {
					n++
				}
			}
			if n != c.perNode {
				t.Errorf("%s: node %d probed %d times in %d rounds, want %d", c.name, i, n, streamProbeEvery, c.perNode)
			}
		}
	}
	// Staggered: each round probes about a tenth of the open-stream nodes.
	for round := 1; round <= streamProbeEvery; round++ {
		n := 0
		for i := 0; i < nodes; i++ {
			if probeDue(round, i, true, false) {
				n++
			}
		}
		if n > nodes/streamProbeEvery+1 {
			t.Errorf("round %d probes %d of %d open-stream nodes at once", round, n, nodes)
		}
	}
}
