//go:build scale

package scale

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Figures are what one run measured, saved as figures.json beside the
// profiles; -plot reads them back for the growth table and its plot.
type Figures struct {
	Nodes int `json:"nodes"`
	Pods  int `json:"pods"`
	// Agent is the agent's build (bmcfence_build_info: version, commit).
	AgentVersion string `json:"agentVersion"`
	AgentCommit  string `json:"agentCommit"`
	Command      string `json:"command"`
	Date         string `json:"date"`

	SetupSeconds    float64 `json:"setupSeconds"`
	WorkloadSeconds float64 `json:"workloadSeconds"`

	// Start-up: from exec to the caches synced (ready) and to leading,
	// and the peak RSS until then (VmHWM).
	ReadySeconds      float64 `json:"readySeconds"`
	LeadingSeconds    float64 `json:"leadingSeconds"`
	StartupPeakRSSMiB float64 `json:"startupPeakRSSMiB"`

	SteadySeconds float64 `json:"steadySeconds"`
	RSSMiB        float64 `json:"rssMiB"`
	PeakRSSMiB    float64 `json:"peakRSSMiB"`
	HeapInUseMiB  float64 `json:"heapInUseMiB"`
	// GoMemLimit is the GOMEMLIMIT the agent ran with: deploy/base's
	// DaemonSet's ("" when it sets none).
	GoMemLimit string `json:"goMemLimit"`
	// RSSAnonMiB and RSSFileMiB split RSSMiB at the end of the steady
	// window: anonymous memory (heap, stacks) and the binary's pages.
	RSSAnonMiB float64 `json:"rssAnonMiB,omitempty"`
	RSSFileMiB float64 `json:"rssFileMiB,omitempty"`
	// GoRuntime is the GOMAXPROCS and GOGC the agent ran with (its
	// metrics).
	GoRuntime string `json:"goRuntime,omitempty"`
	// CPUPercent of one core: utime+stime over the steady window.
	CPUPercent     float64 `json:"cpuPercent"`
	LoadAverage    float64 `json:"loadAverage"`
	APIRequestsSec float64 `json:"apiRequestsPerSecond"`
	APIBytesInSec  float64 `json:"apiBytesInPerSecond"`
	APIBytesOutSec float64 `json:"apiBytesOutPerSecond"`
	BMCPerNodeMin  float64 `json:"bmcRequestsPerNodePerMinute"`
	Goroutines     int     `json:"goroutines"`
	OpenFDs        int     `json:"openFDs"`

	// The power loss of one group: all tainted, all replacements Running
	// (0: not run).
	PowerLossNodes          int     `json:"powerLossNodes,omitempty"`
	PowerLossTaintedSeconds float64 `json:"powerLossTaintedSeconds,omitempty"`
	PowerLossRunningSeconds float64 `json:"powerLossRunningSeconds,omitempty"`
}

func (f *Figures) save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "figures.json"), append(b, '\n'), 0o644)
}

// loadFigures reads every DIR/*/figures.json, by nodes.
func loadFigures(dir string) ([]Figures, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*", "figures.json"))
	if err != nil {
		return nil, err
	}
	var out []Figures
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var f Figures
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Figures) int { return a.Nodes - b.Nodes })
	return out, nil
}

