// Package runner executes the fence engine's decisions. It is the only part of
// the fence path with side effects: it feeds observations and action results
// to fence.Step, executes the Actions in the order Step gives them (persist →
// BMC operation → read back → taint → pods), owns the clock, and talks to BMCs
// and to the cluster only through the small interfaces declared here.
//
// A bounded pool of workers syncs the nodes that are due or changed, never
// one node in two workers at once, so a node's Steps never overlap; BMC
// calls across nodes are bounded by bmc.concurrency slots, which fences
// before their taint get first (slots.go). Cancelling Run's context
// (leadership lost) cancels every in-flight call; whatever was persisted lets
// the next leader resume exactly.
package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/mutant"
)

// PowerController is what the runner needs from a node's BMC.
type PowerController interface {
	PowerStatus(ctx context.Context) (bmc.PowerStatus, error)
	// PowerOff always sends a hard off; an "already in that state" answer
	// wraps bmc.ErrAlreadyInState (see bmc.Controller).
	PowerOff(ctx context.Context) (bmc.Result, error)
	PowerOn(ctx context.Context) (bmc.Result, error)
	// Key identifies the BMC target (normalised address and system): when
	// it changes, another machine may answer (invariant 3).
	Key() string
	// Verify checks that the target answers for the node's machine (its
	// system UUID against the Node's, or an explicit expected UUID). A
	// target whose identity cannot be checked fails, unless the inventory
	// opts the node in explicitly.
	Verify(ctx context.Context) error
}

// Inventory finds a node's BMC.
type Inventory interface {
	Controller(node string) (PowerController, bool)
}

// PolicySource is optionally implemented by a PowerController whose
// inventory entry overrides parts of the policy for its node (its settle
// windows: a vendor's longer power-cycle dwell).
type PolicySource interface {
	Policy(base fence.Policy) fence.Policy
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
	// KubeletAddr is where the node's kubelet port is reached,
	// "InternalIP:port" (status.daemonEndpoints.kubeletEndpoint.Port); ""
	// when the node shows none. Probed for suspect nodes only.
	KubeletAddr string
}

// Recheck is the server's current word on what may stop a fence.
type Recheck struct {
	// LeaseRenewed: the server holds a Lease renewal, or a Ready
	// heartbeat, that our view has not taken in: the node is alive.
	LeaseRenewed bool
	Maintenance  bool
	Excluded     bool
	// State is the state annotation on the server: the fencing token.
	State string
	// HeartbeatAt and RenewedAt are our view of the node's signs of life
	// now (fence.NodeView's, on our clock), after whatever our own reads
	// took in since the decision: the state persist right before a
	// ForceOff reads the node from the server, and a view that takes in
	// what it read has seen a heartbeat that the decision did not. The
	// runner compares them with the view the engine decided on.
	HeartbeatAt time.Time
	RenewedAt   time.Time
	// LeaseMissing: the server has no Lease for the node, or one with no
	// renewTime (a 404 or an empty Lease): such a read proves nothing of
	// its renewals (leaseread.go).
	LeaseMissing bool
}

// blocks says why the recheck forbids a power-off or a taint, or "". token
// is the state annotation this runner last wrote; alive says whether a
// renewal blocks (not for keep-off: a machine found On while its volumes
// are being detached is forced off whatever its kubelet says); decided is
// the view the engine decided on.
func (c Recheck) blocks(token string, alive bool, decided fence.NodeView) error {
	switch {
	case fence.Enabled(fence.CheckFencingToken) && c.State != token:
		return fmt.Errorf("not acting: %w: the fence state on the server is not the one this agent wrote (another agent took over)", ErrConflict)
	case c.Maintenance:
		return errors.New("not acting: the node is now under maintenance")
	case c.Excluded:
		return errors.New("not acting: the node is now excluded from fencing")
	case c.LeaseRenewed && alive:
		// Before a power-off: it is alive. Before a taint: it is alive
		// while its BMC reads Off, so the BMC is not this node's.
		return errors.New("not acting: the node renewed its Lease since we last saw it (our view was behind)")
	case alive && fence.Enabled(fence.CheckRecheckDecided) &&
		(c.HeartbeatAt.After(decided.HeartbeatAt) || c.RenewedAt.After(decided.RenewedAt)):
		// A sign of life our view took in after the decision (our own
		// read of the node, the persist's, brought it): not news to the
		// server comparison above, news to the decision.
		return fmt.Errorf("not acting: the node showed a sign of life at %s, after the view this decision rested on (%s)",
			c.HeartbeatAt.UTC().Format("15:04:05.000"), decided.HeartbeatAt.UTC().Format("15:04:05.000"))
	}
	return nil
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
	// ApplyTaint, RemoveTaint and DeleteTerminatingPods carry the fencing
	// token (invariant 4): the state annotation this runner last wrote.
	// Each refuses with ErrConflict, in the same resourceVersion-guarded
	// write, when the annotation on the server is not token: a paused or
	// deposed leader can never land one.
	ApplyTaint(ctx context.Context, node, token string) error
	RemoveTaint(ctx context.Context, node, token string) error
	DeleteTerminatingPods(ctx context.Context, node, token string) (int, error)
	// ForgetTaint removes our owner mark if the taint it names is gone
	// from the node (someone removed our taint by hand). It never removes
	// a taint.
	ForgetTaint(ctx context.Context, node, token string) error
	Event(node string, ev fence.Event)
}

