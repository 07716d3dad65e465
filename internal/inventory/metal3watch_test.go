package inventory

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory/metal3"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

// listsOf counts the LIST calls made on a resource.
func listsOf(w metal3World, resource string) int {
	n := 0
	for _, a := range w.dyn.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

// Watched, not polled: once the informers have synced, a Refresh reads the
// hosts from their caches (no LIST), and a change to a host reaches the
// inventory through the watch (Run is kicked), not at the next 30 s poll.
func TestMetal3HostsAreWatched(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newMetal3Inventory(t, metal3Config(config.SourceMetal3),
		listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")},
		[]*corev1.Secret{m3Secret("bmh-1-bmc")}, bmh("bmh-1", "redfish://10.0.0.5/redfish/v1/Systems/1"))
	if err := w.inv.WatchMetal3(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Drain a kick from the informers' initial adds.
	select {
	case <-w.inv.kick:
	default:
	}
	before := listsOf(w, "baremetalhosts")
	w.inv.Refresh(ctx)
	if c, err := w.inv.Lookup("w1"); err != nil || c.Target.Key() != "redfish://10.0.0.5:443/1" {
		t.Fatalf("w1: %v, %v", c, err)
	}
	if n := listsOf(w, "baremetalhosts") - before; n != 0 {
		t.Errorf("a Refresh while watching listed BareMetalHosts %d times, want 0 (read from the informer)", n)
	}

	// The host's BMC moves: the informer sees it and asks for a refresh.
	u, err := w.dyn.Resource(metal3.BareMetalHosts).Namespace(m3ns).Get(ctx, "bmh-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(u.Object, "redfish://10.0.0.6/redfish/v1/Systems/1", "spec", "bmc", "address")
	if _, err := w.dyn.Resource(metal3.BareMetalHosts).Namespace(m3ns).Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.inv.kick:
	case <-time.After(10 * time.Second):
		t.Fatal("no refresh asked for 10s after the host changed")
	}
	w.inv.Refresh(ctx)
	if c, err := w.inv.Lookup("w1"); err != nil || c.Target.Key() != "redfish://10.0.0.6:443/1" {
		t.Errorf("w1 after the host moved: %v, %v; want redfish://10.0.0.6:443/1", c, err)
	}
}

// A watch that cannot start (the hosts cannot be listed) says why and
// leaves Refresh listing, as before.
func TestMetal3WatchFailsOverToListing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newMetal3Inventory(t, metal3Config(config.SourceMetal3),
		listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")},
		[]*corev1.Secret{m3Secret("bmh-1-bmc")}, bmh("bmh-1", "redfish://10.0.0.5"))
	forbidden := errors.New(`baremetalhosts.metal3.io is forbidden: User "system:serviceaccount:bmcfence-system:bmcfence-agent" cannot list resource "baremetalhosts"`)
	w.dyn.PrependReactor("list", "baremetalhosts", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, forbidden })
	err := w.inv.WatchMetal3(ctx, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "listing BareMetalHosts in metal3 (this cluster)") {
		t.Fatalf("WatchMetal3: %v, want the listing's error", err)
	}
	if _, err := w.inv.watched(); err == nil {
		t.Error("watching after a failed start")
	}
}

func kubeconfigSecret(name string, kubeconfig string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{config.KubeconfigKey: []byte(kubeconfig)}}
}

const tokenKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: mgmt, cluster: {server: "https://mgmt.example.com:6443", insecure-skip-tls-verify: true}}]
users: [{name: reader, user: {token: "s3cr3t-t0ken"}}]
contexts: [{name: mgmt, context: {cluster: mgmt, user: reader}}]
current-context: mgmt
`

// The management cluster's kubeconfig comes from a Secret; each way it can
// be unusable is one line that says what to do, and never shows the
// kubeconfig's credentials.
func TestManagementClients(t *testing.T) {
	tests := []struct {
		name    string
		secret  *corev1.Secret
		want    string // "" means it works
		wantErr string
	}{
		{name: "a token kubeconfig", secret: kubeconfigSecret("mgmt", tokenKubeconfig), want: "the management cluster https://mgmt.example.com:6443 (kubeconfig Secret bmcfence-system/mgmt)"},
		{name: "no Secret", wantErr: "Secret bmcfence-system/mgmt not found (create it: kubectl -n bmcfence-system create secret generic mgmt --from-file=kubeconfig=./management.kubeconfig)"},
		{name: "another key", secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mgmt"}, Data: map[string][]byte{"value": []byte(tokenKubeconfig)}},
			wantErr: `Secret bmcfence-system/mgmt has no key "kubeconfig" (keys: [value])`},
		{name: "not a kubeconfig", secret: kubeconfigSecret("mgmt", "{{{"), wantErr: `key "kubeconfig" is not a kubeconfig`},
		{name: "an exec plugin", secret: kubeconfigSecret("mgmt", strings.Replace(tokenKubeconfig, `{token: "s3cr3t-t0ken"}`, `{exec: {apiVersion: client.authentication.k8s.io/v1, command: aws, args: [eks, get-token]}}`, 1)),
			wantErr: `the kubeconfig's user "reader" runs a credential plugin (exec or auth-provider), which the agent cannot run`},
		{name: "a file it points at", secret: kubeconfigSecret("mgmt", strings.Replace(tokenKubeconfig, `{token: "s3cr3t-t0ken"}`, `{client-certificate: /home/me/.kube/me.crt, client-key: /home/me/.kube/me.key}`, 1)),
			wantErr: "kubectl config view --minify --flatten"},
		// client-go authenticates with a server URL's user info; the
		// cluster's name for logs, errors, validate and every Metal3 node's
		// Controller.Source would show the password.
		{name: "a password in the server URL", secret: kubeconfigSecret("mgmt", strings.Replace(tokenKubeconfig, "https://mgmt.example.com:6443", "https://reader:s3cr3t-pw@mgmt.example.com:6443", 1)),
			wantErr: "the kubeconfig's server URL (https://mgmt.example.com:6443) carries a user name or password: remove it"},
		{name: "a path in the server URL is not named", secret: kubeconfigSecret("mgmt", strings.Replace(tokenKubeconfig, "https://mgmt.example.com:6443", "https://mgmt.example.com:6443/k8s/clusters/c-1?x=y", 1)),
			want: "the management cluster https://mgmt.example.com:6443 (kubeconfig Secret bmcfence-system/mgmt)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tt.secret != nil {
				if _, err := client.CoreV1().Secrets(ns).Create(context.Background(), tt.secret, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			dyn, core, where, err := ManagementClients(context.Background(), clientgo.Wrap(client), ns, "mgmt")
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrManagementKubeconfig) || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err %v, want one line wrapping ErrManagementKubeconfig containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "s3cr3t") {
					t.Errorf("the error shows the token: %v", err)
				}
				return
			}
			if err != nil || dyn == nil || core == nil || where != tt.want {
				t.Fatalf("ManagementClients = %v, %v, %q, %v; want clients of %q", dyn, core, where, err, tt.want)
			}
		})
	}
}

// What `fence-agent validate` says about the hosts: each problem once, by
// host or node; a host tied to no node and one being provisioned are
// warnings.
func TestCheckMetal3(t *testing.T) {
	client := fake.NewClientset(m3Secret("bmh-1-bmc"), m3Secret("bmh-4-bmc"))
	dyn := newDynamic(
		bmh("bmh-1", "redfish://10.0.0.5/redfish/v1/Systems/1"),
		bmh("bmh-2", "ilo5://10.0.0.6"),
		bmh("bmh-3", "ipmi://10.0.0.7"),
		bmh("bmh-4", "ipmi://10.0.0.8", withState("provisioning")),
	)
	nodes := []corev1.Node{
		*nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1"),
		*nodeWithProviderID("w4", "metal3://metal3/bmh-4/m3m-4"),
		*nodeWithProviderID("w9", "metal3://metal3/bmh-9/m3m-9"),
	}
	summary, findings, err := CheckMetal3(context.Background(), Options{Config: metal3Config(config.SourceMetal3), Namespace: ns, Client: clientgo.Wrap(client), Dynamic: dyn}, nodes)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range findings {
		kind := "warning"
		if f.Problem {
			kind = "problem"
		}
		got = append(got, kind+" "+f.String())
	}
	want := []string{
		`problem BareMetalHost metal3/bmh-2: spec.bmc.address "ilo5://10.0.0.6": BMC address scheme not supported by bmcfence: scheme "ilo5" is iLO 5 through HPE's proliantutils, not Redfish directly (Ironic's ilo5 hardware type; dropped by the baremetal-operator in v0.12.0), which bmcfence does not speak (it speaks Redfish and IPMI); iLO 5 serves standard Redfish on the same address: set spec.bmc.address to ilo5-redfish://10.0.0.6`,
		`problem BareMetalHost metal3/bmh-2: credentials Secret metal3/bmh-2-bmc not found (in this cluster; keys: username, password)`,
		`warning BareMetalHost metal3/bmh-2: no Node is tied to it (no Node's spec.providerID is metal3://metal3/bmh-2/… or metal3://uid-bmh-2, and no spec.consumerRef → Metal3Machine → Machine with status.nodeRef): it fences nothing until one is`,
		`problem BareMetalHost metal3/bmh-3: credentials Secret metal3/bmh-3-bmc not found (in this cluster; keys: username, password)`,
		`warning BareMetalHost metal3/bmh-3: no Node is tied to it (no Node's spec.providerID is metal3://metal3/bmh-3/… or metal3://uid-bmh-3, and no spec.consumerRef → Metal3Machine → Machine with status.nodeRef): it fences nothing until one is`,
		`warning BareMetalHost metal3/bmh-4: tied to node w4 (providerID metal3://metal3/bmh-4/m3m-4), but the baremetal-operator is operating this host's power: BareMetalHost metal3/bmh-4 is in provisioning state "provisioning" (bmcfence fences provisioned or externally provisioned hosts only)`,
		`problem node w9: no single BareMetalHost for this node: providerID "metal3://metal3/bmh-9/m3m-9" names no BareMetalHost in inventory.metal3.namespaces`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	if want := "4 BareMetalHosts in metal3 (this cluster), 2 tied to nodes"; summary != want {
		t.Errorf("summary %q, want %q", summary, want)
	}
}
