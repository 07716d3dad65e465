package drain

import (
	"context"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/cluster"
)

// MakePlan decides, pod by pod, how a drain of node would move its pods, and
// checks that every pod that must move has somewhere to go. It only reads.
// A plan with refused pods is still returned (nil error), so it can be
// shown; Plan.Err says whether it can be executed. The error is for reads
// that failed.
func MakePlan(ctx context.Context, client kubernetes.Interface, node string, opts Options) (Plan, error) {
	opts = opts.withDefaults()
	p := &planner{
		ctx: ctx, client: client, opts: opts,
		replicaSets:  map[string]*appsv1.ReplicaSet{},
		deployments:  map[string]*appsv1.Deployment{},
		statefulSets: map[string]*appsv1.StatefulSet{},
		pdbs:         map[string][]*policyv1.PodDisruptionBudget{},
		claims:       map[string]*corev1.PersistentVolumeClaim{},
		volumes:      map[string]*corev1.PersistentVolume{},
		warned:       map[string]bool{},
	}
	if err := p.load(node); err != nil {
		return Plan{}, err
	}
	return p.plan()
}

// planner holds what MakePlan read. Owner and PDB reads are cached: a node
// typically runs several pods of each workload.
type planner struct {
	ctx    context.Context
	client kubernetes.Interface
	opts   Options

	node    *corev1.Node
	nodes   []*corev1.Node
	onNode  []*corev1.Pod // every pod bound to the node
	running []*corev1.Pod // bound, unfinished pods of the whole cluster

	replicaSets  map[string]*appsv1.ReplicaSet // ns/name → object, nil when not found
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	pdbs         map[string][]*policyv1.PodDisruptionBudget // by namespace
	claims       map[string]*corev1.PersistentVolumeClaim
	volumes      map[string]*corev1.PersistentVolume
	namespaces   map[string]labels.Set // read on first need (anti-affinity namespaceSelector)

	warnings []string
	warned   map[string]bool
}

func (p *planner) load(name string) error {
	var err error
	if p.node, err = p.client.CoreV1().Nodes().Get(p.ctx, name, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("read node %s (is the name right? `kubectl get nodes`): %w", name, err)
	}
	nodes, err := p.client.CoreV1().Nodes().List(p.ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes for the placement check: %w", err)
	}
	for i := range nodes.Items {
		p.nodes = append(p.nodes, &nodes.Items[i])
	}
	sort.Slice(p.nodes, func(i, j int) bool { return p.nodes[i].Name < p.nodes[j].Name })
	// Every pod, not just the node's: the placement check needs what the
	// other nodes already run (finished pods hold no resources and are left
	// out of that, but the node's own are listed in the plan as skipped).
	pods, err := p.client.CoreV1().Pods("").List(p.ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName == name {
			p.onNode = append(p.onNode, pod)
		}
		if pod.Spec.NodeName != "" && !finished(pod) {
			p.running = append(p.running, pod)
		}
	}
	sort.Slice(p.onNode, func(i, j int) bool { return podKey(p.onNode[i]) < podKey(p.onNode[j]) })
	return nil
}

// decision is one pod's plan while it is being made.
type decision struct {
	pod   *corev1.Pod
	owner owner
	plan  PodPlan
	// refusals collect why the pod cannot move safely.
	refusals []string
	// recreated: a controller brings the pod back elsewhere, so the
	// placement check applies (not to a pod without a controller).
	recreated bool
	volumes   []*corev1.PersistentVolume // bound PVs, for volume node affinity
}

