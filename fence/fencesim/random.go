package fencesim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
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
	// Two minutes, so that a request left waiting through an API write
	// outage (at most ten minutes) outlives even a request's longest life
	// (requestLife: twice this, plus a leader's pause).
	p.MaxRequestAge = 2 * time.Minute
	return p
}

// Length of one random scenario: eight minutes, or until a minute and a
// half after its last planned change.
const scenarioLength = 8 * time.Minute

// gen builds one random scenario.
type gen struct {
	rng  *rand.Rand
	w    *World
	sim  *Sim
	plan []string
	// spares are machines that host no node (decommissioned, or new).
	spares int
}

// at schedules a change at d; fn reports whether it happened (a fault the
// world's state made impossible, or that would make an undetectable double
// fault, is skipped), and each class is counted when it did.
func (g *gen) at(d time.Duration, desc string, fn func() bool, classes ...string) {
	g.plan = append(g.plan, fmt.Sprintf("+%s %s", d, desc))
	s := g.sim
	s.At(d, desc, func() {
		if fn() {
			for _, c := range classes {
				s.fault(c)
			}
		}
	})
}

func (g *gen) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(g.rng.Int64N(int64(hi-lo)/int64(time.Second)+1))*time.Second
}

func (g *gen) pick() *Node { return g.w.Nodes[g.rng.IntN(len(g.w.Nodes))] }

// node looks a node up by name when a change happens: it may have been
// deleted and re-created since the change was planned.
func (g *gen) node(name string) *Node { return g.w.Node(name) }

// spare adds a machine that hosts no node, On or Off.
func (g *gen) spare(on bool) *Machine {
	g.spares++
	m := g.w.AddMachine(fmt.Sprintf("spare%d", g.spares), machine.Timing{PowerOn: 20 * time.Second})
	if !on {
		m.BMC.SetPower(false)
	}
	return m
}

// RandomScenario builds a seeded scenario: 3-6 nodes in one or two zones,
// machines with random timing (restart off-dwells of 1-30 s) behind BMCs
// with vendor quirks, a few agent replicas, and a handful of composite
// fault episodes (each built to produce one hazard of docs/safety.md) over a
// background of single faults, human commands, API trouble and agent
// crashes, over eight minutes. It returns the driver and the plan.
//
// A few scenarios in a hundred (calmPercent) are calm instead: one episode
// whose BMC deceives in a way only another witness can reveal, and nothing
// else (calmScenario).
func RandomScenario(seed uint64, start time.Time) (sim *Sim, plan []string) {
	rng := rand.New(rand.NewPCG(seed, 0xb3c4f3ce))
	if rng.IntN(100) < calmPercent {
		return calmScenario(rng, seed, start)
	}
	p := SimPolicy()
	p.PowerOnAfterDetach = rng.IntN(3) == 0
	if rng.IntN(4) == 0 {
		// The explicit opt-in: NotReady nodes that still renew are
		// powered off after this long.
		p.PowerOffNotReadyAfter = time.Duration(60+rng.IntN(61)) * time.Second
	}
	if rng.IntN(4) == 0 {
		p.MaxConcurrentFences = 2
	}
	switch rng.IntN(4) {
	case 0:
		p.SuspectAfter, p.MaxAPIStaleness = 10*time.Second, 10*time.Second
	case 1:
		p.SuspectAfter = 15 * time.Second
	}
	diagnose := diagnosePolicy(seed, &p)
	w := NewWorld(start, p, seed)
	if w.EnableEvents(seed) {
		defer func() { plan = append(plan, "power events on") }()
	}
	if lists := w.EnableLeaseLists(seed); lists != "" {
		defer func() { plan = append(plan, lists) }()
	}
	var skew time.Duration
	if rng.IntN(3) == 0 {
		skew = time.Duration(rng.IntN(61)-30) * time.Second
	}
	g := &gen{rng: rng, w: w}
	nodes, zones := 3+rng.IntN(4), 1+rng.IntN(2)
	for i := 0; i < nodes; i++ {
		g.addNode(fmt.Sprintf("n%d", i+1), fmt.Sprintf("z%d", i%zones))
	}
	if lists := w.EnablePodLists(seed); lists != "" {
		g.plan = append(g.plan, lists)
	}
	g.sim = NewSimSeeded(w, seed, skew)
	if diagnose != nil {
		g.plan = append(g.plan, diagnose(w))
	}
	if rng.IntN(2) == 0 {
		g.sim.Interleave = float64(1+rng.IntN(5)) / 10
		g.plan = append(g.plan, fmt.Sprintf("interleave %.1f", g.sim.Interleave))
	}
	episodes := []func(){
		g.wrongEntry, g.cachingFailure, g.notReadyAlive, g.restart, g.recreate, g.inventoryChange,
		g.skewedFailoverMidFence, g.leaderPause, g.replicas, g.writeOutage, g.staleConfirm, g.staleFence,
		g.wrongConfirm, g.replay, g.partition, g.poweredOnWhileTainted, g.powerLoss,
		g.droppedThenWatchdog, g.statusFirstAtPersist, g.pausedBetweenListAndDelete, g.pausedBetweenRecheckAndDelete,
		g.pausedInsideATaintWrite, g.splitBrainOverAPartition,
		g.hungEvidence,
	}
	episodes = append(episodes, g.plannedReboot, g.controlPlaneFailures)
	episodes = append(episodes, g.ownNode)
	for i := 1 + rng.IntN(3); i > 0; i-- {
		episodes[rng.IntN(len(episodes))]()
	}
	for i := rng.IntN(7); i > 0; i-- {
		g.background()
	}
	g.pduLevel()
	return g.sim, g.plan
}

// calmPercent is the share of scenarios that are calm (calmScenario).
const calmPercent = 6

// calmScenario builds five healthy nodes with honest BMCs and one episode
// whose BMC deceives: it drops ForceOffs, or reads Off while its machine
// runs. Such a BMC is caught only by another witness, and only if nothing
// takes that witness away: the kubelet that keeps renewing (the NotReady
// opt-in), the storm that holds back a taint of an Off that is not ours,
// the machine seen running after an acceptance. So nothing else happens in
// the scenario (the premise, in the package doc).
func calmScenario(rng *rand.Rand, seed uint64, start time.Time) (*Sim, []string) {
	p := SimPolicy()
	episode := rng.IntN(3)
	if episode == 1 {
		p.PowerOffNotReadyAfter = time.Duration(60+rng.IntN(61)) * time.Second
	}
	w := NewWorld(start, p, seed)
	g := &gen{rng: rng, w: w, plan: []string{"calm: one deceiving BMC, nothing else"}}
	for i := range 5 {
		g.addHonestNode(fmt.Sprintf("n%d", i+1), "z0")
	}
	g.sim = NewSimSeeded(w, seed, 0)
	if rng.IntN(2) == 0 {
		g.sim.Interleave = float64(1+rng.IntN(5)) / 10
		g.plan = append(g.plan, fmt.Sprintf("interleave %.1f", g.sim.Interleave))
	}
	switch episode {
	case 0:
		g.droppedTwice()
	case 1:
		g.liesUnderTheOptIn()
	default:
		g.liesInAStorm()
	}
	return g.sim, g.plan
}

// addHonestNode adds a node on its own machine with random timing, behind
// an honest, verifiable BMC.
func (g *gen) addHonestNode(name, zone string) {
	m := g.w.AddMachine(name, machine.Timing{
		PowerOn:          g.dur(5*time.Second, 60*time.Second),
		PowerOff:         time.Duration(g.rng.IntN(3)) * time.Second,
		GracefulShutdown: g.dur(1*time.Second, 10*time.Second),
		RestartOff:       g.dur(1*time.Second, 30*time.Second),
	})
	m.SetLatency(time.Duration(g.rng.IntN(400)) * time.Millisecond)
	g.w.AddNodeOn(name, zone, m)
}

