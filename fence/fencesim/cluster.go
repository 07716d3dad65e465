package fencesim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// Cluster adapts the World to runner.Cluster (its method set differs only
// in names that collide with the World's fields). It is one agent process's
// view: Since is when that process started observing. Before its first
// observed renewal, a node's HeartbeatAt is Since (first sighting) and its
// RenewedAt is zero, as the real observation builder reports them.
type Cluster struct {
	W     *World
	Since time.Time
	// Skew is how far the agent's clock runs ahead of the world's (behind,
	// if negative): what it observes, it stamps with its own clock.
	Skew time.Duration
	// Agent, when set, is the simulated process this view belongs to:
	// while it is paused its informers fall behind (Recheck compares the
	// server with what it last saw).
	Agent *Agent
}

var (
	_ runner.Cluster   = Cluster{}
	_ runner.Inventory = Cluster{}
)

func (w *World) info(n *Node) runner.NodeInfo {
	v := fence.NodeView{
		Ready: n.ready, NotReadySince: n.notReadySince, HeartbeatAt: n.lastObservedHB,
		Maintenance: n.Maintenance, Excluded: n.Excluded, Taint: n.taint,
		Pods: n.pods, VolumeAttachments: n.vas,
	}
	if n.terminating {
		v.Terminating = n.pods
	}
	if n.pods > 0 || n.vas > 0 {
		v.Blockers = blockers(n.pods, n.vas)
	}
	return runner.NodeInfo{Name: n.Name, Zone: n.Zone, View: v, State: n.state}
}

// blockerNames are the Blockers of the usual counts, shared (read only):
// the fleet view is built for every node at every Step.
var blockerNames = func() (b [3][2][]string) {
	for p := range b {
		for v := range b[p] {
			b[p][v] = []string{fmt.Sprintf("%d pods", p), fmt.Sprintf("%d VolumeAttachments", v)}
		}
	}
	return b
}()

func blockers(pods, vas int) []string {
	if pods < len(blockerNames) && vas < len(blockerNames[0]) {
		return blockerNames[pods][vas]
	}
	return []string{fmt.Sprintf("%d pods", pods), fmt.Sprintf("%d VolumeAttachments", vas)}
}

// observed is the node as the agents' informers have it: live, or the
// snapshot of a frozen view. An agent reads its own writes at once (the
// runner.Cluster contract), so the state annotation and the taint are the
// server's even in a frozen view.
func (w *World) observed(n *Node) (runner.NodeInfo, *pendingRequest) {
	if n.frozen == nil {
		r := n.request
		if r != nil && r.visible.IsZero() {
			r = nil
		}
		return w.info(n), r
	}
	info := *n.frozen
	info.State, info.View.Taint = n.state, n.taint
	var r *pendingRequest
	if n.request != nil && !n.request.visible.IsZero() && !n.request.visible.After(w.frozenSince) {
		r = n.request
	}
	return info, r
}

// view turns the world's observations into what this agent knows, stamped
// on its clock (the world's plus skew).
func (c Cluster) view(n *Node) runner.NodeInfo {
	w := c.W
	info, r := w.observed(n)
	since := c.Since
	if n.created.After(since) {
		since = n.created // the first sighting of a Node object created later
	}
	v := info.View
	if !v.HeartbeatAt.After(since) {
		v.HeartbeatAt, v.RenewedAt = since, time.Time{}
	} else {
		v.RenewedAt = v.HeartbeatAt
	}
	if v.Ready != fence.ReadyTrue && v.NotReadySince.Before(since) {
		v.NotReadySince = since
	}
	v.HeartbeatAt, v.RenewedAt, v.NotReadySince = shift(v.HeartbeatAt, c.Skew), shift(v.RenewedAt, c.Skew), shift(v.NotReadySince, c.Skew)
	info.View = v
	if r != nil {
		// The cluster package's observation builder: a request is first
		// seen when this process could first see it, and one written
		// more than MaxRequestAge before that is dropped (it speaks of a
		// machine that may have changed since).
		first := r.visible
		if c.Since.After(first) {
			first = c.Since
		}
		if first.Sub(r.written) <= w.Policy.MaxRequestAge {
			cmd := r.cmd
			cmd.SeenAt = shift(first, c.Skew)
			info.Command, info.CommandID = &cmd, r.id
		}
	}
	return info
}

func shift(t time.Time, d time.Duration) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(d)
}

func (c Cluster) Nodes() []runner.NodeInfo {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	out := make([]runner.NodeInfo, len(c.W.Nodes))
	for i, n := range c.W.Nodes {
		out[i] = c.view(n)
	}
	return out
}

func (c Cluster) Node(name string) (runner.NodeInfo, bool) {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	n := c.W.byName[name]
	if n == nil {
		return runner.NodeInfo{}, false
	}
	return c.view(n), true
}

func (c Cluster) APIFreshAt() time.Time {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	return shift(c.W.lastFresh, c.Skew)
}

func (c Cluster) Changed() <-chan string { return c.W.changed }

