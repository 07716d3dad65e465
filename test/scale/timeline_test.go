//go:build scale

package scale

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTimelineTakesEachStepsFirstTimePerNodeFromTheAgentsLog(t *testing.T) {
	start := time.Unix(1000, 0)
	log := `{"level":"info","ts":999.5,"msg":"before the failure","node":"n1","reason":"Early"}
not json
{"level":"info","ts":1003.25,"msg":"node suspected","node":"n1","reason":"Suspected"}
{"level":"info","ts":1004,"msg":"node suspected","node":"n1","reason":"Suspected"}
{"level":"info","ts":1010,"msg":"fence action done","node":"n1","action":"ApplyTaint","phase":"Detaching"}
{"level":"info","ts":1005,"msg":"node suspected","node":"other","reason":"Suspected"}
{"level":"info","ts":1007,"msg":"node suspected","node":"n2","reason":"Suspected"}
`
	path := filepath.Join(t.TempDir(), "agent.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	tl, err := timeline(path, []string{"n1", "n2"}, start)
	if err != nil {
		t.Fatal(err)
	}
	if got := tl["n1"]["Suspected"]; got != 3250*time.Millisecond {
		t.Errorf("n1 Suspected at %v, want its first time +3.25s", got)
	}
	if got := tl["n1"]["action done ApplyTaint"]; got != 10*time.Second {
		t.Errorf("n1 taint at %v, want +10s", got)
	}
	if _, ok := tl["n1"]["Early"]; ok || tl["other"] != nil {
		t.Errorf("kept a line from before the failure or of another node: %v", tl)
	}
	s := summarise(tl)
	if len(s) != 2 || s[0].step != "Suspected" || s[0].n != 2 || s[0].max != 7*time.Second {
		t.Errorf("summary %+v, want Suspected first, 2 nodes, max +7s", s)
	}
}

func TestTimelineNamesAStateWriteByThePhaseItWrote(t *testing.T) {
	start := time.Unix(1000, 0)
	log := `{"level":"info","ts":1001,"msg":"fence state saved","node":"n1","phase":"Suspect","took":0.2}
{"level":"info","ts":1009,"msg":"fence state saved","node":"n1","phase":"Tainting","took":1.5}
{"level":"info","ts":1010,"msg":"fence recheck done","node":"n1","action":"ApplyTaint","took":0.4}
`
	path := filepath.Join(t.TempDir(), "agent.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	tl, err := timeline(path, []string{"n1"}, start)
	if err != nil {
		t.Fatal(err)
	}
	for step, want := range map[string]time.Duration{"state saved Suspect": time.Second, "state saved Tainting": 9 * time.Second, "recheck done ApplyTaint": 10 * time.Second} {
		if got, ok := tl["n1"][step]; !ok || got != want {
			t.Errorf("%s at %v (%v), want +%v", step, got, ok, want)
		}
	}
}

func TestGzipFileKeepsTheWholeLog(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "agent.log")
	var b strings.Builder
	for i := range 5000 {
		b.WriteString(`{"ts":` + time.Unix(int64(i), 0).Format("150405") + `,"msg":"fence state saved"}` + "\n")
	}
	want := b.String()
	if err := os.WriteFile(src, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "out", "agent.log.gz")
	if err := gzipFile(src, dst); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("the kept log has %d bytes, the agent's %d", len(got), len(want))
	}
}

func TestWriteTimelineMakesItsDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "n300")
	tl := map[string]map[string]time.Duration{"n2": {"FenceTainted": 3 * time.Second, "FenceSuspect": time.Second}, "n1": {"FenceSuspect": 2 * time.Second}}
	if err := writeTimeline(dir, "powerloss", tl); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "timeline-powerloss.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "n1: +2.0s FenceSuspect;\nn2: +1.0s FenceSuspect; +3.0s FenceTainted;\n"; string(got) != want {
		t.Fatalf("timeline file:\n%s\nwant:\n%s", got, want)
	}
}
