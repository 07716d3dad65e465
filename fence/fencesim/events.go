package fencesim

import (
	"math/rand/v2"
	"time"

	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
)

// Power events (docs/safety.md, "Power events"). In a scenario with events
// on, every BMC pushes a power-off event when its machine goes off (a power
// loss, a restart's or a cold reboot's off-dwell, a shutdown, our own
// ForceOff), and the stream lies as real ones do: an event is dropped, a
// multi-system BMC sends the event of its other system, a stream drops and
// on reconnect replays an old event (marked as a replay, or not). The
// agents hear each BMC's latest event through runner.PowerEvents (Cluster's
// OffEvent): the leader's streams, connected when the agent started.
//
// The oracle's rule (oracle.go, Early): a ForceOff sent before the node's
// Lease has been silent for suspectAfter (counted from the last renewal the
// informers delivered: a renewal a frozen view hides is the frozen-view
// premise, hidden from any agent) needs a true, live power-off event of the
// node's own machine delivered after that renewal was written (with Lease
// lists the view takes it in up to a list period and a list later), and
// that silence at least eventSilence. What the event path may change is when a machine that
// is off gets our ForceOff; the taint rules are judged as before.

// faultEvents is the fault class of the world's power events.
const faultEvents = "x   power events (BMC event streams)"

// streamEvent is the latest event a BMC's stream delivered, on the world's
// clock.
type streamEvent struct {
	system string
	at     time.Time
	replay bool
}

// machineEvents is a BMC's event stream. trueOffAt is when it last delivered
// a true, live power-off event of its machine (the oracle's).
type machineEvents struct {
	seen        bool
	wasOn       bool
	connectedAt time.Time
	last        streamEvent
	trueOffAt   time.Time
}

// EnableEvents turns the BMCs' power events on in about half the scenarios
// a seed makes, with their own random source so that the rest of the
// scenario is the one the seed made before events existed.
func (w *World) EnableEvents(seed uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.evRng = rand.New(rand.NewPCG(seed, 0x5e5e5e5e))
	w.events = w.evRng.IntN(2) == 0
	return w.events
}

// advanceEvents pushes the power-off events of the machines that went off
// since the last second. Under the world's lock.
func (w *World) advanceEvents(now time.Time) {
	if !w.events {
		return
	}
	for _, m := range w.Machines {
		ev := &m.events
		p := m.BMC.Truth().Power
		on := p == machine.PowerOn || p == machine.PowerPoweringOn
		if !ev.seen {
			ev.seen, ev.wasOn, ev.connectedAt = true, on, now
			continue
		}
		if ev.wasOn && !on {
			w.powerOffEvent(m, now)
		}
		ev.wasOn = on
	}
}

// powerOffEvent is what m's BMC pushes as m goes off: the true event, or
// one of a stream's lies.
func (w *World) powerOffEvent(m *Machine, now time.Time) {
	ev := &m.events
	w.quirk(faultEvents)
	for _, n := range w.Nodes {
		if n.Host == m && now.Sub(n.lastBeat) < w.Policy.EventSilence {
			// A reboot's off-dwell (or any off) within a renewal of
			// the kubelet's last: hazard (c).
			w.quirk(faultEvents + "/power-off event within a renewal interval of a renewal")
		}
	}
	switch r := w.evRng.IntN(20); {
	case r < 13:
		ev.last = streamEvent{system: m.Name, at: now}
		ev.trueOffAt = now
		w.quirk(faultEvents + "/true power-off event")
	case r < 15:
		w.quirk(faultEvents + "/event dropped")
	case r < 17:
		// A multi-system BMC (a blade chassis): this machine's event is
		// lost, its other system's arrives.
		ev.last = streamEvent{system: m.Name + "/2", at: now}
		w.quirk(faultEvents + "/event for another system")
	default:
		// The stream dropped as the machine went off; on reconnect the
		// BMC replays its previous event, marked or not.
		ev.connectedAt = now
		ev.last = streamEvent{system: m.Name, at: now, replay: w.evRng.IntN(2) == 0}
		w.quirk(faultEvents + "/stream dropped, stale event replayed on reconnect")
	}
	for name, e := range w.entries {
		if e != nil && e.Target == m {
			w.notify(name)
		}
	}
}

