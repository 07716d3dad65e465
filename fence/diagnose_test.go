package fence

import (
	"slices"
	"testing"
	"time"
)

func diagnoseDriver(t *testing.T) *driver {
	d := newDriver(t)
	d.p = diagnosePolicy()
	d.p.DiagnoseTimeout = 60 * time.Second
	return d
}

// due is the first moment a machine reading On may be powered off: the
// Lease (renewed at t0) silent for fenceAfter.
func (d *driver) due() time.Duration { return d.p.FenceAfter + sec(1) }

func diagnoseRecorded(s State) (time.Time, bool) {
	for _, r := range s.Evidence.Records() {
		if r.Kind == RecAction && r.Action == ActDiagnose {
			return r.At, true
		}
	}
	return time.Time{}, false
}

// A hung node (its BMC reads On, its Lease silent for fenceAfter): the
// diagnostic interrupt goes first, the ForceOff waits diagnoseTimeout, and
// then goes out, gated again.
func TestDiagnoseBeforeOffSendsTheNMIThenWaitsThenForcesOff(t *testing.T) {
	d := diagnoseDriver(t)
	n := view()
	d.suspect(n)
	d.step(reading(n, at(sec(20.1)), PowerOn), at(sec(20.1)))
	due := d.due()
	out := d.step(reading(n, at(due), PowerOn), at(due))
	if !has(out, ActDiagnose) || has(out, ActPowerOff) {
		t.Fatalf("at fenceAfter: actions %v, want Diagnose and no PowerOff", kinds(out))
	}
	if !slices.Contains(eventReasons(out), "FenceDiagnose") {
		t.Errorf("events %v, want FenceDiagnose", eventReasons(out))
	}
	if kinds(out)[0] != ActPersist {
		t.Errorf("actions %v: the intent must be persisted before the NMI", kinds(out))
	}
	if when, ok := diagnoseRecorded(d.s); !ok || !when.Equal(at(due)) {
		t.Errorf("evidence records the diagnose at %v (%v), want %v", when, ok, at(due))
	}
	out = d.step(result(n, at(due+sec(0.2)), ActDiagnose, ""), at(due+sec(0.2)))
	if has(out, ActPowerOff) || has(out, ActReadPower) {
		t.Fatalf("after the NMI was accepted: actions %v, want the wait", kinds(out))
	}
	if out.RecheckAfter > resync {
		t.Errorf("RecheckAfter %s", out.RecheckAfter)
	}
	for s := 10.0; s < 60; s += 10 {
		now := at(due + sec(s))
		if out := d.step(tick(n, now), now); has(out, ActPowerOff) || has(out, ActDiagnose) || has(out, ActReadPower) {
			t.Fatalf("+%.0fs into the wait: actions %v", s, kinds(out))
		}
	}
	now := at(due + d.p.DiagnoseTimeout)
	out = d.step(tick(n, now), now)
	if !has(out, ActReadPower) {
		t.Fatalf("at the end of the wait: actions %v, want a fresh read", kinds(out))
	}
	out = d.step(reading(n, now, PowerOn), now)
	if !has(out, ActPowerOff) || has(out, ActDiagnose) {
		t.Fatalf("after diagnoseTimeout: actions %v, want the ForceOff and no second NMI", kinds(out))
	}
	d.wantPhase(PoweringOff)
}

// kdump rebooted the node into a healthy boot during the wait: it renewed
// its Lease, so it is not fenced.
func TestDiagnoseNodeThatComesBackDuringTheWaitIsNotFenced(t *testing.T) {
	d := diagnoseDriver(t)
	n := view()
	d.suspect(n)
	due := d.due()
	d.step(reading(n, at(due), PowerOn), at(due))
	d.step(result(n, at(due+sec(0.2)), ActDiagnose, ""), at(due+sec(0.2)))
	back := view(heartbeat(due + sec(40)))
	out := d.step(tick(back, at(due+sec(41))), at(due+sec(41)))
	d.wantPhase(Healthy)
	if has(out, ActPowerOff) || !slices.Contains(eventReasons(out), "FenceRecovered") {
		t.Fatalf("actions %v, events %v: want FenceRecovered and no ForceOff", kinds(out), eventReasons(out))
	}
	// Its next failure is a new fence, with its own diagnose.
	if !d.s.DiagnoseAt.IsZero() {
		t.Errorf("DiagnoseAt %v kept past the fence", d.s.DiagnoseAt)
	}
}