func (p *planner) plan() (Plan, error) {
	out := Plan{
		Node: p.node.Name, PlannedAt: p.opts.Clock.Now(),
		Force: p.opts.Force, DeleteLocalData: p.opts.DeleteLocalData,
		Pods: []PodPlan{},
	}
	if !cluster.NodeReady(p.node) {
		p.warn("node", "node %s is not Ready: its kubelet may never finish deleting evicted pods, which then stay Terminating until the timeout", p.node.Name)
	}

	decisions := make([]*decision, 0, len(p.onNode))
	for _, pod := range p.onNode {
		o, err := p.ownerOf(pod)
		if err != nil {
			return Plan{}, err
		}
		decisions = append(decisions, &decision{pod: pod, owner: o, plan: PodPlan{Pod: podKey(pod), UID: pod.UID, Owner: o.String()}})
	}
	groups := deploymentGroups(decisions)

	for _, d := range decisions {
		if err := p.decide(d, groups); err != nil {
			return Plan{}, err
		}
	}
	if err := p.placeAll(decisions); err != nil {
		return Plan{}, err
	}
	for _, d := range decisions {
		if len(d.refusals) > 0 {
			d.plan.Would = d.plan.Action
			d.plan.Action = ActionRefuse
			d.plan.Reason = strings.Join(d.refusals, "; ")
		}
		out.Pods = append(out.Pods, d.plan)
	}
	out.Warnings = p.warnings
	return out, nil
}

// decide sets the pod's action and reason, and its refusals apart from
// the placement check.
func (p *planner) decide(d *decision, groups map[string]*deploymentGroup) error {
	pod, o := d.pod, d.owner
	set := func(a Action, reason string, args ...any) {
		d.plan.Action, d.plan.Reason = a, fmt.Sprintf(reason, args...)
	}
	switch {
	case pod.Annotations[corev1.MirrorPodAnnotationKey] != "":
		set(ActionSkip, "static pod: the kubelet runs it from a manifest on the node")
		return nil
	case finished(pod):
		set(ActionSkip, "finished (%s): nothing runs", pod.Status.Phase)
		return nil
	case pod.DeletionTimestamp != nil:
		set(ActionWait, "already terminating: waiting for it to go")
		return nil
	case o.kind == "DaemonSet":
		set(ActionSkip, "DaemonSet pod: it belongs to the node")
		return nil
	}

	d.recreated = true
	switch {
	case o.kind == "" || o.missing != "":
		d.recreated = false
		why := "no controller: nothing would recreate it"
		if o.missing != "" {
			why = fmt.Sprintf("its controller %s no longer exists: nothing would recreate it", o.missing)
		}
		d.plan.Bound = &Bound{Rule: "no controller: nothing recreates it"}
		if p.opts.Force {
			set(ActionEvict, "%s; evicting it anyway (Force): it is gone for good", why)
		} else {
			set(ActionEvict, "%s", why)
			d.refusals = append(d.refusals, why+" (Force evicts it for good)")
		}
	case o.deployment != nil:
		a, reason, refusal := p.deploymentAction(o.deployment, groups[o.key(pod.Namespace)])
		set(a, "%s", reason)
		if refusal != "" {
			d.refusals = append(d.refusals, refusal)
		}
		b := deploymentBound(o.deployment)
		d.plan.Bound = &b
	case o.replicaSet != nil:
		set(ActionEvict, "a ReplicaSet without a Deployment cannot roll: evicting (it recreates the pod elsewhere)")
		d.plan.Bound = &Bound{Replicas: ptr.Deref(o.replicaSet.Spec.Replicas, 1), Rule: "a ReplicaSet has no update strategy: only PodDisruptionBudgets pace its evictions"}
		rs := o.replicaSet
		if g := groups[o.key(pod.Namespace)]; g != nil && rs.Status.AvailableReplicas-g.readyOnNode <= 0 {
			p.warn("rs/"+podKeyOf(pod.Namespace, rs.Name), "ReplicaSet %s/%s: all its available replicas run on %s: it is down until their replacements are Ready",
				pod.Namespace, rs.Name, p.node.Name)
		}
	case o.statefulSet != nil:
		sts := o.statefulSet
		if sts.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
			set(ActionEvictOneAtATime, "OnDelete StatefulSet: a rollout restart would never roll it; evicting its pods one at a time, each replacement (same name) Ready before the next")
		} else {
			set(ActionEvictOneAtATime, "a StatefulSet cannot surge (a replacement takes the old pod's name): evicting its pods one at a time, each replacement Ready before the next")
		}
		replicas := ptr.Deref(sts.Spec.Replicas, 1)
		d.plan.Bound = &Bound{Replicas: replicas, MinAvailable: ptr.To(max(replicas-1, 0)),
			Rule: fmt.Sprintf("StatefulSet: one pod at a time (%d replicas − 1), each replacement Ready before the next", replicas)}
		if replicas <= 1 {
			p.warn("sts/"+podKeyOf(pod.Namespace, sts.Name), "StatefulSet %s/%s has one replica: it is down from the eviction until its replacement is Ready",
				pod.Namespace, sts.Name)
		}
	case o.kind == "Job":
		set(ActionEvict, "Job pod: evicting; the Job controller decides whether it runs again (not waited for)")
		d.plan.Bound = &Bound{Rule: "a Job has no availability strategy: only PodDisruptionBudgets pace its evictions"}
	default:
		set(ActionEvict, "unsupported owner %s: evicting without waiting for a replacement", o.kind)
		d.plan.Bound = &Bound{Rule: o.kind + " is not a workload the drain knows: only PodDisruptionBudgets pace its evictions"}
	}

	if err := p.checkLocalStorage(d); err != nil {
		return err
	}
	if d.plan.Action == ActionEvict || d.plan.Action == ActionEvictOneAtATime {
		p.checkBudgets(d)
	}
	return nil
}

