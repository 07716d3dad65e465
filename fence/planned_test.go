package fence

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func planned(seen time.Duration, by string) nodeOpt {
	return func(n *NodeView) { n.PlannedReboot, n.PlannedRebootAt, n.PlannedRebootBy = true, at(seen), by }
}

// A planned reboot whose POST outlasts fenceAfter: the machine reads On or
// PoweringOn and the Lease is silent for minutes. No ForceOff while the
// signal holds; once rebootWindow has passed, the node is fenced as any
// other (a reboot that hung is a dead node).
func TestPlannedRebootIsNotPoweredOffDuringItsWindow(t *testing.T) {
	for _, pw := range []Power{PowerOn, PowerPoweringOn, PowerUnknown, PowerPoweringOff} {
		t.Run(pw.String(), func(t *testing.T) {
			d := newDriver(t)
			n := view(planned(sec(1), "kured lock"))
			d.suspect(n)
			window := d.p.RebootWindow
			var said int
			for s := 20.0; at(sec(s)).Before(at(sec(1)).Add(window)); s += 5 {
				out := d.step(reading(n, at(sec(s)), pw), at(sec(s)))
				if has(out, ActPowerOff) {
					t.Fatalf("ForceOff at +%ss during the planned reboot (machine reads %s)", fmtSec(s), pw)
				}
				for _, a := range out.Actions {
					if a.Kind == ActEvent && a.Event.Reason == "FencePlannedReboot" {
						said++
						if !strings.Contains(a.Event.Message, "planned reboot (kured lock), not powering off") {
							t.Errorf("event = %q", a.Event.Message)
						}
					}
				}
			}
			if pw == PowerOn && said != 1 {
				t.Errorf("FencePlannedReboot said %d times, want once for an unchanged reading", said)
			}
			end := at(sec(1)).Add(window)
			out := d.step(reading(n, end, pw), end)
			if (pw == PowerOn || pw == PowerPoweringOn) && !has(out, ActPowerOff) {
				t.Fatalf("no ForceOff after rebootWindow (%s): actions %v", window, kinds(out))
			}
		})
	}
}

// A graceful shutdown that stays off is a shutdown, not a reboot: it is
// fenced as ever, with our own ForceOff, read back Off and settled.
func TestPlannedShutdownThatStaysOffIsFenced(t *testing.T) {
	d := newDriver(t)
	n := view(planned(sec(1), "the kubelet's graceful node shutdown"))
	d.suspect(n)
	out := d.step(reading(n, at(sec(20.1)), PowerOff), at(sec(20.1)))
	if !has(out, ActPowerOff) {
		t.Fatalf("actions = %v, want our own ForceOff on an exact Off", kinds(out))
	}
	d.step(result(n, at(sec(20.2)), ActPowerOff, ""), at(sec(20.2)))
	d.step(reading(n, at(sec(22.2)), PowerOff), at(sec(22.2)))
	d.step(reading(n, at(sec(25.2)), PowerOff), at(sec(25.2)))
	d.step(reading(n, at(sec(28.2)), PowerOff), at(sec(28.2)))
	d.wantPhase(Tainting)
}

// Our ForceOff on an exact Off (the reboot's off-dwell) did nothing, and the
// machine comes up: no second ForceOff to the booting machine while the
// signal holds; the fence goes back to Suspect and waits.
func TestPlannedRebootComingUpAfterOurForceOffIsNotForcedAgain(t *testing.T) {
	d := newDriver(t)
	n := view(planned(sec(1), "NodeMaintenance nm-1"))
	d.suspect(n)
	d.step(reading(n, at(sec(20.1)), PowerOff), at(sec(20.1)))
	d.step(alreadyOff(n, at(sec(20.2))), at(sec(20.2)))
	out := d.step(reading(n, at(sec(22.2)), PowerPoweringOn), at(sec(22.2)))
	if has(out, ActPowerOff) {
		t.Fatalf("ForceOff resent to a booting machine during a planned reboot: %v", kinds(out))
	}
	d.wantPhase(Suspect)
	if !slices.Contains(eventReasons(out), "FencePlannedReboot") {
		t.Errorf("events = %v, want FencePlannedReboot", eventReasons(out))
	}
}

// A human's fence request is theirs: the planned-reboot hold is the agent's
// own judgement, not a veto over a human.
func TestPlannedRebootDoesNotHoldAHumansFence(t *testing.T) {
	d := newDriver(t)
	n := view(planned(sec(1), "kured lock"), heartbeat(0))
	d.step(command(n, at(sec(30)), Command{Kind: CmdFence, User: "alice", Reason: "stuck in POST", SeenAt: at(sec(30))}), at(sec(30)))
	out := d.step(reading(n, at(sec(30.1)), PowerOn), at(sec(30.1)))
	if !has(out, ActPowerOff) {
		t.Fatalf("actions = %v, want the human's ForceOff", kinds(out))
	}
}

func TestRebootWindowIsValidated(t *testing.T) {
	p := DefaultPolicy()
	p.RebootWindow = 0
	err := p.Validate()
	if err == nil || !strings.Contains(err.Error(), "policy.rebootWindow = 0s: must be between 1m0s and 24h0m0s") {
		t.Fatalf("Validate() = %v", err)
	}
}

func TestControlPlaneNodesAreFencedOneAtATimeAndNeverPastEtcdQuorum(t *testing.T) {
	tests := []struct {
		name                      string
		members, inFlight, mayRun int
		externalEtcd              bool
		want                      bool
		say                       string
	}{
		{name: "three members, the others may run", members: 3, mayRun: 2, want: true},
		{name: "another control-plane node in a fence", members: 5, inFlight: 1, mayRun: 4, say: "one at a time"},
		{name: "one of three already confirmed off", members: 3, mayRun: 1, say: "fewer than etcd's quorum of 2"},
		{name: "the only control-plane node", members: 1, mayRun: 0, say: "fewer than etcd's quorum of 1"},
		{name: "external etcd: quorum is not ours to keep", members: 3, mayRun: 1, externalEtcd: true, want: true},
		{name: "external etcd: still one at a time", members: 3, inFlight: 1, mayRun: 1, externalEtcd: true, say: "one at a time"},
		{name: "the zero fleet view counts no members", members: 0, mayRun: 0, say: "quorum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(t)
			d.p.ExternalEtcd = tt.externalEtcd
			n := view(func(n *NodeView) { n.ControlPlane = true })
			d.suspect(n)
			in := reading(n, at(sec(300)), PowerOn)
			in.Fleet.ControlPlaneNodes, in.Fleet.ControlPlaneInFlight, in.Fleet.ControlPlaneMayRun = tt.members, tt.inFlight, tt.mayRun
			out := d.step(in, at(sec(300)))
			if has(out, ActPowerOff) != tt.want {
				t.Fatalf("ForceOff = %v, want %v (actions %v)", has(out, ActPowerOff), tt.want, kinds(out))
			}
			if tt.want {
				return
			}
			var msg string
			for _, a := range out.Actions {
				if a.Kind == ActEvent && a.Event.Reason == "FenceControlPlane" {
					msg = a.Event.Message
				}
			}
			if !strings.Contains(msg, tt.say) {
				t.Errorf("FenceControlPlane = %q, want it to say %q", msg, tt.say)
			}
		})
	}
}
