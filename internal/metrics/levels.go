package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bmcfence/bmcfence/fence/runner"
)

var _ runner.LevelRecorder = (*Metrics)(nil)

func newLevelFences() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bmcfence_fencing_level_fences_total", Help: "Out-of-service taints by the fencing level whose settled Off they rest on: 1 the BMC, 2 and below PDU outlets (a human's attestation is not counted).",
	}, []string{"level"})
	// Exported at 0 from the start, so the first fence through a level
	// shows in increase().
	c.WithLabelValues("1")
	c.WithLabelValues("2")
	return c
}

// LevelFence counts a taint by fencing level.
func (m *Metrics) LevelFence(level string) { m.levelFences.WithLabelValues(level).Inc() }
