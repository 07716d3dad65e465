package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/model/value"
	promqlengine "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/metrics"
)

// rulesFile holds the chart's alerting rules (the PrometheusRule's spec,
// with the chart's default thresholds), kept what `helm template` renders
// by deploy's TestPrometheusRulesFileIsTheChart: this module has no helm.
var rulesFile = filepath.Join("..", "..", "deploy", "testdata", "prometheus-rules.yaml")

// How the chart's ServiceMonitor has the agent scraped: Prometheus
// Operator names the job after the Service it selects (the chart sets no
// jobLabel; charts/bmcfence/templates/service.yaml names it) and labels
// each target with its namespace.
const (
	scrapeJob       = "bmcfence-agent-metrics"
	scrapeNamespace = "bmcfence-system"
	// step is the ServiceMonitor's default interval, and the rules'
	// evaluation interval here.
	step = 30 * time.Second
)

// replica is one agent pod: its own registry, as the real agent has.
type replica struct {
	pod  string
	m    *metrics.Metrics
	down bool
	// last are the series of the last scrape, for staleness markers.
	last map[uint64]labels.Labels
}

// cluster is what the scenarios change: two agent replicas (the chart's
// default), the leader fencing, the follower only serving its metrics.
type cluster struct {
	leader, follower *replica
	// bmcOps and bmcErrors are the leader's BMC operations per scrape
	// interval (probes and readings), and how many of them fail.
	bmcOps, bmcErrors int
}

func (c *cluster) phases(node string, ps ...fence.Phase) {
	for _, p := range ps {
		c.leader.m.Phase(node, p)
	}
}

// event is something the agent records at a time into the scenario.
type event struct {
	at time.Duration
	do func(c *cluster)
}

func at(d time.Duration, do func(c *cluster)) event { return event{d, do} }

// fenceOf is a successful fence of node as the runner records it, one
// phase per scrape interval: read, ForceOff, a settled Off, the taint,
// detach.
func fenceOf(node string, start time.Duration) []event {
	var evs []event
	for i, p := range []fence.Phase{fence.Suspect, fence.PoweringOff, fence.ConfirmingOff, fence.Tainting} {
		evs = append(evs, at(start+time.Duration(i)*step, func(c *cluster) { c.phases(node, p) }))
	}
	evs = append(evs,
		at(start+4*step, func(c *cluster) {
			c.leader.m.Fence("tainted", "accepted", 90*time.Second)
			c.phases(node, fence.Detaching)
		}),
		at(start+6*step, func(c *cluster) {
			c.leader.m.Detached(time.Minute, 3*time.Minute)
			c.phases(node, fence.Fenced)
		}))
	return evs
}

type alertScenario struct {
	name   string
	length time.Duration
	events []event
	// want: the alerts that must fire at some time in the scenario; any
	// other alert must never fire.
	want []string
	// quietAfter, when set: no alert may be firing from then on.
	quietAfter time.Duration
}

var minute = time.Minute

