package fence

import (
	"reflect"
	"testing"
	"time"
)

// TestExhaustiveInvariants enumerates every phase × state variant × input
// kind × power reading × readiness × taint × node flags × fleet, and checks
// the invariants of doc.go (1, 2, 4, 6) and determinism (7) on each
// Step. Under -short it checks every 7th combination.
func TestExhaustiveInvariants(t *testing.T) {
	now := at(400 * time.Second) // past FenceAfter for a node silent since t0
	// The defaults, and the powerOffNotReadyAfter opt-in (the NotReady
	// views have been NotReady since t0 + 40 s at most: past it). Under the
	// opt-in only the views it changes anything for are walked: NotReady
	// ones, in the usual flags' case.
	optIn := DefaultPolicy()
	optIn.PowerOffNotReadyAfter = 2 * time.Minute
	nodes := exhaustiveNodes(now)
	var notReady []NodeView
	for _, n := range nodes {
		if n.Ready != ReadyTrue && !n.Maintenance && !n.Excluded && n.HasBMC && n.Taint != TaintForeign {
			notReady = append(notReady, n)
		}
	}
	// The crash dump before the off changes only what Suspect does with a
	// fenceable, untainted node: only those views are walked under it.
	var fenceable []NodeView
	for _, n := range nodes {
		if !n.Maintenance && !n.Excluded && n.HasBMC && n.Taint == TaintAbsent {
			fenceable = append(fenceable, n)
		}
	}
	for _, pass := range []struct {
		name  string
		p     Policy
		nodes []NodeView
	}{{"defaults", DefaultPolicy(), nodes}, {"NotReady opt-in", optIn, notReady}, {"diagnose before off", diagnosePolicy(), fenceable}} {
		t.Run(pass.name, func(t *testing.T) { exhaustive(t, pass.p, now, pass.nodes) })
	}
}

func exhaustive(t *testing.T, p Policy, now time.Time, nodes []NodeView) {
	states := exhaustiveStates(now)
	inputs := exhaustiveInputs(now)
	// The guard's refusals all take the same path in Step; one refusal
	// reason stands for the others (TestStormGuard covers each).
	fleets := []FleetView{
		{Nodes: 5, Unhealthy: 1, APIFreshAt: now}, // calm
		{Nodes: 5, Unhealthy: 4, APIFreshAt: now}, // storm
	}
	stride := 1
	if testing.Short() || raceEnabled {
		stride = 7
	}
	var checked, i int
	for _, s := range states {
		for _, in := range inputs {
			for _, n := range nodes {
				for _, f := range fleets {
					i++
					if i%stride != 0 {
						continue
					}
					in.Node, in.Fleet = n, f
					out := Step(p, s, in, now)
					if err := checkInvariants(p, s, in, now, out); err != nil {
						t.Fatalf("phase %v (manual %v attested %v run %+v power-off %v taint owned %v stuck %v)\ninput %v reading %+v result %+v command %v\nnode %+v\nfleet %+v\n→ %v, actions %v\nviolation: %v",
							s.Phase, s.Manual, s.Attested, s.OffRun, s.PowerOffAt, s.TaintOwned, s.Stuck,
							in.Kind, in.Reading, in.Result, in.Command.Kind, n, f, out.State.Phase, kinds(out), err)
					}
					if i%5 != 0 {
						continue
					}
					if again := Step(p, s, in, now); !reflect.DeepEqual(out, again) {
						t.Fatalf("Step is not deterministic for phase %v input %v", s.Phase, in.Kind)
					}
					checked++
				}
			}
		}
	}
	t.Logf("checked %d combinations (%d states × %d inputs × %d nodes × %d fleets, stride %d)",
		checked, len(states), len(inputs), len(nodes), len(fleets), stride)
}

