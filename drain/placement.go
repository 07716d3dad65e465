package drain

import (
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/bmcfence/bmcfence/cluster"
)

// The placement check answers, before anything is touched: does every pod
// that must move have another node to go to? It uses the scheduler's own
// predicates (component-helpers) for what it checks:
//
//   - the node: schedulable (not cordoned), not in maintenance, Ready;
//   - nodeSelector and required node affinity;
//   - NoSchedule/NoExecute taints against the pod's tolerations;
//   - resources: allocatable minus the requests of the pods already there
//     (and of the pods this drain already placed there), and the pod count;
//   - the node affinity of the pod's bound PersistentVolumes (zonal and
//     local volumes);
//   - required pod anti-affinity, both ways (the pod's terms against the
//     pods there, and their terms against the pod).
//
// Pods are placed greedily, largest requests first, each on the fitting
// node with the most free CPU (the scheduler's default spreads the same
// way). Greedy packing can miss a packing that exists, never invent one
// that does not. Not checked: required pod affinity, topology spread
// constraints, host ports, dynamic resources; a pod they keep Pending shows
// in the Report as a rollout or replacement that did not finish.

// mover is a pod that must move, with its bound volumes.
type mover struct {
	pod      *corev1.Pod
	volumes  []*corev1.PersistentVolume
	decision *decision
}

// placement is a mover's outcome: a target, or why not.
type placement struct {
	target string
	unfit  []Unfit
}

// room is what a candidate node has left.
type room struct {
	node       *corev1.Node
	ineligible UnfitCause // "" when the node can take pods at all
	free       corev1.ResourceList
	freePods   int64
	pods       []*corev1.Pod // there now, plus placed by this check
	// repelling: those of pods with required anti-affinity terms, the
	// only ones whose terms can keep a pod away (few in most clusters).
	repelling []*corev1.Pod
}

// place decides a target for each mover. drained is the node being
// drained; staying are the bound, unfinished pods that do not move.
func place(drained string, nodes []*corev1.Node, staying []*corev1.Pod, movers []mover, nsLabels func(string) labels.Set) map[types.UID]placement {
	rooms := make([]*room, 0, len(nodes)) // candidates
	all := &domains{byKey: map[string]map[string][]*room{}}
	byName := map[string]*room{}
	for _, n := range nodes {
		r := &room{node: n, free: n.Status.Allocatable.DeepCopy()}
		if r.free == nil {
			r.free = corev1.ResourceList{}
		}
		if q, ok := n.Status.Allocatable[corev1.ResourcePods]; ok {
			r.freePods = q.Value()
		}
		switch {
		case n.Spec.Unschedulable:
			r.ineligible = UnfitCordoned
		case cluster.InMaintenance(n):
			r.ineligible = UnfitMaintenance
		case !cluster.NodeReady(n):
			r.ineligible = UnfitNotReady
		}
		byName[n.Name] = r
		all.rooms = append(all.rooms, r)
		if n.Name != drained {
			rooms = append(rooms, r)
		}
	}
	for _, p := range staying {
		if r := byName[p.Spec.NodeName]; r != nil {
			all.take(r, p)
		}
	}

	order := append([]mover(nil), movers...)
	sort.SliceStable(order, func(i, j int) bool {
		ri, rj := podRequests(order[i].pod), podRequests(order[j].pod)
		ci, cj := ri.Cpu().MilliValue(), rj.Cpu().MilliValue()
		if ci != cj {
			return ci > cj
		}
		return ri.Memory().Value() > rj.Memory().Value()
	})

	out := map[types.UID]placement{}
	for _, m := range order {
		if len(rooms) == 0 {
			out[m.pod.UID] = placement{unfit: []Unfit{{Cause: UnfitNoOtherNode}}}
			continue
		}
		var best *room
		var unfit unfitSet
		for _, r := range rooms {
			cause, detail := r.fits(m, all, nsLabels)
			if cause != "" {
				unfit.add(cause, detail, r.node.Name)
				continue
			}
			if best == nil || r.moreFreeThan(best) {
				best = r
			}
		}
		if best == nil {
			out[m.pod.UID] = placement{unfit: unfit.list()}
			continue
		}
		all.take(best, m.pod)
		out[m.pod.UID] = placement{target: best.node.Name}
	}
	return out
}

// take books p's requests on the node.
func (r *room) take(p *corev1.Pod) {
	for name, q := range podRequests(p) {
		free := r.free[name]
		free.Sub(q)
		r.free[name] = free
	}
	r.freePods--
	r.pods = append(r.pods, p)
	if len(requiredAntiAffinity(p)) > 0 {
		r.repelling = append(r.repelling, p)
	}
}

func (r *room) moreFreeThan(o *room) bool {
	a, b := r.free[corev1.ResourceCPU], o.free[corev1.ResourceCPU]
	if c := a.Cmp(b); c != 0 {
		return c > 0
	}
	a, b = r.free[corev1.ResourceMemory], o.free[corev1.ResourceMemory]
	return a.Cmp(b) > 0
}

