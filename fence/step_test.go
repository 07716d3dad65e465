package fence

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// stepper drives one node through a sequence of inputs, checking the
// invariants after every step.
type driver struct {
	t *testing.T
	p Policy
	s State
}

func newDriver(t *testing.T) *driver { return &driver{t: t, p: DefaultPolicy()} }

func (d *driver) step(in Input, now time.Time) Output {
	d.t.Helper()
	out := Step(d.p, d.s, in, now)
	if err := checkInvariants(d.p, d.s, in, now, out); err != nil {
		d.t.Fatalf("at %s, %v in %v: invariant violated: %v", now.Sub(t0), in.Kind, d.s.Phase, err)
	}
	d.s = out.State
	return out
}

func (d *driver) wantPhase(want Phase) {
	d.t.Helper()
	if d.s.Phase != want {
		d.t.Fatalf("phase = %v, want %v", d.s.Phase, want)
	}
}

// suspect brings the node to Suspect: heartbeat at t0, silence until 20 s.
func (d *driver) suspect(n NodeView) Output {
	d.t.Helper()
	out := d.step(tick(n, at(sec(20))), at(sec(20)))
	d.wantPhase(Suspect)
	return out
}

func TestHealthyNodeWithFreshHeartbeatStaysHealthy(t *testing.T) {
	d := newDriver(t)
	out := d.step(tick(view(heartbeat(sec(10))), at(sec(15))), at(sec(15)))
	d.wantPhase(Healthy)
	if len(out.Actions) != 0 {
		t.Errorf("actions = %v, want none", kinds(out))
	}
	if want := 15 * time.Second; out.RecheckAfter != want {
		t.Errorf("RecheckAfter = %s, want %s (until SuspectAfter elapses)", out.RecheckAfter, want)
	}
}

func TestSilenceOfSuspectAfterTriggersABMCRead(t *testing.T) {
	d := newDriver(t)
	d.step(tick(view(), at(sec(19.9))), at(sec(19.9)))
	d.wantPhase(Healthy)
	out := d.suspect(view())
	// An unsaved suspicion: read, not written, not announced.
	if diff := cmp.Diff([]ActionKind{ActReadPower}, kinds(out)); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	if !d.s.Unsaved {
		t.Error("the suspicion on silence alone is not unsaved")
	}
	if !d.s.FailureStart.Equal(t0) {
		t.Errorf("FailureStart = %v, want the last heartbeat %v", d.s.FailureStart, t0)
	}
}

// A kubelet whose runtime or CNI is down is NotReady and still renews its
// Lease: it is alive, and NotReady alone is no suspicion (invariant 2).
func TestNotReadyButRenewingIsNotSuspected(t *testing.T) {
	d := newDriver(t)
	for s := 30.0; s < 900; s += 10 {
		n := view(heartbeat(sec(s-5)), readyFalse(sec(5)))
		if out := d.step(tick(n, at(sec(s))), at(sec(s))); has(out, ActReadPower) || has(out, ActPowerOff) {
			t.Fatalf("at %s: %v for a node that renews its Lease", fmtSec(s), kinds(out))
		}
	}
	d.wantPhase(Healthy)
}

// Only the explicit opt-in powers off a NotReady node that still renews.
func TestNotReadyButRenewingIsPoweredOffOnlyWithTheOptIn(t *testing.T) {
	d := newDriver(t)
	d.p.PowerOffNotReadyAfter = 10 * time.Minute
	n := func(s float64) NodeView { return view(heartbeat(sec(s-5)), readyFalse(sec(5))) }
	d.step(tick(n(599), at(sec(599))), at(sec(599)))
	d.wantPhase(Healthy)
	d.step(tick(n(606), at(sec(606))), at(sec(606)))
	d.wantPhase(Suspect)
	out := d.step(reading(n(607), at(sec(607)), PowerOn), at(sec(607)))
	if !has(out, ActPowerOff) {
		t.Fatalf("actions = %v, want PowerOff (opt-in)", kinds(out))
	}
	d.step(result(n(607), at(sec(607)), ActPowerOff, ""), at(sec(607)))
	// Renewals already in flight before our ForceOff do not end it; a
	// renewal after it is a contradiction.
	out = d.step(reading(n(615), at(sec(615)), PowerOff), at(sec(615)))
	d.wantPhase(Stuck)
	if d.s.Stuck != StuckContradiction || has(out, ActApplyTaint) {
		t.Fatalf("stuck %v, actions %v", d.s.Stuck, kinds(out))
	}
}

