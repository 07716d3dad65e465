//go:build !bmcfast

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/client/clientset/versioned/fake"
	"github.com/bmcfence/bmcfence/cluster/history/timeline"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/history")

// The records the history tests draw (testdata/history/*.json): demo.json
// is a record `make demo` left (go run ./hack/demo -record FILE), the
// others are written by hand for what the demo does not show (a human's
// request, a refusal, an "already off" answer, a stuck fence still open).
func historyFixtures(t *testing.T) map[string]v1alpha1.BMCFenceRecord {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "history", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in testdata/history: %v", err)
	}
	out := map[string]v1alpha1.BMCFenceRecord{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var r v1alpha1.BMCFenceRecord
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = r
	}
	return out
}

// drawRecord runs `history NODE RECORD` with -o svg or --timeline against a
// fake clientset holding the record.
func drawRecord(t *testing.T, r v1alpha1.BMCFenceRecord, out historyFormat, drawTimeline bool) string {
	t.Helper()
	var b bytes.Buffer
	client := fake.NewSimpleClientset(r.DeepCopy())
	if err := showRecord(context.Background(), &b, client, r.Spec.NodeName, r.Name, out, drawTimeline, time.UTC); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// golden compares got with testdata/history/NAME, or writes it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "history", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to write it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from what history draws now (go test -run %s -update rewrites it after review):\n--- want\n%s\n--- got\n%s", path, t.Name(), want, got)
	}
}

func TestHistoryTimelineGolden(t *testing.T) {
	for name, r := range historyFixtures(t) {
		t.Run(name, func(t *testing.T) {
			golden(t, name+".timeline.txt", drawRecord(t, r, historyTable, true))
		})
	}
}

func TestHistorySVGGolden(t *testing.T) {
	for name, r := range historyFixtures(t) {
		t.Run(name, func(t *testing.T) {
			golden(t, name+".svg", drawRecord(t, r, historySVG, false))
		})
	}
}

// A record is shown under its own node only, and a missing one is a usage
// error that says where the names are.
func TestHistoryRecordOfAnotherNode(t *testing.T) {
	r := historyFixtures(t)["human-fence"]
	client := fake.NewSimpleClientset(r.DeepCopy())
	for _, tt := range []struct{ node, name, want string }{
		{"w4", r.Name, "fence record w3-q8z5n is of node w3, not w4: kubectl fence history w3 w3-q8z5n"},
		{"w3", "w3-nope", `fence record "w3-nope" not found: kubectl fence history w3 lists the node's records`},
	} {
		err := showRecord(context.Background(), &bytes.Buffer{}, client, tt.node, tt.name, historySVG, false, time.UTC)
		if err == nil || err.Error() != tt.want || exitCode(err) != exitUsage {
			t.Errorf("history %s %s: %v (exit %d), want %q (exit %d)", tt.node, tt.name, err, exitCode(err), tt.want, exitUsage)
		}
	}
}

// chromiumFlags are what headless Chromium needs as root on a machine
// without a desktop, and nothing that reaches the network.
func chromiumFlags(t *testing.T) []string {
	return []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir=" + t.TempDir()}
}

// box is what the browser measured of one element of a drawn SVG.
type box struct {
	Tag   string  `json:"tag"`
	Class string  `json:"class"`
	Text  string  `json:"text"`
	Full  string  `json:"full"`
	T     string  `json:"t"`
	X     float64 `json:"x"`
	Y     float64 `json:"y"`
	W     float64 `json:"w"`
	H     float64 `json:"h"`
}

type drawn struct {
	Name    string   `json:"name"`
	ViewBox box      `json:"viewBox"`
	Boxes   []box    `json:"boxes"`
	Errors  []string `json:"errors"`
}