// Recorder receives what the runner measures (BMC request metrics are the
// inventory's: it knows the protocol). Implementations must be cheap and
// safe for concurrent use.
type Recorder interface {
	Phase(node string, p fence.Phase)
	// Fence is called once per applied taint with the reason ("accepted",
	// "unassisted", "attested") and the time from the failure's start to
	// the taint.
	Fence(result, reason string, toTaint time.Duration)
	// Detached is called when a fenced node's pods and volumes are gone,
	// with the time from the taint and from the failure's start.
	Detached(toDetach, failover time.Duration)
	// Refused counts a storm-guard refusal by reason.
	Refused(reason string)
	// KeptOff counts a machine found On between the taint and the end of
	// detach, and forced off again.
	KeptOff(node string)
	// Contradiction counts a fence stopped because the node renewed its
	// Lease after our accepted ForceOff (or a human's attestation).
	Contradiction(node string)
}

// NopRecorder records nothing.
type NopRecorder struct{}

func (NopRecorder) Phase(string, fence.Phase)             {}
func (NopRecorder) Fence(string, string, time.Duration)   {}
func (NopRecorder) Detached(time.Duration, time.Duration) {}
func (NopRecorder) Refused(string)                        {}
func (NopRecorder) KeptOff(string)                        {}
func (NopRecorder) Contradiction(string)                  {}

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
	// Workers bounds how many nodes Run syncs at once (default
	// defaultWorkers). A worker waits through its node's BMC and API
	// calls, so it is kept well above BMCConcurrency.
	Workers int
	// DryRun: read BMCs and decide, but change nothing: no power command,
	// no taint, no pod deletion, no annotation. "Would" decisions are
	// logged and recorded as Events, once per phase.
	DryRun bool
	// VerifyInterval bounds how often a target's identity is checked
	// again between the checks that are never skipped: a new target, and
	// right before every ForceOff and every taint.
	VerifyInterval time.Duration
	// DeadLevelTimeout bounds the read of a fencing level that could not
	// fence at its last read, while a level below it is left to try
	// (levels.go). Default DeadLevelTimeout.
	DeadLevelTimeout time.Duration
	// ID names this runner in the states it writes (State.Writer): a state
	// written by any other ID is adopted onto our clock before use
	// (fence.Adopt). Default: a random ID, new for every runner.
	ID string
	// BeforeAct, if set, is called before each action of a Step runs (the
	// persist, a BMC call, a taint...). The simulation uses it to run other
	// workers and other agents in that gap, and to pause a leader between
	// its decision and its write. Production code leaves it nil.
	BeforeAct func(node string, action fence.ActionKind, decided fence.State)
	// EvidenceInterval bounds how often a suspect node's hung-node
	// evidence is read again (EvidenceReader); default
	// DefaultEvidenceInterval.
	EvidenceInterval time.Duration
	// Events, if set, is where the runner hears the power-off events the
	// nodes' BMCs push (docs/safety.md, "Power events"): every Step's view
	// carries the node's latest one. Nil: no events, polling only.
	Events PowerEvents
	// NodeName is the node this agent's replica runs on (the downward
	// API's spec.nodeName, env NODE_NAME): its view says RunsThisAgent, and
	// the engine sends no power-off to it (check own-node). Empty: unknown,
	// and the rule cannot apply (the agent logs it once at start).
	NodeName string
	// KubeletProbe, if set, probes the kubelet port of suspect nodes
	// (kubeletport.go); their views carry the answer, which only names the
	// failure's class in Events. Nil: not probed.
	KubeletProbe KubeletProber
}

// PowerEvents is the leader's view of the BMCs' event streams.
type PowerEvents interface {
	// OffEvent returns the latest power-off event the stream of the node's
	// BMC delivered, and the system of the node's inventory entry as that
	// stream names systems; ok is false when the node's BMC has no stream
	// up (polling only).
	OffEvent(node string) (ev fence.PowerEvent, system string, ok bool)
}

// maxStepsPerSync bounds one sync's chain of Step → action → result. A fence
// needs a handful; a loop that does not settle is a bug, and the node is
// retried on the next wake instead of spinning.
const maxStepsPerSync = 32

// defaultWorkers is Run's pool size: enough that fences waiting for a BMC
// slot (default 8) or on a slow API call leave workers for the rest
// (a fence's next step, a changed node), a small fixed cost whatever the
// fleet's size (an idle worker is a parked goroutine). In a power loss of
// 100 at 1000 nodes × 30 pods, state writes, rechecks and taints took 1 to
// 5 s each on the loaded API server, and 32 workers spent 20 to 22 of
// their number in those calls from +10 s to +40 s: the settle reads and
// first looks of the other fences queued behind them (the median settle
// took 13 s where its reads span 6 s). The API server's limits (400
// requests in flight by default) are far from 64.
const defaultWorkers = 64

// retryAfterError is how soon a node is retried after a failed persist.
const retryAfterError = 2 * time.Second

// Runner drives every node's fence lifecycle.
type Runner struct {
	opts Options
	log  *zap.Logger
	// slots bounds the BMC calls in flight, fences before their taint
	// first (slots.go).
	slots *bmcSlots
	// notify carries Notify's names to Run's loop.
	notify chan string
	// handed and returned count the syncs Run's loop handed to its workers
	// and heard back from (tests read them: a quiet node's renewal is not
	// handed).
	handed, returned atomic.Int64

	mu    sync.Mutex
	nodes map[string]*record
	// retired is the latest admission of a node whose record was dropped
	// (the node was deleted): the cooldown still counts from it.
	retired time.Time

	// admitMu makes the storm guard's admission atomic across workers
	// (invariant 6): the fleet view, the Step that reads it and the
	// publication of what it admitted happen under it, so no two workers
	// admit against the same count.
	admitMu sync.Mutex

	// stormSaid is when the last storm refusal was announced (stormEvent).
	stormMu   sync.Mutex
	stormSaid time.Time

	// persisted caches, per node, what its state annotation says about its
	// fence when another process wrote it (persistedFence): the fleet view
	// counts those fences too.
	persistedMu sync.Mutex
	persisted   map[string]persistedFence

	// kubeletSem bounds the kubelet-port probes in progress.
	kubeletSem chan struct{}
	// deleteSem bounds the force-deletes of terminating pods in progress
	// to a sixteenth of the workers (forceDeleteShare).
	deleteSem chan struct{}
}

