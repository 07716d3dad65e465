// Package runner executes the fence engine's decisions. It is the only part of
// the fence path with side effects: it feeds observations and action results
// to fence.Step, executes the Actions in the order Step gives them (persist →
// BMC operation → read back → taint → pods), owns the clock, and talks to BMCs
// and to the cluster only through the small interfaces declared here.
//
// Each node has one worker goroutine, so a node's Steps never overlap; BMC
// calls across nodes are bounded by a semaphore. Cancelling Run's context
// (leadership lost) cancels every in-flight call; whatever was persisted lets
// the next leader resume exactly.
package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
)

// PowerController is what the runner needs from a node's BMC.
type PowerController interface {
	PowerStatus(ctx context.Context) (bmc.PowerStatus, error)
	PowerOff(ctx context.Context) (bmc.Result, error)
	PowerOn(ctx context.Context) (bmc.Result, error)
}

// Verifier is optionally implemented by a PowerController that can check it
// reaches the right machine (Node systemUUID vs Redfish UUID). A controller
// that fails it gives no readings, so it can never prove a node off.
type Verifier interface {
	Verify(ctx context.Context) error
}

// Inventory finds a node's BMC.
type Inventory interface {
	Controller(node string) (PowerController, bool)
}

// NodeInfo is the cluster's view of one node.
type NodeInfo struct {
	Name string
	Zone string
	// View is built by the cluster's observation builder; the runner fills
	// View.HasBMC from the Inventory.
	View fence.NodeView
	// State is the raw state annotation ("" when absent).
	State string
	// Command is a human's pending request, if any, with the ID to
	// acknowledge it by.
	Command   *fence.Command
	CommandID string
}

// Recheck is the server's current word on what may stop a fence.
type Recheck struct {
	// LeaseRenewed: the Lease was renewed after the renewal we last
	// observed: the node is alive.
	LeaseRenewed bool
	Maintenance  bool
	Excluded     bool
}

// blocks says why the recheck forbids a power-off or a taint, or "".
func (c Recheck) blocks() string {
	switch {
	case c.Maintenance:
		return "the node is now under maintenance"
	case c.Excluded:
		return "the node is now excluded from fencing"
	case c.LeaseRenewed:
		// Before a power-off: it is alive. Before a taint: it is alive
		// while its BMC reads Off, so the BMC is not this node's.
		return "the node renewed its Lease since we last saw it (our view was behind)"
	}
	return ""
}

// ErrConflict is returned by Cluster.SaveState when the annotation is no
// longer what the caller last read: another agent (or a human) wrote it. It
// is the per-node fence lock: only the writer whose compare-and-swap succeeds
// performs the side effects that follow.
var ErrConflict = errors.New("fence state changed concurrently")

// Cluster is what the runner needs from Kubernetes. Node and Nodes must read
// our own successful writes (the taint, the state annotation) at once, even
// from a cache that lags: a step right after ApplyTaint must see the taint.
type Cluster interface {
	Nodes() []NodeInfo
	Node(name string) (NodeInfo, bool)
	// APIFreshAt is when our view of the API server was last proven fresh.
	APIFreshAt() time.Time
	// Changed delivers names of nodes whose view changed.
	Changed() <-chan string
	// SaveState replaces the state annotation if it still equals old (on
	// the server, not in a cache), and removes the request annotation if
	// ackCommandID is set, in one write. Else it returns ErrConflict.
	SaveState(ctx context.Context, node, old, new, ackCommandID string) error
	// CurrentState reads the state annotation from the server.
	CurrentState(ctx context.Context, node string) (string, error)
	// Recheck reads the node and its Lease from the server, not a cache.
	// The runner asks right before a power-off or a taint: those decisions
	// rest on a cached view that may be up to MaxAPIStaleness old, and the
	// node may have come back, or been put in maintenance, unseen.
	Recheck(ctx context.Context, node string) (Recheck, error)
	ApplyTaint(ctx context.Context, node string) error
	RemoveTaint(ctx context.Context, node string) error
	DeleteTerminatingPods(ctx context.Context, node string) (int, error)
	Event(node string, ev fence.Event)
}

