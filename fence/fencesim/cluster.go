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
		Ready: n.ready, NotReadySince: n.notReadySince, HeartbeatAt: n.lastObservedHB, HeartbeatFrom: n.observedFrom,
		Maintenance: n.Maintenance, Excluded: n.Excluded, Taint: n.taint,
		Pods: n.pods, VolumeAttachments: n.vas,
	}
	if n.terminating {
		v.Terminating = n.pods
	}
	if w.podsUnlisted(n) {
		v.PodsUnknown, v.Pods, v.Terminating = true, 0, 0
	}
	if v.Pods > 0 || n.vas > 0 {
		v.Blockers = blockers(v.Pods, n.vas)
	}
	if !n.plannedAt.IsZero() {
		v.PlannedReboot, v.PlannedRebootAt, v.PlannedRebootBy = true, n.plannedAt, n.plannedBy
	}
	v.ControlPlane = n.ControlPlane
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
// on its clock (the world's plus skew). What the agent's own reads of the
// node took in ahead of its informers (absorbed: the state persist reads
// the node, and the real adapter's view adopts what it read) counts as
// observed.
func (c Cluster) view(n *Node) runner.NodeInfo {
	w := c.W
	info, r := w.observed(n)
	since := c.Since
	if n.created.After(since) {
		since = n.created // the first sighting of a Node object created later
	}
	v := info.View
	if !v.PodsUnknown && w.relisting(n, c.Since) {
		v.PodsUnknown, v.Pods, v.Terminating, v.Blockers = true, 0, 0, nil
		if n.vas > 0 {
			v.Blockers = blockers(0, n.vas)
		}
	}
	if a := c.Agent; a != nil {
		if t, ok := a.absorbed[n]; ok && t.After(v.HeartbeatAt) {
			v.HeartbeatAt, v.HeartbeatFrom = t, time.Time{} // its own read places nothing
		}
	}
	if !v.HeartbeatAt.After(since) {
		v.HeartbeatAt, v.HeartbeatFrom, v.RenewedAt = since, time.Time{}, time.Time{}
	} else {
		v.RenewedAt = v.HeartbeatAt
	}
	if v.HeartbeatFrom.Before(since) {
		v.HeartbeatFrom = time.Time{} // a list before this process started
	}
	if v.Ready != fence.ReadyTrue && v.NotReadySince.Before(since) {
		v.NotReadySince = since
	}
	v.HeartbeatAt, v.HeartbeatFrom, v.RenewedAt, v.NotReadySince = shift(v.HeartbeatAt, c.Skew), shift(v.HeartbeatFrom, c.Skew), shift(v.RenewedAt, c.Skew), shift(v.NotReadySince, c.Skew)
	if v.PlannedReboot {
		// The observation builder: when this process first saw the
		// signal, on its clock.
		if v.PlannedRebootAt.Before(since) {
			v.PlannedRebootAt = since
		}
		v.PlannedRebootAt = shift(v.PlannedRebootAt, c.Skew)
	}
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
	errNoTaint          = errors.New("simulated: not force-deleting pods: the node has no out-of-service taint")
	errConflicts        = errors.New("simulated: the node kept changing under us (409 ten times)")
	errAPI              = errors.New("simulated API server error (503)")
	errWrite            = errors.New("simulated API server refusing writes (etcd: mvcc: database space exceeded)")
	errNotFound         = errors.New("simulated API server: node not found (404)")
	errNotReadyOnServer = errors.New("simulated: not removing our taint: the API server has the node not Ready (our view lags)")
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

// Gap names a point between two API calls of one cluster write, where the
// world may act and the agent may pause (World.between). The real adapter
// (package cluster) makes these calls in this order; its tests check it
// (TestDeleteTerminatingPodsCallsInTheSimulatedOrder).
type Gap struct {
	// At is the point: GapPersist (before the state persist reads the
	// node), GapTaintRead (between a token-guarded write's read of the
	// node and its patch), GapPodsListed (between the list of pods and the
	// re-check before a delete), GapPodsRechecked (between that re-check
	// and the delete).
	At string
	// Phase is the phase being persisted (GapPersist) and Write the
	// guarded write (GapTaintRead: "taint", "untaint", "forget").
	Phase fence.Phase
	Write string
}

// The gaps of the cluster adapter's writes.
const (
	GapPersist       = "persist"
	GapTaintRead     = "write:read"
	GapPodsListed    = "pods:listed"
	GapPodsRechecked = "pods:rechecked"
)

func (c Cluster) between(node string, g Gap) {
	if f := c.W.between; f != nil && c.Agent != nil {
		f(c.Agent, node, g)
	}
}

// SaveState models cluster.SaveState: it reads the node from the server,
// and the agent's view takes in what it read (the Ready heartbeat included:
// the real adapter adopts the node), compares the annotation with old, and
// writes new, preconditioned on what it read. Between the runner's decision
// and this read the world may act (GapPersist).
func (c Cluster) SaveState(_ context.Context, node, old, new, ackID string) error {
	p, _ := phaseOf(new)
	c.between(node, Gap{At: GapPersist, Phase: p})
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
	c.absorb(n)
	if n.state != old {
		return runner.ErrConflict
	}
	n.state = new
	n.stateWrites++
	n.rv++
	unfence := false
	if r := n.request; ackID != "" && r != nil && ackID == r.id {
		unfence = r.cmd.Kind == fence.CmdUnfence
		n.request = nil
		w.take(n, r, c.Since)
	}
	p, ok := phaseOf(new)
	if was, wasOK := phaseOf(old); wasOK && ok {
		w.checkDetached(n, was, p, unfence)
	}
	w.podListsFollow(n, p, ok)
	if ok {
		w.record(node, "phase", p.String(), "")
		if w.onPhase != nil {
			w.onPhase(node, p)
		}
	}
	return nil
}

// absorb: the agent read the node from the server (its status, not its
// Lease): its view takes in the node's Ready heartbeat, on its clock, ahead
// of its informers. Called with w.mu held.
func (c Cluster) absorb(n *Node) {
	a := c.Agent
	if a == nil || !n.statusAt.After(c.seen(n)) {
		return
	}
	if a.absorbed == nil {
		a.absorbed = map[*Node]time.Time{}
	}
	a.absorbed[n] = c.W.now()
	if n.statusAt.After(n.leaseAt) {
		c.W.quirk(faultStatusFirst + "/taken in by the state persist before the Lease renewal")
	}
}

// seen is what the agent's informers delivered of the node's signs of life
// (a paused process's informers hold what they had when it stalled).
// Called with w.mu held.
func (c Cluster) seen(n *Node) time.Time {
	seen := n.viewBeat // the server's time of what the view holds
	if a := c.Agent; a != nil && a.stale != nil {
		if t, ok := a.stale[n.Name]; ok {
			seen = t
		}
	}
	return seen
}

// Recheck models cluster.Recheck: a Lease renewal the agent's informers
// have not delivered, or a Ready heartbeat its view has not taken in
// (informers or its own reads), is a renewal; and it reports the agent's
// view's signs of life now, which the runner compares with the view it
// decided on.
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
	seenLease, seenStatus := c.seen(n), c.seen(n)
	if a := c.Agent; a != nil {
		if t, ok := a.absorbed[n]; ok && t.After(seenStatus) {
			seenStatus = t
		}
	}
	v := c.view(n).View
	return runner.Recheck{
		LeaseRenewed: n.leaseAt.After(seenLease) || n.statusAt.After(seenStatus),
		Maintenance:  n.Maintenance, Excluded: n.Excluded, State: n.state,
		HeartbeatAt: v.HeartbeatAt, RenewedAt: v.RenewedAt,
	}, nil
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

// guardedWrite models cluster.guardedWrite: it reads the node and checks
// the fencing token (guarded), the world may act (GapTaintRead), then it
// writes, preconditioned on the node's resourceVersion as read: a node
// changed meanwhile is read again, a few times, as RetryOnConflict does.
// write runs with w.mu held on the node as it is now.
func (c Cluster) guardedWrite(node, tok, what string, write func(n *Node) error) error {
	w := c.W
	for range 10 {
		w.mu.Lock()
		n, err := w.guarded(node, tok)
		rv := int64(0)
		if n != nil {
			rv = n.rv
		}
		w.mu.Unlock()
		if err != nil {
			return err
		}
		c.between(node, Gap{At: GapTaintRead, Write: what})
		w.mu.Lock()
		if err := w.writeFails(); err != nil {
			w.mu.Unlock()
			return err
		}
		n = w.byName[node]
		if n == nil {
			w.mu.Unlock()
			return errNotFound
		}
		if n.rv != rv && fence.Enabled(fence.CheckWritePrecondition) {
			w.mu.Unlock()
			continue // 409: computed again on the node as it is now
		}
		err = write(n)
		w.mu.Unlock()
		return err
	}
	return errConflicts
}

// deleting marks a pod delete of the node in flight past its last re-check
// (World.SetTaint).
func (c Cluster) deleting(node string, d int) {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	if c.W.podDeletes == nil {
		c.W.podDeletes = map[string]int{}
	}
	c.W.podDeletes[node] += d
}

// ApplyTaint checks the oracle (checkTaint) on every taint that lands.
func (c Cluster) ApplyTaint(_ context.Context, node, tok string) error {
	w := c.W
	return c.guardedWrite(node, tok, "taint", func(n *Node) error {
		w.checkTaint(n)
		if n.taint == fence.TaintAbsent {
			n.taint, n.taintAt = fence.TaintOurs, w.now()
			n.rv++
		}
		w.record(node, "taint", "", "")
		w.notify(node)
		return nil
	})
}

// ForgetTaint: the world keeps no owner marks; it never removes a taint.
func (c Cluster) ForgetTaint(_ context.Context, node, tok string) error {
	return c.guardedWrite(node, tok, "forget", func(*Node) error { return nil })
}

// RemoveTaint checks the oracle (checkUntaint).
func (c Cluster) RemoveTaint(_ context.Context, node, tok string) error {
	w := c.W
	return c.guardedWrite(node, tok, "untaint", func(n *Node) error {
		if n.taint == fence.TaintAbsent {
			return nil // already gone: removal is idempotent
		}
		if n.taint == fence.TaintOurs && n.ready != fence.ReadyTrue {
			// cluster.RemoveTaint: the server's node, read for the
			// write, must be Ready too (the view may lag).
			return errNotReadyOnServer
		}
		w.checkUntaint(n)
		if n.taint == fence.TaintOurs {
			n.taint = fence.TaintAbsent
			n.rv++
			w.record(node, "untaint", "", "")
			w.notify(node)
		}
		return nil
	})
}

// DeleteTerminatingPods models cluster.DeleteTerminatingPods call by call:
// the node is read and the token and the taint checked; the pods are
// listed; then, before each delete, the node is read and both are checked
// again; each delete carries the pods' version as listed. Any call may
// fail (API errors), and between the list and the re-check, and between
// the re-check and the delete, the world may act and the leader may pause
// (GapPodsListed, GapPodsRechecked). The oracle judges each delete that
// lands.
func (c Cluster) DeleteTerminatingPods(_ context.Context, node, tok string) (int, error) {
	w := c.W
	guard := func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.apiFails() {
			return errAPI
		}
		n := w.byName[node]
		if n == nil {
			return errNotFound
		}
		if err := token(n, tok); err != nil {
			return err
		}
		if n.taint == fence.TaintAbsent {
			return errNoTaint
		}
		return nil
	}
	if err := guard(); err != nil {
		return 0, err
	}
	w.mu.Lock()
	if w.apiFails() {
		w.mu.Unlock()
		return 0, errAPI
	}
	var listed int
	var gen int64
	var listedOf *Node
	if n := w.byName[node]; n != nil && n.terminating {
		listed, gen, listedOf = n.pods, n.podGen, n
	}
	w.mu.Unlock()
	deleted := 0
	for range listed {
		c.between(node, Gap{At: GapPodsListed})
		if fence.Enabled(fence.CheckPodDeleteRecheck) {
			if err := guard(); err != nil {
				return deleted, err
			}
		}
		c.deleting(node, +1)
		c.between(node, Gap{At: GapPodsRechecked})
		c.deleting(node, -1)
		w.mu.Lock()
		if err := w.writeFails(); err != nil {
			w.mu.Unlock()
			return deleted, err
		}
		n := w.byName[node]
		switch {
		case n == nil || n != listedOf || n.pods == 0:
			// Gone already (NotFound), or the Node object was re-created
			// (its pods have other UIDs).
		case n.podGen != gen && fence.Enabled(fence.CheckPodDeletePreconditions):
			// 409: the pods changed since the list (a new one under the
			// name, or its kubelet touched it).
		default:
			if n.taint == fence.TaintAbsent {
				w.violate("%s: force-deleted a pod of a node without the out-of-service taint", node)
			}
			n.pods--
			deleted++
			if n.pods == 0 {
				n.terminating, n.podsGoneAt = false, w.now()
			}
			w.notify(node)
		}
		w.mu.Unlock()
	}
	return deleted, nil
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