// addNode adds a node on its own machine with random timing and BMC quirks.
func (g *gen) addNode(name, zone string) {
	rng, w := g.rng, g.w
	dwell := g.dur(1*time.Second, 5*time.Second)
	if rng.IntN(2) == 0 {
		dwell = g.dur(6*time.Second, 30*time.Second)
	}
	m := w.AddMachine(name, machine.Timing{
		PowerOn:          g.dur(5*time.Second, 60*time.Second),
		PowerOff:         time.Duration(rng.IntN(3)) * time.Second,
		GracefulShutdown: g.dur(1*time.Second, 10*time.Second),
		RestartOff:       dwell,
	})
	m.SetLatency(time.Duration(rng.IntN(400)) * time.Millisecond)
	n := w.AddNodeOn(name, zone, m)
	e := w.Entry(name)
	switch k := rng.IntN(20); {
	case k < 10: // honest: a ForceOff during a restart's dwell cancels it
	case k < 15:
		m.SetAlreadyOff(true)
	case k < 18:
		g.ignoring(n, e, machine.Behavior{IgnoreDuringTransition: true})
	case k < 19:
		g.ignoring(n, e, machine.Behavior{IgnoreCommands: true})
	default:
		m.SetBehavior(machine.Behavior{ConflictWhenOff: true})
	}
	if !m.ignores() && rng.IntN(5) == 0 {
		// A caching BMC: it polls its host at most every few seconds.
		m.CacheFor = g.dur(2*time.Second, 12*time.Second)
	}
	switch k := rng.IntN(30); {
	case k == 0:
		// No systemUUID reported: the operator vouches for the entry.
		n.SystemUUID, e.AllowUnverified = "", true
	case k == 1:
		n.SystemUUID, e.ExpectedUUID = "", m.UUID
	case k == 2:
		n.SystemUUID = "" // unverifiable: never fenced
	case k == 3:
		m.NoUUID, e.AllowUnverified = true, true
	}
	n.HasBMC = rng.IntN(12) != 0
	n.Excluded = rng.IntN(25) == 0
}

// ignoring makes the node's BMC accept and ignore commands, and gives its
// entry the settle window that outlasts its machine's dwell: the agent's
// only defence against such a BMC (package doc).
func (g *gen) ignoring(n *Node, e *Entry, b machine.Behavior) {
	n.Host.SetBehavior(b)
	n.Host.CacheFor = 0
	e.SettleWindow = max(g.w.Policy.SettleWindow, n.Host.timing.RestartOff+g.dur(time.Second, 4*time.Second))
}

// verifiable: a wrong entry on this node is caught by the identity check.
func (g *gen) verifiable(n *Node) bool {
	e := g.w.entries[n.Name]
	return e != nil && !e.AllowUnverified && (n.SystemUUID != "" || e.ExpectedUUID != "")
}

// fail makes node n fail at d in a way that leaves its machine running or
// off: what a wrong entry or a cached read then hides.
func (g *gen) fail(name string, d time.Duration) {
	switch g.rng.IntN(5) {
	case 0:
		g.at(d, name+" kubelet-stop", func() bool { return g.kubeletStop(name) }, faultKubeletStop)
	case 1:
		g.at(d, name+" os-hang", func() bool { return g.machineEvent(name, machine.EventOSHang) }, faultHang)
	case 2:
		g.runtimeDown(name, d, g.dur(60*time.Second, 5*time.Minute))
	case 3:
		g.at(d, name+" power-loss", func() bool { return g.machineEvent(name, machine.EventPowerLoss) }, faultPowerLoss)
	default:
		g.at(d, name+" partitioned", func() bool { return g.setPartitioned(name, true) }, faultPartition)
		g.at(d+g.dur(60*time.Second, 4*time.Minute), name+" partition heals", func() bool { return g.setPartitioned(name, false) })
	}
}

// ---- single changes ------------------------------------------------------

func (g *gen) kubeletStop(name string) bool {
	n := g.node(name)
	if n == nil || !n.KubeletEnabled || n.liveExpiry {
		return false
	}
	n.KubeletEnabled = false
	return true
}

func (g *gen) kubeletStart(name string) bool {
	n := g.node(name)
	if n == nil || n.KubeletEnabled {
		return false
	}
	n.KubeletEnabled = true
	return true
}

func (g *gen) setPartitioned(name string, on bool) bool {
	n := g.node(name)
	if n == nil || n.Partitioned == on || (on && n.liveExpiry) {
		return false
	}
	n.Partitioned = on
	return true
}

func (g *gen) runtimeDown(name string, d, lasts time.Duration) {
	g.at(d, name+" container runtime down (kubelet renews, NotReady)", func() bool {
		n := g.node(name)
		if n == nil || n.RuntimeDown {
			return false
		}
		n.RuntimeDown = true
		return n.renews()
	}, faultNotReadyAlive)
	g.at(d+lasts, name+" container runtime back", func() bool {
		if n := g.node(name); n != nil {
			n.RuntimeDown = false
		}
		return true
	})
}

func (g *gen) machineEvent(name string, ev machine.Event) bool {
	n := g.node(name)
	if n == nil {
		return false
	}
	if ev == machine.EventPowerRestore && !g.w.mayStart(n) {
		return false
	}
	if ev == machine.EventOSReboot && !g.w.mayCycle(n.Host) {
		return false
	}
	return n.Host.BMC.Event(ev) == nil
}

// press is someone else acting through the BMC or at the console.
func (g *gen) press(name string, rt machine.ResetType) bool {
	n := g.node(name)
	if n == nil {
		return false
	}
	if rt == machine.ResetOn && !g.w.mayStart(n) {
		return false
	}
	if cycles(rt) && !g.w.mayCycle(n.Host) {
		return false
	}
	return n.Host.BMC.Press(rt) == nil
}

// cycles: the reset restarts a running machine (an off-dwell, then On).
func cycles(rt machine.ResetType) bool {
	switch rt {
	case machine.ResetForceRestart, machine.ResetPowerCycle, machine.ResetGracefulRestart:
		return true
	}
	return false
}

// restartClass names the restart fault by how the node's BMC answers a
// ForceOff during the dwell.
func restartClass(m *Machine) string {
	switch {
	case m.ignores():
		return faultRestart + "/BMC accepts and ignores (settle window outlasts the dwell)"
	case m.alreadyOff:
		return faultRestart + "/BMC answers already off and the restart goes on"
	default:
		return faultRestart + "/BMC accepts and cancels the restart"
	}
}

func (g *gen) restartBy(name string, d time.Duration, how string) {
	var rt machine.ResetType
	var ev machine.Event
	switch how {
	case "ForceRestart":
		rt = machine.ResetForceRestart
	case "PowerCycle":
		rt = machine.ResetPowerCycle
	default:
		ev = machine.EventOSReboot
	}
	g.at(d, name+" "+how, func() bool {
		n := g.node(name)
		if n == nil {
			return false
		}
		var err error
		switch {
		case !g.w.mayCycle(n.Host):
			// Not within ownOffWithin of a ForceOff its BMC dropped
			// (premise).
			return false
		case ev != "":
			err = n.Host.BMC.Event(ev)
		case n.Host.BMC.Truth().Power == machine.PowerPoweringOff || n.Host.BMC.Truth().Power == machine.PowerPoweringOn:
			// A BMC busy powering off or on refuses a power cycle
			// (iDRAC's SYS518, "not ready after previous operation").
			// Were it to accept one right after our accepted ForceOff,
			// the cycle's off-dwell would read exactly like the Off we
			// caused; one during a boot would join two dwells across a
			// boot shorter than a read interval (package doc).
			return false
		default:
			err = n.Host.BMC.Press(rt)
		}
		if err != nil {
			return false
		}
		g.sim.fault(restartClass(n.Host))
		return true
	}, faultRestart)
}

// ---- episodes: each builds one hazard -----------------------------------

