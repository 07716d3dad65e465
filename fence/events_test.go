package fence

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// offEvent: the node's BMC pushed a live power-off event for its system at
// d, on a stream connected long before.
func offEvent(d time.Duration) nodeOpt {
	return func(n *NodeView) {
		n.BMCSystem = "/redfish/v1/Systems/1"
		n.OffEvent = PowerEvent{System: "/redfish/v1/Systems/1", Received: at(d), ConnectedAt: at(-time.Minute)}
	}
}

// stepChecked steps and checks the invariants of docs/design.md §2.
func stepChecked(t *testing.T, p Policy, s State, in Input, now time.Time) Output {
	t.Helper()
	out := Step(p, s, in, now)
	if err := checkInvariants(p, s, in, now, out); err != nil {
		t.Fatalf("at +%s: %v", now.Sub(t0), err)
	}
	return out
}

func TestPowerOffEventStartsTheFenceAfterOneRenewalInterval(t *testing.T) {
	p := DefaultPolicy()
	n := view(heartbeat(0), notReady(0), offEvent(sec(3)))
	s := State{}

	// At the event, the Lease has been silent 3 s: not yet a missed
	// renewal. The engine wakes when it will be.
	out := stepChecked(t, p, s, tick(n, at(sec(3))), at(sec(3)))
	if out.State.Phase != Healthy || has(out, ActReadPower) {
		t.Fatalf("at +3s: phase %v actions %v, want Healthy and nothing", out.State.Phase, kinds(out))
	}
	if want := p.EventSilence - sec(3); out.RecheckAfter > want+sec(1.01) {
		t.Fatalf("at +3s: recheck after %s, want at most about %s (eventSilence plus staleness)", out.RecheckAfter, want)
	}

	// One renewal interval with margin later: Suspect, and a read. The
	// suspicion is not written yet (a read decides nothing): its event
	// is held, said with the write the reading brings.
	now := at(sec(13.5))
	out = stepChecked(t, p, out.State, tick(n, now), now)
	if out.State.Phase != Suspect || !has(out, ActReadPower) || has(out, ActPersist) || !out.State.Unsaved || out.State.HeldEvent.Reason != "FencePowerEvent" {
		t.Fatalf("at +13.5s: phase %v actions %v unsaved %v held %q, want an unsaved Suspect, ReadPower, FencePowerEvent held",
			out.State.Phase, kinds(out), out.State.Unsaved, out.State.HeldEvent.Reason)
	}

	// The BMC reads Off: our own ForceOff, now, not at suspectAfter,
	// written first, with the suspicion and its event said before it.
	now = at(sec(14))
	out = stepChecked(t, p, out.State, reading(n, now, PowerOff), now)
	if out.State.Phase != PoweringOff || !has(out, ActPowerOff) || out.Actions[0].Kind != ActPersist {
		t.Fatalf("at +14s: phase %v actions %v, want PoweringOff written, then a ForceOff", out.State.Phase, kinds(out))
	}
	if got, want := eventReasons(out), []string{"FenceSuspect", "FencePowerEvent", "FencePowerOff"}; !slices.Equal(got, want) {
		t.Fatalf("at +14s: events %v, want %v", got, want)
	}
	now = at(sec(14.2))
	out = stepChecked(t, p, out.State, result(n, now, ActPowerOff, ""), now)

	// It settles during the silence; the taint waits for suspectAfter.
	tainted := time.Time{}
	for d := sec(15); d <= sec(30); d += sec(1) {
		now = at(d)
		out = stepChecked(t, p, out.State, reading(n, now, PowerOff), now)
		if has(out, ActApplyTaint) {
			tainted = now
			break
		}
	}
	if tainted.IsZero() {
		t.Fatalf("never tainted; phase %v", out.State.Phase)
	}
	if got := tainted.Sub(t0); got < p.SuspectAfter {
		t.Fatalf("tainted after %s of silence, before suspectAfter %s", got, p.SuspectAfter)
	}
	if got := tainted.Sub(t0); got > p.SuspectAfter+sec(1) {
		t.Fatalf("tainted after %s of silence, want suspectAfter %s (the settle overlapped the silence)", got, p.SuspectAfter)
	}
}