// Recorder receives what the runner measures (BMC request metrics are the
// inventory's: it knows the protocol). Implementations must be cheap and
// safe for concurrent use.
type Recorder interface {
	Phase(node string, p fence.Phase)
	// Fence is called once per applied taint with the reason ("off",
	// "powered-off", "attested") and the time from the failure's start to
	// the taint.
	Fence(result, reason string, toTaint time.Duration)
	// Detached is called when a fenced node's pods and volumes are gone,
	// with the time from the taint and from the failure's start.
	Detached(toDetach, failover time.Duration)
	// Refused counts a storm-guard refusal by reason.
	Refused(reason string)
}

// NopRecorder records nothing.
type NopRecorder struct{}

func (NopRecorder) Phase(string, fence.Phase)             {}
func (NopRecorder) Fence(string, string, time.Duration)   {}
func (NopRecorder) Detached(time.Duration, time.Duration) {}
func (NopRecorder) Refused(string)                        {}

// Options configure a Runner.
type Options struct {
	Policy    fence.Policy
	Clock     clock.WithTicker
	Cluster   Cluster
	Inventory Inventory
	Log       *zap.Logger
	Recorder  Recorder
	// BMCConcurrency bounds simultaneous BMC calls across nodes.
	BMCConcurrency int
	// DryRun: read BMCs and decide, but change nothing: no power command,
	// no taint, no pod deletion, no annotation. "Would" decisions are
	// logged and recorded as Events, once per phase.
	DryRun bool
	// VerifyInterval bounds how often a Verifier is asked again.
	VerifyInterval time.Duration
}

// maxStepsPerSync bounds one sync's chain of Step → action → result. A fence
// needs a handful; a loop that does not settle is a bug, and the node is
// retried on the next wake instead of spinning.
const maxStepsPerSync = 32

// retryAfterError is how soon a node is retried after a failed persist.
const retryAfterError = 2 * time.Second

// Runner drives every node's fence lifecycle.
type Runner struct {
	opts Options
	log  *zap.Logger
	sem  chan struct{}

	mu    sync.Mutex
	nodes map[string]*record
}

// record is the runner's memory of one node.
type record struct {
	mu sync.Mutex // held by the node's sync; fleet reads take it briefly
	// state is the engine state; raw is its last persisted encoding (what
	// the annotation holds as far as we know).
	state fence.State
	raw   string
	// hold is set when the annotation cannot be decoded: the node is not
	// stepped (never fenced) until someone fixes or removes it.
	hold error
	// loaded: state came from the annotation at least once. seen is the
	// annotation as last observed, and written our recent writes: an
	// informer cache lags behind our own writes, and an old value of ours
	// showing up late must not roll the state back.
	loaded  bool
	seen    string
	written []string
	// acked is the last command we processed: a cache that lags behind
	// our acknowledgement may show the request again.
	acked string
	// verifiedAt is the last successful identity check.
	verifiedAt time.Time
	// would dedupes dry-run announcements: one per phase entry.
	would map[fence.ActionKind]time.Time
	wake  chan struct{}

	// pub is what other nodes' fleet views read: the last committed phase
	// and admission, under its own lock so a node busy on a BMC call never
	// stalls the others.
	pubMu       sync.Mutex
	pubPhase    fence.Phase
	pubAdmitted time.Time
}

func (rec *record) publish() {
	rec.pubMu.Lock()
	rec.pubPhase, rec.pubAdmitted = rec.state.Phase, rec.state.AdmittedAt
	rec.pubMu.Unlock()
}

