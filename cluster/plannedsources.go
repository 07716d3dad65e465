package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/bmcfence/bmcfence/internal/kube"
)

// kured's defaults (github.com/kubereboot/kured: --ds-namespace,
// --ds-name, --lock-annotation).
const (
	DefaultKuredNamespace  = "kube-system"
	DefaultKuredDaemonSet  = "kured"
	DefaultKuredAnnotation = "weave.works/kured-node-lock"
)

// The resources of the other sources: medik8s's NodeMaintenance
// (cluster-scoped, spec.nodeName) and Cluster API's Machine
// (status.nodeRef.name). A Machine is read in v1beta1 where the server
// still serves it (Cluster API up to v1.x), else in v1beta2.
var (
	NodeMaintenances  = schema.GroupVersionResource{Group: "nodemaintenance.medik8s.io", Version: "v1beta1", Resource: "nodemaintenances"}
	MachinesV1beta1   = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machines"}
	MachinesV1beta2   = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"}
	plannedMachineGVR = []schema.GroupVersionResource{MachinesV1beta1, MachinesV1beta2}
)

// KuredLock says where kured keeps its reboot lock: an annotation on its
// own DaemonSet (kured's --ds-namespace, --ds-name, --lock-annotation).
// An empty DaemonSet turns the source off.
type KuredLock struct {
	Namespace, DaemonSet, Annotation string
}

// DefaultKuredLock is kured's own default.
func DefaultKuredLock() KuredLock {
	return KuredLock{Namespace: DefaultKuredNamespace, DaemonSet: DefaultKuredDaemonSet, Annotation: DefaultKuredAnnotation}
}

// PlannedOptions configure WatchPlanned.
type PlannedOptions struct {
	Client kube.Interface
	// Dynamic reads NodeMaintenances and Machines; nil: neither is watched.
	Dynamic dynamic.Interface
	// Discovery tells whether a CRD is served. Default: Client's.
	Discovery kube.Discovery
	Kured     KuredLock
	// Recheck is how often a source that is not installed is looked for
	// again (a CRD installed after the agent). Default 1 minute.
	Recheck time.Duration
}

// The states of a planned-reboot source (PlannedSourceState.State).
const (
	PlannedWatched      = "watched"
	PlannedNotInstalled = "not installed"
	PlannedForbidden    = "no RBAC"
	PlannedFailing      = "failing"
	PlannedOff          = "off"
	PlannedStarting     = "starting"
)

// PlannedSourceState is what the agent knows of one planned-reboot
// source: whether it watches it, and why not.
type PlannedSourceState struct {
	Source string `json:"source"`
	State  string `json:"state"`
	Detail string `json:"detail,omitempty"`
}

// PlannedSources returns each planned-reboot source's state, sorted by
// source.
func (c *Cluster) PlannedSources() []PlannedSourceState {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]PlannedSourceState, 0, len(c.plannedStates))
	for _, s := range c.plannedStates {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b PlannedSourceState) int { return cmp.Compare(a.Source, b.Source) })
	return out
}

func (c *Cluster) setPlannedState(source, state, detail string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.plannedStates == nil {
		c.plannedStates = map[string]PlannedSourceState{}
	}
	prev := c.plannedStates[source]
	c.plannedStates[source] = PlannedSourceState{Source: source, State: state, Detail: detail}
	if prev.State != state {
		c.log.Info("planned-reboot source", zap.String("source", source), zap.String("state", state), zap.String("detail", detail))
	}
}

// WatchPlanned watches the planned-reboot signals of kured, medik8s's
// NodeMaintenance and Cluster API until ctx ends, and reports them with
// SetPlanned. A source whose resource is not served is looked for again
// every Recheck; one the agent may not read is reported so (PlannedSources)
// and retried by its informer. It returns when ctx ends.
func (c *Cluster) WatchPlanned(ctx context.Context, o PlannedOptions) {
	if o.Recheck <= 0 {
		o.Recheck = time.Minute
	}
	if o.Discovery == nil && o.Client != nil {
		o.Discovery = o.Client.Discovery()
	}
	var wg sync.WaitGroup
	run := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	if o.Kured.DaemonSet == "" || o.Client == nil {
		c.setPlannedState(SourceKured, PlannedOff, "no kured DaemonSet configured")
	} else {
		run(func() { c.watchKured(ctx, o) })
	}
	if o.Dynamic == nil || o.Discovery == nil {
		c.setPlannedState(SourceNodeMaintenance, PlannedOff, "no dynamic client")
		c.setPlannedState(SourceClusterAPI, PlannedOff, "no dynamic client")
	} else {
		run(func() {
			c.watchCR(ctx, o, SourceNodeMaintenance, []schema.GroupVersionResource{NodeMaintenances}, nodeMaintenanceSignal)
		})
		run(func() { c.watchCR(ctx, o, SourceClusterAPI, plannedMachineGVR, machineSignal) })
	}
	wg.Wait()
}