// wrongEntry: a node's entry addresses another machine (two rows swapped,
// a decommissioned spare, another node's BMC), then the node fails while
// that machine reads Off. The identity check must catch it.
func (g *gen) wrongEntry() {
	var a *Node
	for _, n := range g.w.Nodes {
		if g.verifiable(n) && n.HasBMC && !n.protect {
			a = n
			break
		}
	}
	if a == nil {
		return
	}
	rng, w := g.rng, g.w
	var b *Node
	for _, n := range w.Nodes {
		if n != a && g.verifiable(n) {
			b = n
		}
	}
	when := time.Duration(0)
	if rng.IntN(3) == 0 {
		when = g.dur(10*time.Second, 3*time.Minute)
	}
	kind := rng.IntN(3)
	if b == nil {
		kind = 1
	}
	an := a.Name
	var target *Machine
	switch kind {
	case 0:
		g.at(when, an+" and "+b.Name+" entries swapped", func() bool {
			ea, eb := w.Entry(an), w.Entry(b.Name)
			na, nb := g.node(an), g.node(b.Name)
			if ea == nil || eb == nil || na == nil || nb == nil || na.protect || nb.protect || ea.AllowUnverified || eb.AllowUnverified {
				return false
			}
			x, y := *ea, *eb
			x.Target, y.Target = eb.Target, ea.Target
			w.SetEntry(an, &x)
			w.SetEntry(b.Name, &y)
			return true
		}, faultWrongEntry)
		g.at(when+g.dur(20*time.Second, 2*time.Minute), b.Name+" power-loss (its BMC is "+an+"'s entry)",
			func() bool { return g.machineEvent(b.Name, machine.EventPowerLoss) }, faultPowerLoss)
	case 1:
		target = g.spare(rng.IntN(3) != 0)
		g.at(when, an+" entry points at "+target.Name, func() bool { return g.retarget(an, target) }, faultWrongEntry)
	default:
		target = b.Host
		g.at(when, an+" entry points at "+b.Name+"'s BMC (both refused)", func() bool { return g.retarget(an, target) }, faultWrongEntry)
	}
	g.fail(an, when+g.dur(5*time.Second, 2*time.Minute))
	if rng.IntN(3) == 0 {
		g.at(when+g.dur(90*time.Second, 5*time.Minute), an+" entry corrected", func() bool {
			n := g.node(an)
			return n != nil && g.retarget(an, n.Host)
		}, faultInventory)
	}
}

// retarget points a node's entry at m; an entry the operator vouches for
// is never pointed elsewhere (premise).
func (g *gen) retarget(name string, m *Machine) bool {
	n, e := g.node(name), g.w.Entry(name)
	if n == nil || e == nil || e.Target == m || (m != n.Host && (e.AllowUnverified || n.protect || g.protected(m))) {
		return false
	}
	x := *e
	x.Target = m
	if m.ignores() {
		x.SettleWindow = max(g.w.Policy.SettleWindow, m.timing.RestartOff+time.Second)
	} else {
		x.SettleWindow = 0
	}
	g.w.SetEntry(name, &x)
	return true
}

// protected: m is the machine of a node whose live witnesses must stay
// (a wrong confirm stands against it): no other entry may address it, which
// would make both entries refused and its BMC unreadable.
func (g *gen) protected(m *Machine) bool {
	for _, n := range g.w.Nodes {
		if n.Host == m && n.protect {
			return true
		}
	}
	return false
}

// cachingFailure: a node whose BMC caches its power state fails; its cache
// may freeze for a while.
func (g *gen) cachingFailure() {
	var c *Node
	for _, n := range g.w.Nodes {
		if n.Host.CacheFor > 0 {
			c = n
		}
	}
	if c == nil {
		n := g.pick()
		if n.Host.ignores() {
			return
		}
		n.Host.CacheFor = g.dur(2*time.Second, 12*time.Second)
		c = n
	}
	name, m := c.Name, c.Host
	d := g.dur(10*time.Second, 3*time.Minute)
	g.at(d, name+" BMC cache freezes", func() bool {
		g.w.mu.Lock()
		defer g.w.mu.Unlock()
		m.freezeUntil = g.w.now().Add(maxCacheLag - m.CacheFor)
		return true
	}, faultCaching)
	switch g.rng.IntN(3) {
	case 0:
		g.restartBy(name, d+g.dur(0, 10*time.Second), "os-reboot")
	case 1:
		g.at(d, name+" kubelet-stop", func() bool { return g.kubeletStop(name) }, faultKubeletStop)
		g.restartBy(name, d+g.dur(20*time.Second, 60*time.Second), "ForceRestart")
	default:
		g.fail(name, d)
	}
}

// notReadyAlive: the container runtime or CNI goes down: the kubelet keeps
// renewing its Lease and reports Ready=False.
func (g *gen) notReadyAlive() {
	g.runtimeDown(g.pick().Name, g.dur(0, 3*time.Minute), g.dur(60*time.Second, 5*time.Minute))
}

// restart: an OS reboot, a restart of a healthy node, or a remediation
// tool power-cycling a node whose kubelet died (the agent already suspects
// it when the dwell begins).
func (g *gen) restart() {
	n := g.pick()
	name := n.Name
	d := g.dur(10*time.Second, 4*time.Minute)
	how := []string{"ForceRestart", "PowerCycle", "os-reboot"}[g.rng.IntN(3)]
	switch g.rng.IntN(3) {
	case 0:
		g.restartBy(name, d, how)
	case 1:
		g.at(d, name+" kubelet-stop", func() bool { return g.kubeletStop(name) }, faultKubeletStop)
		g.restartBy(name, d+g.dur(15*time.Second, 60*time.Second), how)
		if g.rng.IntN(2) == 0 {
			g.at(d+g.dur(30*time.Second, 90*time.Second), name+" kubelet-start", func() bool { return g.kubeletStart(name) })
		}
	default:
		g.at(d, name+" os-hang", func() bool { return g.machineEvent(name, machine.EventOSHang) }, faultHang)
		g.restartBy(name, d+g.dur(15*time.Second, 60*time.Second), how)
	}
}

// recreate: a node is deleted; a live kubelet re-registers it, or an
// operator re-creates it (on its machine, or on another one).
func (g *gen) recreate() {
	n := g.pick()
	name := n.Name
	d := g.dur(10*time.Second, 4*time.Minute)
	if g.rng.IntN(2) == 0 {
		// The node died first: nothing re-registers it.
		g.at(d-5*time.Second, name+" power-loss", func() bool { return g.machineEvent(name, machine.EventPowerLoss) }, faultPowerLoss)
	}
	g.at(d, name+" deleted", func() bool {
		if g.node(name) == nil {
			return false
		}
		g.w.DeleteNode(name)
		return true
	}, faultRecreate)
	if g.rng.IntN(2) == 0 {
		var host *Machine
		moved := ""
		if e := g.w.entries[name]; g.rng.IntN(3) == 0 && e != nil && !e.AllowUnverified && e.ExpectedUUID == "" {
			host = g.spare(true)
			moved = " on " + host.Name + " (its entry still names the old machine)"
		}
		g.at(d+g.dur(5*time.Second, 90*time.Second), name+" re-created by an operator"+moved, func() bool {
			on := host
			if old := g.w.deleted[name]; old != nil && old.n.protect {
				on = nil // a protected node's witnesses stay
			}
			return g.w.RecreateNode(name, on) != nil
		}, faultRecreate)
		if host != nil && g.rng.IntN(2) == 0 {
			g.at(d+g.dur(100*time.Second, 3*time.Minute), name+" entry updated to "+host.Name, func() bool { return g.retarget(name, host) }, faultInventory)
		}
	}
}

// inventoryChange: mid-run, a node's entry or its reported systemUUID
// changes while the node fails.
func (g *gen) inventoryChange() {
	n := g.pick()
	name := n.Name
	d := g.dur(10*time.Second, 4*time.Minute)
	g.fail(name, d-g.dur(0, 30*time.Second))
	w := g.w
	switch g.rng.IntN(4) {
	case 0:
		sp := g.spare(g.rng.IntN(2) == 0)
		g.at(d, name+" entry switched to "+sp.Name, func() bool { return g.retarget(name, sp) }, faultInventory, faultWrongEntry)
		g.at(d+g.dur(20*time.Second, 2*time.Minute), name+" entry switched back", func() bool {
			n := g.node(name)
			return n != nil && g.retarget(name, n.Host)
		}, faultInventory)
	case 1:
		// The kubelet reports another systemUUID (a reinstalled host with
		// a changed SMBIOS table): the entry no longer verifies.
		g.at(d, name+" systemUUID changes", func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			n := w.byName[name]
			if n == nil || n.protect || w.entries[name] == nil || w.entries[name].AllowUnverified {
				return false
			}
			n.SystemUUID = fmt.Sprintf("0000aaaa-0000-4000-8000-%012x", w.rng.Uint64()&(1<<48-1))
			w.notify(name)
			return true
		}, faultUUID)
	case 2:
		// A board swap: the machine's UUID and the node's change together.
		g.at(d, name+" board swap (machine and node UUID change)", func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			n := w.byName[name]
			if n == nil || n.SystemUUID != n.Host.UUID {
				return false
			}
			u := fmt.Sprintf("0000bbbb-0000-4000-8000-%012x", w.rng.Uint64()&(1<<48-1))
			n.Host.UUID, n.SystemUUID = u, u
			w.notify(name)
			return true
		}, faultUUID)
	default:
		other := g.pick()
		if other == n {
			return
		}
		on := other.Name
		g.at(d, name+" entry switched to "+on+"'s BMC (both refused)", func() bool {
			o := g.node(on)
			return o != nil && g.retarget(name, o.Host)
		}, faultInventory, faultWrongEntry)
	}
}

