package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/bmcfence/bmcfence/internal/inventory/metal3"
	"github.com/bmcfence/bmcfence/test/controlplane"
	"github.com/bmcfence/bmcfence/test/testbed"
)

// `fence-agent validate` with inventory.source metal3, against a real API
// server with the BareMetalHost CRD: every host is checked (its address,
// its credentials Secret and keys, its Node), each problem one line on
// stderr, each host that fences nothing a warning, exit 1.
func TestValidateChecksBareMetalHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane (~15 s)")
	}
	cp := controlplane.StartT(t, controlplane.Options{Nodes: []controlplane.NodeSpec{{Name: "w1"}, {Name: "w2"}, {Name: "w3"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := testbed.InstallMetal3CRDs(ctx, cp); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"metal3", "bmcfence-system"} {
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	c := cp.Client()
	dyn, err := dynamic.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	secret := func(name string, data map[string]string) {
		t.Helper()
		if _, err := c.CoreV1().Secrets("metal3").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "metal3", Name: name}, StringData: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	host := func(name, address, credentials, node string) {
		t.Helper()
		h := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
			"metadata": map[string]any{"name": name, "namespace": "metal3"},
			"spec":     map[string]any{"online": true, "bmc": map[string]any{"address": address, "credentialsName": credentials}},
		}}
		created, err := dyn.Resource(metal3.BareMetalHosts).Namespace("metal3").Create(ctx, h, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Object["status"] = map[string]any{"errorCount": int64(0), "errorMessage": "", "operationalStatus": "OK", "poweredOn": true,
			"provisioning": map[string]any{"ID": "ironic-" + name, "state": "provisioned"}}
		if _, err := dyn.Resource(metal3.BareMetalHosts).Namespace("metal3").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if node != "" {
			patch := fmt.Sprintf(`{"spec":{"providerID":"metal3://metal3/%s/m3m-%s"}}`, name, node)
			if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	secret("bmh-w1-bmc", map[string]string{"username": "root", "password": "calvin"})
	secret("bmh-w3-bmc", map[string]string{"username": "root"})
	host("bmh-w1", "redfish://10.0.0.5/redfish/v1/Systems/1", "bmh-w1-bmc", "w1")
	host("bmh-w2", "idrac://10.0.0.6", "bmh-w1-bmc", "w2")
	host("bmh-w3", "ipmi://10.0.0.7", "bmh-w3-bmc", "w3")
	host("bmh-spare", "irmc://10.0.0.8", "bmh-spare-bmc", "")

	cfg := writeConfig(t, "inventory:\n  source: metal3\n  metal3:\n    namespaces: [metal3]\n")
	code, stdout, stderr := runAgent(t, "validate", "--config", cfg, "--kubeconfig", cp.Kubeconfig())
	t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	if code != exitProblems {
		t.Errorf("exit %d, want %d", code, exitProblems)
	}
	wantErr := []string{
		`fence-agent validate: BareMetalHost metal3/bmh-spare: credentials Secret metal3/bmh-spare-bmc not found (in this cluster; keys: username, password)`,
		`fence-agent validate: BareMetalHost metal3/bmh-w2: spec.bmc.address "idrac://10.0.0.6": BMC address scheme not supported by bmcfence: scheme "idrac" is iDRAC over WS-Man (Ironic's idrac hardware type through python-dracclient; dropped by the baremetal-operator in v0.6.0), which bmcfence does not speak (it speaks Redfish and IPMI); the same iDRAC serves Redfish (every iDRAC 9; iDRAC 7 and 8 from firmware 2.40.40.40): set spec.bmc.address to idrac-redfish://10.0.0.6`,
		`fence-agent validate: BareMetalHost metal3/bmh-w3: credentials Secret metal3/bmh-w3-bmc: key password missing or empty`,
	}
	if diff := cmp.Diff(wantErr, lines(stderr)); diff != "" {
		t.Errorf("stderr (-want +got):\n%s", diff)
	}
	for _, w := range []string{
		"checked: 4 BareMetalHosts in metal3 (this cluster), 3 tied to nodes",
		"warning: BareMetalHost metal3/bmh-spare: no Node is tied to it (no Node's spec.providerID is metal3://metal3/bmh-spare/… or metal3://",
	} {
		if !strings.Contains(stdout, w) {
			t.Errorf("stdout does not say %q", w)
		}
	}
	if strings.Contains(stdout+stderr, "calvin") {
		t.Error("a password in the output")
	}
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