func TestPowerOffEventDoesNotStartAFenceEarlyUnlessEveryRuleHolds(t *testing.T) {
	now := at(sec(14))
	cases := []struct {
		name string
		p    func(*Policy)
		opt  nodeOpt
		s    func(*State)
	}{
		{name: "another system of the BMC", opt: func(n *NodeView) { n.OffEvent.System = "/redfish/v1/Systems/2" }},
		{name: "an event naming no system", opt: func(n *NodeView) { n.OffEvent.System = "" }},
		{name: "the node's system unknown", opt: func(n *NodeView) { n.BMCSystem = "" }},
		{name: "a replay", opt: func(n *NodeView) { n.OffEvent.Replay = true }},
		{name: "after a gap", opt: func(n *NodeView) { n.OffEvent.AfterGap = true }},
		{name: "a stream connected after the last renewal", opt: func(n *NodeView) { n.OffEvent.ConnectedAt = at(sec(1)) }},
		{name: "a stream with no connection time", opt: func(n *NodeView) { n.OffEvent.ConnectedAt = time.Time{} }},
		{name: "an event before the last renewal", opt: func(n *NodeView) { n.OffEvent.Received = at(-sec(1)) }},
		{name: "silent less than a renewal interval", opt: heartbeat(sec(2.5))},
		{name: "events off", p: func(p *Policy) { p.EventSilence = 0 }},
		{name: "excluded", opt: excluded()},
		{name: "no BMC entry", opt: noBMC()},
		{name: "detection external without a remediation CR", p: func(p *Policy) { p.Detection = DetectExternal }},
		{name: "a planned reboot under way", opt: func(n *NodeView) {
			n.PlannedReboot, n.PlannedRebootAt, n.PlannedRebootBy = true, at(-sec(30)), "the kubelet's graceful node shutdown"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := DefaultPolicy()
			if c.p != nil {
				c.p(&p)
			}
			n := view(heartbeat(0), notReady(0), offEvent(sec(3)))
			if c.opt != nil {
				c.opt(&n)
			}
			out := stepChecked(t, p, State{}, tick(n, now), now)
			if out.State.Phase != Healthy || has(out, ActReadPower) {
				t.Fatalf("phase %v actions %v, want Healthy and nothing", out.State.Phase, kinds(out))
			}
		})
	}
}

