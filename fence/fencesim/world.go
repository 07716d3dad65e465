// Package fencesim is a small simulated cluster for testing the fence runner
// end to end without Kubernetes: machines behind fake BMCs (bmc/bmctest, on
// the shared machine model), kubelets that renew their lease every 10 s, the
// node lifecycle controller, the taint manager, pod GC and the attach-detach
// controller, and an API view that can go stale or fail. Everything runs on
// one fake clock and is deterministic for a given seed.
//
// The World implements runner.Cluster and runner.Inventory, so the real
// runner drives it. Every write is checked against the truth the world knows
// and the runner does not (the oracle): a taint on a machine that is not off
// for good, a power-off of a node that was alive recently, removing a taint
// that is not ours or from a node that is not back. The scenario scripts in
// fence/testdata and the randomized simulation both run on it.
package fencesim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// Cluster-side constants, from Kubernetes' defaults (seed timeline).
const (
	// LeaseRenewInterval: the kubelet renews its Lease every 10 s.
	LeaseRenewInterval = 10 * time.Second
	// NodeMonitorGracePeriod: the node lifecycle controller marks a silent
	// node Unknown after this long.
	NodeMonitorGracePeriod = 40 * time.Second
	// PodGCInterval: pod GC force-deletes terminating pods of a NotReady,
	// out-of-service node on this loop.
	PodGCInterval = 20 * time.Second
	// DetachDelay: the attach-detach controller detaches this long after the
	// pods are gone (force-detach with the out-of-service taint).
	DetachDelay = time.Second
)

// Node is one simulated node: the machine, its kubelet, and its API objects.
type Node struct {
	Name string
	Zone string
	BMC  *bmctest.Fake
	// Inventory and policy flags.
	HasBMC      bool
	Excluded    bool
	Maintenance bool

	// Truth about the kubelet.
	KubeletEnabled bool // the kubelet process would run if the OS is up
	lastBeat       time.Time
	wasAlive       bool

	// API objects (the server's truth).
	ready          fence.Readiness
	notReadySince  time.Time
	taint          fence.TaintState
	taintAt        time.Time
	pods           int
	terminating    bool
	terminatingAt  time.Time
	vas            int
	podsGoneAt     time.Time
	state          string
	request        *fence.Command
	requestID      string
	stateWrites    int
	lastObservedHB time.Time // heartbeat as the agent observed it

	// The agent's observed view while the API view is frozen.
	frozen *runner.NodeInfo
}

// Record is something that happened, for scenario expectations.
type Record struct {
	At     time.Time
	Node   string
	Kind   string // "event", "taint", "untaint", "power-off", "power-on", "phase"
	Detail string // event reason, phase name
	Msg    string
}

// World is the simulated cluster. Its methods and its Cluster adapter are
// safe for concurrent use (the runner's own Run drives it from goroutines).
type World struct {
	mu sync.Mutex

	Clock  *clocktesting.FakeClock
	Policy fence.Policy
	Nodes  []*Node
	byName map[string]*Node
	rng    *rand.Rand

	// API faults.
	apiErrorRate float64
	frozenSince  time.Time // zero: the view is live
	lastFresh    time.Time

	// humans records nodes a human asked to fence (the oracle allows their
	// power-off), and attested ones (allowed to be tainted without proof).
	manual   map[string]bool
	attested map[string]bool

	Records    []Record
	Violations []string
	changed    chan string
}

// NewWorld creates an empty world at start.
func NewWorld(start time.Time, p fence.Policy, seed uint64) *World {
	return &World{
		Clock:    clocktesting.NewFakeClock(start),
		Policy:   p,
		byName:   map[string]*Node{},
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		manual:   map[string]bool{},
		attested: map[string]bool{},
		changed:  make(chan string, 1024),
	}
}

// AddNode adds a healthy node: machine On, kubelet running, Ready, with pods
// and a volume attached.
func (w *World) AddNode(name, zone string, timing machine.Timing) *Node {
	now := w.Clock.Now()
	n := &Node{
		Name: name, Zone: zone, HasBMC: true, KubeletEnabled: true,
		BMC:      bmctest.New(w.Clock, bmctest.WithTiming(timing), bmctest.WithStepper(w.Clock.Step)),
		lastBeat: now, wasAlive: true,
		ready: fence.ReadyTrue, pods: 2, vas: 1, lastObservedHB: now,
	}
	w.Nodes = append(w.Nodes, n)
	w.byName[name] = n
	w.lastFresh = now
	return n
}

// Node returns a node by name.
func (w *World) Node(name string) *Node { return w.byName[name] }

// DeleteNode removes a node's API objects (kubectl delete node); its
// machine stays as it is.
func (w *World) DeleteNode(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byName, name)
	w.Nodes = slices.DeleteFunc(w.Nodes, func(n *Node) bool { return n.Name == name })
	w.notify(name)
}

