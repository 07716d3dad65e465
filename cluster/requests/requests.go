// Package requests serves humans' authenticated requests, BMCFenceRequest
// objects written by `kubectl fence fence|confirm|abort|unfence`. Who asked
// is the API server's word: the ValidatingAdmissionPolicy
// bmcfence-request-identity admits a request only when spec.requestedBy is
// the requesting user and the user holds the grant for its action, and keeps
// the spec immutable. The controller offers each new request to the engine
// (cluster.SetRequest), expires it maxRequestAge after it first saw it, and
// reports what became of it in its status.
package requests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned/typed/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/cluster/history"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// PolicyName is the ValidatingAdmissionPolicy (and its binding) that
// authenticates requests (deploy/base/admission.yaml).
const PolicyName = "bmcfence-request-identity"

// ErrUnauthenticated: the admission policy that vouches for requestedBy
// was not in force, as the agent observed it, from before the request's
// creation until now: the request is refused.
var ErrUnauthenticated = errors.New("request not authenticated")

// Cluster is what the controller needs of *cluster.Cluster.
type Cluster interface {
	Node(name string) (runner.NodeInfo, bool)
	SetRequest(node, id string, cmd fence.Command)
	OfferRequest(node, id string, cmd fence.Command, vouch func() error)
	WithdrawRequest(node, id string)
	OnRequestTaken(f func(node, id string))
	Event(node string, ev fence.Event)
}

// Voucher says whether a request was authenticated by the API server
// (*Guard).
type Voucher interface {
	// Vouch: nil, acting on r is allowed now; an error wrapping
	// ErrUnauthenticated, refuse it; ErrNotYet, wait (and Confirm).
	Vouch(r *v1alpha1.BMCFenceRequest, seenAt time.Time) error
	// Confirm reads the admission policy again, for Vouch.
	Confirm(ctx context.Context)
}

// Options configure a Controller.
type Options struct {
	Client  fencingclient.FencingV1alpha1Interface
	Cluster Cluster
	// Guard vouches for requests; nil trusts every request (tests).
	Guard Voucher
	// MaxRequestAge: a fence or confirm request not taken this long after
	// we first saw it expires (fence.Policy.MaxRequestAge).
	MaxRequestAge time.Duration
	// TTL: a request whose outcome is final is deleted this long after it
	// got it (config requests.ttl; default DefaultTTL).
	TTL time.Duration
	// Collected, when set, counts each request deleted by TTL, by its
	// outcome (bmcfence_requests_collected_total).
	Collected func(outcome v1alpha1.RequestOutcome)
	// HistoryMaxPerNode and HistoryMaxAge: the retention of the fence
	// records a refusal leaves (history.Options).
	HistoryMaxPerNode int
	HistoryMaxAge     time.Duration
	// Who names this agent replica in the records.
	Who    string
	Clock  clock.WithTicker
	Log    *zap.Logger
	Resync time.Duration
}

// DefaultTTL keeps a finished request a day (config requests.ttl).
const DefaultTTL = 24 * time.Hour

// Controller serves BMCFenceRequests; only the leader runs it.
//
// A node's requests are handled together, oldest first (the newest is
// offered last and replaces older ones), through a rate-limited work queue
// keyed by node: a request's events queue its node, the resync every 2 s
// queues the nodes with pending requests (none at rest: no request, no
// work, no read of the admission policy), and a node whose status writes
// failed is retried with a backoff of its own.
type Controller struct {
	opts     Options
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// seen: when this process first saw each request (our clock: one
	// clock per proof; a new leader starts its own).
	seen map[types.UID]time.Time
	// seenNow: seen by this reconcile pass for the first time.
	seenNow map[types.UID]bool
	// offered: requests handed to the engine; taken: acknowledged by a
	// state write, status not yet written.
	offered map[types.UID]offeredRequest
	taken   map[string]bool // node/name
}