// checkBudgets refuses a pod that more than one PodDisruptionBudget
// selects: the Eviction API answers 500 for it, every time ("This pod has
// more than one PodDisruptionBudget, which the eviction subresource does
// not support"), so no retry can ever move it. Force does not help: it is
// the budgets that must change. Otherwise it warns when the budget allows
// no disruption now.
func (p *planner) checkBudgets(d *decision) {
	budgets := p.budgetsFor(d.pod)
	if d.plan.Bound != nil {
		d.plan.Bound.Budgets = budgetNames(budgets)
	}
	if len(budgets) > 1 {
		d.refusals = append(d.refusals, fmt.Sprintf("selected by %d PodDisruptionBudgets (%s): the Eviction API refuses to evict a pod under more than one budget, every time; change their selectors so that one budget selects it",
			len(budgets), strings.Join(budgetNames(budgets), ", ")))
		return
	}
	p.warnBlockedBudgets(d.pod)
}

func budgetNames(budgets []*policyv1.PodDisruptionBudget) []string {
	var names []string
	for _, b := range budgets {
		names = append(names, b.Namespace+"/"+b.Name)
	}
	return names
}

// deploymentGroup counts a Deployment's pods on the node.
type deploymentGroup struct {
	onNode      int32 // not terminating
	readyOnNode int32
	pods        []*corev1.Pod
}

func deploymentGroups(ds []*decision) map[string]*deploymentGroup {
	groups := map[string]*deploymentGroup{}
	for _, d := range ds {
		if d.owner.deployment == nil && d.owner.replicaSet == nil {
			continue
		}
		if d.pod.DeletionTimestamp != nil || finished(d.pod) {
			continue
		}
		k := d.owner.key(d.pod.Namespace)
		g := groups[k]
		if g == nil {
			g = &deploymentGroup{}
			groups[k] = g
		}
		g.onNode++
		g.pods = append(g.pods, d.pod)
		if podReady(d.pod) {
			g.readyOnNode++
		}
	}
	return groups
}

