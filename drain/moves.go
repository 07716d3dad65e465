package drain

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/cluster"
)

// RestartedAtAnnotation is the pod-template annotation `kubectl rollout
// restart` sets; we set the same, so the Deployment's history reads the
// same either way.
const RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// revisionAnnotation is the deployment controller's revision number, on the
// Deployment and on each of its ReplicaSets.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// errProgressDeadline: the Deployment reports ProgressDeadlineExceeded.
var errProgressDeadline = errors.New("exceeded its progress deadline")

// rollout restarts the task's Deployment (unless a rollout that replaces
// the node's pods is already under way: a second drain continues the
// first's) and waits until `kubectl rollout status` would say done and the
// planned pods have left the node.
func (t *task) rollout(ctx context.Context) error {
	x := t.x
	ns, name := t.pods[0].Namespace(), t.pods[0].ownerName()
	restarted := false
	for {
		dep, err := x.client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			// Deleted: the garbage collector removes its pods.
			if remaining, err := t.remaining(ctx); err == nil && len(remaining) == 0 {
				return nil
			}
			t.waiting("the Deployment was deleted; waiting for its pods to go")
		case err != nil:
			t.waiting("reading the Deployment: %v", err)
		default:
			remaining, err := t.remaining(ctx)
			if err != nil {
				t.waiting("reading its pods: %v", err)
				break
			}
			status, complete, err := rolloutStatus(dep)
			if err != nil && restarted {
				return fmt.Errorf("Deployment %s/%s %w (its pods cannot become available elsewhere; see `kubectl describe deployment`)", ns, name, err)
			}
			if complete && len(remaining) == 0 {
				return nil
			}
			if !restarted && dep.Generation <= dep.Status.ObservedGeneration {
				current, err := t.inCurrentReplicaSet(ctx, dep, remaining)
				if err != nil {
					t.waiting("reading its ReplicaSets: %v", err)
					break
				}
				if current {
					at := x.opts.Clock.Now().Format(time.RFC3339)
					if err := restart(ctx, x, dep, at); err != nil {
						t.waiting("rollout restart: %v", err)
						break
					}
					restarted = true
					t.waiting("rollout restarted (%s=%s)", RestartedAtAnnotation, at)
					break
				}
				// No pod left on the node is in the current ReplicaSet: a
				// rollout (ours from an earlier drain, or someone's) is
				// replacing them; wait for it rather than restart again.
			}
			for _, p := range remaining {
				t.podWhy(p.UID, "rollout not complete: "+status, nil)
			}
			if complete {
				t.waiting("%s; waiting for %d pod(s) to leave %s", status, len(remaining), x.node)
			} else {
				t.waiting("%s", status)
			}
		}
		if err := sleep(ctx, x.opts.Clock, x.opts.PollInterval); err != nil {
			return err
		}
	}
}

// restart sets the restartedAt annotation, as `kubectl rollout restart`.
func restart(ctx context.Context, x *executor, dep *appsv1.Deployment, at string) error {
	body := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, RestartedAtAnnotation, at)
	_, err := x.client.AppsV1().Deployments(dep.Namespace).Patch(ctx, dep.Name, types.StrategicMergePatchType, []byte(body),
		metav1.PatchOptions{FieldManager: cluster.DefaultComponent})
	return err
}

// remaining reads the task's planned pods that still exist.
func (t *task) remaining(ctx context.Context) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for _, p := range t.pods {
		pod, err := t.x.client.CoreV1().Pods(p.Namespace()).Get(ctx, p.Name(), metav1.GetOptions{})
		if isGone(pod, err, p.UID) {
			t.podWhy(p.UID, "", nil)
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, pod)
	}
	return out, nil
}