var alertScenarios = []alertScenario{
	{name: "a healthy cluster, a BMC timing out now and then", length: 90 * minute},
	{name: "successful fences, one after the other", length: 60 * minute,
		events: slices.Concat(fenceOf("w1", 5*minute), fenceOf("w2", 25*minute))},
	{name: "a fenced node comes back", length: 45 * minute,
		events: slices.Concat(fenceOf("w1", 5*minute), []event{
			at(20*minute, func(c *cluster) { c.phases("w1", fence.PoweringOn) }),
			at(21*minute, func(c *cluster) { c.phases("w1", fence.Recovering) }),
			at(23*minute, func(c *cluster) { c.phases("w1", fence.Untainting, fence.Healthy) }),
		})},
	{name: "a fence stuck longer than stuckFor", length: 40 * minute, want: []string{"BMCFenceStuck"},
		events: []event{
			at(5*minute, func(c *cluster) { c.phases("w1", fence.Suspect) }),
			at(6*minute, func(c *cluster) { c.phases("w1", fence.PoweringOff) }),
			at(8*minute, func(c *cluster) { c.phases("w1", fence.Stuck) }),
		}},
	{name: "a stuck fence a human aborts within stuckFor", length: 40 * minute,
		events: []event{
			at(5*minute, func(c *cluster) { c.phases("w1", fence.Suspect, fence.PoweringOff) }),
			at(8*minute, func(c *cluster) { c.phases("w1", fence.Stuck) }),
			at(18*minute, func(c *cluster) { c.phases("w1", fence.Healthy) }),
		}},
	{name: "a fence that does not finish", length: 40 * minute, want: []string{"BMCFenceInProgressTooLong"},
		events: []event{
			at(5*minute, func(c *cluster) {
				c.phases("w1", fence.Suspect, fence.PoweringOff, fence.ConfirmingOff, fence.Tainting)
			}),
			at(6*minute, func(c *cluster) { c.phases("w1", fence.Detaching) }),
		}},
	{name: "a node unfenceable for 15 minutes", length: 30 * minute, want: []string{"BMCFenceUnfenceableNodes"},
		events: []event{
			at(5*minute, func(c *cluster) { c.leader.m.Fenceable("w2", false) }),
			at(20*minute, func(c *cluster) { c.leader.m.Fenceable("w2", true) }),
		}},
	{name: "a probe fails once", length: 30 * minute,
		events: []event{
			at(5*minute, func(c *cluster) { c.leader.m.Fenceable("w2", false) }),
			at(7*minute, func(c *cluster) { c.leader.m.Fenceable("w2", true) }),
		}},
	// The BMC said Off while the node renewed its Lease: the wrong BMC in
	// the inventory, or a BMC reporting a cached state. The runner stops
	// the fence (Stuck) and counts it.
	{name: "a contradiction", length: 40 * minute, want: []string{"BMCFenceContradiction", "BMCFenceStuck"},
		events: []event{
			at(5*minute, func(c *cluster) { c.phases("w1", fence.Suspect, fence.PoweringOff) }),
			at(6*minute, func(c *cluster) { c.phases("w1", fence.ConfirmingOff) }),
			at(7*minute, func(c *cluster) {
				c.leader.m.Contradiction("w1")
				c.phases("w1", fence.Stuck)
			}),
		}},
	{name: "a contradiction an hour and more ago", length: 120 * minute, want: []string{"BMCFenceContradiction", "BMCFenceStuck"},
		events: []event{
			at(5*minute, func(c *cluster) { c.phases("w1", fence.Suspect, fence.PoweringOff, fence.ConfirmingOff) }),
			at(7*minute, func(c *cluster) {
				c.leader.m.Contradiction("w1")
				c.phases("w1", fence.Stuck)
			}),
			at(40*minute, func(c *cluster) { c.phases("w1", fence.Healthy) }), // a human aborted it
		}, quietAfter: 70 * minute},
	// Something turned the machine on under the taint (a power-restore
	// policy, a person); the runner forced it off again and counted it.
	{name: "a machine powered on during detach", length: 40 * minute, want: []string{"BMCFencePoweredOnDuringFence"},
		events: slices.Concat(fenceOf("w1", 5*minute), []event{
			at(5*minute+5*step, func(c *cluster) { c.leader.m.KeptOff("w1") }),
		})},
	// The storm guard counts a refusal when a node's verdict turns to it,
	// not on every retry: the first of each reason must be seen.
	{name: "the storm guard refuses fences", length: 40 * minute, want: []string{"BMCFenceRefused"},
		events: []event{
			at(5*minute, func(c *cluster) {
				c.phases("w1", fence.Suspect)
				c.phases("w2", fence.Suspect)
				c.leader.m.Refused("ClusterUnhealthy")
				c.leader.m.Refused("ClusterUnhealthy")
			}),
		}},
	{name: "a risky setting in force", length: 75 * minute, want: []string{"BMCFenceRiskySetting"},
		events: []event{at(0, func(c *cluster) {
			for _, r := range []*replica{c.leader, c.follower} {
				r.m.Risky(config.RiskInsecureSkipVerify)
			}
		})}},
	{name: "BMC errors over the rate", length: 40 * minute, want: []string{"BMCFenceBMCErrors"},
		events: []event{
			at(5*minute, func(c *cluster) { c.bmcOps, c.bmcErrors = 60, 30 }), // one error a second
			at(30*minute, func(c *cluster) { c.bmcOps, c.bmcErrors = 4, 0 }),
		}},
	{name: "one replica down", length: 30 * minute,
		events: []event{at(5*minute, func(c *cluster) { c.follower.down = true })}},
	{name: "every replica down", length: 30 * minute, want: []string{"BMCFenceAgentDown"},
		events: []event{at(5*minute, func(c *cluster) { c.leader.down, c.follower.down = true, true })}},
}

