package cluster

import (
	"bytes"
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// byNodeName indexes Pods and VolumeAttachments by spec.nodeName.
const byNodeName = "spec.nodeName"

// podFieldSelector keeps unscheduled and finished pods out of the cache (and
// out of memory): neither ties work to a node. A pod that finishes leaves
// the selection and the watch reports it deleted. The scheduler watches
// assigned pods the same way.
const podFieldSelector = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"

func podNodeName(obj any) ([]string, error) {
	p, ok := obj.(*podSummary)
	if !ok || p.nodeName == "" {
		return nil, nil
	}
	return []string{p.nodeName}, nil
}

func vaNodeName(obj any) ([]string, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{va.Spec.NodeName}, nil
}

// The transforms below keep only what the agent reads, so that its memory
// grows with the number of objects, not with their size. Each is idempotent
// (client-go may hand it an object it already transformed) and passes
// anything else (tombstones) through.

// slimNode drops what a node carries in bulk and we never read: managed
// fields, the image list (often tens of KiB), last-applied configuration,
// the resource lists, the volumes in use and attached, the runtime's
// handlers and features. (Drains, which place pods by allocatable
// resources, list Nodes from the API server themselves.)
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	n.ManagedFields = nil
	n.Status.Images = nil
	n.Status.Capacity, n.Status.Allocatable = nil, nil
	n.Status.VolumesInUse, n.Status.VolumesAttached = nil, nil
	n.Status.RuntimeHandlers, n.Status.Features, n.Status.Config = nil, nil, nil
	delete(n.Annotations, corev1.LastAppliedConfigAnnotation)
	return n, nil
}

// slimLease keeps the renewal time (and the holder, for debugging).
func slimLease(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, UID: l.UID, ResourceVersion: l.ResourceVersion},
		Spec:       coordinationv1.LeaseSpec{RenewTime: l.Spec.RenewTime, HolderIdentity: l.Spec.HolderIdentity},
	}, nil
}

// slimVolumeAttachment drops the inline volume spec and status messages.
func slimVolumeAttachment(obj any) (any, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok {
		return obj, nil
	}
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{
			Name: va.Name, UID: va.UID, ResourceVersion: va.ResourceVersion, DeletionTimestamp: va.DeletionTimestamp,
		},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: va.Spec.Attacher, NodeName: va.Spec.NodeName,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: va.Spec.Source.PersistentVolumeName},
		},
		Status: storagev1.VolumeAttachmentStatus{Attached: va.Status.Attached},
	}, nil
}

// informerSpec is one of our three informers (nodes, pods, VolumeAttachments) before it is built.
type informerSpec struct {
	name      string
	example   runtime.Object
	list      cache.ListWithContextFunc
	watch     cache.WatchFuncWithContext
	indexers  cache.Indexers
	transform cache.TransformFunc
}

