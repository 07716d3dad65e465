package fencesim

import (
	"time"

	"github.com/bmcfence/bmcfence/bmc/machine"
)

// The leader's own node (docs/safety.md, "The leader's own node"): every
// replica runs on some machine. A replica the scenario places on a node of
// the fleet runs there: its runner knows the node's name (the downward
// API's), and the world knows the machine. The hazard: that node's kubelet
// stops, or it is cut off from the API server, while the leader on it keeps
// its election; a ForceOff from the leader would cut its own machine. The
// oracle judges from the world's truth (which machine hosts the acting
// replica), never by asking the engine.
const (
	faultOwnNode = "11  the leader's own node fails while the leader keeps its election"
)

func init() { Required = append(Required, faultOwnNode) }

// setActor records which agent's runner syncs now, and returns the one
// before (the driver restores it: syncs nest inside pauses).
func (w *World) setActor(a *Agent) *Agent {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.actor
	w.actor = a
	return prev
}

// judgeOwnHost: a power-off that reaches machine m, running, from an agent
// whose replica runs on m is a violation: the leader cut its own machine.
// Under the world's lock.
func (w *World) judgeOwnHost(m *Machine, bad func(string, ...any)) {
	a := w.actor
	if a == nil || a.Host == nil || a.Host != m || !running(m) {
		return
	}
	bad("%s powered off machine %s, which it runs on (node %s): the leader never powers off its own node", a.ID, m.Name, a.NodeName)
}

// hostRuns: a replica on machine m runs: the machine is On, its OS up and
// not hung.
func hostRuns(m *Machine) bool {
	t := m.BMC.Truth()
	return t.Power == machine.PowerOn && t.BootState == "OSRunning" && !t.OSHung
}

// hostsDied replaces every active agent whose machine stopped running (off,
// powering off, hung) by a fresh process elsewhere: a replica dies with its
// machine, and its Lease passes on. A pinned leader is left (the hung-node
// evidence episode), as for every other leader change.
func (s *Sim) hostsDied() {
	if s.pinned {
		return
	}
	for i, a := range s.active {
		if a.Host == nil || hostRuns(a.Host) {
			continue
		}
		s.fault(faultOwnNode + "/leader died with its machine")
		s.active[i] = s.newAgent(s.W.Clock.Now(), 0)
	}
}

// leadFrom hands leadership to a new replica on node name (a standby that
// watched all along), as a failover does.
func (s *Sim) leadFrom(name string) bool {
	n := s.W.Node(name)
	if s.pinned || n == nil || !hostRuns(n.Host) {
		return false
	}
	s.fault(faultFailover)
	s.setActive(s.newAgentOn(s.start, 0, name, n.Host))
	return true
}

// leaderOn: an active agent runs on node name's machine.
func (s *Sim) leaderOn(name string) bool {
	n := s.W.Node(name)
	if n == nil {
		return false
	}
	for _, a := range s.active {
		if a.Host == n.Host && a.NodeName == name {
			return true
		}
	}
	return false
}

// ownNode: leadership passes to a replica on a node of the fleet, then that
// node's kubelet stops, or the node is cut off from the API server, while
// the leader keeps its election; past fenceAfter, it comes back.
func (g *gen) ownNode() {
	name := g.pick().Name
	d := g.dur(10*time.Second, 3*time.Minute)
	g.at(d, "leader moves to a replica on "+name, func() bool { return g.sim.leadFrom(name) })
	lasts := g.w.Policy.FenceAfter + g.dur(30*time.Second, 3*time.Minute)
	fail := d + g.dur(time.Second, 20*time.Second)
	if g.rng.IntN(2) == 0 {
		g.at(fail, name+" (the leader's node) kubelet-stop", func() bool {
			return g.sim.leaderOn(name) && g.kubeletStop(name)
		}, faultOwnNode, faultKubeletStop)
		g.at(fail+lasts, name+" kubelet-start", func() bool { return g.kubeletStart(name) })
		return
	}
	g.at(fail, name+" (the leader's node) partitioned", func() bool {
		return g.sim.leaderOn(name) && g.setPartitioned(name, true)
	}, faultOwnNode, faultPartition)
	g.at(fail+lasts, name+" partition heals", func() bool { return g.setPartitioned(name, false) })
}