// A renewal brought in by a Lease list was written after the start of the
// list before it (HeartbeatFrom): a power-off event received in between is
// ordered after it, if it was received at most MaxLifePlacement before we
// took the renewal in (always so in a window that short). The stream must
// have been connected before the window; an event received longer before
// the taking in (a slow list, a stalled view) finds the renewal where we
// took it in.
func TestPowerOffEventOrderedByTheRenewalsLifePlacement(t *testing.T) {
	p := DefaultPolicy()
	now := at(sec(14)) // 13 s after the renewal was taken in at +1 s
	const unplaced = time.Duration(-1 << 62)
	for _, c := range []struct {
		name  string
		from  time.Duration // HeartbeatFrom; the renewal is taken in at +1 s
		event time.Duration // received
		conn  time.Duration // stream connected
		early bool
	}{
		{"an event inside the list window", 0, sec(0.5), -time.Minute, true},
		{"an event before the window", 0, -sec(0.5), -time.Minute, false},
		{"a stream connected inside the window", 0, sec(0.5), sec(0.2), false},
		{"a window of exactly MaxLifePlacement", sec(1) - MaxLifePlacement, sec(0.5), -time.Minute, true},
		// A wide window (a slow list): the renewal may have been written
		// after an event early in it, but not after one received within
		// MaxLifePlacement of its taking in (1000 × 30, a list of 5 s).
		{"a wide window, the event within MaxLifePlacement of the taking in", sec(-9), sec(0.5), -time.Minute, true},
		{"a wide window, the event exactly MaxLifePlacement before the taking in", sec(-9), sec(1) - MaxLifePlacement, -time.Minute, true},
		{"a wide window, the event longer before the taking in", sec(-9), sec(1) - MaxLifePlacement - time.Millisecond, -time.Minute, false},
		{"a wide window, a stream connected inside it", sec(-9), sec(0.5), sec(-8), false},
		// After the taking in, the event is after the renewal however it
		// is placed: the stream need only have connected before the taking
		// in, as before wide windows were placed.
		{"a wide window, an event after the taking in, a stream connected inside the window", sec(-9), sec(3), sec(-5), true},
		{"no placement known", unplaced, sec(0.5), -time.Minute, false},
		{"a placement after the renewal was taken in", sec(2), sec(0.5), -time.Minute, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := view(heartbeat(sec(1)), notReady(0), offEvent(c.event))
			n.OffEvent.ConnectedAt = at(c.conn)
			if c.from != unplaced {
				n.HeartbeatFrom = at(c.from)
			}
			out := stepChecked(t, p, State{}, tick(n, now), now)
			if got := out.State.Phase == Suspect && has(out, ActReadPower); got != c.early {
				t.Fatalf("phase %v actions %v; want an early start: %v", out.State.Phase, kinds(out), c.early)
			}
			for _, a := range out.Actions {
				// An event before the taking in counts only by the
				// placement, which its Event names.
				if a.Kind == ActEvent && a.Event.Reason == "FencePowerEvent" && c.event <= sec(1) && !strings.Contains(a.Event.Message, "written after") {
					t.Errorf("the Event does not say where the renewal was placed: %s", a.Event.Message)
				}
			}
		})
	}
}

// A suspect entered on an event sends no ForceOff before suspectAfter when
// a rule fails on the fleet view its reading steps with, or the machine
// does not read Off.
func TestPowerOffEventLicensesOnlyAnOffReadingOnAFreshView(t *testing.T) {
	p := DefaultPolicy()
	n := view(heartbeat(0), notReady(0), offEvent(sec(3)))
	now := at(sec(13))
	out := stepChecked(t, p, State{}, tick(n, now), now)
	if out.State.Phase != Suspect {
		t.Fatalf("phase %v, want Suspect", out.State.Phase)
	}
	suspect := out.State
	now = at(sec(13.5))

	on := stepChecked(t, p, suspect, reading(n, now, PowerOn), now)
	if has(on, ActPowerOff) {
		t.Fatalf("ForceOff to a machine reading On on an event: %v", kinds(on))
	}

	stale := reading(n, now, PowerOff)
	stale.Fleet.APIFreshAt = at(sec(5)) // 8.5 s stale: 12 s + 8.5 s of silence needed
	if out := stepChecked(t, p, suspect, stale, now); has(out, ActPowerOff) {
		t.Fatalf("ForceOff on an event with a view 8.5 s stale after 13.5 s of silence: %v", kinds(out))
	}

	renewed := n
	renewed.HeartbeatAt, renewed.RenewedAt = at(sec(13.2)), at(sec(13.2))
	if out := stepChecked(t, p, suspect, reading(renewed, now, PowerOff), now); has(out, ActPowerOff) || out.State.Phase != Healthy {
		t.Fatalf("a renewal after the event: phase %v actions %v, want Healthy and no ForceOff", out.State.Phase, kinds(out))
	}

	storm := reading(n, now, PowerOff)
	storm.Fleet.InFlightPowerLoss = p.MaxConcurrentPowerLossFences
	if out := stepChecked(t, p, suspect, storm, now); has(out, ActPowerOff) {
		t.Fatalf("ForceOff on an event past maxConcurrentPowerLossFences: %v", kinds(out))
	}

	if out := stepChecked(t, p, suspect, reading(n, now, PowerOff), now); !has(out, ActPowerOff) {
		t.Fatalf("no ForceOff on a fresh view, an Off reading and a live event: %v %v", out.State.Phase, kinds(out))
	}
}

