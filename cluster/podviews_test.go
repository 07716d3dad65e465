package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

// TestPodsOfFencingNodesOnlyFollowTheFenceState: under
// PodsOfFencingNodesOnly the Cluster watches a node's pods while its state
// is Tainting or Detaching (a restarted agent finds one mid-fence at its
// first list), says PodsUnknown for every other node, starts a watch when a
// state reaches Tainting, and stops it when the node is deleted. The
// start-up warning lists the pods that tolerate the taint, page by page.
func TestPodsOfFencingNodesOnlyFollowTheFenceState(t *testing.T) {
	client := fake.NewClientset(
		node("w1", ready(at(-time.Hour)), withState(`{"v":2,"ph":"Detaching"}`)), node("w2", ready(at(-time.Hour))),
		lease("w1", at(-time.Minute)), lease("w2", at(-time.Minute)),
		pod("db", "db-0", "w1"), pod("db", "db-1", "w1", toleratingOutOfService()), pod("web", "web-0", "w2"),
	)
	c, err := New(clientgo.Wrap(client), Options{Clock: clocktesting.NewFakeClock(t0), PodsOfFencingNodesOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitNode := func(name, what string, ok func(fence.NodeView) bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			if info, found := c.Node(name); found && ok(info.View) {
				return
			}
			select {
			case <-c.Changed():
			case <-deadline:
				info, _ := c.Node(name)
				t.Fatalf("%s: %s's view %+v", what, name, info.View)
			}
		}
	}
	waitNode("w1", "the pods of a node found Detaching are listed", func(v fence.NodeView) bool {
		return !v.PodsUnknown && v.Pods == 2 && slices.Equal(v.Blockers, []string{"pod db/db-1 tolerates the out-of-service taint", "pod db/db-0"})
	})
	if v, _ := c.Node("w2"); !v.View.PodsUnknown || v.View.Pods != 0 || !slices.Equal(v.View.Blockers, []string{"pods not listed yet"}) {
		t.Errorf("a healthy node's view: PodsUnknown %v, Pods %d, Blockers %q; want unknown, 0, [pods not listed yet]", v.View.PodsUnknown, v.View.Pods, v.View.Blockers)
	}
	if n := c.WatchedPodNodes(); n != 1 {
		t.Errorf("pods of %d nodes watched; want 1 (w1)", n)
	}
	tolerating, err := c.PodsToleratingOutOfService(ctx)
	if err != nil || !slices.Equal(tolerating, []string{"db/db-1 on w1"}) {
		t.Errorf("PodsToleratingOutOfService = %q, %v; want [db/db-1 on w1]", tolerating, err)
	}

	n2, err := client.CoreV1().Nodes().Get(ctx, "w2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n2.Annotations = map[string]string{AnnotationState: `{"v":2,"ph":"Tainting"}`}
	if _, err := client.CoreV1().Nodes().Update(ctx, n2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode("w2", "the pods of a node whose state reached Tainting are listed", func(v fence.NodeView) bool {
		return !v.PodsUnknown && v.Pods == 1
	})
	if n := c.WatchedPodNodes(); n != 2 {
		t.Errorf("pods of %d nodes watched; want 2", n)
	}

	if err := client.CoreV1().Nodes().Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for c.HasNode("w1") {
		select {
		case <-c.Changed():
		case <-deadline:
			t.Fatal("w1 still known 10 s after its deletion")
		}
	}
	if n := c.WatchedPodNodes(); n != 1 {
		t.Errorf("pods of %d nodes watched after w1's deletion; want 1 (w2)", n)
	}
}

// TestUnknownPodsKeepTheVolumeAttachmentsNamed: a node whose pods are not
// listed names that first, then its VolumeAttachments.
func TestUnknownPodsKeepTheVolumeAttachmentsNamed(t *testing.T) {
	o := newObservation(at(0))
	v := buildInfo(node("w1"), o, nil, false, []*storagev1.VolumeAttachment{va("csi-1", "w1", "pv-1")}).View
	want := []string{"pods not listed yet", "VolumeAttachment csi-1 (PV pv-1)"}
	if !v.PodsUnknown || v.VolumeAttachments != 1 || !slices.Equal(v.Blockers, want) {
		t.Errorf("PodsUnknown %v, VolumeAttachments %d, Blockers %q; want unknown, 1, %q", v.PodsUnknown, v.VolumeAttachments, v.Blockers, want)
	}
	if v := buildInfo(node("w1"), o, nil, false, nil).View; !slices.Equal(v.Blockers, []string{"pods not listed yet"}) {
		t.Errorf("Blockers %q without VolumeAttachments; want [pods not listed yet]", v.Blockers)
	}
}
