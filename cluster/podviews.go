package cluster

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/bmcfence/bmcfence/fence"
)

// The pods of fencing nodes only (Options.PodsOfFencingNodesOnly, the
// agent's setting). The engine reads a node's pods in one place: a fence
// that applied its taint waits until they and the VolumeAttachments are
// gone (fence.Detaching). A cache of every pod in the cluster, kept for
// that, costs memory and CPU in proportion to the cluster's pods (thirty
// thousand of them about 10 MiB of the agent's heap, and every pod update
// decoded); so the Cluster watches the pods of a node only while its fence
// state is Tainting or Detaching, with a field selector the API server's
// watch cache answers from its index, as it answers every kubelet. Until
// that watch has listed, the node's view says PodsUnknown: not zero pods.

// podView is the watch of one node's pods.
type podView struct {
	informer cache.SharedIndexInformer
	// synced: our handler has seen the initial list.
	synced func() bool
	stop   context.CancelFunc
}

// watchesPods reports whether a node's pods are watched in this state: its
// fence has reached the taint (Tainting, so the list is ready by the time
// the taint lands) and not yet counted it detached. A state we cannot read
// is held by the runner: nothing to watch.
func watchesPods(state string) bool {
	if state == "" {
		return false
	}
	s, err := fence.Decode(state)
	if err != nil {
		return false
	}
	return s.Phase == fence.Tainting || s.Phase == fence.Detaching
}

// followPodsLocked starts or stops the watch of the node's pods as its state
// asks. Called with c.mu held, whenever the node is taken in.
func (c *Cluster) followPodsLocked(n *corev1.Node, stateChanged bool) {
	if c.podViews == nil || (!stateChanged && c.podViews[n.Name] == nil) {
		return
	}
	want := watchesPods(n.Annotations[AnnotationState])
	v := c.podViews[n.Name]
	switch {
	case want && v == nil:
		c.watchPodsLocked(n.Name, n.ResourceVersion)
	case !want && v != nil:
		c.unwatchPodsLocked(n.Name)
	}
}

// watchPodsLocked starts the watch of the node's pods. Called with c.mu
// held, after Start (runCtx set; before, the handlers that call it do not
// run). nodeRV is the resourceVersion of the node as taken in with its
// fence at the taint: the list is of the pods not older than that.
func (c *Cluster) watchPodsLocked(node, nodeRV string) {
	if c.runCtx == nil {
		return
	}
	sel := "spec.nodeName=" + node + ",status.phase!=Succeeded,status.phase!=Failed"
	core := c.client.CoreV1()
	inf := cache.NewSharedIndexInformerWithOptions(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			// One node's pods, in one answer, from the API server's watch
			// cache and its node-name index: no limit (with one, some
			// versions read from etcd, every pod of the cluster scanned
			// for this node's), and a snapshot not older than the node at
			// its fence's taint (or than what this watch last saw, on a
			// relist), which every version serves from the cache. Any
			// snapshot is safe with the watch that follows it from its
			// resourceVersion: a pod gone since is a delete event, one
			// bound since an add. (Without a version, a fake client's
			// objects: a consistent list.)
			o.FieldSelector, o.Limit, o.Continue = sel, 0, ""
			if o.ResourceVersion == "" || o.ResourceVersion == "0" {
				o.ResourceVersion = nodeRV
			}
			o.ResourceVersionMatch = ""
			if o.ResourceVersion != "" {
				o.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
			}
			l, err := core.Pods(metav1.NamespaceAll).List(ctx, o)
			if err != nil {
				return nil, err
			}
			out := &podSummaryList{Items: make([]*podSummary, 0, len(l.Items))}
			for i := range l.Items {
				out.Items = append(out.Items, summarize(&l.Items[i]))
			}
			out.ResourceVersion = l.ResourceVersion
			return out, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return core.Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}, &corev1.Pod{}, cache.SharedIndexInformerOptions{ResyncPeriod: c.resync, ObjectDescription: "pods of node " + node})
	// None of these can fail on an informer that has not started; one
	// that did would leave the node's pods unknown (no view), not wrong.
	errTransform := inf.SetTransform(summarizePod)
	errHandler := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		c.logWatchError("pods of node "+node, err)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	reg, errAdd := inf.AddEventHandler(c.handler("pods"))
	if err := errors.Join(errTransform, errHandler, errAdd); err != nil {
		c.log.Error("cannot watch the pods of a node being fenced; its pods stay unknown", zap.String("node", node), zap.Error(err))
		return
	}
	ctx, cancel := context.WithCancel(c.runCtx)
	v := &podView{informer: inf, stop: cancel, synced: func() bool { return inf.HasSynced() && reg.HasSynced() }}
	c.podViews[node] = v
	if e := c.entries[node]; e != nil {
		e.stale = true
	}
	go inf.RunWithContext(ctx)
	go func() {
		// A node without pods gets no event when its list completes: say
		// so, once (the view goes from PodsUnknown to none).
		if wait.PollUntilContextCancel(ctx, podViewSyncPoll, true, func(context.Context) (bool, error) { return v.synced(), nil }) == nil {
			c.nodesChanged(node)
		}
	}()
}

// podViewSyncPoll: how often a starting pod watch is asked whether it has
// listed. The list is one request; the runner re-reads the node at least
// every 30 s anyway.
const podViewSyncPoll = 100 * time.Millisecond

// unwatchPodsLocked stops the watch of the node's pods. Called with c.mu
// held.
func (c *Cluster) unwatchPodsLocked(node string) {
	v := c.podViews[node]
	if v == nil {
		return
	}
	v.stop()
	delete(c.podViews, node)
	if e := c.entries[node]; e != nil {
		e.stale = true
	}
}

// podsOfLocked returns the node's pods and whether they are known: from
// the cache of every pod, or from the node's own watch once it has listed.
func (c *Cluster) podsOfLocked(node string) ([]*podSummary, bool) {
	if c.podViews == nil {
		return byIndex[*podSummary](c.podIndexer, node), true
	}
	v := c.podViews[node]
	if v == nil || !v.synced() {
		return nil, false
	}
	objs := v.informer.GetStore().List()
	out := make([]*podSummary, 0, len(objs))
	for _, o := range objs {
		// The field selector is the server's; what counts is checked here.
		if p, ok := o.(*podSummary); ok && p.nodeName == node {
			out = append(out, p)
		}
	}
	return out, true
}
