// Package metrics defines the agent's Prometheus metrics (bmcfence_*) and
// implements the runner's Recorder and the inventory's BMC observer on them.
package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// Buckets for durations that span a second to a few minutes (failover,
// detach) and for BMC requests (milliseconds to the timeout).
var (
	fenceBuckets = []float64{1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 300, 600}
	bmcBuckets   = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
)

// Metrics holds every bmcfence metric on its own registry.
type Metrics struct {
	Registry *prometheus.Registry

	fences      *prometheus.CounterVec
	nodes       *nodeSeries // bmcfence_node_phase, bmcfence_node_fenceable
	refusals    *prometheus.CounterVec
	bmcDuration *prometheus.HistogramVec
	bmcErrors   *prometheus.CounterVec
	toTaint     prometheus.Histogram
	toDetach    prometheus.Histogram
	failover    prometheus.Histogram
	unfenceable prometheus.Gauge
	risky       *prometheus.GaugeVec
	build       *prometheus.GaugeVec
	keptOff     prometheus.Counter
	contradicts prometheus.Counter
	collected   *prometheus.CounterVec
	ipmiSuite   *prometheus.CounterVec
	own         []prometheus.Collector // the bmcfence_* ones above
	// eventStreams: the leader's BMC event streams by state.
	eventStreams *prometheus.GaugeVec

	mu       sync.Mutex
	phases   map[string]fence.Phase
	unfenced map[string]bool
	// probed: the nodes a probe has answered for (Probed).
	probed map[string]struct{}
	// exists, when set, says whether a node still exists: per-node series
	// are written only for nodes that do (SetNodes).
	exists func(node string) bool

	// levelFences counts taints by fencing level (levels.go).
	levelFences *prometheus.CounterVec
}

var _ runner.Recorder = (*Metrics)(nil)

// New registers the metrics, plus the Go and process collectors.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		fences: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bmcfence_fences_total", Help: "Out-of-service taints applied, by result and reason (accepted: Off settled after our ForceOff the BMC accepted; unassisted: Off outlasted the unassisted window after the BMC did not act on our ForceOff; attested: a human confirmed).",
		}, []string{"result", "reason"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bmcfence_storm_guard_refusals_total", Help: "Fences the storm guard refused, by reason.",
		}, []string{"reason"}),
		bmcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "bmcfence_bmc_request_duration_seconds", Help: "BMC operations by protocol, vendor (from the BMC's identity: a closed list, unknown until read) and operation.", Buckets: bmcBuckets,
		}, []string{"protocol", "vendor", "op"}),
		bmcErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bmcfence_bmc_errors_total", Help: "Failed BMC operations by protocol, vendor, operation and reason.",
		}, []string{"protocol", "vendor", "op", "reason"}),
		toTaint: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bmcfence_time_to_confirmed_off_seconds", Help: "From the failure's start (last heartbeat seen) to the taint, after a settled Off.", Buckets: fenceBuckets,
		}),
		toDetach: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bmcfence_time_to_detach_seconds", Help: "From the taint until no pod or VolumeAttachment is left on the node.", Buckets: fenceBuckets,
		}),
		failover: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bmcfence_failover_seconds", Help: "From the failure's start until the node's pods and volumes are released.", Buckets: fenceBuckets,
		}),
		unfenceable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bmcfence_unfenceable_nodes", Help: "Nodes whose BMC failed the last probe or that have no BMC entry.",
		}),
		risky: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bmcfence_risky_setting", Help: "1 for each setting in force that weakens a safety property or the agent's use (dryRun, insecureSkipVerify, plainHTTP, fromAnnotations, leaderElectionDisabled, metricsUnauthenticated, powerOffNotReadyAfter, emptyInventory, chassisPowerIgnored); the agent logs a warning for each at start.",
		}, []string{"setting"}),
		build: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bmcfence_build_info", Help: "Always 1; the labels say what the agent was built from.",
		}, []string{"version", "commit", "goversion"}),
		keptOff: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bmcfence_powered_on_during_fence_total", Help: "Machines found On between the taint and the end of detach, and forced off again.",
		}),
		contradicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bmcfence_contradictions_total", Help: "Fences stopped because the node renewed its Lease after our accepted ForceOff or a human's attestation (wrong BMC in the inventory, or a BMC reporting a cached state).",
		}),
		collected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bmcfence_requests_collected_total", Help: "Finished BMCFenceRequests deleted requests.ttl after their outcome, by outcome (Taken, Refused, Expired).",
		}, []string{"outcome"}),
		ipmiSuite: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bmcfence_ipmi_cipher_fallback_total", Help: "IPMI BMCs whose sessions fell back to the entry's cipherSuiteFallback (the BMC refused cipherSuite), counted once per BMC and change of suite, by the suite used; the agent logs a warning for each.",
		}, []string{"suite"}),
		phases:   map[string]fence.Phase{},
		unfenced: map[string]bool{},
		probed:   map[string]struct{}{},
	}
	m.nodes = newNodeSeries(m)
	m.own = []prometheus.Collector{m.fences, m.nodes, m.refusals, m.bmcDuration, m.bmcErrors, m.toTaint, m.toDetach, m.failover,
		m.unfenceable, m.risky, m.build, m.keptOff, m.contradicts, m.collected, m.ipmiSuite}
	m.eventStreams = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "bmcfence_event_streams", Help: "The leader's Redfish event streams (SSE, one per BMC) by state: connected; connecting; polling (the BMC offers none, refused it, or the stream broke: the engine learns from polling only).",
	}, []string{"state"})
	for _, st := range EventStreamStates {
		m.eventStreams.WithLabelValues(st)
	}
	m.own = append(m.own, m.eventStreams)
	m.Registry.MustRegister(m.own...)
	m.levelFences = newLevelFences()
	m.own = append(m.own, m.levelFences)
	m.Registry.MustRegister(m.levelFences)
	m.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every refusal reason is exported at 0 from the start: a counter
	// series that first appears at 1 has no increase() in Prometheus, so
	// the first refusal would raise no BMCFenceRefused alert.
	for r := fence.Admitted + 1; r.String() != "?"; r++ {
		m.refusals.WithLabelValues(r.String())
	}
	return m
}