// A NotReady opt-in fence never takes the event path; the event adds
// nothing to what its own rule allows.
func TestPowerOffEventNeverLicensesANotReadyFence(t *testing.T) {
	p := DefaultPolicy()
	p.PowerOffNotReadyAfter = time.Minute
	s := State{Phase: Suspect, NotReadyFence: true, FailureStart: at(0)}
	n := view(heartbeat(0), readyFalse(-sec(120)), offEvent(sec(3)))
	now := at(sec(14))
	st := stepper{p: p, s: s, in: reading(n, now, PowerOff), now: now}
	if why := st.offEventWhy(true); why == "" {
		t.Fatal("a NotReady fence licensed by an event")
	}
}

// The read that finds the machine Off a moment before the event's silence
// (with the view's staleness) is reached is repeated when it is, not a
// whole read interval later (make failures measured 5 s lost there).
func TestAnEventStartedFenceReadsAgainWhenItsSilenceIsReached(t *testing.T) {
	p := DefaultPolicy()
	n := view(heartbeat(0), notReady(0), offEvent(sec(1)))
	now := at(sec(12))
	out := stepChecked(t, p, State{}, tick(n, now), now)
	if out.State.Phase != Suspect {
		t.Fatalf("phase %v, want Suspect", out.State.Phase)
	}
	now = at(sec(12.1))
	in := reading(n, now, PowerOff)
	in.Fleet.APIFreshAt = now.Add(-sec(1)) // 13.1 s of silence needed
	out = stepChecked(t, p, out.State, in, now)
	if has(out, ActPowerOff) {
		t.Fatalf("ForceOff before the silence plus staleness: %v", kinds(out))
	}
	if next := out.State.NextReadAt; next.After(at(sec(13.2))) {
		t.Fatalf("next read at +%s, want by +13.2s (when the silence is reached)", next.Sub(t0))
	}
}

// Found at 1000 × 30 (issue 19): ten of a hundred power losses were fenced
// only on silence, and nothing said that their BMCs' power-off events had
// come, nor why they did not count. The suspicion's Event says it now.
func TestTheSuspicionSaysWhyAPowerOffEventDidNotCount(t *testing.T) {
	d := newDriver(t)
	// A renewal taken in at 0 by a list of a window of 9 s; the event
	// came 6 s before that taking in: not placed after the renewal.
	n := view(heartbeat(0), offEvent(-sec(6)))
	n.HeartbeatFrom = at(-sec(9))
	d.suspect(n)
	out := d.step(reading(n, at(sec(30)), PowerOff), at(sec(30)))
	var msg string
	for _, a := range out.Actions {
		if a.Kind == ActEvent && a.Event.Reason == "FenceSuspect" {
			msg = a.Event.Message
		}
	}
	for _, want := range []string{"power-off event did not count", "received at " + stamp(at(-sec(6))), "taken in at " + stamp(at(0)), "too long before to place"} {
		if !strings.Contains(msg, want) {
			t.Errorf("FenceSuspect %q does not say %q", msg, want)
		}
	}

	// An event that started the fence is not said to have failed (found
	// in review: at +20 s this checked a silence fence's unsaved step,
	// which says nothing).
	n = view(heartbeat(0), offEvent(sec(3)))
	out = stepChecked(t, DefaultPolicy(), State{}, tick(n, at(sec(13))), at(sec(13)))
	out = stepChecked(t, DefaultPolicy(), out.State, reading(n, at(sec(13.5)), PowerOff), at(sec(13.5)))
	reasons := eventReasons(out)
	if !slices.Contains(reasons, "FenceSuspect") || !slices.Contains(reasons, "FencePowerEvent") {
		t.Fatalf("an event start at +13 s: events %v, want FenceSuspect and FencePowerEvent", reasons)
	}
	for _, a := range out.Actions {
		if a.Kind == ActEvent && strings.Contains(a.Event.Message, "did not count") {
			t.Errorf("%s: %q", a.Event.Reason, a.Event.Message)
		}
	}

	// A NotReady opt-in fence of a node that renews is no Lease-silence
	// fence: its suspicion says nothing of the event (found in review: it
	// said the event came before the last renewal).
	p := DefaultPolicy()
	p.PowerOffNotReadyAfter = time.Minute
	n = view(heartbeat(sec(119)), readyFalse(-sec(1)), offEvent(sec(110)))
	out = stepChecked(t, p, State{}, tick(n, at(sec(120))), at(sec(120)))
	if out.State.Phase != Suspect || !out.State.NotReadyFence {
		t.Fatalf("phase %v, NotReady fence %v; want a NotReady fence's Suspect", out.State.Phase, out.State.NotReadyFence)
	}
	for _, a := range out.Actions {
		if a.Kind == ActEvent && strings.Contains(a.Event.Message, "did not count") {
			t.Errorf("a NotReady fence's %s: %q", a.Event.Reason, a.Event.Message)
		}
	}
}

