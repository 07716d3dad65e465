package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bmcfence/bmcfence/internal/kube"
)

// podSummary is all the cache keeps of a pod bound to a node: what counting
// the work on the node and naming its blockers read. A real cluster runs
// some thirty pods per node; a corev1.Pod is 1.1 KiB before any of its
// fields is set (its spec alone is 560 bytes of struct), so even slimmed
// to a few fields the pods of a thousand nodes took some 45 MiB. A summary
// is about a tenth of that. The informer's transform (summarizePod) makes
// it from the decoded pod, which is dropped at once.
//
// It implements runtime.Object and metav1.Object for the informer (which
// keys objects by namespace and name); the fields it does not keep read
// as empty and cannot be set.
type podSummary struct {
	namespace, name, resourceVersion string
	nodeName                         string
	phase                            corev1.PodPhase
	// deleting: the pod has a deletionTimestamp (it is terminating).
	deleting bool
	// ownedByNode: a DaemonSet or mirror (static) pod: bound to its node
	// by design, never evicted or moved (tiesWork).
	ownedByNode bool
	// toleratesOutOfService: the out-of-service taint will never evict it.
	toleratesOutOfService bool
}

// summarizePod is the pods informer's transform: a *corev1.Pod becomes its
// podSummary; a summary (client-go may transform twice) and anything else
// (a tombstone) pass through.
func summarizePod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return summarize(p), nil
}

func summarize(p *corev1.Pod) *podSummary {
	s := &podSummary{
		namespace:       intern(p.Namespace),
		name:            p.Name,
		resourceVersion: p.ResourceVersion,
		nodeName:        intern(p.Spec.NodeName),
		phase:           corev1.PodPhase(intern(string(p.Status.Phase))),
		deleting:        p.DeletionTimestamp != nil,
	}
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil && ref.Kind == "DaemonSet" {
		s.ownedByNode = true
	}
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		s.ownedByNode = true
	}
	oos := OutOfServiceTaint()
	for i := range p.Spec.Tolerations {
		if p.Spec.Tolerations[i].ToleratesTaint(&oos) {
			s.toleratesOutOfService = true
			break
		}
	}
	return s
}

// interned holds one copy of each namespace, node name and phase: thirty
// thousand pods share a few hundred of each.
var interned sync.Map

// intern returns the one shared copy of s. Only short, repeated strings
// are interned (namespaces, node names, phases); the map grows with the
// namespaces and nodes the cluster ever had, a few tens of KiB.
func intern(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := interned.Load(s); ok {
		return v.(string)
	}
	v, _ := interned.LoadOrStore(s, s)
	return v.(string)
}

// tiesWork reports whether a pod bound to the node is work that must leave
// it before the node counts as detached: not finished (Succeeded/Failed),
// and not a pod that belongs to the node itself. DaemonSet pods and static
// (mirror) pods are bound to their node by design, tolerate the
// out-of-service taint, and are never evicted or moved: counting them would
// keep every real node "detaching" forever. kubectl drain skips the same
// two kinds.
func (s *podSummary) tiesWork() bool {
	switch s.phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return false
	case corev1.PodPending, corev1.PodRunning, corev1.PodUnknown:
	}
	return !s.ownedByNode
}

var (
	_ runtime.Object = (*podSummary)(nil)
	_ metav1.Object  = (*podSummary)(nil)
)

// runtime.Object.

func (s *podSummary) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (s *podSummary) DeepCopyObject() runtime.Object   { c := *s; return &c }

// metav1.Object: what the summary keeps; the rest reads as empty.