// deploymentBound is the fewest available replicas the Deployment's own
// strategy allows: replicas − maxUnavailable (the deployment controller's
// rounding; none for Recreate, which takes every replica down by design).
func deploymentBound(dep *appsv1.Deployment) Bound {
	replicas := ptr.Deref(dep.Spec.Replicas, 1)
	unavailable := maxUnavailable(dep)
	b := Bound{Replicas: replicas, MinAvailable: ptr.To(max(replicas-unavailable, 0))}
	switch dep.Spec.Strategy.Type {
	case appsv1.RecreateDeploymentStrategyType:
		b.Rule = "Recreate: its strategy takes every replica down on a rollout"
	case appsv1.RollingUpdateDeploymentStrategyType, "":
		b.Rule = fmt.Sprintf("RollingUpdate: %d replicas − maxUnavailable %d", replicas, unavailable)
	}
	if dep.Spec.Paused {
		b.Rule += " (paused: it cannot roll)"
	}
	return b
}

// deploymentAction keeps the Deployment within its strategy's bound
// (deploymentBound): its pods on the node are evicted at once when the
// replicas left elsewhere meet the bound; one at a time, each replacement
// available before the next, when one eviction at a time meets it; and
// otherwise the Deployment is rollout-restarted (the node is cordoned, so
// the surge lands elsewhere and the deployment controller holds the bound
// itself). A paused Deployment cannot roll: refused (refusal set) when even
// one eviction would cross its bound, unless Force.
func (p *planner) deploymentAction(dep *appsv1.Deployment, g *deploymentGroup) (a Action, reason, refusal string) {
	name := dep.Namespace + "/" + dep.Name
	replicas := ptr.Deref(dep.Spec.Replicas, 1)
	bound := *deploymentBound(dep).MinAvailable
	var readyOnNode int32
	if g != nil {
		readyOnNode = g.readyOnNode
	}
	available := dep.Status.AvailableReplicas
	elsewhere := available - readyOnNode
	restartWarnings := func() {
		switch dep.Spec.Strategy.Type {
		case appsv1.RecreateDeploymentStrategyType:
			p.warn("recreate/"+name, "Deployment %s uses the Recreate strategy: it is down from the restart until its new pods are Ready", name)
		case appsv1.RollingUpdateDeploymentStrategyType, "":
			if maxSurge(dep) == 0 {
				p.warn("surge/"+name, "Deployment %s has maxSurge 0: its rollout removes a pod before starting its replacement, dipping below its %d desired replicas", name, replicas)
			}
		}
	}
	atOnce := elsewhere >= bound
	oneByOne := available-1 >= bound || readyOnNode == 0 // evicting a pod that is not Ready takes nothing away
	switch {
	case dep.Spec.Paused && atOnce:
		return ActionEvict, fmt.Sprintf("paused (a restart would not roll); %d available replicas elsewhere meet its strategy's %d: evicting (PodDisruptionBudgets decide the pace)", elsewhere, bound), ""
	case dep.Spec.Paused && oneByOne:
		return ActionEvictOneAtATime, fmt.Sprintf("paused (a restart would not roll): evicting its pods one at a time, each replacement available before the next, never below the %d its strategy keeps", bound), ""
	case dep.Spec.Paused && p.opts.Force:
		p.warn("paused/"+name, "Deployment %s is paused: a rollout restart would not roll it, and evicting any of its pods takes it below the %d available replicas its strategy keeps; evicting them anyway (Force)", name, bound)
		return ActionEvict, "the Deployment is paused (a restart would not roll): evicting anyway (Force), below its strategy's bound", ""
	case dep.Spec.Paused:
		return ActionEvict, "the Deployment is paused", fmt.Sprintf("the Deployment is paused, so a rollout restart would not roll it, and evicting any of its pods takes it below the %d available replicas its strategy keeps (%d available now): resume it (kubectl rollout resume deployment/%s -n %s), or Force evicts anyway",
			bound, available, dep.Name, dep.Namespace)
	case replicas <= 1:
		restartWarnings()
		return ActionRolloutRestart, fmt.Sprintf("single replica: evicting it would take the Deployment down; a rollout restart starts its replacement elsewhere first (%s is cordoned)", p.node.Name), ""
	case available <= 0:
		restartWarnings()
		return ActionRolloutRestart, fmt.Sprintf("no replica is available anywhere: a rollout restart replaces them elsewhere (%s is cordoned) without evicting what might become Ready", p.node.Name), ""
	case elsewhere <= 0:
		restartWarnings()
		return ActionRolloutRestart, fmt.Sprintf("all %d available replicas run on %s: evicting them would take the Deployment down; a rollout restart surges replacements elsewhere first (the node is cordoned)",
			available, p.node.Name), ""
	case atOnce:
		return ActionEvict, fmt.Sprintf("%d of %d available replicas run elsewhere, meeting the %d its strategy keeps: evicting (PodDisruptionBudgets decide the pace)", elsewhere, available, bound), ""
	case oneByOne:
		return ActionEvictOneAtATime, fmt.Sprintf("evicting its %d Ready pods on %s at once would leave %d available, below the %d its strategy keeps: evicting them one at a time, each replacement available before the next",
			readyOnNode, p.node.Name, elsewhere, bound), ""
	}
	restartWarnings()
	return ActionRolloutRestart, fmt.Sprintf("its strategy keeps %d of %d replicas available (%d available now): evicting even one would go below, so a rollout restart surges replacements elsewhere first (%s is cordoned) and retires these pods within the strategy",
		bound, replicas, available, p.node.Name), ""
}