// inCurrentReplicaSet reports whether any remaining (as just read), not
// terminating pod belongs to the Deployment's current ReplicaSet (same
// revision). When the revision cannot be told, it says yes: one restart too
// many costs a rollout; one too few leaves the drain waiting for nothing.
func (t *task) inCurrentReplicaSet(ctx context.Context, dep *appsv1.Deployment, remaining []*corev1.Pod) (bool, error) {
	want := dep.Annotations[revisionAnnotation]
	for _, pod := range remaining {
		if pod.DeletionTimestamp != nil {
			continue
		}
		ref := metav1.GetControllerOf(pod)
		if want == "" || ref == nil {
			return true, nil
		}
		rs, err := t.x.client.AppsV1().ReplicaSets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, err
		}
		if got := rs.Annotations[revisionAnnotation]; got == "" || got == want {
			return true, nil
		}
	}
	return false, nil
}

// rolloutStatus is `kubectl rollout status`'s predicate for a Deployment,
// plus availableReplicas == replicas: done when the controller has
// observed the latest spec, every replica is updated and available, and no
// old replica is left.
func rolloutStatus(d *appsv1.Deployment) (string, bool, error) {
	if d.Generation > d.Status.ObservedGeneration {
		return "waiting for the deployment controller to observe the restart", false, nil
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return "", false, errProgressDeadline
		}
	}
	replicas := ptr.Deref(d.Spec.Replicas, 1)
	s := d.Status
	switch {
	case s.UpdatedReplicas < replicas:
		return fmt.Sprintf("%d out of %d new replicas have been updated", s.UpdatedReplicas, replicas), false, nil
	case s.Replicas > s.UpdatedReplicas:
		return fmt.Sprintf("%d old replicas are pending termination", s.Replicas-s.UpdatedReplicas), false, nil
	case s.AvailableReplicas < s.UpdatedReplicas || s.AvailableReplicas < replicas:
		return fmt.Sprintf("%d of %d updated replicas are available", s.AvailableReplicas, s.UpdatedReplicas), false, nil
	}
	return "successfully rolled out", true, nil
}

// evictOne evicts the task's pod and waits for it to go.
func (t *task) evictOne(ctx context.Context) error {
	return t.evictAndWait(ctx, t.pods[0])
}

// waitOne waits for an already terminating pod to go.
func (t *task) waitOne(ctx context.Context) error {
	p := t.pods[0]
	return t.waitGone(ctx, p, "terminating: waiting for it to go")
}