// New builds a Controller.
func New(opts Options) (*Controller, error) {
	if opts.Client == nil || opts.Cluster == nil {
		return nil, errors.New("requests: Client and Cluster are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Resync <= 0 {
		opts.Resync = 2 * time.Second
	}
	if opts.MaxRequestAge <= 0 {
		opts.MaxRequestAge = fence.DefaultPolicy().MaxRequestAge
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	reqs := opts.Client.BMCFenceRequests()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return reqs.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return reqs.Watch(ctx, o)
		},
	}
	c := &Controller{opts: opts,
		seen: map[types.UID]time.Time{}, seenNow: map[types.UID]bool{}, offered: map[types.UID]offeredRequest{}, taken: map[string]bool{}}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryMin, retryMax),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "requests", Clock: opts.Clock})
	c.informer = cache.NewSharedIndexInformer(lw, &v1alpha1.BMCFenceRequest{}, 0, cache.Indexers{byNode: func(obj any) ([]string, error) {
		if r, ok := obj.(*v1alpha1.BMCFenceRequest); ok {
			return []string{r.Spec.NodeName}, nil
		}
		return nil, nil
	}})
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if r, ok := obj.(*v1alpha1.BMCFenceRequest); ok {
			c.queue.Add(r.Spec.NodeName)
		}
	}
	if _, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		return nil, fmt.Errorf("requests: %w", err)
	}
	if g, ok := opts.Guard.(*Guard); ok {
		g.Subscribe(c.queuePending) // a refusal is said at once
	}
	opts.Cluster.OnRequestTaken(func(node, id string) {
		c.mu.Lock()
		c.taken[node+"/"+id] = true
		c.mu.Unlock()
		c.queue.Add(node)
	})
	return c, nil
}

// byNode indexes requests by spec.nodeName.
const byNode = "node"

// A node whose requests could not be handled (a status write failed) is
// retried after 1 s, doubling up to 5 minutes, and left out of the resyncs
// meanwhile.
const (
	retryMin = time.Second
	retryMax = 5 * time.Minute
)

// Run serves until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	go c.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return fmt.Errorf("requests: cache not synced: %w", ctx.Err())
	}
	go func() {
		t := c.opts.Clock.NewTicker(c.opts.Resync)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				c.queue.ShutDown()
				return
			case <-t.C():
				c.Resync()
			}
		}
	}()
	// Every node with requests once: a new leader reports what became of
	// the requests it finds.
	for _, node := range c.informer.GetIndexer().ListIndexFuncValues(byNode) {
		c.queue.Add(node)
	}
	for c.ProcessNext(ctx) {
	}
	return nil
}

// Resync queues every node that is not backing off and has a pending
// request (its expiry and the admission policy are checked again) or a
// finished one past its TTL (to be deleted). Read from the cache: at rest
// it asks the API server nothing.
func (c *Controller) Resync() {
	now := c.opts.Clock.Now()
	for _, o := range c.informer.GetStore().List() {
		r, ok := o.(*v1alpha1.BMCFenceRequest)
		if ok && (!final(r.Status.Outcome) || c.collectable(r, now)) && c.queue.NumRequeues(r.Spec.NodeName) == 0 {
			c.queue.Add(r.Spec.NodeName)
		}
	}
}

// ProcessNext handles the next queued node's requests; false once the
// queue is shut down.
func (c *Controller) ProcessNext(ctx context.Context) bool {
	node, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(node)
	objs, _ := c.informer.GetIndexer().ByIndex(byNode, node)
	var reqs []*v1alpha1.BMCFenceRequest
	for _, o := range objs {
		if r, ok := o.(*v1alpha1.BMCFenceRequest); ok {
			reqs = append(reqs, r)
		}
	}
	c.withdrawDeleted(node, reqs)
	if err := c.reconcile(ctx, reqs); err != nil {
		c.opts.Log.Warn("fence requests; retrying with backoff", zap.String("node", node), zap.Int("failures", c.queue.NumRequeues(node)+1), zap.Error(err))
		c.queue.AddRateLimited(node)
		return true
	}
	c.queue.Forget(node)
	return true
}

// offeredRequest names a request handed to the engine.
type offeredRequest struct{ node, name string }

// withdrawDeleted withdraws from the engine every request offered for node
// whose object is no longer among reqs (a human deleted it: a cancel), and
// forgets it. A request the engine took already is not pending there: the
// withdrawal is then a no-op.
func (c *Controller) withdrawDeleted(node string, reqs []*v1alpha1.BMCFenceRequest) {
	present := make(map[types.UID]bool, len(reqs))
	for _, r := range reqs {
		present[r.UID] = true
	}
	var gone []offeredRequest
	c.mu.Lock()
	for uid, o := range c.offered {
		if o.node == node && !present[uid] {
			gone = append(gone, o)
			delete(c.offered, uid)
			delete(c.seen, uid)
			delete(c.seenNow, uid)
		}
	}
	c.mu.Unlock()
	for _, o := range gone {
		c.opts.Cluster.WithdrawRequest(o.node, o.name)
		c.opts.Log.Info("a pending request was deleted: withdrawn from the fence engine", zap.String("request", o.name), zap.String("node", o.node))
	}
}