// Seed timeline §5: the node shuts down; the BMC reads Off. We send our own
// ForceOff anyway, the BMC accepts it, the Off settles, we taint, pods go.
func TestShutdownNodeIsConfirmedOffThroughOurOwnForceOff(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.suspect(n)
	out := d.step(reading(n, at(sec(20.1)), PowerOff), at(sec(20.2)))
	d.wantPhase(PoweringOff)
	// The suspicion, unsaved until this reading, is announced
	// (FenceSuspect), then the ForceOff (FencePowerOff).
	if diff := cmp.Diff([]ActionKind{ActPersist, ActEvent, ActEvent, ActPowerOff}, kinds(out)); diff != "" {
		t.Fatalf("on an Off reading (-want +got):\n%s", diff)
	}
	d.step(result(n, at(sec(20.3)), ActPowerOff, ""), at(sec(20.3)))
	d.step(reading(n, at(sec(22.2)), PowerOff), at(sec(22.2)))
	d.wantPhase(ConfirmingOff)
	d.step(reading(n, at(sec(25.2)), PowerOff), at(sec(25.2)))
	out = d.step(reading(n, at(sec(28.2)), PowerOff), at(sec(28.2)))
	d.wantPhase(Tainting)
	if diff := cmp.Diff([]ActionKind{ActPersist, ActEvent, ActApplyTaint}, kinds(out)); diff != "" {
		t.Fatalf("actions (-want +got):\n%s", diff)
	}
	tainted := view(withTaint(TaintOurs), pods(2, 1))
	out = d.step(result(tainted, at(sec(28.3)), ActApplyTaint, ""), at(sec(28.3)))
	d.wantPhase(Detaching)
	if has(out, ActDeletePods) {
		t.Errorf("actions = %v: nothing is terminating yet", kinds(out))
	}
	// The taint manager evicts: the pods turn Terminating, and are
	// force-deleted at once.
	out = d.step(tick(view(withTaint(TaintOurs), pods(2, 1), terminating(2)), at(sec(28.4))), at(sec(28.4)))
	if !has(out, ActDeletePods) {
		t.Errorf("actions = %v, want DeletePods (force-delete terminating pods)", kinds(out))
	}
	// The same sync's keep-off read, on the same view: the pass is the
	// tick's, not asked for again (found in review: each reading and
	// result step of a sync asked for one more).
	out = d.step(reading(view(withTaint(TaintOurs), pods(2, 1), terminating(2)), at(sec(28.5)), PowerOff), at(sec(28.5)))
	if has(out, ActDeletePods) {
		t.Errorf("actions = %v on a keep-off reading: a second force-delete pass", kinds(out))
	}
	out = d.step(tick(view(withTaint(TaintOurs), pods(0, 0)), at(sec(32))), at(sec(32)))
	d.wantPhase(Fenced)
	if !slices.Contains(eventReasons(out), "FenceDetached") {
		t.Errorf("events = %v, want FenceDetached", eventReasons(out))
	}
}

// The agent lists a node's pods only once its fence reaches the taint: until
// that list completes the view says PodsUnknown, with no pods counted, and
// the node is not detached (check pods-listed).
func TestPodsNotListedAreNotZeroPods(t *testing.T) {
	d := newDriver(t)
	d.toTainting(view())
	unlisted := view(withTaint(TaintOurs), pods(0, 0), podsUnknown(), blockers("pods not listed yet"))
	out := d.step(result(unlisted, at(sec(28.3)), ActApplyTaint, ""), at(sec(28.3)))
	d.wantPhase(Detaching)
	if slices.Contains(eventReasons(out), "FenceDetached") {
		t.Fatalf("events = %v: detached before the node's pods were listed", eventReasons(out))
	}
	// Past the detach timeout the warning says what it does not know.
	out = d.step(tick(unlisted, at(sec(28.3)+d.p.DetachTimeout)), at(sec(28.3)+d.p.DetachTimeout))
	d.wantPhase(Detaching)
	var msg string
	for _, a := range out.Actions {
		if a.Kind == ActEvent && a.Event.Reason == "FenceDetachBlocked" {
			msg = a.Event.Message
		}
	}
	if !strings.Contains(msg, "an unknown number of pods") || !strings.Contains(msg, "pods not listed yet") {
		t.Errorf("FenceDetachBlocked = %q, want the unknown pods and the blocker", msg)
	}
	out = d.step(tick(view(withTaint(TaintOurs), pods(0, 0)), at(sec(28.3)+d.p.DetachTimeout+time.Second)), at(sec(28.3)+d.p.DetachTimeout+time.Second))
	d.wantPhase(Fenced)
	if !slices.Contains(eventReasons(out), "FenceDetached") {
		t.Errorf("events = %v, want FenceDetached once the pods are listed (none)", eventReasons(out))
	}
}

func TestOffReadingsThatDoNotCount(t *testing.T) {
	tests := []struct {
		name string
		rd   Reading
	}{
		{"before the failure began", Reading{At: t0.Add(-time.Second), Power: PowerOff}},
		{"at the failure start", Reading{At: t0, Power: PowerOff}},
		{"with BootProgress saying the OS runs", Reading{At: at(sec(21)), Power: PowerOff, OSRunning: true}},
		{"PoweringOff", Reading{At: at(sec(21)), Power: PowerPoweringOff}},
		{"Unknown (Paused, garbage)", Reading{At: at(sec(21)), Power: PowerUnknown}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(t)
			n := view()
			d.suspect(n)
			in := reading(n, at(sec(22)), 0)
			in.Reading = tt.rd
			if out := d.step(in, at(sec(22))); has(out, ActPowerOff) {
				t.Fatalf("actions = %v on a reading that is not Off", kinds(out))
			}
			d.wantPhase(Suspect)
		})
	}
}

// Seed timeline §4: a ~10 s reboot. By the time the Lease has been silent
// for SuspectAfter the machine is booting; it comes back before FenceAfter
// and is never touched.
func TestRebootIsNeverTainted(t *testing.T) {
	for _, back := range []float64{31, 45} {
		d := newDriver(t)
		n := view()
		d.suspect(n)
		var said []string
		for _, r := range []struct {
			s float64
			p Power
		}{{20.1, PowerPoweringOn}, {25.1, PowerOn}, {30.1, PowerOn}, {35.1, PowerOn}, {40.1, PowerOn}} {
			if r.s > back {
				break
			}
			out := d.step(reading(n, at(sec(r.s)), r.p), at(sec(r.s)))
			if has(out, ActPowerOff) || has(out, ActApplyTaint) {
				t.Fatalf("acted on %v: %v", r.p, kinds(out))
			}
			said = append(said, eventReasons(out)...)
		}
		d.wantPhase(Suspect)
		out := d.step(tick(view(heartbeat(sec(back))), at(sec(back))), at(sec(back)))
		d.wantPhase(Healthy)
		said = append(said, eventReasons(out)...)
		// Back within suspectAfter of the suspicion, reading On: an
		// unsaved suspicion, nothing written or said. Back later: it
		// held (written at 40 s), and its end is said.
		if back < 40 {
			if len(said) > 0 || has(out, ActPersist) {
				t.Errorf("back at %ss: said %v, actions %v; want nothing", fmtSec(back), said, kinds(out))
			}
			continue
		}
		if diff := cmp.Diff([]string{"FenceSuspect", "FenceWaiting", "FenceRecovered"}, said); diff != "" {
			t.Errorf("back at %ss: events (-want +got):\n%s", fmtSec(back), diff)
		}
	}
}

