package fencesim

import (
	"fmt"
	"strings"
	"time"

	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
)

// The oracle judges every write, and the cluster every second, against the
// world's truth only: the machine's real power and pending restarts (the
// machine model, not its BMC's answers), the kubelet's real life, what
// humans really asked and when. It never asks the engine what it believed.
// The rules:
//
//	Taint      a taint lands only on a node whose machine is off and stays
//	           off with no restart pending (or, on a human's confirm taken
//	           fresh, reads Off), that is not in maintenance nor excluded,
//	           and that has a BMC entry or that confirm.
//	Untaint    only our taint, only when the node is back: Ready, with a
//	           Lease renewed after the taint.
//	Pods       force-deleting a pod needs the out-of-service taint on its
//	           node when the delete lands.
//	ForceOff   a ForceOff never reaches another node's machine, nor a node
//	           in maintenance or excluded. Unless the node carries the
//	           out-of-service taint (keep-off), a human's fence request was
//	           taken fresh, or the NotReady opt-in holds (the node NotReady
//	           for powerOffNotReadyAfter), a running machine is never powered
//	           off while its kubelet renews (within suspectAfter), nor before
//	           its Lease has been silent for fenceAfter unless its BMC
//	           answered Off since the last renewal (an Off we then make ours)
//	           or its OS truly stopped (hung or panicked, reading On: what
//	           hung-node evidence may fence sooner).
//	Early      a ForceOff before the Lease has been silent for suspectAfter
//	           (a human's, the NotReady opt-in's and keep-off's aside)
//	           follows a true, live power-off event of the node's machine
//	           and a silence of at least eventSilence (events.go).
//	Storm      more than maxConcurrentFences running machines whose kubelet
//	           lives (a partition: alive, unable to renew) are never powered
//	           off within cooldown/2 of each other (the guard admits one per
//	           cooldown; half of it absorbs BMC latencies). Judged in a split
//	           brain too: each leader counts the fences the other persisted.
//	Keep-off   while our taint is on and volumes are still attached, the
//	           machine never runs longer than keepOffGrace, as long as the
//	           agent can act (see keepOffGrace).
//	Detach     a fence counts its node detached (a write from Tainting or
//	           Detaching to Fenced or PoweringOn no human asked for) only
//	           when no pod and no VolumeAttachment is bound to it
//	           (checkDetached, podlists.go).
//	Planned    while a planned-reboot signal names the node (less than
//	           rebootWindow since it appeared), a running machine is never
//	           powered off unless it is tainted, a human's fence request was
//	           taken fresh, or its BMC answered Off moments before (an
//	           exact Off the agent then makes its own: the reboot's dwell).
//	Control    a control-plane node's running machine is powered off (its
//	plane      node not tainted) only while no other control-plane node is
//	           in a fence (its machine off by a ForceOff of ours, not yet
//	           tainted) and the other control-plane nodes whose machines
//	           may run (all but those off by our ForceOff) are a quorum.
//	Requests   a fence or confirm licenses anything only when it was taken
//	           within maxRequestAge of when the taking agent could first see
//	           it (on the world's clock); otherwise the rules above apply as
//	           if no human had asked.

// maxPause bounds a leader's pause between a decision and its write.
const maxPause = 60 * time.Second

// requestSlack: a request decided at its last fresh moment may be
// acknowledged up to a leader pause later, when the decision and the
// acknowledging write straddle the pause.
const requestSlack = maxPause

// take is a request's acknowledgement: the runner took it (accepted or
// refused: the world cannot tell, and does not ask). A fence or confirm
// taken fresh licenses what it asks until the node's next renewal.
func (w *World) take(n *Node, r *pendingRequest, since time.Time) {
	w.taken[n.Name] = r
	first := r.origVisible
	if since.After(first) {
		first = since
	}
	fresh := w.now().Sub(first) <= w.Policy.MaxRequestAge+requestSlack
	switch r.cmd.Kind {
	case fence.CmdFence, fence.CmdConfirm:
		if !fresh {
			w.quirk(faultStaleRequest + "/taken after maxRequestAge")
			return
		}
		if r.cmd.Kind == fence.CmdFence {
			w.manual[n.Name] = true
		} else {
			w.attested[n.Name] = true
		}
	case fence.CmdAbort, fence.CmdUnfence:
		n.humanAt = w.now()
		// A human holds the node (or brings it back): keep-off is theirs.
		if n.taint != fence.TaintAbsent {
			n.held = true
		}
	case fence.CmdNone:
	}
}