// exhaustiveStates gives, for every phase, the variants that change the
// engine's branches: with or without a power-off behind it, a run in
// progress or settled, a taint owned or not, a human's request.
func exhaustiveStates(now time.Time) []State {
	variants := []func(*State){
		func(*State) {},
		func(s *State) { s.OffRun = OffRun{First: now.Add(-sec(7)), Last: now.Add(-sec(1)), Count: 3} },
		func(s *State) { s.OffRun = OffRun{First: now.Add(-sec(1)), Last: now.Add(-sec(1)), Count: 1} },
		func(s *State) { s.PowerOffAt, s.PowerOffs = now.Add(-sec(30)), 1 },
		func(s *State) { s.PowerOffAt, s.PowerOffs, s.PowerOffAccepted = now.Add(-sec(30)), 1, true },
		func(s *State) {
			s.PowerOffAt, s.PowerOffs, s.PowerOffAccepted = now.Add(-sec(8)), 1, true
			s.OffRun = OffRun{First: now.Add(-sec(7)), Last: now.Add(-sec(1)), Count: 3}
		},
		func(s *State) {
			s.PowerOffAt, s.PowerOffs = now.Add(-sec(70)), 1
			s.OffRun = OffRun{First: now.Add(-sec(65)), Last: now.Add(-sec(2)), Count: 20}
		},
		func(s *State) { s.PowerOffAt, s.PowerOffs = now.Add(-sec(90)), 3 },
		func(s *State) { s.NotReadyFence = true },
		// Accepted, and a run settled over the unassisted window, but
		// not ours: the BMC's acceptance was voided (the machine ran
		// after it), or the Off began later than ownOffWithin after it.
		func(s *State) {
			s.PowerOffAt, s.PowerOffs, s.PowerOffAccepted, s.AcceptanceUntrusted = now.Add(-sec(70)), 2, true, true
			s.OffRun = OffRun{First: now.Add(-sec(65)), Last: now.Add(-sec(2)), Count: 20}
		},
		func(s *State) {
			s.PowerOffAt, s.PowerOffs, s.PowerOffAccepted = now.Add(-sec(80)), 1, true
			s.OffRun = OffRun{First: now.Add(-sec(65)), Last: now.Add(-sec(2)), Count: 20}
		},
		// A NotReady fence 8 s after its accepted ForceOff, its Off run
		// settled over the settle window.
		func(s *State) {
			s.NotReadyFence = true
			s.PowerOffAt, s.PowerOffs, s.PowerOffAccepted = now.Add(-sec(8)), 1, true
			s.OffRun = OffRun{First: now.Add(-sec(7)), Last: now.Add(-sec(1)), Count: 3}
		},
		func(s *State) { s.Target = "bmc-a" },
		func(s *State) { s.AdmittedAt = now.Add(-sec(20)) },
		func(s *State) { s.TaintOwned, s.TaintedAt = true, now.Add(-sec(60)) },
		func(s *State) { s.Manual, s.By = true, "alice" },
		func(s *State) { s.Attested, s.By, s.AttestedAt = true, "alice", now.Add(-sec(5)) },
		func(s *State) { s.Attested, s.By, s.AttestedAt, s.Forced = true, "alice", now.Add(-sec(5)), true },
		func(s *State) { s.Attested, s.By, s.AttestedAt = true, "alice", now.Add(-time.Hour) },
		func(s *State) { s.Stuck = StuckAborted },
		func(s *State) { s.Stuck = StuckPowerOffIgnored; s.PowerOffAt = now.Add(-sec(90)) },
		func(s *State) { s.NextReadAt = now.Add(sec(3)); s.ReadFailures = 3 },
	}
	var out []State
	for _, ph := range Phases() {
		for _, v := range variants {
			s := State{Phase: ph, Since: now.Add(-sec(10)), FailureStart: t0}
			v(&s)
			out = append(out, s)
		}
	}
	// Unsaved suspicions (on silence alone, not written yet): young, and
	// older than suspectAfter (a sync came late).
	for _, since := range []time.Duration{sec(10), sec(25)} {
		out = append(out, State{Phase: Suspect, Since: now.Add(-since), FailureStart: t0, Unsaved: true},
			State{Phase: Suspect, Since: now.Add(-since), FailureStart: t0, Unsaved: true, NextReadAt: now.Add(sec(3))})
	}
	return out
}