// skewedFailoverMidFence: a node with a BMC that ignores commands during a
// restart is power-cycled by a remediation tool while suspected; when its
// Off is being confirmed, leadership passes to a replica whose clock is
// ahead. The new leader must prove off again on its own clock.
func (g *gen) skewedFailoverMidFence() {
	n := g.pick()
	name := n.Name
	if n.Host.CacheFor == 0 {
		n.Host.timing.RestartOff = g.dur(15*time.Second, 30*time.Second)
		g.w.entries[name].SettleWindow = 0
		g.ignoring(n, g.w.entries[name], machine.Behavior{IgnoreDuringTransition: true})
		n.Host.BMC.SetTiming(n.Host.timing)
	}
	d := g.dur(10*time.Second, 3*time.Minute)
	g.at(d, name+" kubelet-stop", func() bool { return g.kubeletStop(name) }, faultKubeletStop)
	g.restartBy(name, d+g.dur(20*time.Second, 35*time.Second), "ForceRestart")
	to := []string{"standby", "fresh"}[g.rng.IntN(2)]
	skew := g.dur(5*time.Second, 30*time.Second)
	if g.rng.IntN(4) == 0 {
		skew = -skew
	}
	g.plan = append(g.plan, fmt.Sprintf("on %s ConfirmingOff: failover to a %s replica, clock %+v", name, to, skew))
	g.sim.OnPhase(name, fence.ConfirmingOff, g.dur(0, 3*time.Second), "skewed failover", func(string) {
		g.sim.FailoverTo(to, skew)
	})
}

// leaderPause: the leader stalls right before a write (most often the
// taint) while another agent takes over; someone powers the machine back on
// during the stall, or its kubelet comes back.
func (g *gen) leaderPause() {
	d := g.dur(0, 4*time.Minute)
	victim := g.pick().Name
	g.at(d, victim+" power-loss", func() bool { return g.machineEvent(victim, machine.EventPowerLoss) }, faultPowerLoss)
	p := &PausePlan{
		After: g.sim.start.Add(d),
		For:   g.dur(time.Second, maxPause),
		To:    []string{"standby", "fresh", "old"}[g.rng.IntN(3)],
		Skew:  time.Duration(g.rng.IntN(61)-30) * time.Second,
	}
	switch g.rng.IntN(4) {
	case 0, 1:
		p.Kinds = []fence.ActionKind{fence.ActApplyTaint}
		if g.rng.IntN(4) != 0 {
			p.Perturb = func(node string) {
				if g.press(node, machine.ResetOn) {
					g.sim.fault(faultPowerOnByHuman)
				}
			}
		}
	case 2:
		p.Kinds = []fence.ActionKind{fence.ActPowerOff}
		p.Perturb = func(node string) { g.kubeletStart(node); g.machineEvent(node, machine.EventOSRecover) }
	default:
		p.Kinds = []fence.ActionKind{fence.ActPersist, fence.ActPowerOff, fence.ActApplyTaint, fence.ActRemoveTaint}
	}
	g.plan = append(g.plan, fmt.Sprintf("+%s arm a leader pause of %s before %v (then %s, skew %s)", d, p.For, p.Kinds, p.To, p.Skew))
	g.sim.Arm(p)
}

// replicas: failovers to standbys, fresh processes or old leaders with
// skewed clocks, and split brains.
func (g *gen) replicas() {
	for i := 1 + g.rng.IntN(3); i > 0; i-- {
		d := g.dur(0, 6*time.Minute)
		to := []string{"standby", "fresh", "old"}[g.rng.IntN(3)]
		skew := time.Duration(g.rng.IntN(61)-30) * time.Second
		switch g.rng.IntN(4) {
		case 0:
			g.at(d, "agent split-brain", func() bool { g.sim.SplitBrain(); return true })
			g.at(d+g.dur(5*time.Second, 90*time.Second), "agent failover to "+to, func() bool { g.sim.FailoverTo(to, skew); return true })
		default:
			g.at(d, fmt.Sprintf("agent failover to %s (skew %s)", to, skew), func() bool { g.sim.FailoverTo(to, skew); return true })
		}
	}
	g.fail(g.pick().Name, g.dur(0, 4*time.Minute))
}

// writeOutage: every write fails for up to ten minutes.
func (g *gen) writeOutage() {
	d := g.dur(0, 4*time.Minute)
	lasts := g.dur(30*time.Second, 10*time.Minute)
	g.outage(d, lasts)
	g.fail(g.pick().Name, g.dur(0, 5*time.Minute))
}

func (g *gen) outage(d, lasts time.Duration) {
	g.at(d, fmt.Sprintf("API writes fail for %s", lasts), func() bool { g.w.SetWritesFail(true); return true }, faultWriteOutage)
	g.at(d+lasts, "API writes work again", func() bool { g.w.SetWritesFail(false); return true })
}

// staleConfirm: a human truthfully confirms a node without a usable BMC is
// off, but every write fails while the request sits; after the request has
// expired someone powers the machine on (its kubelet disabled: no witness).
// When writes work again the request must be refused for its age.
func (g *gen) staleConfirm() {
	n := g.pick()
	name := n.Name
	d := g.dur(0, 60*time.Second)
	if g.rng.IntN(2) == 0 {
		g.at(d, name+" no BMC entry", func() bool {
			n := g.node(name)
			if n == nil || n.protect {
				return false
			}
			n.HasBMC = false
			return true
		})
	} else {
		g.at(d, name+" BMC unreachable", func() bool {
			n := g.node(name)
			if n == nil || n.protect {
				return false
			}
			n.Host.SetUnreachable(true)
			return true
		}, faultUnreachable)
	}
	g.at(d+time.Second, name+" kubelet-stop and power-loss", func() bool {
		g.kubeletStop(name)
		return g.machineEvent(name, machine.EventPowerLoss)
	}, faultPowerLoss)
	ask := d + g.dur(30*time.Second, 60*time.Second)
	life := requestLife(g.w.Policy)
	lasts := life + g.dur(20*time.Second, 60*time.Second)
	g.outage(ask-5*time.Second, lasts)
	g.at(ask, name+" command confirm (truthful)", func() bool { return g.confirm(name, true) }, faultHuman)
	g.at(ask+life+10*time.Second, name+" powered on by someone (kubelet disabled)", func() bool {
		return g.press(name, machine.ResetOn)
	}, faultStaleRequest, faultPowerOnByHuman)
}

// staleFence: a human asks to fence a silent node, every write fails while
// the request sits; meanwhile the kubelet comes back, then dies again
// shortly before writes work again, so the request would power off a
// machine silent for less than fenceAfter. It must be refused for its age.
func (g *gen) staleFence() {
	n := g.pick()
	name := n.Name
	maxAge := g.w.Policy.MaxRequestAge
	d := g.dur(0, 60*time.Second)
	g.at(d, name+" kubelet-stop", func() bool { return g.kubeletStop(name) }, faultKubeletStop)
	ask := d + g.dur(25*time.Second, 35*time.Second)
	lasts := maxAge + requestSlack + g.dur(40*time.Second, 3*time.Minute)
	g.outage(ask-5*time.Second, lasts)
	g.at(ask, name+" command fence", func() bool { return g.w.Request(name, fence.Command{Kind: fence.CmdFence, User: "sim"}) != "" }, faultHuman)
	g.at(ask+30*time.Second, name+" kubelet-start", func() bool { return g.kubeletStart(name) }, faultStaleRequest)
	g.at(ask-5*time.Second+lasts-g.dur(22*time.Second, 35*time.Second), name+" kubelet-stop again", func() bool { return g.kubeletStop(name) })
}

