package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

// TestStartSyncsEveryInformer runs the real informers against the fake
// clientset: after Start, the view holds every object, and the Lease list
// has stamped APIFreshAt.
func TestStartSyncsEveryInformer(t *testing.T) {
	client := fake.NewClientset(
		node("w1", ready(at(-time.Hour)), withLabel(LabelZone, "z1")), node("w2", notReady(at(-time.Hour))),
		lease("w1", at(-time.Minute)), lease("w2", at(-time.Hour)),
		pod("db", "db-0", "w1"), va("csi-1", "w2", "pv-1"),
	)
	clk := clocktesting.NewFakeClock(t0)
	c, err := New(clientgo.Wrap(client), Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	type row struct {
		Name, Zone                 string
		Ready                      fence.Readiness
		HeartbeatAt, NotReadySince time.Time
		Pods, VolumeAttachments    int
	}
	var got []row
	for _, n := range c.Nodes() {
		v := n.View
		got = append(got, row{n.Name, n.Zone, v.Ready, v.HeartbeatAt, v.NotReadySince, v.Pods, v.VolumeAttachments})
	}
	want := []row{
		{Name: "w1", Zone: "z1", Ready: fence.ReadyTrue, HeartbeatAt: t0, Pods: 1},
		{Name: "w2", Ready: fence.ReadyFalse, HeartbeatAt: t0, NotReadySince: t0, VolumeAttachments: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Nodes() after Start (-want +got):\n%s", diff)
	}
	if got := c.APIFreshAt(); !got.Equal(t0) {
		t.Errorf("APIFreshAt = %v, want the Lease list at %v", got, t0)
	}
	if err := c.Start(ctx); err == nil {
		t.Error("a second Start succeeded")
	}
	if n, ok := c.NodeObject("w1"); !ok || n.Name != "w1" {
		t.Errorf("NodeObject(w1) = %v, %v", n, ok)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Error(err)
	}
}

func TestStartSaysWhatDidNotSync(t *testing.T) {
	// pods: a shared informer's; leases: leasePoller's, which reports
	// its errors itself.
	for _, resource := range []string{"pods", "leases"} {
		t.Run(resource, func(t *testing.T) {
			client := fake.NewClientset(node("w1"))
			client.PrependReactor("list", resource, func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", fmt.Errorf(`User "system:serviceaccount:x:bmcfence" cannot list resource %q`, resource))
			})
			c, err := New(clientgo.Wrap(client), Options{SyncTimeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err = c.Start(ctx)
			var se *CacheSyncError
			if !errors.As(err, &se) {
				t.Fatalf("Start = %v, want a *CacheSyncError", err)
			}
			if diff := cmp.Diff([]string{resource}, se.Unsynced); diff != "" {
				t.Errorf("Unsynced (-want +got):\n%s", diff)
			}
			if !apierrors.IsForbidden(err) {
				t.Errorf("Start = %v, want it to carry the Forbidden list error", err)
			}
			t.Logf("the operator reads: %v", err)
		})
	}
}