// A BMC without a diagnostic interrupt (or a Redfish system that does not
// list Nmi): no dump, said in an Event, and the fence goes on at once.
func TestDiagnoseNotSentIsSkippedWithAnEventAndTheFenceGoesOn(t *testing.T) {
	d := diagnoseDriver(t)
	n := view()
	d.suspect(n)
	due := d.due()
	d.step(reading(n, at(due), PowerOn), at(due))
	in := result(n, at(due+sec(0.2)), ActDiagnose, "unsupported: no diagnostic interrupt for this BMC")
	in.Result.NotSent = true
	out := d.step(in, at(due+sec(0.2)))
	if !slices.Contains(eventReasons(out), "FenceDiagnoseSkipped") || !has(out, ActReadPower) {
		t.Fatalf("actions %v, events %v: want FenceDiagnoseSkipped and a read", kinds(out), eventReasons(out))
	}
	out = d.step(reading(n, at(due+sec(0.3)), PowerOn), at(due+sec(0.3)))
	if !has(out, ActPowerOff) || has(out, ActDiagnose) {
		t.Fatalf("actions %v, want the ForceOff without waiting and no second NMI", kinds(out))
	}
}

// An interrupt the BMC received but answered with an error may have reached
// the kernel: the wait stands.
func TestDiagnoseSentButFailedStillWaits(t *testing.T) {
	d := diagnoseDriver(t)
	n := view()
	d.suspect(n)
	due := d.due()
	d.step(reading(n, at(due), PowerOn), at(due))
	out := d.step(result(n, at(due+sec(0.2)), ActDiagnose, "HTTP 500"), at(due+sec(0.2)))
	if has(out, ActPowerOff) || has(out, ActReadPower) {
		t.Fatalf("actions %v, want the wait", kinds(out))
	}
}

// The interrupt obeys the ForceOff's gate: none before fenceAfter without
// evidence, none during a planned reboot, none in a storm, none to a
// machine that reads Off (nothing to dump: our ForceOff goes at once), none
// for a human's fence request.
func TestDiagnoseObeysTheForceOffsGate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		node  NodeView
		fleet func(time.Time) FleetView
		power Power
		at    func(d *driver) time.Duration
		off   bool // the ForceOff goes out at once
	}{
		{name: "before fenceAfter", node: view(), power: PowerOn, at: func(d *driver) time.Duration { return d.p.FenceAfter - sec(5) }},
		{name: "planned reboot", node: view(planned(sec(1), "kured lock")), power: PowerOn, at: (*driver).due},
		{name: "storm", node: view(), power: PowerOn, at: (*driver).due,
			fleet: func(now time.Time) FleetView { return FleetView{Nodes: 5, Unhealthy: 4, APIFreshAt: now} }},
		{name: "stale view", node: view(), power: PowerOn, at: (*driver).due,
			fleet: func(now time.Time) FleetView {
				return FleetView{Nodes: 5, Unhealthy: 1, APIFreshAt: now.Add(-time.Minute)}
			}},
		{name: "reads Off", node: view(), power: PowerOff, at: (*driver).due, off: true},
		{name: "powering on", node: view(), power: PowerPoweringOn, at: (*driver).due, off: true},
		{name: "control plane, another in a fence", node: view(func(n *NodeView) { n.ControlPlane = true }), power: PowerOn, at: (*driver).due,
			fleet: func(now time.Time) FleetView {
				return FleetView{Nodes: 5, Unhealthy: 1, APIFreshAt: now, ControlPlaneNodes: 3, ControlPlaneInFlight: 1, ControlPlaneMayRun: 1}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := diagnoseDriver(t)
			d.suspect(tc.node)
			now := at(tc.at(d))
			in := reading(tc.node, now, tc.power)
			if tc.fleet != nil {
				in.Fleet = tc.fleet(now)
			}
			out := d.step(in, now)
			if has(out, ActDiagnose) {
				t.Fatalf("actions %v: an NMI the ForceOff's gate refuses", kinds(out))
			}
			if has(out, ActPowerOff) != tc.off {
				t.Fatalf("actions %v, want PowerOff %v", kinds(out), tc.off)
			}
		})
	}
}

// A human's fence request goes straight to the ForceOff: no dump, no wait.
func TestDiagnoseNotForAHumansFence(t *testing.T) {
	d := diagnoseDriver(t)
	n := view(heartbeat(0))
	now := at(sec(30))
	d.step(command(n, now, Command{Kind: CmdFence, User: "alice", Reason: "test", SeenAt: now}), now)
	out := d.step(reading(n, at(sec(30.1)), PowerOn), at(sec(30.1)))
	if has(out, ActDiagnose) || !has(out, ActPowerOff) {
		t.Fatalf("actions %v, want the ForceOff without an NMI", kinds(out))
	}
}