// confirm asks a human's confirm on a node; a truthful one only when its
// machine is off for good.
func (g *gen) confirm(name string, truthful bool) bool {
	n := g.node(name)
	if n == nil || (truthful && !n.Host.BMC.StaysOff(time.Hour)) {
		return false
	}
	return g.w.Request(name, fence.Command{Kind: fence.CmdConfirm, User: "sim", Reason: "checked the rack"}) != ""
}

// wrongConfirm: a human confirms a running node against a live witness:
// its kubelet renewing, or (kubelet dead) its BMC, correct and readable,
// reading On. The engine must refuse. Nothing takes the witness away.
func (g *gen) wrongConfirm() {
	var n *Node
	for _, x := range g.w.Nodes {
		e := g.w.entries[x.Name]
		if e != nil && x.HasBMC && e.Target == x.Host && g.w.identityOK(x, e) && x.Host.CacheFor == 0 && !x.Host.ignores() && !x.Excluded {
			n = x
		}
	}
	if n == nil {
		return
	}
	n.protect = true
	name := n.Name
	d := g.dur(10*time.Second, 4*time.Minute)
	if g.rng.IntN(2) == 0 {
		g.at(d, name+" kubelet-stop", func() bool { return g.kubeletStop(name) }, faultKubeletStop)
		d += g.dur(20*time.Second, 90*time.Second)
	}
	g.at(d, name+" command confirm (wrong: the machine runs)", func() bool {
		n := g.node(name)
		if n == nil || !running(n.Host) || !g.witnessed(n) {
			return false
		}
		return g.w.Request(name, fence.Command{Kind: fence.CmdConfirm, User: "sim", Reason: "I think it is off"}) != ""
	}, faultWrongConfirm)
}

// witnessed: a wrong confirm on n would meet a live witness: its BMC,
// correct, verifiable, reachable and not caching, reads what the machine
// does (its kubelet may renew too).
func (g *gen) witnessed(n *Node) bool {
	w := g.w
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.entries[n.Name]
	if e == nil || !n.HasBMC || e.Target != n.Host || !w.identityOK(n, e) || n.Host.unreachable || n.Host.CacheFor > 0 || n.Host.ignores() || n.Host.deceives() {
		return false
	}
	return w.targets[e.Target] == 1
}

// replay: a request taken earlier is written back unchanged, later.
func (g *gen) replay() {
	n := g.pick()
	name := n.Name
	d := g.dur(0, 3*time.Minute)
	if g.rng.IntN(2) == 0 {
		g.at(d, name+" power-loss", func() bool { return g.machineEvent(name, machine.EventPowerLoss) }, faultPowerLoss)
		g.at(d+g.dur(25*time.Second, 60*time.Second), name+" command confirm (truthful)", func() bool { return g.confirm(name, true) }, faultHuman)
	} else {
		g.at(d, name+" kubelet-stop", func() bool { return g.kubeletStop(name) }, faultKubeletStop)
		g.at(d+g.dur(25*time.Second, 60*time.Second), name+" command fence", func() bool {
			return g.w.Request(name, fence.Command{Kind: fence.CmdFence, User: "sim"}) != ""
		}, faultHuman)
		g.at(d+g.dur(70*time.Second, 2*time.Minute), name+" kubelet-start", func() bool { return g.kubeletStart(name) })
	}
	g.at(d+g.dur(2*time.Minute, 5*time.Minute), name+" request replayed", func() bool { return g.replayIfSafe(name) }, faultReplay)
}

// replayIfSafe replays the node's last request; a confirm only while it is
// still true or a live witness would refuse it (a wrong confirm with no
// witness is undetectable: premise).
func (g *gen) replayIfSafe(name string) bool {
	w := g.w
	w.mu.Lock()
	n, r := w.byName[name], w.taken[name]
	w.mu.Unlock()
	if n == nil || r == nil {
		return false
	}
	if r.cmd.Kind == fence.CmdConfirm && !n.Host.BMC.StaysOff(time.Hour) {
		return false
	}
	return w.Replay(name)
}

// partition: some nodes' kubelets run but cannot reach the API server (a
// switch, a zone): their Leases go silent while their machines run.
func (g *gen) partition() {
	d := g.dur(0, 3*time.Minute)
	lasts := g.dur(90*time.Second, 5*time.Minute)
	k, from := 1+g.rng.IntN(3), g.rng.IntN(len(g.w.Nodes))
	for i := range k {
		name := g.w.Nodes[(from+i)%len(g.w.Nodes)].Name
		g.at(d, name+" partitioned", func() bool { return g.setPartitioned(name, true) }, faultPartition)
		g.at(d+lasts, name+" partition heals", func() bool { return g.setPartitioned(name, false) })
	}
}

// poweredOnWhileTainted: a node whose volumes detach slowly loses power and
// is fenced; while its volumes are still attached, someone powers it back
// on (its kubelet disabled, or partitioned, or back). Keep-off must force
// it off again.
func (g *gen) poweredOnWhileTainted() {
	n := g.pick()
	name := n.Name
	if n.Host.CacheFor > 0 || n.Host.behavior.IgnoreCommands {
		return
	}
	n.detachAfter = g.dur(60*time.Second, 5*time.Minute)
	d := g.dur(0, 3*time.Minute)
	g.at(d, name+" power-loss (volumes detach slowly)", func() bool { return g.machineEvent(name, machine.EventPowerLoss) }, faultPowerLoss)
	kubelet := g.rng.IntN(3)
	g.plan = append(g.plan, fmt.Sprintf("on %s tainted: powered on (kubelet %d)", name, kubelet))
	g.sim.OnPhase(name, fence.Detaching, g.dur(2*time.Second, 20*time.Second), "powered on while tainted", func(string) {
		n := g.node(name)
		if n == nil {
			return
		}
		switch kubelet {
		case 0:
			n.KubeletEnabled = false
		case 1:
			n.Partitioned = true
		}
		if g.press(name, machine.ResetOn) {
			g.sim.fault(faultKeepOff)
			g.sim.fault(faultPowerOnByHuman)
		}
	})
}

// powerLoss: a machine loses power, and maybe gets it back.
func (g *gen) powerLoss() {
	name := g.pick().Name
	d := g.dur(0, 5*time.Minute)
	g.at(d, name+" power-loss", func() bool { return g.machineEvent(name, machine.EventPowerLoss) }, faultPowerLoss)
	if g.rng.IntN(2) == 0 {
		g.at(d+g.dur(30*time.Second, 5*time.Minute), name+" power-restore", func() bool {
			return g.machineEvent(name, machine.EventPowerRestore)
		}, faultPowerOnByHuman)
	}
}

