package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/kube"
)

var _ runner.Cluster = (*Cluster)(nil)

// DefaultSyncTimeout bounds Start's wait for the informer caches. A list of
// every pod in a cluster of several thousand nodes takes seconds; two
// minutes is far beyond a healthy start and short enough that a missing RBAC
// grant (which makes the informers retry forever) surfaces as a clear error
// instead of a hang.
const DefaultSyncTimeout = 2 * time.Minute

// changedBuffer is the capacity of Changed(). Handlers never block on it: a
// full buffer drops the name, and the runner's periodic resync covers it.
// 4096 names absorb a relist of a large cluster at a few tens of KiB.
const changedBuffer = 4096

// Options configure a Cluster.
type Options struct {
	// Clock stamps every observation. Default: the real clock.
	Clock clock.PassiveClock
	// Log receives warnings (malformed requests, watch errors). Default: nop.
	Log *zap.Logger
	// Component is the Event source and the field manager of our writes.
	// Default DefaultComponent.
	Component string
	// ResyncPeriod is the informers' resync period. Default 0 (none): a
	// resync replays our own cache, it proves nothing about the API server,
	// and the runner already re-examines every node periodically.
	ResyncPeriod time.Duration
	// SyncTimeout bounds Start's wait for the caches. Default
	// DefaultSyncTimeout.
	SyncTimeout time.Duration
	// LeaseListPeriod, when set, is the fixed time between two lists of
	// the node Leases (tests); by default it grows with the fleet, a
	// second at 1000 nodes (leaseListPeriod).
	LeaseListPeriod time.Duration
	// PodsOfFencingNodesOnly: watch the pods of a node only while its
	// fence state is Tainting or Detaching (podviews.go), instead of
	// caching every pod of the cluster; the other nodes' views say
	// PodsUnknown. The agent's setting; kubectl-fence shows every node's
	// pods.
	PodsOfFencingNodesOnly bool
}

// Cluster is the runner's view of Kubernetes, backed by informers, and the
// writes it needs. Its methods are safe for concurrent use.
type Cluster struct {
	client    kube.Interface
	clock     clock.PassiveClock
	log       *zap.Logger
	component string
	resync    time.Duration
	// leaseListPeriod: see Options.LeaseListPeriod.
	leaseListPeriod time.Duration
	syncTimeout     time.Duration

	informers    []namedInformer
	nodeInformer cache.SharedIndexInformer
	nodeLister   corelisters.NodeLister
	// podIndexer caches every pod; nil under PodsOfFencingNodesOnly, whose
	// watches of single nodes' pods are podViews (guarded by mu).
	podIndexer cache.Indexer
	podViews   map[string]*podView
	vaIndexer  cache.Indexer
	// runCtx is Start's: the watches of single nodes' pods run under it.
	runCtx context.Context

	changed chan string
	events  *events
	// writeBackoff paces conflict retries (tests make it instant).
	writeBackoff wait.Backoff

	mu      sync.Mutex
	started bool
	entries map[string]*entry
	// remediated: nodes a remediation CR (NodeHealthCheck, MachineHealthCheck)
	// asks to fence, and which CR ("nhc ns/name" or "mhc ns/name"), as the
	// remediation controller last reported (SetRemediated);
	// fence.NodeView.Remediation.
	remediated map[string]string
	// requests: per node, the newest authenticated request not yet taken
	// in (SetRequest); requestTaken is told when a state write takes one.
	requests     map[string]pendingRequest
	requestTaken func(node, id string)
	// nodeGone is told the name of every deleted node (OnNodeDeleted).
	nodeGone []func(node string)
	// stateGen counts node additions, deletions and state annotation
	// changes (StateGeneration).
	stateGen  uint64
	freshAt   time.Time
	watchErrs map[string]error
	// planned: per node, the open planned-reboot signals of other tools
	// (SetPlanned), each with when we first saw it (our clock).
	planned map[string]map[plannedKey]plannedSignal
	// plannedStates: each planned-reboot source's state (PlannedSources).
	plannedStates map[string]PlannedSourceState

	// served: per node, the node as the API server last answered one of
	// our reads or writes (write.go, servedNode), guarded by servedMu.
	servedMu sync.Mutex
	served   map[string]servedNode
}