// Seed timeline §3: the kubelet stops, the machine stays On. Nothing before
// FenceAfter (a kubelet back within 5 min loses nothing); after it, ForceOff,
// and only reads later than our request count.
func TestKubeletStoppedNodeIsPoweredOffOnlyAfterFenceAfter(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.suspect(n)
	for s := 20.0; s < 300; s += 5 {
		out := d.step(reading(n, at(sec(s)), PowerOn), at(sec(s)))
		if has(out, ActPowerOff) {
			t.Fatalf("PowerOff at %ss, before FenceAfter", fmtSec(s))
		}
	}
	d.wantPhase(Suspect)
	out := d.step(reading(n, at(sec(300)), PowerOn), at(sec(300)))
	d.wantPhase(PoweringOff)
	if diff := cmp.Diff([]ActionKind{ActPersist, ActEvent, ActPowerOff}, kinds(out)); diff != "" {
		t.Fatalf("actions (-want +got):\n%s", diff)
	}
	d.step(result(n, at(sec(300.5)), ActPowerOff, ""), at(sec(300.5)))
	d.step(reading(n, at(sec(302)), PowerPoweringOff), at(sec(302)))
	d.wantPhase(PoweringOff)
	d.step(reading(n, at(sec(304)), PowerOff), at(sec(304)))
	d.wantPhase(ConfirmingOff)
	d.step(reading(n, at(sec(307)), PowerOff), at(sec(307)))
	d.step(reading(n, at(sec(310)), PowerOff), at(sec(310)))
	d.wantPhase(Tainting)
}

func fmtSec(s float64) string { return time.Duration(s * float64(time.Second)).String() }

func TestUnreachableBMCBacksOffAndSaysSoOnce(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.suspect(n)
	var waits []time.Duration
	var events []string
	now := at(sec(20))
	for i := 0; i < 7; i++ {
		out := d.step(failedReading(n, now, "unreachable"), now)
		waits = append(waits, d.s.NextReadAt.Sub(now))
		events = append(events, eventReasons(out)...)
		now = d.s.NextReadAt
	}
	d.wantPhase(Suspect)
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 60 * time.Second, 60 * time.Second, 60 * time.Second}
	if diff := cmp.Diff(want, waits); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"FenceSuspect", "FenceCannotVerify"}, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// A lying BMC accepts ForceOff and keeps reading On. After PowerOffAttempts
// the node is Stuck and never tainted.
func TestLyingBMCEndsStuckWithoutTaint(t *testing.T) {
	d := newDriver(t)
	d.p.FenceAfter = d.p.SuspectAfter
	n := view()
	d.suspect(n)
	now := at(sec(20))
	sent := 0
	for i := 0; i < 200 && d.s.Phase != Stuck; i++ {
		out := d.step(reading(n, now, PowerOn), now)
		if has(out, ActPowerOff) {
			sent++
			d.step(result(n, now, ActPowerOff, ""), now)
		}
		if has(out, ActApplyTaint) {
			t.Fatal("tainted a node whose BMC reads On")
		}
		now = now.Add(2 * time.Second)
	}
	d.wantPhase(Stuck)
	if sent != d.p.PowerOffAttempts {
		t.Errorf("sent %d power-offs, want %d", sent, d.p.PowerOffAttempts)
	}
	if d.s.Stuck != StuckPowerOffIgnored {
		t.Errorf("stuck reason = %v", d.s.Stuck)
	}
}

// PoweringOn falling back to Off after a power-off: the Off reads after our
// request still settle and the node is fenced.
func TestOffAfterPowerOffRequestIsConfirmed(t *testing.T) {
	d := newDriver(t)
	d.p.FenceAfter = d.p.SuspectAfter
	n := view()
	d.suspect(n)
	d.step(reading(n, at(sec(20)), PowerOn), at(sec(20)))
	d.wantPhase(PoweringOff)
	d.step(result(n, at(sec(20)), ActPowerOff, ""), at(sec(20)))
	// An Off read that started before our request does not count.
	d.step(reading(n, at(sec(19.9)), PowerOff), at(sec(21)))
	d.wantPhase(PoweringOff)
	d.step(reading(n, at(sec(22)), PowerOff), at(sec(22)))
	d.wantPhase(ConfirmingOff)
}