// forceDeleteShare is the share of the workers that may be in a
// force-delete of a tainted node's terminating pods at once. A pass is an
// API call per pod and two more, repeated every detachPoll while pods are
// left; on an API server saturated by a correlated failure each call may
// take a minute. At 1000 nodes × 30 pods, 31 of 32 workers were in such
// passes 130 s into 100 power losses, while a fence before its taint, which
// races the clock, waited for a worker. The pod GC deletes those pods too;
// our pass only hastens the detach, so it is the work that waits.
// A sixteenth: 4 of the default 64 workers, as many passes as with 32
// workers, so that more workers mean more fences stepping, not more load.
func forceDeleteShare(workers int) int { return max(1, workers/16) }

// persistedFence is what a node's state annotation, written by another
// process, says about its fence: decoded once per distinct annotation.
type persistedFence struct {
	raw       string
	ours      bool // written by this runner: our memory is authoritative
	phase     fence.Phase
	powerLoss bool
	// admitted is the writer's admission time (on its clock), seenAt when
	// we first saw that admission (on ours): the cooldown counts from it.
	admitted time.Time
	seenAt   time.Time
}

// stormEventEvery is how often a storm that goes on is announced again: a
// thousand nodes refused for the same reason make one Event, not a
// thousand; each node's own refusal stays in its evidence annotation and
// in bmcfence_storm_guard_refusals_total.
const stormEventEvery = 10 * time.Minute

// record is the runner's memory of one node.
type record struct {
	name string
	// kubelet is the node's latest kubelet-port probe (kubeletport.go).
	kubelet kubeletAnswer
	self    string     // the runner's ID (State.Writer of its own states)
	mu      sync.Mutex // held by the node's sync; fleet reads take it briefly
	// state is the engine state; raw is its last persisted encoding (what
	// the annotation holds as far as we know), and ours says whether this
	// runner wrote it.
	state fence.State
	raw   string
	ours  bool
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
	// verifiedKey and verifiedAt: the target whose identity was last
	// checked successfully, and when.
	verifiedKey string
	verifiedAt  time.Time
	// silentLevels: the levels (by Key) that could not fence at their
	// last read (levels.go, DeadLevelTimeout).
	silentLevels map[string]bool
	// would dedupes dry-run announcements: one per phase entry.
	would map[fence.ActionKind]time.Time
	// evidence: the node's hung-node evidence (evidence.go).
	evidence evidence
	// leaseRead: the node's latest live Lease read (leaseread.go).
	leaseRead leaseRead
	// wakeAt: when a fence's last sync asked to be synced again; a sync
	// later than that by more than syncLateLog is logged (how long a
	// settle's reads wait for a worker under load).
	wakeAt time.Time

	// pub is what other nodes' fleet views read: the last committed phase,
	// and the latest admission (or ForceOff) this node's fences ever had,
	// under its own lock so a node busy on a BMC call never stalls the
	// others. The admission outlives the fence: one that ended (the node
	// renewed, a human aborted) still counts for the cooldown. Only our
	// own states' admissions are on our clock; another writer's count
	// from when we first saw them (persistedFence).
	pubMu        sync.Mutex
	pubPhase     fence.Phase
	pubAdmitted  time.Time
	pubPowerLoss bool

	// quiet: the last sync was one tick of a Healthy node that decided
	// nothing (no action); quietInfo is the node as that tick saw it (its
	// View as decided on), quietPolicy the node's policy then, and
	// quietUntil when that tick asked to be stepped again. Until then, a
	// sync whose node differs only by later signs of life (a Lease
	// renewal) steps nothing (renewalOnly).
	quiet       bool
	quietInfo   NodeInfo
	quietPolicy fence.Policy
	quietUntil  time.Time
}

func (rec *record) publish() { rec.reserve(rec.state) }

// reserve publishes s (a decision not yet persisted) to the other workers'
// fleet views, so that an admission holds its place at once; publish puts
// back the committed state if the decision does not stick.
func (rec *record) reserve(s fence.State) {
	rec.pubMu.Lock()
	rec.pubPhase, rec.pubPowerLoss = s.FleetPhase(), s.PowerLoss
	if s.Writer == rec.self && s.AdmittedAt.After(rec.pubAdmitted) {
		rec.pubAdmitted = s.AdmittedAt
	}
	rec.pubMu.Unlock()
}

// randomID names a runner: 8 random bytes in hex.
func randomID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("runner: no randomness for an ID: %v", err)) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
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
	if opts.Workers <= 0 {
		opts.Workers = defaultWorkers
	}
	if opts.Workers < opts.BMCConcurrency {
		opts.Workers = opts.BMCConcurrency
	}
	if opts.DeadLevelTimeout <= 0 {
		opts.DeadLevelTimeout = DeadLevelTimeout
	}
	if opts.VerifyInterval <= 0 {
		opts.VerifyInterval = time.Hour
	}
	if opts.ID == "" {
		opts.ID = randomID()
	}
	r := &Runner{
		opts:      opts,
		log:       opts.Log,
		nodes:     map[string]*record{},
		persisted: map[string]persistedFence{},
		notify:    make(chan string, 256),

		kubeletSem: make(chan struct{}, kubeletProbeConcurrency),
		deleteSem:  make(chan struct{}, forceDeleteShare(opts.Workers)),
	}
	r.slots = newBMCSlots(opts.BMCConcurrency, r.Notify)
	return r, nil
}

