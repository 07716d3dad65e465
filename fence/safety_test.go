package fence

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The tests in this file are named for the defects the safety review found
// (issue "Safety, proven against a world that can break it"). Each failed on
// the engine before the fix.

// Why 1: when the BMC already read Off, no ForceOff was sent and three Off
// reads over 6 s confirmed, so a restart's off-dwell was taken for a fence.
func TestAnOffWeDidNotCauseIsNeverProof(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.suspect(n)
	out := d.step(reading(n, at(sec(20.1)), PowerOff), at(sec(20.1)))
	if !has(out, ActPowerOff) {
		t.Fatalf("on an Off reading: actions %v, want our own ForceOff", kinds(out))
	}
	// Without any ForceOff result yet, or with the BMC refusing it as
	// "already off", Off reads over the short window prove nothing.
	d.step(alreadyOff(n, at(sec(20.2))), at(sec(20.2)))
	for s := 22.0; s < 80; s += 3 {
		if out := d.step(reading(n, at(sec(s)), PowerOff), at(sec(s))); has(out, ActApplyTaint) {
			t.Fatalf("tainted at %s on an Off the BMC did not make (unassisted window %s)", fmtSec(s), d.p.UnassistedSettleWindow)
		}
	}
	// It counts once it outlasts the unassisted window: 60 s of Off reads.
	out = d.step(reading(n, at(sec(82.5)), PowerOff), at(sec(82.5)))
	if !has(out, ActApplyTaint) {
		t.Fatalf("Off for %s after an 'already off' answer: actions %v, want the taint", fmtSec(82.5-22), kinds(out))
	}
}

// Why 1, the reproduction: a ForceRestart whose off-dwell (40 s) outlasts
// the settle window. The BMC answers "already off" to our ForceOff, the
// machine then powers on: we force it off again, this time accepted, and
// only then does the Off settle.
func TestRestartOffDwellLongerThanTheSettleWindowIsNotTainted(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.suspect(n)
	d.step(reading(n, at(sec(20.1)), PowerOff), at(sec(20.1)))
	d.step(alreadyOff(n, at(sec(20.2))), at(sec(20.2)))
	for s := 22.0; s <= 40; s += 3 {
		if out := d.step(reading(n, at(sec(s)), PowerOff), at(sec(s))); has(out, ActApplyTaint) {
			t.Fatalf("tainted a rebooting node at %s", fmtSec(s))
		}
	}
	out := d.step(reading(n, at(sec(43)), PowerPoweringOn), at(sec(43)))
	if !has(out, ActPowerOff) {
		t.Fatalf("the machine came up after an unaccepted ForceOff: actions %v, want ForceOff again", kinds(out))
	}
	d.step(result(n, at(sec(43.1)), ActPowerOff, ""), at(sec(43.1)))
	d.step(reading(n, at(sec(45)), PowerOff), at(sec(45)))
	d.step(reading(n, at(sec(48)), PowerOff), at(sec(48)))
	out = d.step(reading(n, at(sec(51)), PowerOff), at(sec(51)))
	if !has(out, ActApplyTaint) {
		t.Fatalf("after our accepted ForceOff and a settled run: actions %v", kinds(out))
	}
}

// Why 2: a renewal during an Off run only restarted the run, and a 6 s
// settle window fits between two 10 s renewals: a live node with a wrong
// inventory entry or a caching BMC was tainted. A renewal after our
// accepted ForceOff is a contradiction: Stuck, never tainted.
func TestRenewalAfterOurAcceptedForceOffGoesStuckNotTainted(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.offAccepted(n)
	alive := view(heartbeat(sec(23)))
	out := d.step(reading(alive, at(sec(25.2)), PowerOff), at(sec(25.2)))
	d.wantPhase(Stuck)
	if d.s.Stuck != StuckContradiction || !slices.Contains(eventReasons(out), "FenceContradiction") {
		t.Fatalf("stuck %v, events %v", d.s.Stuck, eventReasons(out))
	}
	for s := 28.0; s < 300; s += 3 {
		if out := d.step(reading(alive, at(sec(s)), PowerOff), at(sec(s))); has(out, ActApplyTaint) || has(out, ActPowerOff) {
			t.Fatalf("acted on a contradicted fence: %v", kinds(out))
		}
	}
}

