package remediation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned/typed/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// DefaultResync is how often every CR's status is brought up to date with
// its node's fence phase: the phase moves in seconds (a settle window is
// 6 s), and NodeHealthCheck reads the conditions when it reconciles. A
// resync reads only caches: it asks the API server nothing unless a CR's
// status changed.
const DefaultResync = 2 * time.Second

// A CR whose reconcile failed (its finalizer or status could not be
// written) is retried after 1 s, doubling up to 5 minutes, and is left out
// of the resyncs meanwhile: an API server that refuses our writes is not
// asked again every 2 s for every CR.
const (
	retryMin = time.Second
	retryMax = 5 * time.Minute
)

// A Machine without a nodeRef (or one that cannot be read) is read again
// after 2 s, doubling up to 5 minutes. A Machine's nodeRef, once set,
// names its node for the Machine's life: it is read once per CR.
const (
	machineRetryMin = 2 * time.Second
	machineRetryMax = 5 * time.Minute
)

// Nodes is the cluster view the controller reads and informs
// (*cluster.Cluster).
type Nodes interface {
	Node(name string) (runner.NodeInfo, bool)
	SetRemediated(nodes map[string]string)
}

// Machines resolves a Cluster API Machine to its node (status.nodeRef).
type Machines interface {
	NodeOf(ctx context.Context, apiVersion, namespace, name string) (string, error)
}

// ErrNoNodeRef: the Machine has no status.nodeRef yet (or no more).
var ErrNoNodeRef = errors.New("machine has no status.nodeRef")

// Options configure a Controller.
type Options struct {
	Client fencingclient.FencingV1alpha1Interface
	// Machines resolves MachineHealthCheck CRs; nil reports such CRs as
	// unresolvable.
	Machines Machines
	Nodes    Nodes
	// Unfenceable says why the agent cannot fence a node ("" when it can):
	// no usable BMC entry, an identity that cannot be checked.
	Unfenceable func(node string) string
	Clock       clock.WithTicker
	Log         *zap.Logger
	Resync      time.Duration
}

// Controller serves BMCFenceRemediation CRs. Only the leader runs it: the
// finalizer and the status are the leader's word.
//
// One CR at a time goes through a rate-limited work queue: an event queues
// its CR, a resync every CR not backing off; a failed reconcile is retried
// with a per-CR backoff.
type Controller struct {
	opts     Options
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// asked: the CRs that ask to fence their node (key → node, source).
	asked map[string]ask
	// machines: a MachineHealthCheck CR's node, by the CR's UID.
	machines map[types.UID]*resolution
}

type ask struct{ node, source string }

// resolution is what reading a CR's Machine gave: its node, or why none,
// and when to read it again.
type resolution struct {
	node, unresolved string
	failures         int
	retryAt          time.Time
}

// New builds a Controller.
func New(opts Options) (*Controller, error) {
	if opts.Client == nil || opts.Nodes == nil {
		return nil, errors.New("remediation: Client and Nodes are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	if opts.Unfenceable == nil {
		opts.Unfenceable = func(string) string { return "" }
	}
	crs := opts.Client.BMCFenceRemediations(metav1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return crs.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return crs.Watch(ctx, o)
		},
	}
	c := &Controller{opts: opts, asked: map[string]ask{}, machines: map[types.UID]*resolution{}}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryMin, retryMax),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "remediation", Clock: opts.Clock})
	c.informer = cache.NewSharedIndexInformer(lw, &v1alpha1.BMCFenceRemediation{}, 0, cache.Indexers{})
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, fmt.Errorf("remediation: %w", err)
	}
	return c, nil
}

// Run serves until ctx ends. On return no node is reported as asked for:
// a replica that stops leading must not leave a stale answer behind.
func (c *Controller) Run(ctx context.Context) error {
	defer c.opts.Nodes.SetRemediated(nil)
	defer c.queue.ShutDown()
	go c.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return fmt.Errorf("remediation: cache not synced: %w", ctx.Err())
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
	c.Resync()
	for c.ProcessNext(ctx) {
	}
	return nil
}

// Resync queues every CR that is not backing off after a failure, and
// forgets the Machines of CRs that are gone.
func (c *Controller) Resync() {
	uids := map[types.UID]bool{}
	for _, obj := range c.informer.GetStore().List() {
		cr, ok := obj.(*v1alpha1.BMCFenceRemediation)
		if !ok {
			continue
		}
		uids[cr.UID] = true
		key := cr.Name
		if cr.Namespace != "" {
			key = cr.Namespace + "/" + cr.Name
		}
		if c.queue.NumRequeues(key) == 0 {
			c.queue.Add(key)
		}
	}
	c.mu.Lock()
	for uid := range c.machines {
		if !uids[uid] {
			delete(c.machines, uid)
		}
	}
	c.mu.Unlock()
}