// The storm guard bounds ForceOffs to machines that may run (the BMC reads
// On, past fenceAfter): storm, zone, in-flight and cooldown refusals. A
// machine that reads exactly Off is a power loss: only the fresh view and
// the power-loss bound refuse it.
func TestStormGuard(t *testing.T) {
	tests := []struct {
		name   string
		power  Power
		fleet  func(now time.Time) FleetView
		reason string // "" admits
	}{
		{"reads On, 60% of nodes unhealthy", PowerOn, func(now time.Time) FleetView { return FleetView{Nodes: 5, Unhealthy: 3, APIFreshAt: now} }, "ClusterUnhealthy"},
		{"reads On, a zone mostly unhealthy", PowerOn, func(now time.Time) FleetView {
			return FleetView{Nodes: 10, Unhealthy: 3, APIFreshAt: now, Zones: []ZoneHealth{{"a", 4, 3}, {"b", 6, 0}}}
		}, "ZoneUnhealthy"},
		{"reads On, another fence in flight", PowerOn, func(now time.Time) FleetView { return FleetView{Nodes: 5, Unhealthy: 2, InFlight: 1, APIFreshAt: now} }, "TooManyInFlight"},
		{"reads On, a power-loss fence in flight", PowerOn, func(now time.Time) FleetView {
			return FleetView{Nodes: 5, Unhealthy: 2, InFlightPowerLoss: 1, APIFreshAt: now}
		}, ""},
		{"reads On, cooldown", PowerOn, func(now time.Time) FleetView {
			return FleetView{Nodes: 5, Unhealthy: 2, LastFenceAt: now.Add(-10 * time.Second), APIFreshAt: now}
		}, "cooldown ends in 20s"},
		{"reads On, stale API view", PowerOn, func(now time.Time) FleetView {
			return FleetView{Nodes: 5, Unhealthy: 1, APIFreshAt: now.Add(-time.Minute)}
		}, "view of the API server is 1m0s old"},
		{"reads Off, 60% of nodes unhealthy (a rack lost power)", PowerOff, func(now time.Time) FleetView {
			return FleetView{Nodes: 5, Unhealthy: 3, APIFreshAt: now}
		}, ""},
		{"reads Off, a zone wholly unhealthy", PowerOff, func(now time.Time) FleetView {
			return FleetView{Nodes: 10, Unhealthy: 4, APIFreshAt: now, Zones: []ZoneHealth{{"a", 4, 4}, {"b", 6, 0}}}
		}, ""},
		{"reads Off, another fence in flight and a cooldown", PowerOff, func(now time.Time) FleetView {
			return FleetView{Nodes: 5, Unhealthy: 2, InFlight: 1, LastFenceAt: now.Add(-10 * time.Second), APIFreshAt: now}
		}, ""},
		{"reads Off, power-loss fences at their limit", PowerOff, func(now time.Time) FleetView {
			return FleetView{Nodes: 100, Unhealthy: 51, InFlightPowerLoss: 50, APIFreshAt: now}
		}, "TooManyInFlight"},
		{"reads Off, stale API view", PowerOff, func(now time.Time) FleetView {
			return FleetView{Nodes: 5, Unhealthy: 1, APIFreshAt: now.Add(-time.Minute)}
		}, "view of the API server is 1m0s old"},
		{"reads Off, API view never fresh", PowerOff, func(now time.Time) FleetView { return FleetView{Nodes: 5, Unhealthy: 1} }, "view of the API server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(t)
			n := view()
			d.suspect(n)
			// On readings become due at fenceAfter (300 s of silence).
			from := 20.0
			if tt.power == PowerOn {
				from = 300
			}
			var msgs []string
			var powerOffs int
			for s := from; s < from+40; s += 5 {
				in := reading(n, at(sec(s)), tt.power)
				in.Fleet = tt.fleet(at(sec(s)))
				out := d.step(in, at(sec(s)))
				for _, a := range out.Actions {
					if a.Kind == ActEvent && a.Event.Reason == "FenceRefused" {
						msgs = append(msgs, a.Event.Message)
					}
				}
				if has(out, ActPowerOff) {
					powerOffs++
					break
				}
			}
			if tt.reason == "" {
				if powerOffs != 1 || len(msgs) != 0 {
					t.Errorf("ForceOffs %d, refusals %q: want the ForceOff admitted", powerOffs, msgs)
				}
				d.wantPhase(PoweringOff)
				if d.s.PowerLoss != (tt.power == PowerOff) {
					t.Errorf("PowerLoss = %v after admitting on a reading of %v", d.s.PowerLoss, tt.power)
				}
				return
			}
			d.wantPhase(Suspect)
			if powerOffs != 0 || len(msgs) != 1 || !strings.Contains(msgs[0], tt.reason) && !strings.Contains(d.s.Refusal.String(), tt.reason) {
				t.Errorf("ForceOffs %d, refusals %q: want none and exactly one refusal mentioning %q", powerOffs, msgs, tt.reason)
			}
		})
	}
}

func TestStormGuardAllowsOneDeadNodeInASmallCluster(t *testing.T) {
	now := at(0)
	if r := Admit(DefaultPolicy(), FleetView{Nodes: 2, Unhealthy: 1, APIFreshAt: now, Zones: []ZoneHealth{{"a", 1, 1}}}, now); !r.Admitted() {
		t.Errorf("Admit = %v; one dead node of two is a failure to fence, not a storm", r)
	}
}

// offAccepted takes a suspect node through our own accepted ForceOff at
// 20.1 s to the first Off of a run at 22.2 s (ConfirmingOff).
func (d *driver) offAccepted(n NodeView) {
	d.t.Helper()
	d.suspect(n)
	d.step(reading(n, at(sec(20.1)), PowerOff), at(sec(20.1)))
	d.step(result(n, at(sec(20.2)), ActPowerOff, ""), at(sec(20.2)))
	d.step(reading(n, at(sec(22.2)), PowerOff), at(sec(22.2)))
	d.wantPhase(ConfirmingOff)
}

// toTainting continues offAccepted to a settled run at 28.2 s.
func (d *driver) toTainting(n NodeView) {
	d.t.Helper()
	d.offAccepted(n)
	d.step(reading(n, at(sec(25.2)), PowerOff), at(sec(25.2)))
	d.step(reading(n, at(sec(28.2)), PowerOff), at(sec(28.2)))
	d.wantPhase(Tainting)
}

func TestMaintenanceIsNeverFenced(t *testing.T) {
	d := newDriver(t)
	out := d.step(tick(view(maintenance()), at(sec(100))), at(sec(100)))
	d.wantPhase(Maintenance)
	if has(out, ActReadPower) {
		t.Errorf("read the BMC of a node in maintenance")
	}
	// Maintenance set while a fence is under way abandons it before the taint.
	d = newDriver(t)
	n := view()
	d.offAccepted(n)
	d.step(reading(view(maintenance()), at(sec(25.2)), PowerOff), at(sec(25.2)))
	d.wantPhase(Maintenance)
	// And it ends when maintenance ends.
	d.step(tick(view(heartbeat(sec(30))), at(sec(31))), at(sec(31)))
	d.wantPhase(Healthy)
}

