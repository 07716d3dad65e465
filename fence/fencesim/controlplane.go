package fencesim

import (
	"fmt"
	"time"

	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
)

// Control-plane nodes (docs/safety.md, "Control-plane nodes"): each runs an
// etcd member. Powering off a control-plane machine that runs must leave a
// quorum of the members with machines that may run, and only one
// control-plane node is in a fence at a time.
const (
	faultControlPlane = "11  two control-plane nodes fail at once"
)

func init() { Required = append(Required, faultControlPlane) }

// offByUs: the node's machine is off (or powering off) after a ForceOff of
// ours reached it while, or after, it last ran (its power-off time and two
// ticks of slack: it still ran while powering off).
//
// A human who ended or held that fence since (an abort, an unfence, the
// taint removed by hand) took the machine over: what the agent then knows
// of it is the human's doing, and it counts as a machine that may run
// (docs/safety.md, "Control-plane nodes", says so).
func (n *Node) offByUs() bool {
	if running(n.Host) || n.ourOffAt.IsZero() || !n.ourOffAt.After(n.humanAt) {
		return false
	}
	return !n.ourOffAt.Add(n.Host.timing.PowerOff + 2*time.Second).Before(n.ranAt)
}

// judgeControlPlane judges a ForceOff that reaches the running machine of
// node n, not tainted, against the world's truth.
func (w *World) judgeControlPlane(n *Node, bad func(string, ...any)) {
	if !n.ControlPlane || n.taint != fence.TaintAbsent {
		return
	}
	members, mayRun := 1, 0
	var inFence []string
	for _, o := range w.Nodes {
		if o == n || !o.ControlPlane {
			continue
		}
		members++
		off := o.offByUs()
		if !off {
			mayRun++
		}
		if off && o.taint == fence.TaintAbsent {
			inFence = append(inFence, o.Name)
		}
	}
	if len(inFence) > 0 {
		w.quirk(faultControlPlane + "/ForceOff while another control-plane node is in a fence")
		bad("powered off control-plane node's running machine while control-plane node %v is in a fence (off by our ForceOff, not tainted): one at a time", inFence)
	}
	if quorum := members/2 + 1; mayRun < quorum {
		bad("powered off control-plane node's running machine leaving %d of %d control-plane machines that may run, fewer than etcd's quorum of %d",
			mayRun, members, quorum)
	}
}

// controlPlaneFailures: three (or five) nodes are control-plane nodes, and
// two of them fail at once: an OS hang, a stopped kubelet or a power loss
// each.
func (g *gen) controlPlaneFailures() {
	nodes := g.w.Nodes
	if len(nodes) < 3 {
		return
	}
	k := 3
	if len(nodes) >= 5 && g.rng.IntN(3) == 0 {
		k = 5
	}
	perm := g.rng.Perm(len(nodes))[:k]
	for _, i := range perm {
		nodes[i].ControlPlane = true
	}
	d := g.dur(10*time.Second, 3*time.Minute)
	for _, i := range perm[:2] {
		name := nodes[i].Name
		switch g.rng.IntN(3) {
		case 0:
			g.at(d, name+" (control plane) os-hang", func() bool { return g.machineEvent(name, machine.EventOSHang) }, faultHang, faultControlPlane)
		case 1:
			g.at(d, name+" (control plane) kubelet-stop", func() bool { return g.kubeletStop(name) }, faultKubeletStop, faultControlPlane)
		default:
			g.at(d, name+" (control plane) power-loss", func() bool { return g.machineEvent(name, machine.EventPowerLoss) }, faultPowerLoss, faultControlPlane)
		}
	}
	g.plan = append(g.plan, fmt.Sprintf("control plane: %d nodes", k))
}