// evictInTurn evicts a workload's pods one at a time: each eviction waits
// until the workload has room for it (room: one pod fewer still meets the
// bound of its strategy), so the drain never takes it below that bound. A
// StatefulSet's pods go highest ordinal first (as the StatefulSet
// controller scales down), each replacement (same name) Ready elsewhere
// before the next; a Deployment's replacements have other names, and the
// room check waits for them to be available.
func (t *task) evictInTurn(ctx context.Context) error {
	pods := append([]PodPlan(nil), t.pods...)
	statefulSet := pods[0].ownerKind() == "StatefulSet"
	if statefulSet {
		sort.SliceStable(pods, func(i, j int) bool { return ordinal(pods[i].Name()) > ordinal(pods[j].Name()) })
	}
	for _, p := range pods {
		t.podWhy(p.UID, fmt.Sprintf("waiting its turn: %s's pods go one at a time", pods[0].Owner), nil)
	}
	for _, p := range pods {
		if err := t.awaitRoom(ctx, p); err != nil {
			return err
		}
		if err := t.evictAndWait(ctx, p); err != nil {
			return err
		}
		if !statefulSet {
			continue
		}
		if err := t.waitReplacement(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// awaitRoom waits until evicting p keeps its workload within its bound.
func (t *task) awaitRoom(ctx context.Context, p PodPlan) error {
	for {
		ok, why, err := t.room(ctx, p)
		switch {
		case err != nil:
			t.waiting("%s: %v", p.Pod, err)
		case ok:
			return nil
		default:
			t.podWhy(p.UID, why, nil)
			t.waiting("%s", why)
		}
		if err := sleep(ctx, t.x.opts.Clock, t.x.opts.PollInterval); err != nil {
			return err
		}
	}
}

// room reports whether evicting p now keeps its workload at or above the
// fewest available replicas its strategy allows, or says what it waits for.
// Availability is the lower of the workload's status (which counts
// minReadySeconds) and its Ready, not terminating pods as read now (which
// the status may not show yet, right after an eviction).
func (t *task) room(ctx context.Context, p PodPlan) (bool, string, error) {
	x := t.x
	ns := p.Namespace()
	pod, err := x.client.CoreV1().Pods(ns).Get(ctx, p.Name(), metav1.GetOptions{})
	switch {
	case isGone(pod, err, p.UID):
		return true, "", nil
	case err != nil:
		return false, "", fmt.Errorf("reading the pod: %w", err)
	case pod.DeletionTimestamp != nil || !podReady(pod):
		return true, "", nil // evicting it takes nothing available away
	}
	var bound, status int32
	var uid types.UID
	var selector *metav1.LabelSelector
	owner := p.ownerKind() + " " + ns + "/" + p.ownerName()
	switch p.ownerKind() {
	case "Deployment":
		dep, err := x.client.AppsV1().Deployments(ns).Get(ctx, p.ownerName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil // deleted: the garbage collector takes its pods anyway
		} else if err != nil {
			return false, "", fmt.Errorf("reading %s: %w", owner, err)
		}
		bound, status, uid, selector = *deploymentBound(dep).MinAvailable, dep.Status.AvailableReplicas, dep.UID, dep.Spec.Selector
	case "StatefulSet":
		sts, err := x.client.AppsV1().StatefulSets(ns).Get(ctx, p.ownerName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		} else if err != nil {
			return false, "", fmt.Errorf("reading %s: %w", owner, err)
		}
		bound, status, uid, selector = max(ptr.Deref(sts.Spec.Replicas, 1)-1, 0), sts.Status.AvailableReplicas, sts.UID, sts.Spec.Selector
	default:
		return true, "", nil
	}
	ready, err := x.readyPodsOf(ctx, ns, uid, p.ownerKind() == "Deployment", selector)
	if err != nil {
		return false, "", fmt.Errorf("counting the pods of %s: %w", owner, err)
	}
	available := min(status, ready)
	if available-1 >= bound {
		return true, "", nil
	}
	return false, fmt.Sprintf("%s has %d available (status %d, Ready pods %d), and its strategy keeps %d: waiting for a replacement to be available before evicting %s",
		owner, available, status, ready, bound, p.Pod), nil
}

// readyPodsOf counts the Ready, not terminating pods that a workload (uid)
// controls, directly or (viaReplicaSets, a Deployment) through its
// ReplicaSets.
func (x *executor) readyPodsOf(ctx context.Context, ns string, uid types.UID, viaReplicaSets bool, selector *metav1.LabelSelector) (int32, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return 0, err
	}
	owners := map[types.UID]bool{uid: true}
	if viaReplicaSets {
		owners = map[types.UID]bool{}
		rss, err := x.client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		for _, rs := range rss.Items {
			if ref := metav1.GetControllerOfNoCopy(&rs); ref != nil && ref.UID == uid {
				owners[rs.UID] = true
			}
		}
	}
	pods, err := x.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return 0, err
	}
	var n int32
	for i := range pods.Items {
		pod := &pods.Items[i]
		if ref := metav1.GetControllerOfNoCopy(pod); ref != nil && owners[ref.UID] && pod.DeletionTimestamp == nil && podReady(pod) {
			n++
		}
	}
	return n, nil
}

// evictAndWait evicts one pod through the Eviction API, retrying refusals
// with backoff, and waits until it is gone.
func (t *task) evictAndWait(ctx context.Context, p PodPlan) error {
	x := t.x
	backoff := x.opts.PollInterval
	maxBackoff := maxBackoffFactor * x.opts.PollInterval
	for {
		outcome, err := t.tryEvict(ctx, p, backoff)
		switch outcome {
		case evictionGone:
			t.podWhy(p.UID, "", nil)
			return nil
		case evictionFailed:
			return err
		case evictionAccepted:
			return t.waitGone(ctx, p, "evicted; waiting for it to terminate")
		case evictionRetry:
		}
		if err := sleep(ctx, x.opts.Clock, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

type evictionOutcome int

const (
	evictionGone     evictionOutcome = iota // the planned pod no longer exists
	evictionAccepted                        // it is terminating
	evictionRetry                           // refused or failed for now
	evictionFailed                          // refused for good (the error says why)
)

// tryEvict makes one eviction attempt (none when the pod is gone or
// already terminating) and records why a refused pod stays.
func (t *task) tryEvict(ctx context.Context, p PodPlan, backoff time.Duration) (evictionOutcome, error) {
	x := t.x
	pod, err := x.client.CoreV1().Pods(p.Namespace()).Get(ctx, p.Name(), metav1.GetOptions{})
	switch {
	case isGone(pod, err, p.UID):
		return evictionGone, nil
	case err != nil:
		t.retrying(backoff, "%s: reading the pod: %v", p.Pod, err)
		return evictionRetry, nil
	case pod.DeletionTimestamp != nil:
		return evictionAccepted, nil // by us earlier, or by someone else
	}
	if p.Bound != nil && p.Bound.MinAvailable != nil {
		// The plan found room for its evictions; what runs elsewhere may
		// have changed since. Checked and evicted under the workload's
		// lock: an accepted eviction marks the pod terminating at once,
		// so the next check counts it gone.
		unlock := x.lockOwner(p.Namespace() + "/" + p.Owner)
		defer unlock()
		ok, why, err := t.room(ctx, p)
		switch {
		case err != nil:
			t.retrying(backoff, "%s: %v", p.Pod, err)
			return evictionRetry, nil
		case !ok:
			t.podWhy(p.UID, why, nil)
			t.retrying(backoff, "%s", why)
			return evictionRetry, nil
		}
	}
	err = x.client.PolicyV1().Evictions(p.Namespace()).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace(), Name: p.Name()},
		// Only the planned pod: never a same-named replacement.
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
	})
	switch {
	case err == nil:
		return evictionAccepted, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone, or the name is another pod's now (UID precondition).
		return evictionGone, nil
	case apierrors.IsTooManyRequests(err):
		why, names := x.blockedEviction(ctx, pod, err)
		t.podWhy(p.UID, why, names)
		t.retrying(backoff, "%s: %s", p.Pod, why)
		return evictionRetry, nil
	case apierrors.IsForbidden(err):
		t.podWhy(p.UID, "eviction forbidden: "+err.Error(), nil)
		return evictionFailed, fmt.Errorf("evict %s: forbidden (may the user create pods/eviction? is the namespace terminating?): %w", p.Pod, err)
	case ctx.Err() != nil:
		return evictionRetry, nil // the sleep that follows returns at once
	case apierrors.IsInternalError(err) && strings.Contains(err.Error(), "more than one PodDisruptionBudget"):
		// A budget added since the plan: the API server answers the same
		// for as long as both select the pod. The plan refuses such pods.
		var names []string
		if all, lerr := listBudgets(ctx, x.client, p.Namespace()); lerr == nil {
			names = budgetNames(matchingBudgets(all, pod))
		}
		why := "selected by more than one PodDisruptionBudget (" + strings.Join(names, ", ") + "): the Eviction API never evicts it; change their selectors so that one budget selects it"
		t.podWhy(p.UID, why, names)
		return evictionFailed, fmt.Errorf("evict %s: %s: %w", p.Pod, why, err)
	}
	// Any other error is taken as transient: retried, and reported if it
	// lasts.
	t.podWhy(p.UID, "eviction failed: "+err.Error(), nil)
	t.retrying(backoff, "%s: eviction failed: %v", p.Pod, err)
	return evictionRetry, nil
}

// waitGone polls until the planned pod no longer exists.
func (t *task) waitGone(ctx context.Context, p PodPlan, why string) error {
	x := t.x
	t.podWhy(p.UID, why, nil)
	for {
		pod, err := x.client.CoreV1().Pods(p.Namespace()).Get(ctx, p.Name(), metav1.GetOptions{})
		if isGone(pod, err, p.UID) {
			t.podWhy(p.UID, "", nil)
			return nil
		}
		if err == nil && pod.DeletionTimestamp != nil {
			grace := ptr.Deref(pod.DeletionGracePeriodSeconds, 0)
			t.waiting("%s: %s (grace period %ds)", p.Pod, why, grace)
		} else if err != nil {
			t.waiting("%s: reading the pod: %v", p.Pod, err)
		}
		if err := sleep(ctx, x.opts.Clock, x.opts.PollInterval); err != nil {
			return err
		}
	}
}

// waitReplacement waits until the StatefulSet's replacement for p (same
// name, another UID) is Ready on another node. It does not wait when the
// StatefulSet is gone or no longer wants that ordinal.
func (t *task) waitReplacement(ctx context.Context, p PodPlan) error {
	x := t.x
	ns, name, set := p.Namespace(), p.Name(), p.ownerName()
	for {
		sts, err := x.client.AppsV1().StatefulSets(ns).Get(ctx, set, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			t.waiting("reading StatefulSet %s/%s: %v", ns, set, err)
		case !wantsOrdinal(sts, ordinal(name)):
			return nil
		default:
			pod, err := x.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				t.waiting("waiting for the StatefulSet to recreate %s", p.Pod)
			case err != nil:
				t.waiting("reading %s: %v", p.Pod, err)
			case pod.UID == p.UID || pod.DeletionTimestamp != nil:
				t.waiting("waiting for %s to go before its replacement", p.Pod)
			case podReady(pod) && pod.Spec.NodeName != x.node:
				return nil
			default:
				t.waiting("replacement %s is %s%s, not Ready yet", p.Pod, pod.Status.Phase, where(pod))
			}
		}
		if err := sleep(ctx, x.opts.Clock, x.opts.PollInterval); err != nil {
			return err
		}
	}
}

