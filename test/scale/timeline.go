//go:build scale

package scale

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A fence's timeline, read back from the agent's log (JSON, one object a
// line): for each node of a failed group, when each of its fence's steps
// first happened, counted from the failure. The steps are the agent's
// Events (by reason), its completed actions ("fence action done": a
// power-off, a read, the taint), the steps of an action ("fence recheck
// done", "fence identity checked") and its state writes by the phase
// written ("fence state saved"). Where the time goes in a scenario is read
// here, not guessed.

type logLine struct {
	TS     float64 `json:"ts"`
	Msg    string  `json:"msg"`
	Node   string  `json:"node"`
	Reason string  `json:"reason"`
	Action string  `json:"action"`
	Phase  string  `json:"phase"`
}

// timeline returns, per node of nodes, the first time (from start) of each
// step seen in the agent's log at path since start.
func timeline(path string, nodes []string, start time.Time) (map[string]map[string]time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	want := map[string]bool{}
	for _, n := range nodes {
		want[n] = true
	}
	out := map[string]map[string]time.Duration{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var l logLine
		if json.Unmarshal(line, &l) != nil || !want[l.Node] {
			continue
		}
		sec, frac := math.Modf(l.TS)
		at := time.Unix(int64(sec), int64(frac*1e9)).Sub(start)
		if at < 0 {
			continue
		}
		var step string
		switch {
		case l.Msg == "fence state saved" && l.Phase != "":
			step = "state saved " + l.Phase
		case l.Action != "":
			step = strings.TrimPrefix(l.Msg, "fence ") + " " + l.Action
		case l.Reason != "":
			step = l.Reason
		default:
			continue
		}
		steps := out[l.Node]
		if steps == nil {
			steps = map[string]time.Duration{}
			out[l.Node] = steps
		}
		if _, ok := steps[step]; !ok {
			steps[step] = at
		}
	}
	return out, sc.Err()
}

// stepSummary is one step across the nodes: how many reached it and when
// (min, median, max from the failure).
type stepSummary struct {
	step          string
	n             int
	min, med, max time.Duration
}

func summarise(tl map[string]map[string]time.Duration) []stepSummary {
	by := map[string][]time.Duration{}
	for _, steps := range tl {
		for s, at := range steps {
			by[s] = append(by[s], at)
		}
	}
	var out []stepSummary
	for s, ats := range by {
		slices.Sort(ats)
		out = append(out, stepSummary{step: s, n: len(ats), min: ats[0], med: ats[len(ats)/2], max: ats[len(ats)-1]})
	}
	slices.SortFunc(out, func(a, b stepSummary) int {
		if c := a.med - b.med; c != 0 {
			return int(c)
		}
		return strings.Compare(a.step, b.step)
	})
	return out
}

// printTimeline prints one "scale: <scenario> timeline:" line per step and
// saves every node's timeline in dir (timeline-<scenario>.txt).
func (h *harness) printTimeline(scenario, dir string, nodes []string, start time.Time) {
	tl, err := timeline(h.agent.LogPath, nodes, start)
	if err != nil {
		h.t.Logf("%s timeline: %v", scenario, err)
		return
	}
	for _, s := range summarise(tl) {
		fmt.Printf("scale: %s timeline: %-40s %3d nodes  min +%5.1fs  median +%5.1fs  max +%5.1fs\n",
			scenario, s.step, s.n, s.min.Seconds(), s.med.Seconds(), s.max.Seconds())
	}
	if dir == "" {
		return
	}
	if err := writeTimeline(dir, scenario, tl); err != nil {
		h.t.Log(err)
	}
}

// writeTimeline saves every node's timeline, one line a node, in
// dir/timeline-<scenario>.txt, making dir first: a run without profiles
// (-profile=0) into a new -out directory once lost its timeline.
func writeTimeline(dir, scenario string, tl map[string]map[string]time.Duration) error {
	var b strings.Builder
	names := make([]string, 0, len(tl))
	for n := range tl {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		type st struct {
			step string
			at   time.Duration
		}
		var steps []st
		for s, at := range tl[n] {
			steps = append(steps, st{s, at})
		}
		slices.SortFunc(steps, func(a, b st) int { return int(a.at - b.at) })
		fmt.Fprintf(&b, "%s:", n)
		for _, s := range steps {
			fmt.Fprintf(&b, " +%.1fs %s;", s.at.Seconds(), s.step)
		}
		b.WriteString("\n")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "timeline-"+scenario+".txt"), []byte(b.String()), 0o644)
}
