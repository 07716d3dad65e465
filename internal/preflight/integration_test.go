package preflight

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
	"github.com/bmcfence/bmcfence/test/testbed"
)

// TestOnARealControlPlane runs the checks the way `kubectl fence check`
// does: the real API server answers the SubjectAccessReviews and discovery,
// the Redfish mock (over TLS, with per-system credentials) and ipmi_sim
// answer through the real bmclib adapter.
func TestOnARealControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane (~15 s)")
	}
	tb := testbed.StartT(t, testbed.Options{Nodes: []string{"n1", "n2", "n3", "n4"}, IPMINode: "n4"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := tb.CP.Client()

	// The inventory as testbed.AgentConfig writes it: one Secret per node,
	// the mock's CA for all.
	cfg := config.Inventory{Defaults: config.Defaults().Inventory.Defaults}
	cfg.Defaults.CAConfigMap = "bmc-ca"
	for _, n := range tb.Nodes {
		cfg.Nodes = append(cfg.Nodes, config.NodeBMC{Name: n.Name, Address: n.Address, System: n.System,
			BMCSettings: config.BMCSettings{CredentialsSecret: "bmc-" + n.Name}})
	}
	inv := inventory.New(inventory.Options{Config: cfg, Namespace: testbed.Namespace, Timeout: 5 * time.Second, Client: clientgo.Wrap(client)})
	o := Options{Client: clientgo.Wrap(client), Inventory: inv, Namespace: testbed.Namespace, Timeout: 5 * time.Second}

	// The IPMI node proves its identity too: ipmi_sim reports the node's
	// systemUUID as its system GUID, which the IPMI adapter reads.
	ipmiNode := func() []row {
		s := NodeScope("n4")
		return []row{{s, CheckInventory, StatusOK}, {s, CheckBMC, StatusOK}, {s, CheckIdentity, StatusOK}, {s, CheckPower, StatusOK}}
	}
	run := func(step string, want []row, contains ...string) []Result {
		t.Helper()
		start := time.Now()
		got, err := Run(ctx, o)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		t.Logf("%s: %d results in %s:\n%s", step, len(got), time.Since(start).Round(time.Millisecond), messages(got))
		if diff := cmp.Diff(want, rows(got)); diff != "" {
			t.Errorf("%s: results (-want +got):\n%s", step, diff)
		}
		all := messages(got)
		for _, s := range contains {
			if !strings.Contains(all, s) {
				t.Errorf("%s: no result says %q", step, s)
			}
		}
		return got
	}

	// Before the manifests: every BMC is fine, the agent has no identity
	// and no rights.
	want := []row{
		{ScopeCluster, CheckVersion, StatusOK}, {ScopeCluster, CheckNamespace, StatusOK},
		{ScopeCluster, CheckServiceAccount, StatusFail}, {ScopeCluster, CheckRBAC, StatusFail},
		{ScopeCluster, CheckTolerations, StatusOK}, {ScopeCluster, CheckForceDetach, StatusWarn},
		{ScopeCluster, CheckPlannedReboots, StatusOK},
	}
	want = append(want, healthy("n1")...)
	want = append(want, healthy("n2")...)
	want = append(want, healthy("n3")...)
	want = append(want, ipmiNode()...)
	// This control plane runs kube-controller-manager as a process: no pod
	// shows its flags.
	run("before the RBAC manifests", want,
		"Kubernetes v1.34", "may not: get, list, watch, patch nodes;", "unknown: no kube-controller-manager pod in kube-system shows its flags",
		"TLS verified with the caConfigMap CA", "matches the Node's status.nodeInfo.systemUUID")

	if err := tb.ApplyAgentRBAC(ctx); err != nil {
		t.Fatal(err)
	}
	// The API server's RBAC authorizer reads bindings from an informer:
	// new ones take effect shortly after they are created, not at once.
	err := tb.CP.WaitFor(ctx, "the RBAC authorizer to see the agent's bindings", func() (bool, error) {
		return checkRBAC(ctx, o.withDefaults()).Status == StatusOK, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// n2's BMC now answers for another machine; n3's Secret holds a wrong
	// password.
	if err := tb.SetFaults("n2", redfishmock.Faults{WrongUUID: true}); err != nil {
		t.Fatal(err)
	}
	sec, err := client.CoreV1().Secrets(testbed.Namespace).Get(ctx, "bmc-n3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rightPassword := string(sec.Data["password"])
	const wrongPassword = "Wr0ng-but-long-enough-to-spot"
	sec.Data["password"] = []byte(wrongPassword)
	if _, err := client.CoreV1().Secrets(testbed.Namespace).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A kubeadm-style kube-controller-manager pod with the flag (its
	// static pod's mirror, as the API server returns it).
	kcm := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-cp1", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"component": "kube-controller-manager"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-controller-manager", Image: "registry.k8s.io/kube-controller-manager:v1.34.4",
			Command: []string{"kube-controller-manager", "--leader-elect=true", "--disable-force-detach-on-timeout=true"}}}},
	}
	if _, err := client.CoreV1().Pods(metav1.NamespaceSystem).Create(ctx, kcm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want = []row{
		{ScopeCluster, CheckVersion, StatusOK}, {ScopeCluster, CheckNamespace, StatusOK},
		{ScopeCluster, CheckServiceAccount, StatusOK}, {ScopeCluster, CheckRBAC, StatusOK},
		{ScopeCluster, CheckTolerations, StatusOK}, {ScopeCluster, CheckForceDetach, StatusOK},
		{ScopeCluster, CheckPlannedReboots, StatusOK},
	}
	want = append(want, healthy("n1")...)
	want = append(want, row{NodeScope("n2"), CheckInventory, StatusOK}, row{NodeScope("n2"), CheckBMC, StatusOK}, row{NodeScope("n2"), CheckIdentity, StatusFail})
	want = append(want, row{NodeScope("n3"), CheckInventory, StatusOK}, row{NodeScope("n3"), CheckBMC, StatusFail})
	want = append(want, ipmiNode()...)
	got := run("after the manifests, with faults", want,
		"has every permission the agent uses",
		"the entry points at another machine",
		`the BMC rejected user "bmc-n3": check the credentials Secret`)
	all := messages(got)
	for _, pw := range []string{wrongPassword, rightPassword} {
		if strings.Contains(all, pw) {
			t.Errorf("a password appears in the results")
		}
	}
}
