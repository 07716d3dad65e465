package fence

import (
	"fmt"
	"time"

	unitmutant "github.com/bmcfence/bmcfence/internal/mutant"
)

// Power events (docs/safety.md, "Power events"). A power-off event the
// node's BMC pushed may start the fence before SuspectAfter: the node enters
// Suspect, its BMC is read, and a machine that reads exactly Off gets our own
// ForceOff during the Lease's silence instead of after it. Nothing else
// changes: the event is never proof of Off (the settled read-back after our
// accepted ForceOff is), a machine reading anything but Off waits for
// FenceAfter as before, and the taint still needs the Lease silent for
// SuspectAfter on our clock with no renewal after our ForceOff
// (silentLongEnough, contradicted).

// offEventWhy says why the node's latest power-off event may not start its
// fence early now, or "" when it may. fleet says whether st.in.Fleet is the
// real fleet view (a healthy node's tick gets the zero one): without it, the
// view's staleness is not known and the silence rule waits for it (the
// caller enters Suspect, whose reads step with the fleet).
func (st *stepper) offEventWhy(fleet bool) string {
	if why := st.offEventRulesWhy(); why != "" {
		return why
	}
	n := st.node()
	if need, ok := st.eventSilenceNeeded(fleet); !ok {
		return "our view's staleness is not known yet"
	} else if silent := SilentFor(n, st.now); silent < need {
		wait := need - silent
		if fleet && Enabled(CheckEventSilence) {
			wait = min(wait, leaseReadWait(st.p, silent))
		}
		st.wake(wait)
		st.eventWait = wait
		return fmt.Sprintf("the Lease has been silent %s, not yet %s", silent.Round(time.Millisecond), need.Round(time.Millisecond))
	}
	return ""
}

// offEventRulesWhy is offEventWhy without the silence rule: why the node's
// latest power-off event may never start its fence early, or "". It changes
// nothing in the step (the silence rule wakes the node), so the suspicion's
// Event can say why an event present did not count.
func (st *stepper) offEventRulesWhy() string {
	n := st.node()
	ev := n.OffEvent
	switch {
	case st.p.EventSilence <= 0:
		return "power events are off (policy.eventSilence 0)"
	case ev.Received.IsZero():
		return "no power-off event"
	case st.s.NotReadyFence || st.s.Manual || st.s.Attested:
		// A NotReady fence's node renews: an event never licenses
		// anything there. A human's fence needs no event.
		return "not a Lease-silence fence"
	case Enabled(CheckPlannedReboot) && plannedRebootOpen(st.p, n, st.now):
		// A cold reboot's off-dwell pushes a power-off event too; a
		// planned one never starts a fence early.
		return "a planned reboot is under way"
	}
	if Enabled(CheckEventSystem) && (ev.System == "" || n.BMCSystem == "" || ev.System != n.BMCSystem) {
		return fmt.Sprintf("the event names system %q, not the node's (%q)", ev.System, n.BMCSystem)
	}
	if Enabled(CheckEventFresh) {
		life := lifeFor(&n, ev)
		switch {
		case ev.Replay:
			return "the event was replayed on a reconnect"
		case ev.AfterGap:
			return "the stream lost events before it"
		case life.IsZero() || !ev.Received.After(life):
			return fmt.Sprintf("it was received at %s, not after the node's last sign of life (%s)", stamp(ev.Received), lifeSays(&n, ev, life))
		case ev.ConnectedAt.IsZero() || ev.ConnectedAt.After(life):
			return "the stream connected after the node's last sign of life"
		}
	}
	return ""
}

// lifeSays says where the node's last sign of life was placed for ev
// (lifeFor).
func lifeSays(n *NodeView, ev PowerEvent, life time.Time) string {
	if !life.Equal(n.HeartbeatAt) {
		return "written after " + stamp(life) + ", taken in at " + stamp(n.HeartbeatAt) + " by a list of the Leases"
	}
	if !n.HeartbeatFrom.IsZero() && n.HeartbeatFrom.Before(n.HeartbeatAt) && !ev.Received.After(n.HeartbeatAt) {
		return "taken in at " + stamp(n.HeartbeatAt) + " by a list of the Leases, written after " + stamp(n.HeartbeatFrom) + ": too long before to place"
	}
	return "taken in at " + stamp(n.HeartbeatAt)
}

