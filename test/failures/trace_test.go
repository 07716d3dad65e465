//go:build failures

package failures

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// trace prints one run's timeline (-trace), every time from the failure:
// the Lease's last renewal before it, the agent's steps for the node from
// its log (its Events by reason, its completed actions with the phase they
// left), the moment the Lease silence reached suspectAfter since that
// renewal (the floor of any taint), and what the harness saw of the pod:
// the old one deleting or gone, its replacement bound, Running. Where the
// time goes is read here, not guessed.
func (h *harness) trace(c class, run int, node string, o outcome) {
	type step struct {
		at   time.Duration
		what string
	}
	var steps []step
	if !o.renewedAt.IsZero() {
		steps = append(steps, step{o.renewedAt.Sub(o.t0), "Lease renewed (renewTime)"},
			step{o.renewedAt.Add(policy.SuspectAfter).Sub(o.t0), "floor: silence reaches suspectAfter"})
	}
	steps = append(steps, step{0, "failure"})
	for _, l := range agentSteps(h.agent.LogPath, node, o.t0, o.watched) {
		steps = append(steps, step{l.at, l.what})
	}
	for _, p := range []struct {
		at   time.Duration
		what string
	}{{o.tainted, "taint seen"}, {o.oldDeleted, "old pod deleting or gone"}, {o.newScheduled, "replacement bound"}, {o.running, "replacement Running, volume attached"}} {
		if p.at != 0 {
			steps = append(steps, step{p.at, p.what})
		}
	}
	for at, n := range o.renewals {
		steps = append(steps, step{at.Sub(o.t0), "renewal " + n})
	}
	sortSteps := func(a, b step) int { return int(a.at - b.at) }
	slices.SortStableFunc(steps, sortSteps)
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, " %+.2fs %s;", s.at.Seconds(), s.what)
	}
	fmt.Printf("failures: trace: %s run %d (%s):%s\n", c.name, run, node, b.String())
}

type agentStep struct {
	at   time.Duration
	what string
}

// agentSteps reads the agent's JSON log: the node's Events and completed
// (or failed) actions from t0 to t0+d.
func agentSteps(path, node string, t0 time.Time, d time.Duration) []agentStep {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []agentStep
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var l struct {
			TS     float64 `json:"ts"`
			Msg    string  `json:"msg"`
			Node   string  `json:"node"`
			Reason string  `json:"reason"`
			Action string  `json:"action"`
			Phase  string  `json:"phase"`
		}
		if json.Unmarshal(line, &l) != nil || l.Node != node {
			continue
		}
		sec, frac := math.Modf(l.TS)
		at := time.Unix(int64(sec), int64(frac*1e9)).Sub(t0)
		if at < -time.Second || at > d+time.Second {
			continue
		}
		switch {
		case l.Action != "":
			out = append(out, agentStep{at, strings.TrimPrefix(l.Msg, "fence ") + " " + l.Action + " → " + l.Phase})
		case l.Reason != "":
			out = append(out, agentStep{at, l.Reason})
		default:
			out = append(out, agentStep{at, l.Msg})
		}
	}
	return out
}