// where says where a replacement is, or why it is not scheduled.
func where(pod *corev1.Pod) string {
	if pod.Spec.NodeName != "" {
		return " on " + pod.Spec.NodeName
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return " (unscheduled: " + c.Message + ")"
		}
	}
	return ""
}

// ordinal is a StatefulSet pod's ordinal (its name's numeric suffix), -1
// when there is none.
func ordinal(name string) int {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return -1
	}
	return n
}

func wantsOrdinal(sts *appsv1.StatefulSet, n int) bool {
	start := 0
	if sts.Spec.Ordinals != nil {
		start = int(sts.Spec.Ordinals.Start)
	}
	return n >= start && n < start+int(ptr.Deref(sts.Spec.Replicas, 1))
}

// blockedEviction explains a 429: the PodDisruptionBudgets selecting the
// pod and what they allow, or the server's own words when none is found.
func (x *executor) blockedEviction(ctx context.Context, pod *corev1.Pod, evictErr error) (string, []string) {
	var budgets []*policyv1.PodDisruptionBudget
	if all, err := listBudgets(ctx, x.client, pod.Namespace); err == nil {
		budgets = matchingBudgets(all, pod)
	}
	if len(budgets) == 0 {
		msg := evictErr.Error()
		var status apierrors.APIStatus
		if errors.As(evictErr, &status) && status.Status().Details != nil {
			for _, c := range status.Status().Details.Causes {
				if c.Type == policyv1.DisruptionBudgetCause {
					msg = c.Message
				}
			}
		}
		return "eviction refused: " + msg, nil
	}
	names := make([]string, 0, len(budgets))
	descs := make([]string, 0, len(budgets))
	for _, b := range budgets {
		names = append(names, b.Namespace+"/"+b.Name)
		descs = append(descs, fmt.Sprintf("PodDisruptionBudget %s/%s (allows %d disruption(s): %d healthy, %d required)",
			b.Namespace, b.Name, b.Status.DisruptionsAllowed, b.Status.CurrentHealthy, b.Status.DesiredHealthy))
	}
	return "eviction refused by " + strings.Join(descs, ", "), names
}
