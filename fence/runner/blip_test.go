package runner_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// lastPhase records each node's phase as the runner last committed it (in
// memory, written or not).
type lastPhase struct {
	runner.NopRecorder
	mu    sync.Mutex
	phase map[string]fence.Phase
}

func (l *lastPhase) Phase(node string, p fence.Phase) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.phase[node] = p
}

func (l *lastPhase) of(node string) fence.Phase {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.phase[node]
}

// Issue 22, 1000 nodes × 30 pods (docs/scale/n1000/storm.txt): while 100
// power losses were fenced, the live nodes' renewals reached the saturated
// API server late, and each one silent for suspectAfter flipped Healthy →
// Suspect → Healthy: two state writes and an Event per flip, up to 714
// writes a minute, on the API server whose slowness caused them. A
// suspicion whose BMC reads On decides nothing until it lasts: it is
// written (and announced) only when it does, or when it decides.
func TestALiveNodesSilenceBlipWritesNothing(t *testing.T) {
	w := fencesim.NewWorld(t0, fence.DefaultPolicy(), 1)
	for _, n := range []string{"n1", "n2", "n3"} {
		w.AddNode(n, "a", machine.Timing{})
	}
	c := &cluster{Cluster: fencesim.Cluster{W: w}}
	phases := &lastPhase{phase: map[string]fence.Phase{}}
	r := newRunner(t, w, c, func(o *runner.Options) { o.Recorder = phases })
	syncFor(w, r, 30*time.Second)
	before := c.saves.Load()
	// n1's renewals stop reaching the API server for longer than
	// suspectAfter, then arrive again; its machine runs throughout.
	w.Node("n1").Partitioned = true
	suspected := false
	for i := 0; i < 30 && !suspected; i++ {
		syncFor(w, r, time.Second)
		suspected = phases.of("n1") == fence.Suspect
	}
	if !suspected {
		t.Fatalf("n1 never suspected in 30 s of silence: %s", w.Summary())
	}
	syncFor(w, r, 5*time.Second) // its BMC read On meanwhile
	w.Node("n1").Partitioned = false
	for i := 0; i < 30 && phases.of("n1") != fence.Healthy; i++ {
		syncFor(w, r, time.Second)
	}
	if got := phases.of("n1"); got != fence.Healthy {
		t.Fatalf("n1 is %s after its renewals came back, want Healthy", got)
	}
	if got := c.saves.Load() - before; got != 0 {
		t.Errorf("a %s blip of silence on a running node made %d state writes, want none", fence.DefaultPolicy().SuspectAfter, got)
	}
	for _, e := range events(w, "n1") {
		if strings.Contains(e, "FenceSuspect") {
			t.Errorf("the blip was announced: %s", e)
		}
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
}

// Found in review: a runner taking over a state another process wrote
// writes whatever it decides first. When that was a suspicion it would
// have kept unsaved, the takeover wrote Suspect while memory held it
// unsaved, silently; the node's renewal then wrote nothing, and the
// annotation said Suspect for good (history, remediation status, `kubectl
// fence status`). A takeover's suspicion is written and announced as one.
func TestATakeoverWritesTheSuspicionItEntersAndItsEnd(t *testing.T) {
	w := fencesim.NewWorld(t0, fence.DefaultPolicy(), 1)
	for _, n := range []string{"n1", "n2", "n3"} {
		w.AddNode(n, "a", machine.Timing{})
	}
	a := newRunner(t, w, fencesim.Cluster{W: w}, func(o *runner.Options) { o.ID = "a" })
	// a writes n1's state: a suspicion that held, and its end.
	w.Node("n1").Partitioned = true
	syncFor(w, a, 45*time.Second)
	if ph := w.Node("n1").Phase(); ph != fence.Suspect.String() {
		t.Fatalf("n1 is %s after 45 s of silence, want Suspect written", ph)
	}
	w.Node("n1").Partitioned = false
	syncFor(w, a, 5*time.Second)
	if ph := w.Node("n1").Phase(); ph != fence.Healthy.String() {
		t.Fatalf("n1 is %s after renewing, want Healthy written", ph)
	}
	// b leads now; its writes fail (a slow API server) until n1 is silent
	// again, so its takeover write is the suspicion's.
	w.SetWritesFail(true)
	b := newRunner(t, w, fencesim.Cluster{W: w}, func(o *runner.Options) { o.ID = "b" })
	w.Node("n1").Partitioned = true
	syncFor(w, b, 25*time.Second)
	w.SetWritesFail(false)
	syncFor(w, b, 2*time.Second)
	w.Node("n1").Partitioned = false
	syncFor(w, b, 10*time.Second)
	if ph := w.Node("n1").Phase(); ph != fence.Healthy.String() {
		t.Errorf("n1 renewed 10 s ago and its annotation says %s, want Healthy", ph)
	}
	said := map[string]bool{}
	for _, r := range w.Records {
		if r.Node == "n1" && r.Kind == "event" && r.At.After(t0.Add(50*time.Second)) {
			said[strings.Fields(r.Detail)[0]] = true
		}
	}
	if w.Node("n1").Phase() != fence.Healthy.String() || said["FenceSuspect"] != said["FenceRecovered"] {
		t.Errorf("b's suspicion and its end: events %v", said)
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
}
