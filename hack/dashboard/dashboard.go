// Command dashboard writes the chart's Grafana dashboard,
// charts/bmcfence/files/dashboards/bmcfence.json, from the panels declared
// below: `cd hack/dashboard && go run .` after changing them (the test
// fails while the file differs). The chart ships it as a ConfigMap labelled
// grafana_dashboard: "1" (metrics.grafanaDashboard.enabled), which
// kube-prometheus-stack's Grafana sidecar loads.
//
// Adding a panel is one line in rows: its title, what it shows, its
// queries and its unit. A panel whose metrics the agent does not export
// yet is left out (and the test says so), so panels for what is coming can
// be declared before the agent exports their series.
//
// This is a module of its own: its test parses every query with
// Prometheus's own PromQL parser, which the product must not depend on.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Unit is a Grafana unit: what a panel's numbers are.
type Unit string

// The units the panels use. The test derives each panel's from its query.
const (
	Seconds Unit = "s"           // durations: histogram quantiles of *_seconds, *_seconds_sum / *_seconds_count
	Count   Unit = "short"       // counts: nodes, fences, increases of counters
	Ratio   Unit = "percentunit" // a ratio of two rates, 0–1
	PerSec  Unit = "reqps"       // a rate of operations
)

// Panel is one panel.
type Panel struct {
	Title string
	// Description: what the panel answers, shown on hover.
	Description string
	// Kind: "stat", "timeseries" or "table".
	Kind    string
	Unit    Unit
	Targets []Target
	// Width in grid columns (of 24); 0 means the kind's default.
	Width int
	// Alarm: a stat that is red from 1 up (something needs a human).
	Alarm bool
}

// Target is one query and its legend.
type Target struct {
	Expr   string
	Legend string
}

// Row is a titled group of panels.
type Row struct {
	Title  string
	Panels []Panel
}

func stat(title, desc string, unit Unit, expr string) Panel {
	return Panel{Title: title, Description: desc, Kind: "stat", Unit: unit, Targets: []Target{{Expr: expr}}}
}

func series(title, desc string, unit Unit, targets ...Target) Panel {
	return Panel{Title: title, Description: desc, Kind: "timeseries", Unit: unit, Targets: targets}
}

func table(title, desc string, unit Unit, expr string) Panel {
	return Panel{Title: title, Description: desc, Kind: "table", Unit: unit, Targets: []Target{{Expr: expr}}, Width: 12}
}

func alarm(p Panel) Panel { p.Alarm = true; return p }

// quantiles are the p50 and p90 of a histogram of seconds over window.
func quantiles(metric, window string) []Target {
	var out []Target
	for _, q := range []string{"0.5", "0.9"} {
		out = append(out, Target{
			Expr:   fmt.Sprintf("histogram_quantile(%s, sum by (le) (increase(%s_bucket[%s])))", q, metric, window),
			Legend: "p" + strings.TrimPrefix(q, "0."),
		})
	}
	return out
}