// Why 2: a renewal since the failure began, before any accepted ForceOff,
// means the kubelet runs: the fence ends with nothing done.
func TestRenewalBeforeAnyAcceptedForceOffEndsTheFence(t *testing.T) {
	d := newDriver(t)
	n := view(notReady(sec(-30)))
	d.suspect(n)
	d.step(reading(n, at(sec(20.1)), PowerOff), at(sec(20.1)))
	d.step(alreadyOff(n, at(sec(20.2))), at(sec(20.2)))
	out := d.step(reading(view(notReady(sec(-30)), heartbeat(sec(21))), at(sec(22)), PowerOff), at(sec(22)))
	d.wantPhase(Healthy)
	if !slices.Contains(eventReasons(out), "FenceRecovered") {
		t.Errorf("events %v", eventReasons(out))
	}
}

// Why 2: the engine sent ForceOff to nodes that were NotReady but still
// renewing their Lease (UnhealthyFor counted NotReady time, not silence).
func TestNotReadyNodeThatRenewsIsNeverPoweredOff(t *testing.T) {
	d := newDriver(t)
	for s := 10.0; s < 1200; s += 5 {
		n := view(heartbeat(sec(s-3)), readyFalse(sec(1)))
		for _, in := range []Input{tick(n, at(sec(s))), reading(n, at(sec(s)), PowerOn), reading(n, at(sec(s)), PowerOff)} {
			if out := d.step(in, at(sec(s))); has(out, ActPowerOff) || has(out, ActApplyTaint) {
				t.Fatalf("at %s: %v on a node that renews its Lease", fmtSec(s), kinds(out))
			}
		}
	}
}

// Why 3: readings from a never-verified BMC counted after an inventory
// change mid-fence. A reading from another target than the fence's voids
// the run and our ForceOff's acceptance: it starts over against the new
// target, which must get its own accepted ForceOff.
func TestReadingFromANewTargetStartsTheFenceOver(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.suspect(n)
	d.step(readingFrom(n, at(sec(20.1)), PowerOff, "old"), at(sec(20.1)))
	d.step(result(n, at(sec(20.2)), ActPowerOff, ""), at(sec(20.2)))
	d.step(readingFrom(n, at(sec(22.2)), PowerOff, "old"), at(sec(22.2)))
	d.step(readingFrom(n, at(sec(25.2)), PowerOff, "old"), at(sec(25.2)))
	out := d.step(readingFrom(n, at(sec(28.2)), PowerOff, "new"), at(sec(28.2)))
	if has(out, ActApplyTaint) {
		t.Fatal("tainted on a run that mixes two BMCs")
	}
	if !slices.Contains(eventReasons(out), "FenceTargetChanged") || !has(out, ActPowerOff) {
		t.Fatalf("events %v, actions %v: want the change said and our own ForceOff to the new target", eventReasons(out), kinds(out))
	}
	if d.s.Target != "new" || d.s.PowerOffAccepted {
		t.Errorf("target %q accepted %v", d.s.Target, d.s.PowerOffAccepted)
	}
}

// Why 5: an Off run persisted by one replica was extended with another
// replica's clock. Adopt starts every proof over on our clock.
func TestAStateAnotherProcessWroteIsAdoptedOnOurClock(t *testing.T) {
	theirs := State{Writer: "replica-a", Phase: ConfirmingOff, FailureStart: at(sec(30)), AdmittedAt: at(sec(50)),
		PowerOffAt: at(sec(50)), PowerOffs: 1, PowerOffAccepted: true, Target: "bmc",
		OffRun: OffRun{First: at(sec(52)), Last: at(sec(55)), Count: 2}, NextReadAt: at(sec(58)), Manual: true, By: "alice"}
	now := at(sec(40)) // our clock runs behind theirs
	got := Adopt(DefaultPolicy(), theirs, "replica-b", view(heartbeat(sec(39))), now)
	want := State{Writer: "replica-b", Phase: Suspect, Since: now, FailureStart: at(sec(39)), AdmittedAt: now,
		Manual: true, By: "alice"}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(Evidence{}), cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Evidence" }, cmp.Ignore())); diff != "" {
		t.Errorf("adopted state (-want +got):\n%s", diff)
	}
	if same := Adopt(DefaultPolicy(), got, "replica-b", view(heartbeat(sec(45))), at(sec(46))); !cmp.Equal(same, got, cmp.AllowUnexported(Evidence{})) {
		t.Error("adopting our own state changed it")
	}
	// A taint's time becomes ours: it is removed only after a renewal we
	// observed after adopting it.
	fenced := Adopt(DefaultPolicy(), State{Writer: "a", Phase: Fenced, TaintOwned: true, TaintedAt: at(sec(90))}, "b", view(heartbeat(sec(10))), at(sec(60)))
	if !fenced.TaintedAt.Equal(at(sec(60))) {
		t.Errorf("TaintedAt = %v, want our now", fenced.TaintedAt)
	}
}