// Every alert the chart renders, evaluated by Prometheus's own rule manager
// over series the agent's registry (internal/metrics) really exports,
// scraped as the chart's ServiceMonitor has them scraped: each fires when
// what it names happens, and none fires on a healthy cluster or a
// successful fence.
func TestAlertsFireWhenTheyShould(t *testing.T) {
	rgs := parseRules(t)
	var alerts []string
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatalf("%s has no alerting rule", rulesFile)
	}
	shown := map[string]bool{}
	for _, sc := range alertScenarios {
		for _, a := range sc.want {
			shown[a] = true
		}
	}
	for _, a := range alerts {
		if !shown[a] {
			t.Errorf("alert %s: no scenario makes it fire; add one", a)
		}
	}
	for _, sc := range alertScenarios {
		t.Run(sc.name, func(t *testing.T) {
			fired := evaluate(t, sc)
			var got []string
			for a := range fired {
				got = append(got, a)
			}
			sort.Strings(got)
			want := slices.Sorted(slices.Values(sc.want))
			if !slices.Equal(got, want) {
				var seen []string
				for _, a := range got {
					seen = append(seen, fmt.Sprintf("%s (first firing at %v: %s)", a, fired[a].at, fired[a].labels))
				}
				t.Errorf("fired %v, want %v", seen, want)
			}
			if sc.quietAfter > 0 {
				for _, a := range got {
					if fired[a].last >= sc.quietAfter {
						t.Errorf("%s still firing at %v, want resolved from %v on", a, fired[a].last, sc.quietAfter)
					}
				}
			}
		})
	}
}

// parseRules reads the rule file as Prometheus does (promtool check rules).
func parseRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	rgs, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", rulesFile, errs)
	}
	return rgs
}

type firing struct {
	// at is when the alert first fired, with labels; last, the last
	// evaluation it was firing at.
	at, last time.Duration
	labels   string
}

// evaluate scrapes the scenario's replicas and evaluates the rules every
// step, as Prometheus does; it returns the alerts that fired, with when
// each first fired.
func evaluate(t *testing.T, sc alertScenario) map[string]firing {
	t.Helper()
	ctx := context.Background()
	db := teststorage.New(t)
	engine := promqlengine.NewEngine(promqlengine.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	mgr := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(engine, db),
		AppendableV2: db,
		Queryable:    db,
		Context:      ctx,
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Parser:       promql,
	})
	groups, errs := mgr.LoadGroups(step, labels.EmptyLabels(), "", nil, false, rulesFile)
	if len(errs) > 0 {
		t.Fatalf("%s: %v", rulesFile, errs)
	}
	for _, g := range groups {
		for _, r := range g.AlertingRules() {
			r.SetRestored(true) // a Prometheus that has been running: no for-state to restore
		}
	}

	c := &cluster{
		leader:   &replica{pod: "bmcfence-agent-a", m: metrics.New()},
		follower: &replica{pod: "bmcfence-agent-b", m: metrics.New()},
		bmcOps:   4,
	}
	for _, r := range []*replica{c.leader, c.follower} {
		r.m.Build("v0.0.0-test", "abc", "go1.26")
	}
	for _, n := range []string{"w1", "w2"} {
		c.phases(n, fence.Healthy)
		c.leader.m.Fenceable(n, true)
	}
	events := slices.Clone(sc.events)
	slices.SortStableFunc(events, func(a, b event) int { return int(a.at - b.at) })

	start := time.Unix(1_700_000_000, 0).UTC()
	fired := map[string]firing{}
	for i, now := 0, time.Duration(0); now <= sc.length; i, now = i+1, now+step {
		for len(events) > 0 && events[0].at <= now {
			events[0].do(c)
			events = events[1:]
		}
		// The leader's BMC traffic: probes and power readings, now and then
		// a timeout (one in ten minutes) on a healthy cluster.
		for k := range c.bmcOps {
			var err error
			if k < c.bmcErrors || c.bmcErrors == 0 && k == 0 && i%20 == 19 {
				err = fmt.Errorf("GET /redfish/v1/Systems/1: %w", bmc.ErrTimeout)
			}
			c.leader.m.BMC(bmc.Redfish, "dell", bmc.OpPowerStatus, 20*time.Millisecond, err)
		}
		ts := start.Add(now)
		for _, r := range []*replica{c.leader, c.follower} {
			if err := scrape(ctx, db, r, ts); err != nil {
				t.Fatal(err)
			}
		}
		for _, g := range groups {
			g.Eval(ctx, ts)
			for _, r := range g.Rules() {
				if err := r.LastError(); err != nil {
					t.Fatalf("at %v: rule %s: %v", now, r.Name(), err)
				}
			}
			for _, r := range g.AlertingRules() {
				for _, a := range r.ActiveAlerts() {
					if a.State != rules.StateFiring {
						continue
					}
					f, ok := fired[r.Name()]
					if !ok {
						f = firing{at: now, labels: a.Labels.String()}
					}
					f.last = now
					fired[r.Name()] = f
				}
			}
		}
	}
	return fired
}

