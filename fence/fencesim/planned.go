package fencesim

import (
	"time"

	"github.com/bmcfence/bmcfence/bmc/machine"
)

// Planned reboots (docs/safety.md, "Planned reboots"): a signal names the
// node (the kubelet's graceful node shutdown, kured's lock, a
// NodeMaintenance, a Cluster API Machine deleted or remediated), then the
// machine reboots with a POST longer than fenceAfter (it reads PoweringOn,
// its Lease silent for minutes), or shuts down and stays off.
const (
	faultPlannedReboot   = "10  planned reboot with a POST longer than fenceAfter"
	faultPlannedShutdown = "10  planned shutdown that stays off"
)

func init() { Required = append(Required, faultPlannedReboot, faultPlannedShutdown) }

// plannedSignals are the signals the cluster adapter recognises, as named
// in its Events (cluster.SignalGracefulShutdown, cluster.SignalKuredLock,
// and the texts of cluster's nodeMaintenanceSignal and machineSignal). The
// engine treats them alike: only the name differs (a Machine deleted reads
// "Cluster API Machine NS/NAME deleted"). Four, as before, so that the
// scenarios of a seed stay what they were.
var plannedSignals = []string{"the kubelet's graceful node shutdown", "kured lock", "NodeMaintenance nm-1",
	"Cluster API Machine default/machine-1 remediated by MachineSet default/workers"}

// plannedRebootOpen: a planned-reboot signal names the node and is younger
// than rebootWindow on the world's clock. Every agent saw it no earlier, so
// its own window ends no earlier. A ForceOff that follows an Off answer of
// the node's BMC by at most offAnswerGrace was sent on that exact Off (the
// reboot's dwell), which the rule allows.
func (w *World) plannedRebootOpen(n *Node, now time.Time) bool {
	// From when the agents could see the signal: a frozen API hides it.
	if n.plannedAt.IsZero() || n.plannedSeenAt.IsZero() || now.Sub(n.plannedAt) >= w.Policy.RebootWindow {
		return false
	}
	return !(n.lastOffAnswer.After(n.plannedAt) && now.Sub(n.lastOffAnswer) <= offAnswerGrace)
}

// offAnswerGrace bounds the time from a read answering Off to the ForceOff
// the engine sends on it reaching the BMC (a leader's pause between the two
// is up to maxPause).
const offAnswerGrace = maxPause + 5*time.Second

// plannedReboot: a healthy node announces a planned reboot, then reboots
// with a short dwell (so the agent, which suspects it only after
// suspectAfter, first reads it booting) and a POST of fenceAfter plus up to
// four minutes; or it shuts down and stays off, which must still be
// fenced. The signal goes when the node is back, or a few minutes after a
// shutdown.
func (g *gen) plannedReboot() {
	n := g.pick()
	name := n.Name
	d := g.dur(10*time.Second, 3*time.Minute)
	by := plannedSignals[g.rng.IntN(len(plannedSignals))]
	post := g.w.Policy.FenceAfter + g.dur(30*time.Second, 4*time.Minute)
	dwell := g.dur(1*time.Second, 5*time.Second)
	stayOff := g.rng.IntN(3) == 0
	g.at(d, name+" planned reboot signal ("+by+")", func() bool {
		n := g.node(name)
		if n == nil || !n.plannedAt.IsZero() {
			return false
		}
		n.plannedAt, n.plannedBy, n.plannedSeenAt = g.w.now(), by, time.Time{}
		if g.w.frozenSince.IsZero() {
			n.plannedSeenAt = n.plannedAt
		}
		g.w.Notify(name)
		return true
	})
	grace := g.dur(1*time.Second, 10*time.Second)
	if stayOff {
		g.at(d+grace, name+" planned shutdown", func() bool {
			n := g.node(name)
			if n == nil || n.plannedAt.IsZero() {
				return false
			}
			return g.press(name, machine.ResetGracefulShutdown)
		}, faultPlannedShutdown)
	} else {
		g.at(d+grace, name+" planned reboot (cold boot, POST "+post.String()+")", func() bool {
			n := g.node(name)
			if n == nil || n.plannedAt.IsZero() || n.Host.BMC.Truth().Power != machine.PowerOn || n.Host.CacheFor > 0 {
				return false
			}
			t := n.Host.timing
			t.PowerOn, t.RestartOff = post, dwell
			n.Host.timing = t
			n.Host.BMC.SetTiming(t)
			return g.press(name, machine.ResetGracefulRestart)
		}, faultPlannedReboot)
	}
	g.at(d+grace+dwell+post+g.dur(20*time.Second, 90*time.Second), name+" planned reboot signal gone", func() bool {
		if n := g.node(name); n != nil && !n.plannedAt.IsZero() {
			n.plannedAt, n.plannedBy = time.Time{}, ""
			g.w.Notify(name)
		}
		return true
	})
}
