package drain_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

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