// Why 6: a request's age was checked only when first decoded, so a confirm
// re-fed while persists failed was acted on hours later.
func TestRequestAgeIsCheckedWhenTaken(t *testing.T) {
	for _, k := range []CommandKind{CmdFence, CmdConfirm} {
		d := newDriver(t)
		n := view(noBMC(), notReady(sec(40)))
		if k == CmdFence {
			n = view(notReady(sec(40)))
		}
		now := at(2 * time.Hour)
		out := d.step(command(n, now, Command{Kind: k, User: "alice", Reason: "x", SeenAt: now.Add(-16 * time.Minute)}), now)
		recs := d.s.Evidence.Records()
		if has(out, ActApplyTaint) || d.s.Manual || d.s.Attested || !slices.Contains(eventReasons(out), "FenceCommandRefused") ||
			!strings.Contains(recs[1].Note, "expire") {
			t.Errorf("%v seen 16 min ago: manual %v attested %v, actions %v, evidence %+v", k, d.s.Manual, d.s.Attested, kinds(out), recs)
		}
	}
}

// Why 6: a confirm tainted a NotReady node whose Lease we saw renewing, or
// whose BMC read On a second ago.
func TestConfirmIsRefusedAgainstALiveWitness(t *testing.T) {
	alice := Command{Kind: CmdConfirm, User: "alice", Reason: "I checked"}
	t.Run("the Lease renews", func(t *testing.T) {
		d := newDriver(t)
		out := d.step(command(view(heartbeat(sec(55)), readyFalse(sec(5))), at(sec(60)), alice), at(sec(60)))
		if d.s.Attested || !slices.Contains(eventReasons(out), "FenceCommandRefused") {
			t.Fatalf("attested %v, events %v", d.s.Attested, eventReasons(out))
		}
	})
	t.Run("the BMC read On a moment ago", func(t *testing.T) {
		d := newDriver(t)
		n := view()
		d.suspect(n)
		d.step(reading(n, at(sec(21)), PowerOn), at(sec(21)))
		out := d.step(command(n, at(sec(22)), alice), at(sec(22)))
		if d.s.Attested || !slices.Contains(eventReasons(out), "FenceCommandRefused") {
			t.Fatalf("attested %v, events %v", d.s.Attested, eventReasons(out))
		}
	})
	t.Run("the BMC reads On right before the taint", func(t *testing.T) {
		d := newDriver(t)
		n := view(notReady(sec(40)))
		d.step(command(n, at(sec(60)), alice), at(sec(60)))
		out := d.step(reading(n, at(sec(60.1)), PowerOn), at(sec(60.1)))
		if has(out, ActApplyTaint) || d.s.Attested {
			t.Fatalf("tainted on a confirm while the BMC reads On: %v", kinds(out))
		}
	})
	t.Run("--force with a reason overrides", func(t *testing.T) {
		d := newDriver(t)
		n := view(noBMC(), heartbeat(sec(55)), readyFalse(sec(5)))
		forced := alice
		forced.Force = true
		out := d.step(command(n, at(sec(60)), forced), at(sec(60)))
		if !has(out, ActApplyTaint) || !d.s.Forced {
			t.Fatalf("forced confirm: actions %v", kinds(out))
		}
	})
}

// Why 6: an attested Tainting never expired.
func TestAttestationExpires(t *testing.T) {
	d := newDriver(t)
	n := view(noBMC(), notReady(sec(40)))
	d.step(command(n, at(sec(60)), Command{Kind: CmdConfirm, User: "alice", Reason: "off"}), at(sec(60)))
	d.step(result(n, at(sec(60.1)), ActApplyTaint, "the API server is down"), at(sec(60.1)))
	now := at(sec(60) + d.p.AttestationTTL)
	out := d.step(tick(n, now), now)
	if has(out, ActApplyTaint) || d.s.Attested || !slices.Contains(eventReasons(out), "FenceAttestationExpired") {
		t.Fatalf("after the TTL: actions %v, attested %v, events %v", kinds(out), d.s.Attested, eventReasons(out))
	}
}