// background adds one single fault or human command.
func (g *gen) background() {
	rng, w := g.rng, g.w
	d := g.dur(0, 6*time.Minute)
	name := g.pick().Name
	switch rng.IntN(22) {
	case 0, 1:
		g.at(d, name+" power-loss", func() bool { return g.machineEvent(name, machine.EventPowerLoss) }, faultPowerLoss)
	case 2:
		g.at(d, name+" power-restore", func() bool { return g.machineEvent(name, machine.EventPowerRestore) }, faultPowerOnByHuman)
	case 3:
		g.at(d, name+" os-hang", func() bool { return g.machineEvent(name, machine.EventOSHang) }, faultHang)
	case 4:
		g.restartBy(name, d, "os-reboot")
	case 5:
		g.at(d, name+" shutdown", func() bool { return g.press(name, machine.ResetGracefulShutdown) }, faultShutdown)
	case 6:
		g.at(d, name+" power-on", func() bool { return g.press(name, machine.ResetOn) }, faultPowerOnByHuman)
	case 7:
		g.at(d, name+" kubelet-stop", func() bool { return g.kubeletStop(name) }, faultKubeletStop)
		g.at(d+g.dur(5*time.Second, 120*time.Second), name+" kubelet-start", func() bool { return g.kubeletStart(name) })
	case 8:
		g.at(d, name+" bmc unreachable", func() bool {
			n := g.node(name)
			if n == nil || n.protect {
				return false
			}
			n.Host.SetUnreachable(true)
			return true
		}, faultUnreachable)
		g.at(d+g.dur(5*time.Second, 120*time.Second), name+" bmc ok", func() bool {
			if n := g.node(name); n != nil {
				n.Host.SetUnreachable(false)
			}
			return true
		})
	case 9:
		g.at(d, name+" bmc lying", func() bool {
			n := g.node(name)
			if n == nil || n.Host.CacheFor > 0 || n.protect {
				return false
			}
			if e := w.Entry(name); e != nil && e.Target == n.Host {
				x := *e
				x.SettleWindow = max(w.Policy.SettleWindow, n.Host.timing.RestartOff+time.Second)
				w.SetEntry(name, &x)
			}
			n.Host.SetBehavior(machine.Behavior{IgnoreCommands: true})
			return true
		}, faultLiar)
	case 10:
		g.at(d, name+" bmc power-on-fails", func() bool {
			n := g.node(name)
			if n == nil {
				return false
			}
			b := n.Host.behavior
			b.PowerOnFails = true
			n.Host.SetBehavior(b)
			return true
		})
	case 11:
		g.at(d, name+" maintenance on", func() bool {
			n := g.node(name)
			if n == nil {
				return false
			}
			n.Maintenance = true
			w.Notify(name)
			return true
		}, faultMaintenance)
		g.at(d+g.dur(10*time.Second, 200*time.Second), name+" maintenance off", func() bool {
			if n := g.node(name); n != nil {
				n.Maintenance = false
				w.Notify(name)
			}
			return true
		})
	case 12:
		// A stalled informer, up to two minutes (package doc).
		g.at(d, "api freeze", func() bool { w.FreezeAPI(); return true }, faultFrozenView)
		g.at(d+g.dur(time.Second, 120*time.Second), "api thaw", func() bool { w.ThawAPI(); return true })
	case 13:
		r := float64(1+rng.IntN(40)) / 100
		g.at(d, fmt.Sprintf("api errors %.2f", r), func() bool { w.SetAPIErrorRate(r); return true }, faultAPIErrors)
		g.at(d+g.dur(0, 120*time.Second), "api errors 0", func() bool { w.SetAPIErrorRate(0); return true })
	case 14:
		g.at(d, "agent crash", func() bool { g.sim.Crash(); return true })
	case 15:
		to := []string{"standby", "fresh", "old"}[rng.IntN(3)]
		g.at(d, "agent failover to "+to, func() bool { g.sim.FailoverTo(to, 0); return true })
	case 16:
		g.at(d, name+" command abort", func() bool {
			return w.Request(name, fence.Command{Kind: fence.CmdAbort, User: "sim", Reason: "wrong node"}) != ""
		}, faultHuman)
	case 17:
		power := rng.IntN(2) == 0
		g.at(d, fmt.Sprintf("%s command unfence (power-on=%v)", name, power), func() bool {
			n := g.node(name)
			if n == nil || (power && !w.mayStart(n)) {
				return false
			}
			return w.Request(name, fence.Command{Kind: fence.CmdUnfence, User: "sim", PowerOn: power}) != ""
		}, faultHuman)
	case 18:
		g.at(d, name+" command fence", func() bool { return w.Request(name, fence.Command{Kind: fence.CmdFence, User: "sim"}) != "" }, faultHuman)
	case 19:
		g.at(d, name+" command confirm (if off)", func() bool { return g.confirm(name, true) }, faultHuman)
	case 20:
		g.at(d, name+" human out-of-service taint", func() bool { w.SetTaint(name, true); return true }, faultForeignTaint)
		g.at(d+g.dur(10*time.Second, 3*time.Minute), name+" human removes the taint", func() bool { w.SetTaint(name, false); return true })
	case 21:
		g.at(d, name+" deleted and re-registered", func() bool {
			if g.node(name) == nil {
				return false
			}
			w.DeleteNode(name)
			return true
		}, faultRecreate)
	}
}

// RunRandom runs one random scenario and returns its violations, its plan,
// its world and what its faults did.
func RunRandom(seed uint64, start time.Time) ([]string, []string, *World, map[string]int) {
	sim, plan := RandomScenario(seed, start)
	d := scenarioLength
	if n := len(sim.events); n > 0 {
		d = max(d, sim.events[n-1].at.Sub(start)+90*time.Second)
	}
	sim.Run(d)
	return sim.W.Violations, plan, sim.W, sim.Faults()
}

// ---- episodes of issue 17: BMCs that deceive, and races between calls ----

// watchdogCycle power-cycles node's machine at d after now, if it still
// runs then (a hung OS's watchdog, or the BMC's own: a machine that is
// powering off or on is left alone, as a BMC busy with a transition
// refuses). It runs under the world's lock (onDrop): it only schedules.
func (g *gen) watchdogCycle(name string, m *Machine, at time.Time, what string) {
	g.sim.atAbs(at, name+" "+what, func() {
		n := g.node(name)
		if n == nil || n.Host != m || m.BMC.Truth().Power != machine.PowerOn {
			return
		}
		if m.BMC.Press(machine.ResetPowerCycle) == nil {
			g.sim.fault(faultDropped)
			g.sim.fault(faultDropped + "/" + what)
		}
	})
}

// deceivable: a node whose machine may be given a deceiving BMC here: its
// entry is right and verifiable, and nothing else about its BMC deceives.
func (g *gen) deceivable(n *Node) bool {
	e := g.w.entries[n.Name]
	m := n.Host
	return e != nil && n.HasBMC && !n.Excluded && !n.protect && e.Target == m && g.w.identityOK(n, e) &&
		m.CacheFor == 0 && !m.ignores() && !m.deceives() && !m.alreadyOff && !m.behavior.ConflictWhenOff
}

// droppedThenWatchdog: a node's OS hangs (its kubelet dies, its machine
// runs); its BMC accepts our first ForceOff and drops it, and the hung OS's
// watchdog power-cycles the machine, later than ownOffWithin after that
// acceptance, into a long off-dwell. That Off is not ours: it settles only
// over the unassisted window, which outlasts the dwell (own-off-within).
// A cycle sooner after the acceptance would read exactly like the Off we
// caused (premise), so the world never makes one.
func (g *gen) droppedThenWatchdog() {
	n := g.pick()
	name, m := n.Name, n.Host
	if !g.deceivable(n) {
		return
	}
	m.timing.RestartOff = g.dur(15*time.Second, 30*time.Second)
	m.BMC.SetTiming(m.timing)
	if m.latency == 0 {
		m.SetLatency(100 * time.Millisecond)
	}
	own := g.w.Policy.OwnOffWithin
	d := g.dur(0, 3*time.Minute)
	g.at(d, name+" os-hang; its BMC will drop our next ForceOff", func() bool {
		if !g.machineEvent(name, machine.EventOSHang) {
			return false
		}
		g.w.mu.Lock()
		m.dropForceOffs = 1
		m.onDrop = func(_ int, at time.Time) {
			g.watchdogCycle(name, m, at.Add(own+500*time.Millisecond), "watchdog power cycle after ownOffWithin")
		}
		g.w.mu.Unlock()
		return true
	}, faultHang, faultDropped)
}

// droppedTwice (calm): a node's OS hangs; its BMC drops our first ForceOff
// (the machine runs on, for everyone to see: it reads On past
// ownOffWithin), then our second one, and right after that second
// acceptance a watchdog power-cycles the machine into a long off-dwell.
// That Off began within ownOffWithin of an acceptance, but of a BMC whose
// acceptance the machine already proved empty: it is not ours, and settles
// only over the unassisted window (untrusted-acceptance). The world makes
// the early cycle only when the machine ran, with no renewal, from the
// first acceptance for longer than ownOffWithin and two power polls.
func (g *gen) droppedTwice() {
	n := g.pick()
	name, m := n.Name, n.Host
	m.timing.RestartOff = g.dur(15*time.Second, 30*time.Second)
	m.BMC.SetTiming(m.timing)
	p := g.w.Policy
	d := g.dur(0, 2*time.Minute)
	g.at(d, name+" os-hang; its BMC will drop our next two ForceOffs", func() bool {
		if !g.machineEvent(name, machine.EventOSHang) {
			return false
		}
		g.w.mu.Lock()
		m.dropForceOffs = 2
		m.onDrop = func(k int, at time.Time) {
			if k == 1 {
				return // the machine runs on, hung, for all to see
			}
			seen := at.Sub(m.dropped[0]) >= p.OwnOffWithin+2*p.PowerPollInterval+time.Second &&
				n.lastBeat.Before(m.dropped[0])
			if !seen {
				g.watchdogCycle(name, m, at.Add(p.OwnOffWithin+500*time.Millisecond), "watchdog power cycle after ownOffWithin")
				return
			}
			g.watchdogCycle(name, m, at.Add(time.Duration(1+g.rng.IntN(7))*time.Second), "watchdog power cycle right after an acceptance already proven empty")
		}
		g.w.mu.Unlock()
		return true
	}, faultHang, faultDropped)
}