// entry is one node: our observations, the node as last delivered to our
// handlers, and the NodeInfo built from them (rebuilt lazily when stale).
type entry struct {
	obs   *observation
	node  *corev1.Node // nil until the node's own event arrived
	info  runner.NodeInfo
	stale bool
	// adopted is the resourceVersion of a node we read or wrote ourselves
	// and adopted ahead of the informer (adoptNode), and when; until the
	// informer catches up, older events are not applied.
	adopted   string
	adoptedAt time.Time
}

// adoptTTL bounds how long an adopted node shadows informer events that do
// not provably come after it (see rvAfter). Watch latency is milliseconds;
// only a relist that skipped our exact version makes this matter.
const adoptTTL = 30 * time.Second

// rvAfter reports whether resourceVersion a is provably later than b. The
// API treats resourceVersions as opaque, but every etcd-backed server
// issues increasing integers; if either does not parse, nothing is
// provable and the caller falls back to exact matches and adoptTTL.
func rvAfter(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

// New builds a Cluster. Its informers run from Start; writes and Events
// work at once (the CLI needs no informers for them).
func New(client kube.Interface, opts Options) (*Cluster, error) {
	if client == nil {
		return nil, errors.New("cluster: nil client")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Component == "" {
		opts.Component = DefaultComponent
	}
	if opts.ResyncPeriod < 0 {
		return nil, fmt.Errorf("cluster: negative ResyncPeriod %s", opts.ResyncPeriod)
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = DefaultSyncTimeout
	}
	if opts.LeaseListPeriod < 0 {
		return nil, fmt.Errorf("cluster: negative LeaseListPeriod %s", opts.LeaseListPeriod)
	}
	c := &Cluster{
		client:          client,
		clock:           opts.Clock,
		log:             opts.Log,
		component:       opts.Component,
		resync:          opts.ResyncPeriod,
		syncTimeout:     opts.SyncTimeout,
		leaseListPeriod: opts.LeaseListPeriod,
		changed:         make(chan string, changedBuffer),
		entries:         map[string]*entry{},
		watchErrs:       map[string]error{},
		writeBackoff:    writeBackoff,
	}
	if opts.PodsOfFencingNodesOnly {
		c.podViews = map[string]*podView{}
	}
	if err := c.newInformers(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.nodeLister = corelisters.NewNodeLister(c.nodeInformer.GetIndexer())
	c.events = newEvents(client, opts.Component)
	return c, nil
}

// Start runs the informers until ctx ends and waits, at most SyncTimeout,
// until their caches are filled and our handlers have seen every object.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("cluster: already started")
	}
	c.started = true
	c.runCtx = ctx
	c.mu.Unlock()

	for _, ni := range c.informers {
		go ni.informer.RunWithContext(ctx)
	}
	syncCtx, cancel := context.WithTimeout(ctx, c.syncTimeout)
	defer cancel()
	synced := make([]cache.InformerSynced, 0, 2*len(c.informers))
	for _, ni := range c.informers {
		synced = append(synced, ni.informer.HasSynced, ni.handlerSynced)
	}
	if cache.WaitForCacheSync(syncCtx.Done(), synced...) {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("cluster: stopped while waiting for the informer caches: %w", ctx.Err())
	}
	return c.syncError()
}

// CacheSyncError says Start gave up waiting for the informer caches, which
// ones, and their last list/watch errors (errors.Is/As and apierrors.IsForbidden
// see through it).
type CacheSyncError struct {
	Timeout  time.Duration
	Unsynced []string // informer names: nodes, leases, pods, volumeattachments
	Errs     []error
}

func (e *CacheSyncError) Error() string {
	msg := fmt.Sprintf("cluster: informer caches not synced within %s: %s", e.Timeout, strings.Join(e.Unsynced, ", "))
	if err := errors.Join(e.Errs...); err != nil {
		msg += " (last errors: " + strings.ReplaceAll(err.Error(), "\n", "; ") + ")"
	}
	return msg + "; check the API server address and RBAC: list/watch nodes, pods and volumeattachments, list leases in " + corev1.NamespaceNodeLease
}

func (e *CacheSyncError) Unwrap() []error { return e.Errs }

func (c *Cluster) syncError() *CacheSyncError {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := &CacheSyncError{Timeout: c.syncTimeout}
	for _, ni := range c.informers {
		if ni.informer.HasSynced() && ni.handlerSynced() {
			continue
		}
		e.Unsynced = append(e.Unsynced, ni.name)
		if err := c.watchErrs[ni.name]; err != nil {
			e.Errs = append(e.Errs, fmt.Errorf("%s: %w", ni.name, err))
		}
	}
	return e
}

// noteWatchError keeps an informer's last list/watch error for Start's
// report and logs it. A watch the server closed, or whose version expired,
// is routine (the reflector resumes or relists): debug only.
func (c *Cluster) noteWatchError(informer string, err error) {
	if !c.logWatchError(informer, err) {
		return
	}
	c.mu.Lock()
	c.watchErrs[informer] = err
	c.mu.Unlock()
}

// logWatchError logs an informer's list/watch error and reports whether it
// was a failure (not a watch that ended, which is routine). The watches of
// single nodes' pods only log theirs: Start waits for none of them.
func (c *Cluster) logWatchError(informer string, err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		c.log.Debug("informer watch ended; resuming", zap.String("informer", informer), zap.Error(err))
		return false
	}
	c.log.Warn("informer list/watch failed; retrying", zap.String("informer", informer), zap.Error(err))
	return true
}