// Why 7: a retried or resumed taint skipped the stale-view and partition
// checks.
func TestRetriedTaintRechecksTheStaleViewAndPartition(t *testing.T) {
	tests := []struct {
		name  string
		fleet FleetView
		taint bool
	}{
		{"stale view", FleetView{Nodes: 5, Unhealthy: 1, APIFreshAt: at(sec(-60))}, false},
		// Off settled after our own accepted ForceOff: the machine is
		// physically off, and a rack that lost power trips the storm
		// fraction at once. The storm does not hold its taint back.
		{"storm, our accepted ForceOff", FleetView{Nodes: 5, Unhealthy: 3}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(t)
			n := view()
			d.toTainting(n)
			d.step(result(n, at(sec(28.3)), ActApplyTaint, "conflict"), at(sec(28.3)))
			d.step(tick(n, at(sec(32))), at(sec(32)))
			in := reading(n, at(sec(32.1)), PowerOff)
			fleet := tt.fleet
			if fleet.APIFreshAt.IsZero() {
				fleet.APIFreshAt = at(sec(32.1))
			}
			in.Fleet = fleet
			if out := d.step(in, at(sec(32.1))); has(out, ActApplyTaint) != tt.taint {
				t.Fatalf("retried taint = %v on %s, want %v", has(out, ActApplyTaint), tt.name, tt.taint)
			}
		})
	}
}

// A storm still holds back the taint of an Off we did not cause (the BMC
// answered "already off"): only our own accepted ForceOff makes the Off
// physical proof that a partition cannot fake.
func TestStormHoldsBackAnUnassistedOff(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.suspect(n)
	d.step(reading(n, at(sec(20.1)), PowerOff), at(sec(20.1)))
	d.step(alreadyOff(n, at(sec(20.2))), at(sec(20.2)))
	storm := FleetView{Nodes: 5, Unhealthy: 3}
	for s := 22.0; s <= 100; s += 3 {
		in := reading(n, at(sec(s)), PowerOff)
		in.Fleet = storm
		in.Fleet.APIFreshAt = at(sec(s))
		if out := d.step(in, at(sec(s))); has(out, ActApplyTaint) {
			t.Fatalf("tainted at +%gs in a storm on an Off the BMC did not accept a ForceOff for", s)
		}
	}
}

// Why 7: the guard compared with > where the node lifecycle controller
// compares with >=, so the two disagreed exactly at the threshold.
func TestStormThresholdComparesLikeTheNodeLifecycleController(t *testing.T) {
	p := DefaultPolicy()
	p.MaxUnhealthyFraction = 0.5
	now := at(0)
	if r := Admit(p, FleetView{Nodes: 6, Unhealthy: 3, APIFreshAt: now}, now); r.Reason != RefuseClusterUnhealthy {
		t.Errorf("3 of 6 unhealthy at threshold 0.5: %v, want ClusterUnhealthy", r)
	}
	if r := Admit(p, FleetView{Nodes: 4, Unhealthy: 2, APIFreshAt: now}, now); !r.Admitted() {
		t.Errorf("2 of 4 unhealthy: %v; the controller needs more than 2 not ready", r)
	}
}

// Why 7: when our taint was removed by hand the owner mark stayed, so a
// later taint by someone else counted as ours.
func TestOurTaintFoundGoneClearsTheOwnerMark(t *testing.T) {
	d := newDriver(t)
	d.s = State{Phase: Detaching, TaintOwned: true, TaintedAt: at(0)}
	out := d.step(tick(view(pods(1, 0)), at(sec(10))), at(sec(10)))
	d.wantPhase(Healthy)
	if !slices.Contains(eventReasons(out), "FenceTaintLost") || !has(out, ActForgetTaint) || has(out, ActRemoveTaint) {
		t.Errorf("events %v, actions %v: want FenceTaintLost and the owner mark cleared", eventReasons(out), kinds(out))
	}
}

// Invariant 7: a machine powered on while its volumes are being detached
// is forced off again.
func TestMachinePoweredOnWhileDetachingIsForcedOffAgain(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.toTainting(n)
	tainted := view(withTaint(TaintOurs), pods(1, 1))
	d.step(result(tainted, at(sec(28.3)), ActApplyTaint, ""), at(sec(28.3)))
	d.wantPhase(Detaching)
	out := d.step(tick(tainted, at(sec(31.4))), at(sec(31.4)))
	if !has(out, ActReadPower) {
		t.Fatalf("detaching: actions %v, want power read again", kinds(out))
	}
	out = d.step(reading(tainted, at(sec(31.5)), PowerOn), at(sec(31.5)))
	if !has(out, ActPowerOff) || !slices.Contains(eventReasons(out), "FencePoweredOnDuringFence") || d.s.KeptOff != 1 {
		t.Fatalf("On while detaching: actions %v, events %v, kept off %d", kinds(out), eventReasons(out), d.s.KeptOff)
	}
	d.wantPhase(Detaching)
}

