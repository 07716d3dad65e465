package inventory

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory/metal3"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
	"github.com/bmcfence/bmcfence/test/controlplane"
	"github.com/bmcfence/bmcfence/test/testbed"
)

// On a real API server with the BareMetalHost CRD, the hosts in a
// "management cluster": the agent's own identity may read nothing but the
// kubeconfig Secret, and the kubeconfig (built as docs/metal3.md says, from
// deploy/metal3-management's ServiceAccount token) reads the hosts, their
// Machines and credentials Secrets and writes the hold. The management
// cluster is the same API server reached as another user: what is tested
// is that everything about the hosts goes through the kubeconfig's
// identity, and only the kubeconfig Secret through the agent's. The hosts
// are watched (slimmed in the informer's cache) and a change reaches the
// inventory without waiting for a poll.
func TestMetal3ManagementClusterOnARealControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane (~15 s)")
	}
	cp := controlplane.StartT(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := cp.Client()
	if err := testbed.InstallMetal3CRDs(ctx, cp); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"metal3", "bmcfence-system"} {
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(cp.BinDir(), "kubectl"), "--kubeconfig", cp.Kubeconfig(),
		"apply", "-k", filepath.Join(root, "deploy", "metal3-management")).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -k deploy/metal3-management: %v\n%s", err, out)
	}
	var token, ca []byte
	if err := cp.WaitFor(ctx, "the reader's token", func() (bool, error) {
		s, err := admin.CoreV1().Secrets("metal3").Get(ctx, "bmcfence-metal3-reader-token", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		token, ca = s.Data["token"], s.Data["ca.crt"]
		return len(token) > 0 && len(ca) > 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["mgmt"] = &clientcmdapi.Cluster{Server: cp.RESTConfig().Host, CertificateAuthorityData: ca}
	kc.AuthInfos["bmcfence"] = &clientcmdapi.AuthInfo{Token: string(token)}
	kc.Contexts["mgmt"] = &clientcmdapi.Context{Cluster: "mgmt", AuthInfo: "bmcfence"}
	kc.CurrentContext = "mgmt"
	raw, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, func() error {
		_, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mgmt"},
			Data: map[string][]byte{config.KubeconfigKey: raw}}, metav1.CreateOptions{})
		return err
	})

	// The agent may get the kubeconfig Secret, and nothing about hosts.
	const agentUser = "system:serviceaccount:bmcfence-system:bmcfence-agent"
	mustCreate(t, func() error {
		_, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kubeconfig-reader"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"mgmt"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kubeconfig-reader"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kubeconfig-reader"},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: agentUser}}}, metav1.CreateOptions{})
		return err
	})
	arc := cp.RESTConfig()
	arc.Impersonate = rest.ImpersonationConfig{UserName: agentUser}
	agent, err := kubernetes.NewForConfig(arc)
	if err != nil {
		t.Fatal(err)
	}
	// The RBAC authorizer sees new bindings shortly after they exist.
	if err := cp.WaitFor(ctx, "the agent may read the kubeconfig Secret", func() (bool, error) {
		_, err := agent.CoreV1().Secrets(ns).Get(ctx, "mgmt", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := cp.WaitFor(ctx, "the reader may list BareMetalHosts", func() (bool, error) {
		dyn, _, _, err := ManagementClients(ctx, clientgo.Wrap(agent), ns, "mgmt")
		if err != nil {
			return false, err
		}
		_, err = dyn.Resource(metal3.BareMetalHosts).Namespace("metal3").List(ctx, metav1.ListOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.CoreV1().Secrets("metal3").Get(ctx, "bmh-1-bmc", metav1.GetOptions{}); err == nil {
		t.Fatal("the agent's own identity may read the hosts' namespace: the test would prove nothing")
	}

	// A provisioned host, its credentials, and its Node by providerID.
	adminDyn, err := dynamic.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, func() error {
		_, err := admin.CoreV1().Secrets("metal3").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "metal3", Name: "bmh-1-bmc"},
			StringData: map[string]string{"username": "root", "password": "calvin"}}, metav1.CreateOptions{})
		return err
	})
	host := bmh("bmh-1", "idrac-redfish://10.0.0.5/redfish/v1/Systems/System.Embedded.1")
	delete(host.Object, "status")
	delete(host.Object["metadata"].(map[string]any), "uid")
	created, err := adminDyn.Resource(metal3.BareMetalHosts).Namespace("metal3").Create(ctx, host, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = map[string]any{
		"errorCount": int64(0), "errorMessage": "", "operationalStatus": "OK", "poweredOn": true,
		"provisioning": map[string]any{"ID": "ironic-1", "state": "provisioned"},
		"hardware":     map[string]any{"hostname": "w1", "ramMebibytes": int64(262144), "cpu": map[string]any{"arch": "x86_64", "count": int64(64)}},
	}
	if _, err := adminDyn.Resource(metal3.BareMetalHosts).Namespace("metal3").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	w := metal3World{bmcs: byKey{}}
	cfg := metal3Config(config.SourceMetal3)
	cfg.Metal3.KubeconfigSecret = "mgmt"
	inv := New(Options{Config: cfg, Namespace: ns, Timeout: 3 * time.Second, Client: clientgo.Wrap(agent), NewController: w.bmcs.build,
		Nodes: listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")}})
	if err := inv.WatchMetal3(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	inv.Refresh(ctx)
	c, err := inv.Lookup("w1")
	if err != nil {
		t.Fatalf("w1: %v (problems %v, hosts %v)", err, inv.Problems(), inv.HostProblems())
	}
	if c.Target.Key() != "redfish://10.0.0.5:443/System.Embedded.1" || c.Target.Credentials.Username != "root" {
		t.Errorf("w1's BMC: %s as %q", c.Target.Key(), c.Target.Credentials.Username)
	}
	if want := "BareMetalHost metal3/bmh-1 in the management cluster " + cp.RESTConfig().Host + " (kubeconfig Secret bmcfence-system/mgmt)"; !strings.HasPrefix(c.Source, want) {
		t.Errorf("source %q, want it to start with %q", c.Source, want)
	}

	// The informer's cache holds the slim host: no inspection data, no
	// managed fields (the API server writes both).
	inv.mu.RLock()
	store := inv.watch.hosts[0].GetStore().List()
	inv.mu.RUnlock()
	if len(store) != 1 {
		t.Fatalf("%d hosts cached, want 1", len(store))
	}
	cached := store[0].(*unstructured.Unstructured)
	for _, gone := range [][]string{{"status", "hardware"}, {"metadata", "managedFields"}, {"status", "operationalStatus"}} {
		if _, found, _ := unstructured.NestedFieldNoCopy(cached.Object, gone...); found {
			t.Errorf("the cached host keeps %s", strings.Join(gone, "."))
		}
	}

	// The hold goes through the kubeconfig's identity too.
	if err := c.hold.Hold(ctx); err != nil {
		t.Fatalf("Hold: %v", err)
	}
	got, err := adminDyn.Resource(metal3.BareMetalHosts).Namespace("metal3").Get(ctx, "bmh-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := got.GetAnnotations()[metal3.HoldAnnotation]; v != metal3.HoldValue {
		t.Errorf("hold annotation %q, want %q", v, metal3.HoldValue)
	}

	// The host's BMC moves: the watch brings it, no poll needed.
	drain := func() {
		for {
			select {
			case <-inv.kick:
			default:
				return
			}
		}
	}
	drain()
	start := time.Now()
	_ = unstructured.SetNestedField(got.Object, "redfish://10.0.0.6/redfish/v1/Systems/1", "spec", "bmc", "address")
	if _, err := adminDyn.Resource(metal3.BareMetalHosts).Namespace("metal3").Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A kick may still come from the hold's own update (its watch event
	// can arrive after drain): each kick refreshes, until the new address
	// is in, or the deadline.
	deadline := time.After(20 * time.Second)
	for {
		select {
		case <-inv.kick:
		case <-deadline:
			t.Fatalf("the change to the host did not reach the inventory within 20s: w1 is %v, %v", c, err)
		}
		inv.Refresh(ctx)
		c, err = inv.Lookup("w1")
		if err == nil && c.Target.Key() == "redfish://10.0.0.6:443/1" {
			break
		}
	}
	t.Logf("a host's new BMC address reached the inventory %s after the update", time.Since(start).Round(time.Millisecond))
}

func mustCreate(t *testing.T, create func() error) {
	t.Helper()
	if err := create(); err != nil {
		t.Fatal(fmt.Errorf("creating: %w", err))
	}
}
