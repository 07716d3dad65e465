package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/inventory/metal3"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
	"github.com/bmcfence/bmcfence/test/controlplane"
	"github.com/bmcfence/bmcfence/test/testbed"
)

// TestIntegrationPlannedRebootSignals: on the real control plane, each
// tool's signal, written as the tool writes it (test/testbed), makes the
// node's view a planned reboot naming it, and clearing it as the tool does
// ends it. The NodeMaintenance CRD is installed after the watch started:
// the source is found when it appears.
func TestIntegrationPlannedRebootSignals(t *testing.T) {
	t.Parallel()
	cp := cluster.SharedControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const (
		kuredNode = "planned-kured"
		nmNode    = "planned-nm"
		delNode   = "planned-capi-deleted"
		remNode   = "planned-capi-remediated"
	)
	client := cp.Client()
	for _, n := range []string{kuredNode, nmNode, delNode, remNode} {
		if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	b := &testbed.Testbed{CP: cp}
	// Cluster API's CRDs are there when the agent starts; NodeMaintenance's
	// comes later.
	if err := b.InstallCAPIStandInCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := cluster.New(clientgo.Wrap(client), cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(context.Background())
	t.Cleanup(func() {
		stop()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = c.Shutdown(sctx)
	})
	if err := c.Start(actx); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.WatchPlanned(actx, cluster.PlannedOptions{Client: clientgo.Wrap(client), Dynamic: dyn, Kured: cluster.DefaultKuredLock(), Recheck: time.Second})
	}()
	t.Cleanup(func() { stop(); <-done })

	planned := func(node, by string) {
		t.Helper()
		waitFor(t, ctx, fmt.Sprintf("%s planned by %q", node, by), func() (bool, error) {
			info, ok := c.Node(node)
			return ok && info.View.PlannedReboot && info.View.PlannedRebootBy == by, nil
		})
	}
	over := func(node string) {
		t.Helper()
		waitFor(t, ctx, node+" no longer planned", func() (bool, error) {
			info, ok := c.Node(node)
			return ok && !info.View.PlannedReboot, nil
		})
	}
	state := func(source, want string) {
		t.Helper()
		waitFor(t, ctx, source+" "+want, func() (bool, error) {
			for _, s := range c.PlannedSources() {
				if s.Source == source {
					return s.State == want, nil
				}
			}
			return false, nil
		})
	}
	state(cluster.SourceNodeMaintenance, cluster.PlannedNotInstalled)
	state(cluster.SourceClusterAPI, cluster.PlannedWatched)

	if err := b.KuredLock(ctx, kuredNode); err != nil {
		t.Fatal(err)
	}
	state(cluster.SourceKured, cluster.PlannedWatched)
	planned(kuredNode, cluster.SignalKuredLock)
	at := mustView(t, c, kuredNode).PlannedRebootAt

	if err := b.NodeMaintenance(ctx, nmNode, "firmware"); err != nil {
		t.Fatal(err)
	}
	planned(nmNode, "NodeMaintenance nm-"+nmNode)
	state(cluster.SourceNodeMaintenance, cluster.PlannedWatched)

	if err := b.DeleteMachine(ctx, delNode); err != nil {
		t.Fatal(err)
	}
	planned(delNode, "Cluster API Machine default/machine-"+delNode+" deleted")
	if err := b.RemediateMachine(ctx, remNode); err != nil {
		t.Fatal(err)
	}
	planned(remNode, "Cluster API Machine default/machine-"+remNode+" remediated by its owner")
	remAt := mustView(t, c, remNode).PlannedRebootAt

	// The lock, still held, keeps the time we first saw it.
	if got := mustView(t, c, kuredNode).PlannedRebootAt; !got.Equal(at) {
		t.Errorf("kured lock first seen at %s, now %s", at, got)
	}

	// Each tool clears its signal.
	if err := b.KuredUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	over(kuredNode)
	if err := dyn.Resource(testbed.NodeMaintenances).Delete(ctx, "nm-"+nmNode, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	over(nmNode)
	// The Machine controller removes its finalizer once the node is
	// drained and the infrastructure gone: then the Machine is.
	machines := dyn.Resource(metal3.Machines).Namespace(testbed.CAPINamespace)
	if _, err := machines.Patch(ctx, "machine-"+delNode, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	over(delNode)
	if err := machines.Delete(ctx, "machine-"+remNode, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Deleted by its owner: still planned (deleted) until it is gone.
	planned(remNode, "Cluster API Machine default/machine-"+remNode+" deleted")
	if got := mustView(t, c, remNode).PlannedRebootAt; !got.Equal(remAt) {
		t.Errorf("the remediated, then deleted Machine: first seen at %s, now %s", remAt, got)
	}
	if _, err := machines.Patch(ctx, "machine-"+remNode, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	over(remNode)
}

func mustView(t *testing.T, c *cluster.Cluster, node string) fence.NodeView {
	t.Helper()
	info, ok := c.Node(node)
	if !ok {
		t.Fatalf("%s not in the view", node)
	}
	return info.View
}

func waitFor(t *testing.T, ctx context.Context, desc string, cond func() (bool, error)) {
	t.Helper()
	if err := controlplane.WaitFor(ctx, t.Logf, desc, cond); err != nil {
		t.Fatal(err)
	}
}