// Why 5: a process that has just started (the CLI, a new leader) has seen
// the node but no renewal. Its first sighting is no evidence of death: a
// human's fence is taken, but our ForceOff waits until this process has
// watched the node silent for SuspectAfter on its own clock.
func TestAFreshProcessWaitsOutTheSilenceOnItsOwnClock(t *testing.T) {
	d := newDriver(t)
	n := view(firstSeen(sec(100)), notReady(sec(100)))
	out := d.step(command(n, at(sec(100)), Command{Kind: CmdFence, User: "alice", Reason: "PSU"}), at(sec(100)))
	if slices.Contains(eventReasons(out), "FenceCommandRefused") || !d.s.Manual {
		t.Fatalf("a fresh process refused the fence: events %v", eventReasons(out))
	}
	for s := 100.5; s < 120; s += 2 {
		if out := d.step(reading(n, at(sec(s)), PowerOn), at(sec(s))); has(out, ActPowerOff) {
			t.Fatalf("ForceOff %s after this process first saw the node", fmtSec(s-100))
		}
	}
	if out := d.step(reading(n, at(sec(120.5)), PowerOn), at(sec(120.5))); !has(out, ActPowerOff) {
		t.Fatalf("after %s of silence on our clock: actions %v, want the human's ForceOff", d.p.SuspectAfter, kinds(out))
	}
}

// Found by the randomized simulation (scenario storm-guard-after-failover):
// a fence taken over by a new leader is back in Suspect with its old
// admission, and Suspect does not count as in flight, so another fence
// was admitted meanwhile; the first then powered off its (running,
// partitioned) machine on the absolute part of the guard alone, two at once
// with maxConcurrentFences 1. A fence out of flight is admitted again.
func TestAFenceBackInSuspectIsAdmittedAgain(t *testing.T) {
	p := DefaultPolicy()
	p.FenceAfter = 60 * time.Second
	now := at(sec(80))
	n := view(heartbeat(sec(20)), notReady(sec(60)))
	s := State{Phase: Suspect, Since: at(sec(60)), FailureStart: at(sec(20)), AdmittedAt: at(sec(60))}
	in := reading(n, now, PowerOn)
	in.Fleet = FleetView{Nodes: 5, Unhealthy: 2, InFlight: 1, APIFreshAt: now}
	out := Step(p, s, in, now)
	if has(out, ActPowerOff) {
		t.Fatalf("a fence back in Suspect sent ForceOff while another fence is in flight (maxConcurrentFences %d): %v", p.MaxConcurrentFences, kinds(out))
	}
	in.Fleet.InFlight = 0
	out = Step(p, s, in, now)
	if !has(out, ActPowerOff) || !out.State.AdmittedAt.Equal(now) {
		t.Fatalf("once nothing is in flight: actions %v, admitted at %v; want ForceOff, admitted now", kinds(out), out.State.AdmittedAt)
	}
}

// Found by the randomized simulation (seed 46601): a NotReady fence (the
// explicit powerOffNotReadyAfter opt-in) adopted by another process starts
// its failure at that process's latest sighting of the node. When that
// sighting was the renewal that reported Ready again, "Ready with a renewal
// after the failure began" did not hold, and the new leader powered off a
// Ready node that renews its Lease. Ready ends a NotReady fence.
func TestANotReadyFenceEndsWhenTheNodeIsReady(t *testing.T) {
	p := DefaultPolicy()
	p.PowerOffNotReadyAfter = 2 * time.Minute
	now := at(sec(310))
	n := view(heartbeat(sec(310)))
	theirs := State{Writer: "a", Phase: Suspect, Since: at(sec(250)), FailureStart: at(sec(250)), NotReadyFence: true, AdmittedAt: at(sec(250))}
	s := Adopt(p, theirs, "b", n, now)
	out := Step(p, s, reading(n, now, PowerOn), now)
	if has(out, ActPowerOff) || out.State.Phase != Healthy {
		t.Fatalf("a NotReady fence of a node Ready again: actions %v, phase %v; want no ForceOff, Healthy", kinds(out), out.State.Phase)
	}
}