// warnBlockedBudgets warns when a PodDisruptionBudget covering pod allows no
// disruption right now: its eviction will wait.
func (p *planner) warnBlockedBudgets(pod *corev1.Pod) {
	for _, b := range p.budgetsFor(pod) {
		if b.Status.DisruptionsAllowed > 0 {
			continue
		}
		p.warn("pdb/"+podKey(pod), "PodDisruptionBudget %s/%s allows no disruption now (%d healthy, %d required): evicting %s waits until it does",
			b.Namespace, b.Name, b.Status.CurrentHealthy, b.Status.DesiredHealthy, podKey(pod))
	}
}

// checkLocalStorage refuses pods with node-local data (emptyDir, an inline
// hostPath, a local or hostPath PersistentVolume) unless DeleteLocalData,
// and collects the pod's bound PersistentVolumes.
func (p *planner) checkLocalStorage(d *decision) error {
	for _, v := range d.pod.Spec.Volumes {
		switch {
		case v.EmptyDir != nil:
			d.plan.LocalStorage = append(d.plan.LocalStorage, "emptyDir "+v.Name)
		case v.HostPath != nil:
			// The node's own directory: a replacement elsewhere starts
			// with that node's directory, usually empty.
			d.plan.LocalStorage = append(d.plan.LocalStorage, fmt.Sprintf("hostPath %s (%s)", v.Name, v.HostPath.Path))
		case v.PersistentVolumeClaim != nil:
			pv, err := p.volumeOfClaim(d.pod.Namespace, v.PersistentVolumeClaim.ClaimName)
			if err != nil {
				return err
			}
			if pv == nil {
				continue
			}
			d.volumes = append(d.volumes, pv)
			if pv.Spec.Local != nil || pv.Spec.HostPath != nil {
				d.plan.LocalStorage = append(d.plan.LocalStorage, "local PersistentVolume "+pv.Name)
			}
		}
	}
	if len(d.plan.LocalStorage) == 0 {
		return nil
	}
	what := strings.Join(d.plan.LocalStorage, ", ")
	if p.opts.DeleteLocalData {
		d.plan.Reason += "; its local data is lost (DeleteLocalData): " + what
		return nil
	}
	d.refusals = append(d.refusals, "uses node-local storage ("+what+"): its data would be lost (DeleteLocalData accepts that)")
	return nil
}

