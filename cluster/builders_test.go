package cluster

import (
	"context"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

// t0 is where every fake clock starts; whole seconds, because metav1.Time
// (TimeAdded, heartbeats) serialises to the second.
var t0 = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)

// at is t0 plus d: the scripts read as timelines.
func at(d time.Duration) time.Time { return t0.Add(d) }

// oos is the taint we apply; foreign variants are built from it.
var oos = func() corev1.Taint {
	t := OutOfServiceTaint()
	t.TimeAdded = ptr.To(metav1.NewTime(at(30 * time.Second)))
	return t
}()

// token is the fencing token: the state annotation the caller last wrote.
const token = "S"

// withTokenOn gives n the state annotation token, unless it has one.
func withTokenOn(n *corev1.Node) *corev1.Node {
	if _, ok := n.Annotations[AnnotationState]; !ok {
		withState(token)(n)
	}
	return n
}

// ---- nodes ----

type nodeOpt func(*corev1.Node)

// node builds a Node named name with a fixed UID and resourceVersion "1";
// with no options it has no Ready condition.
func node(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func condition(s corev1.ConditionStatus, beat time.Time) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s, LastHeartbeatTime: metav1.NewTime(beat)}}
	}
}

// ready, notReady and readyUnknown set the Ready condition with the node's
// own last heartbeat time.
func ready(beat time.Time) nodeOpt        { return condition(corev1.ConditionTrue, beat) }
func notReady(beat time.Time) nodeOpt     { return condition(corev1.ConditionFalse, beat) }
func readyUnknown(beat time.Time) nodeOpt { return condition(corev1.ConditionUnknown, beat) }

func withTaint(t corev1.Taint) nodeOpt {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, t) }
}

func withAnnotation(k, v string) nodeOpt {
	return func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[k] = v
	}
}

func withLabel(k, v string) nodeOpt {
	return func(n *corev1.Node) {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[k] = v
	}
}

// ownedByUs is the owner annotation that makes oos ours.
func ownedByUs() nodeOpt { return withAnnotation(AnnotationTaintOwner, TaintOwnerMark(oos)) }

func withState(s string) nodeOpt { return withAnnotation(AnnotationState, s) }

func withRequest(t *testing.T, r Request) nodeOpt {
	t.Helper()
	v, err := EncodeRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	return withAnnotation(AnnotationRequest, v)
}

func rv(v string) nodeOpt { return func(n *corev1.Node) { n.ResourceVersion = v } }

// foreign returns a taint with our key that we did not add.
func foreign(effect corev1.TaintEffect) corev1.Taint {
	return corev1.Taint{Key: TaintKey, Value: "by-hand", Effect: effect}
}

var otherTaint = corev1.Taint{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}

// ---- leases, pods, VolumeAttachments ----

// lease builds the node's Lease with the node's own renewTime, and a
// resourceVersion derived from it (each renewal is a new version).
func lease(nodeName string, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Namespace: corev1.NamespaceNodeLease,
			ResourceVersion: strconv.FormatInt(renew.Unix(), 10)},
		Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(renew)), HolderIdentity: ptr.To(nodeName)},
	}
}

type podOpt func(*corev1.Pod)

// pod builds a Running pod bound to nodeName.
func pod(ns, name, nodeName string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), ResourceVersion: "1"},
		Spec:       corev1.PodSpec{NodeName: nodeName},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func terminating(since time.Time) podOpt {
	return func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(since)) }
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

// toleratingEverything is what DaemonSets and some operators add.
func toleratingEverything() podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
	}
}

func toleratingOutOfService() podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: TaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
	}
}

func ownedByDaemonSet() podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "ds-uid", Controller: ptr.To(true)}}
	}
}

func mirror() podOpt {
	return func(p *corev1.Pod) {
		p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
	}
}