// Found by the simulation (seed 57092, Lease lists taking 6 s): a machine
// powered on during the fence renewed, our keep-off ForceOff cut it, and
// the renewal, written before that ForceOff, was taken in after it. Our
// taint came off a node whose machine we had just powered off, and the
// control-plane rules stopped counting it. A keep-off ForceOff needs a
// renewal placed after it before the node counts as back.
func TestARenewalWrittenBeforeAKeepOffForceOffDoesNotUntaint(t *testing.T) {
	d := keptOff(t)
	// A list taking 6 s brings in, at +60.5 s, a renewal written after
	// the start of the list before it, +54 s: maybe before our ForceOff.
	back := view(withTaint(TaintOurs), pods(1, 1), heartbeat(sec(60.5)))
	back.HeartbeatFrom = at(sec(54))
	out := d.step(tick(back, at(sec(60.6))), at(sec(60.6)))
	if d.s.Phase != Detaching || has(out, ActRemoveTaint) {
		t.Fatalf("a renewal that may predate our keep-off ForceOff: phase %v, actions %v; want still Detaching", d.s.Phase, kinds(out))
	}
	// One written after it (the list before started at +61 s) is a
	// machine running again.
	back = view(withTaint(TaintOurs), pods(1, 1), heartbeat(sec(68)))
	back.HeartbeatFrom = at(sec(61))
	d.step(tick(back, at(sec(68.1))), at(sec(68.1)))
	if d.s.Phase != Untainting && d.s.Phase != Healthy {
		t.Fatalf("a renewal after our keep-off ForceOff: phase %v, want the taint removed", d.s.Phase)
	}
}

// keptOff is a driver whose fence decided a keep-off ForceOff at +60 s.
func keptOff(t *testing.T) *driver {
	t.Helper()
	d := newDriver(t)
	d.toTainting(view())
	tainted := view(withTaint(TaintOurs), pods(1, 1))
	d.step(result(tainted, at(sec(28.3)), ActApplyTaint, ""), at(sec(28.3)))
	d.wantPhase(Detaching)
	if out := d.step(reading(tainted, at(sec(60)), PowerOn), at(sec(60))); !has(out, ActPowerOff) {
		t.Fatalf("On while detaching: actions %v, want a keep-off ForceOff", kinds(out))
	}
	return d
}

// Found in review of the fix above: the keep-off ForceOff decided at +60 s
// went out at +65 s (persist, recheck, a BMC slot, the identity check); a
// renewal written at +63 s, after the start of the list before (+61 s),
// is from a machine that ran until +65 s.
func TestARenewalBeforeAKeepOffForceOffWentOutDoesNotUntaint(t *testing.T) {
	d := keptOff(t)
	d.step(result(view(withTaint(TaintOurs), pods(1, 1)), at(sec(65)), ActPowerOff, ""), at(sec(65)))
	back := view(withTaint(TaintOurs), pods(1, 1), heartbeat(sec(66)))
	back.HeartbeatFrom = at(sec(61))
	if out := d.step(tick(back, at(sec(66.1))), at(sec(66.1))); d.s.Phase != Detaching || has(out, ActRemoveTaint) {
		t.Fatalf("a renewal that may predate the ForceOff's sending: phase %v, actions %v", d.s.Phase, kinds(out))
	}
}

// Found in review: a standby that takes over at +62 s, right after the old
// leader's keep-off ForceOff at +60 s, took in a renewal written before it
// (its list started at +57 s) and removed the taint. KeptOffAt is not in
// the annotation; an adopted state that kept a machine off counts from
// the adoption.
func TestAnAdoptedKeepOffNeedsARenewalWrittenAfterTheAdoption(t *testing.T) {
	d := keptOff(t)
	s := d.s
	s.Writer = "replica-a"
	enc, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	a := Adopt(DefaultPolicy(), dec, "replica-b", view(withTaint(TaintOurs), pods(1, 1), heartbeat(sec(20))), at(sec(62)))
	back := view(withTaint(TaintOurs), pods(1, 1), heartbeat(sec(63)))
	back.HeartbeatFrom = at(sec(57))
	if out := Step(d.p, a, tick(back, at(sec(63.1))), at(sec(63.1))); out.State.Phase != Detaching || has(out, ActRemoveTaint) {
		t.Fatalf("adopted after a keep-off: phase %v, actions %v", out.State.Phase, kinds(out))
	}
}