// fits returns "" when m's pod fits on r, else the first cause found (in
// the order a human would fix them) and its detail.
func (r *room) fits(m mover, all *domains, nsLabels func(string) labels.Set) (UnfitCause, string) {
	if r.ineligible != "" {
		return r.ineligible, ""
	}
	pod, node := m.pod, r.node
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
		return UnfitNodeAffinity, ""
	}
	if t, untolerated := corev1helpers.FindMatchingUntoleratedTaint(node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}); untolerated {
		return UnfitTaint, t.ToString()
	}
	for _, pv := range m.volumes {
		if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
			continue
		}
		if ok, err := nodeaffinity.NewLazyErrorNodeSelector(pv.Spec.NodeAffinity.Required).Match(node); err != nil || !ok {
			return UnfitVolumeAffinity, pv.Name
		}
	}
	if other := antiAffinityConflict(pod, node, all, nsLabels); other != "" {
		return UnfitPodAntiAffinity, other
	}
	var short []string
	for name, q := range podRequests(pod) {
		if q.IsZero() {
			continue
		}
		free, ok := r.free[name]
		if !ok || free.Cmp(q) < 0 {
			short = append(short, string(name))
		}
	}
	if r.freePods < 1 {
		short = append(short, string(corev1.ResourcePods))
	}
	if len(short) > 0 {
		sort.Strings(short)
		return UnfitResources, strings.Join(short, ", ")
	}
	return "", ""
}

// domains finds the rooms in a topology domain (the nodes sharing a label
// value), for pod anti-affinity: only pods in the candidate's domain can
// conflict with a pod placed there. It holds every node's room, the drained
// node's too: the pods staying there (DaemonSets) share its zone with the
// candidates.
type domains struct {
	rooms []*room
	// byKey: topology key → label value → rooms, in rooms' order; built
	// for a key the first time it is asked about.
	byKey map[string]map[string][]*room
	// repelKeys: the topology keys of the pods' required anti-affinity
	// terms, sorted.
	repelKeys []string
}

func (d *domains) roomsIn(key, value string) []*room {
	byValue, ok := d.byKey[key]
	if !ok {
		byValue = map[string][]*room{}
		for _, r := range d.rooms {
			if v, ok := r.node.Labels[key]; ok {
				byValue[v] = append(byValue[v], r)
			}
		}
		d.byKey[key] = byValue
	}
	return byValue[value]
}

// take books p on r and notes the topology keys p's terms repel in.
func (d *domains) take(r *room, p *corev1.Pod) {
	r.take(p)
	for _, term := range requiredAntiAffinity(p) {
		if i, found := slices.BinarySearch(d.repelKeys, term.TopologyKey); !found {
			d.repelKeys = slices.Insert(d.repelKeys, i, term.TopologyKey)
		}
	}
}

// antiAffinityConflict names a pod that required pod anti-affinity keeps
// away from node (either side's terms), or returns "". A node without the
// term's topology label is in no domain: there is nothing to violate.
func antiAffinityConflict(pod *corev1.Pod, node *corev1.Node, all *domains, nsLabels func(string) labels.Set) string {
	// The pod's own terms against the pods in the same topology domain.
	for _, term := range requiredAntiAffinity(pod) {
		value, ok := node.Labels[term.TopologyKey]
		if !ok {
			continue
		}
		for _, r := range all.roomsIn(term.TopologyKey, value) {
			for _, other := range r.pods {
				if other.UID != pod.UID && termMatches(pod, term, other, nsLabels) {
					return podKey(other) + " on " + r.node.Name
				}
			}
		}
	}
	// The other pods' terms against this pod (the scheduler checks both).
	for _, key := range all.repelKeys {
		value, ok := node.Labels[key]
		if !ok {
			continue
		}
		for _, r := range all.roomsIn(key, value) {
			for _, other := range r.repelling {
				if other.UID == pod.UID {
					continue
				}
				for _, term := range requiredAntiAffinity(other) {
					if term.TopologyKey == key && termMatches(other, term, pod, nsLabels) {
						return podKey(other) + " on " + r.node.Name
					}
				}
			}
		}
	}
	return ""
}

func requiredAntiAffinity(p *corev1.Pod) []corev1.PodAffinityTerm {
	if p.Spec.Affinity == nil || p.Spec.Affinity.PodAntiAffinity == nil {
		return nil
	}
	return p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
}

// termMatches reports whether owner's term selects target: target's
// namespace is among the term's (its namespaces list, its
// namespaceSelector, or by default owner's own) and its labels match.
func termMatches(owner *corev1.Pod, term corev1.PodAffinityTerm, target *corev1.Pod, nsLabels func(string) labels.Set) bool {
	inNamespace := false
	switch {
	case len(term.Namespaces) == 0 && term.NamespaceSelector == nil:
		inNamespace = target.Namespace == owner.Namespace
	default:
		for _, ns := range term.Namespaces {
			if ns == target.Namespace {
				inNamespace = true
			}
		}
		if !inNamespace && term.NamespaceSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(term.NamespaceSelector)
			inNamespace = err == nil && sel.Matches(nsLabels(target.Namespace))
		}
	}
	if !inNamespace {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
	return err == nil && sel.Matches(labels.Set(target.Labels))
}

func podRequests(p *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
}

// unfitSet groups unfit nodes by cause and detail.
type unfitSet struct {
	entries []Unfit
}

func (s *unfitSet) add(cause UnfitCause, detail, node string) {
	for i := range s.entries {
		if s.entries[i].Cause == cause && s.entries[i].Detail == detail {
			s.entries[i].Nodes = append(s.entries[i].Nodes, node)
			return
		}
	}
	s.entries = append(s.entries, Unfit{Cause: cause, Detail: detail, Nodes: []string{node}})
}

func (s *unfitSet) list() []Unfit {
	out := append([]Unfit(nil), s.entries...)
	sort.SliceStable(out, func(i, j int) bool {
		if causeOrder[out[i].Cause] != causeOrder[out[j].Cause] {
			return causeOrder[out[i].Cause] < causeOrder[out[j].Cause]
		}
		return out[i].Detail < out[j].Detail
	})
	return out
}