func TestUnfenceableNodesAreWatchedNotFenced(t *testing.T) {
	for name, opt := range map[string]nodeOpt{"excluded": excluded(), "no BMC": noBMC()} {
		t.Run(name, func(t *testing.T) {
			d := newDriver(t)
			out := d.step(tick(view(opt), at(sec(60))), at(sec(60)))
			d.wantPhase(Healthy)
			if diff := cmp.Diff([]string{"FenceNotFenceable"}, eventReasons(out)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			out = d.step(tick(view(opt), at(sec(90))), at(sec(90)))
			if len(out.Actions) != 0 {
				t.Errorf("second tick actions = %v, want none (warned once)", kinds(out))
			}
		})
	}
}

// Seed timeline, node returns after fencing: its kubelet deletes the stale
// pods; we remove our taint, only once Ready with a heartbeat after the taint.
func TestReturningNodeIsUntaintedOnlyWhenReadyWithFreshHeartbeat(t *testing.T) {
	d := newDriver(t)
	d.s = State{Phase: Fenced, TaintOwned: true, TaintedAt: at(sec(30)), FailureStart: t0}
	staleReady := view(withTaint(TaintOurs), heartbeat(sec(10)))
	out := d.step(tick(staleReady, at(sec(100))), at(sec(100)))
	d.wantPhase(Fenced)
	if has(out, ActRemoveTaint) {
		t.Fatal("removed the taint on a stale Ready")
	}
	notReadyYet := view(withTaint(TaintOurs), heartbeat(sec(100)), notReady(sec(50)))
	d.step(tick(notReadyYet, at(sec(101))), at(sec(101)))
	d.wantPhase(Fenced)
	back := view(withTaint(TaintOurs), heartbeat(sec(110)))
	out = d.step(tick(back, at(sec(110))), at(sec(110)))
	d.wantPhase(Untainting)
	if !has(out, ActRemoveTaint) {
		t.Fatalf("actions = %v, want RemoveTaint", kinds(out))
	}
	out = d.step(result(back, at(sec(110.1)), ActRemoveTaint, ""), at(sec(110.1)))
	d.wantPhase(Healthy)
	if !slices.Contains(eventReasons(out), "FenceUntainted") {
		t.Errorf("events = %v", eventReasons(out))
	}
}

// An agent started after the taint has seen the node (HeartbeatAt is its
// first sighting) but no renewal. With a stale Ready=True (a controller
// manager that is down), that must not pass for a node that came back.
func TestFirstSightingIsNoSignOfLife(t *testing.T) {
	d := newDriver(t)
	d.s = State{Phase: Fenced, TaintOwned: true, TaintedAt: at(sec(30)), FailureStart: t0}
	out := d.step(tick(view(withTaint(TaintOurs), firstSeen(sec(100))), at(sec(101))), at(sec(101)))
	if has(out, ActRemoveTaint) || d.s.Phase != Fenced {
		t.Fatalf("removed the taint of a dead node on a first sighting: %v, phase %v", kinds(out), d.s.Phase)
	}
	// Same for a fence in progress: a first sighting breaks no Off run.
	d = newDriver(t)
	d.s = State{Phase: ConfirmingOff, FailureStart: t0, PowerOffAt: at(sec(19)), PowerOffs: 1, PowerOffAccepted: true,
		OffRun: OffRun{First: at(sec(20)), Last: at(sec(20)), Count: 1}}
	d.step(reading(view(firstSeen(sec(21))), at(sec(23)), PowerOff), at(sec(23)))
	d.wantPhase(ConfirmingOff)
}

func TestForeignTaintIsNeverRemoved(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.offAccepted(n)
	d.step(reading(n, at(sec(25.2)), PowerOff), at(sec(25.2)))
	foreign := view(withTaint(TaintForeign), pods(1, 0))
	out := d.step(reading(foreign, at(sec(28.2)), PowerOff), at(sec(28.2)))
	if has(out, ActApplyTaint) {
		t.Fatal("applied a taint that is already there")
	}
	d.wantPhase(Detaching)
	back := view(withTaint(TaintForeign), heartbeat(sec(200)))
	out = d.step(tick(back, at(sec(200))), at(sec(200)))
	d.wantPhase(Healthy)
	if has(out, ActRemoveTaint) {
		t.Fatal("removed someone else's taint")
	}
}

func TestTaintFailureReReadsBeforeRetrying(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.toTainting(n)
	d.step(result(n, at(sec(28.3)), ActApplyTaint, "conflict"), at(sec(28.3)))
	out := d.step(tick(n, at(sec(32))), at(sec(32)))
	if diff := cmp.Diff([]ActionKind{ActReadPower}, kinds(out)); diff != "" {
		t.Fatalf("after a failed taint (-want +got):\n%s", diff)
	}
	out = d.step(reading(n, at(sec(32.1)), PowerOff), at(sec(32.1)))
	if !has(out, ActApplyTaint) {
		t.Fatalf("actions = %v, want ApplyTaint on a fresh Off", kinds(out))
	}
	// A non-Off answer at that point cancels the taint.
	d.step(result(n, at(sec(32.2)), ActApplyTaint, "conflict"), at(sec(32.2)))
	d.step(tick(n, at(sec(36))), at(sec(36)))
	out = d.step(reading(n, at(sec(36.1)), PowerPoweringOn), at(sec(36.1)))
	if has(out, ActApplyTaint) {
		t.Fatal("tainted on PoweringOn")
	}
	d.wantPhase(PoweringOff)
}

// An agent that resumes from the annotation long after its last read must
// not taint on old evidence: it confirms again.
func TestResumeAfterLongGapConfirmsAgain(t *testing.T) {
	d := newDriver(t)
	d.s = State{Phase: Tainting, FailureStart: t0, PowerOffAt: at(sec(19)), PowerOffs: 1, PowerOffAccepted: true,
		OffRun: OffRun{First: at(sec(20)), Last: at(sec(26)), Count: 3}}
	n := view()
	now := at(sec(600))
	out := d.step(tick(n, now), now)
	if diff := cmp.Diff([]ActionKind{ActReadPower}, kinds(out)); diff != "" {
		t.Fatalf("on resume (-want +got):\n%s", diff)
	}
	out = d.step(reading(n, now, PowerOff), now)
	if has(out, ActApplyTaint) {
		t.Fatal("tainted on a run with a 10-minute hole")
	}
	d.wantPhase(ConfirmingOff)
}

func TestAdoptsOurTaintAfterACrashBetweenPatchAndPersist(t *testing.T) {
	d := newDriver(t)
	d.s = State{Phase: Tainting, FailureStart: t0, PowerOffAt: at(sec(19)), PowerOffs: 1, PowerOffAccepted: true,
		OffRun: OffRun{First: at(sec(20)), Last: at(sec(26)), Count: 3}}
	d.step(tick(view(withTaint(TaintOurs), pods(1, 1)), at(sec(40))), at(sec(40)))
	d.wantPhase(Detaching)
	if !d.s.TaintOwned {
		t.Error("adopted taint not marked ours")
	}
}

func TestDetachBlockersAreNamed(t *testing.T) {
	d := newDriver(t)
	d.s = State{Phase: Detaching, TaintOwned: true, TaintedAt: at(0)}
	n := view(withTaint(TaintOurs), heartbeat(-time.Minute), pods(1, 1), blockers("pod default/db-0 (tolerates everything)", "VolumeAttachment csi-123"))
	out := d.step(tick(n, at(5*time.Minute)), at(5*time.Minute))
	var msg string
	for _, a := range out.Actions {
		if a.Event.Reason == "FenceDetachBlocked" {
			msg = a.Event.Message
		}
	}
	if !strings.Contains(msg, "db-0") || !strings.Contains(msg, "csi-123") {
		t.Errorf("detach-blocked message %q does not name the blockers", msg)
	}
	d.wantPhase(Detaching)
}

func TestPowerOnAfterDetach(t *testing.T) {
	d := newDriver(t)
	d.p.PowerOnAfterDetach = true
	d.s = State{Phase: Detaching, TaintOwned: true, TaintedAt: at(0)}
	n := view(withTaint(TaintOurs), heartbeat(-time.Minute))
	out := d.step(tick(n, at(sec(10))), at(sec(10)))
	d.wantPhase(PoweringOn)
	if !has(out, ActPowerOn) {
		t.Fatalf("actions = %v", kinds(out))
	}
	d.step(result(n, at(sec(10.1)), ActPowerOn, ""), at(sec(10.1)))
	d.step(reading(n, at(sec(12)), PowerPoweringOn), at(sec(12)))
	d.wantPhase(PoweringOn)
	d.step(reading(n, at(sec(60)), PowerOn), at(sec(60)))
	d.wantPhase(Recovering)
	back := view(withTaint(TaintOurs), heartbeat(sec(90)))
	out = d.step(tick(back, at(sec(90))), at(sec(90)))
	d.wantPhase(Untainting)
	if !has(out, ActRemoveTaint) {
		t.Fatalf("actions = %v", kinds(out))
	}
}

func TestCommands(t *testing.T) {
	alice := func(k CommandKind) Command { return Command{Kind: k, User: "alice", Reason: "rack 4 PDU failed"} }
	t.Run("manual fence skips the thresholds but not the proof", func(t *testing.T) {
		d := newDriver(t)
		n := view(notReady(sec(1)))
		out := d.step(command(n, at(sec(21)), alice(CmdFence)), at(sec(21)))
		d.wantPhase(Suspect)
		if !has(out, ActReadPower) {
			t.Fatalf("actions = %v", kinds(out))
		}
		out = d.step(reading(n, at(sec(21.1)), PowerOn), at(sec(21.1)))
		d.wantPhase(PoweringOff)
		if !has(out, ActPowerOff) {
			t.Fatalf("manual fence of an On node: actions = %v, want PowerOff", kinds(out))
		}
	})
	t.Run("manual fence of a node that renews is refused", func(t *testing.T) {
		d := newDriver(t)
		out := d.step(command(view(heartbeat(sec(4)), readyFalse(sec(1))), at(sec(5)), alice(CmdFence)), at(sec(5)))
		d.wantPhase(Healthy)
		if diff := cmp.Diff([]string{"FenceCommandRefused"}, eventReasons(out)); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		// The refusal is in the state, which the write acknowledging the
		// request carries, right after the command.
		recs := d.s.Evidence.Records()
		if n := len(recs); n < 2 || recs[n-2].Kind != RecCommand || recs[n-1].Kind != RecRefusal {
			t.Errorf("evidence %+v: want the command, then its refusal", recs)
		}
	})
	t.Run("manual fence follows a fence the agent already started", func(t *testing.T) {
		d := newDriver(t)
		n := view()
		d.offAccepted(n)
		out := d.step(command(n, at(sec(23)), alice(CmdFence)), at(sec(23)))
		d.wantPhase(ConfirmingOff)
		if diff := cmp.Diff([]string{"FenceManual"}, eventReasons(out)); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if !d.s.Manual || d.s.By != "alice" {
			t.Errorf("state %+v: the fence is not the human's now", d.s)
		}
	})
	t.Run("manual fence does not take over a fence of a node that looks alive", func(t *testing.T) {
		d := newDriver(t)
		n := view()
		d.offAccepted(n)
		out := d.step(command(view(heartbeat(sec(22.9))), at(sec(23)), alice(CmdFence)), at(sec(23)))
		if d.s.Manual || has(out, ActApplyTaint) {
			t.Errorf("events %v, manual %v: want no takeover", eventReasons(out), d.s.Manual)
		}
	})
	t.Run("manual fence of a node being brought back is refused", func(t *testing.T) {
		for _, p := range []Phase{PoweringOn, Recovering, Untainting} {
			d := newDriver(t)
			d.s = State{Phase: p, TaintOwned: true, TaintedAt: at(0)}
			out := d.step(command(view(withTaint(TaintOurs), notReady(sec(1))), at(sec(25)), alice(CmdFence)), at(sec(25)))
			if !slices.Contains(eventReasons(out), "FenceCommandRefused") || has(out, ActPowerOff) {
				t.Errorf("%s: events %v, actions %v: want a refusal", p, eventReasons(out), kinds(out))
			}
		}
	})
	t.Run("manual fence of a fenced node changes nothing", func(t *testing.T) {
		d := newDriver(t)
		d.s = State{Phase: Fenced, TaintOwned: true, TaintedAt: at(0)}
		out := d.step(command(view(withTaint(TaintOurs), notReady(sec(1))), at(sec(25)), alice(CmdFence)), at(sec(25)))
		d.wantPhase(Fenced)
		if diff := cmp.Diff([]string{"FenceManual"}, eventReasons(out)); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})
	t.Run("confirm taints without a BMC", func(t *testing.T) {
		d := newDriver(t)
		n := view(noBMC(), notReady(sec(40)))
		out := d.step(command(n, at(sec(60)), alice(CmdConfirm)), at(sec(60)))
		d.wantPhase(Tainting)
		if !has(out, ActApplyTaint) || !d.s.Attested || d.s.By != "alice" {
			t.Fatalf("actions = %v, state %+v", kinds(out), d.s)
		}
	})
	t.Run("confirm with a BMC reads it first", func(t *testing.T) {
		d := newDriver(t)
		n := view(notReady(sec(40)))
		out := d.step(command(n, at(sec(60)), alice(CmdConfirm)), at(sec(60)))
		if diff := cmp.Diff([]ActionKind{ActPersist, ActEvent, ActReadPower}, kinds(out)); diff != "" {
			t.Fatalf("actions (-want +got):\n%s", diff)
		}
		out = d.step(failedReading(n, at(sec(60.1)), "unreachable"), at(sec(60.1)))
		if !has(out, ActApplyTaint) {
			t.Fatalf("an unreachable BMC is why humans confirm: actions = %v", kinds(out))
		}
	})
	t.Run("confirm on maintenance is refused", func(t *testing.T) {
		d := newDriver(t)
		out := d.step(command(view(maintenance(), notReady(sec(40))), at(sec(60)), alice(CmdConfirm)), at(sec(60)))
		if has(out, ActApplyTaint) {
			t.Fatal("tainted a node in maintenance")
		}
	})
	t.Run("abort before the taint leaves nothing", func(t *testing.T) {
		d := newDriver(t)
		n := view()
		d.offAccepted(n)
		d.step(command(n, at(sec(23)), alice(CmdAbort)), at(sec(23)))
		d.wantPhase(Stuck)
		for s := 24.0; s < 200; s += 3 {
			if out := d.step(reading(n, at(sec(s)), PowerOff), at(sec(s))); has(out, ActApplyTaint) || has(out, ActReadPower) {
				t.Fatalf("an aborted fence acted: %v", kinds(out))
			}
		}
		// It is released when the node comes back.
		d.step(tick(view(heartbeat(sec(201))), at(sec(201))), at(sec(201)))
		d.wantPhase(Healthy)
	})
	t.Run("unfence with power-on", func(t *testing.T) {
		d := newDriver(t)
		d.s = State{Phase: Fenced, TaintOwned: true, TaintedAt: at(sec(30))}
		n := view(withTaint(TaintOurs))
		out := d.step(command(n, at(sec(100)), Command{Kind: CmdUnfence, User: "bob", PowerOn: true}), at(sec(100)))
		d.wantPhase(PoweringOn)
		if !has(out, ActPowerOn) {
			t.Fatalf("actions = %v", kinds(out))
		}
	})
	t.Run("unfence without our taint is refused", func(t *testing.T) {
		d := newDriver(t)
		out := d.step(command(view(withTaint(TaintForeign)), at(sec(5)), alice(CmdUnfence)), at(sec(5)))
		if has(out, ActRemoveTaint) {
			t.Fatal("removed a foreign taint")
		}
	})
}

func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatalf("DefaultPolicy().Validate() = %v", err)
	}
	tests := []struct {
		name   string
		mutate func(*Policy)
		want   string
	}{
		{"suspectAfter too short", func(p *Policy) { p.SuspectAfter = time.Second }, "policy.suspectAfter = 1s: must be between 5s and 1h0m0s"},
		{"fenceAfter below suspectAfter", func(p *Policy) { p.FenceAfter = 10 * time.Second }, "policy.fenceAfter = 10s: must be between 20s"},
		{"one settle read", func(p *Policy) { p.SettleReads = 1 }, "policy.settleReads = 1: must be between 2 and 100"},
		{"fraction zero", func(p *Policy) { p.MaxUnhealthyFraction = 0 }, "policy.maxUnhealthyFraction = 0"},
		{"fraction above one", func(p *Policy) { p.MaxUnhealthyFraction = 1.5 }, "policy.maxUnhealthyFraction = 1.5"},
		{"staleness above suspectAfter", func(p *Policy) { p.MaxAPIStaleness = time.Minute }, "policy.maxAPIStaleness = 1m0s"},
		{"no concurrent fences", func(p *Policy) { p.MaxConcurrentFences = 0 }, "policy.maxConcurrentFences = 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicy()
			tt.mutate(&p)
			err := p.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestOffRunSettles(t *testing.T) {
	p := DefaultPolicy()
	off := func(s float64) Reading { return Reading{At: at(sec(s)), Power: PowerOff} }
	var r OffRun
	for _, s := range []float64{1, 4} {
		r = r.Observe(off(s), t0, p.MaxReadGap)
	}
	if r.Settled(p) {
		t.Fatal("two reads settled")
	}
	r = r.Observe(off(6.9), t0, p.MaxReadGap)
	if r.Settled(p) {
		t.Fatal("three reads over 5.9 s settled a 6 s window")
	}
	r = r.Observe(off(9), t0, p.MaxReadGap)
	if !r.Settled(p) {
		t.Fatalf("four reads over 8 s did not settle: %+v", r)
	}
	if r.Observe(Reading{At: at(sec(10)), Power: PowerPoweringOn}, t0, p.MaxReadGap).Count != 0 {
		t.Error("a PoweringOn reading did not reset the run")
	}
	if got := r.Observe(off(9), t0, p.MaxReadGap); got.Count != 0 {
		t.Error("a reading not later than the last extended the run")
	}
	if got := r.Observe(off(100), t0, p.MaxReadGap); got.Count != 1 {
		t.Errorf("a reading after a long gap: run %+v, want a new run of one", got)
	}
}

// In a partition the guard admits one fence at a time: a waiting node's
// refusal alternates between "another fence in flight" and "cooldown" as
// fences start and finish. Both say "the guard paces fences": one Event,
// not one per flip (418 Events for 100 nodes in the scale harness).
func TestPacedRefusalsAreSaidOnce(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.suspect(n)
	refused := 0
	for i, s := 0, 300.0; s < 420; i, s = i+1, s+5 {
		in := reading(n, at(sec(s)), PowerOn)
		in.Fleet = FleetView{Nodes: 100, Unhealthy: 10, APIFreshAt: at(sec(s)), LastFenceAt: at(sec(s - 5))}
		if i%2 == 0 {
			in.Fleet.InFlight = 1
		}
		out := d.step(in, at(sec(s)))
		if has(out, ActPowerOff) {
			t.Fatalf("ForceOff at %s while the guard paces fences", fmtSec(s))
		}
		for _, a := range out.Actions {
			if a.Kind == ActEvent && a.Event.Reason == "FenceRefused" {
				refused++
			}
		}
	}
	if refused != 1 {
		t.Errorf("%d FenceRefused Events while the refusal flipped between in-flight and cooldown, want 1", refused)
	}
}

// A BMC that answers now and then (On) between long silences: the node is
// reported unfenceable once in the episode, not at every new streak of
// failed reads, and the Event names the command that fences it by hand.
func TestUnfenceableIsReportedOncePerEpisodeWithTheCommandToFenceItByHand(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.suspect(n)
	var msgs []string
	var events []Event
	now := at(sec(20))
	for i := 0; i < 12; i++ {
		in := failedReading(n, now, "unreachable")
		if i%3 == 2 {
			in = reading(n, now, PowerOn)
		}
		out := d.step(in, now)
		for _, a := range out.Actions {
			if a.Kind == ActEvent && a.Event.Reason == "FenceCannotVerify" {
				msgs = append(msgs, a.Event.Message)
				events = append(events, a.Event)
			}
		}
		now = now.Add(5 * time.Second)
	}
	if len(msgs) != 1 {
		t.Fatalf("FenceCannotVerify sent %d times in one episode, want once:\n%s", len(msgs), strings.Join(msgs, "\n"))
	}
	if !events[0].ManualFence {
		t.Errorf("the Event does not ask for the command that fences it by hand (Event.ManualFence): %q", msgs[0])
	}
}

// Issue 22: a suspicion on silence alone is kept in memory (unsaved) while
// its machine reads On; it is written, and announced, once it lasted
// suspectAfter, and the Step asks to be woken for that.
func TestAnUnsavedSuspicionIsWrittenWhenItLasts(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.suspect(n)
	out := d.step(reading(n, at(sec(20.1)), PowerOn), at(sec(20.1)))
	if len(out.Actions) != 0 || !d.s.Unsaved {
		t.Fatalf("a first read On: actions %v, unsaved %v; want none, unsaved", kinds(out), d.s.Unsaved)
	}
	if out.RecheckAfter > 20*time.Second {
		t.Errorf("RecheckAfter %s, want at most the 20 s until the suspicion holds", out.RecheckAfter)
	}
	out = d.step(tick(n, at(sec(39.9))), at(sec(39.9)))
	if has(out, ActPersist) || !d.s.Unsaved {
		t.Fatalf("at 39.9 s: actions %v, unsaved %v; want no write yet", kinds(out), d.s.Unsaved)
	}
	out = d.step(tick(n, at(sec(40))), at(sec(40)))
	d.wantPhase(Suspect)
	if !has(out, ActPersist) || d.s.Unsaved {
		t.Fatalf("at 40 s: actions %v, unsaved %v; want it written", kinds(out), d.s.Unsaved)
	}
	if diff := cmp.Diff([]string{"FenceSuspect", "FenceWaiting"}, eventReasons(out)); diff != "" {
		t.Errorf("events when it holds (-want +got):\n%s", diff)
	}
	// Written once: the next read On writes nothing.
	if out := d.step(reading(n, at(sec(45)), PowerOn), at(sec(45))); has(out, ActPersist) {
		t.Errorf("a read On after the suspicion was written: %v", kinds(out))
	}
}

// Found in review: an unsaved suspicion announced in the step that left it
// (an Off reading, our ForceOff) named the new phase's start as its own;
// and its end by a step that says something else (not fenceable) dropped
// what that step said.
func TestAnUnsavedSuspicionIsAnnouncedWithItsStartAndKeepsOtherWords(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.suspect(n)
	out := d.step(reading(n, at(sec(30)), PowerOff), at(sec(30)))
	d.wantPhase(PoweringOff)
	var msg string
	for _, a := range out.Actions {
		if a.Kind == ActEvent && a.Event.Reason == "FenceSuspect" {
			msg = a.Event.Message
		}
	}
	if want := "suspected since " + stamp(at(sec(20))); !strings.Contains(msg, want) {
		t.Errorf("FenceSuspect %q, want it to say %q", msg, want)
	}

	d = newDriver(t)
	d.suspect(n)
	excluded := n
	excluded.Excluded = true
	out = d.step(tick(excluded, at(sec(25))), at(sec(25)))
	d.wantPhase(Healthy)
	if !slices.Contains(eventReasons(out), "FenceNotFenceable") || !has(out, ActPersist) {
		t.Errorf("an unsaved suspicion ended by an exclusion: %v, events %v; want FenceNotFenceable, written", kinds(out), eventReasons(out))
	}
}