// placeAll runs the placement check for every pod a controller recreates.
func (p *planner) placeAll(ds []*decision) error {
	var movers []mover
	moving := map[string]bool{}
	for _, d := range ds {
		if d.plan.Action.moves() {
			moving[string(d.pod.UID)] = true
		}
		if d.recreated && d.plan.Action.moves() {
			movers = append(movers, mover{pod: d.pod, volumes: d.volumes, decision: d})
		}
	}
	if len(movers) == 0 {
		return nil
	}
	var staying []*corev1.Pod
	for _, pod := range p.running {
		if !moving[string(pod.UID)] {
			staying = append(staying, pod)
		}
	}
	var nsErr error
	nsLabels := func(ns string) labels.Set {
		if p.namespaces == nil && nsErr == nil {
			nsErr = p.loadNamespaces()
		}
		return p.namespaces[ns]
	}
	results := place(p.node.Name, p.nodes, staying, movers, nsLabels)
	if nsErr != nil {
		return nsErr
	}
	for _, m := range movers {
		r := results[m.pod.UID]
		d := m.decision
		if r.target != "" {
			d.plan.Target = r.target
			continue
		}
		d.plan.Nowhere = r.unfit
		why := "nowhere to go: " + unfitSummary(r.unfit)
		if p.opts.Force {
			d.plan.Reason += "; " + why + "; moving it anyway (Force): it will stay Pending"
			p.warn("nowhere/"+podKey(m.pod), "%s has nowhere to go and will stay Pending (Force)", podKey(m.pod))
		} else {
			d.refusals = append(d.refusals, why+" (Force moves it anyway; it would stay Pending)")
		}
	}
	return nil
}

func unfitSummary(us []Unfit) string {
	parts := make([]string, 0, len(us))
	for _, u := range us {
		parts = append(parts, u.String())
	}
	return strings.Join(parts, "; ")
}

func (p *planner) loadNamespaces() error {
	list, err := p.client.CoreV1().Namespaces().List(p.ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list namespaces for a pod anti-affinity namespaceSelector: %w", err)
	}
	p.namespaces = map[string]labels.Set{}
	for _, ns := range list.Items {
		p.namespaces[ns.Name] = labels.Set(ns.Labels)
	}
	return nil
}

func (p *planner) warn(key, format string, args ...any) {
	if p.warned[key] {
		return
	}
	p.warned[key] = true
	p.warnings = append(p.warnings, fmt.Sprintf(format, args...))
}

// ---- owners ----

// owner is the workload that decides a pod's fate.
type owner struct {
	kind, name string // as in PodPlan.Owner; "" for no controller
	// missing names the controller when it no longer exists.
	missing     string
	deployment  *appsv1.Deployment
	replicaSet  *appsv1.ReplicaSet // a ReplicaSet without a Deployment
	statefulSet *appsv1.StatefulSet
}

func (o owner) String() string {
	if o.kind == "" {
		return ""
	}
	return o.kind + "/" + o.name
}

func (o owner) key(ns string) string { return o.kind + "/" + ns + "/" + o.name }

func (p *planner) ownerOf(pod *corev1.Pod) (owner, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return owner{}, nil
	}
	o := owner{kind: ref.Kind, name: ref.Name}
	switch ref.Kind {
	case "ReplicaSet":
		rs, err := p.replicaSet(pod.Namespace, ref.Name)
		if err != nil {
			return owner{}, err
		}
		if rs == nil || rs.UID != ref.UID {
			o.missing = "ReplicaSet/" + ref.Name
			return o, nil
		}
		if dref := metav1.GetControllerOf(rs); dref != nil && dref.Kind == "Deployment" {
			dep, err := p.deployment(pod.Namespace, dref.Name)
			if err != nil {
				return owner{}, err
			}
			if dep != nil && dep.UID == dref.UID {
				return owner{kind: "Deployment", name: dep.Name, deployment: dep}, nil
			}
		}
		o.replicaSet = rs
	case "StatefulSet":
		sts, err := p.statefulSet(pod.Namespace, ref.Name)
		if err != nil {
			return owner{}, err
		}
		if sts == nil || sts.UID != ref.UID {
			o.missing = "StatefulSet/" + ref.Name
			return o, nil
		}
		o.statefulSet = sts
	}
	return o, nil
}