// plannedTracker keeps one source's open signals by object (key → node,
// what it says) and reports the whole set on every change.
type plannedTracker struct {
	c      *Cluster
	source string
	mu     sync.Mutex
	byObj  map[string]objSignal
}

type objSignal struct{ node, by string }

func (t *plannedTracker) set(key string, s objSignal, open bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, had := t.byObj[key]
	switch {
	case open && had && old == s, !open && !had:
		return
	case open:
		t.byObj[key] = s
	default:
		delete(t.byObj, key)
	}
	signals := map[string]map[string]string{}
	for k, s := range t.byObj {
		if signals[s.node] == nil {
			signals[s.node] = map[string]string{}
		}
		signals[s.node][k] = s.by
	}
	t.c.SetPlanned(t.source, signals)
}

// listState wraps an informer's list: its outcome is the source's state.
func (c *Cluster) listState(source, what string, list cache.ListWithContextFunc) cache.ListWithContextFunc {
	return func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		obj, err := list(ctx, o)
		switch {
		case err == nil:
			c.setPlannedState(source, PlannedWatched, what)
		case apierrors.IsForbidden(err):
			c.setPlannedState(source, PlannedForbidden, fmt.Sprintf("cannot list %s: %v", what, err))
		default:
			c.setPlannedState(source, PlannedFailing, fmt.Sprintf("listing %s: %v", what, err))
		}
		return obj, err
	}
}

func (c *Cluster) runPlannedInformer(ctx context.Context, t *plannedTracker, lw *cache.ListWatch, example runtime.Object,
	transform cache.TransformFunc, signal func(obj any) (objSignal, bool)) {
	inf := cache.NewSharedIndexInformerWithOptions(lw, example, cache.SharedIndexInformerOptions{ObjectDescription: t.source})
	_ = inf.SetTransform(transform)
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if apierrors.IsForbidden(err) {
			c.setPlannedState(t.source, PlannedForbidden, err.Error())
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	update := func(obj any) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return
		}
		s, open := signal(obj)
		t.set(key, s, open)
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, obj any) { update(obj) },
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				t.set(key, objSignal{}, false)
			}
		},
	})
	inf.RunWithContext(ctx)
}

// ---- kured -----------------------------------------------------------------

// watchKured watches kured's DaemonSet, and only it (a field selector on
// its name, in its namespace: the grant can name it).
func (c *Cluster) watchKured(ctx context.Context, o PlannedOptions) {
	k := o.Kured
	what := fmt.Sprintf("DaemonSet %s/%s", k.Namespace, k.DaemonSet)
	c.setPlannedState(SourceKured, PlannedStarting, what)
	ds := o.Client.AppsV1().DaemonSets(k.Namespace)
	selector := "metadata.name=" + k.DaemonSet
	lw := &cache.ListWatch{
		ListWithContextFunc: c.listState(SourceKured, what, func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
			lo.FieldSelector = selector
			return ds.List(ctx, lo)
		}),
		WatchFuncWithContext: func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			lo.FieldSelector = selector
			return ds.Watch(ctx, lo)
		},
	}
	t := &plannedTracker{c: c, source: SourceKured, byObj: map[string]objSignal{}}
	slim := func(obj any) (any, error) {
		d, ok := obj.(*appsv1.DaemonSet)
		if !ok {
			return obj, nil
		}
		out := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, UID: d.UID, ResourceVersion: d.ResourceVersion}}
		if v, ok := d.Annotations[k.Annotation]; ok {
			out.Annotations = map[string]string{k.Annotation: v}
		}
		return out, nil
	}
	// One lock names one node; kured's multi-lock (--concurrency > 1)
	// names several: each its own signal, keyed by node.
	var mu sync.Mutex
	locked := map[string]bool{}
	signal := func(obj any, deleted bool) {
		d, ok := tombstone(obj).(*appsv1.DaemonSet)
		if !ok || d.Name != k.DaemonSet || d.Namespace != k.Namespace {
			return // not kured's (the field selector keeps them out)
		}
		nodes := map[string]bool{}
		if !deleted {
			raw := d.Annotations[k.Annotation]
			ns, err := KuredLockedNodes(raw)
			if err != nil {
				c.log.Warn("ignoring kured's lock: cannot read it", zap.String("daemonset", what), zap.Error(err))
			}
			for _, n := range ns {
				nodes[n] = true
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for n := range locked {
			if !nodes[n] {
				t.set(n, objSignal{}, false)
				delete(locked, n)
			}
		}
		for n := range nodes {
			t.set(n, objSignal{node: n, by: SignalKuredLock}, true)
			locked[n] = true
		}
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, &appsv1.DaemonSet{}, cache.SharedIndexInformerOptions{ObjectDescription: what})
	_ = inf.SetTransform(slim)
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if apierrors.IsForbidden(err) {
			c.setPlannedState(SourceKured, PlannedForbidden, err.Error())
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { signal(obj, false) },
		UpdateFunc: func(_, obj any) { signal(obj, false) },
		DeleteFunc: func(obj any) { signal(obj, true) },
	})
	inf.RunWithContext(ctx)
}

