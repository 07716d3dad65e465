//go:build !bmcfast

package main

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// Why 5 (issue "Safety…"): the CLI decided whether an agent runs by
// comparing the leader Lease's renewTime with the laptop's clock. It now
// watches the Lease change on its own clock, whatever the times written in
// it say.
func TestAgentIsAliveWhenWeSeeItsLeaseRenewed(t *testing.T) {
	longAgo := metav1.NewMicroTime(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)) // a skewed agent clock
	justNow := metav1.NewMicroTime(time.Now())                                  // looks fresh on our clock
	for _, tt := range []struct {
		name    string
		renew   metav1.MicroTime
		renews  bool
		want    string
		noLease bool
	}{
		{name: "renewing, with a renewTime far in our past", renew: longAgo, renews: true, want: "agent-0"},
		{name: "a fresh-looking renewTime that never changes: dead", renew: justNow, renews: false, want: ""},
		{name: "no Lease", noLease: true, want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			if !tt.noLease {
				l := &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: "bmcfence-agent", Namespace: "bmcfence-system", ResourceVersion: "1"},
					Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("agent-0"), RenewTime: &tt.renew, LeaseDurationSeconds: ptr.To[int32](1)},
				}
				if _, err := client.CoordinationV1().Leases("bmcfence-system").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			gets := 0
			client.PrependReactor("get", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
				gets++
				if tt.noLease {
					return false, nil, nil
				}
				l := &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: "bmcfence-agent", Namespace: "bmcfence-system", ResourceVersion: "1"},
					Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("agent-0"), RenewTime: &tt.renew, LeaseDurationSeconds: ptr.To[int32](1)},
				}
				if tt.renews && gets > 1 {
					l.ResourceVersion = "2" // the leader renewed while we watched
				}
				return true, l, nil
			})
			got, err := leaderAlive(context.Background(), client, "bmcfence-system", "bmcfence-agent", time.Second, 10*time.Millisecond)
			if err != nil || got != tt.want {
				t.Errorf("leaderAlive = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