// rows is the dashboard, top to bottom. Fences are rare: their histograms
// are read over an hour, and over the whole time range in the stats.
var rows = []Row{
	{"Nodes", []Panel{
		stat("Fenceable nodes", "Nodes whose BMC answered the last probe correctly: credentials, TLS, reachability and identity.", Count,
			`sum(bmcfence_node_fenceable)`),
		alarm(stat("Unfenceable nodes", "Nodes whose BMC failed the last probe or that have no inventory entry: if they die, nothing moves their pods. kubectl fence check names the cause.", Count,
			`max(bmcfence_unfenceable_nodes)`)),
		stat("Nodes in a fence", "Nodes in any phase but Healthy and Maintenance.", Count,
			`sum(bmcfence_node_phase{phase!~"Healthy|Maintenance"}) or vector(0)`),
		alarm(stat("Risky settings in force", "Settings that weaken a safety property (dry run, insecureSkipVerify, plain HTTP, ...): the agent logs each at start.", Count,
			`count(bmcfence_risky_setting == 1) or vector(0)`)),
		series("Nodes by phase", "How many nodes are in each phase of a fence (Healthy left out).", Count,
			Target{`sum by (phase) (bmcfence_node_phase{phase!="Healthy"})`, "{{phase}}"}),
		table("Unfenceable nodes, by name", "Each node whose BMC failed its last probe.", Count,
			`bmcfence_node_fenceable == 0`),
	}},
	{"Fences", []Panel{
		series("Fences by result and reason", "Out-of-service taints applied: accepted (Off settled after our ForceOff the BMC accepted), unassisted (the Off outlasted the unassisted window), attested (a human confirmed).", Count,
			Target{`sum by (result, reason) (increase(bmcfence_fences_total[$__rate_interval]))`, "{{result}} {{reason}}"}),
		stat("Fences in the time range", "Taints applied over the dashboard's time range.", Count,
			`sum(increase(bmcfence_fences_total[$__range]))`),
		stat("Failover, 90th percentile in the time range", "From the failure's start (the last heartbeat seen) until the node's pods and volumes were released.", Seconds,
			`histogram_quantile(0.9, sum by (le) (increase(bmcfence_failover_seconds_bucket[$__range])))`),
		series("Failover time", "From the failure's start until the node's pods and volumes were released; over the last hour.", Seconds,
			quantiles("bmcfence_failover_seconds", "1h")...),
		series("Time to confirmed off", "From the failure's start until the taint, after a settled Off; over the last hour.", Seconds,
			quantiles("bmcfence_time_to_confirmed_off_seconds", "1h")...),
		series("Time to detach", "From the taint until no pod or VolumeAttachment was left on the node; over the last hour.", Seconds,
			quantiles("bmcfence_time_to_detach_seconds", "1h")...),
	}},
	{"BMCs", []Panel{
		series("BMC latency, 90th percentile, by vendor and operation", "BMC requests (probes, readings, power commands) by the vendor the BMC's identity names.", Seconds,
			Target{`histogram_quantile(0.9, sum by (le, vendor, op) (rate(bmcfence_bmc_request_duration_seconds_bucket[$__rate_interval])))`, "{{vendor}} {{op}}"}),
		series("BMC requests by vendor and operation", "", PerSec,
			Target{`sum by (vendor, op) (rate(bmcfence_bmc_request_duration_seconds_count[$__rate_interval]))`, "{{vendor}} {{op}}"}),
		series("BMC errors by vendor and reason", "Failed BMC operations: unreachable, timeout, auth, TLS, BMC errors.", Count,
			Target{`sum by (vendor, reason) (increase(bmcfence_bmc_errors_total[$__rate_interval]))`, "{{vendor}} {{reason}}"}),
		series("BMC error ratio by vendor", "Failed BMC operations over all of them.", Ratio,
			Target{`sum by (vendor) (rate(bmcfence_bmc_errors_total[$__rate_interval])) / sum by (vendor) (rate(bmcfence_bmc_request_duration_seconds_count[$__rate_interval]))`, "{{vendor}}"}),
	}},
	{"Storm guard and safety checks", []Panel{
		series("Storm-guard refusals by reason", "Fences the storm guard refused: too many nodes unhealthy (overall or in a zone), too many in flight, cooldown, a stale view of the API server.", Count,
			Target{`sum by (reason) (increase(bmcfence_storm_guard_refusals_total[$__rate_interval]))`, "{{reason}}"}),
		alarm(stat("Contradictions in the time range", "Fences stopped because the node renewed its Lease after our accepted ForceOff or a human's attestation: a wrong BMC in the inventory, or a BMC reporting a cached state.", Count,
			`sum(increase(bmcfence_contradictions_total[$__range]))`)),
		alarm(stat("Powered on during a fence, in the time range", "Machines found On between the taint and the end of detach, and forced off again.", Count,
			`sum(increase(bmcfence_powered_on_during_fence_total[$__range]))`)),
	}},
	// Event streams and fencing levels: these panels appear once the agent
	// exports their metrics (until then the generator leaves them out and
	// the test names what they wait for). Rename the series here if the
	// agent names them otherwise.
	{"Event streams and fencing levels", []Panel{
		series("BMC event streams by state", "Redfish event streams (SSE) by state: connected, or polling because the BMC offers none or the stream broke.", Count,
			Target{`sum by (state) (bmcfence_event_streams)`, "{{state}}"}),
		series("Fences by fencing level", "Fences by the fencing level that fenced: the BMC, or a PDU's outlets.", Count,
			Target{`sum by (level) (increase(bmcfence_fencing_level_fences_total[$__rate_interval]))`, "{{level}}"}),
	}},
	{"Agent", []Panel{
		table("Agent builds", "What each agent replica was built from.", Count,
			`bmcfence_build_info`),
	}},
}