// checkTaint judges a taint about to land.
func (w *World) checkTaint(n *Node) {
	if n.Maintenance || n.Excluded {
		w.violate("%s: tainted a node in maintenance or excluded", n.Name)
	}
	truth := n.Host.BMC.Truth()
	attested := w.attested[n.Name] && truth.Power == machine.PowerOff
	if !n.Host.BMC.StaysOff(time.Hour) && !attested {
		w.violate("%s: tainted while its machine %s is %s (kubelet alive=%v, restart pending=%v): it might be running",
			n.Name, n.Host.Name, truth.Power, n.alive(), truth.Power == machine.PowerOff)
	}
	if (!n.HasBMC || w.entries[n.Name] == nil) && !attested {
		w.violate("%s: tainted a node without BMC entry and without a human's fresh confirm", n.Name)
	}
}

// checkUntaint judges a taint removal.
func (w *World) checkUntaint(n *Node) {
	switch n.taint {
	case fence.TaintForeign:
		w.violate("%s: removed a taint that is not ours", n.Name)
	case fence.TaintOurs:
		if n.ready != fence.ReadyTrue || !n.lastBeat.After(n.taintAt) {
			w.violate("%s: removed our taint while the node is not back (ready %v, last renewal +%s, taint +%s)",
				n.Name, n.ready, n.lastBeat.Sub(w.start), n.taintAt.Sub(w.start))
		}
	case fence.TaintAbsent:
	}
}

// verdict is the judgement of a ForceOff, committed if it reaches a BMC.
type verdict struct {
	n     *Node
	msgs  []string
	storm bool
	// ownHost: the ForceOff goes to the node's own running machine.
	ownHost bool
}

func (v verdict) commit(w *World) {
	if v.ownHost {
		v.n.ourOffAt = w.now()
	}
	for _, m := range v.msgs {
		w.violate("%s", m)
	}
	if v.storm {
		w.stormCheck(v.n)
	}
}

// judgePowerOff judges a ForceOff from node n's entry to machine m.
func (w *World) judgePowerOff(n *Node, m *Machine) verdict {
	now := w.now()
	p := w.Policy
	v := verdict{n: n}
	bad := func(format string, args ...any) {
		v.msgs = append(v.msgs, n.Name+": "+sprintf(format, args...))
	}
	if n.Maintenance || n.Excluded {
		bad("powered off a node in maintenance or excluded")
	}
	if m != n.Host {
		bad("ForceOff reached machine %s, which is not this node's (%s): a wrong inventory entry acted on", m.Name, n.Host.Name)
	}
	tainted := n.taint != fence.TaintAbsent
	human := w.manual[n.Name]
	optIn := p.PowerOffNotReadyAfter > 0 && n.ready != fence.ReadyTrue && !n.notReadySince.IsZero() &&
		now.Sub(n.notReadySince) >= p.PowerOffNotReadyAfter
	// Early judges a ForceOff to a machine that is off too: what an event
	// may change is when an off machine gets our ForceOff.
	if !tainted && !human && !optIn && m == n.Host {
		if msg := w.judgeEarly(n, now); msg != "" {
			bad("%s", msg)
		}
	}
	w.judgeOwnHost(m, bad)
	if !running(n.Host) {
		return v
	}
	v.ownHost = m == n.Host
	w.judgeControlPlane(n, bad)
	silence := now.Sub(n.lastBeat)
	// The world's truth: the node's OS stopped (a hang, a panic) on a
	// machine that reads On. Evidence may fence it before fenceAfter.
	truth := n.Host.BMC.Truth()
	hung := truth.OSHung && truth.Power == machine.PowerOn
	switch {
	case !tainted && !human && w.plannedRebootOpen(n, now):
		bad("powered off a running machine (%s) in a planned reboot (%s, signalled %s ago, rebootWindow %s) with no Off from its BMC just before",
			n.Host.BMC.Truth().Power, n.plannedBy, now.Sub(n.plannedAt), p.RebootWindow)
	case tainted || human || optIn || hung:
	case n.renews() && silence < p.SuspectAfter:
		bad("powered off a running machine whose kubelet renewed its Lease %s ago", silence)
	case silence < p.FenceAfter && !n.lastOffAnswer.After(n.lastBeat):
		bad("powered off a running machine whose Lease has been silent only %s (fenceAfter %s), with no fresh human request, no NotReady opt-in and no Off from its BMC since",
			silence, p.FenceAfter)
	}
	v.storm = m == n.Host && n.alive() && !human && !tainted
	return v
}

type stormOff struct {
	node string
	at   time.Time
}