// measureScript runs in the page: for every SVG, the viewBox and the
// bounding box (getBBox, in viewBox units) of every text and mark, written
// into the DOM, where --dump-dom finds it.
const measureScript = `
const out = [];
for (const fig of document.querySelectorAll('figure')) {
  const svg = fig.querySelector('svg');
  const vb = svg.viewBox.baseVal;
  const r = {name: fig.id, viewBox: {x: vb.x, y: vb.y, w: vb.width, h: vb.height}, boxes: [], errors: []};
  for (const el of svg.querySelectorAll('text, circle.mark, path.forceoff, rect.bar, line.reading')) {
    const b = el.getBBox();
    const t = el.tagName === 'text' ? el.firstChild.nodeValue : '';
    const title = el.querySelector('title');
    r.boxes.push({tag: el.tagName, class: el.getAttribute('class') || '', text: t,
      full: title ? title.textContent : t, t: el.getAttribute('data-t') || '',
      x: b.x, y: b.y, w: b.width, h: b.height});
  }
  out.push(r);
}
document.getElementById('result').textContent = JSON.stringify(out);
`

var resultRE = regexp.MustCompile(`(?s)<pre id="result">(.*?)</pre>`)

// What a person sees when the SVG is drawn: headless Chromium renders
// every fixture's `history NODE RECORD -o svg` and measures each label.
// Every phase and every action, result and request is labelled, in time
// order, no label is clipped (all inside the viewBox) and no two overlap.
func TestHistorySVGInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium): the SVG is not checked as a browser draws it")
	}
	fixtures := historyFixtures(t)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range fixtures {
			if !yield(n) {
				return
			}
		}
	})
	var page strings.Builder
	page.WriteString("<!doctype html><html><head><meta charset=\"utf-8\"></head><body>\n")
	for _, n := range names {
		fmt.Fprintf(&page, "<figure id=%q>\n%s</figure>\n", n, drawRecord(t, fixtures[n], historySVG, false))
	}
	fmt.Fprintf(&page, "<pre id=\"result\"></pre>\n<script>%s</script>\n</body></html>\n", measureScript)
	file := filepath.Join(t.TempDir(), "history.html")
	if err := os.WriteFile(file, []byte(page.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, append(chromiumFlags(t), "--dump-dom", "file://"+file)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	t.Logf("chromium drew %d SVGs in %.1fs", len(names), time.Since(start).Seconds())
	m := resultRE.FindSubmatch(dom)
	if m == nil {
		t.Fatalf("no measurements in the page chromium dumped (did the script run?):\n%.2000s\n%s", dom, stderr.String())
	}
	var figures []drawn
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &figures); err != nil {
		t.Fatal(err)
	}
	if len(figures) != len(names) {
		t.Fatalf("%d SVGs measured, want %d", len(figures), len(names))
	}
	for _, fig := range figures {
		t.Run(fig.Name, func(t *testing.T) {
			checkDrawn(t, fig, timeline.Build(fixtures[fig.Name]))
		})
	}
}

