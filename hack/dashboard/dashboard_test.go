package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// promql is Prometheus's own PromQL parser, with its default functions.
var promql = parser.NewParser(parser.Options{})

// grafanaVars are the variables Grafana replaces before it sends a query.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "24h")

type dashboard struct {
	Panels []struct {
		Type        string `json:"type"`
		Title       string `json:"title"`
		FieldConfig struct {
			Defaults struct {
				Unit string `json:"unit"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func exported(t *testing.T) Series {
	t.Helper()
	s, err := Exported()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The chart's dashboard is what the panels above make of today's metrics:
// run `go run .` here after changing either.
func TestDashboardFileIsCurrent(t *testing.T) {
	want, left := Build(exported(t).Has)
	for _, l := range left {
		t.Logf("left out until the agent exports its series: %s", l)
	}
	got, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not what the panels make: run `cd hack/dashboard && go run .`", dashboardFile)
	}
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// Every query parses as PromQL and names only series the agent exports,
// grouped and matched by labels those series have.
func TestQueriesParseAndNameOnlyExportedSeries(t *testing.T) {
	series := exported(t)
	d := readDashboard(t)
	queries := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			queries++
			expr, err := promql.ParseExpr(grafanaVars.Replace(tg.Expr))
			if err != nil {
				t.Errorf("%q: %q does not parse: %v", p.Title, tg.Expr, err)
				continue
			}
			var names []string
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				names = append(names, vs.Name)
				labels, ok := series[vs.Name]
				if !ok {
					t.Errorf("%q: %s is not a series the agent exports", p.Title, vs.Name)
					return nil
				}
				for _, m := range vs.LabelMatchers {
					if m.Name != "__name__" && !slices.Contains(labels, m.Name) {
						t.Errorf("%q: %s has no label %q", p.Title, vs.Name, m.Name)
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
						t.Errorf("%q: grouped by %q, a label none of %v has", p.Title, g, names)
					}
				}
				return nil
			})
		}
	}
	if queries == 0 {
		t.Fatal("the dashboard has no query")
	}
	// The panels still waiting for their series parse too.
	for _, r := range rows {
		for _, p := range r.Panels {
			for _, tg := range p.Targets {
				if _, err := promql.ParseExpr(grafanaVars.Replace(tg.Expr)); err != nil {
					t.Errorf("%q: %q does not parse: %v", p.Title, tg.Expr, err)
				}
			}
		}
	}
}

// unitOf is the unit a query's numbers are in, from its form: quantiles
// of *_seconds histograms and *_seconds_sum / *_seconds_count are
// seconds; another division is a ratio; a rate is per second; the rest
// (sums of gauges, increases of counters, counts) are counts.
func unitOf(e parser.Expr) Unit {
	switch e := e.(type) {
	case *parser.ParenExpr:
		return unitOf(e.Expr)
	case *parser.AggregateExpr:
		if e.Op == parser.COUNT {
			return Count
		}
		return unitOf(e.Expr)
	case *parser.BinaryExpr:
		switch {
		case e.Op == parser.DIV:
			if strings.HasSuffix(selectorName(e.LHS), "_seconds_sum") && strings.HasSuffix(selectorName(e.RHS), "_seconds_count") {
				return Seconds
			}
			return Ratio
		default: // or, and, unless, comparisons: the left side's numbers
			return unitOf(e.LHS)
		}
	case *parser.Call:
		switch e.Func.Name {
		case "histogram_quantile":
			if strings.HasSuffix(selectorName(e.Args[1]), "_seconds_bucket") {
				return Seconds
			}
			return Count
		case "rate", "irate":
			return PerSec
		}
		return Count
	case *parser.VectorSelector:
		if strings.HasSuffix(e.Name, "_seconds") {
			return Seconds
		}
	}
	return Count
}

// selectorName is the metric a (possibly wrapped) expression selects.
func selectorName(e parser.Expr) string {
	var name string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && name == "" {
			name = vs.Name
		}
		return nil
	})
	return name
}

// Each panel's unit is what its queries measure: seconds "s", counts
// "short", ratios "percentunit", rates "reqps".
func TestPanelUnitsFitTheirQueries(t *testing.T) {
	for _, p := range readDashboard(t).Panels {
		if p.Type == "row" {
			continue
		}
		for _, tg := range p.Targets {
			expr, err := promql.ParseExpr(grafanaVars.Replace(tg.Expr))
			if err != nil {
				continue // TestQueriesParseAndNameOnlyExportedSeries says so
			}
			if want := unitOf(expr); Unit(p.FieldConfig.Defaults.Unit) != want {
				t.Errorf("%q: unit %q, but %q measures %q", p.Title, p.FieldConfig.Defaults.Unit, tg.Expr, want)
			}
		}
	}
}

// A panel waits for its series: declared before the agent exports them, it
// is left out, and shown once they exist.
func TestPanelsWaitForTheirSeries(t *testing.T) {
	none, left := Build(func(string) bool { return false })
	var d dashboard
	if err := json.Unmarshal(none, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Panels) != 0 || len(left) == 0 {
		t.Errorf("with no series: %d panels, %d left out; want none shown", len(d.Panels), len(left))
	}
	all, left := Build(nil)
	if err := json.Unmarshal(all, &d); err != nil {
		t.Fatal(err)
	}
	declared := 0
	for _, r := range rows {
		declared += 1 + len(r.Panels)
	}
	if len(d.Panels) != declared || len(left) != 0 {
		t.Errorf("with every series: %d panels and rows, want %d", len(d.Panels), declared)
	}
}
