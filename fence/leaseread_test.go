package fence

import "testing"

// The failures harness measured it: other nodes' Lease events come in
// bunches, so the view's proof of freshness (APIFreshAt) ages up to ~6.5 s,
// and an event-started ForceOff waited for eventSilence plus that age
// (ForceOff at silence 19.1 s). A live read of the node's own Lease that
// started at t and found the renewal our view holds proves the view fresh
// for this node as of t: the ForceOff goes out once the Lease has been
// silent eventSilence at t.
func TestAnEventStartedForceOffNeedsNoOtherNodesRenewalsWhenALiveLeaseReadProvesTheViewFresh(t *testing.T) {
	p := DefaultPolicy()
	n := view(heartbeat(0), notReady(0), offEvent(sec(1)))
	stale := func(in Input) Input {
		in.Fleet.APIFreshAt = at(sec(6.5)) // the bunched other nodes' renewals
		return in
	}

	// Entered on the event at eventSilence; the machine reads Off.
	now := at(p.EventSilence)
	out := stepChecked(t, p, State{}, stale(tick(n, now)), now)
	if out.State.Phase != Suspect {
		t.Fatalf("at +%s: phase %v, want Suspect", p.EventSilence, out.State.Phase)
	}
	if !LeaseReadWanted(p, State{}, n, now) {
		t.Fatalf("at +%s: no live Lease read wanted for a node whose event waits only for the view's staleness", p.EventSilence)
	}

	// The runner's live read started at +12.05 s and found our renewal.
	read := n
	read.LeaseReadAt = at(p.EventSilence + sec(0.05))
	if LeaseReadWanted(p, out.State, read, at(p.EventSilence+sec(0.1))) {
		t.Fatal("a live Lease read wanted again though one already proves the silence")
	}
	now = at(p.EventSilence + sec(0.1))
	got := stepChecked(t, p, out.State, stale(reading(read, now, PowerOff)), now)
	if !has(got, ActPowerOff) {
		t.Fatalf("an event-started ForceOff waits for other nodes' renewals to prove the view fresh: at +%s phase %v actions %v, want a ForceOff by +12.x s",
			now.Sub(t0), got.State.Phase, kinds(got))
	}

	// Without the read, the view's staleness holds it back, and the
	// engine reads again when a read could prove it (a second later), not
	// when other nodes' renewals might.
	without := stepChecked(t, p, out.State, stale(reading(n, now, PowerOff)), now)
	if has(without, ActPowerOff) {
		t.Fatalf("ForceOff with a view 5.6 s stale and no live read: %v", kinds(without))
	}
	if next := without.State.NextReadAt; next.After(now.Add(sec(1.01))) {
		t.Fatalf("next read at +%s, want by +%s", next.Sub(t0), now.Add(sec(1)).Sub(t0))
	}
}

// A live read that started before the silence reached eventSilence proves
// only that much: the rule is SilentFor(read start) >= eventSilence.
func TestALiveLeaseReadCountsFromWhenItStarted(t *testing.T) {
	p := DefaultPolicy()
	n := view(heartbeat(0), notReady(0), offEvent(sec(1)))
	now := at(p.EventSilence)
	out := stepChecked(t, p, State{}, tick(n, now), now)
	read := n
	read.LeaseReadAt = at(p.EventSilence - sec(0.5)) // started before eventSilence
	now = at(p.EventSilence + sec(2))
	in := reading(read, now, PowerOff)
	in.Fleet.APIFreshAt = at(sec(6.5))
	if got := stepChecked(t, p, out.State, in, now); has(got, ActPowerOff) {
		t.Fatalf("ForceOff on a read that started at silence 11.5 s: %v", kinds(got))
	}
}

// The read is asked for only where it can license something: a pending,
// live event whose every other rule holds, a silence of at least
// eventSilence and short of suspectAfter, no proof yet.
func TestALiveLeaseReadIsWantedOnlyWhereItCanStartAFenceEarly(t *testing.T) {
	now := at(sec(13))
	cases := []struct {
		name string
		p    func(*Policy)
		opt  nodeOpt
		s    State
		want bool
	}{
		{name: "a pending event, silent eventSilence", want: true},
		{name: "suspect on the event", s: State{Phase: Suspect}, want: true},
		{name: "no event", opt: func(n *NodeView) { n.OffEvent = PowerEvent{} }},
		{name: "silent less than eventSilence", opt: heartbeat(sec(2))},
		{name: "silent suspectAfter", opt: func(n *NodeView) {
			n.HeartbeatAt, n.RenewedAt = at(-sec(20)), at(-sec(20))
			n.OffEvent.Received = at(-sec(19))
		}},
		{name: "another system's event", opt: func(n *NodeView) { n.OffEvent.System = "/redfish/v1/Systems/2" }},
		{name: "a replayed event", opt: func(n *NodeView) { n.OffEvent.Replay = true }},
		{name: "events off", p: func(p *Policy) { p.EventSilence = 0 }},
		{name: "no BMC", opt: noBMC()},
		{name: "excluded", opt: excluded()},
		{name: "a fence past Suspect", s: State{Phase: PoweringOff}},
		{name: "a proof already", opt: func(n *NodeView) { n.LeaseReadAt = at(sec(12.5)) }},
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
			if got := LeaseReadWanted(p, c.s, n, now); got != c.want {
				t.Fatalf("LeaseReadWanted = %v, want %v", got, c.want)
			}
		})
	}
}