// get reads one object through a cache; nil (no error) when not found.
func get[T any](ctx context.Context, cache map[string]*T, ns, name, what string,
	read func(ctx context.Context, name string, opts metav1.GetOptions) (*T, error),
) (*T, error) {
	k := ns + "/" + name
	if v, ok := cache[k]; ok {
		return v, nil
	}
	v, err := read(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		v, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", what, k, err)
	}
	cache[k] = v
	return v, nil
}

func (p *planner) replicaSet(ns, name string) (*appsv1.ReplicaSet, error) {
	return get(p.ctx, p.replicaSets, ns, name, "ReplicaSet", p.client.AppsV1().ReplicaSets(ns).Get)
}

func (p *planner) deployment(ns, name string) (*appsv1.Deployment, error) {
	return get(p.ctx, p.deployments, ns, name, "Deployment", p.client.AppsV1().Deployments(ns).Get)
}

func (p *planner) statefulSet(ns, name string) (*appsv1.StatefulSet, error) {
	return get(p.ctx, p.statefulSets, ns, name, "StatefulSet", p.client.AppsV1().StatefulSets(ns).Get)
}

func (p *planner) volumeOfClaim(ns, claim string) (*corev1.PersistentVolume, error) {
	pvc, err := get(p.ctx, p.claims, ns, claim, "PersistentVolumeClaim", p.client.CoreV1().PersistentVolumeClaims(ns).Get)
	if err != nil || pvc == nil || pvc.Spec.VolumeName == "" {
		return nil, err
	}
	return get(p.ctx, p.volumes, "", pvc.Spec.VolumeName, "PersistentVolume", p.client.CoreV1().PersistentVolumes().Get)
}

// budgetsFor returns the PodDisruptionBudgets selecting pod. A read error
// counts as none: the eviction itself still honours them.
func (p *planner) budgetsFor(pod *corev1.Pod) []*policyv1.PodDisruptionBudget {
	all, ok := p.pdbs[pod.Namespace]
	if !ok {
		all, _ = listBudgets(p.ctx, p.client, pod.Namespace)
		p.pdbs[pod.Namespace] = all
	}
	return matchingBudgets(all, pod)
}

func matchingBudgets(all []*policyv1.PodDisruptionBudget, pod *corev1.Pod) []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	for _, b := range all {
		// policy/v1: a nil selector selects nothing, an empty one everything.
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ---- small helpers ----

func podKey(p *corev1.Pod) string     { return p.Namespace + "/" + p.Name }
func podKeyOf(ns, name string) string { return ns + "/" + name }

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// maxSurge and maxUnavailable resolve a RollingUpdate Deployment's
// parameters the way the deployment controller does (surge rounds up,
// unavailable down; API defaults 25 % each).
func maxSurge(d *appsv1.Deployment) int32 {
	v := intstr.FromString("25%")
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxSurge != nil {
		v = *ru.MaxSurge
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, int(ptr.Deref(d.Spec.Replicas, 1)), true)
	if err != nil {
		return 0
	}
	return int32(n)
}

func maxUnavailable(d *appsv1.Deployment) int32 {
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return ptr.Deref(d.Spec.Replicas, 1)
	}
	v := intstr.FromString("25%")
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		v = *ru.MaxUnavailable
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, int(ptr.Deref(d.Spec.Replicas, 1)), false)
	if err != nil {
		return 0
	}
	return int32(n)
}

// listBudgets lists a namespace's PodDisruptionBudgets.
func listBudgets(ctx context.Context, client kubernetes.Interface, ns string) ([]*policyv1.PodDisruptionBudget, error) {
	list, err := client.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	all := make([]*policyv1.PodDisruptionBudget, 0, len(list.Items))
	for i := range list.Items {
		all = append(all, &list.Items[i])
	}
	return all, nil
}

// podsOnNodeSelector selects a node's pods server-side.
func podsOnNodeSelector(node string) string {
	return fields.OneTermEqualSelector("spec.nodeName", node).String()
}
