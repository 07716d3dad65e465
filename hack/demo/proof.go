package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// proof prints the steps of a fence as the demo sees them, each step once,
// with the time since the start. A poll that sees nothing new prints
// nothing; a step seen again (an Event counted up, a node Ready on every
// poll after the first) is not printed again.
type proof struct {
	w     io.Writer
	start time.Time
	now   func() time.Time
	// color: the elapsed time dimmed with ANSI escapes (off in tests).
	color   bool
	printed map[proofStep]bool
	// heldTaint counts polls that saw the taint before the agent's Event
	// saying the Off settled (Events are written asynchronously).
	heldTaint int
}

// holdTaintPolls bounds how long the taint line waits for the settled
// line, so that the lines come in the order of the proof: 10 polls of
// 200ms, far longer than an Event takes to be written, and a lost Event
// does not stop the demo.
const holdTaintPolls = 10

// proofStep names one line of the demo's output.
type proofStep string

// The steps, in the order a fence goes through them.
const (
	stepPowerLost   proofStep = "power lost"
	stepSilent      proofStep = "silent"
	stepForceOff    proofStep = "ForceOff sent"
	stepAccepted    proofStep = "ForceOff accepted"
	stepNotAccepted proofStep = "ForceOff not accepted"
	stepSettled     proofStep = "settled"
	stepTainted     proofStep = "tainted"
	stepPodsMoved   proofStep = "pods moved"
	stepDetached    proofStep = "volume detached"
	stepReplaced    proofStep = "replacement Running"

	stepPowerBack proofStep = "power restored"
	stepReady     proofStep = "Ready again"
	stepUntainted proofStep = "taint removed"
)

func newProof(w io.Writer, start time.Time, now func() time.Time, color bool) *proof {
	return &proof{w: w, start: start, now: now, color: color, printed: map[proofStep]bool{}}
}

// once prints text as step s unless s was printed already.
func (p *proof) once(s proofStep, text string) {
	if p.printed[s] {
		return
	}
	p.printed[s] = true
	elapsed := fmt.Sprintf("+%5.1fs", p.now().Sub(p.start).Seconds())
	if p.color {
		elapsed = dim + elapsed + reset
	}
	fmt.Fprintf(p.w, "   %s  %s\n", elapsed, text)
}

func (p *proof) has(s proofStep) bool { return p.printed[s] }

// nodeEvent is one of the node's Events, as the agent recorded it.
type nodeEvent struct {
	Reason  string
	Message string
}

// failoverView is what one poll of the demo sees during the failover.
type failoverView struct {
	Node string
	// Events: the node's Events since the power loss, oldest first.
	Events  []nodeEvent
	Tainted bool
	// PodNode is where db-0 is scheduled ("" when it does not exist),
	// PodRunning whether it runs, VolumeOn the node its volume is
	// attached to ("" when none).
	PodNode    string
	PodRunning bool
	VolumeOn   string
}

// failover prints what v shows that was not printed yet, in the order of
// the proof; it reports whether the replacement runs with its volume.
// Each line quotes the agent's own Event where there is one, so the demo
// shows the evidence rather than a paraphrase of it.
func (p *proof) failover(v failoverView) bool {
	for _, e := range v.Events {
		e.Message = withoutTrusted(e.Message)
		switch e.Reason {
		case "FenceSuspect":
			p.once(stepSilent, "Lease silent, the first witness: "+e.Message)
		case "FencePowerOff":
			p.once(stepForceOff, "our ForceOff sent: "+e.Message)
		case "FenceConfirmingOff":
			// The agent says whether the Off follows a ForceOff of
			// ours that the BMC accepted (the one that counts) or not.
			if strings.Contains(e.Message, "after our accepted ForceOff") {
				p.once(stepAccepted, "our ForceOff accepted by the BMC: "+e.Message)
			} else {
				p.once(stepNotAccepted, "our ForceOff not accepted: "+e.Message)
			}
		case "FenceConfirmedOff":
			p.once(stepSettled, "Off settled, the second witness: "+e.Message)
		}
	}
	if v.Tainted && !p.has(stepSettled) && p.heldTaint < holdTaintPolls {
		p.heldTaint++
		return false
	}
	if v.Tainted {
		p.once(stepTainted, "tainted: node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")
	}
	if p.has(stepTainted) && v.PodNode != v.Node {
		p.once(stepPodsMoved, "pods moved: the old db-0 is deleted")
	}
	if p.has(stepPodsMoved) && v.VolumeOn != v.Node {
		p.once(stepDetached, "volume detached from "+v.Node)
	}
	if p.has(stepDetached) && v.PodNode != "" && v.PodNode != v.Node && v.PodRunning && v.VolumeOn == v.PodNode {
		p.once(stepReplaced, fmt.Sprintf("replacement db-0 Running on %s with its volume", v.PodNode))
		return true
	}
	return false
}

// withoutTrusted drops the " (power trusted: …)" clause of an Event
// (which resource's power a reading trusted, and why: a paragraph on some
// BMCs), keeping the demo's lines short; the agent's Events keep it.
func withoutTrusted(msg string) string {
	const clause = " (power trusted: "
	i := strings.Index(msg, clause)
	if i < 0 {
		return msg
	}
	depth := 0
	for j := i + 1; j < len(msg); j++ {
		switch msg[j] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return msg[:i] + withoutTrusted(msg[j+1:])
			}
		}
	}
	return msg
}

// recoveryView is what one poll sees while the node comes back.
type recoveryView struct {
	Node    string
	Ready   bool // Ready with its kubelet running
	Tainted bool
}

// recovery prints the node's return; it reports whether our taint is gone.
func (p *proof) recovery(v recoveryView) bool {
	if v.Ready {
		p.once(stepReady, v.Node+" Ready again, its kubelet renewing its lease")
	}
	if !v.Tainted {
		p.once(stepUntainted, "our taint removed: "+v.Node+" takes work again")
		return true
	}
	return false
}
