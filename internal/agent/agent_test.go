package agent

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

// seriesOf counts the agent's metric series labelled node=name.
func seriesOf(t *testing.T, a *Agent, name string) int {
	t.Helper()
	mfs, err := a.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	k := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if hasLabel(m, "node", name) {
				k++
			}
		}
	}
	return k
}

// gauge reads an unlabelled gauge of the agent.
func gauge(t *testing.T, a *Agent, name string) float64 {
	t.Helper()
	mfs, err := a.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// A deleted node's series go with it (a cluster that replaces its nodes
// would otherwise grow its metrics forever), and what the runner or the
// probe says about it afterwards does not bring them back.
func TestDeletedNodeMetricsAreForgotten(t *testing.T) {
	client := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w2"}},
	)
	a, err := New(config.Defaults(), zap.NewNop(), clientgo.Wrap(client))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := a.cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"w1", "w2"} {
		a.metrics.Phase(n, fence.Suspect)
		a.metrics.Fenceable(n, false)
	}
	if got := seriesOf(t, a, "w1"); got == 0 {
		t.Fatal("no series for w1 before its deletion")
	}
	if err := client.CoreV1().Nodes().Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return seriesOf(t, a, "w1") == 0, nil
	})
	if err != nil {
		t.Fatalf("w1 deleted: %d series still labelled node=w1", seriesOf(t, a, "w1"))
	}
	// The runner's last word on a deleted node, a probe that was in flight.
	a.metrics.Phase("w1", fence.Healthy)
	a.metrics.Fenceable("w1", true)
	if got := seriesOf(t, a, "w1"); got != 0 {
		t.Errorf("%d series for w1 came back after its deletion", got)
	}
	if got := seriesOf(t, a, "w2"); got == 0 {
		t.Error("w2's series went too")
	}
	if got := gauge(t, a, "bmcfence_unfenceable_nodes"); got != 1 {
		t.Errorf("bmcfence_unfenceable_nodes = %v, want 1 (w2)", got)
	}
}
