package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// nodeSeries exports the per-node gauges, bmcfence_node_phase and
// bmcfence_node_fenceable, from the maps Phase and Fenceable keep, at
// collection time. One series per node each: the node's phase at 1 (a
// phase it is not in has no series), and its fenceability. Held as gauge
// vectors they cost 5.5 MiB of the agent's live heap at 1000 nodes (the
// phase gauge was one-hot over 12 phases: 12 000 series), for values the
// maps hold anyway.
type nodeSeries struct {
	m         *Metrics
	phase     *prometheus.Desc
	fenceable *prometheus.Desc
}

func newNodeSeries(m *Metrics) *nodeSeries {
	return &nodeSeries{
		m: m,
		phase: prometheus.NewDesc("bmcfence_node_phase",
			"1 for the phase each node is in: one series per node (the phases it is not in have none).",
			[]string{"node", "phase"}, nil),
		fenceable: prometheus.NewDesc("bmcfence_node_fenceable",
			"1 when the node's BMC answered the last probe correctly, 0 when not.",
			[]string{"node"}, nil),
	}
}

func (s *nodeSeries) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.phase
	ch <- s.fenceable
}

func (s *nodeSeries) Collect(ch chan<- prometheus.Metric) {
	m := s.m
	m.mu.Lock()
	out := make([]prometheus.Metric, 0, len(m.phases)+len(m.probed))
	for node, p := range m.phases {
		out = append(out, prometheus.MustNewConstMetric(s.phase, prometheus.GaugeValue, 1, node, p.String()))
	}
	for node := range m.probed {
		v := 1.0
		if m.unfenced[node] {
			v = 0
		}
		out = append(out, prometheus.MustNewConstMetric(s.fenceable, prometheus.GaugeValue, v, node))
	}
	m.mu.Unlock()
	// Sent outside the lock: the registry reads ch while other collectors
	// run, and Phase must not wait on a scrape.
	for _, x := range out {
		ch <- x
	}
}