// Found in review: an event received after a renewal taken in by a wide
// list window counts, and its Event said the renewal was "too long before
// to place", as if it had not.
func TestACountedEventDoesNotSayItsRenewalWasNotPlaced(t *testing.T) {
	n := view(heartbeat(sec(1)), notReady(0), offEvent(sec(3)))
	n.HeartbeatFrom = at(-sec(9))
	now := at(sec(14))
	out := stepChecked(t, DefaultPolicy(), State{}, tick(n, now), now)
	if out.State.HeldEvent.Reason != "FencePowerEvent" {
		t.Fatalf("no FencePowerEvent held: %+v", out.State.HeldEvent)
	}
	msg := out.State.HeldEvent.Message
	if strings.Contains(msg, "too long before to place") || !strings.Contains(msg, "taken in at "+stamp(at(sec(1)))) {
		t.Errorf("FencePowerEvent %q", msg)
	}
}

// Issue 19 at 1000 × 30: an event-started suspicion was written before its
// read, and that write (2.4 s to 5.2 s while 100 power losses were fenced)
// sat in series before the ForceOff's own. It is unsaved now, as one on
// silence alone; its event is said when the suspicion is written (a read On
// until it lasted suspectAfter) or ends (the node renewed: the event is
// said, a lie worth knowing, and the Healthy state written).
func TestAnEventStartedSuspicionHoldsItsEventUntilItIsWrittenOrEnds(t *testing.T) {
	p := DefaultPolicy()
	n := view(heartbeat(0), notReady(0), offEvent(sec(3)))
	start := func() State {
		t.Helper()
		out := stepChecked(t, p, State{}, tick(n, at(sec(13.5))), at(sec(13.5)))
		if has(out, ActPersist) || !out.State.Unsaved || out.State.HeldEvent.Reason != "FencePowerEvent" || len(eventReasons(out)) != 0 {
			t.Fatalf("event start: actions %v events %v unsaved %v held %q", kinds(out), eventReasons(out), out.State.Unsaved, out.State.HeldEvent.Reason)
		}
		return out.State
	}

	// Read On: nothing written, nothing said, the event still held; at
	// suspectAfter after the start, written and said with its event.
	out := stepChecked(t, p, start(), reading(n, at(sec(14)), PowerOn), at(sec(14)))
	if has(out, ActPersist) || len(eventReasons(out)) != 0 || out.State.HeldEvent.Reason != "FencePowerEvent" {
		t.Fatalf("read On: actions %v events %v held %q; want nothing, the event held", kinds(out), eventReasons(out), out.State.HeldEvent.Reason)
	}
	now := at(sec(13.5) + p.SuspectAfter)
	out = stepChecked(t, p, out.State, tick(n, now), now)
	if !has(out, ActPersist) || out.State.Unsaved || out.State.HeldEvent.Reason != "" {
		t.Fatalf("at suspectAfter: actions %v unsaved %v held %q; want written, nothing held", kinds(out), out.State.Unsaved, out.State.HeldEvent.Reason)
	}
	if got := eventReasons(out); len(got) < 2 || got[0] != "FenceSuspect" || got[1] != "FencePowerEvent" {
		t.Fatalf("at suspectAfter: events %v, want FenceSuspect, FencePowerEvent first", got)
	}
	// Said once: the steps after the write do not say it again.
	for i, in := range []Input{reading(n, now.Add(sec(1)), PowerOn), tick(n, now.Add(sec(5)))} {
		out = stepChecked(t, p, out.State, in, now.Add(sec(1+4*float64(i))))
		if slices.Contains(eventReasons(out), "FencePowerEvent") {
			t.Fatalf("after the write: events %v, the power-off event said again", eventReasons(out))
		}
	}

	// An Off reading: the ForceOff's write says the suspicion, then its
	// event, then the ForceOff.
	out = stepChecked(t, p, start(), reading(n, at(sec(14)), PowerOff), at(sec(14)))
	if got, want := eventReasons(out), []string{"FenceSuspect", "FencePowerEvent", "FencePowerOff"}; !slices.Equal(got, want) || out.Actions[0].Kind != ActPersist {
		t.Fatalf("read Off: actions %v events %v, want written first, events %v", kinds(out), got, want)
	}

	// Maintenance begins: the event is said before the step's own words
	// (found in review: it was lost).
	maint := view(heartbeat(0), notReady(0), offEvent(sec(3)), maintenance())
	out = stepChecked(t, p, start(), tick(maint, at(sec(14))), at(sec(14)))
	if got := eventReasons(out); out.State.Phase != Maintenance || !has(out, ActPersist) || len(got) < 2 || got[0] != "FencePowerEvent" || !slices.Contains(got, "FenceMaintenance") {
		t.Fatalf("maintenance: phase %v actions %v events %v; want Maintenance written, FencePowerEvent then FenceMaintenance", out.State.Phase, kinds(out), got)
	}

	// The node renews: back to Healthy, the event said, the state written.
	renewed := view(heartbeat(sec(14)), offEvent(sec(3)))
	out = stepChecked(t, p, start(), tick(renewed, at(sec(14.5))), at(sec(14.5)))
	if got, want := eventReasons(out), []string{"FenceSuspect", "FencePowerEvent", "FenceRecovered"}; out.State.Phase != Healthy || !has(out, ActPersist) || out.State.HeldEvent.Reason != "" || !slices.Equal(got, want) {
		t.Fatalf("renewed: phase %v actions %v events %v held %q; want Healthy, written, events %v (a suspicion and its recovery in pairs)",
			out.State.Phase, kinds(out), got, out.State.HeldEvent.Reason, want)
	}

	// Excluded while suspected: back to Healthy, and nothing says the
	// node renewed (found in review).
	ex := view(heartbeat(0), notReady(0), offEvent(sec(3)), excluded())
	out = stepChecked(t, p, start(), tick(ex, at(sec(14.5))), at(sec(14.5)))
	if !slices.Contains(eventReasons(out), "FencePowerEvent") {
		t.Fatalf("excluded: events %v, want the held event said", eventReasons(out))
	}
	for _, a := range out.Actions {
		if a.Kind == ActEvent && strings.Contains(a.Event.Message, "renewed") {
			t.Errorf("excluded, not renewed: %s %q", a.Event.Reason, a.Event.Message)
		}
	}
}