// scrape appends what Prometheus would store from one scrape of r at ts:
// up, the agent's bmcfence_ series with the target's labels, and
// staleness markers for the series gone since the last scrape (all of
// them when the target is down).
func scrape(ctx context.Context, db storage.AppendableV2, r *replica, ts time.Time) error {
	target := []string{"job", scrapeJob, "namespace", scrapeNamespace, "service", scrapeJob,
		"endpoint", "metrics", "pod", r.pod, "instance", r.pod + ":9500"}
	app := db.AppenderV2(ctx)
	add := func(ls labels.Labels, v float64) error {
		_, err := app.Append(0, ls, 0, ts.UnixMilli(), v, nil, nil, storage.AOptions{})
		return err
	}
	up := 0.0
	now := map[uint64]labels.Labels{}
	if !r.down {
		up = 1
		mfs, err := r.m.Registry.Gather()
		if err != nil {
			return err
		}
		for _, mf := range mfs {
			if !strings.HasPrefix(mf.GetName(), "bmcfence_") {
				continue // the Go and process collectors
			}
			for _, mt := range mf.GetMetric() {
				for name, v := range samples(mf.GetName(), mf.GetType(), mt) {
					b := labels.NewScratchBuilder(0)
					b.Add(labels.MetricName, name.metric)
					for _, l := range mt.GetLabel() {
						b.Add(l.GetName(), l.GetValue())
					}
					if name.le != "" {
						b.Add("le", name.le)
					}
					for i := 0; i < len(target); i += 2 {
						b.Add(target[i], target[i+1])
					}
					b.Sort()
					ls := b.Labels()
					now[ls.Hash()] = ls
					if err := add(ls, v); err != nil {
						return err
					}
				}
			}
		}
	}
	for h, ls := range r.last {
		if _, ok := now[h]; !ok {
			if err := add(ls, math.Float64frombits(value.StaleNaN)); err != nil {
				return err
			}
		}
	}
	r.last = now
	if err := add(labels.FromStrings(append([]string{labels.MetricName, "up"}, target...)...), up); err != nil {
		return err
	}
	return app.Commit()
}

type sampleName struct{ metric, le string }

// samples are a metric's series as the text format exposes them.
func samples(name string, typ dto.MetricType, m *dto.Metric) map[sampleName]float64 {
	switch typ {
	case dto.MetricType_COUNTER:
		return map[sampleName]float64{{metric: name}: m.GetCounter().GetValue()}
	case dto.MetricType_GAUGE:
		return map[sampleName]float64{{metric: name}: m.GetGauge().GetValue()}
	case dto.MetricType_HISTOGRAM:
		h := m.GetHistogram()
		out := map[sampleName]float64{
			{metric: name + "_sum"}: h.GetSampleSum(), {metric: name + "_count"}: float64(h.GetSampleCount()),
			{metric: name + "_bucket", le: "+Inf"}: float64(h.GetSampleCount()),
		}
		for _, b := range h.GetBucket() {
			out[sampleName{name + "_bucket", fmt.Sprint(b.GetUpperBound())}] = float64(b.GetCumulativeCount())
		}
		return out
	default:
		return map[sampleName]float64{{metric: name}: m.GetUntyped().GetValue()}
	}
}

// Every alert's expression names only series the agent exports (or
// Prometheus's own up), matched and grouped by labels they have.
func TestAlertsNameOnlyExportedSeries(t *testing.T) {
	series := exported(t)
	series["up"] = []string{"job", "namespace", "service", "endpoint", "pod", "instance"}
	rgs := parseRules(t)
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			expr, err := promql.ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", r.Alert, err)
				continue
			}
			for _, p := range seriesProblems(expr, series) {
				t.Errorf("%s: %s", r.Alert, p)
			}
		}
	}
}

// seriesProblems says which selectors of expr name a series that is not
// in series, or a label it does not have, and which aggregations group by
// a label none of the selected series has.
func seriesProblems(expr parser.Expr, series Series) []string {
	var out, names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		names = append(names, vs.Name)
		labels, ok := series[vs.Name]
		if !ok {
			out = append(out, fmt.Sprintf("%s is not a series the agent exports", vs.Name))
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name != "__name__" && !slices.Contains(labels, m.Name) {
				out = append(out, fmt.Sprintf("%s has no label %q", vs.Name, m.Name))
			}
		}
		return nil
	})
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		agg, ok := n.(*parser.AggregateExpr)
		if !ok {
			return nil
		}
		for _, g := range agg.Grouping {
			if !slices.ContainsFunc(names, func(name string) bool { return slices.Contains(series[name], g) }) {
				out = append(out, fmt.Sprintf("grouped by %q, a label none of %v has", g, names))
			}
		}
		return nil
	})
	return out
}