// table is the README's growth table, one row per run, and the added cost
// per node between consecutive sizes.
func table(figs []Figures) string {
	var b strings.Builder
	b.WriteString("| nodes × pods | agent RSS (peak) | idle CPU of a core (load) | API req/s | API KiB/s in/out | BMC req/node/min | start-up: leading (peak RSS) | power losses → all tainted | agent commit |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, f := range figs {
		pl := "—"
		if f.PowerLossNodes > 0 {
			pl = fmt.Sprintf("%d → %.1f s", f.PowerLossNodes, f.PowerLossTaintedSeconds)
		}
		fmt.Fprintf(&b, "| %d × %d | %.1f MiB (%.1f) | %.2f %% (%.0f) | %.2f | %.1f / %.1f | %.2f | %.1f s (%.1f MiB) | %s | `%s` |\n",
			f.Nodes, f.Pods/max(f.Nodes, 1), f.RSSMiB, f.PeakRSSMiB, f.CPUPercent, f.LoadAverage, f.APIRequestsSec,
			f.APIBytesInSec/1024, f.APIBytesOutSec/1024, f.BMCPerNodeMin, f.LeadingSeconds, f.StartupPeakRSSMiB, pl, short(f.AgentCommit))
	}
	for i := 1; i < len(figs); i++ {
		a, z := figs[i-1], figs[i]
		dn := float64(z.Nodes - a.Nodes)
		if dn <= 0 {
			continue
		}
		fmt.Fprintf(&b, "\nFrom %d to %d nodes, each added node cost %.1f KiB of RSS and %.4f %% of a core.\n",
			a.Nodes, z.Nodes, (z.RSSMiB-a.RSSMiB)*1024/dn, (z.CPUPercent-a.CPUPercent)/dn)
	}
	return b.String()
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// plot draws RSS (MiB) and CPU (% of a core) against nodes as an SVG: two
// panels side by side, each with its target as a dashed line.
func plot(figs []Figures) string {
	const w, h, panelW, top, left, bottom = 820, 320, 330, 40, 60, 50
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	maxNodes := 0
	for _, f := range figs {
		maxNodes = max(maxNodes, f.Nodes)
	}
	panels := []struct {
		title, unit string
		value       func(Figures) float64
		target      float64
		color       string
	}{
		{"agent RSS", "MiB", func(f Figures) float64 { return f.RSSMiB }, 100, "#1f77b4"},
		{"agent idle CPU", "% of a core", func(f Figures) float64 { return f.CPUPercent }, 2, "#d62728"},
	}
	for pi, p := range panels {
		x0 := float64(left + pi*(panelW+left))
		plotH := float64(h - top - bottom)
		ymax := p.target * 1.2
		for _, f := range figs {
			ymax = math.Max(ymax, p.value(f)*1.1)
		}
		ymax = niceCeil(ymax)
		xmax := float64(niceCeil(float64(maxNodes)))
		px := func(n float64) float64 { return x0 + n/xmax*panelW }
		py := func(v float64) float64 { return float64(top) + plotH - v/ymax*plotH }
		// The target is named in the title, not beside its line, where a
		// point's label could fall on it.
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" font-weight="bold">%s (%s), target %s dashed</text>`+"\n", x0, top-15, p.title, p.unit, trim(p.target))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0, py(0), x0+panelW, py(0))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0, py(0), x0, py(ymax))
		for i := 0; i <= 4; i++ {
			v := ymax * float64(i) / 4
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-5, py(v)+4, trim(v))
			n := xmax * float64(i) / 4
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(n), py(0)+16, trim(n))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">nodes</text>`+"\n", x0+panelW/2, h-12)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="gray" stroke-dasharray="5,4"/>`+"\n", x0, py(p.target), x0+panelW, py(p.target))
		var pts []string
		for _, f := range figs {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(float64(f.Nodes)), py(p.value(f))))
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), p.color)
		// Each value above its point, or below it where it would meet the
		// previous label (two sizes close together); widths estimated at
		// 7 px a character of the 12 px font (TestPlotDrawsInChromium
		// measures what a browser draws).
		type label struct{ x0, x1, y float64 }
		var placed []label
		for _, f := range figs {
			x, y := px(float64(f.Nodes)), py(p.value(f))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>`+"\n", x, y, p.color)
			text := trim(p.value(f))
			half := 3.5*float64(len(text)) + 2
			ly := y - 8
			for _, l := range placed {
				if x-half < l.x1 && x+half > l.x0 && math.Abs(ly-l.y) < 16 {
					ly = y + 20
				}
			}
			placed = append(placed, label{x - half, x + half, ly})
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, ly, text)
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trim(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}
