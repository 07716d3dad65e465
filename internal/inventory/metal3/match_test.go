package metal3

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func host(ns, name, uid string, opts ...func(*Host)) Host {
	h := Host{Namespace: ns, Name: name, UID: uid, ProvisioningState: "provisioned", Online: true}
	for _, o := range opts {
		o(&h)
	}
	return h
}

func consumer(m3m string) func(*Host) {
	return func(h *Host) {
		h.ConsumerRef = &ObjectRef{APIVersion: "infrastructure.cluster.x-k8s.io/v1beta1", Kind: "Metal3Machine", Namespace: h.Namespace, Name: m3m}
	}
}

// chain is a Metal3Machine owned by a Machine whose nodeRef is node.
func chain(ns, m3m, machine, node string) ([]Metal3Machine, []Machine) {
	return []Metal3Machine{{Namespace: ns, Name: m3m, Machine: machine}}, []Machine{{Namespace: ns, Name: machine, NodeName: node}}
}

func TestMatchNodes(t *testing.T) {
	m3ms, machines := chain("metal3", "m3m-a", "machine-a", "worker-a")
	m3msB, machinesB := chain("metal3", "m3m-b", "machine-b", "worker-b")
	type result struct {
		Hosts    map[string]string // node → host key
		Problems map[string]string // node → substring of its error
	}
	tests := []struct {
		name  string
		nodes []Node
		objs  Objects
		want  result
	}{
		{
			name:  "consumer chain",
			nodes: []Node{{Name: "worker-a"}},
			objs:  Objects{Hosts: []Host{host("metal3", "bmh-a", "u1", consumer("m3m-a"))}, Metal3Machines: m3ms, Machines: machines},
			want:  result{Hosts: map[string]string{"worker-a": "metal3/bmh-a"}},
		},
		{
			name:  "providerID with names",
			nodes: []Node{{Name: "worker-a", ProviderID: "metal3://metal3/bmh-a/m3m-a"}},
			objs:  Objects{Hosts: []Host{host("metal3", "bmh-a", "u1")}},
			want:  result{Hosts: map[string]string{"worker-a": "metal3/bmh-a"}},
		},
		{
			name:  "legacy providerID with the host's UID",
			nodes: []Node{{Name: "worker-a", ProviderID: "metal3://4a4e1a5c-0000-4000-8000-000000000001"}},
			objs:  Objects{Hosts: []Host{host("metal3", "bmh-a", "4a4e1a5c-0000-4000-8000-000000000001")}},
			want:  result{Hosts: map[string]string{"worker-a": "metal3/bmh-a"}},
		},
		{
			name:  "both links agree",
			nodes: []Node{{Name: "worker-a", ProviderID: "metal3://metal3/bmh-a/m3m-a"}},
			objs:  Objects{Hosts: []Host{host("metal3", "bmh-a", "u1", consumer("m3m-a"))}, Metal3Machines: m3ms, Machines: machines},
			want:  result{Hosts: map[string]string{"worker-a": "metal3/bmh-a"}},
		},
		{
			name:  "links disagree: refused",
			nodes: []Node{{Name: "worker-a", ProviderID: "metal3://metal3/bmh-b/m3m-b"}},
			objs:  Objects{Hosts: []Host{host("metal3", "bmh-a", "u1", consumer("m3m-a")), host("metal3", "bmh-b", "u2")}, Metal3Machines: m3ms, Machines: machines},
			want:  result{Problems: map[string]string{"worker-a": "BareMetalHosts metal3/bmh-a (consumerRef"}},
		},
		{
			name: "one host claimed by two nodes: both refused",
			nodes: []Node{
				{Name: "worker-a"},
				{Name: "worker-b", ProviderID: "metal3://metal3/bmh-a/m3m-x"},
			},
			objs: Objects{Hosts: []Host{host("metal3", "bmh-a", "u1", consumer("m3m-a"))}, Metal3Machines: m3ms, Machines: machines},
			want: result{Problems: map[string]string{
				"worker-a": "BareMetalHost metal3/bmh-a is claimed by nodes worker-a, worker-b",
				"worker-b": "BareMetalHost metal3/bmh-a is claimed by nodes worker-a, worker-b",
			}},
		},
		{
			name:  "providerID names a host not listed",
			nodes: []Node{{Name: "worker-a", ProviderID: "metal3://other/bmh-a/m3m-a"}},
			objs:  Objects{Hosts: []Host{host("metal3", "bmh-a", "u1")}},
			want:  result{Problems: map[string]string{"worker-a": `providerID "metal3://other/bmh-a/m3m-a" names no BareMetalHost in inventory.metal3.namespaces`}},
		},
		{
			name:  "malformed metal3 providerID",
			nodes: []Node{{Name: "worker-a", ProviderID: "metal3://metal3/bmh-a"}},
			objs:  Objects{Hosts: []Host{host("metal3", "bmh-a", "u1")}},
			want:  result{Problems: map[string]string{"worker-a": "is neither metal3://<namespace>/<host>/<metal3machine> nor metal3://<host-uid>"}},
		},
		{
			name:  "another provider's ID and no consumer: not ours to judge",
			nodes: []Node{{Name: "worker-a", ProviderID: "kind://docker/x/y"}},
			objs:  Objects{Hosts: []Host{host("metal3", "bmh-a", "u1")}},
			want:  result{},
		},
		{
			name:  "broken chain: a Machine without a nodeRef yet",
			nodes: []Node{{Name: "worker-a"}},
			objs: Objects{Hosts: []Host{host("metal3", "bmh-a", "u1", consumer("m3m-a"))}, Metal3Machines: m3ms,
				Machines: []Machine{{Namespace: "metal3", Name: "machine-a"}}},
			want: result{},
		},
		{
			name:  "two nodes, two hosts",
			nodes: []Node{{Name: "worker-a"}, {Name: "worker-b"}},
			objs: Objects{Hosts: []Host{host("metal3", "bmh-a", "u1", consumer("m3m-a")), host("metal3", "bmh-b", "u2", consumer("m3m-b"))},
				Metal3Machines: append(m3ms, m3msB...), Machines: append(machines, machinesB...)},
			want: result{Hosts: map[string]string{"worker-a": "metal3/bmh-a", "worker-b": "metal3/bmh-b"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			matches, problems := MatchNodes(tt.nodes, tt.objs)
			got := result{}
			for node, m := range matches {
				if got.Hosts == nil {
					got.Hosts = map[string]string{}
				}
				got.Hosts[node] = m.Host.Key()
			}
			for node, err := range problems {
				if !errors.Is(err, ErrNoMatch) {
					t.Errorf("node %s: error %v does not wrap ErrNoMatch", node, err)
				}
				if got.Problems == nil {
					got.Problems = map[string]string{}
				}
				got.Problems[node] = err.Error()
			}
			// Problems are compared by the substring the test names.
			for node, want := range tt.want.Problems {
				if msg, ok := got.Problems[node]; ok && strings.Contains(msg, want) {
					got.Problems[node] = want
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("MatchNodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHostFrom(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
		"metadata": map[string]any{"namespace": "metal3", "name": "bmh-a", "uid": "u1",
			"annotations": map[string]any{HoldAnnotation: HoldValue, "reboot.metal3.io/capm3-remediation-x": "", "other": "x"}},
		"spec": map[string]any{
			"online":      true,
			"bmc":         map[string]any{"address": "redfish://10.0.0.5/redfish/v1/Systems/1", "credentialsName": "bmh-a-bmc", "disableCertificateVerification": true},
			"consumerRef": map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3Machine", "name": "m3m-a"},
		},
		"status": map[string]any{"provisioning": map[string]any{"state": "provisioned"}},
	}}
	got, err := HostFrom(u)
	if err != nil {
		t.Fatal(err)
	}
	want := Host{
		Namespace: "metal3", Name: "bmh-a", UID: "u1",
		Address: "redfish://10.0.0.5/redfish/v1/Systems/1", CredentialsName: "bmh-a-bmc", DisableCertificateVerification: true, Online: true,
		ConsumerRef:       &ObjectRef{APIVersion: "infrastructure.cluster.x-k8s.io/v1beta1", Kind: "Metal3Machine", Namespace: "metal3", Name: "m3m-a"},
		ProvisioningState: "provisioned",
		Annotations:       map[string]string{HoldAnnotation: HoldValue, "reboot.metal3.io/capm3-remediation-x": "", "other": "x"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("HostFrom (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"reboot.metal3.io/capm3-remediation-x"}, got.OthersHolding()); diff != "" {
		t.Errorf("OthersHolding (-want +got):\n%s", diff)
	}
	if !got.HeldByUs() {
		t.Error("HeldByUs = false with our annotation on")
	}

	bad := u.DeepCopy()
	_ = unstructured.SetNestedField(bad.Object, "yes", "spec", "online")
	if _, err := HostFrom(bad); err == nil || !strings.Contains(err.Error(), "spec.online") {
		t.Errorf("HostFrom with spec.online a string: %v, want an error naming spec.online", err)
	}
}

func TestFenceable(t *testing.T) {
	tests := []struct {
		state string
		ok    bool
	}{
		{"provisioned", true},
		{"externally provisioned", true},
		{"", false},
		{"registering", false},
		{"inspecting", false},
		{"available", false},
		{"provisioning", false},
		{"deprovisioning", false},
		{"powering off before delete", false},
		{"deleting", false},
	}
	for _, tt := range tests {
		t.Run(tt.state, func(t *testing.T) {
			err := host("metal3", "bmh-a", "u1", func(h *Host) { h.ProvisioningState = tt.state }).Fenceable()
			if (err == nil) != tt.ok {
				t.Fatalf("Fenceable() in state %q = %v, want ok=%v", tt.state, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrBusy) {
				t.Errorf("error %v does not wrap ErrBusy", err)
			}
		})
	}
}

func TestMetal3MachineOwner(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetNamespace("metal3")
	u.SetName("m3m-a")
	u.SetOwnerReferences([]metav1.OwnerReference{
		{APIVersion: "cluster.x-k8s.io/v1beta1", Kind: "MachineSet", Name: "ms"},
		{APIVersion: "other.example.com/v1", Kind: "Machine", Name: "not-capi"},
		{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "machine-a"},
	})
	if diff := cmp.Diff(Metal3Machine{Namespace: "metal3", Name: "m3m-a", Machine: "machine-a"}, Metal3MachineFrom(u)); diff != "" {
		t.Errorf("Metal3MachineFrom (-want +got):\n%s", diff)
	}
}