// eventUnusedSays is, for the suspicion's Event, which rule kept the
// power-off event the node's BMC pushed during this silence from ever
// starting the fence early (offEventRulesWhy), or "": no such event, a
// fence that is not a Lease-silence fence of a silent node (a NotReady
// opt-in, a human's), an event that started it, or one held back only by
// the silence rule (the silence then needed, eventSilence plus our view's
// staleness, outlasted suspectAfter). A power loss fenced at suspectAfter
// says why in its own Event.
func (st *stepper) eventUnusedSays() string {
	n := st.node()
	ev := n.OffEvent
	if st.p.EventSilence <= 0 || ev.Received.IsZero() || ev.Received.Before(n.HeartbeatAt.Add(-st.p.SuspectAfter)) ||
		st.s.NotReadyFence || st.s.Manual || st.s.Attested || SilentFor(n, st.now) < st.p.SuspectAfter {
		return ""
	}
	if why := st.offEventRulesWhy(); why != "" {
		return "; the BMC's power-off event did not count: " + why
	}
	return ""
}

// MaxLifePlacement bounds how long before we took a sign of life in a
// power-off event may have been received and still be ordered after it
// (lifeFor). A Lease list brings a renewal in up to a list period plus the
// time of two lists after the kubelet wrote it: a second and a half at
// 1000 nodes at rest, over 5 s when the API server is loaded (1000 nodes ×
// 30 pods, a power loss of 100). A power-off event received in that window
// may have come before the renewal or after it. Placing the renewal at the
// window's start reads the event as after it. That is wrong only if the
// machine powered off, was powered on, booted and its kubelet renewed
// between the event and our taking the renewal in: a server's firmware
// alone takes longer than this bound (and the simulation's machines take
// at least 6 s). An event received longer before the taking in is not
// ordered after the renewal: the renewal stays where we took it in.
const MaxLifePlacement = 5 * time.Second

// lifeFor is when the node's last sign of life is taken to have been
// written, for ordering the power-off event ev after it: HeartbeatFrom when
// it is known and either the window from it to HeartbeatAt is at most
// MaxLifePlacement (any event in it was received that close to the taking
// in) or ev was received at most MaxLifePlacement before HeartbeatAt;
// else HeartbeatAt (the safe reading: a renewal we cannot place before the
// event may have come after it). An event received after HeartbeatAt is
// after the renewal either way; the window's bound alone decides there
// whether the stream must have been connected before HeartbeatFrom or
// before HeartbeatAt, as it did before wide windows were placed.
func lifeFor(n *NodeView, ev PowerEvent) time.Time {
	f := n.HeartbeatFrom
	switch {
	case f.IsZero() || f.After(n.HeartbeatAt):
		return n.HeartbeatAt
	case n.HeartbeatAt.Sub(f) <= MaxLifePlacement || unitmutant.On(unitmutant.LifePlacementBound):
		return f
	case !ev.Received.After(n.HeartbeatAt) && n.HeartbeatAt.Sub(ev.Received) <= MaxLifePlacement:
		return f
	}
	return n.HeartbeatAt
}

// eventSilenceNeeded is the silence an event's early start needs: one full
// renewal interval with margin (Policy.EventSilence) plus how stale our view
// of the API server is (a view that lags hides renewals). ok is false when
// the staleness is not known (no fleet view in this step, or never fresh).
func (st *stepper) eventSilenceNeeded(fleet bool) (need time.Duration, ok bool) {
	if !Enabled(CheckEventSilence) {
		return 0, true // the mutant: any silence will do
	}
	if !fleet {
		return st.p.EventSilence, true
	}
	f := st.in.Fleet.APIFreshAt
	if r := st.in.Node.LeaseReadAt; r.After(f) {
		// A live read of this node's own Lease that started at r found
		// our renewal still the latest: fresh at r for this node.
		f = r
	}
	if f.IsZero() {
		return 0, false
	}
	return st.p.EventSilence + max(st.now.Sub(f), 0), true
}