// newInformers builds the Node, Lease, Pod and VolumeAttachment informers.
// They are built from plain ListWatches rather than a SharedInformerFactory
// so the Pod list can carry its field selector. The Leases are listed
// every LeaseListPeriod instead (leasePoller).
func (c *Cluster) newInformers() error {
	core, coord, storage := c.client.CoreV1(), c.client.CoordinationV1(), c.client.StorageV1()
	leases := coord.Leases(corev1.NamespaceNodeLease)
	specs := []informerSpec{{
		name: "nodes", example: &corev1.Node{}, transform: slimNode,
		list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Nodes().List(ctx, o)
		},
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return core.Nodes().Watch(ctx, o)
		},
	}, {
		// Pods are cached as summaries (podSummary), listed in pages;
		// under PodsOfFencingNodesOnly they are watched node by node
		// instead (podviews.go).
		name: "pods", example: &corev1.Pod{}, transform: summarizePod,
		indexers: cache.Indexers{byNodeName: podNodeName},
		list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = podFieldSelector
			return listPodSummaries(ctx, c.client, o)
		},
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = podFieldSelector
			return core.Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}, {
		name: "volumeattachments", example: &storagev1.VolumeAttachment{}, transform: slimVolumeAttachment,
		indexers: cache.Indexers{byNodeName: vaNodeName},
		list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return storage.VolumeAttachments().List(ctx, o)
		},
		watch: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return storage.VolumeAttachments().Watch(ctx, o)
		},
	}}
	for _, s := range specs {
		if s.name == "pods" && c.podViews != nil {
			continue
		}
		inf := cache.NewSharedIndexInformerWithOptions(
			&cache.ListWatch{ListWithContextFunc: s.list, WatchFuncWithContext: s.watch},
			s.example,
			cache.SharedIndexInformerOptions{ResyncPeriod: c.resync, Indexers: s.indexers, ObjectDescription: s.name},
		)
		if err := inf.SetTransform(s.transform); err != nil {
			return fmt.Errorf("%s informer: %w", s.name, err)
		}
		name := s.name
		if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			c.noteWatchError(name, err)
			cache.DefaultWatchErrorHandler(ctx, r, err)
		}); err != nil {
			return fmt.Errorf("%s informer: %w", s.name, err)
		}
		reg, err := inf.AddEventHandler(c.handler(s.name))
		if err != nil {
			return fmt.Errorf("%s informer: %w", s.name, err)
		}
		c.informers = append(c.informers, namedInformer{name: s.name, informer: inf, handlerSynced: reg.HasSynced, transform: s.transform})
		switch s.name {
		case "nodes":
			c.nodeInformer = inf
		case "pods":
			c.podIndexer = inf.GetIndexer()
		case "volumeattachments":
			c.vaIndexer = inf.GetIndexer()
		}
	}
	// The Leases are listed, not watched (leasePoller).
	poller := &leasePoller{
		list: func(ctx context.Context, buf *bytes.Buffer) ([]byte, error) {
			// No resourceVersion: a consistent read, as onLeaseList's
			// stamp requires.
			return listLeases(ctx, coord.RESTClient(), leases, buf)
		},
		store:  newLeaseStore(c.handler("leases")),
		period: c.leaseListPeriod,
		now:    c.clock.Now,
		timer:  clock.RealClock{},
		onList: c.onLeaseList,
		onErr:  func(err error) { c.noteWatchError("leases", err) },
		log:    c.log,
	}
	c.informers = append(c.informers, namedInformer{name: "leases", informer: poller, handlerSynced: poller.HasSynced, transform: slimLease})
	return nil
}

// handler is our event handler for one informer.
func (c *Cluster) handler(informer string) cache.ResourceEventHandler {
	switch informer {
	case "nodes":
		return cache.ResourceEventHandlerFuncs{AddFunc: c.nodeAdded, UpdateFunc: c.nodeUpdated, DeleteFunc: c.nodeDeleted}
	case "leases":
		return cache.ResourceEventHandlerFuncs{AddFunc: c.leaseAdded, UpdateFunc: c.leaseUpdated, DeleteFunc: c.leaseDeleted}
	case "pods":
		return cache.ResourceEventHandlerFuncs{AddFunc: c.podAdded, UpdateFunc: c.podUpdated, DeleteFunc: c.podDeleted}
	case "volumeattachments":
		return cache.ResourceEventHandlerFuncs{AddFunc: c.vaAdded, UpdateFunc: c.vaUpdated, DeleteFunc: c.vaDeleted}
	}
	panic("cluster: no handler for informer " + informer)
}

type namedInformer struct {
	name     string
	informer informer
	// handlerSynced: our handlers have received the initial list, so the
	// observations cover every object (an informer's own HasSynced only
	// says its store has).
	handlerSynced cache.InformerSynced
	// transform is what the informer applies to each object before its
	// store and our handlers see it.
	transform cache.TransformFunc
}

// informer is what the Cluster runs of a shared informer, and of the Lease
// lists (leasePoller).
type informer interface {
	RunWithContext(ctx context.Context)
	HasSynced() bool
	IsStopped() bool
	GetIndexer() cache.Indexer
}

// tombstone unwraps a deletion's final state.
func tombstone(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}