// ProcessNext reconciles the next queued CR; false once the queue is shut
// down.
func (c *Controller) ProcessNext(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	obj, exists, err := c.informer.GetStore().GetByKey(key)
	cr, ok := obj.(*v1alpha1.BMCFenceRemediation)
	if err != nil || !exists || !ok {
		c.queue.Forget(key)
		c.setAsked(key, "", "")
		return true
	}
	node, wants, err := c.Reconcile(ctx, cr)
	if err != nil {
		c.opts.Log.Warn("remediation CR; retrying with backoff", zap.String("cr", key), zap.Int("failures", c.queue.NumRequeues(key)+1), zap.Error(err))
		c.queue.AddRateLimited(key)
	} else {
		c.queue.Forget(key)
	}
	if !wants {
		node = ""
	}
	c.setAsked(key, node, source(cr))
	return true
}

// setAsked records whether the CR key asks to fence node ("": it does
// not) and tells Nodes when the set of asked nodes changed. Two CRs asking
// for one node: the first by key names it.
func (c *Controller) setAsked(key, node, src string) {
	c.mu.Lock()
	old, had := c.asked[key]
	switch {
	case node == "" && !had, node != "" && had && old == (ask{node, src}):
		c.mu.Unlock()
		return
	case node == "":
		delete(c.asked, key)
	default:
		c.asked[key] = ask{node, src}
	}
	keys := make([]string, 0, len(c.asked))
	for k := range c.asked {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	nodes := map[string]string{}
	for _, k := range slices.Backward(keys) {
		nodes[c.asked[k].node] = c.asked[k].source
	}
	c.mu.Unlock()
	c.opts.Nodes.SetRemediated(nodes)
}

// Reconcile handles one CR: the finalizer, the node it names, its
// conditions. It reports the node and whether the CR asks to fence it.
func (c *Controller) Reconcile(ctx context.Context, cr *v1alpha1.BMCFenceRemediation) (node string, wants bool, err error) {
	crs := c.opts.Client.BMCFenceRemediations(cr.Namespace)
	cr = cr.DeepCopy()
	if cr.DeletionTimestamp != nil {
		// Its creator saw the node healthy (or gave up): stop asking. The
		// engine stops a fence whose power-off was not accepted; one whose
		// was ends with the taint, which it removes only once the node is
		// back. Nothing of ours needs the CR for that.
		c.forgetMachine(cr.UID)
		if i := slices.Index(cr.Finalizers, v1alpha1.FinalizerRemediation); i >= 0 {
			cr.Finalizers = slices.Delete(cr.Finalizers, i, i+1)
			if _, err := crs.Update(ctx, cr, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return "", false, fmt.Errorf("removing our finalizer: %w", err)
			}
		}
		return "", false, nil
	}
	if !slices.Contains(cr.Finalizers, v1alpha1.FinalizerRemediation) {
		cr.Finalizers = append(cr.Finalizers, v1alpha1.FinalizerRemediation)
		updated, err := crs.Update(ctx, cr, metav1.UpdateOptions{})
		if err != nil {
			return "", false, fmt.Errorf("adding our finalizer: %w", err)
		}
		cr = updated
	}
	s := c.situation(ctx, cr)
	status := cr.Status.DeepCopy()
	now := metav1.NewTime(c.opts.Clock.Now())
	for _, cond := range Conditions(s) {
		cond.LastTransitionTime = now
		cond.ObservedGeneration = cr.Generation
		meta.SetStatusCondition(&status.Conditions, cond)
	}
	status.NodeName, status.ObservedGeneration = s.Node, cr.Generation
	if s.NodeFound {
		status.Phase = s.Phase.String()
	}
	if !equality.Semantic.DeepEqual(&cr.Status, status) {
		cr.Status = *status
		if _, err := crs.UpdateStatus(ctx, cr, metav1.UpdateOptions{}); err != nil {
			return s.Node, false, fmt.Errorf("updating the status: %w", err)
		}
	}
	return s.Node, s.Node != "" && s.Unresolved == "" && s.NodeFound && !s.TimedOut, nil
}

func (c *Controller) situation(ctx context.Context, cr *v1alpha1.BMCFenceRemediation) Situation {
	var s Situation
	_, s.TimedOut = cr.Annotations[v1alpha1.AnnotationNHCTimedOut]
	s.Fenced = meta.IsStatusConditionTrue(cr.Status.Conditions, v1alpha1.ConditionSucceeded)
	s.Node, s.Unresolved = c.nodeName(ctx, cr)
	if s.Unresolved != "" {
		return s
	}
	info, found := c.opts.Nodes.Node(s.Node)
	if !found {
		return s
	}
	s.NodeFound = true
	if info.State != "" {
		if st, err := fence.Decode(info.State); err == nil {
			s.Phase, s.Stuck = st.Phase, st.Stuck
		}
	}
	switch {
	case info.View.Excluded:
		s.Unfenceable = "it is excluded from fencing by label"
	default:
		s.Unfenceable = c.opts.Unfenceable(s.Node)
	}
	return s
}

// NodeName resolves cr to its node: the node-name annotation (NodeHealthCheck
// with multiple templates), else the Machine it belongs to (a
// MachineHealthCheck's CR has the Machine's name and an ownerRef to it),
// else its own name (NodeHealthCheck). unresolved says why there is none.
func (c *Controller) nodeName(ctx context.Context, cr *v1alpha1.BMCFenceRemediation) (node, unresolved string) {
	if n := cr.Annotations[v1alpha1.AnnotationNodeName]; n != "" {
		return n, ""
	}
	for _, o := range cr.OwnerReferences {
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		if err != nil || gv.Group != MachineGroup || o.Kind != "Machine" {
			continue
		}
		if c.opts.Machines == nil {
			return "", fmt.Sprintf("owned by Machine %s, and the agent has no access to Machines", o.Name)
		}
		return c.machineNode(ctx, cr, o)
	}
	return cr.Name, ""
}

// machineNode reads the node of the Machine that owns cr: once, when it
// has a nodeRef; again after a backoff when it has none or cannot be read.
func (c *Controller) machineNode(ctx context.Context, cr *v1alpha1.BMCFenceRemediation, o metav1.OwnerReference) (node, unresolved string) {
	now := c.opts.Clock.Now()
	c.mu.Lock()
	r := c.machines[cr.UID]
	if r != nil && (r.unresolved == "" || now.Before(r.retryAt)) {
		node, unresolved = r.node, r.unresolved
		c.mu.Unlock()
		return node, unresolved
	}
	c.mu.Unlock()
	n, err := c.opts.Machines.NodeOf(ctx, o.APIVersion, cr.Namespace, o.Name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if r == nil {
		r = &resolution{}
		c.machines[cr.UID] = r
	}
	if err != nil {
		r.node, r.unresolved = "", fmt.Sprintf("owned by Machine %s/%s: %v", cr.Namespace, o.Name, err)
		r.retryAt = now.Add(min(machineRetryMin<<min(r.failures, 20), machineRetryMax))
		r.failures++
		return "", r.unresolved
	}
	*r = resolution{node: n}
	return n, ""
}

// forgetMachine drops what was read for a CR that is going away.
func (c *Controller) forgetMachine(uid types.UID) {
	c.mu.Lock()
	delete(c.machines, uid)
	c.mu.Unlock()
}

// source names who asked through cr: "mhc NAMESPACE/NAME" for a CR owned by
// a Cluster API Machine, else "nhc NAMESPACE/NAME".
func source(cr *v1alpha1.BMCFenceRemediation) string {
	kind := string(v1alpha1.TriggerNHC)
	for _, o := range cr.OwnerReferences {
		if gv, err := schema.ParseGroupVersion(o.APIVersion); err == nil && gv.Group == MachineGroup && o.Kind == "Machine" {
			kind = string(v1alpha1.TriggerMHC)
		}
	}
	return kind + " " + cr.Namespace + "/" + cr.Name
}

// MachineGroup is Cluster API's group.
const MachineGroup = "cluster.x-k8s.io"

// DynamicMachines reads Machines with a dynamic client, whatever Cluster
// API version serves them.
type DynamicMachines struct{ Client dynamic.Interface }

// NodeOf returns the Machine's status.nodeRef.name.
func (d DynamicMachines) NodeOf(ctx context.Context, apiVersion, namespace, name string) (string, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return "", fmt.Errorf("machine %s/%s: %w", namespace, name, err)
	}
	u, err := d.Client.Resource(gv.WithResource("machines")).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("machine %s/%s: %w", namespace, name, err)
	}
	return nodeRef(u)
}

func nodeRef(u *unstructured.Unstructured) (string, error) {
	n, _, err := unstructured.NestedString(u.Object, "status", "nodeRef", "name")
	if err != nil {
		return "", fmt.Errorf("machine %s/%s: status.nodeRef.name: %w", u.GetNamespace(), u.GetName(), err)
	}
	if strings.TrimSpace(n) == "" {
		return "", fmt.Errorf("machine %s/%s: %w", u.GetNamespace(), u.GetName(), ErrNoNodeRef)
	}
	return n, nil
}