// queuePending queues every node with a pending request (the guard's view
// changed: a request it no longer vouches for is refused at once). Read
// from the cache.
func (c *Controller) queuePending() {
	for _, o := range c.informer.GetStore().List() {
		if r, ok := o.(*v1alpha1.BMCFenceRequest); ok && !final(r.Status.Outcome) {
			c.queue.Add(r.Spec.NodeName)
		}
	}
}

// ReconcileAll handles every request now.
func (c *Controller) ReconcileAll(ctx context.Context) {
	var reqs []*v1alpha1.BMCFenceRequest
	for _, o := range c.informer.GetStore().List() {
		if r, ok := o.(*v1alpha1.BMCFenceRequest); ok {
			reqs = append(reqs, r)
		}
	}
	if err := c.reconcile(ctx, reqs); err != nil {
		c.opts.Log.Warn("fence requests", zap.Error(err))
	}
}

// reconcile handles requests oldest first, so that the newest request for
// a node is the one offered last (it replaces older ones). A pending
// request is marked seen first, then the guard reads the admission policy
// again (Confirm), so that a new request can be vouched for at once: the
// read began after it was seen. The admission policy is read only when one
// of them is pending (none at rest).
func (c *Controller) reconcile(ctx context.Context, reqs []*v1alpha1.BMCFenceRequest) error {
	slices.SortFunc(reqs, func(a, b *v1alpha1.BMCFenceRequest) int {
		if d := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); d != 0 {
			return d
		}
		return compareStrings(a.Name, b.Name)
	})
	pending := false
	now := c.opts.Clock.Now()
	c.mu.Lock()
	for _, r := range reqs {
		if final(r.Status.Outcome) {
			continue
		}
		pending = true
		if _, ok := c.seen[r.UID]; !ok {
			c.seen[r.UID] = now
			c.seenNow[r.UID] = true
		}
	}
	c.mu.Unlock()
	if pending && c.opts.Guard != nil {
		c.opts.Guard.Confirm(ctx)
	}
	var errs []error
	for _, r := range reqs {
		if c.collect(ctx, r) {
			continue
		}
		if err := c.Reconcile(ctx, r); err != nil {
			errs = append(errs, fmt.Errorf("request %s: %w", r.Name, err))
		}
	}
	return errors.Join(errs...)
}

// final reports whether an outcome is the request's last.
func final(o v1alpha1.RequestOutcome) bool {
	switch o {
	case v1alpha1.OutcomeTaken, v1alpha1.OutcomeRefused, v1alpha1.OutcomeExpired:
		return true
	case v1alpha1.OutcomePending, "":
	}
	return false
}

// collect deletes a request whose outcome is final once TTL has passed
// since it got it, and reports whether it did. Nothing reads a finished
// request but a human (the fence's evidence is in its BMCFenceRecord);
// without this they pile up, one per kubectl fence command. Both the
// outcome's time (our clock, or a previous leader's) and the creation
// time (the API server's) must be TTL old, so that no one clock that is
// off deletes a request whose outcome its requester has not read yet.
// Pending requests are never collected: the agent still owes them an
// answer.
func (c *Controller) collect(ctx context.Context, r *v1alpha1.BMCFenceRequest) bool {
	if !c.collectable(r, c.opts.Clock.Now()) {
		return false
	}
	// Conditional on what was read: a request changed meanwhile is judged
	// again on the next pass.
	err := c.opts.Client.BMCFenceRequests().Delete(ctx, r.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &r.UID, ResourceVersion: &r.ResourceVersion},
	})
	switch {
	case err == nil:
		c.opts.Log.Info("deleted a finished request", zap.String("request", r.Name), zap.String("node", r.Spec.NodeName),
			zap.String("outcome", string(r.Status.Outcome)), zap.Duration("ttl", c.opts.TTL))
		if c.opts.Collected != nil {
			c.opts.Collected(r.Status.Outcome)
		}
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
	default:
		c.opts.Log.Warn("deleting a finished request", zap.String("request", r.Name), zap.Error(err))
	}
	c.mu.Lock()
	delete(c.seen, r.UID)
	delete(c.offered, r.UID)
	c.mu.Unlock()
	return true
}