// checkDrawn asserts what a person would see of fence f in the measured
// figure.
func checkDrawn(t *testing.T, fig drawn, f timeline.Fence) {
	var texts []box
	byClass := map[string][]box{}
	for _, b := range fig.Boxes {
		if b.Tag == "text" {
			texts = append(texts, b)
		}
		byClass[b.Class] = append(byClass[b.Class], b)
	}
	vb := fig.ViewBox
	// Drawn: a font was found and every label has a size.
	for _, b := range texts {
		if b.W <= 0 || b.H <= 0 {
			t.Errorf("label %q (%s) has no size: %+v", b.Text, b.Class, b)
		}
	}
	// Nothing clipped: every label and mark lies inside the viewBox.
	const eps = 0.5
	for _, b := range fig.Boxes {
		if b.X < vb.X-eps || b.Y < vb.Y-eps || b.X+b.W > vb.X+vb.W+eps || b.Y+b.H > vb.Y+vb.H+eps {
			t.Errorf("%s %q is clipped: box (%.1f,%.1f %.1fx%.1f) outside the viewBox %.0fx%.0f", b.Class, b.Text, b.X, b.Y, b.W, b.H, vb.W, vb.H)
		}
	}
	// Nothing overlapping: no two labels share any area.
	for i := range texts {
		for j := i + 1; j < len(texts); j++ {
			a, b := texts[i], texts[j]
			if min(a.X+a.W, b.X+b.W)-max(a.X, b.X) > eps && min(a.Y+a.H, b.Y+b.H)-max(a.Y, b.Y) > eps {
				t.Errorf("labels overlap: %q (%s at %.1f,%.1f %.1fx%.1f) and %q (%s at %.1f,%.1f %.1fx%.1f)",
					a.Text, a.Class, a.X, a.Y, a.W, a.H, b.Text, b.Class, b.X, b.Y, b.W, b.H)
			}
		}
	}
	// Every phase labelled, once, in the order the fence entered them.
	var phases []string
	for _, p := range f.Phases {
		if !slices.Contains(phases, p.Name) {
			phases = append(phases, p.Name)
		}
	}
	var got []string
	for _, b := range inRows(byClass["phase-label"]) {
		got = append(got, b.Text)
	}
	if !slices.Equal(got, phases) {
		t.Errorf("phase labels, top to bottom: %q; want %q", got, phases)
	}
	checkTimeOrder(t, "phase", inRows(byClass["phase-label"]))
	// Every action, result, request and refusal labelled, in time order,
	// each beside its mark on the time axis.
	marks := inRows(byClass["mark-label"])
	if len(marks) != len(f.Marks) {
		t.Fatalf("%d mark labels, want %d (one per action, result, request, refusal)", len(marks), len(f.Marks))
	}
	for i, m := range f.Marks {
		want := f.Offset(m.At) + " " + m.Label
		if !strings.HasPrefix(marks[i].Full, want) {
			t.Errorf("mark label %d reads %q, want %q first", i, marks[i].Full, want)
		}
		if shown := strings.TrimSuffix(marks[i].Text, "…"); !strings.HasPrefix(marks[i].Full, shown) || !strings.HasPrefix(shown, f.Offset(m.At)+" ") {
			t.Errorf("mark label %d shows %q: not the start of %q, with its time", i, marks[i].Text, marks[i].Full)
		}
	}
	checkTimeOrder(t, "mark", marks)
	dots := inRows(byClass["mark"])
	for i := 1; i < len(dots); i++ {
		if dots[i].X < dots[i-1].X-eps {
			t.Errorf("mark %d is left of mark %d on the time axis, though later", i, i-1)
		}
	}
	// The two witnesses are drawn.
	var witnesses []string
	for _, b := range byClass["witness-label"] {
		witnesses = append(witnesses, b.Text)
	}
	if len(witnesses) != 2 || witnesses[0] != "Lease silent" {
		t.Errorf("witness rows %q, want the Lease's silence and the Off", witnesses)
	}
	if f.Off != nil && !f.Off.ForceOffAt.IsZero() && len(byClass["forceoff"]) != 1 {
		t.Errorf("%d marks of our accepted ForceOff on the Off witness, want 1", len(byClass["forceoff"]))
	}
	if len(byClass["reading"]) == 0 {
		t.Error("no BMC reading drawn")
	}
}

// inRows orders boxes top to bottom.
func inRows(bs []box) []box {
	bs = slices.Clone(bs)
	slices.SortStableFunc(bs, func(a, b box) int {
		switch {
		case a.Y < b.Y:
			return -1
		case a.Y > b.Y:
			return 1
		}
		return 0
	})
	return bs
}

// checkTimeOrder: rows top to bottom never go back in time (data-t, the
// seconds after the fence's start).
func checkTimeOrder(t *testing.T, what string, rows []box) {
	t.Helper()
	prev := -1
	for _, b := range rows {
		var sec int
		if _, err := fmt.Sscan(b.T, &sec); err != nil {
			t.Errorf("%s label %q has no time (data-t %q)", what, b.Text, b.T)
			continue
		}
		if sec < prev {
			t.Errorf("%s label %q (+%ds) is below one at +%ds: not in time order", what, b.Text, sec, prev)
		}
		prev = sec
	}
}
