package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/inventory/metal3"
	"github.com/bmcfence/bmcfence/test/testbed"
)

// With inventory.source metal3 the agent knows the BMCs only from Metal3
// BareMetalHosts (the CRD generated from the baremetal-operator's pinned
// module; no inventory.nodes entry): each node's host points at its Redfish
// mock system (redfish://HOST:PORT/redfish/v1/Systems/<id>) or ipmi_sim,
// with its credentials Secret in the hosts' namespace, tied to its Node by
// the Node's providerID in CAPM3's form or, for every other node, by the
// host's consumerRef → Metal3Machine → Machine status.nodeRef (stand-in
// CRDs for those two). The agent runs with deploy/base's grants plus
// deploy/overlays/metal3's. A node loses power; the agent writes its hold
// (reboot.metal3.io/bmcfence) on the host, sends its ForceOff, confirms,
// taints, and the StatefulSet fails over. Prints "failover (metal3): X.Xs".
func TestMetal3InventoryFailover(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.tb.InstallBareMetalHostCRD(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.tb.InstallCAPIStandInCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.tb.CP.CreateNamespace(ctx, testbed.Metal3Namespace); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.c.CoreV1().Namespaces().Delete(context.Background(), testbed.Metal3Namespace, metav1.DeleteOptions{})
	})
	if err := e.tb.ApplyMetal3RBAC(ctx); err != nil {
		t.Fatal(err)
	}
	// Every other node is tied to its host through the host's consumer
	// (Metal3Machine → Machine status.nodeRef), the rest by providerID.
	hosts := map[string]string{}
	for i, n := range e.tb.Nodes {
		link := testbed.LinkProviderID
		if i%2 == 1 {
			link = testbed.LinkConsumer
		}
		name, err := e.tb.CreateBareMetalHost(ctx, n.Name, link)
		if err != nil {
			t.Fatal(err)
		}
		hosts[n.Name] = name
	}
	// A host whose driver bmcfence does not speak, tied to no node: said
	// on the host, never guessed.
	dyn, err := e.tb.Dynamic()
	if err != nil {
		t.Fatal(err)
	}
	wsman := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
		"metadata": map[string]any{"name": "bmh-wsman", "namespace": testbed.Metal3Namespace},
		"spec":     map[string]any{"online": true, "bmc": map[string]any{"address": "idrac://192.0.2.1", "credentialsName": "none"}},
	}}
	if _, err := dyn.Resource(metal3.BareMetalHosts).Namespace(testbed.Metal3Namespace).Create(ctx, wsman, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := e.tb.AgentConfigMetal3("")
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.tb.StartAgent(ctx, agentBin, "m3", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Stop()
		if t.Failed() {
			t.Logf("agent m3 log (tail):\n%s", lastLines(a.Logs(), 80))
		}
	})
	// Every node's BMC comes from its host and proves its identity.
	e.waitFor(90*time.Second, "every node fenceable through its BareMetalHost", func() (bool, error) {
		for _, n := range e.tb.Nodes {
			if v, err := a.Metric("bmcfence_node_fenceable", fmt.Sprintf(`node=%q`, n.Name)); err != nil || v != 1 {
				return false, nil
			}
		}
		return true, nil
	})

	e.waitFor(30*time.Second, "a FenceUnsupportedBMC Event on BareMetalHost bmh-wsman", func() (bool, error) {
		list, err := e.c.CoreV1().Events(testbed.Metal3Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=BareMetalHost,involvedObject.name=bmh-wsman"})
		if err != nil {
			return false, nil
		}
		for _, ev := range list.Items {
			if ev.Reason == "FenceUnsupportedBMC" && ev.Type == corev1.EventTypeWarning {
				t.Logf("Event on bmh-wsman: %s", ev.Message)
				return true, nil
			}
		}
		return false, nil
	})

	node := e.statefulSet("db-m3", "web")
	start := time.Now()
	if err := e.tb.PowerLoss(node); err != nil {
		t.Fatal(err)
	}
	t.Logf("powered off %s (BareMetalHost %s/%s)", node, testbed.Metal3Namespace, hosts[node])
	var tainted, running time.Duration
	e.waitFor(90*time.Second, "replacement web-0 Running on another node with its volume", func() (bool, error) {
		el := time.Since(start)
		if tainted == 0 && cluster.HasOutOfServiceTaint(e.node(node)) {
			tainted = el
		}
		p, err := e.c.CoreV1().Pods("db-m3").Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == node {
			return false, nil
		}
		if running == 0 && p.Status.Phase == corev1.PodRunning && e.tb.CP.AttachedNode(ctx, "db-m3", "data-web-0") == p.Spec.NodeName {
			running = el
		}
		return running != 0, nil
	})
	t.Logf("timeline: tainted +%.1fs, replacement Running with its volume +%.1fs", tainted.Seconds(), running.Seconds())
	fmt.Printf("failover (metal3): %.1fs\n", running.Seconds())

	if cluster.TaintStateOf(e.node(node)) != fence.TaintOurs {
		t.Errorf("the taint on %s is not ours", node)
	}
	if k := e.forceOffsSince(node); k < 1 {
		t.Errorf("%d ForceOffs sent; want our own before the taint", k)
	}
	// The baremetal-operator is told to keep the host off while fenced.
	h, err := dyn.Resource(metal3.BareMetalHosts).Namespace(testbed.Metal3Namespace).Get(ctx, hosts[node], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := h.GetAnnotations()[metal3.HoldAnnotation]; v != metal3.HoldValue {
		t.Errorf("BareMetalHost %s annotation %s = %q, want %q", hosts[node], metal3.HoldAnnotation, v, metal3.HoldValue)
	}
	for _, other := range e.tb.Nodes {
		if other.Name == node {
			continue
		}
		h, err := dyn.Resource(metal3.BareMetalHosts).Namespace(testbed.Metal3Namespace).Get(ctx, hosts[other.Name], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, held := h.GetAnnotations()[metal3.HoldAnnotation]; held {
			t.Errorf("BareMetalHost %s of %s, which was not fenced, carries our hold", hosts[other.Name], other.Name)
		}
	}
	if running > 45*time.Second {
		t.Errorf("failover took %s, want ≤ 45s", running)
	}
}