// offEventEntry starts a healthy node's fence early on a power-off event,
// before SuspectAfter: it enters Suspect, which reads the BMC. It reports
// whether it did. The node must be fenceable and its fence startable as on
// silence (not excluded, a BMC entry, detection builtin or a remediation
// CR).
func (st *stepper) offEventEntry() bool {
	n := st.node()
	if n.Excluded || !n.HasBMC || (!st.p.Detection.startsOnSilence() && !n.Remediation) {
		return false
	}
	if st.offEventWhy(false) != "" {
		return false
	}
	st.enterSuspect(fmt.Sprintf("power-off event after the Lease was silent for %s", SilentFor(n, st.now).Round(time.Second)))
	life := lifeSays(&n, n.OffEvent, lifeFor(&n, n.OffEvent))
	st.event(false, "FencePowerEvent", "the BMC pushed a power-off event for system %s at %s, after the node's last sign of life (%s); reading its power now (the taint still waits for %s of Lease silence)",
		n.OffEvent.System, stamp(n.OffEvent.Received), life, st.p.SuspectAfter)
	// Unsaved as a suspicion on silence alone (step.go, "Unsaved
	// suspicions"): the read decides nothing, and the ForceOff an Off
	// reading licenses is written before it goes out. One write fewer
	// before the ForceOff: at 1000 nodes, while 100 power losses were
	// fenced, a state write took 2.4 s to 5.2 s.
	st.s.Unsaved = st.prev == Healthy && !st.unsaved && !st.s.Manual && !n.Remediation
	st.suspectedAt = st.now
	return true
}

// offEventLicence: a ForceOff before SuspectAfter is licensed by a power-off
// event only to a machine that reads exactly Off after the failure began (a
// power loss: what a partition cannot fake), with every rule of
// offEventWhy holding on the real fleet view. The storm guard still decides
// (admitPowerOff's power-loss admission).
func (st *stepper) offEventLicence(rd Reading) bool {
	return st.exactOff(rd) && st.offEventWhy(true) == ""
}

// eventReadAfter is when to read again after an early ForceOff was refused:
// when the event's silence is reached, if that is sooner than d, but not
// sooner than a second (a frozen view keeps that moment ahead: no read
// loop).
func (st *stepper) eventReadAfter(d time.Duration) time.Duration {
	if st.eventWait <= 0 {
		return d
	}
	return min(max(st.eventWait, time.Second), d)
}

// A live Lease read (docs/safety.md, "Power events: a live Lease read").
// Our view is proven fresh by the lists of the Leases (APIFreshAt, every
// second at 1000 nodes; it was other nodes' Lease events, which come in bunches, while the
// Leases were watched): the proof ages by seconds, and the early ForceOff
// waits for eventSilence plus that age. A read of the node's own Lease from the
// API server (a quorum read) that started at t and found the renewal our
// view holds proves the node did not renew between that renewal and t: for
// this node the view was fresh at t (NodeView.LeaseReadAt), and the rule
// becomes "silent eventSilence at t". The engine asks for it
// (LeaseReadWanted) and wakes when it could license; the runner reads and
// stamps.

// leaseReadWait is when a live Lease read could next prove the event's
// silence: once the Lease has been silent eventSilence, and no sooner than
// a second after a read that did not (the runner reads at most once a
// second per node).
func leaseReadWait(p Policy, silent time.Duration) time.Duration {
	return max(p.EventSilence-silent, time.Second)
}

// LeaseReadWanted says whether a live read of node n's Lease could now
// start its fence early: n has a power-off event that passes every rule of
// the early start but our view's staleness (its system, liveness, no
// planned reboot), it is silent at least eventSilence and less than
// suspectAfter (after which the event adds nothing), it is healthy or
// suspect (before its ForceOff), and no read proves the silence yet. The
// runner asks it before a step, with the view the step will get, and
// reads at most once a second per node; the engine decides on the stamp
// (NodeView.LeaseReadAt).
func LeaseReadWanted(p Policy, s State, n NodeView, now time.Time) bool {
	if s.Phase != Healthy && s.Phase != Suspect {
		return false
	}
	if n.Excluded || !n.HasBMC || n.HeartbeatAt.IsZero() {
		return false
	}
	silent := SilentFor(n, now)
	if p.EventSilence <= 0 || silent < p.EventSilence || silent >= p.SuspectAfter {
		return false
	}
	if !n.LeaseReadAt.IsZero() && n.LeaseReadAt.Sub(n.HeartbeatAt) >= p.EventSilence {
		return false
	}
	st := stepper{p: p, s: s, in: Input{Node: n}, now: now}
	return st.offEventWhy(false) == ""
}