// Notify tells the agents a node's view changed.
func (w *World) Notify(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notify(name)
}

func (w *World) now() time.Time { return w.Clock.Now() }

func (w *World) record(node, kind, detail, msg string) {
	w.Records = append(w.Records, Record{At: w.now(), Node: node, Kind: kind, Detail: detail, Msg: msg})
}

func (w *World) violate(format string, args ...any) {
	w.Violations = append(w.Violations, fmt.Sprintf("%s: ", w.now().Format("15:04:05.000"))+fmt.Sprintf(format, args...))
}

// alive: the machine is up, its OS not hung, and the kubelet enabled.
func (n *Node) alive(now time.Time) bool {
	s := n.BMC.Truth()
	return s.Power == machine.PowerOn && s.BootState == "OSRunning" && !s.OSHung && n.KubeletEnabled
}

// Advance runs the cluster's own dynamics up to the clock's now. The driver
// calls it every simulated second.
func (w *World) Advance() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	for _, n := range w.Nodes {
		alive := n.alive(now)
		if alive && (!n.wasAlive || now.Sub(n.lastBeat) >= LeaseRenewInterval) {
			n.lastBeat = now
			// A human's request or attestation was about the failure that
			// just ended.
			delete(w.manual, n.Name)
			delete(w.attested, n.Name)
			if n.ready != fence.ReadyTrue {
				n.ready, n.notReadySince = fence.ReadyTrue, time.Time{}
			}
			if !n.wasAlive && n.pods > 0 {
				// A kubelet coming back deletes the pods it no longer
				// owns (seed timeline: "Terminating pods are GC'd").
				if n.terminating || n.taint != fence.TaintAbsent {
					n.pods, n.terminating, n.podsGoneAt = 0, false, now
				}
			}
			w.notify(n.Name)
		}
		n.wasAlive = alive
		// Node lifecycle controller.
		if n.ready == fence.ReadyTrue && now.Sub(n.lastBeat) >= NodeMonitorGracePeriod {
			n.ready, n.notReadySince = fence.ReadyUnknown, now
			w.notify(n.Name)
		}
		// Taint manager: NoExecute evicts at once.
		if n.taint != fence.TaintAbsent && n.pods > 0 && !n.terminating {
			n.terminating, n.terminatingAt = true, now
			if alive {
				// A live kubelet honours the eviction itself.
				n.pods, n.terminating, n.podsGoneAt = 0, false, now
			}
		}
		// Pod GC: terminating pods of a NotReady out-of-service node.
		if n.terminating && n.ready != fence.ReadyTrue && n.taint != fence.TaintAbsent && now.Sub(n.terminatingAt) >= PodGCInterval {
			n.pods, n.terminating, n.podsGoneAt = 0, false, now
			w.notify(n.Name)
		}
		// Attach-detach: volumes go once the pods are gone, if the node is
		// out of service or back (not in use any more).
		if n.pods == 0 && n.vas > 0 && (n.taint != fence.TaintAbsent || alive) && now.Sub(n.podsGoneAt) >= DetachDelay {
			n.vas = 0
			w.notify(n.Name)
		}
		// The scheduler places new work on a healthy, untainted node.
		if alive && n.taint == fence.TaintAbsent && n.pods == 0 && n.ready == fence.ReadyTrue && !n.Maintenance {
			n.pods, n.vas = 2, 1
		}
	}
	if w.frozenSince.IsZero() {
		w.lastFresh = now
		for _, n := range w.Nodes {
			n.lastObservedHB = n.lastBeat
		}
	}
}

func (w *World) notify(name string) {
	select {
	case w.changed <- name:
	default:
	}
}

// FreezeAPI makes the agent's view stop updating (a stalled informer) until
// ThawAPI.
func (w *World) FreezeAPI() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.frozenSince.IsZero() {
		return
	}
	w.frozenSince = w.now()
	for _, n := range w.Nodes {
		info := w.info(n)
		n.frozen = &info
	}
}

// ThawAPI makes the view live again; heartbeats that happened meanwhile are
// observed now.
func (w *World) ThawAPI() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.frozenSince.IsZero() {
		return
	}
	for _, n := range w.Nodes {
		if n.lastBeat.After(w.frozenSince) {
			n.lastObservedHB = w.now()
		}
		n.frozen = nil
	}
	w.frozenSince = time.Time{}
	w.lastFresh = w.now()
}

// SetAPIErrorRate makes that fraction of writes fail.
func (w *World) SetAPIErrorRate(r float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.apiErrorRate = r
}

// Request records a human's command on a node, as the CLI would.
func (w *World) Request(name string, c fence.Command) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.byName[name]
	c.SeenAt = w.now()
	n.request = &c
	n.requestID = fmt.Sprintf("req-%d", len(w.Records))
	switch c.Kind {
	case fence.CmdFence:
		w.manual[name] = true
	case fence.CmdConfirm:
		w.attested[name] = true
	case fence.CmdNone, fence.CmdAbort, fence.CmdUnfence:
	}
	w.notify(name)
}