// OffEvent implements runner.PowerEvents: the latest event of the stream of
// the node's entry's BMC, as this agent heard it (its streams connect when
// it starts), on its clock; the entry's system as that stream names it.
func (c Cluster) OffEvent(name string) (fence.PowerEvent, string, bool) {
	w := c.W
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.entries[name]
	if !w.events || e == nil || e.Target == nil || w.byName[name] == nil {
		return fence.PowerEvent{}, "", false
	}
	ev := &e.Target.events
	conn := ev.connectedAt
	if c.Since.After(conn) {
		conn = c.Since
	}
	var out fence.PowerEvent
	if l := ev.last; !l.at.IsZero() && !l.at.Before(conn) {
		out = fence.PowerEvent{System: l.system, Received: shift(l.at, c.Skew), ConnectedAt: shift(conn, c.Skew), Replay: l.replay}
	}
	return out, e.Target.Name, true
}

// judgeEarly is the oracle's rule for a ForceOff from node n's entry sent
// before the Lease has been silent for suspectAfter (see the top of this
// file). It returns the violation, or "".
func (w *World) judgeEarly(n *Node, now time.Time) string {
	p := w.Policy
	silence := now.Sub(n.lastObservedHB)
	if silence >= p.SuspectAfter {
		return ""
	}
	if p.EventSilence <= 0 || silence < p.EventSilence {
		return sprintf("ForceOff after only %s of Lease silence (suspectAfter %s, eventSilence %s): before a missed renewal, no event may start a fence",
			silence, p.SuspectAfter, p.EventSilence)
	}
	// After the renewal the view holds, as the kubelet wrote it (with
	// Lease lists it is taken in later: an event between the two is news).
	if t := n.Host.events.trueOffAt; t.IsZero() || t.Before(n.viewBeat) {
		last := "none"
		if !t.IsZero() {
			last = "+" + t.Sub(w.start).String()
		}
		return sprintf("ForceOff after %s of Lease silence, before suspectAfter %s, with no true, live power-off event of machine %s since its last renewal (last true event: %s)",
			silence, p.SuspectAfter, n.Host.Name, last)
	}
	if msg := w.judgeMissedRenewal(n, now); msg != "" {
		return msg
	}
	w.quirk(faultEvents + "/ForceOff before suspectAfter on a true event")
	if t := n.Host.events.trueOffAt; !t.After(n.lastObservedHB) {
		// Ordered after a renewal our lists delivered later than the
		// event (fence.NodeView.HeartbeatFrom).
		w.quirk(faultEvents + "/ForceOff before suspectAfter on a true event received before its renewal was listed")
		if n.lastObservedHB.Sub(n.observedFrom) > fence.MaxLifePlacement {
			w.quirk(faultEvents + "/ForceOff before suspectAfter on a true event received before its renewal was listed, in a list window wider than MaxLifePlacement")
		}
	}
	return ""
}

// noteRenewal records a sign of life of n's kubelet on the server, keeping
// those the oracle may still need (judgeEarly looks back less than
// suspectAfter from the last delivered renewal). Under the world's lock.
func (w *World) noteRenewal(n *Node, now time.Time) {
	keep := now.Add(-2*w.Policy.SuspectAfter - time.Minute)
	i := 0
	for i < len(n.renewals) && n.renewals[i].Before(keep) {
		i++
	}
	n.renewals = append(n.renewals[i:], now)
}

// judgeMissedRenewal is the early start's premise judged from the world's
// truth: the kubelet missed a renewal. Counting from the last sign of life
// the agents' informers delivered (a later one an agent's own read may
// have taken in only moves its view later), some stretch of eventSilence
// or more must have passed with no sign of life on the server: between
// two of its renewals, or from the last one until now. A view that lags
// (a stalled watch) hides renewals; an agent that took the lag for a
// silence (a live read that found a newer renewal, taken as proof) powers
// off a rebooting machine whose kubelet renewed every interval.
func (w *World) judgeMissedRenewal(n *Node, now time.Time) string {
	p := w.Policy
	prev := n.lastObservedHB
	for _, r := range n.renewals {
		if !r.After(prev) {
			continue
		}
		if r.Sub(prev) >= p.EventSilence {
			return ""
		}
		prev = r
	}
	if now.Sub(prev) >= p.EventSilence {
		return ""
	}
	return sprintf("ForceOff before suspectAfter %s on a power-off event, though the kubelet of machine %s missed no renewal: no stretch of eventSilence %s without one since the renewal the view held (+%s); the last at +%s",
		p.SuspectAfter, n.Host.Name, p.EventSilence, n.lastObservedHB.Sub(w.start), prev.Sub(w.start))
}
