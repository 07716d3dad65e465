package runner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// offEvents is the nodes' BMC streams: n1's pushed a live power-off event
// for its own system at at (none while at is zero).
type offEvents struct {
	mu sync.Mutex
	at time.Time
}

func (e *offEvents) set(at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.at = at
}

func (e *offEvents) OffEvent(node string) (fence.PowerEvent, string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if node != "n1" || e.at.IsZero() {
		return fence.PowerEvent{}, "sys-" + node, true
	}
	return fence.PowerEvent{System: "sys-n1", Received: e.at, ConnectedAt: t0}, "sys-n1", true
}

// leaseReads is the simulated cluster with the testbed's bunched proof of
// freshness (other nodes' Lease events arrive every bunch, not every
// second) and a log of the server reads of n1 (its live Lease reads and
// the rechecks before a ForceOff).
type leaseReads struct {
	*cluster
	bunch time.Duration
	// missing: the server has no Lease for n1 (a 404).
	missing bool
	mu      sync.Mutex
	reads   []time.Time
}

func (c *leaseReads) APIFreshAt() time.Time {
	f := c.cluster.APIFreshAt()
	if c.bunch <= 0 || f.IsZero() {
		return f
	}
	return t0.Add(f.Sub(t0) / c.bunch * c.bunch)
}

func (c *leaseReads) Recheck(ctx context.Context, node string) (runner.Recheck, error) {
	if node == "n1" {
		c.mu.Lock()
		c.reads = append(c.reads, c.W.Clock.Now())
		c.mu.Unlock()
	}
	rc, err := c.cluster.Recheck(ctx, node)
	if node == "n1" && c.missing {
		rc.LeaseMissing = true
	}
	return rc, err
}

// leaseReadWorld: three nodes that renew every 10 s from t0 (n1 last at
// +20 s), a runner with power events and live Lease reads, and the times
// at which the runner decided a ForceOff for n1 (BeforeAct).
func leaseReadWorld(t *testing.T, bunch time.Duration) (*fencesim.World, *leaseReads, *offEvents, *runner.Runner, func() []time.Time) {
	t.Helper()
	w := fencesim.NewWorld(t0, fence.DefaultPolicy(), 1)
	for _, n := range []string{"n1", "n2", "n3"} {
		w.AddNode(n, "a", machine.Timing{})
	}
	c := &leaseReads{cluster: &cluster{Cluster: fencesim.Cluster{W: w}}, bunch: bunch}
	ev := &offEvents{}
	var mu sync.Mutex
	var offs []time.Time
	r := newRunner(t, w, c, func(o *runner.Options) {
		o.Events = ev
		o.BeforeAct = func(node string, k fence.ActionKind, _ fence.State) {
			if node == "n1" && k == fence.ActPowerOff {
				mu.Lock()
				offs = append(offs, w.Clock.Now())
				mu.Unlock()
			}
		}
	})
	return w, c, ev, r, func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), offs...)
	}
}

// runUntil advances the world in steps of step until end, syncing every
// node at each step.
func runUntil(w *fencesim.World, r *runner.Runner, step time.Duration, end time.Time) {
	for w.Clock.Now().Before(end) {
		w.Clock.Step(step)
		w.Advance()
		for _, n := range w.Nodes {
			r.Sync(context.Background(), n.Name)
		}
	}
}

// The failures harness's trace: the early ForceOff of a power event went
// out at 16-19 s of silence instead of eventSilence (12 s), waiting for
// other nodes' bunched renewals to prove the view fresh. The runner's
// live read of the node's own Lease proves it at once.
func TestLiveLeaseReadStartsTheEventForceOffAtEventSilence(t *testing.T) {
	w, c, ev, r, offs := leaseReadWorld(t, 7*time.Second)
	runUntil(w, r, time.Second, t0.Add(21*time.Second)) // n1 renewed at +20 s
	if err := w.Node("n1").BMC.Event(machine.EventPowerLoss); err != nil {
		t.Fatal(err)
	}
	ev.set(w.Clock.Now())
	runUntil(w, r, time.Second, t0.Add(45*time.Second))
	got := offs()
	if len(got) == 0 {
		t.Fatalf("no ForceOff for n1; events %v", events(w, "n1"))
	}
	silence := got[0].Sub(t0.Add(20 * time.Second))
	if want := w.Policy.EventSilence + time.Second; silence > want {
		t.Fatalf("an event-started ForceOff waits for other nodes' renewals to prove the view fresh: ForceOff at %s of silence, want by %s (reads of n1 at %v)",
			silence, want, since(c.reads))
	}
}