// collectable: r's outcome is final, and both that outcome and r's
// creation are TTL old at now.
func (c *Controller) collectable(r *v1alpha1.BMCFenceRequest, now time.Time) bool {
	switch r.Status.Outcome {
	case v1alpha1.OutcomeTaken, v1alpha1.OutcomeRefused, v1alpha1.OutcomeExpired:
	case v1alpha1.OutcomePending, "":
		return false
	}
	finished := r.CreationTimestamp.Time
	switch {
	case r.Status.FinishedAt != nil:
		finished = r.Status.FinishedAt.Time
	case r.Status.SeenAt != nil && r.Status.SeenAt.After(finished):
		// Finished by an agent before finishedAt existed: seenAt is the
		// latest time it is known to have been open.
		finished = r.Status.SeenAt.Time
	}
	return now.Sub(finished) >= c.opts.TTL && now.Sub(r.CreationTimestamp.Time) >= c.opts.TTL
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Reconcile handles one request: it is refused unless the guard vouches
// for it (the admission policy that authenticates requestedBy was in force
// from before its creation), expires, or is offered to the engine, which
// takes it only while the guard still vouches for it.
func (c *Controller) Reconcile(ctx context.Context, r *v1alpha1.BMCFenceRequest) error {
	if final(r.Status.Outcome) {
		return nil
	}
	node, id := r.Spec.NodeName, r.Name
	now := c.opts.Clock.Now()
	c.mu.Lock()
	seenAt, ok := c.seen[r.UID]
	if !ok {
		seenAt = now
		c.seen[r.UID] = now
		c.seenNow[r.UID] = true
	}
	// Seen first by another process (an earlier leader, or this agent
	// before a restart): its age is on a clock we cannot compare with ours,
	// and it may have been taken already without its status saying so.
	firstLook := c.seenNow[r.UID]
	delete(c.seenNow, r.UID)
	inherited := firstLook && r.Status.SeenAt != nil
	// Created long before we first saw it (no leader ran meanwhile): as
	// the annotation channel did with the CLI's time, the API server's
	// creation time bounds it; a skew only moves that bound.
	old := firstLook && !r.CreationTimestamp.IsZero() && now.Sub(r.CreationTimestamp.Time) > c.opts.MaxRequestAge
	taken := c.taken[node+"/"+id]
	_, offered := c.offered[r.UID]
	c.mu.Unlock()

	var vouch error
	if g := c.opts.Guard; g != nil {
		vouch = g.Vouch(r, seenAt)
	}
	kind, err := commandKind(r.Spec.Action)
	switch {
	case taken:
		// The state write that took it in asked the guard first.
		return c.finish(ctx, r, v1alpha1.OutcomeTaken, fmt.Sprintf("taken in by the fence engine at %s (this agent's, or kubectl-fence's while no agent ran); its answer is in the node's Events and `kubectl fence status %s`", now.UTC().Format(time.RFC3339), node), "")
	case err != nil:
		return c.finish(ctx, r, v1alpha1.OutcomeRefused, err.Error(), "")
	case errors.Is(vouch, ErrUnauthenticated):
		return c.refuse(ctx, r, vouch)
	case (kind == fence.CmdFence || kind == fence.CmdConfirm) && old:
		return c.finish(ctx, r, v1alpha1.OutcomeExpired, fmt.Sprintf("created more than %s before the agent first saw it: what you saw may have changed; run kubectl fence again", c.opts.MaxRequestAge), "")
	case (kind == fence.CmdFence || kind == fence.CmdConfirm) && inherited:
		return c.finish(ctx, r, v1alpha1.OutcomeExpired, "first seen by another agent process (a previous leader, or before a restart): its age cannot be told on our clock and it may have been taken already; run kubectl fence again", "")
	case (kind == fence.CmdFence || kind == fence.CmdConfirm) && now.Sub(seenAt) > c.opts.MaxRequestAge:
		c.opts.Cluster.WithdrawRequest(node, id)
		return c.finish(ctx, r, v1alpha1.OutcomeExpired, fmt.Sprintf("not taken within %s of being seen: what you saw may have changed; run kubectl fence again", c.opts.MaxRequestAge), "")
	}
	if _, found := c.opts.Cluster.Node(node); !found {
		return c.finish(ctx, r, v1alpha1.OutcomeRefused, fmt.Sprintf("node %s does not exist", node), "")
	}
	if r.Status.SeenAt == nil {
		st := r.DeepCopy()
		t := metav1.NewTime(seenAt)
		st.Status.SeenAt, st.Status.Outcome = &t, v1alpha1.OutcomePending
		st.Status.Message = "waiting for the agent to take it in"
		if _, err := c.opts.Client.BMCFenceRequests().UpdateStatus(ctx, st, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("marking it seen: %w", err)
		}
	}
	if vouch != nil {
		return nil // not yet: asked again at the next reconcile
	}
	if !offered {
		cmd := fence.Command{Kind: kind, User: r.Spec.RequestedBy, Reason: r.Spec.Reason, PowerOn: r.Spec.PowerOn, Force: r.Spec.Force, SeenAt: seenAt}
		var check func() error
		if g := c.opts.Guard; g != nil {
			snapshot := r.DeepCopy()
			check = func() error { return g.Vouch(snapshot, seenAt) }
		}
		c.opts.Cluster.OfferRequest(node, id, cmd, check)
		c.mu.Lock()
		c.offered[r.UID] = offeredRequest{node: node, name: id}
		c.mu.Unlock()
	}
	return nil
}

// refuse refuses a request the guard does not vouch for: withdrawn from
// the engine, a Warning Event on the node, a fence record (kubectl fence
// history), and the request's status, each saying why.
func (c *Controller) refuse(ctx context.Context, r *v1alpha1.BMCFenceRequest, why error) error {
	node := r.Spec.NodeName
	c.opts.Cluster.WithdrawRequest(node, r.Name)
	msg := fmt.Sprintf("refused the %s request %s written in the name of %s: %v", r.Spec.Action, r.Name, r.Spec.RequestedBy, why)
	c.opts.Cluster.Event(node, fence.Event{Warning: true, Reason: "FenceRequestRefused", Message: msg})
	c.opts.Log.Warn("fence request refused", zap.String("request", r.Name), zap.String("node", node), zap.Error(why))
	record, err := history.RecordRefusal(ctx, c.opts.Client.BMCFenceRecords(), history.Refusal{
		Node: node, RequestedBy: r.Spec.RequestedBy, Reason: fmt.Sprintf("%s request %s", r.Spec.Action, r.Name), Message: msg,
		Who: c.opts.Who, At: c.opts.Clock.Now(), MaxPerNode: c.opts.HistoryMaxPerNode, MaxAge: c.opts.HistoryMaxAge,
	})
	if err != nil {
		c.opts.Log.Warn("cannot record the refusal in the node's history", zap.String("request", r.Name), zap.Error(err))
	}
	return c.finish(ctx, r, v1alpha1.OutcomeRefused, why.Error(), record)
}

func (c *Controller) finish(ctx context.Context, r *v1alpha1.BMCFenceRequest, outcome v1alpha1.RequestOutcome, msg, record string) error {
	st := r.DeepCopy()
	st.Status.Outcome, st.Status.Message = outcome, fence.Clip(msg, 1024)
	if record != "" {
		st.Status.Record = record
	}
	done := metav1.NewTime(c.opts.Clock.Now())
	st.Status.FinishedAt = &done
	if st.Status.SeenAt == nil {
		c.mu.Lock()
		t := metav1.NewTime(c.seen[r.UID])
		c.mu.Unlock()
		st.Status.SeenAt = &t
	}
	if _, err := c.opts.Client.BMCFenceRequests().UpdateStatus(ctx, st, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("recording outcome %s: %w", outcome, err)
	}
	c.mu.Lock()
	delete(c.taken, r.Spec.NodeName+"/"+r.Name)
	c.mu.Unlock()
	return nil
}

// ErrUnknownAction: the spec's action is none of fence, confirm, abort,
// unfence (the CRD's enum makes this unreachable through the API).
var ErrUnknownAction = errors.New("unknown action")

func commandKind(a v1alpha1.RequestAction) (fence.CommandKind, error) {
	switch a {
	case v1alpha1.ActionFence:
		return fence.CmdFence, nil
	case v1alpha1.ActionConfirm:
		return fence.CmdConfirm, nil
	case v1alpha1.ActionAbort:
		return fence.CmdAbort, nil
	case v1alpha1.ActionUnfence:
		return fence.CmdUnfence, nil
	}
	return fence.CmdNone, fmt.Errorf("%w %q", ErrUnknownAction, a)
}