// Build renders the dashboard with the panels whose metrics exported
// reports as exported (all of them when exported is nil); it returns the
// titles of the panels left out.
func Build(exported func(metric string) bool) ([]byte, []string) {
	var panels []map[string]any
	var left []string
	id, y := 1, 0
	ds := map[string]any{"type": "prometheus", "uid": "${datasource}"}
	for _, r := range rows {
		var kept []Panel
		for _, p := range r.Panels {
			if missing := missingMetrics(p, exported); len(missing) > 0 {
				left = append(left, fmt.Sprintf("%s (waits for %s)", p.Title, strings.Join(missing, ", ")))
				continue
			}
			kept = append(kept, p)
		}
		if len(kept) == 0 {
			continue
		}
		panels = append(panels, map[string]any{
			"id": id, "type": "row", "title": r.Title, "collapsed": false,
			"gridPos": map[string]int{"h": 1, "w": 24, "x": 0, "y": y}, "panels": []any{},
		})
		id, y = id+1, y+1
		x, rowH := 0, 0
		for _, p := range kept {
			w, h := p.Width, 8
			switch {
			case w != 0:
			case p.Kind == "stat":
				w = 6
			default:
				w = 12
			}
			if p.Kind == "stat" {
				h = 4
			}
			if x+w > 24 {
				x, y, rowH = 0, y+rowH, 0
			}
			panels = append(panels, panelJSON(p, id, x, y, w, h, ds))
			id++
			x += w
			rowH = max(rowH, h)
		}
		y += rowH
	}
	d := map[string]any{
		"title":         "bmcfence",
		"uid":           "bmcfence",
		"description":   "bmcfence: which nodes can be fenced, fences and their timing, BMCs by vendor, the storm guard.",
		"tags":          []string{"bmcfence", "fencing"},
		"editable":      true,
		"schemaVersion": 39,
		"timezone":      "browser",
		"refresh":       "1m",
		"time":          map[string]string{"from": "now-24h", "to": "now"},
		"templating": map[string]any{"list": []any{map[string]any{
			"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
			"current": map[string]any{}, "hide": 0, "refresh": 1,
		}}},
		"annotations": map[string]any{"list": []any{}},
		"links":       []any{},
		"panels":      panels,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		panic(err) // maps of strings and numbers always encode
	}
	return b.Bytes(), left
}

func panelJSON(p Panel, id, x, y, w, h int, ds map[string]any) map[string]any {
	var targets []any
	for i, t := range p.Targets {
		tj := map[string]any{"refId": string(rune('A' + i)), "expr": t.Expr, "datasource": ds}
		if t.Legend != "" {
			tj["legendFormat"] = t.Legend
		}
		if p.Kind == "table" {
			tj["instant"], tj["format"] = true, "table"
		}
		targets = append(targets, tj)
	}
	defaults := map[string]any{"unit": string(p.Unit)}
	if p.Alarm {
		defaults["thresholds"] = map[string]any{"mode": "absolute", "steps": []any{
			map[string]any{"color": "green", "value": nil}, map[string]any{"color": "red", "value": 1},
		}}
		defaults["color"] = map[string]any{"mode": "thresholds"}
	}
	out := map[string]any{
		"id": id, "type": p.Kind, "title": p.Title, "datasource": ds,
		"gridPos":     map[string]int{"h": h, "w": w, "x": x, "y": y},
		"fieldConfig": map[string]any{"defaults": defaults, "overrides": []any{}},
		"targets":     targets,
	}
	if p.Description != "" {
		out["description"] = p.Description
	}
	switch p.Kind {
	case "stat":
		out["options"] = map[string]any{"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false}, "colorMode": "value", "graphMode": "none"}
	case "timeseries":
		out["options"] = map[string]any{"legend": map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true}, "tooltip": map[string]any{"mode": "multi"}}
	case "table":
		out["options"] = map[string]any{"showHeader": true}
	}
	return out
}

// metricRE finds the metric names in a query: every bmcfence_ name (the
// test checks this against the parser's view).
func metricsOf(expr string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(expr, func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		if strings.HasPrefix(f, "bmcfence_") && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

func missingMetrics(p Panel, exported func(string) bool) []string {
	if exported == nil {
		return nil
	}
	var missing []string
	for _, t := range p.Targets {
		for _, m := range metricsOf(t.Expr) {
			if !exported(m) && !slices.Contains(missing, m) {
				missing = append(missing, m)
			}
		}
	}
	return missing
}
