package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/cluster"
)

// Every fence of a node leaves one record, kept across agent restarts and
// leader changes: a1 fences n4 and stops while the node is fenced; a2 takes
// over, continues that record, sees the node back and closes it; a second
// fence by a2 opens a second. `kubectl fence history n4 -o json` lists
// both, newest first, with their timelines' authors.
func TestHistoryAcrossLeaderChanges(t *testing.T) {
	e := newEnv(t)
	before := len(e.historyRecords("n4"))
	a1 := e.agent("a1", "")
	fence := func(what string) {
		t.Helper()
		if err := e.tb.PowerLoss("n4"); err != nil {
			t.Fatal(err)
		}
		e.waitFor(90*time.Second, what+": n4 Fenced", func() (bool, error) {
			return cluster.HasOutOfServiceTaint(e.node("n4")) && e.phase("n4") == "Fenced", nil
		})
	}
	back := func(what string) {
		t.Helper()
		if err := e.tb.PowerRestore("n4"); err != nil {
			t.Fatal(err)
		}
		e.waitFor(2*time.Minute, what+": n4 back, untainted, its record closed", func() (bool, error) {
			recs := e.historyRecords("n4")
			return !cluster.HasOutOfServiceTaint(e.node("n4")) && len(recs) > 0 && recs[0].FinishedAt != nil, nil
		})
	}
	fence("first fence, by a1")
	e.waitFor(10*time.Second, "a record for the first fence", func() (bool, error) { return len(e.historyRecords("n4")) == before+1, nil })
	a1.Stop()
	e.agent("a2", "")
	back("first fence, closed by a2")
	fence("second fence, by a2")
	back("second fence")

	recs := e.historyRecords("n4")
	if len(recs) != before+2 {
		t.Fatalf("%d records for n4, want %d: one per fence, across the leader change", len(recs), before+2)
	}
	second, first := recs[0], recs[1]
	if !second.StartedAt.After(*first.StartedAt) {
		t.Errorf("records not newest first: %s then %s", second.StartedAt, first.StartedAt)
	}
	for _, r := range []historyRecord{first, second} {
		if r.Trigger != "builtin" || r.Outcome != "Fenced" {
			t.Errorf("record %s: trigger %q outcome %q, want builtin, Fenced", r.Name, r.Trigger, r.Outcome)
		}
	}
	full := e.historyRecord("n4", first.Name)
	authors := map[string]bool{}
	for _, en := range full.Timeline {
		authors[en.Who] = true
	}
	if !authors["agent a1"] || !authors["agent a2"] || len(full.Timeline) < 5 {
		t.Errorf("the first fence's timeline: %d entries by %v; want both leaders' evidence", len(full.Timeline), authors)
	}
}

type historyRecord struct {
	Name       string     `json:"name"`
	Trigger    string     `json:"trigger"`
	Outcome    string     `json:"outcome"`
	StartedAt  *time.Time `json:"startedAt"`
	FinishedAt *time.Time `json:"finishedAt"`
	Timeline   []struct {
		Who     string `json:"who"`
		Kind    string `json:"kind"`
		Message string `json:"message"`
	} `json:"timeline"`
}

// historyRecords is `kubectl fence history NODE -o json`'s records.
func (e *env) historyRecords(node string) []historyRecord {
	e.t.Helper()
	out, _, code := e.kf("history", node, "-o", "json")
	if code != 0 {
		e.t.Fatalf("history %s: exit %d", node, code)
	}
	var h struct {
		Records []historyRecord `json:"records"`
	}
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		e.t.Fatal(err)
	}
	return h.Records
}

func (e *env) historyRecord(node, name string) historyRecord {
	e.t.Helper()
	out, _, code := e.kf("history", node, name, "-o", "json")
	if code != 0 {
		e.t.Fatalf("history %s %s: exit %d", node, name, code)
	}
	var r historyRecord
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		e.t.Fatal(err)
	}
	return r
}