// ---- runner.Cluster ----

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
		v.Blockers = []string{fmt.Sprintf("%d pods", n.pods), fmt.Sprintf("%d VolumeAttachments", n.vas)}
	}
	info := runner.NodeInfo{Name: n.Name, Zone: n.Zone, View: v, State: n.state, CommandID: n.requestID}
	if n.request != nil {
		c := *n.request
		info.Command = &c
	}
	return info
}

func (w *World) observed(n *Node) runner.NodeInfo {
	if n.frozen != nil {
		return *n.frozen
	}
	return w.info(n)
}

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
}

// asSeenBy turns the world's observations into what an agent that started
// observing at since can know, stamped on the agent's clock (the world's
// plus skew): an agent stamps what it observes with its own clock.
func asSeenBy(info runner.NodeInfo, since time.Time, skew time.Duration) runner.NodeInfo {
	v := info.View
	if !v.HeartbeatAt.After(since) {
		v.HeartbeatAt, v.RenewedAt = since, time.Time{}
	} else {
		v.RenewedAt = v.HeartbeatAt
	}
	if v.Ready != fence.ReadyTrue && v.NotReadySince.Before(since) {
		v.NotReadySince = since
	}
	v.HeartbeatAt, v.RenewedAt, v.NotReadySince = shift(v.HeartbeatAt, skew), shift(v.RenewedAt, skew), shift(v.NotReadySince, skew)
	info.View = v
	if info.Command != nil {
		c := *info.Command
		c.SeenAt = shift(c.SeenAt, skew)
		info.Command = &c
	}
	return info
}

func shift(t time.Time, d time.Duration) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(d)
}

var (
	_ runner.Cluster   = Cluster{}
	_ runner.Inventory = Cluster{}
)