func exhaustiveInputs(now time.Time) []Input {
	ins := []Input{{Kind: InputTick}}
	for pw := PowerUnknown; pw < numPowers; pw++ {
		for _, os := range []bool{false, true} {
			for _, when := range []time.Time{now, t0.Add(-sec(1))} {
				ins = append(ins, Input{Kind: InputReading, Reading: Reading{At: when, Power: pw, OSRunning: os}})
			}
		}
	}
	ins = append(ins, Input{Kind: InputReading, Reading: Reading{At: now, Failure: "unreachable"}},
		Input{Kind: InputReading, Reading: Reading{At: now, Power: PowerOff, Target: "bmc-b"}},
		Input{Kind: InputResult, Result: Result{Action: ActPowerOff, Err: "409", AlreadyInState: true}},
		Input{Kind: InputResult, Result: Result{Action: ActPowerOff, Target: "bmc-b"}},
		// Sent just now, seconds ago (after a slow recheck), or with a
		// time that is not of this ForceOff (before any decision).
		Input{Kind: InputResult, Result: Result{Action: ActPowerOff, SentAt: now}},
		Input{Kind: InputResult, Result: Result{Action: ActPowerOff, SentAt: now.Add(-sec(5))}},
		Input{Kind: InputResult, Result: Result{Action: ActPowerOff, SentAt: t0.Add(-sec(1))}})
	for k := ActPersist; k < numActionKinds; k++ {
		ins = append(ins, Input{Kind: InputResult, Result: Result{Action: k}}, Input{Kind: InputResult, Result: Result{Action: k, Err: "boom"}})
	}
	for c := CmdNone; c < numCommandKinds; c++ {
		ins = append(ins, Input{Kind: InputCommand, Command: Command{Kind: c, User: "alice", Reason: "test", SeenAt: now}},
			Input{Kind: InputCommand, Command: Command{Kind: c, User: "alice", Reason: "test", SeenAt: now, Force: true}},
			Input{Kind: InputCommand, Command: Command{Kind: c, User: "alice", Reason: "test", SeenAt: now.Add(-time.Hour)}})
	}
	ins = append(ins, Input{Kind: InputCommand, Command: Command{Kind: CmdUnfence, User: "bob", PowerOn: true}})
	return ins
}

func exhaustiveNodes(now time.Time) []NodeView {
	readiness := []func(*NodeView){
		func(n *NodeView) { n.Ready, n.HeartbeatAt, n.RenewedAt = ReadyTrue, now.Add(-sec(1)), now.Add(-sec(1)) }, // healthy
		func(n *NodeView) { n.Ready, n.HeartbeatAt, n.RenewedAt = ReadyTrue, t0, t0 },                             // stale Ready (controller has not noticed)
		func(n *NodeView) { n.Ready, n.HeartbeatAt = ReadyTrue, now.Add(-sec(1)) },                                // stale Ready, seen by a new agent: no renewal yet
		func(n *NodeView) { n.Ready, n.HeartbeatAt, n.NotReadySince = ReadyUnknown, t0, t0.Add(sec(40)) },         // dead
		func(n *NodeView) {
			n.Ready, n.HeartbeatAt, n.RenewedAt, n.NotReadySince = ReadyFalse, now.Add(-sec(1)), now.Add(-sec(1)), t0
		}, // alive, NotReady
		func(n *NodeView) { n.Ready, n.HeartbeatAt = ReadyUnknown, time.Time{} }, // never observed
		func(n *NodeView) {
			n.Ready, n.HeartbeatAt, n.RenewedAt, n.NotReadySince = ReadyUnknown, now.Add(-sec(30)), now.Add(-sec(30)), t0
		}, // renewed after the failure began, silent again
		func(n *NodeView) {
			n.Ready, n.HeartbeatAt, n.RenewedAt, n.NotReadySince = ReadyFalse, now.Add(-sec(9)), now.Add(-sec(9)), t0
		}, // alive, NotReady, renewed 9 s ago (before a ForceOff 8 s ago): its next renewal is due
	}
	flags := []func(*NodeView){
		func(*NodeView) {},
		func(n *NodeView) { n.Maintenance = true },
		func(n *NodeView) { n.Excluded = true },
		func(n *NodeView) { n.HasBMC = false },
	}
	var out []NodeView
	for _, r := range readiness {
		for _, f := range flags {
			for _, taint := range []TaintState{TaintAbsent, TaintOurs, TaintForeign} {
				for _, p := range []int{0, 2} {
					n := NodeView{HasBMC: true, Taint: taint, Pods: p, VolumeAttachments: p / 2, Terminating: p / 2}
					r(&n)
					f(&n)
					out = append(out, n)
				}
			}
		}
	}
	return out
}
