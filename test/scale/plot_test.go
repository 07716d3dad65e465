//go:build scale

package scale

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestPlot writes the growth plot (growth.svg) from the figures of the runs
// under -plot (DIR/*/figures.json), checks it as a browser draws it, and
// prints the README's growth table:
//
//	go test -tags scale -run TestPlot ./test/scale -args -plot=docs/scale
func TestPlot(t *testing.T) {
	if *flagPlot == "" {
		t.Skip("no -plot directory")
	}
	dir := underRepo(t, *flagPlot)
	figs, err := loadFigures(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) == 0 {
		t.Fatalf("no %s/*/figures.json", dir)
	}
	drawn := plot(figs)
	checkPlotInChromium(t, drawn, len(figs))
	svg := filepath.Join(dir, "growth.svg")
	if err := os.WriteFile(svg, []byte(drawn), 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("scale: plot: %s\n\n%s", svg, table(figs))
}

// The plot as a person sees it, for figures where labels could collide:
// a value on its target line, two sizes close together, a value far above
// the target.
func TestPlotDrawsInChromium(t *testing.T) {
	figs := []Figures{
		{Nodes: 100, RSSMiB: 74.4, CPUPercent: 2.0},
		{Nodes: 150, RSSMiB: 99.6, CPUPercent: 1.9},
		{Nodes: 300, RSSMiB: 101.3, CPUPercent: 2.1},
		{Nodes: 1000, RSSMiB: 231.7, CPUPercent: 19.3},
	}
	checkPlotInChromium(t, plot(figs), len(figs))
}

// plotMeasure runs in the page: the viewBox and the bounding box of every
// text and point of the SVG, written into the DOM for --dump-dom.
const plotMeasure = `
const svg = document.querySelector('svg');
const vb = svg.viewBox.baseVal;
const r = {w: vb.width, h: vb.height, boxes: []};
for (const el of svg.querySelectorAll('text, circle')) {
  const b = el.getBBox();
  r.boxes.push({tag: el.tagName, text: el.tagName === 'text' ? el.textContent : '', x: b.x, y: b.y, w: b.width, h: b.height});
}
document.getElementById('result').textContent = JSON.stringify(r);
`

var plotResultRE = regexp.MustCompile(`(?s)<pre id="result">(.*?)</pre>`)

// checkPlotInChromium draws svg in headless Chromium (Debian's chromium)
// and fails when a label or point is clipped, two labels overlap, or a
// point is missing. Skipped without chromium.
func checkPlotInChromium(t *testing.T, svg string, points int) {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Log("chromium is not installed (Debian package chromium): the plot is not checked as a browser draws it")
		return
	}
	page := "<!doctype html><html><head><meta charset=\"utf-8\"></head><body>\n" + svg +
		"<pre id=\"result\"></pre>\n<script>" + plotMeasure + "</script>\n</body></html>\n"
	file := filepath.Join(t.TempDir(), "growth.html")
	if err := os.WriteFile(file, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir="+t.TempDir(),
		"--dump-dom", "file://"+file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	m := plotResultRE.FindSubmatch(dom)
	if m == nil {
		t.Fatalf("no measurements in the page chromium dumped (did the script run?):\n%.2000s", dom)
	}
	type box struct {
		Tag, Text  string
		X, Y, W, H float64
	}
	var got struct {
		W, H  float64
		Boxes []box
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &got); err != nil {
		t.Fatal(err)
	}
	var texts []box
	circles := 0
	const eps = 0.5
	for _, b := range got.Boxes {
		if b.Tag == "text" {
			texts = append(texts, b)
			if b.W <= 0 || b.H <= 0 {
				t.Errorf("label %q has no size (no font?)", b.Text)
			}
		} else {
			circles++
		}
		if b.X < -eps || b.Y < -eps || b.X+b.W > got.W+eps || b.Y+b.H > got.H+eps {
			t.Errorf("%s %q is clipped: (%.1f,%.1f %.1fx%.1f) outside %.0fx%.0f", b.Tag, b.Text, b.X, b.Y, b.W, b.H, got.W, got.H)
		}
	}
	for i := range texts {
		for j := i + 1; j < len(texts); j++ {
			a, b := texts[i], texts[j]
			if min(a.X+a.W, b.X+b.W)-max(a.X, b.X) > eps && min(a.Y+a.H, b.Y+b.H)-max(a.Y, b.Y) > eps {
				t.Errorf("labels overlap: %q (%.1f,%.1f %.1fx%.1f) and %q (%.1f,%.1f %.1fx%.1f)",
					a.Text, a.X, a.Y, a.W, a.H, b.Text, b.X, b.Y, b.W, b.H)
			}
		}
	}
	if circles != 2*points {
		t.Errorf("%d points drawn, want %d (RSS and CPU for each of %d runs)", circles, 2*points, points)
	}
	if !t.Failed() {
		t.Logf("chromium drew the plot: %d labels, %d points, none clipped or overlapping", len(texts), circles)
	}
}