// liesUnderTheOptIn (calm; the policy has powerOffNotReadyAfter): a node's
// container runtime goes down, so its kubelet renews and reports NotReady;
// past the opt-in's delay the agent powers it off, and its BMC accepts the
// ForceOff, drops it, and reads Off from then on while the machine runs.
// The kubelet's next renewal contradicts the BMC: never tainted
// (notready-lease-after-forceoff). The BMC answers at once, so the settle
// window's three reads fit before that renewal.
func (g *gen) liesUnderTheOptIn() {
	n := g.pick()
	name, m := n.Name, n.Host
	m.SetLatency(0)
	d := g.dur(0, time.Minute)
	g.at(d, name+" container runtime down for good (kubelet renews, NotReady); its BMC will accept our ForceOff, drop it and read Off", func() bool {
		n := g.node(name)
		if n == nil || n.RuntimeDown {
			return false
		}
		n.RuntimeDown = true
		g.w.mu.Lock()
		m.dropForceOffs, m.liesOffOnDrop = 1, true
		g.w.mu.Unlock()
		return n.renews()
	}, faultNotReadyAlive, faultLiesOff)
}

// liesInAStorm (calm): a partitioned node's BMC drops our ForceOffs (the
// machine reads On after the first: its acceptances are empty); then two
// more nodes are partitioned, a storm; during the storm the BMC reads Off
// while the machine runs. That Off is not ours (the BMC's acceptance is
// void): it settles over the unassisted window, and the storm holds its
// taint back (storm-exemption-ours). The lie ends before the storm does:
// an Off that no witness can contradict is the premise's undetectable
// double fault.
func (g *gen) liesInAStorm() {
	nodes := g.w.Nodes
	x := nodes[g.rng.IntN(len(nodes))]
	var others []string
	for _, n := range nodes {
		if n != x && len(others) < 2 {
			others = append(others, n.Name)
		}
	}
	name, m := x.Name, x.Host
	g.at(5*time.Second, name+" partitioned; its BMC drops every ForceOff", func() bool {
		g.w.mu.Lock()
		m.dropForceOffs = 100
		g.w.mu.Unlock()
		return g.setPartitioned(name, true)
	}, faultPartition, faultDropped)
	// The storm begins after our first ForceOff (about 65 s, fenceAfter
	// past the partition) and before our second (powerTimeout later),
	// which it refuses; the machine read On past ownOffWithin meanwhile.
	for _, o := range others {
		g.at(60*time.Second, o+" partitioned (a storm: three of five silent)", func() bool { return g.setPartitioned(o, true) }, faultPartition)
	}
	g.at(90*time.Second, name+" BMC reads Off while the machine runs (a storm holds)", func() bool {
		g.w.mu.Lock()
		defer g.w.mu.Unlock()
		m.liesOff = true
		return true
	}, faultLiesOff)
	g.at(200*time.Second, name+" BMC reads the truth again", func() bool {
		g.w.mu.Lock()
		defer g.w.mu.Unlock()
		m.liesOff = false
		return true
	})
	for _, o := range append(others, name) {
		g.at(240*time.Second, o+" partition heals", func() bool { return g.setPartitioned(o, false) })
	}
}

// statusFirstAtPersist: a partitioned node (kubelet alive, machine
// running) is silent past fenceAfter; exactly when the agent persists its
// decision to power it off, the partition heals and the kubelet's status
// update (a new Ready heartbeat) reaches the server before its Lease
// renewal. The persist reads the node and takes the heartbeat in; the
// recheck that follows must still stop the ForceOff (recheck-decided-view).
func (g *gen) statusFirstAtPersist() {
	name := g.pick().Name
	d := g.dur(0, 2*time.Minute)
	g.at(d, name+" partitioned (heals at the persist of a ForceOff, status first)", func() bool { return g.setPartitioned(name, true) }, faultPartition)
	g.at(d+g.dur(3*time.Minute, 5*time.Minute), name+" partition heals", func() bool { return g.setPartitioned(name, false) })
	g.sim.ArmGap(&GapPlan{
		After: g.sim.start.Add(d), At: GapPersist, Node: name,
		When: func(node string, gp Gap) bool { return gp.Phase == fence.PoweringOff && g.w.partitionedAlive(node) },
		Act: func(node string) {
			if g.w.StatusFirst(node) {
				g.sim.fault(faultStatusFirst)
			}
		},
	})
}

// fencedPowerLoss: node name loses power at d, to be fenced; its pods stay
// terminating (no kubelet) until force-deleted.
func (g *gen) fencedPowerLoss(name string, d time.Duration) {
	g.at(d, name+" power-loss", func() bool { return g.machineEvent(name, machine.EventPowerLoss) }, faultPowerLoss)
}

// pausedBetweenListAndDelete: a node that lost power is fenced; while the
// leader force-deletes its terminating pods, it stalls between its list of
// the pods and its deletes, and meanwhile someone removes the out-of-service
// taint (the pods stay as listed). The re-check of the token and the taint
// right before each delete must stop the stale deletes
// (pod-delete-recheck).
func (g *gen) pausedBetweenListAndDelete() {
	name := g.pick().Name
	d := g.dur(0, 3*time.Minute)
	g.fencedPowerLoss(name, d)
	g.sim.ArmGap(&GapPlan{
		After: g.sim.start.Add(d), At: GapPodsListed, Node: name,
		Act: func(node string) {
			g.w.SetTaint(node, false)
			g.sim.fault(faultForeignTaint + "/our taint removed by hand while pods were being deleted")
		},
		For: g.dur(2*time.Second, 5*time.Second), To: []string{"standby", "fresh", "old"}[g.rng.IntN(3)],
	})
	g.plan = append(g.plan, fmt.Sprintf("on %s's pod deletes: leader pause between the list and the deletes; the taint removed meanwhile", name))
}

// pausedBetweenRecheckAndDelete: as above, but the leader stalls after its
// re-check, right before a delete, and meanwhile the node comes back: its
// power restored, its kubelet deletes the pods it no longer owns, another
// leader removes our taint (the node is Ready), new pods are scheduled.
// The delete's preconditions (the pods' version as listed) must stop it
// (pod-delete-preconditions).
func (g *gen) pausedBetweenRecheckAndDelete() {
	n := g.pick()
	name := n.Name
	if n.Host.CacheFor > 0 {
		return
	}
	n.Host.timing.PowerOn = g.dur(5*time.Second, 15*time.Second)
	n.Host.BMC.SetTiming(n.Host.timing)
	d := g.dur(0, 3*time.Minute)
	g.fencedPowerLoss(name, d)
	g.sim.ArmGap(&GapPlan{
		After: g.sim.start.Add(d), At: GapPodsRechecked, Node: name,
		For: g.dur(40*time.Second, maxPause), To: []string{"standby", "fresh", "old"}[g.rng.IntN(3)],
		Perturb: func(node string) {
			if g.machineEvent(node, machine.EventPowerRestore) {
				g.sim.fault(faultPowerOnByHuman)
			}
		},
	})
	g.plan = append(g.plan, fmt.Sprintf("on %s's pod deletes: leader pause between the re-check and a delete; the node comes back meanwhile", name))
}