var (
	errAPI      = errors.New("simulated API server error (503)")
	errWrite    = errors.New("simulated API server refusing writes (etcd: mvcc: database space exceeded)")
	errNotFound = errors.New("simulated API server: node not found (404)")
)

func (w *World) apiFails() bool { return w.apiErrorRate > 0 && w.rng.Float64() < w.apiErrorRate }

// writeFails is the error of a write now, if it fails.
func (w *World) writeFails() error {
	if w.writesFail {
		return errWrite
	}
	if w.apiFails() {
		return errAPI
	}
	return nil
}

// token checks a fencing token against the node's state annotation.
// guarded is what every token-guarded write does first, with w.mu held: the
// write may fail (an API outage), the node must exist, and the fencing
// token must be its current state.
func (w *World) guarded(node, tok string) (*Node, error) {
	if err := w.writeFails(); err != nil {
		return nil, err
	}
	n := w.byName[node]
	if n == nil {
		return nil, errNotFound
	}
	return n, token(n, tok)
}

func token(n *Node, tok string) error {
	if tok != runner.NoToken && tok != n.state {
		return fmt.Errorf("%s: %w (fencing token)", n.Name, runner.ErrConflict)
	}
	return nil
}

func (c Cluster) SaveState(_ context.Context, node, old, new, ackID string) error {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	w := c.W
	if err := w.writeFails(); err != nil {
		return err
	}
	n := w.byName[node]
	if n == nil {
		return errNotFound
	}
	if n.state != old {
		return runner.ErrConflict
	}
	n.state = new
	n.stateWrites++
	if r := n.request; ackID != "" && r != nil && ackID == r.id {
		n.request = nil
		w.take(n, r, c.Since)
	}
	if p, ok := phaseOf(new); ok {
		w.record(node, "phase", p.String(), "")
		if w.onPhase != nil {
			w.onPhase(node, p)
		}
	}
	return nil
}

func (c Cluster) Recheck(_ context.Context, node string) (runner.Recheck, error) {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	w := c.W
	if w.apiFails() {
		return runner.Recheck{}, errAPI
	}
	n := w.byName[node]
	if n == nil {
		return runner.Recheck{}, errNotFound
	}
	seen := n.lastObservedHB
	if a := c.Agent; a != nil && a.stale != nil {
		// A process that just resumed from a pause: its informers still
		// hold what they had when it stalled.
		if t, ok := a.stale[node]; ok {
			seen = t
		}
	}
	return runner.Recheck{LeaseRenewed: n.lastBeat.After(seen), Maintenance: n.Maintenance, Excluded: n.Excluded, State: n.state}, nil
}

func (c Cluster) CurrentState(_ context.Context, node string) (string, error) {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	if c.W.apiFails() {
		return "", errAPI
	}
	n := c.W.byName[node]
	if n == nil {
		return "", errNotFound
	}
	return n.state, nil
}

// ApplyTaint checks the oracle (checkTaint) on every taint that lands.
func (c Cluster) ApplyTaint(_ context.Context, node, tok string) error {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	w := c.W
	n, err := w.guarded(node, tok)
	if err != nil {
		return err
	}
	w.checkTaint(n)
	if n.taint == fence.TaintAbsent {
		n.taint, n.taintAt = fence.TaintOurs, w.now()
	}
	w.record(node, "taint", "", "")
	w.notify(node)
	return nil
}

// ForgetTaint: the world keeps no owner marks; it never removes a taint.
func (c Cluster) ForgetTaint(_ context.Context, node, tok string) error {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	_, err := c.W.guarded(node, tok)
	return err
}

// RemoveTaint checks the oracle (checkUntaint).
func (c Cluster) RemoveTaint(_ context.Context, node, tok string) error {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	w := c.W
	n, err := w.guarded(node, tok)
	if err != nil {
		return err
	}
	if n.taint == fence.TaintAbsent {
		return nil // already gone: removal is idempotent
	}
	w.checkUntaint(n)
	if n.taint == fence.TaintOurs {
		n.taint = fence.TaintAbsent
		w.record(node, "untaint", "", "")
		w.notify(node)
	}
	return nil
}

func (c Cluster) DeleteTerminatingPods(_ context.Context, node, tok string) (int, error) {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	w := c.W
	n, err := w.guarded(node, tok)
	if err != nil {
		return 0, err
	}
	if !n.terminating {
		return 0, nil
	}
	if n.taint == fence.TaintAbsent {
		w.violate("%s: force-deleted pods of a node without the out-of-service taint", node)
	}
	k := n.pods
	n.pods, n.terminating, n.podsGoneAt = 0, false, w.now()
	return k, nil
}

func (c Cluster) Event(node string, ev fence.Event) {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	c.W.record(node, "event", ev.Reason, ev.Message)
}

// phaseOf reads the phase from a state annotation the way a human reading
// it would, without decoding the rest (the world reads every write).
func phaseOf(raw string) (fence.Phase, bool) {
	const key = `"ph":"`
	i := strings.Index(raw, key)
	if i < 0 {
		return 0, false
	}
	rest := raw[i+len(key):]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return 0, false
	}
	p, err := fence.ParsePhase(rest[:j])
	return p, err == nil
}