// Run drives every node until ctx is cancelled (leadership lost, shutdown).
//
// One scheduling loop (this goroutine) keeps every node's next due time in
// one heap behind one timer, and hands nodes that are due, or whose view
// changed, to a bounded pool of Options.Workers workers: what a node costs
// at rest is a heap entry, not a goroutine and a timer. A node is never
// handed to two workers at once, so its Syncs never overlap; a change seen
// while it is being synced syncs it again right after that sync.
func (r *Runner) Run(ctx context.Context) error {
	// Load every node before any worker steps, so the first fleet view
	// counts every fence already in flight.
	for _, n := range r.opts.Cluster.Nodes() {
		r.recordFor(n.Name)
	}
	jobs := make(chan string)
	results := make(chan synced)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; i < r.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(ctx, jobs, results)
		}()
	}

	ready, due := newReadyQueue(r.inFlight), newDueHeap()
	// started: the nodes the loop knows (queued, running or due). A node
	// deleted leaves it when its sync says gone, so that a node re-created
	// under the same name is scheduled again.
	started := map[string]bool{}
	start := func(name string) {
		started[name] = true
		r.recordFor(name)
		ready.add(name)
	}
	for name := range r.snapshotNames() {
		start(name)
	}
	resync := r.opts.Clock.NewTicker(30 * time.Second)
	defer resync.Stop()
	var timer clock.Timer
	var armed time.Time // when timer fires; zero: no timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		now := r.opts.Clock.Now()
		for {
			name, ok := due.popDue(now)
			if !ok {
				break
			}
			ready.add(name)
		}
		var fired <-chan time.Time
		if at, ok := due.next(); ok {
			if !at.Equal(armed) {
				if timer != nil {
					timer.Stop()
				}
				timer, armed = r.opts.Clock.NewTimer(at.Sub(now)), at
			}
			fired = timer.C()
		}
		var send chan<- string
		head, ok := ready.head()
		if ok {
			send = jobs
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case send <- head:
			ready.take()
			r.handed.Add(1)
		case res := <-results:
			r.returned.Add(1)
			again := ready.done(res.name)
			switch {
			case res.gone:
				delete(started, res.name)
				due.remove(res.name)
				if _, ok := r.opts.Cluster.Node(res.name); ok {
					start(res.name)
				}
			case again:
				ready.add(res.name)
			default:
				due.set(res.name, r.opts.Clock.Now().Add(res.after))
			}
		case name := <-r.notify:
			if started[name] {
				due.remove(name)
				ready.add(name)
			}
		case name := <-r.opts.Cluster.Changed():
			if !started[name] {
				start(name)
				continue
			}
			if at, ok := due.at(name); ok {
				if until, skip := r.renewalSkips(name); skip || mutant.On(mutant.QuietRenewalsOnly) {
					if skip && until.Before(at) {
						due.set(name, until)
					}
					continue
				}
			}
			due.remove(name)
			ready.add(name)
		case <-fired:
			timer, armed = nil, time.Time{}
		case <-resync.C():
			for _, n := range r.opts.Cluster.Nodes() {
				if !started[n.Name] {
					start(n.Name)
				}
			}
		}
	}
}

// inFlight reports whether the node's fence is in flight as last
// committed (fence.Phase.InFlight): the scheduling loop hands such nodes
// to workers first.
func (r *Runner) inFlight(name string) bool {
	r.mu.Lock()
	rec := r.nodes[name]
	r.mu.Unlock()
	if rec == nil {
		return false
	}
	ph, _, _ := rec.published()
	return ph.InFlight()
}

// synced is one Sync's outcome, from a worker to the scheduling loop.
type synced struct {
	name  string
	after time.Duration
	gone  bool
}

// worker syncs the nodes the scheduling loop hands it until ctx ends. A
// deleted node's record is dropped here, before the loop hears of it.
func (r *Runner) worker(ctx context.Context, jobs <-chan string, results chan<- synced) {
	for {
		var name string
		select {
		case <-ctx.Done():
			return
		case name = <-jobs:
		}
		after, gone := r.Sync(ctx, name)
		if gone {
			r.drop(name)
		}
		select {
		case <-ctx.Done():
			return
		case results <- synced{name: name, after: after, gone: gone}:
		}
	}
}

// drop forgets a deleted node's record. Its latest admission still counts
// for the cooldown (retired).
func (r *Runner) drop(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.nodes[name]
	if rec == nil {
		return
	}
	delete(r.nodes, name)
	if _, admitted, _ := rec.published(); admitted.After(r.retired) {
		r.retired = admitted
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
		rec = &record{name: name, self: r.opts.ID}
		if info, ok := r.opts.Cluster.Node(name); ok {
			rec.load(info.State)
		}
		r.nodes[name] = rec
	}
	return rec
}

// load adopts the annotation as the node's state. An annotation we cannot
// read puts the node on hold: never fenced, and never overwritten (a newer
// agent may have written it).
func (rec *record) load(raw string) {
	rec.raw, rec.ours = raw, false
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
	rec.raw, rec.ours = raw, true
}