// SetNodes tells the metrics which nodes exist: per-node series of a node
// that does not (deleted while a probe or a step was in flight: the
// runner's last word on a deleted node is its phase Healthy) are dropped
// instead of written, so a cluster that replaces its nodes does not grow
// its series forever. Call Forget when a node is deleted.
func (m *Metrics) SetNodes(exists func(node string) bool) {
	m.mu.Lock()
	m.exists = exists
	m.mu.Unlock()
}

// gone reports, under m.mu, whether node no longer exists, and forgets it
// if so.
func (m *Metrics) gone(node string) bool {
	if m.exists == nil || m.exists(node) {
		return false
	}
	m.forgetLocked(node)
	return true
}

// Describe sends the description of every bmcfence_* metric, with a value
// yet or not: what the agent exports (the README's list is checked
// against it, hack/readme_test.go).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.own {
		c.Describe(ch)
	}
}

// RequestCollected counts a finished request deleted by its TTL.
func (m *Metrics) RequestCollected(outcome string) { m.collected.WithLabelValues(outcome).Inc() }

// Phase records a node's phase (exported by nodeSeries).
func (m *Metrics) Phase(node string, p fence.Phase) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, seen := m.phases[node]; seen && old == p {
		return
	}
	if m.gone(node) {
		return
	}
	m.phases[node] = p
}

// Forget drops a deleted node's series.
func (m *Metrics) Forget(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked(node)
}

func (m *Metrics) forgetLocked(node string) {
	delete(m.phases, node)
	delete(m.unfenced, node)
	delete(m.probed, node)
	m.unfenceable.Set(float64(len(m.unfenced)))
}

func (m *Metrics) Fence(result, reason string, toTaint time.Duration) {
	m.fences.WithLabelValues(result, reason).Inc()
	m.toTaint.Observe(toTaint.Seconds())
}

func (m *Metrics) Detached(toDetach, failover time.Duration) {
	m.toDetach.Observe(toDetach.Seconds())
	m.failover.Observe(failover.Seconds())
}

func (m *Metrics) Refused(reason string) { m.refusals.WithLabelValues(reason).Inc() }

func (m *Metrics) KeptOff(string) { m.keptOff.Inc() }

func (m *Metrics) Contradiction(string) { m.contradicts.Inc() }

// BMC records one BMC operation. vendor is bmc.Vendor's (a closed list),
// so the series stay bounded: protocols × vendors × operations.
func (m *Metrics) BMC(protocol bmc.Protocol, vendor string, op bmc.Op, d time.Duration, err error) {
	m.bmcDuration.WithLabelValues(string(protocol), vendor, string(op)).Observe(d.Seconds())
	if err != nil {
		m.bmcErrors.WithLabelValues(string(protocol), vendor, string(op), bmc.Reason(err)).Inc()
	}
}

// CipherSuiteFallback counts a BMC whose IPMI sessions fell back to suite.
func (m *Metrics) CipherSuiteFallback(suite int) {
	m.ipmiSuite.WithLabelValues(strconv.Itoa(suite)).Inc()
}

// Fenceable records a node's probe result; it returns true when the node's
// fenceability changed (the caller emits an Event then).
func (m *Metrics) Fenceable(node string, ok bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone(node) {
		return false
	}
	wasUnfenceable := m.unfenced[node]
	m.probed[node] = struct{}{}
	if ok {
		delete(m.unfenced, node)
	} else {
		m.unfenced[node] = true
	}
	m.unfenceable.Set(float64(len(m.unfenced)))
	return wasUnfenceable == ok
}

// Probed reports whether a probe has answered for the node (since it
// was last forgotten), and whether that last answer was a failure.
func (m *Metrics) Probed(node string) (probed, failed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, probed = m.probed[node]
	return probed, m.unfenced[node]
}

// Risky marks a risky setting as in force (see config.Agent.Risks).
func (m *Metrics) Risky(setting string) { m.risky.WithLabelValues(setting).Set(1) }

// Build records the binary's version.
func (m *Metrics) Build(version, commit, goVersion string) {
	m.build.WithLabelValues(version, commit, goVersion).Set(1)
}

// EventStreamStates are the states bmcfence_event_streams counts, each
// exported from the start (at 0).
var EventStreamStates = []string{"connected", "connecting", "polling"}

// EventStreams sets how many of the leader's BMC event streams are in each
// state; a state not in counts is 0.
func (m *Metrics) EventStreams(counts map[string]int) {
	for _, st := range EventStreamStates {
		m.eventStreams.WithLabelValues(st).Set(float64(counts[st]))
	}
}
