package remediation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned/typed/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// DefaultResync is how often every CR's status is brought up to date with
// its node's fence phase: the phase moves in seconds (a settle window is
// 6 s), and NodeHealthCheck reads the conditions when it reconciles.
const DefaultResync = 2 * time.Second

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
type Controller struct {
	opts     Options
	informer cache.SharedIndexInformer
	kick     chan struct{}
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
	c := &Controller{opts: opts, kick: make(chan struct{}, 1)}
	c.informer = cache.NewSharedIndexInformer(lw, &v1alpha1.BMCFenceRemediation{}, 0, cache.Indexers{})
	kick := func() {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	if _, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick() },
		UpdateFunc: func(any, any) { kick() },
		DeleteFunc: func(any) { kick() },
	}); err != nil {
		return nil, fmt.Errorf("remediation: %w", err)
	}
	return c, nil
}

// Run serves until ctx ends. On return no node is reported as asked for:
// a replica that stops leading must not leave a stale answer behind.
func (c *Controller) Run(ctx context.Context) error {
	defer c.opts.Nodes.SetRemediated(nil)
	return cluster.ReconcileLoop(ctx, "remediation", c.informer, c.opts.Clock, c.opts.Resync, c.kick, c.ReconcileAll)
}

// ReconcileAll brings every CR up to date and reports to Nodes which nodes
// are asked for.
func (c *Controller) ReconcileAll(ctx context.Context) {
	objs := c.informer.GetStore().List()
	asked := map[string]string{}
	for _, o := range objs {
		cr, ok := o.(*v1alpha1.BMCFenceRemediation)
		if !ok {
			continue
		}
		node, wants, err := c.Reconcile(ctx, cr)
		if err != nil {
			c.opts.Log.Warn("remediation CR", zap.String("cr", cr.Namespace+"/"+cr.Name), zap.Error(err))
		}
		if wants {
			asked[node] = source(cr)
		}
	}
	c.opts.Nodes.SetRemediated(asked)
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
		n, err := c.opts.Machines.NodeOf(ctx, o.APIVersion, cr.Namespace, o.Name)
		if err != nil {
			return "", fmt.Sprintf("owned by Machine %s/%s: %v", cr.Namespace, o.Name, err)
		}
		return n, ""
	}
	return cr.Name, ""
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