// Sync runs one node to quiescence: it steps the engine, executes the actions,
// feeds each result back, and returns when nothing more is due now, with the
// time until the node wants stepping again. gone reports the node was
// deleted. Sync is exported for the deterministic simulation, which calls it
// directly with a fake clock.
func (r *Runner) Sync(ctx context.Context, name string) (after time.Duration, gone bool) {
	// The proof of the view's freshness is read before the view: a list of
	// the Leases that completes between the two would pair the node's old
	// renewal with a proof that covers a newer one (the view then looks
	// fresh and silent when it is neither). Read first, the proof can only
	// be older than the view, which is the safe side.
	fresh := r.opts.Cluster.APIFreshAt()
	info, ok := r.opts.Cluster.Node(name)
	if !ok {
		r.opts.Recorder.Phase(name, fence.Healthy)
		return 0, true
	}
	rec := r.recordFor(name)
	defer r.noteWake(rec, name, r.opts.Clock.Now(), &after)
	r.probeKubelet(ctx, rec, info)
	r.readLease(ctx, rec, info)
	rec.mu.Lock()
	defer rec.mu.Unlock()

	if rec.changedBySomeoneElse(info.State) {
		// Another agent or a human wrote the annotation (or removed it):
		// theirs wins.
		rec.load(info.State)
	}
	if rec.hold != nil {
		// Versions mix during a rollout or a rollback: a newer bmcfence may
		// have written what this one cannot read. Acting on the part we can
		// read would drop the rest (docs/safety.md, invariant 16).
		r.opts.Cluster.Event(name, fence.Event{Warning: true, Reason: "FenceStateUnreadable",
			Message: fmt.Sprintf("cannot read the fence state annotation (%v): a newer bmcfence may have written it (a rollout or a rollback under way), or someone edited it; this agent will not act on this node, nor overwrite its state, until an agent that reads it leads or the annotation is removed", rec.hold)})
		r.log.Warn("fence state unreadable; node held", zap.String("node", name), zap.Error(rec.hold))
		return 5 * time.Minute, false
	}

	if wait, ok := r.renewalOnly(rec, info); ok {
		return wait, false
	}
	rec.quiet = false

	in := fence.Input{Kind: fence.InputTick}
	ackID := ""
	if info.Command != nil && (info.CommandID == "" || info.CommandID != rec.acked) {
		in = fence.Input{Kind: fence.InputCommand, Command: *info.Command}
		ackID = info.CommandID
	}
	for i := 0; i < maxStepsPerSync; i++ {
		decidedAt := r.opts.Clock.Now()
		out, decided := r.decide(name, rec, info, fresh, in)
		next, retry := r.execute(ctx, name, rec, out, ackID, decided)
		// What execute committed is what others see; a reservation whose
		// persist failed is withdrawn.
		rec.publish()
		r.opts.Recorder.Phase(name, rec.state.Phase)
		if retry > 0 {
			return retry, false
		}
		ackID = ""
		if next == nil || ctx.Err() != nil {
			if i == 0 && in.Kind == fence.InputTick && len(out.Actions) == 0 && ctx.Err() == nil {
				r.noteQuiet(name, rec, info, decided, out.RecheckAfter)
			}
			if slices.ContainsFunc(out.Actions, func(a fence.Action) bool { return a.Kind == fence.ActDeletePods }) {
				// A force-delete pass is polled every DetachPoll counted
				// from its tick: from its end, so that a pass slower
				// than that does not start the next at once.
				return out.RecheckAfter, false
			}
			return r.wakeAfter(out.RecheckAfter, decidedAt), false
		}
		in = *next
		fresh = r.opts.Cluster.APIFreshAt()
		if info, ok = r.opts.Cluster.Node(name); !ok {
			return 0, true
		}
	}
	r.log.Error("fence engine did not settle; retrying later", zap.String("node", name), zap.Int("steps", maxStepsPerSync))
	return retryAfterError, false
}

// minWake is the least wakeAfter returns (or RecheckAfter, if less).
const minWake = 50 * time.Millisecond

// wakeAfter is how long from now a step decided at decidedAt, which asked
// to be stepped again after d, wants its next: d counts from its decision,
// not from the end of its actions. At 1000 × 30, while 100 power losses
// were fenced, a settle's read due 3 s after the one before waited 3 s
// after a state write that took 4 s: the reads spread over 7.5 s where 6 s
// would do, and the taint came that much later. Waking early is harmless:
// the engine's read timers are absolute (NextReadAt), and a step with
// nothing due does nothing but say when it is. A force-delete pass, polled
// from its tick, is the exception (Sync).
func (r *Runner) wakeAfter(d time.Duration, decidedAt time.Time) time.Duration {
	return max(d-r.opts.Clock.Since(decidedAt), min(d, minWake))
}

// syncLateLog: a fence's sync this late after the time it asked for is
// logged.
const syncLateLog = 500 * time.Millisecond

// noteWake logs a fence's sync that started late, and remembers when its
// next is due. Healthy nodes are not tracked: their syncs are idle checks.
func (r *Runner) noteWake(rec *record, name string, start time.Time, after *time.Duration) {
	now := r.opts.Clock.Now()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !rec.wakeAt.IsZero() && start.Sub(rec.wakeAt) > syncLateLog {
		r.log.Info("fence sync late", zap.String("node", name), zap.Stringer("phase", rec.state.Phase), zap.Duration("late", start.Sub(rec.wakeAt)))
	}
	rec.wakeAt = time.Time{}
	// Only a written fence on its way to the taint: at 1000 × 30 a power
	// loss's load made hundreds of live nodes' renewals late, and their
	// unsaved suspicions, and the detach polls after the taints, said
	// nothing worth 3 000 lines.
	if ph := rec.state.Phase; ph != fence.Healthy && ph.PreTaint() && !rec.state.Unsaved && *after > 0 {
		rec.wakeAt = now.Add(*after)
	}
}

