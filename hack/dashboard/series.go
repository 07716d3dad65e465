package main

import (
	"errors"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/metrics"
)

// Series are the series names the agent exports (a histogram's _bucket,
// _sum and _count, a summary's _sum and _count), each with its labels.
type Series map[string][]string

// Has reports whether the agent exports a series of that name.
func (s Series) Has(name string) bool { _, ok := s[name]; return ok }

// Exported reads the agent's registry (internal/metrics) after recording
// one of everything, so that every vector has a series to show. A metric
// added to the agent and not recorded here is not seen: the test then
// refuses a panel that uses it, saying so.
func Exported() (Series, error) {
	m := metrics.New()
	m.Phase("w1", fence.Suspect)
	m.Fence("tainted", "accepted", time.Second)
	m.Detached(time.Second, time.Second)
	m.Refused("Cooldown")
	m.KeptOff("w1")
	m.Contradiction("w1")
	m.BMC(bmc.Redfish, "dell", bmc.OpPowerStatus, time.Millisecond, errors.New("timeout"))
	m.Fenceable("w1", false)
	m.Risky("dryRun")
	m.Build("v0", "abc", "go1.26")
	m.RequestCollected("Taken")
	mfs, err := m.Registry.Gather()
	if err != nil {
		return nil, err
	}
	out := Series{}
	for _, mf := range mfs {
		var labels []string
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		name := mf.GetName()
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[name+"_bucket"] = append(slices.Clone(labels), "le")
			out[name+"_sum"], out[name+"_count"] = labels, labels
		case dto.MetricType_SUMMARY:
			out[name] = append(slices.Clone(labels), "quantile")
			out[name+"_sum"], out[name+"_count"] = labels, labels
		case dto.MetricType_COUNTER, dto.MetricType_GAUGE, dto.MetricType_UNTYPED:
			out[name] = labels
		}
	}
	return out, nil
}