// A live read that finds a renewal our view has not taken in (the view
// lags: a stalled watch) proves nothing: no ForceOff is decided on it
// while the view is stale, and the read is repeated at most once a
// second, for n1 only.
func TestLiveLeaseReadFindingANewerRenewalStampsNothing(t *testing.T) {
	w, c, ev, r, offs := leaseReadWorld(t, 0)
	renewBehindAFrozenViewThenLosePower(t, w, r, ev)
	// Before suspectAfter of the view's silence (+40 s), in steps of a
	// quarter second.
	runUntil(w, r, 250*time.Millisecond, t0.Add(39*time.Second))
	if got := offs(); len(got) != 0 {
		t.Fatalf("ForceOff decided at +%s on a live Lease read that found a renewal (+30 s) our frozen view lacks (it holds +20 s)", got[0].Sub(t0))
	}
	c.mu.Lock()
	reads := append([]time.Time(nil), c.reads...)
	c.mu.Unlock()
	if len(reads) == 0 {
		t.Fatal("n1's Lease never read live, though its event waited only for the view's staleness")
	}
	if first := reads[0].Sub(t0); first < 32*time.Second {
		t.Errorf("first live read at +%s, before eventSilence of the view's silence (+32 s)", first)
	}
	for i := 1; i < len(reads); i++ {
		if d := reads[i].Sub(reads[i-1]); d < runner.LeaseReadInterval {
			t.Errorf("n1's Lease read again after %s (at most once per %s): reads at %v", d, runner.LeaseReadInterval, since(reads))
			break
		}
	}
}

// A live read that finds no Lease (a 404, no renewTime) proves nothing:
// the ForceOff waits for the bunched proof as before.
func TestLiveLeaseReadFindingNoLeaseStampsNothing(t *testing.T) {
	w, c, ev, r, offs := leaseReadWorld(t, 7*time.Second)
	c.missing = true
	runUntil(w, r, time.Second, t0.Add(21*time.Second))
	if err := w.Node("n1").BMC.Event(machine.EventPowerLoss); err != nil {
		t.Fatal(err)
	}
	ev.set(w.Clock.Now())
	runUntil(w, r, time.Second, t0.Add(45*time.Second))
	got := offs()
	if len(got) == 0 {
		t.Fatalf("no ForceOff for n1; events %v", events(w, "n1"))
	}
	if silence := got[0].Sub(t0.Add(20 * time.Second)); silence <= w.Policy.EventSilence+time.Second {
		t.Fatalf("ForceOff at %s of silence on a live read that found no Lease, with the view's proof 7 s bunched", silence)
	}
}

// renewBehindAFrozenViewThenLosePower: n1 renews at +20 s, the view
// freezes at +21 s and n1 renews unseen at +30 s, then at +31 s it loses
// its power and its BMC pushes the event.
func renewBehindAFrozenViewThenLosePower(t *testing.T, w *fencesim.World, r *runner.Runner, ev *offEvents) {
	t.Helper()
	runUntil(w, r, time.Second, t0.Add(21*time.Second)) // n1 renewed at +20 s
	w.FreezeAPI()
	runUntil(w, r, time.Second, t0.Add(31*time.Second)) // renewed at +30 s, unseen
	if err := w.Node("n1").BMC.Event(machine.EventPowerLoss); err != nil {
		t.Fatal(err)
	}
	ev.set(w.Clock.Now())
}

func since(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, x := range ts {
		out[i] = "+" + x.Sub(t0).String()
	}
	return out
}

// thawAfterRead is the lease-read world whose frozen view thaws (a list of
// the Leases completes) right after the runner's k-th read of n1's view
// once armed: the read returns the old view, and the proof of freshness
// that follows it covers a renewal that view lacks.
type thawAfterRead struct {
	*leaseReads
	mu    sync.Mutex
	armed int // thaw after this many more reads of n1 (0: not armed)
}

func (c *thawAfterRead) Node(name string) (runner.NodeInfo, bool) {
	info, ok := c.leaseReads.Node(name)
	if name == "n1" {
		c.mu.Lock()
		if c.armed > 0 {
			c.armed--
			if c.armed == 0 {
				c.W.ThawAPI()
			}
		}
		c.mu.Unlock()
	}
	return info, ok
}

// A step decides on the node's view and on how fresh the view was proven:
// the proof must be the one that view was read under. The Leases are
// listed every second or so, so a list can complete between a step's read of the
// node and its read of the proof; paired the other way round, the step
// sees an old renewal with a newer proof, and the event's early ForceOff
// takes the view's silence for a missed renewal. Here n1 renewed at +30 s
// behind a frozen view (which holds +20 s), lost its power at +31 s, and
// its BMC pushed the event: every step of n1 whose view lacks the +30 s
// renewal must count the view as stale since +21 s, whatever read came
// after it.
func TestAStepUsesTheFreshnessProofItsViewWasReadUnder(t *testing.T) {
	for k := 1; k <= 3; k++ {
		w := fencesim.NewWorld(t0, fence.DefaultPolicy(), 1)
		for _, n := range []string{"n1", "n2", "n3"} {
			w.AddNode(n, "a", machine.Timing{})
		}
		c := &thawAfterRead{leaseReads: &leaseReads{cluster: &cluster{Cluster: fencesim.Cluster{W: w}}}}
		ev := &offEvents{}
		r := newRunner(t, w, c, func(o *runner.Options) {
			o.Events = ev
			o.BeforeAct = func(node string, kind fence.ActionKind, _ fence.State) {
				if node == "n1" && kind == fence.ActPowerOff {
					t.Errorf("thaw after read %d: ForceOff of n1 decided at +%s, 3 s after its last renewal (+30 s)", k, w.Clock.Now().Sub(t0))
				}
			}
		})
		renewBehindAFrozenViewThenLosePower(t, w, r, ev)
		runUntil(w, r, time.Second, t0.Add(33*time.Second))
		c.mu.Lock()
		c.armed = k
		c.mu.Unlock()
		runUntil(w, r, time.Second, t0.Add(35*time.Second))
	}
}
