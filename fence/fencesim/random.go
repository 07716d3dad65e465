package fencesim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
)

// SimPolicy is the policy the randomized simulation runs: the defaults with
// the long waits compressed, so that power-offs, timeouts, retries and
// recoveries all happen inside a few simulated minutes.
func SimPolicy() fence.Policy {
	p := fence.DefaultPolicy()
	p.FenceAfter = 60 * time.Second
	p.PowerTimeout = 20 * time.Second
	p.PowerOffAttempts = 2
	p.PowerOnTimeout = 60 * time.Second
	p.DetachTimeout = 60 * time.Second
	p.Cooldown = 10 * time.Second
	p.StuckReadInterval = 30 * time.Second
	return p
}

// RandomScenario builds a seeded scenario: 2-6 nodes in one or two zones,
// random machine timing (a restart's Off dwell always shorter than the settle
// window: that is the policy's premise), and up to a dozen random faults,
// failures, human commands, API trouble and agent crashes over six minutes.
// It returns the driver and a description of what was scheduled.
func RandomScenario(seed uint64, start time.Time) (*Sim, []string) {
	rng := rand.New(rand.NewPCG(seed, 0xb3c4f3ce))
	p := SimPolicy()
	p.PowerOnAfterDetach = rng.IntN(3) == 0
	w := NewWorld(start, p, seed)
	nodes := 2 + rng.IntN(5)
	zones := 1 + rng.IntN(2)
	for i := 0; i < nodes; i++ {
		t := machine.Timing{
			PowerOn:          time.Duration(5+rng.IntN(56)) * time.Second,
			PowerOff:         time.Duration(rng.IntN(3)) * time.Second,
			GracefulShutdown: time.Duration(1+rng.IntN(10)) * time.Second,
			RestartOff:       time.Duration(1+rng.IntN(4)) * time.Second,
		}
		n := w.AddNode(fmt.Sprintf("n%d", i+1), fmt.Sprintf("z%d", i%zones), t)
		n.HasBMC = rng.IntN(10) != 0
		n.Excluded = rng.IntN(20) == 0
		n.BMC.SetLatency(time.Duration(rng.IntN(400)) * time.Millisecond)
	}
	sim := NewSim(w)
	var plan []string
	at := func(d time.Duration, desc string, fn func()) {
		sim.At(d, desc, fn)
		plan = append(plan, fmt.Sprintf("+%s %s", d, desc))
	}
	pick := func() *Node { return w.Nodes[rng.IntN(len(w.Nodes))] }
	events := 1 + rng.IntN(12)
	for i := 0; i < events; i++ {
		d := time.Duration(rng.IntN(360)) * time.Second
		n := pick()
		switch k := rng.IntN(22); k {
		case 0, 1, 2:
			at(d, n.Name+" power-loss", func() { _ = n.BMC.Event(machine.EventPowerLoss) })
		case 3:
			at(d, n.Name+" power-restore", func() { _ = n.BMC.Event(machine.EventPowerRestore) })
		case 4:
			at(d, n.Name+" os-hang", func() { _ = n.BMC.Event(machine.EventOSHang) })
		case 5:
			at(d, n.Name+" os-reboot", func() { _ = n.BMC.Event(machine.EventOSReboot) })
		case 6:
			at(d, n.Name+" shutdown", func() { _ = n.BMC.Press(machine.ResetGracefulShutdown) })
		case 7:
			at(d, n.Name+" power-on", func() { _ = n.BMC.Press(machine.ResetOn) })
		case 8:
			at(d, n.Name+" kubelet-stop", func() { n.KubeletEnabled = false })
			back := d + time.Duration(5+rng.IntN(120))*time.Second
			at(back, n.Name+" kubelet-start", func() { n.KubeletEnabled = true })
		case 9:
			at(d, n.Name+" bmc unreachable", func() { n.BMC.Fail(bmctest.ErrUnreachableFake) })
			back := d + time.Duration(5+rng.IntN(120))*time.Second
			at(back, n.Name+" bmc ok", n.BMC.Clear)
		case 10:
			at(d, n.Name+" bmc lying", func() { n.BMC.SetBehavior(machine.Behavior{IgnoreCommands: true}) })
		case 11:
			at(d, n.Name+" bmc power-on-fails", func() { n.BMC.SetBehavior(machine.Behavior{PowerOnFails: true}) })
		case 12:
			at(d, n.Name+" maintenance on", func() { n.Maintenance = true; w.notify(n.Name) })
			back := d + time.Duration(10+rng.IntN(200))*time.Second
			at(back, n.Name+" maintenance off", func() { n.Maintenance = false; w.notify(n.Name) })
		case 13:
			// A stalled informer, up to 30 s (shorter than the controller's
			// grace period, which the oracle's Ready check relies on).
			at(d, "api freeze", w.FreezeAPI)
			at(d+time.Duration(1+rng.IntN(30))*time.Second, "api thaw", w.ThawAPI)
		case 14:
			r := float64(rng.IntN(40)) / 100
			at(d, fmt.Sprintf("api errors %.2f", r), func() { w.SetAPIErrorRate(r) })
			at(d+time.Duration(rng.IntN(120))*time.Second, "api errors 0", func() { w.SetAPIErrorRate(0) })
		case 15:
			at(d, "agent crash", sim.Crash)
		case 16:
			reuse := rng.IntN(2) == 0
			at(d, fmt.Sprintf("agent failover (old=%v)", reuse), func() { sim.Failover(reuse) })
		case 17:
			at(d, "agent split-brain", sim.SplitBrain)
			at(d+time.Duration(rng.IntN(60))*time.Second, "agent failover", func() { sim.Failover(false) })
		case 18:
			at(d, n.Name+" command abort", func() { w.Request(n.Name, fence.Command{Kind: fence.CmdAbort, User: "sim"}) })
		case 19:
			power := rng.IntN(2) == 0
			at(d, fmt.Sprintf("%s command unfence (power-on=%v)", n.Name, power), func() {
				w.Request(n.Name, fence.Command{Kind: fence.CmdUnfence, User: "sim", PowerOn: power})
			})
		case 20:
			at(d, n.Name+" command fence", func() { w.Request(n.Name, fence.Command{Kind: fence.CmdFence, User: "sim"}) })
		case 21:
			// A truthful human: confirms only a machine that is really off.
			at(d, n.Name+" command confirm (if off)", func() {
				if n.BMC.StaysOff(time.Hour) {
					w.Request(n.Name, fence.Command{Kind: fence.CmdConfirm, User: "sim"})
				}
			})
		}
	}
	return sim, plan
}

// RunRandom runs one random scenario for d and returns its violations.
func RunRandom(seed uint64, start time.Time, d time.Duration) ([]string, []string, *World) {
	sim, plan := RandomScenario(seed, start)
	sim.Run(d)
	return sim.W.Violations, plan, sim.W
}