// New validates the options and returns a Runner.
func New(opts Options) (*Runner, error) {
	if err := opts.Policy.Validate(); err != nil {
		return nil, err
	}
	if opts.Clock == nil || opts.Cluster == nil || opts.Inventory == nil {
		return nil, errors.New("runner: Clock, Cluster and Inventory are required")
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Recorder == nil {
		opts.Recorder = NopRecorder{}
	}
	if opts.BMCConcurrency <= 0 {
		opts.BMCConcurrency = 8
	}
	if opts.VerifyInterval <= 0 {
		opts.VerifyInterval = time.Hour
	}
	return &Runner{
		opts:  opts,
		log:   opts.Log,
		sem:   make(chan struct{}, opts.BMCConcurrency),
		nodes: map[string]*record{},
	}, nil
}

// Run drives every node until ctx is cancelled (leadership lost, shutdown).
func (r *Runner) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	start := func(name string) {
		rec := r.recordFor(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.work(ctx, name, rec)
		}()
	}
	// Load every node before any worker steps, so the first fleet view
	// counts every fence already in flight.
	for _, n := range r.opts.Cluster.Nodes() {
		r.recordFor(n.Name)
	}
	started := map[string]bool{}
	for name := range r.snapshotNames() {
		started[name] = true
		start(name)
	}
	resync := r.opts.Clock.NewTicker(30 * time.Second)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case name := <-r.opts.Cluster.Changed():
			if !started[name] {
				started[name] = true
				start(name)
				continue
			}
			r.poke(name)
		case <-resync.C():
			for _, n := range r.opts.Cluster.Nodes() {
				if !started[n.Name] {
					started[n.Name] = true
					start(n.Name)
				}
			}
		}
	}
}

func (r *Runner) snapshotNames() map[string]struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make(map[string]struct{}, len(r.nodes))
	for n := range r.nodes {
		names[n] = struct{}{}
	}
	return names
}

func (r *Runner) recordFor(name string) *record {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.nodes[name]
	if !ok {
		rec = &record{wake: make(chan struct{}, 1), would: map[fence.ActionKind]time.Time{}}
		if info, ok := r.opts.Cluster.Node(name); ok {
			rec.load(info.State)
		}
		r.nodes[name] = rec
	}
	return rec
}

func (r *Runner) poke(name string) {
	r.mu.Lock()
	rec := r.nodes[name]
	r.mu.Unlock()
	if rec == nil {
		return
	}
	select {
	case rec.wake <- struct{}{}:
	default:
	}
}

// work is one node's loop: sync, then sleep until woken or due.
func (r *Runner) work(ctx context.Context, name string, rec *record) {
	for {
		after, gone := r.Sync(ctx, name)
		if gone {
			r.mu.Lock()
			delete(r.nodes, name)
			r.mu.Unlock()
			return
		}
		timer := r.opts.Clock.NewTimer(after)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-rec.wake:
			timer.Stop()
		case <-timer.C():
		}
	}
}

// load adopts the annotation as the node's state. An annotation we cannot
// read puts the node on hold: never fenced, and never overwritten (a newer
// agent may have written it).
func (rec *record) load(raw string) {
	rec.raw = raw
	rec.seen = raw
	rec.loaded = true
	rec.hold = nil
	if raw == "" {
		rec.state = fence.State{}
		rec.publish()
		return
	}
	s, err := fence.Decode(raw)
	if err != nil {
		rec.hold = err
		return
	}
	rec.state = s
	rec.publish()
}

// changedBySomeoneElse reports whether the observed annotation is news: it
// changed since we last looked and is none of our own recent writes.
func (rec *record) changedBySomeoneElse(observed string) bool {
	if !rec.loaded {
		return true
	}
	if observed == rec.seen {
		return false
	}
	rec.seen = observed
	if observed == rec.raw {
		return false
	}
	for _, w := range rec.written {
		if observed == w {
			return false
		}
	}
	return true
}

// wrote remembers one of our writes (a few suffice: a cache is never many
// writes behind one node).
func (rec *record) wrote(raw string) {
	const keep = 8
	if len(rec.written) == keep {
		copy(rec.written, rec.written[1:])
		rec.written = rec.written[:keep-1]
	}
	rec.written = append(rec.written, raw)
	rec.raw = raw
}