// noteQuiet remembers a Healthy node's tick that decided nothing, and the
// view it decided on, for renewalOnly.
func (r *Runner) noteQuiet(name string, rec *record, info NodeInfo, decided fence.NodeView, after time.Duration) {
	if rec.state.Phase != fence.Healthy || rec.state.Warned {
		return
	}
	info.View = decided
	rec.quiet, rec.quietInfo, rec.quietPolicy = true, info, r.policy(name)
	rec.quietUntil = r.opts.Clock.Now().Add(after)
}

// renewalOnly reports whether a sync of a quiet node (noteQuiet) may step
// nothing, and how long until its next step is due: the node is what its
// last tick saw but for later signs of life (a Lease renewal, a Ready
// heartbeat: a hundred a second at 1000 nodes), its policy and state are
// unchanged, no command waits, and that tick's wake is still ahead. Such a
// tick would decide nothing either: a Healthy node's step is monotone in
// its signs of life (a later one only puts its silence, and every timer
// that silence starts, later), so the wake the last tick asked for comes
// no later than any a step now would ask for, and the step at that wake
// sees the renewal. Only a Healthy node is skipped: in a fence every
// renewal reaches the decision (a renewal after our ForceOff stops it).
func (r *Runner) renewalOnly(rec *record, info NodeInfo) (time.Duration, bool) {
	if !rec.quiet || rec.state.Phase != fence.Healthy || info.Command != nil {
		return 0, false
	}
	wait := rec.quietUntil.Sub(r.opts.Clock.Now())
	if wait <= 0 {
		return 0, false
	}
	q := rec.quietInfo
	v := r.view(info)
	if info.Name != q.Name || info.Zone != q.Zone || info.State != q.State || info.CommandID != q.CommandID ||
		v.HeartbeatAt.Before(q.View.HeartbeatAt) || v.RenewedAt.Before(q.View.RenewedAt) {
		return 0, false
	}
	if r.policy(info.Name) != rec.quietPolicy || !sameButSignsOfLife(v, q.View) {
		return 0, false
	}
	return wait, true
}

