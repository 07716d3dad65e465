package fencesim

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
)

// Fault classes the randomized simulation generates (issue 10, Deliver 9).
// Each is counted when it actually happened in a scenario, so the summary
// shows the world really produced it, not that the generator meant to.
const (
	faultWrongEntry     = "1a  BMC reads Off for a running machine: wrong inventory entry"
	faultCaching        = "1b  BMC reads Off for a running machine: caching BMC"
	faultDropped        = "1c  BMC accepts a ForceOff and drops it; a watchdog power-cycles later"
	faultLiesOff        = "1d  BMC accepts and reads Off while the machine runs (Lease or storm can tell)"
	faultNotReadyAlive  = "2   kubelet alive but NotReady (runtime or CNI down)"
	faultRestart        = "3   restart or power cycle with a 1-30 s off-dwell"
	faultRecreate       = "4   node deleted and re-created under the same name"
	faultInventory      = "5   inventory entry changed mid-run"
	faultUUID           = "5   Node systemUUID changed mid-run"
	faultReplicas       = "6   replicas with skewed clocks (up to ±30 s)"
	faultFailover       = "6   failover (standby, fresh process, old leader)"
	faultPause          = "6   leader paused between decision and write"
	faultSplitBrain     = "6   split brain"
	faultStatusFirst    = "6   kubelet status update before its Lease renewal, around a state persist"
	faultPauseInCall    = "6   leader paused between two calls of one write (list and delete, read and patch)"
	faultInterleave     = "7   workers interleaved between decision and write"
	faultWriteOutage    = "8   API write outage (every write fails, up to 10 min)"
	faultFrozenView     = "8   stale (frozen) API view"
	faultAPIErrors      = "8   API errors (a fraction of calls fail)"
	faultStaleRequest   = "9   stale request (taken long after it was written)"
	faultReplay         = "9   replayed request"
	faultWrongConfirm   = "9   wrong confirm against a live witness"
	faultPowerLoss      = "x   power loss"
	faultHang           = "x   OS hang"
	faultShutdown       = "x   shutdown"
	faultKubeletStop    = "x   kubelet stopped"
	faultUnreachable    = "x   BMC unreachable"
	faultLiar           = "x   BMC ignores commands"
	faultMaintenance    = "x   maintenance"
	faultPartition      = "x   storm or partition (kubelets alive, cannot renew)"
	faultKeepOff        = "x   machine powered on while tainted, volumes attached"
	faultHuman          = "x   human fence, confirm, abort, unfence"
	faultForeignTaint   = "x   foreign out-of-service taint"
	faultPodsUnlisted   = "x   pods of a node at its taint not listed yet"
	faultPowerOnByHuman = "x   machine powered on by someone else"
	// Hung-node evidence (issue 18): a real expiry, and each lie.
	faultHungEvidence = "h   hung node whose BMC logged a watchdog expiry (timer use SMS-OS) or an OS critical stop"
	faultEvidenceLie  = "h   BMC evidence on a live machine that must not count"
	// faultOffForRunning is not generated directly: it counts reads that
	// answered Off while the node's machine ran (wrong entry, cache).
	faultOffForRunning = "1   BMC answered Off while its node's machine ran"
)

// Required lists the fault classes every full run must produce (issue 10,
// Deliver 9, and the faults the simulation had before).
var Required = []string{
	faultWrongEntry, faultCaching, faultNotReadyAlive, faultRestart, faultRecreate, faultInventory, faultUUID,
	faultDropped, faultLiesOff, faultStatusFirst, faultPauseInCall,
	faultReplicas, faultFailover, faultPause, faultSplitBrain, faultInterleave, faultWriteOutage, faultFrozenView,
	faultAPIErrors, faultStaleRequest, faultReplay, faultWrongConfirm, faultPowerLoss, faultHang, faultShutdown,
	faultKubeletStop, faultUnreachable, faultLiar, faultMaintenance, faultPartition, faultKeepOff, faultHuman,
	faultHungEvidence, faultEvidenceLie,
	faultEvents, faultPodsUnlisted,
}

// Tally adds up fault classes over many scenarios. Safe for concurrent use.
type Tally struct {
	mu        sync.Mutex
	scenarios map[string]int // scenarios in which the class happened
	times     map[string]int // how many times it happened
}

// Add counts one scenario's faults.
func (t *Tally) Add(faults map[string]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.scenarios == nil {
		t.scenarios, t.times = map[string]int{}, map[string]int{}
	}
	for k, v := range faults {
		if v > 0 {
			t.scenarios[k]++
			t.times[k] += v
		}
	}
}

// Missing lists the required classes that never happened.
func (t *Tally) Missing() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, k := range Required {
		if t.scenarios[k] == 0 {
			out = append(out, k)
		}
	}
	return out
}

// Print writes one line per class: in how many scenarios it happened and
// how often; detail lines ("class/what") follow their class.
func (t *Tally) Print(out io.Writer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]string, 0, len(t.scenarios))
	for k := range t.scenarios {
		keys = append(keys, k)
	}
	for _, k := range Required {
		if t.scenarios[k] == 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		label := "fault " + k
		if i := strings.IndexByte(k, '/'); i >= 0 {
			label = "      ↳ " + k[i+1:]
		}
		fmt.Fprintf(out, "  %-78s %7d scenarios %9d times\n", label, t.scenarios[k], t.times[k])
	}
}