// Sync runs one node to quiescence: it steps the engine, executes the actions,
// feeds each result back, and returns when nothing more is due now, with the
// time until the node wants stepping again. gone reports the node was
// deleted. Sync is exported for the deterministic simulation, which calls it
// directly with a fake clock.
func (r *Runner) Sync(ctx context.Context, name string) (after time.Duration, gone bool) {
	info, ok := r.opts.Cluster.Node(name)
	if !ok {
		r.opts.Recorder.Phase(name, fence.Healthy)
		return 0, true
	}
	rec := r.recordFor(name)
	rec.mu.Lock()
	defer rec.mu.Unlock()

	if rec.changedBySomeoneElse(info.State) {
		// Another agent or a human wrote the annotation (or removed it):
		// theirs wins.
		rec.load(info.State)
	}
	if rec.hold != nil {
		r.opts.Cluster.Event(name, fence.Event{Warning: true, Reason: "FenceStateUnreadable",
			Message: fmt.Sprintf("cannot read the fence state annotation (%v); this node will not be fenced until it is fixed or removed", rec.hold)})
		r.log.Warn("fence state unreadable; node held", zap.String("node", name), zap.Error(rec.hold))
		return 5 * time.Minute, false
	}

	in := fence.Input{Kind: fence.InputTick}
	ackID := ""
	if info.Command != nil && (info.CommandID == "" || info.CommandID != rec.acked) {
		in = fence.Input{Kind: fence.InputCommand, Command: *info.Command}
		ackID = info.CommandID
	}
	for i := 0; i < maxStepsPerSync; i++ {
		now := r.opts.Clock.Now()
		in.Node = r.view(info)
		in.Fleet = r.fleet(name, now)
		out := fence.Step(r.opts.Policy, rec.state, in, now)
		next, retry := r.execute(ctx, name, rec, out, ackID)
		r.opts.Recorder.Phase(name, rec.state.Phase)
		if retry > 0 {
			return retry, false
		}
		ackID = ""
		if next == nil || ctx.Err() != nil {
			return out.RecheckAfter, false
		}
		in = *next
		if info, ok = r.opts.Cluster.Node(name); !ok {
			return 0, true
		}
	}
	r.log.Error("fence engine did not settle; retrying later", zap.String("node", name), zap.Int("steps", maxStepsPerSync))
	return retryAfterError, false
}

func (r *Runner) view(info NodeInfo) fence.NodeView {
	v := info.View
	_, v.HasBMC = r.opts.Inventory.Controller(info.Name)
	return v
}

// fleet summarises every other node for the storm guard.
func (r *Runner) fleet(self string, now time.Time) fence.FleetView {
	f := fence.FleetView{APIFreshAt: r.opts.Cluster.APIFreshAt()}
	zones := map[string]*fence.ZoneHealth{}
	var order []string
	for _, n := range r.opts.Cluster.Nodes() {
		if n.View.Maintenance {
			continue
		}
		unhealthy := fence.CountsAsUnhealthy(r.opts.Policy, n.View, now)
		f.Nodes++
		if n.Zone != "" {
			z := zones[n.Zone]
			if z == nil {
				z = &fence.ZoneHealth{Zone: n.Zone}
				zones[n.Zone] = z
				order = append(order, n.Zone)
			}
			z.Nodes++
			if unhealthy {
				z.Unhealthy++
			}
		}
		if unhealthy {
			f.Unhealthy++
		}
		if n.Name == self {
			continue
		}
		phase, admitted := r.peek(n.Name)
		if phase.InFlight() {
			f.InFlight++
		}
		if admitted.After(f.LastFenceAt) {
			f.LastFenceAt = admitted
		}
	}
	for _, z := range order {
		f.Zones = append(f.Zones, *zones[z])
	}
	return f
}

// peek reads another node's last committed phase and admission time.
func (r *Runner) peek(name string) (fence.Phase, time.Time) {
	r.mu.Lock()
	rec := r.nodes[name]
	r.mu.Unlock()
	if rec == nil {
		return fence.Healthy, time.Time{}
	}
	rec.pubMu.Lock()
	defer rec.pubMu.Unlock()
	return rec.pubPhase, rec.pubAdmitted
}