// KuredLockedNodes reads kured's lock annotation: the node (or, with
// kured's --concurrency above 1, the nodes) holding the reboot lock.
// kured writes {"nodeID":N,"metadata":{...},"created":T,"TTL":D} for one
// holder (pkg/daemonsetlock LockAnnotationValue) and
// {"maxOwners":M,"locks":[{"nodeID":N,...},...]} for several
// (multiLockAnnotationValue). The lock's created and TTL are kured's
// clock and its own expiry; the agent's window counts on its own clock
// (policy.rebootWindow). An empty annotation holds nothing.
func KuredLockedNodes(raw string) ([]string, error) {
	if raw == "" {
		return nil, nil
	}
	var v struct {
		NodeID string `json:"nodeID"`
		Locks  *[]struct {
			NodeID string `json:"nodeID"`
		} `json:"locks"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return nil, fmt.Errorf("kured lock %q: %w", raw, err)
	}
	var out []string
	if v.Locks != nil {
		for _, l := range *v.Locks {
			if l.NodeID != "" && !slices.Contains(out, l.NodeID) {
				out = append(out, l.NodeID)
			}
		}
		return out, nil
	}
	if v.NodeID == "" {
		return nil, errors.New("kured lock " + raw + ": no nodeID")
	}
	return []string{v.NodeID}, nil
}

// ---- NodeMaintenance and Cluster API -----------------------------------------

// watchCR waits until one of gvrs is served (looking again every Recheck),
// then watches it.
func (c *Cluster) watchCR(ctx context.Context, o PlannedOptions, source string, gvrs []schema.GroupVersionResource,
	signal func(u *unstructured.Unstructured) (objSignal, bool)) {
	for {
		gvr, err := servedGVR(o.Discovery, gvrs)
		switch {
		case err == nil:
			c.watchServedCR(ctx, o, source, gvr, signal)
			return
		case errors.Is(err, errNotServed):
			c.setPlannedState(source, PlannedNotInstalled, err.Error())
		default:
			c.setPlannedState(source, PlannedFailing, err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(o.Recheck):
		}
	}
}

var errNotServed = errors.New("not served")

// servedGVR returns the first of gvrs the server serves.
func servedGVR(d kube.Discovery, gvrs []schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	for _, gvr := range gvrs {
		list, err := d.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		if apierrors.IsNotFound(err) || (err == nil && list == nil) {
			continue
		}
		if err != nil {
			return gvr, fmt.Errorf("discovery of %s: %w", gvr.GroupVersion(), err)
		}
		for _, r := range list.APIResources {
			if r.Name == gvr.Resource {
				return gvr, nil
			}
		}
	}
	return schema.GroupVersionResource{}, fmt.Errorf("%s.%s %w", gvrs[0].Resource, gvrs[0].Group, errNotServed)
}

func (c *Cluster) watchServedCR(ctx context.Context, o PlannedOptions, source string, gvr schema.GroupVersionResource,
	signal func(u *unstructured.Unstructured) (objSignal, bool)) {
	what := gvr.Resource + "." + gvr.Group + "/" + gvr.Version
	c.setPlannedState(source, PlannedStarting, what)
	res := o.Dynamic.Resource(gvr)
	lw := &cache.ListWatch{
		ListWithContextFunc: c.listState(source, what, func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
			return res.List(ctx, lo)
		}),
		WatchFuncWithContext: func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			return res.Watch(ctx, lo)
		},
	}
	t := &plannedTracker{c: c, source: source, byObj: map[string]objSignal{}}
	// Only the signal is kept: the store holds one small object per CR.
	slim := func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		if _, done := u.Object["signal"]; done {
			return u, nil
		}
		s, open := signal(u)
		out := &unstructured.Unstructured{Object: map[string]any{"signal": map[string]any{"node": s.node, "by": s.by, "open": open}}}
		out.SetAPIVersion(u.GetAPIVersion())
		out.SetKind(u.GetKind())
		out.SetName(u.GetName())
		out.SetNamespace(u.GetNamespace())
		out.SetUID(u.GetUID())
		out.SetResourceVersion(u.GetResourceVersion())
		return out, nil
	}
	read := func(obj any) (objSignal, bool) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return objSignal{}, false
		}
		node, _, _ := unstructured.NestedString(u.Object, "signal", "node")
		by, _, _ := unstructured.NestedString(u.Object, "signal", "by")
		open, _, _ := unstructured.NestedBool(u.Object, "signal", "open")
		return objSignal{node: node, by: by}, open && node != ""
	}
	c.runPlannedInformer(ctx, t, lw, &unstructured.Unstructured{}, slim, read)
}

// nodeMaintenanceSignal: a NodeMaintenance names its node in
// spec.nodeName; it is open while the CR exists (the operator cordons and
// drains the node; whoever does the maintenance may reboot it; deleting
// the CR ends the maintenance).
func nodeMaintenanceSignal(u *unstructured.Unstructured) (objSignal, bool) {
	node, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName")
	return objSignal{node: node, by: "NodeMaintenance " + u.GetName()}, node != ""
}

// machineSignal: a Cluster API Machine whose status.nodeRef names a node,
// and which is being deleted (a scale-down, a rollout, a remediation's
// last step: the Machine controller drains the node, then deletes its
// infrastructure), or which a MachineHealthCheck handed to its owner for
// remediation (condition OwnerRemediated False, reason
// WaitingForRemediation: the MachineSet or KubeadmControlPlane will
// delete and replace it). A remediation by an external remediator (the
// MachineHealthCheck's remediationTemplate: bmcfence's own
// BMCFenceRemediation among them) sets no OwnerRemediated condition and is
// no signal.
func machineSignal(u *unstructured.Unstructured) (objSignal, bool) {
	node, _, _ := unstructured.NestedString(u.Object, "status", "nodeRef", "name")
	id := "Cluster API Machine " + u.GetNamespace() + "/" + u.GetName()
	switch {
	case node == "":
		return objSignal{}, false
	case u.GetDeletionTimestamp() != nil:
		return objSignal{node: node, by: id + " deleted"}, true
	case ownerRemediating(u):
		return objSignal{node: node, by: id + " remediated by " + machineOwner(u)}, true
	}
	return objSignal{}, false
}

// ownerRemediating: the Machine carries the condition OwnerRemediated with
// status False, where any Cluster API version puts it: status.conditions
// (v1beta1 and v1beta2), status.v1beta2.conditions (v1beta1 in Cluster API
// v1.9 and v1.10), status.deprecated.v1beta1.conditions (v1beta2).
func ownerRemediating(u *unstructured.Unstructured) bool {
	for _, path := range [][]string{
		{"status", "conditions"},
		{"status", "v1beta2", "conditions"},
		{"status", "deprecated", "v1beta1", "conditions"},
	} {
		conds, _, _ := unstructured.NestedSlice(u.Object, path...)
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "OwnerRemediated" && m["status"] == "False" {
				return true
			}
		}
	}
	return false
}

// machineOwner names the Machine's controller ("MachineSet default/ms-1"),
// or "its owner".
func machineOwner(u *unstructured.Unstructured) string {
	for _, r := range u.GetOwnerReferences() {
		if r.Controller != nil && *r.Controller {
			return r.Kind + " " + u.GetNamespace() + "/" + r.Name
		}
	}
	return "its owner"
}