// ---- runner.Cluster: the view ----------------------------------------------

// Nodes returns every node our handlers have seen, sorted by name. The
// returned values share read-only slices (Blockers) with the cache.
func (c *Cluster) Nodes() []runner.NodeInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]runner.NodeInfo, 0, len(c.entries))
	for _, e := range c.entries {
		if e.node != nil {
			out = append(out, c.infoLocked(e))
		}
	}
	slices.SortFunc(out, func(a, b runner.NodeInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// EachNodeState calls f with every node's name and raw state annotation
// ("" when absent), in no order, under the cluster's lock: f must not call
// back into the Cluster. It builds no view (Nodes builds every one).
func (c *Cluster) EachNodeState(f func(name, state string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, e := range c.entries {
		if e.node != nil {
			f(name, e.node.Annotations[AnnotationState])
		}
	}
}

// StateGeneration changes whenever a node is added or deleted or its state
// annotation changes (cluster/history skips its pass when it has not).
func (c *Cluster) StateGeneration() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stateGen
}

// Node returns one node's view; false when the node does not exist (or our
// handlers have not seen it yet).
func (c *Cluster) Node(name string) (runner.NodeInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[name]
	if e == nil || e.node == nil {
		return runner.NodeInfo{}, false
	}
	return c.infoLocked(e), true
}

func (c *Cluster) infoLocked(e *entry) runner.NodeInfo {
	if e.stale {
		name := e.node.Name
		pods, podsKnown := c.podsOfLocked(name)
		e.info = buildInfo(e.node, e.obs, pods, podsKnown, byIndex[*storagev1.VolumeAttachment](c.vaIndexer, name))
		e.stale = false
	}
	info := e.info
	// The signs of life are read from the observation at every read, not
	// rebuilt with the rest: a Lease renewal (every node, every 10 s)
	// changes nothing else, and must not cost a rebuild (the node's pods
	// and VolumeAttachments, its blockers sorted).
	info.View.HeartbeatAt, info.View.HeartbeatFrom, info.View.RenewedAt = e.obs.heartbeatAt, e.obs.heartbeatFrom, e.obs.renewedAt
	// Judged at every read: a mark expires with time, not with an event.
	// The runner re-reads every node at least every 30 s (fence's resync).
	info.View.Maintenance, info.View.MaintenanceExpired = e.obs.maintenance.at(c.clock.Now())
	info.View.Remediation = c.remediated[info.Name] != ""
	// The earliest open planned-reboot signal wins, the kubelet's graceful
	// shutdown (buildInfo) included: the window counts from first sight.
	if at, by, ok := c.plannedLocked(info.Name); ok && (!info.View.PlannedReboot || at.Before(info.View.PlannedRebootAt)) {
		info.View.PlannedReboot, info.View.PlannedRebootAt, info.View.PlannedRebootBy = true, at, by
	}
	// A request another engine took in (the node names it) is not offered
	// again; observeNode withdraws it. Nor is one its guard cannot vouch
	// for now.
	if p, ok := c.requests[info.Name]; ok && e.node.Annotations[AnnotationRequestTaken] != p.id && p.offered() {
		cmd := p.cmd
		info.Command, info.CommandID = &cmd, p.id
	}
	return info
}

// SetRemediated replaces the set of nodes that a remediation CR asks to
// fence (node → which CR: "nhc NAMESPACE/NAME" or "mhc NAMESPACE/NAME"), and
// tells the runner about every node whose answer changed.
func (c *Cluster) SetRemediated(nodes map[string]string) {
	c.mu.Lock()
	var changed []string
	for n, by := range nodes {
		if (by != "") != (c.remediated[n] != "") {
			changed = append(changed, n)
		}
	}
	for n, by := range c.remediated {
		if by != "" && nodes[n] == "" {
			changed = append(changed, n)
		}
	}
	c.remediated = maps.Clone(nodes)
	c.mu.Unlock()
	c.nodesChanged(changed...)
}

// RemediatedBy names the remediation CR that asks to fence node, or "".
func (c *Cluster) RemediatedBy(node string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.remediated[node]
}

func byIndex[T any](idx cache.Indexer, node string) []T {
	objs, err := idx.ByIndex(byNodeName, node)
	if err != nil { // only for an unknown index name: a programming error
		panic(fmt.Sprintf("cluster: index %s: %v", byNodeName, err))
	}
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// APIFreshAt is when our view was last proven fresh: the start of the last
// list of the Leases whose every Lease our handlers took in (leasePoller
// lists them every LeaseListPeriod, a consistent read). Leases are the
// proof because they are what silence is judged from: if the lists stop
// (the API server unreachable, a list failing), every node would look
// silent, and the storm guard must see that the view, not the fleet, is
// stale. Nothing else counts: events of the other informers (a flowing
// Node watch says nothing about the Leases), and a single Lease taken in
// (it says nothing about the others).
func (c *Cluster) APIFreshAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.freshAt
}

// Changed delivers the names of nodes whose view changed: the node, its
// Lease, its pods or its VolumeAttachments.
func (c *Cluster) Changed() <-chan string { return c.changed }

// NodeObject returns a copy of the cached Node (systemUUID, inventory
// annotations). The cache drops managed fields, the image list, the
// resource lists and the volumes (slimNode).
func (c *Cluster) NodeObject(name string) (*corev1.Node, bool) {
	n, err := c.nodeLister.Get(name)
	if err != nil {
		return nil, false
	}
	return n.DeepCopy(), true
}

// NodeLister lists cached Nodes. Objects are shared with the cache: do not
// modify them.
func (c *Cluster) NodeLister() corelisters.NodeLister { return c.nodeLister }

// ---- informer handlers -------------------------------------------------------

func (c *Cluster) notify(node string) {
	select {
	case c.changed <- node:
	default:
	}
}

// entryLocked returns the node's entry, creating it on first sight: the
// first sighting is the first heartbeat we credit.
func (c *Cluster) entryLocked(name string, now time.Time) *entry {
	e := c.entries[name]
	if e == nil {
		e = &entry{obs: newObservation(now), stale: true}
		c.entries[name] = e
	}
	return e
}

func (c *Cluster) nodeAdded(obj any)         { c.observeNode(obj) }
func (c *Cluster) nodeUpdated(_, newObj any) { c.observeNode(newObj) }

func (c *Cluster) observeNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	now := c.clock.Now()
	c.mu.Lock()
	e := c.entryLocked(n.Name, now)
	if e.adopted != "" {
		if n.ResourceVersion != e.adopted && !rvAfter(n.ResourceVersion, e.adopted) && now.Sub(e.adoptedAt) < adoptTTL {
			// Older than what we already hold from the server.
			c.mu.Unlock()
			return
		}
		e.adopted = "" // the informer has caught up
	}
	reqErr := c.takeNodeLocked(e, n, now)
	takenElsewhere := c.takenElsewhereLocked(n)
	c.mu.Unlock()
	c.takeRequest(n.Name, takenElsewhere)
	c.afterNode(n.Name, reqErr)
}

// takenElsewhereLocked returns the pending request for n that n names as
// taken in (by another engine: our own take forgets it at once), or "".
func (c *Cluster) takenElsewhereLocked(n *corev1.Node) string {
	if p, ok := c.requests[n.Name]; ok && !p.taking && n.Annotations[AnnotationRequestTaken] == p.id {
		return p.id
	}
	return ""
}

// adoptNode takes in a node we just read from or wrote to the API server,
// ahead of the informer. The runner re-reads the view right after each of
// its actions: without this it would not see its own taint (and conclude
// someone removed it), nor its own acknowledgement of a request (and take
// the request in twice).
func (c *Cluster) adoptNode(n *corev1.Node) {
	n = n.DeepCopy()
	_, _ = slimNode(n)
	now := c.clock.Now()
	c.mu.Lock()
	e := c.entries[n.Name]
	if e == nil || e.node == nil || rvAfter(e.node.ResourceVersion, n.ResourceVersion) {
		// Unknown to our handlers yet (they will deliver it), or the
		// informer already holds something newer.
		c.mu.Unlock()
		return
	}
	reqErr := c.takeNodeLocked(e, n, now)
	e.adopted, e.adoptedAt = n.ResourceVersion, now
	takenElsewhere := c.takenElsewhereLocked(n)
	c.mu.Unlock()
	c.takeRequest(n.Name, takenElsewhere)
	c.afterNode(n.Name, reqErr)
}

func (c *Cluster) takeNodeLocked(e *entry, n *corev1.Node, now time.Time) error {
	e.obs.observeNode(n, now)
	reqErr := e.obs.observeRequest(n, now)
	stateChanged := e.node == nil || e.node.Annotations[AnnotationState] != n.Annotations[AnnotationState]
	if stateChanged {
		c.stateGen++
	}
	e.node, e.stale = n, true
	c.followPodsLocked(n, stateChanged)
	return reqErr
}

// afterNode warns about a malformed request and notifies.
func (c *Cluster) afterNode(name string, reqErr error) {
	if reqErr != nil {
		c.log.Warn("ignoring a fence request annotation", zap.String("node", name), zap.Error(reqErr))
		c.Event(name, fence.Event{Warning: true, Reason: "FenceRequestInvalid",
			Message: fmt.Sprintf("ignoring the %s annotation: %v; upgrade kubectl-fence and ask again (it needs the bmcfence-operator or bmcfence-attester grant)", AnnotationRequest, reqErr)})
	}
	c.notify(name)
}

func (c *Cluster) nodeDeleted(obj any) {
	n, ok := tombstone(obj).(*corev1.Node)
	if !ok {
		return
	}
	c.mu.Lock()
	if e := c.entries[n.Name]; e != nil && e.node != nil {
		c.stateGen++
	}
	c.unwatchPodsLocked(n.Name)
	delete(c.entries, n.Name)
	gone := slices.Clone(c.nodeGone)
	c.mu.Unlock()
	for _, f := range gone {
		f(n.Name)
	}
	c.notify(n.Name)
}

// OnNodeDeleted calls f (outside the cluster's lock, from the informer's
// handler: f must not block) with the name of every node deleted from now
// on, after HasNode stopped reporting it.
func (c *Cluster) OnNodeDeleted(f func(node string)) {
	c.mu.Lock()
	c.nodeGone = append(c.nodeGone, f)
	c.mu.Unlock()
}

// HasNode reports whether our handlers know the node (Node would find it),
// without building its view.
func (c *Cluster) HasNode(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[name]
	return e != nil && e.node != nil
}

func (c *Cluster) leaseAdded(obj any)      { c.observeLease(obj) }
func (c *Cluster) leaseUpdated(_, obj any) { c.observeLease(obj) }

// observeLease credits a heartbeat when the renewal time changed. It proves
// nothing about the view's freshness: only a completed list does
// (onLeaseList).
func (c *Cluster) observeLease(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	now := c.clock.Now()
	c.mu.Lock()
	e := c.entryLocked(l.Name, now)
	// A renewal changes only the signs of life, which infoLocked reads
	// from the observation: the built view stays.
	// The list being taken in has not been stamped yet: freshAt is the
	// start of the one before it.
	beat := e.obs.observeLease(l, now, c.freshAt)
	c.mu.Unlock()
	if beat {
		c.notify(l.Name)
	}
}

// leaseDeleted: a deletion is no sign of life; we keep the last renewal we
// saw so that a re-created Lease counts only if its renewal differs.
func (c *Cluster) leaseDeleted(obj any) {
	l, ok := tombstone(obj).(*coordinationv1.Lease)
	if !ok {
		return
	}
	c.mu.Lock()
	if e := c.entries[l.Name]; e != nil && e.node == nil {
		delete(c.entries, l.Name) // a Lease without a Node: nothing to keep
	}
	c.mu.Unlock()
}

// onLeaseList stamps a list of the Leases that started at start and whose
// every Lease our handlers have taken in: the view is fresh as of start.
// Its start, not its end: a consistent list holds every write committed
// before the request, and any write after it may be missing.
func (c *Cluster) onLeaseList(start time.Time) {
	c.mu.Lock()
	if start.After(c.freshAt) {
		c.freshAt = start
	}
	c.mu.Unlock()
}

// nodesChanged marks the entries of these nodes stale and notifies.
func (c *Cluster) nodesChanged(names ...string) {
	c.mu.Lock()
	for _, name := range names {
		if e := c.entries[name]; e != nil {
			e.stale = true
		}
	}
	c.mu.Unlock()
	for i, name := range names {
		if name != "" && !slices.Contains(names[:i], name) {
			c.notify(name)
		}
	}
}

func (c *Cluster) podAdded(obj any) {
	if p, ok := obj.(*podSummary); ok {
		c.nodesChanged(p.nodeName)
	}
}

func (c *Cluster) podUpdated(oldObj, newObj any) {
	o, ok1 := oldObj.(*podSummary)
	n, ok2 := newObj.(*podSummary)
	if !ok1 || !ok2 {
		return
	}
	// Only what the view reads; a pod's status churns.
	if o.nodeName == n.nodeName && o.phase == n.phase && o.deleting == n.deleting &&
		o.ownedByNode == n.ownedByNode && o.toleratesOutOfService == n.toleratesOutOfService {
		return
	}
	c.nodesChanged(o.nodeName, n.nodeName)
}

func (c *Cluster) podDeleted(obj any) {
	if p, ok := tombstone(obj).(*podSummary); ok {
		c.nodesChanged(p.nodeName)
	}
}

func (c *Cluster) vaAdded(obj any) {
	if va, ok := obj.(*storagev1.VolumeAttachment); ok {
		c.nodesChanged(va.Spec.NodeName)
	}
}

func (c *Cluster) vaUpdated(oldObj, newObj any) {
	o, ok1 := oldObj.(*storagev1.VolumeAttachment)
	n, ok2 := newObj.(*storagev1.VolumeAttachment)
	if ok1 && ok2 && o.ResourceVersion != n.ResourceVersion {
		c.nodesChanged(o.Spec.NodeName, n.Spec.NodeName)
	}
}

func (c *Cluster) vaDeleted(obj any) {
	if va, ok := tombstone(obj).(*storagev1.VolumeAttachment); ok {
		c.nodesChanged(va.Spec.NodeName)
	}
}