// pausedInsideATaintWrite: a node that lost power is about to be tainted;
// the leader stalls between reading the node (its token checked) and its
// patch, while another leader takes over and someone powers the machine
// back on. The patch's resourceVersion precondition must stop the stale
// taint (write-precondition).
func (g *gen) pausedInsideATaintWrite() {
	name := g.pick().Name
	d := g.dur(0, 3*time.Minute)
	g.fencedPowerLoss(name, d)
	g.sim.ArmGap(&GapPlan{
		After: g.sim.start.Add(d), At: GapTaintRead, Node: name,
		When: func(_ string, gp Gap) bool { return gp.Write == "taint" },
		For:  g.dur(5*time.Second, maxPause), To: []string{"standby", "fresh", "old"}[g.rng.IntN(3)],
		Perturb: func(node string) {
			if g.press(node, machine.ResetOn) {
				g.sim.fault(faultPowerOnByHuman)
			}
		},
	})
	g.plan = append(g.plan, fmt.Sprintf("on %s's taint: leader pause between reading the node and the patch; powered on meanwhile", name))
}

// splitBrainOverAPartition: two nodes are cut off from the API server (their
// machines run, their BMCs read On), and as their silence reaches
// fenceAfter two agents both believe they lead; each one's workers run
// between the other's persisted decision and its ForceOff. Each must count
// the other's fence from its persisted state: at most maxConcurrentFences
// running machines powered off per cooldown (the storm rule, judged in a
// split brain too).
func (g *gen) splitBrainOverAPartition() {
	nodes := g.w.Nodes
	i := g.rng.IntN(len(nodes))
	a, b := nodes[i].Name, nodes[(i+1)%len(nodes)].Name
	d := g.dur(0, 2*time.Minute)
	for _, name := range []string{a, b} {
		g.at(d, name+" partitioned", func() bool { return g.setPartitioned(name, true) }, faultPartition)
		g.at(d+g.dur(2*time.Minute, 4*time.Minute), name+" partition heals", func() bool { return g.setPartitioned(name, false) })
	}
	fa := g.w.Policy.FenceAfter
	g.at(d+fa-g.dur(5*time.Second, 20*time.Second), "agent split-brain with a standby", func() bool { g.sim.SplitBrainWith("standby"); return true })
	g.at(d+fa+g.dur(30*time.Second, 90*time.Second), "agent failover to standby", func() bool { g.sim.FailoverTo("standby", 0); return true })
	if g.sim.Interleave < 0.5 {
		g.sim.Interleave = 0.5
		g.plan = append(g.plan, "interleave 0.5")
	}
	if g.sim.partners == nil {
		g.sim.partners = map[string]string{}
	}
	g.sim.partners[a], g.sim.partners[b] = b, a
}

// hungEvidence: a node runs the watchdog petter, and either hangs for real
// (its BMC logs an SMS/OS expiry, or an OS critical stop on a panic: the
// evidence that fences it before fenceAfter), or its BMC holds an entry
// that must not count while the machine lives, and the node is then cut
// off (alive, silent: only fenceAfter may power it off):
//
//	stale     an SMS/OS expiry logged in a previous boot
//	foreign   an SMS/OS expiry about another system (a shared log)
//	post      a BIOS/POST or OS Load timer's expiry
//	hidden    an expiry whose timer use the BMC does not say (iDRAC, iLO
//	          Redfish): the petter was evicted on the live machine
//	evicted   the petter evicted on a live machine that still renews
func (g *gen) hungEvidence() {
	n := g.pick()
	name := n.Name
	n.Petter = g.dur(5*time.Second, 30*time.Second)
	d := g.dur(30*time.Second, 3*time.Minute)
	lie := func(what string, fn func(n *Node) bool) {
		g.at(d, name+" BMC evidence that must not count: "+what, func() bool {
			n := g.node(name)
			return n != nil && n.alive() && fn(n)
		}, faultEvidenceLie, faultEvidenceLie+"/"+what)
	}
	// may reports whether the episode's own cut-off may happen (nil:
	// always).
	var may func(n *Node) bool
	cutOff := func() {
		at := d + g.dur(5*time.Second, 40*time.Second)
		g.at(at, name+" partitioned", func() bool {
			n := g.node(name)
			if n == nil || n.Partitioned || (may == nil && n.liveExpiry) || (may != nil && !may(n)) {
				return false
			}
			n.Partitioned = true
			return true
		}, faultPartition)
		g.at(at+g.dur(90*time.Second, 3*time.Minute), name+" partition heals", func() bool {
			g.sim.pinned = false
			return g.setPartitioned(name, false)
		})
	}
	expiry := machine.LogEntry{Kind: machine.LogWatchdogExpired, Use: machine.TimerUseSMSOS}
	switch g.rng.IntN(8) {
	case 0, 1:
		ev := machine.EventOSHang
		if g.rng.IntN(2) == 0 {
			ev = machine.EventOSPanic
		}
		g.at(d, name+" "+string(ev)+" (watchdog petter armed)", func() bool {
			if !g.machineEvent(name, ev) {
				return false
			}
			return g.node(name).Host.BMC.Watchdog().Armed
		}, faultHang, faultHungEvidence)
	case 2:
		lie("stale entry from a previous boot", func(n *Node) bool {
			e := expiry
			e.Boot = -1
			n.Host.BMC.AppendLog(e)
			return true
		})
		cutOff()
	case 3:
		lie("another system's entry", func(n *Node) bool {
			e := expiry
			e.Origin = "system-2"
			n.Host.BMC.AppendLog(e)
			return true
		})
		cutOff()
	case 4:
		use := machine.TimerUseBIOSPOST
		if g.rng.IntN(2) == 0 {
			use = machine.TimerUseOSLoad
		}
		lie(use.String()+" timer's expiry", func(n *Node) bool {
			e := expiry
			e.Use = use
			n.Host.BMC.AppendLog(e)
			return true
		})
		cutOff()
	case 5:
		lie("expiry with its timer use hidden (evicted petter)", func(n *Node) bool {
			n.Host.BMC.SetHideTimerUse(true)
			n.liveExpiry = true
			may = func(*Node) bool { return true } // every entry's timer use is hidden
			n.petterEvicted = true
			n.Host.BMC.StopPetter(false)
			return true
		})
		// Cut off once the watchdog has expired on the live machine.
		d += n.Petter
		cutOff()
	case 6:
		// The agent first sees the expiry while its view of the node is
		// frozen (the node looks silent; the stale view admits nothing,
		// and the server recheck sees the renewals), then sees the node
		// renew, then the node is cut off: the expiry was first seen
		// before the node's last renewal.
		lie("expiry first seen before the node's last renewal (evicted petter, then a frozen view)", func(n *Node) bool {
			if !n.renews() || n.liveExpiry {
				return false // already cut off, or already holding one: undetectable
			}
			n.petterEvicted, n.liveExpiry = true, true
			n.Host.BMC.StopPetter(false)
			return true
		})
		w := g.w
		freeze := d + n.Petter + g.dur(time.Second, 5*time.Second)
		thaw := freeze + w.Policy.SuspectAfter + g.dur(30*time.Second, 60*time.Second)
		// The premise: the leader that read the entry while the view was
		// frozen (a read that succeeded) still leads, with its memory,
		// when the node is cut off.
		var leader *Agent
		var frozeAt time.Time
		g.at(freeze, "api freeze", func() bool {
			w.FreezeAPI()
			g.sim.pinned = true
			frozeAt = w.Clock.Now()
			if len(g.sim.active) == 1 {
				leader = g.sim.active[0]
			}
			return true
		}, faultFrozenView)
		g.at(thaw, "api thaw", func() bool { w.ThawAPI(); return true })
		may = func(n *Node) bool {
			if leader == nil || len(g.sim.active) != 1 || g.sim.active[0] != leader {
				return false
			}
			for _, c := range n.Host.BMC.Calls() {
				if c.Op == bmc.OpReadEvidence && c.Err == nil && c.At.After(frozeAt) {
					return true
				}
			}
			return false
		}
		d = thaw + g.dur(15*time.Second, 30*time.Second)
		cutOff()
	default:
		lie("evicted petter on a machine that still renews", func(n *Node) bool {
			if !n.renews() {
				return false // cut off already: undetectable (package doc)
			}
			n.petterEvicted, n.liveExpiry = true, true
			n.Host.BMC.StopPetter(false)
			return true
		})
	}
}