// stormCheck records a power-off of a running machine with a live kubelet
// and judges how many such there were within cooldown/2.
func (w *World) stormCheck(n *Node) {
	now := w.now()
	window := w.Policy.Cooldown / 2
	keep := w.stormOffs[:0]
	for _, s := range w.stormOffs {
		if now.Sub(s.at) < window {
			keep = append(keep, s)
		}
	}
	w.stormOffs = append(keep, stormOff{node: n.Name, at: now})
	if n.Partitioned {
		w.quirk(faultPartition + "/running machine powered off")
	}
	var names []string
	for _, s := range w.stormOffs {
		if !containsString(names, s.node) {
			names = append(names, s.node)
		}
	}
	if len(names) > w.Policy.MaxConcurrentFences {
		w.violate("storm: %d running machines with live kubelets powered off within %s (%s), maxConcurrentFences %d",
			len(names), window, strings.Join(names, ", "), w.Policy.MaxConcurrentFences)
	}
}

func containsString(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// keepOffGrace is how long a machine may run while our taint is on and its
// volumes are attached before the agent must have forced it off again: one
// keep-off read interval (the node's settle interval), one power poll
// (a ForceOff sent while it was still PoweringOn, ignored by a BMC that
// ignores commands during transitions, is sent again then), a read, an
// identity check and the ForceOff at the BMC's latency each, the machine's
// power-off time, a caching BMC's lag, and 2 s for the simulation's
// one-second ticks. Within ReadBackoffMax of a moment the agent could not
// act on the machine (keepOffJudged), a read backoff more.
func (w *World) keepOffGrace(n *Node, e *Entry) time.Duration {
	p := w.Policy
	if e.SettleWindow > 0 {
		p.SettleWindow = e.SettleWindow
	}
	m := n.Host
	g := p.SettleInterval() + p.PowerPollInterval + 3*m.latency + m.timing.PowerOff + 2*time.Second
	if m.CacheFor > 0 {
		g += m.CacheFor
		if lag := m.freezeUntil.Sub(w.now()); lag > 0 {
			g += lag
		}
	}
	return g
}

// keepOffJudged reports whether the agent can act on the node's machine
// now, so that the keep-off rule applies: a correct, verifiable, reachable
// entry to a BMC that obeys when On, an API server that takes writes, and
// no human holding the node.
func (w *World) keepOffJudged(n *Node) (*Entry, bool) {
	e := w.entries[n.Name]
	if e == nil || !n.HasBMC || n.Maintenance || n.Excluded || n.held || e.Target != n.Host {
		return nil, false
	}
	m := n.Host
	if m.unreachable || m.behavior.IgnoreCommands || m.deceives() || w.writesFail || w.apiErrorRate > 0 || !w.identityOK(n, e) || w.targets[m] > 1 {
		return nil, false
	}
	return e, true
}

// identityOK: the entry's target passes the identity check for the node.
func (w *World) identityOK(n *Node, e *Entry) bool {
	want := e.ExpectedUUID
	if want == "" {
		want = n.SystemUUID
	}
	got := e.Target.UUID
	if e.Target.NoUUID {
		got = ""
	}
	if want == "" || got == "" {
		return e.AllowUnverified && (want == "" || got == "")
	}
	return strings.EqualFold(want, got)
}

// checkKeepOff runs every second: a tainted node whose volumes are still
// attached must not run for longer than keepOffGrace.
func (w *World) checkKeepOff(now time.Time) {
	for _, n := range w.Nodes {
		if n.taint == fence.TaintAbsent {
			n.keepOffSince, n.keepOffFlag, n.held = time.Time{}, false, false
			continue
		}
		e, judged := w.keepOffJudged(n)
		if !judged {
			n.keepOffBlind = now
		}
		ok := judged && n.taint == fence.TaintOurs && n.vas > 0 && n.Host.BMC.Truth().Power == machine.PowerOn
		if !ok {
			n.keepOffSince, n.keepOffFlag = time.Time{}, false
			if n.taint == fence.TaintAbsent {
				n.held = false
			}
			continue
		}
		if n.keepOffSince.IsZero() {
			n.keepOffSince = now
			w.quirk(faultKeepOff + "/machine running while tainted")
		}
		g := w.keepOffGrace(n, e)
		if !n.keepOffBlind.IsZero() && now.Sub(n.keepOffBlind) < w.Policy.ReadBackoffMax {
			// The agent could not act a moment ago (its reads failed, or
			// were not this node's): its next read may be a full backoff
			// away.
			g += w.Policy.ReadBackoffMax
		}
		if now.Sub(n.keepOffSince) > g && !n.keepOffFlag {
			n.keepOffFlag = true
			w.violate("%s: our taint is on and %d volumes are attached, but its machine has been running for %s (grace %s): keep-off failed",
				n.Name, n.vas, now.Sub(n.keepOffSince), g)
		}
	}
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