// Hung-node evidence licenses the ForceOff before fenceAfter: the NMI goes
// out under that licence, as the ForceOff would.
func TestDiagnoseUnderHungNodeEvidence(t *testing.T) {
	d := diagnoseDriver(t)
	n := view(heartbeat(0), notReady(sec(5)))
	d.step(tick(n, at(sec(30))), at(sec(30)))
	d.wantPhase(Suspect)
	in := readingFrom(n, at(sec(31)), PowerOn, "bmc-a")
	in.Host = evidenceOf(goodSign())
	out := d.step(in, at(sec(31)))
	if !has(out, ActDiagnose) || has(out, ActPowerOff) {
		t.Fatalf("actions %v, want the NMI first", kinds(out))
	}
}

// The state carries the diagnose across a persist, and an agent that adopts
// the fence waits on its own clock without a second NMI.
func TestDiagnoseSurvivesEncodeAndAdoption(t *testing.T) {
	s := State{Phase: Suspect, Writer: "a", DiagnoseAt: at(sec(90)), DiagnoseSkipped: true}
	raw, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !got.DiagnoseAt.Equal(s.DiagnoseAt) || !got.DiagnoseSkipped {
		t.Fatalf("decoded %v %v, want %v true", got.DiagnoseAt, got.DiagnoseSkipped, s.DiagnoseAt)
	}
	a := Adopt(diagnosePolicy(), got, "b", view(), at(sec(500)))
	if !a.DiagnoseAt.Equal(at(sec(500))) {
		t.Errorf("adopted DiagnoseAt %v, want now", a.DiagnoseAt)
	}
}

func TestDiagnoseTimeoutIsValidated(t *testing.T) {
	for _, tc := range []struct {
		d  time.Duration
		ok bool
	}{{0, false}, {-time.Second, false}, {time.Second, true}, {10 * time.Minute, true}, {10*time.Minute + 1, false}} {
		p := diagnosePolicy()
		p.DiagnoseTimeout = tc.d
		if err := p.Validate(); (err == nil) != tc.ok {
			t.Errorf("diagnoseTimeout %s: Validate = %v, want ok %v", tc.d, err, tc.ok)
		}
	}
}

// After our NMI a kdump kernel reboots the machine: hung-node evidence read
// before the reading it comes with (the runner's cached read) may predate
// that reboot, its entry the old boot's. It licenses no ForceOff before
// fenceAfter; evidence read with the reading itself, after the NMI, does.
// (fencesim seed 2553: kdump rebooted n2 between the evidence read and the
// ForceOff, which rested on the old boot's watchdog expiry.)
func TestDiagnoseThenOnlyEvidenceReadWithTheReadingCounts(t *testing.T) {
	d := diagnoseDriver(t)
	d.p.DiagnoseTimeout = 20 * time.Second
	n := view(heartbeat(0), notReady(sec(5)))
	d.raw(tick(n, at(sec(30))), at(sec(30)))
	in := readingFrom(n, at(sec(31)), PowerOn, "bmc-a")
	in.Host = evidenceOf(goodSign())
	if out := d.raw(in, at(sec(31))); !has(out, ActDiagnose) {
		t.Fatalf("actions %v, want the NMI", kinds(out))
	}
	d.raw(result(n, at(sec(31.2)), ActDiagnose, ""), at(sec(31.2)))
	now := at(sec(52))
	cached := readingFrom(n, now, PowerOn, "bmc-a")
	cached.Host = evidenceOf(goodSign())
	cached.Host.At = at(sec(45)) // read before this reading
	if out := d.raw(cached, now); has(out, ActPowerOff) {
		t.Fatalf("ForceOff on evidence read at +45s, before the reading at +52s after our NMI: %v", kinds(out))
	}
	now = at(sec(57))
	fresh := readingFrom(n, now, PowerOn, "bmc-a")
	fresh.Host = evidenceOf(goodSign())
	fresh.Host.At = now
	if out := d.raw(fresh, now); !has(out, ActPowerOff) {
		t.Fatalf("no ForceOff on evidence read with the reading: %v", kinds(out))
	}
}

// raw steps without the table tests' checker, whose ForceOff rule knows no
// hung-node evidence (as hostevidence_test.go steps).
func (d *driver) raw(in Input, now time.Time) Output {
	out := Step(d.p, d.s, in, now)
	d.s = out.State
	return out
}