// renewalSkips reports whether a change to a node that is due later (in
// no worker's hands, in no queue) is one its sync would do nothing for: a
// renewal of a quiet node (renewalOnly), which steps nothing and asks for
// the wake the node is already due at (until). The scheduling loop then
// keeps the node's due time instead of handing the sync to a worker: at
// 1000 nodes, a hundred hand-offs a second (two channel sends and a
// worker's wake for each Lease renewal) saved. Besides its step, a sync
// may probe the kubelet port (a node silent SuspectAfter), forget an
// earlier kubelet answer, or read the Lease live (with events, a node
// silent EventSilence); each is ruled out here, so a skipped sync is one
// that would have changed nothing. renewalOnly compares the state
// annotation with the quiet tick's, so a state someone else wrote is
// never skipped (that sync loads it).
func (r *Runner) renewalSkips(name string) (until time.Time, ok bool) {
	info, ok := r.opts.Cluster.Node(name)
	if !ok {
		return time.Time{}, false
	}
	r.mu.Lock()
	rec := r.nodes[name]
	r.mu.Unlock()
	if rec == nil {
		return time.Time{}, false
	}
	silent := fence.SilentFor(info.View, r.opts.Clock.Now())
	if info.View.HeartbeatAt.IsZero() || silent >= r.opts.Policy.SuspectAfter ||
		(r.opts.Events != nil && silent >= r.policy(name).EventSilence) {
		return time.Time{}, false
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !rec.loaded || rec.hold != nil || rec.kubelet != (kubeletAnswer{}) {
		return time.Time{}, false
	}
	if _, ok := r.renewalOnly(rec, info); !ok {
		return time.Time{}, false
	}
	return rec.quietUntil, true
}

// sameButSignsOfLife reports whether two views of a node are equal in
// every field but HeartbeatAt and RenewedAt (which renewalOnly compares
// itself: later is allowed) and HeartbeatFrom (which moves with
// HeartbeatAt: a renewal just taken in starts the silence again, so its
// placement cannot make a quiet node act). Field by field, explicitly: it replaced a
// reflect.DeepEqual of the whole view (3% of the agent's CPU at 300 nodes;
// a hundred renewals a second at 1000). A field added to NodeView must be
// added here, or the skip would hide its change:
// TestSameButSignsOfLifeSeesEveryField fails until it is. time.Time fields
// compare with == as DeepEqual did: the same instant with another
// monotonic reading or location counts as a change, which only costs a
// step.
func sameButSignsOfLife(a, b fence.NodeView) bool {
	return a.Ready == b.Ready && a.NotReadySince == b.NotReadySince &&
		a.Maintenance == b.Maintenance && a.MaintenanceExpired == b.MaintenanceExpired &&
		a.Excluded == b.Excluded && a.HasBMC == b.HasBMC && a.Remediation == b.Remediation &&
		a.Taint == b.Taint && a.Pods == b.Pods && a.PodsUnknown == b.PodsUnknown && a.VolumeAttachments == b.VolumeAttachments &&
		slices.Equal(a.Blockers, b.Blockers) && a.Terminating == b.Terminating &&
		a.PlannedReboot == b.PlannedReboot && a.PlannedRebootAt == b.PlannedRebootAt && a.PlannedRebootBy == b.PlannedRebootBy &&
		a.ControlPlane == b.ControlPlane && a.OffEvent == b.OffEvent && a.BMCSystem == b.BMCSystem &&
		a.RunsThisAgent == b.RunsThisAgent && a.KubeletPort == b.KubeletPort &&
		a.LeaseReadAt == b.LeaseReadAt
}

// decide steps the engine on the node's current view, and returns the view
// it decided on. The state is adopted onto our clock first when another
// process wrote it (invariant 5). Under admitMu, what the Step admitted is
// published before any other worker reads the fleet (invariant 6).
func (r *Runner) decide(name string, rec *record, info NodeInfo, fresh time.Time, in fence.Input) (fence.Output, fence.NodeView) {
	atomic := fence.Enabled(fence.CheckAdmission)
	if atomic {
		r.admitMu.Lock()
		defer r.admitMu.Unlock()
	}
	now := r.opts.Clock.Now()
	in.Node = r.view(info)
	in.Node.KubeletPort = rec.kubelet.port
	in.Node.LeaseReadAt = rec.leaseRead.proves(in.Node)
	// A state another process wrote is taken over by writing it back as
	// ours (invariant 4): that process may have stalled between a decision
	// and its write, and the annotation it wrote is its fencing token.
	// Until we write, its taint or ForceOff still lands, whatever we
	// decided meanwhile; reading, deciding nothing, is not enough. The
	// annotation, not the state in memory (adopted already, even if the
	// write failed), says whether we have.
	takeover := rec.raw != "" && !rec.ours
	if rec.state.Writer != r.opts.ID && fence.Enabled(fence.CheckOneClock) {
		rec.state = fence.Adopt(r.policy(name), rec.state, r.opts.ID, in.Node, now)
	}
	// The fleet view costs a pass over every node. A healthy node's tick
	// (a Lease renewal, a timer: a hundred a second at 1000 nodes) never
	// consults it: only a reading or a command leads to a ForceOff or a
	// taint. Such a step gets the zero view, which admits nothing (its
	// API view is never fresh), so a mistake here refuses, never admits.
	if rec.state.Phase != fence.Healthy || in.Kind != fence.InputTick {
		if mutant.On(mutant.FreshBeforeView) {
			fresh = r.opts.Cluster.APIFreshAt() // the mutant: read after the view
		}
		in.Fleet = r.fleet(name, now, fresh)
	}
	in.Write = takeover
	out := fence.Step(r.policy(name), rec.state, in, now)
	if takeover {
		out.State.Writer = r.opts.ID
		if !slices.ContainsFunc(out.Actions, func(a fence.Action) bool { return a.Kind == fence.ActPersist }) {
			out.Actions = append([]fence.Action{{Kind: fence.ActPersist}}, out.Actions...)
		}
	}
	if atomic {
		rec.reserve(out.State)
	}
	return out, in.Node
}

// policy is the node's policy: ours, with its inventory entry's overrides.
func (r *Runner) policy(name string) fence.Policy {
	if ctrl, ok := r.opts.Inventory.Controller(name); ok {
		if ps, ok := ctrl.(PolicySource); ok {
			return ps.Policy(r.opts.Policy)
		}
	}
	return r.opts.Policy
}

func (r *Runner) view(info NodeInfo) fence.NodeView {
	v := info.View
	_, v.HasBMC = r.opts.Inventory.Controller(info.Name)
	v.RunsThisAgent = r.opts.NodeName != "" && info.Name == r.opts.NodeName
	if r.opts.Events != nil {
		if ev, system, ok := r.opts.Events.OffEvent(info.Name); ok {
			v.OffEvent, v.BMCSystem = ev, system
		}
	}
	return v
}

// Notify steps the node soon: something its view carries changed outside
// the cluster (a power event its BMC pushed). It never blocks: a full
// queue drops it (the node's own timers still run).
func (r *Runner) Notify(name string) {
	select {
	case r.notify <- name:
	default:
	}
}

// fleet summarises every other node for the storm guard. A node counts in
// flight when our memory says so (a decision not yet persisted included:
// the admission is atomic across our workers) or when its persisted state,
// written by another process, does: in a split brain, until leader election
// sorts it out, two agents act, and each must count the other's fences
// (invariant 6). Another process's admission counts for the cooldown from
// when we first saw it, on our clock. fresh is the proof of the view's
// freshness read before the node's view (Sync).
func (r *Runner) fleet(self string, now, fresh time.Time) fence.FleetView {
	f := fence.FleetView{APIFreshAt: fresh}
	var lastPersisted time.Time
	zones := map[string]*fence.ZoneHealth{}
	var order []string
	nodes := r.opts.Cluster.Nodes()
	for _, n := range nodes {
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
		phase, powerLoss := r.peek(n.Name)
		if pf := r.persistedFence(n.Name, n.State, now); !pf.ours && fence.Enabled(fence.CheckSplitBrainCount) {
			if !phase.InFlight() && pf.phase.InFlight() {
				phase, powerLoss = pf.phase, pf.powerLoss
			}
			if pf.seenAt.After(lastPersisted) {
				lastPersisted = pf.seenAt
			}
		}
		if phase.InFlight() {
			if powerLoss {
				f.InFlightPowerLoss++
			} else {
				f.InFlight++
			}
		}
	}
	for _, z := range order {
		f.Zones = append(f.Zones, *zones[z])
	}
	f.LastFenceAt = r.lastAdmission(self)
	if lastPersisted.After(f.LastFenceAt) {
		f.LastFenceAt = lastPersisted
	}
	r.controlPlane(nodes, self, now, &f)
	return f
}

// controlPlane counts the control-plane nodes for the etcd rules
// (docs/safety.md, "Control-plane nodes"): all of them, maintenance
// included (an etcd member runs whatever the agent may do); the others in
// flight; the others whose machines may run: every one but those our fence
// confirmed off (Tainting, Detaching, Fenced), or may have powered off (in
// flight, or held for a human in Stuck). A phase comes from our
// memory, or, where another process wrote the node's state, from that
// state (as for InFlight); a state we cannot read counts in flight.
//
// nodes is the fleet view's one read of the cluster (one pass, not two).
func (r *Runner) controlPlane(nodes []NodeInfo, self string, now time.Time, f *fence.FleetView) {
	for _, n := range nodes {
		if !n.View.ControlPlane {
			continue
		}
		f.ControlPlaneNodes++
		if n.Name == self {
			continue
		}
		phase, _ := r.peek(n.Name)
		if pf := r.persistedFence(n.Name, n.State, now); !pf.ours && fence.Enabled(fence.CheckSplitBrainCount) && pf.phase != fence.Healthy {
			if !phase.InFlight() && pf.phase.InFlight() || phase == fence.Healthy {
				phase = pf.phase
			}
		}
		// A node held for a human (Stuck) may be off by our ForceOff:
		// it is in a fence, and its machine is not counted as running.
		if phase.InFlight() || phase == fence.Stuck {
			f.ControlPlaneInFlight++
		}
		switch phase {
		case fence.Maintenance:
			// A control-plane node in maintenance may be off: a
			// planned drain powers it off, and a fence abandoned for
			// the mark forgot its ForceOff (another leader's memory
			// of it is gone after a failover). It counts as in a
			// fence, its machine as off.
			f.ControlPlaneInFlight++
		case fence.Healthy, fence.Suspect:
			// A fence abandoned before its taint (a maintenance mark,
			// detection turned external) forgets its state, not the
			// ForceOff it sent: a machine we powered off after its
			// last renewal is still off by us, in a fence, until it
			// renews.
			if r.forcedOffSinceRenewal(n.Name, n.View) {
				f.ControlPlaneInFlight++
				continue
			}
			f.ControlPlaneMayRun++
		case fence.Untainting:
			f.ControlPlaneMayRun++
		case fence.ConfirmingOff, fence.PoweringOff, fence.Tainting, fence.Detaching, fence.Fenced, fence.Stuck,
			fence.PoweringOn, fence.Recovering:
			// Off by our fence, or not yet proven back (Recovering
			// waits for Ready after an unfence that may not power on).
		}
	}
}

// forcedOffSinceRenewal: this runner's latest admission or ForceOff of a
// fence of node name (which outlives the fence) came after the node's last
// observed renewal, both on our clock: its machine may be off by our hand.
func (r *Runner) forcedOffSinceRenewal(name string, v fence.NodeView) bool {
	r.mu.Lock()
	rec := r.nodes[name]
	r.mu.Unlock()
	if rec == nil {
		return false
	}
	_, admitted, _ := rec.published()
	return !admitted.IsZero() && admitted.After(v.RenewedAt)
}

// persistedFence reads what node's state annotation raw says about its
// fence, decoding it only when it changed. An annotation this runner wrote
// is marked ours (its memory says more). One it cannot decode (a newer
// agent's, in a rollout) counts as a fence in flight: the guard errs on the
// side of fewer power-offs.
func (r *Runner) persistedFence(node, raw string, now time.Time) persistedFence {
	r.persistedMu.Lock()
	defer r.persistedMu.Unlock()
	pf, ok := r.persisted[node]
	if ok && pf.raw == raw {
		return pf
	}
	pf.raw, pf.ours, pf.phase, pf.powerLoss = raw, false, fence.Healthy, false
	switch s, err := fence.Decode(raw); {
	case raw == "":
	case err != nil:
		pf.phase = fence.PoweringOff
	case s.Writer == r.opts.ID:
		pf.ours = true
	default:
		pf.phase, pf.powerLoss = s.FleetPhase(), s.PowerLoss
		if !s.AdmittedAt.IsZero() && !s.AdmittedAt.Equal(pf.admitted) {
			pf.admitted, pf.seenAt = s.AdmittedAt, now
		}
	}
	r.persisted[node] = pf
	return pf
}

// lastAdmission is the latest admission of a fence on any other node that
// this runner published, deleted nodes' included: deleting a Node object
// mid-fence ends its fence, but does not undo the ForceOff it may have
// sent, so the cooldown still counts from it (invariant 6).
func (r *Runner) lastAdmission(self string) time.Time {
	r.mu.Lock()
	last := r.retired
	recs := make([]*record, 0, len(r.nodes))
	for name, rec := range r.nodes {
		if name != self {
			recs = append(recs, rec)
		}
	}
	r.mu.Unlock()
	for _, rec := range recs {
		if _, admitted, _ := rec.published(); admitted.After(last) {
			last = admitted
		}
	}
	return last
}

// peek reads another node's last committed phase, and whether its fence
// was admitted as a power loss.
func (r *Runner) peek(name string) (fence.Phase, bool) {
	r.mu.Lock()
	rec := r.nodes[name]
	r.mu.Unlock()
	if rec == nil {
		return fence.Healthy, false
	}
	phase, _, powerLoss := rec.published()
	return phase, powerLoss
}

// published is the record's last committed (or reserved) phase, admission
// and admission kind.
func (rec *record) published() (fence.Phase, time.Time, bool) {
	rec.pubMu.Lock()
	defer rec.pubMu.Unlock()
	return rec.pubPhase, rec.pubAdmitted, rec.pubPowerLoss
}
