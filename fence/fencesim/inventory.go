package fencesim

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// Controller implements runner.Inventory: the node's entry, as the real
// inventory resolves it. Two entries addressing the same BMC are both
// refused, as internal/config.DuplicateTargets makes the inventory do.
func (c Cluster) Controller(node string) (runner.PowerController, bool) {
	w := c.W
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.byName[node]
	if n == nil || !n.HasBMC {
		return nil, false
	}
	e := w.entries[node]
	if e == nil || w.targets[e.Target] > 1 {
		return nil, false
	}
	// The same entry for the same Node object gives the same controller:
	// the runner asks for it at every Step.
	if t := w.ctl[node]; t != nil && t.n == n && t.from == e {
		if t.lv != nil {
			return leveled{t}, true
		}
		return t, true
	}
	t := &target{w: w, n: n, e: *e, from: e}
	w.ctl[node] = t
	if len(e.Outlets) > 0 {
		t.lv = &level{w: w, n: n, outlets: e.Outlets, allow: e.AllowUnverifiedOutlet}
		return leveled{t}, true
	}
	return t, true
}

var (
	_ runner.PowerController = (*target)(nil)
	_ runner.PolicySource    = (*target)(nil)
)

// target is one node's inventory entry as the agents use it. It models the
// BMC's vendor quirks the machine model does not (a cache), and checks
// every power-off against the world's truth before it reaches the machine.
type target struct {
	w    *World
	n    *Node
	e    Entry
	from *Entry
	// lv is the entry's fencing level 2 (pdu.go), if it has one.
	lv *level
}

// Key names the BMC target: the machine the entry addresses.
func (t *target) Key() string { return "redfish://bmc-" + t.e.Target.Name }

// Policy gives the entry's settle window, if it overrides the policy's.
func (t *target) Policy(p fence.Policy) fence.Policy {
	if t.e.SettleWindow > 0 {
		p.SettleWindow = t.e.SettleWindow
	}
	return p
}

// PowerStatus reads the target's BMC. A caching BMC answers from its cache
// while it is fresh (or frozen). Every Off answer is remembered for the
// oracle's power-off licence.
func (t *target) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	m := t.e.Target
	st, err := m.BMC.PowerStatus(ctx)
	if err != nil {
		return st, err
	}
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if m.CacheFor > 0 {
		if m.cached && (now.Before(m.freezeUntil) || now.Sub(m.cacheAt) < m.CacheFor) {
			if m.cache.State != st.State {
				w.quirk(faultCaching + "/stale answer")
			}
			res := st.Result
			st = m.cache
			st.Result = res
		} else {
			m.cache, m.cacheAt, m.cached = st, now, true
		}
	}
	if m.liesOff && st.State != bmc.PowerOff {
		st.State, st.Raw, st.BootProgress = bmc.PowerOff, "Off", ""
		w.quirk(faultLiesOff + "/Off answered while the machine runs")
	}
	if st.State == bmc.PowerOff {
		t.n.lastOffAnswer = now
		if running(t.n.Host) {
			w.quirk(faultOffForRunning)
		}
	}
	return st, nil
}

// PowerOff sends ForceOff to the target, judged first (oracle.go). A BMC
// that drops ForceOffs answers success to one sent to its running machine
// and does nothing (the call costs its latency all the same).
func (t *target) PowerOff(ctx context.Context) (bmc.Result, error) {
	w := t.w
	m := t.e.Target
	w.mu.Lock()
	verdict := w.judgePowerOff(t.n, m)
	w.record(t.n.Name, "power-off", "", m.Name)
	drop := m.dropForceOffs > 0 && running(m)
	if drop {
		m.dropForceOffs--
	}
	w.mu.Unlock()
	if drop {
		if _, err := m.BMC.Identity(ctx); err != nil {
			w.mu.Lock()
			m.dropForceOffs++ // it never got there
			w.mu.Unlock()
			return bmc.Result{}, err
		}
		w.mu.Lock()
		verdict.commit(w)
		now := w.now()
		m.dropped = append(m.dropped, now)
		w.quirk(faultDropped + "/ForceOff accepted and dropped")
		if m.liesOffOnDrop {
			m.liesOff = true
		}
		if m.onDrop != nil {
			m.onDrop(len(m.dropped), now)
		}
		w.mu.Unlock()
		return bmc.Result{Provider: "fake", Attempts: 1}, nil
	}
	res, err := m.BMC.PowerOff(ctx)
	if err == nil || errors.Is(err, bmc.ErrAlreadyInState) || errors.Is(err, bmc.ErrBMC) {
		// It reached the BMC (whatever the BMC then did).
		w.mu.Lock()
		verdict.commit(w)
		if errors.Is(err, bmc.ErrAlreadyInState) {
			w.quirk(faultRestart + "/already-off answer")
		}
		w.mu.Unlock()
	}
	return res, err
}

// PowerOn sends On to the target.
func (t *target) PowerOn(ctx context.Context) (bmc.Result, error) {
	t.w.mu.Lock()
	t.w.record(t.n.Name, "power-on", "", t.e.Target.Name)
	t.w.mu.Unlock()
	return t.e.Target.BMC.PowerOn(ctx)
}

var _ runner.EvidenceReader = (*target)(nil)

// ReadEvidence reads the hung-node evidence of the entry's machine's BMC
// (the node's own, or whatever machine a wrong entry addresses).
func (t *target) ReadEvidence(ctx context.Context) (bmc.EvidenceReport, error) {
	return t.e.Target.BMC.ReadEvidence(ctx)
}

var (
	errUnverified = errors.New("identity cannot be checked")
	errIdentity   = errors.New("identity mismatch")
)

// Verify checks the target's identity like internal/inventory does: its
// reported system UUID against the entry's expectedUUID or the Node's
// systemUUID; nothing to compare fails unless the entry vouches for itself
// (allowUnverifiedIdentity).
func (t *target) Verify(ctx context.Context) error {
	w := t.w
	w.mu.Lock()
	cur := w.byName[t.n.Name]
	want := t.e.ExpectedUUID
	if want == "" && cur != nil {
		want = cur.SystemUUID
	}
	w.mu.Unlock()
	if cur == nil {
		return fmt.Errorf("%w: node %s not found", errUnverified, t.n.Name)
	}
	if want == "" {
		if t.e.AllowUnverified {
			return nil
		}
		return fmt.Errorf("%w: the Node reports no systemUUID and the entry has no expectedUUID", errUnverified)
	}
	// The BMC call costs its latency and may fail; what it reports is the
	// machine's UUID now (a board swap changes it).
	if _, err := t.e.Target.BMC.Identity(ctx); err != nil {
		return err
	}
	w.mu.Lock()
	got := strings.TrimSpace(t.e.Target.UUID)
	if t.e.Target.NoUUID {
		got = ""
	}
	w.mu.Unlock()
	switch {
	case got == "" && t.e.AllowUnverified:
		return nil
	case got == "":
		return fmt.Errorf("%w: the BMC reports no system UUID", errUnverified)
	case !strings.EqualFold(got, want):
		w.mu.Lock()
		w.quirk(faultWrongEntry + "/caught by identity")
		w.mu.Unlock()
		return fmt.Errorf("%w: the BMC's system UUID is %q, the node's %q", errIdentity, got, want)
	}
	return nil
}
