package drain_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/drain"
)

// TestDeploymentNeverBelowItsStrategy watches one Deployment through a whole
// drain: replicas 4, maxSurge 1, three pods on the drained node and one
// elsewhere, no PodDisruptionBudget. Whatever its maxUnavailable, the
// number of Ready replicas (by watch, on every event) and the Deployment's
// available replicas never drop below what its strategy allows:
// replicas − maxUnavailable.
func TestDeploymentNeverBelowItsStrategy(t *testing.T) {
	for _, tc := range []struct {
		name           string
		maxUnavailable int32
		want           drain.Action
	}{
		// The case: no replica may be missing; only a surge keeps 4.
		{"maxUnavailable 0", 0, drain.ActionRolloutRestart},
		// One may be missing: one eviction at a time, each replacement
		// available before the next.
		{"maxUnavailable 1", 1, drain.ActionEvictOneAtATime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "drain-bound")
			ctx := context.Background()
			d := deploymentObject(e.ns, "web", 3)
			d.Spec.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(tc.maxUnavailable))
			e.deploy(d, drained)
			e.onlyOn([]string{"n2"}, func() {
				if _, err := e.c.AppsV1().Deployments(e.ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}, "web scaled to 4, the new pod on n2", func() (bool, error) {
				pods := e.readyPods("web")
				got, err := e.c.AppsV1().Deployments(e.ns).Get(ctx, "web", metav1.GetOptions{})
				return err == nil && got.Status.AvailableReplicas == 4 && len(pods[drained]) == 3 && len(pods["n2"]) == 1, nil
			})
			bound := 4 - tc.maxUnavailable

			opts := e.options(2 * time.Minute)
			plan := e.plan(opts)
			for _, p := range plan.Pods {
				if p.Action != tc.want {
					t.Errorf("plan for %s: %s (%s), want %s", p.Pod, p.Action, p.Reason, tc.want)
				}
			}
			if b, err := json.MarshalIndent(plan.Pods, "", "  "); err == nil {
				t.Logf("plan:\n%s", b)
			}
			watched := e.watchAvailability("web", true)
			began := time.Now()
			rep, err := drain.Execute(ctx, e.c, plan, opts)
			took := time.Since(began)
			if err != nil || !rep.Complete {
				t.Fatalf("Execute = %+v, %v; want complete", rep, err)
			}
			e.waitFor(30*time.Second, "4 Ready web pods off n1", func() (bool, error) {
				pods := e.readyPods("web")
				return len(pods[drained]) == 0 && e.countReady("web") == 4, nil
			})
			watched.finish(t)
			t.Logf("drain took %s; min Ready pods %d, min Deployment available %d (bound %d; over %d pod and %d Deployment events)",
				took.Round(time.Millisecond), watched.minPods, watched.minAvailable, bound, watched.podEvents, watched.dEvents)
			if watched.minPods < int(bound) || watched.minAvailable < bound {
				t.Errorf("below the strategy's bound: min Ready pods %d, Deployment available %d; want ≥ %d throughout",
					watched.minPods, watched.minAvailable, bound)
			}
		})
	}
}

// TestNodeGoingDownMidDrainIsGivenBackToFencing: the eviction is accepted,
// the pod stays Terminating (a finalizer holds it, as a dead kubelet
// would), and the node goes NotReady (written here, as the node lifecycle
// controller would after its grace period). The drain stops at once, not
// at its timeout, removes its maintenance mark so that the agent may fence
// the node, keeps the cordon, and says so.
func TestNodeGoingDownMidDrainIsGivenBackToFencing(t *testing.T) {
	e := newEnv(t, "drain-down")
	ctx := context.Background()
	owner, err := e.c.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "custom"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "held-0", Labels: map[string]string{"app": "held"}, Finalizers: []string{"e2e.bmcfence.dev/hold"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	e.onlyOn([]string{drained}, func() {
		if _, err := e.c.CoreV1().Pods(e.ns).Create(ctx, held, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}, "held-0 Ready on n1", func() (bool, error) { return len(e.readyPods("held")[drained]) == 1, nil })
	t.Cleanup(func() {
		_, _ = e.c.CoreV1().Pods(e.ns).Patch(ctx, "held-0", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})

	opts := e.options(5 * time.Minute)
	plan := e.plan(opts)
	type result struct {
		rep drain.Report
		err error
	}
	done := make(chan result, 1)
	began := time.Now()
	go func() {
		rep, err := drain.Execute(ctx, e.c, plan, opts)
		done <- result{rep, err}
	}()
	e.waitFor(30*time.Second, "held-0 evicted (Terminating)", func() (bool, error) {
		p, err := e.c.CoreV1().Pods(e.ns).Get(ctx, "held-0", metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil, nil
	})
	e.setReady(drained, corev1.ConditionUnknown)
	t.Cleanup(func() {
		// Back to Ready for the next scenario, without the taints the node
		// lifecycle controller may have added meanwhile.
		e.setReady(drained, corev1.ConditionTrue)
		e.waitFor(time.Minute, drained+" Ready, without not-ready/unreachable taints", func() (bool, error) {
			n, err := e.c.CoreV1().Nodes().Get(ctx, drained, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, t := range n.Spec.Taints {
				if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
					return false, nil
				}
			}
			return cluster.NodeReady(n), nil
		})
	})
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the drain did not stop within a minute of its node going NotReady")
	}
	t.Logf("drain stopped after %s: %v", time.Since(began).Round(time.Millisecond), r.err)
	if !errors.Is(r.err, drain.ErrIncomplete) || !errors.Is(r.err, drain.ErrNodeDown) || !r.rep.Released || r.rep.TimedOut {
		t.Errorf("Execute = %v (released %v, timed out %v); want incomplete, node down, released", r.err, r.rep.Released, r.rep.TimedOut)
	}
	n, err := e.c.CoreV1().Nodes().Get(ctx, drained, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cluster.InMaintenance(n) || !n.Spec.Unschedulable {
		t.Errorf("n1 after the drain: maintenance=%q cordoned=%v; want no mark (fenceable) and the cordon kept",
			n.Annotations[cluster.AnnotationMaintenance], n.Spec.Unschedulable)
	}
	if got := e.events(drained); !contains(got, drain.ReasonDrainIncomplete) {
		t.Errorf("Events on n1 = %v, want DrainIncomplete", got)
	}
}

// setReady writes the node's Ready condition, as the node lifecycle
// controller does (kwok writes it back at its next heartbeat).
func (e *env) setReady(name string, status corev1.ConditionStatus) {
	e.t.Helper()
	ctx := context.Background()
	for attempt := 0; ; attempt++ {
		n, err := e.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status = status
				n.Status.Conditions[i].Reason = "NodeStatusUnknown"
				if status == corev1.ConditionTrue {
					n.Status.Conditions[i].Reason = "KubeletReady"
				}
			}
		}
		if _, err = e.c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err == nil {
			return
		}
		if !apierrors.IsConflict(err) || attempt > 10 {
			e.t.Fatalf("update node %s status: %v", name, err)
		}
	}
}