func (c Cluster) Nodes() []runner.NodeInfo {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	out := make([]runner.NodeInfo, len(c.W.Nodes))
	for i, n := range c.W.Nodes {
		out[i] = c.W.observed(n)
		out[i] = asSeenBy(out[i], c.Since, c.Skew)
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
	info := c.W.observed(n)
	info = asSeenBy(info, c.Since, c.Skew)
	return info, true
}

func (c Cluster) APIFreshAt() time.Time {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	return shift(c.W.lastFresh, c.Skew)
}
func (c Cluster) Changed() <-chan string { return c.W.changed }

var errAPI = errors.New("simulated API server error (503)")

func (w *World) apiFails() bool { return w.apiErrorRate > 0 && w.rng.Float64() < w.apiErrorRate }

func (c Cluster) SaveState(_ context.Context, node, old, new, ackID string) error {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	w := c.W
	n := w.byName[node]
	if w.apiFails() {
		return errAPI
	}
	if n.state != old {
		return runner.ErrConflict
	}
	n.state = new
	n.stateWrites++
	if ackID != "" && ackID == n.requestID {
		n.request, n.requestID = nil, ""
	}
	if s, err := fence.Decode(new); err == nil {
		w.record(node, "phase", s.Phase.String(), "")
	}
	return nil
}

func (c Cluster) Recheck(_ context.Context, node string) (runner.Recheck, error) {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	if c.W.apiFails() {
		return runner.Recheck{}, errAPI
	}
	n := c.W.byName[node]
	return runner.Recheck{LeaseRenewed: n.lastBeat.After(n.lastObservedHB), Maintenance: n.Maintenance, Excluded: n.Excluded, State: n.state}, nil
}

func (c Cluster) CurrentState(_ context.Context, node string) (string, error) {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	if c.W.apiFails() {
		return "", errAPI
	}
	return c.W.byName[node].state, nil
}

// ApplyTaint checks the oracle: the machine must be off and stay off on its
// own, and the node must be one we may fence.
func (c Cluster) ApplyTaint(_ context.Context, node, token string) error {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	w := c.W
	n := w.byName[node]
	if w.apiFails() {
		return errAPI
	}
	if token != runner.NoToken && token != n.state {
		return fmt.Errorf("%s: %w (fencing token)", node, runner.ErrConflict)
	}
	if n.Maintenance || n.Excluded {
		w.violate("%s: tainted a node in maintenance or excluded", node)
	}
	if !n.BMC.StaysOff(time.Hour) && !(w.attested[node] && !n.alive(w.now())) {
		w.violate("%s: tainted while the machine is %s (alive=%v): it might be running", node, n.BMC.Truth().Power, n.alive(w.now()))
	}
	if !n.HasBMC && !w.attested[node] {
		w.violate("%s: tainted a node without BMC and without a human's attestation", node)
	}
	if n.taint == fence.TaintAbsent {
		n.taint, n.taintAt = fence.TaintOurs, w.now()
	}
	w.record(node, "taint", "", "")
	w.notify(node)
	return nil
}

// ForgetTaint: the world keeps no owner marks; it never removes a taint.
func (c Cluster) ForgetTaint(_ context.Context, node, token string) error {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	if c.W.apiFails() {
		return errAPI
	}
	if token != runner.NoToken && token != c.W.byName[node].state {
		return fmt.Errorf("%s: %w (fencing token)", node, runner.ErrConflict)
	}
	return nil
}

// RemoveTaint checks the oracle: only our taint, only when the node is back.
func (c Cluster) RemoveTaint(_ context.Context, node, token string) error {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	w := c.W
	n := w.byName[node]
	if w.apiFails() {
		return errAPI
	}
	if token != runner.NoToken && token != n.state {
		return fmt.Errorf("%s: %w (fencing token)", node, runner.ErrConflict)
	}
	switch n.taint {
	case fence.TaintForeign:
		w.violate("%s: removed a taint that is not ours", node)
		return nil
	case fence.TaintAbsent:
		return nil // already gone: removal is idempotent
	case fence.TaintOurs:
	}
	if n.ready != fence.ReadyTrue || !n.lastBeat.After(n.taintAt) {
		w.violate("%s: removed our taint while the node is not back (ready %v, last heartbeat %v, taint %v)", node, n.ready, n.lastBeat, n.taintAt)
	}
	n.taint = fence.TaintAbsent
	w.record(node, "untaint", "", "")
	w.notify(node)
	return nil
}

func (c Cluster) DeleteTerminatingPods(_ context.Context, node, token string) (int, error) {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	w := c.W
	n := w.byName[node]
	if w.apiFails() {
		return 0, errAPI
	}
	if token != runner.NoToken && token != n.state {
		return 0, fmt.Errorf("%s: %w (fencing token)", node, runner.ErrConflict)
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

// Controller implements runner.Inventory, with the oracle on power-off.
func (c Cluster) Controller(node string) (runner.PowerController, bool) {
	c.W.mu.Lock()
	defer c.W.mu.Unlock()
	n := c.W.byName[node]
	if n == nil || !n.HasBMC {
		return nil, false
	}
	return oracleBMC{w: c.W, n: n, Fake: n.BMC}, true
}

// oracleBMC checks every power-off against the truth before it reaches the
// machine.
type oracleBMC struct {
	w *World
	n *Node
	*bmctest.Fake
}

func (o oracleBMC) PowerOff(ctx context.Context) (bmc.Result, error) {
	o.check()
	return o.Fake.PowerOff(ctx)
}

// Key names the node's BMC target.
func (o oracleBMC) Key() string { return "bmc-" + o.n.Name }

// Verify: every BMC in this world is its node's.
func (o oracleBMC) Verify(context.Context) error { return nil }

func (o oracleBMC) check() {
	w, n := o.w, o.n
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if n.Maintenance || n.Excluded || !n.HasBMC {
		w.violate("%s: powered off a node in maintenance, excluded or without BMC", n.Name)
	}
	// Never power off a live node: one whose kubelet renewed its Lease
	// within SuspectAfter (its cached view may lag, but the agent checks the
	// Lease on the server first), unless a human asked.
	if silence := now.Sub(n.lastBeat); n.alive(now) && silence < w.Policy.SuspectAfter && !w.manual[n.Name] {
		w.violate("%s: powered off a node whose kubelet renewed its lease %s ago", n.Name, silence)
	}
	w.record(n.Name, "power-off", "", "")
}

func (o oracleBMC) PowerOn(ctx context.Context) (bmc.Result, error) {
	o.w.mu.Lock()
	o.w.record(o.n.Name, "power-on", "", "")
	o.w.mu.Unlock()
	return o.Fake.PowerOn(ctx)
}

// Phase decodes the node's persisted phase ("" when none).
func (n *Node) Phase() string {
	if n.state == "" {
		return fence.Healthy.String()
	}
	s, err := fence.Decode(n.state)
	if err != nil {
		return "undecodable"
	}
	return s.Phase.String()
}

// Taint reports the node's out-of-service taint.
func (n *Node) Taint() fence.TaintState { return n.taint }

// Summary is a one-line description of every node, for failure messages.
func (w *World) Summary() string {
	var b strings.Builder
	names := make([]string, 0, len(w.Nodes))
	for _, n := range w.Nodes {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	for _, name := range names {
		n := w.byName[name]
		fmt.Fprintf(&b, "%s[%s power=%s alive=%v ready=%v taint=%v pods=%d vas=%d] ", name, n.Phase(), n.BMC.Truth().Power, n.alive(w.now()), n.ready, n.taint, n.pods, n.vas)
	}
	return b.String()
}