func va(name, nodeName, pv string) *storagev1.VolumeAttachment {
	v := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: "csi.example.com", NodeName: nodeName},
	}
	if pv != "" {
		v.Spec.Source.PersistentVolumeName = ptr.To(pv)
	}
	return v
}

// ---- the harness ----

// harness is a Cluster on a fake clientset and a fake clock whose informers
// are never started: tests put objects in the caches and call the handlers,
// exactly as an informer would deliver them (the podgc tests' pattern).
type harness struct {
	t      *testing.T
	c      *Cluster
	client *fake.Clientset
	clock  *clocktesting.FakeClock
}

// newHarness builds the Cluster; objs are the API server's objects (for the
// writes), not the cache's.
func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	client := fake.NewClientset(objs...)
	clk := clocktesting.NewFakeClock(t0)
	c, err := New(clientgo.Wrap(client), Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return &harness{t: t, c: c, client: client, clock: clk}
}

// transform applies the informer's transform to a copy of obj, as the
// informer does before its store and our handlers see it.
func (h *harness) transform(informer string, obj runtime.Object) any {
	h.t.Helper()
	for _, ni := range h.c.informers {
		if ni.name == informer && ni.transform != nil {
			out, err := ni.transform(obj.DeepCopyObject())
			if err != nil {
				h.t.Fatal(err)
			}
			return out
		}
	}
	return obj
}

func (h *harness) indexer(informer string) cache.Indexer {
	for _, ni := range h.c.informers {
		if ni.name == informer {
			return ni.informer.GetIndexer()
		}
	}
	h.t.Fatalf("no informer %q", informer)
	return nil
}

// deliver puts each object in its cache and calls the add (or, if the cache
// held an older version, the update) handler, like an informer.
func (h *harness) deliver(objs ...runtime.Object) {
	h.t.Helper()
	for _, obj := range objs {
		name, idx := h.route(obj)
		obj := h.transform(name, obj)
		old, exists, err := idx.Get(obj)
		if err != nil {
			h.t.Fatal(err)
		}
		if err := idx.Update(obj); err != nil {
			h.t.Fatal(err)
		}
		handlers := h.handlers(name)
		if exists {
			handlers.OnUpdate(old, obj)
		} else {
			handlers.OnAdd(obj, false)
		}
	}
}

// remove deletes each object from its cache and calls the delete handler.
func (h *harness) remove(objs ...runtime.Object) {
	h.t.Helper()
	for _, obj := range objs {
		name, idx := h.route(obj)
		obj := h.transform(name, obj)
		if err := idx.Delete(obj); err != nil {
			h.t.Fatal(err)
		}
		h.handlers(name).OnDelete(obj)
	}
}

func (h *harness) route(obj runtime.Object) (string, cache.Indexer) {
	var name string
	switch obj.(type) {
	case *corev1.Node:
		name = "nodes"
	case *coordinationv1.Lease:
		name = "leases"
	case *corev1.Pod:
		name = "pods"
	case *storagev1.VolumeAttachment:
		name = "volumeattachments"
	default:
		h.t.Fatalf("no informer for %T", obj)
	}
	return name, h.indexer(name)
}

func (h *harness) handlers(informer string) cache.ResourceEventHandler { return h.c.handler(informer) }

func (h *harness) view(name string) runner.NodeInfo {
	h.t.Helper()
	info, ok := h.c.Node(name)
	if !ok {
		h.t.Fatalf("Node(%q): not found", name)
	}
	return info
}

// changed drains Changed() without blocking.
func (h *harness) changed() []string {
	var out []string
	for {
		select {
		case n := <-h.c.Changed():
			out = append(out, n)
		default:
			return out
		}
	}
}

// leasePoller is the Cluster's Lease poller (not running: the harness
// delivers objects itself).
func (h *harness) leasePoller() *leasePoller {
	h.t.Helper()
	for _, ni := range h.c.informers {
		if p, ok := ni.informer.(*leasePoller); ok {
			return p
		}
	}
	h.t.Fatal("no Lease poller")
	return nil
}
