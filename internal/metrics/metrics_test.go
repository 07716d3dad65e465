package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bmcfence/bmcfence/fence"
)

// One series per node: its phase at 1. The phases it left have none (the
// gauge was one-hot over every phase: 12 000 series at 1000 nodes).
func TestPhaseGaugeFollowsTheNode(t *testing.T) {
	m := New()
	m.Phase("w1", fence.Suspect)
	m.Phase("w1", fence.Tainting)
	m.Phase("w2", fence.Healthy)
	want := `
# HELP bmcfence_node_phase 1 for the phase each node is in: one series per node (the phases it is not in have none).
# TYPE bmcfence_node_phase gauge
bmcfence_node_phase{node="w1",phase="Tainting"} 1
bmcfence_node_phase{node="w2",phase="Healthy"} 1
`
	if err := testutil.CollectAndCompare(m.nodes, strings.NewReader(want), "bmcfence_node_phase"); err != nil {
		t.Error(err)
	}
	m.Forget("w1")
	m.Forget("w2")
	if n := testutil.CollectAndCount(m.nodes, "bmcfence_node_phase"); n != 0 {
		t.Errorf("%d series left for forgotten nodes", n)
	}
}

func TestFenceableGaugeIsTheLastProbe(t *testing.T) {
	m := New()
	m.Fenceable("w1", true)
	m.Fenceable("w2", true)
	m.Fenceable("w2", false)
	want := `
# HELP bmcfence_node_fenceable 1 when the node's BMC answered the last probe correctly, 0 when not.
# TYPE bmcfence_node_fenceable gauge
bmcfence_node_fenceable{node="w1"} 1
bmcfence_node_fenceable{node="w2"} 0
`
	if err := testutil.CollectAndCompare(m.nodes, strings.NewReader(want), "bmcfence_node_fenceable"); err != nil {
		t.Error(err)
	}
}

func TestFenceableReportsChangesOnly(t *testing.T) {
	m := New()
	steps := []struct {
		ok      bool
		changed bool
	}{{true, false}, {false, true}, {false, false}, {true, true}, {true, false}}
	for i, s := range steps {
		if got := m.Fenceable("w1", s.ok); got != s.changed {
			t.Errorf("step %d (ok=%v): changed = %v, want %v", i, s.ok, got, s.changed)
		}
	}
	m.Fenceable("w2", false)
	if got := testutil.ToFloat64(m.unfenceable); got != 1 {
		t.Errorf("unfenceable = %v, want 1", got)
	}
}

func TestEveryMetricIsNamespaced(t *testing.T) {
	m := New()
	m.Fence("tainted", "off", 0)
	m.Detached(0, 0)
	m.Refused("Cooldown")
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		n := mf.GetName()
		if !strings.HasPrefix(n, "bmcfence_") && !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") {
			t.Errorf("metric %s is not bmcfence_*", n)
		}
	}
}

func TestRiskySettingIsOneSeriesEach(t *testing.T) {
	m := New()
	m.Risky("dryRun")
	m.Risky("dryRun")
	m.Risky("plainHTTP")
	want := `
# HELP bmcfence_risky_setting 1 for each setting in force that weakens a safety property or the agent's use (dryRun, insecureSkipVerify, plainHTTP, fromAnnotations, leaderElectionDisabled, metricsUnauthenticated, powerOffNotReadyAfter, emptyInventory, chassisPowerIgnored); the agent logs a warning for each at start.
# TYPE bmcfence_risky_setting gauge
bmcfence_risky_setting{setting="dryRun"} 1
bmcfence_risky_setting{setting="plainHTTP"} 1
`
	if err := testutil.CollectAndCompare(m.risky, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// A node that no longer exists gets no series: what is written about it
// after its deletion (a probe, the runner's last step) drops what is left.
func TestSeriesOfAGoneNodeAreNotWritten(t *testing.T) {
	m := New()
	exists := map[string]bool{"w1": true, "w2": true}
	m.SetNodes(func(n string) bool { return exists[n] })
	m.Phase("w1", fence.Suspect)
	m.Fenceable("w1", false)
	m.Fenceable("w2", false)
	delete(exists, "w1")
	m.Phase("w1", fence.Healthy)
	if changed := m.Fenceable("w1", true); changed {
		t.Error("Fenceable reported a change for a node that is gone")
	}
	if n := testutil.CollectAndCount(m.nodes, "bmcfence_node_phase"); n != 0 {
		t.Errorf("%d phase series left for a gone node", n)
	}
	if n := testutil.CollectAndCount(m.nodes, "bmcfence_node_fenceable"); n != 1 {
		t.Errorf("%d fenceable series, want w2's only", n)
	}
	if got := testutil.ToFloat64(m.unfenceable); got != 1 {
		t.Errorf("unfenceable = %v, want 1 (w2)", got)
	}
}

// A counter series that first appears at 1 has no increase() in
// Prometheus: the chart's BMCFenceRefused alert would miss the first
// refusal of each reason. Every reason is exported at 0 from the start.
func TestRefusalsStartAtZeroForEveryReason(t *testing.T) {
	m := New()
	want := `
# HELP bmcfence_storm_guard_refusals_total Fences the storm guard refused, by reason.
# TYPE bmcfence_storm_guard_refusals_total counter
bmcfence_storm_guard_refusals_total{reason="APIViewStale"} 0
bmcfence_storm_guard_refusals_total{reason="ClusterUnhealthy"} 0
bmcfence_storm_guard_refusals_total{reason="Cooldown"} 0
bmcfence_storm_guard_refusals_total{reason="TooManyInFlight"} 0
bmcfence_storm_guard_refusals_total{reason="ZoneUnhealthy"} 0
`
	if err := testutil.CollectAndCompare(m.refusals, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// The probe schedule (internal/agent, probeDue) asks whether a node was
// ever probed and how its last probe ended; a forgotten node starts over.
func TestProbedRemembersTheLastAnswer(t *testing.T) {
	m := New()
	if probed, _ := m.Probed("w1"); probed {
		t.Fatal("w1 probed before any probe")
	}
	m.Fenceable("w1", false)
	if probed, failed := m.Probed("w1"); !probed || !failed {
		t.Errorf("after a failed probe: probed %v failed %v", probed, failed)
	}
	m.Fenceable("w1", true)
	if probed, failed := m.Probed("w1"); !probed || failed {
		t.Errorf("after a good probe: probed %v failed %v", probed, failed)
	}
	m.Forget("w1")
	if probed, _ := m.Probed("w1"); probed {
		t.Error("w1 still probed after it was forgotten")
	}
}
