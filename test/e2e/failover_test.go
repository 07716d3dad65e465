package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/cluster"
)

// A node loses power: its BMC reads Off, its kubelet dies. With the default
// policy the agent sends its own ForceOff (accepted), confirms the Off,
// taints, force-deletes the terminating
// pod, the attach-detach controller detaches the volume, and the StatefulSet
// pod comes back on another node with its volume. Prints "failover: X.Xs"
// (power-off to replacement Running).
func TestFailoverAfterPowerLoss(t *testing.T) {
	e := newEnv(t)
	a := e.agent("a1", "")
	node := e.statefulSet("db", "web")
	ctx := context.Background()
	start := time.Now()
	if err := e.tb.PowerLoss(node); err != nil {
		t.Fatal(err)
	}
	t.Logf("powered off %s", node)
	var tainted, podGone, vaMoved, running time.Duration
	e.waitFor(90*time.Second, "replacement web-0 Running on another node with its volume", func() (bool, error) {
		el := time.Since(start)
		if tainted == 0 && cluster.HasOutOfServiceTaint(e.node(node)) {
			tainted = el
		}
		p, err := e.c.CoreV1().Pods("db").Get(ctx, "web-0", metav1.GetOptions{})
		if podGone == 0 && (err != nil || p.Spec.NodeName != node) {
			podGone = el
		}
		if err != nil || p.Spec.NodeName == node {
			return false, nil
		}
		if on := e.tb.CP.AttachedNode(context.Background(), "db", "data-web-0"); vaMoved == 0 && on != "" && on != node {
			vaMoved = el
		}
		if running == 0 && p.Status.Phase == corev1.PodRunning && vaMoved != 0 {
			running = el
		}
		return running != 0, nil
	})
	t.Logf("timeline: tainted +%.1fs, old pod gone +%.1fs, volume attached elsewhere +%.1fs, replacement Running +%.1fs",
		tainted.Seconds(), podGone.Seconds(), vaMoved.Seconds(), running.Seconds())
	fmt.Printf("failover: %.1fs\n", running.Seconds())

	n := e.node(node)
	if n.Annotations[cluster.AnnotationTaintOwner] != cluster.TaintOwnerValue {
		t.Errorf("taint owner annotation = %q", n.Annotations[cluster.AnnotationTaintOwner])
	}
	for _, r := range []string{"FenceSuspect", "FenceConfirmedOff", "FenceTainted"} {
		if !e.hasEvent(node, r) {
			t.Errorf("no %s Event on %s; events: %v", r, node, e.events(node))
		}
	}
	if v, err := a.Metric("bmcfence_fences_total", `reason="accepted"`); err != nil || v != 1 {
		t.Errorf("bmcfence_fences_total{reason=accepted} = %v, %v; want 1", v, err)
	}
	// The machine read Off, and the agent still sent its own ForceOff: an
	// Off it did not cause proves nothing.
	if k := e.forceOffsSince(node); k < 1 {
		t.Errorf("%d ForceOffs sent; want our own before the taint", k)
	}
	// Default policy target: ≤ 45 s, and ≤ 10 s beyond suspectAfter (20 s)
	// plus the 10 s the last heartbeat can predate the failure.
	if running > 45*time.Second {
		t.Errorf("failover took %s, want ≤ 45s", running)
	}
}