func (s *podSummary) GetNamespace() string                  { return s.namespace }
func (s *podSummary) SetNamespace(ns string)                { s.namespace = ns }
func (s *podSummary) GetName() string                       { return s.name }
func (s *podSummary) SetName(name string)                   { s.name = name }
func (s *podSummary) GetResourceVersion() string            { return s.resourceVersion }
func (s *podSummary) SetResourceVersion(rv string)          { s.resourceVersion = rv }
func (s *podSummary) GetGenerateName() string               { return "" }
func (s *podSummary) SetGenerateName(string)                {}
func (s *podSummary) GetUID() types.UID                     { return "" }
func (s *podSummary) SetUID(types.UID)                      {}
func (s *podSummary) GetGeneration() int64                  { return 0 }
func (s *podSummary) SetGeneration(int64)                   {}
func (s *podSummary) GetSelfLink() string                   { return "" }
func (s *podSummary) SetSelfLink(string)                    {}
func (s *podSummary) GetCreationTimestamp() metav1.Time     { return metav1.Time{} }
func (s *podSummary) SetCreationTimestamp(metav1.Time)      {}
func (s *podSummary) GetDeletionTimestamp() *metav1.Time    { return nil }
func (s *podSummary) SetDeletionTimestamp(*metav1.Time)     {}
func (s *podSummary) GetDeletionGracePeriodSeconds() *int64 { return nil }
func (s *podSummary) SetDeletionGracePeriodSeconds(*int64)  {}
func (s *podSummary) GetLabels() map[string]string          { return nil }
func (s *podSummary) SetLabels(map[string]string)           {}
func (s *podSummary) GetAnnotations() map[string]string     { return nil }
func (s *podSummary) SetAnnotations(map[string]string)      {}
func (s *podSummary) GetFinalizers() []string               { return nil }
func (s *podSummary) SetFinalizers([]string)                {}
func (s *podSummary) GetOwnerReferences() []metav1.OwnerReference {
	return nil
}
func (s *podSummary) SetOwnerReferences([]metav1.OwnerReference) {}
func (s *podSummary) GetManagedFields() []metav1.ManagedFieldsEntry {
	return nil
}
func (s *podSummary) SetManagedFields([]metav1.ManagedFieldsEntry) {}

// PodsToleratingOutOfService names the pods that tie work to their node
// and tolerate the out-of-service taint ("namespace/name on node"), sorted:
// the taint will never move them off a fenced node. DaemonSet and mirror
// pods are not counted: they belong to their node. From the cache of every
// pod; under PodsOfFencingNodesOnly from a list in pages (podPageSize),
// summarized page by page and then dropped.
func (c *Cluster) PodsToleratingOutOfService(ctx context.Context) ([]string, error) {
	var out []string
	take := func(p *podSummary) {
		if p.toleratesOutOfService && p.tiesWork() {
			out = append(out, p.namespace+"/"+p.name+" on "+p.nodeName)
		}
	}
	if c.podIndexer != nil {
		for _, o := range c.podIndexer.List() {
			if p, ok := o.(*podSummary); ok {
				take(p)
			}
		}
	} else if _, err := eachPodPage(ctx, c.client, metav1.ListOptions{FieldSelector: podFieldSelector}, take); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// podPageSize bounds one page of the pods informer's list: the decoded
// pods of one page (a few MiB at most) are all that is held beside the
// summaries while it lists, instead of every pod of the cluster decoded at
// once (hundreds of MiB at thirty thousand pods).
const podPageSize = 500

// listPodSummaries lists the pods matching o in pages of podPageSize,
// summarizing each page before asking for the next, and returns the
// summaries as one list (a runtime.Object the reflector can take apart) at
// the list's resourceVersion.
func listPodSummaries(ctx context.Context, core kube.Interface, o metav1.ListOptions) (runtime.Object, error) {
	out := &podSummaryList{}
	rv, err := eachPodPage(ctx, core, o, func(p *podSummary) { out.Items = append(out.Items, p) })
	if err != nil {
		return nil, err
	}
	out.ResourceVersion = rv
	return out, nil
}

// eachPodPage lists the pods matching o in pages of podPageSize and calls
// f with each one's summary before it asks for the next page; it returns
// the list's resourceVersion.
func eachPodPage(ctx context.Context, core kube.Interface, o metav1.ListOptions, f func(*podSummary)) (string, error) {
	// Pages of the most recent state (resourceVersion ""): a list at "0" is
	// served whole from the API server's cache, whatever the limit, and a
	// relist's last-seen version with a limit asks for exactly that version
	// (gone after a while). The most recent is never older than either.
	o.ResourceVersion, o.ResourceVersionMatch = "", ""
	o.Limit = podPageSize
	for {
		page, err := core.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
		if err != nil {
			return "", err
		}
		for i := range page.Items {
			f(summarize(&page.Items[i]))
		}
		if page.Continue == "" {
			return page.ResourceVersion, nil
		}
		o.Continue, o.ResourceVersion, o.ResourceVersionMatch = page.Continue, "", ""
	}
}

// podSummaryList is a list of summaries for the reflector (meta.ExtractList
// reads Items by reflection: a slice of runtime.Objects).
type podSummaryList struct {
	metav1.ListMeta
	Items []*podSummary
}

func (l *podSummaryList) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (l *podSummaryList) DeepCopyObject() runtime.Object {
	c := &podSummaryList{ListMeta: *l.ListMeta.DeepCopy(), Items: make([]*podSummary, len(l.Items))}
	for i, s := range l.Items {
		cp := *s
		c.Items[i] = &cp
	}
	return c
}

func (s *podSummary) String() string {
	return fmt.Sprintf("%s/%s on %s (%s)", s.namespace, s.name, s.nodeName, s.phase)
}
