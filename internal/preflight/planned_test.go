package preflight

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

func TestPlannedRebootsSaysEachSourcesState(t *testing.T) {
	kured := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kured", Namespace: "kube-system"}}
	nm := &metav1.APIResourceList{GroupVersion: "nodemaintenance.medik8s.io/v1beta1", APIResources: []metav1.APIResource{{Name: "nodemaintenances"}}}
	machines := &metav1.APIResourceList{GroupVersion: "cluster.x-k8s.io/v1beta2", APIResources: []metav1.APIResource{{Name: "machines"}}}
	tests := []struct {
		name    string
		kured   bool
		off     bool
		served  []*metav1.APIResourceList
		granted []string
		status  Status
		says    []string
	}{{
		name: "nothing installed", status: StatusOK,
		says: []string{"kured: not installed (no DaemonSet kube-system/kured)", "NodeMaintenance: not installed", "Cluster API Machines: not installed"},
	}, {
		name: "everything installed and granted", kured: true, served: []*metav1.APIResourceList{nm, machines},
		granted: []string{"list daemonsets.apps kube-system", "watch daemonsets.apps kube-system", "list nodemaintenances.nodemaintenance.medik8s.io", "watch nodemaintenances.nodemaintenance.medik8s.io",
			"list machines.cluster.x-k8s.io", "watch machines.cluster.x-k8s.io"},
		status: StatusOK,
		says:   []string{"kured: watched (DaemonSet kube-system/kured)", "NodeMaintenance: watched (nodemaintenances.nodemaintenance.medik8s.io)", "Cluster API Machines: watched (machines.cluster.x-k8s.io)"},
	}, {
		name: "NodeMaintenance installed, not granted", served: []*metav1.APIResourceList{nm}, status: StatusWarn,
		says: []string{"NodeMaintenance: no RBAC", "may not list, watch nodemaintenances.nodemaintenance.medik8s.io"},
	}, {
		name: "kured turned off", kured: true, off: true, status: StatusOK,
		says: []string{"kured: off"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientset()
			if tt.kured {
				c = fake.NewClientset(kured)
			}
			c.Discovery().(*fakediscovery.FakeDiscovery).Resources = tt.served
			grant(c, tt.granted...)
			o := Options{Client: clientgo.Wrap(c), Namespace: ns}
			if tt.off {
				o.Kured = &cluster.KuredLock{}
			}
			r := checkPlannedReboots(context.Background(), o.withDefaults())
			if r.Status != tt.status {
				t.Errorf("status %s, want %s: %s", r.Status, tt.status, r.Message)
			}
			for _, s := range tt.says {
				if !strings.Contains(r.Message, s) {
					t.Errorf("message %q does not say %q", r.Message, s)
				}
			}
		})
	}
}
