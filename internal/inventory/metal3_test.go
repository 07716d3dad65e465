package inventory

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory/metal3"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

const m3ns = "metal3"

// listedNodes is a NodeSource that can also list, as the cluster view does.
type listedNodes map[string]*corev1.Node

func (n listedNodes) NodeObject(name string) (*corev1.Node, bool) { o, ok := n[name]; return o, ok }

func (n listedNodes) Nodes() []runner.NodeInfo {
	var out []runner.NodeInfo
	for name := range n {
		out = append(out, runner.NodeInfo{Name: name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func nodeWithProviderID(name, providerID string) *corev1.Node {
	n := node(name, "uuid-"+name, nil)
	n.Spec.ProviderID = providerID
	return n
}

// bmh builds a BareMetalHost as the API server would return it.
func bmh(name, address string, opts ...func(map[string]any)) *unstructured.Unstructured {
	obj := map[string]any{
		"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
		"metadata": map[string]any{"namespace": m3ns, "name": name, "uid": "uid-" + name},
		"spec": map[string]any{
			"online": true,
			"bmc":    map[string]any{"address": address, "credentialsName": name + "-bmc"},
		},
		"status": map[string]any{"provisioning": map[string]any{"state": "provisioned"}},
	}
	for _, o := range opts {
		o(obj)
	}
	return &unstructured.Unstructured{Object: obj}
}

func withState(state string) func(map[string]any) {
	return func(o map[string]any) {
		_ = unstructured.SetNestedField(o, state, "status", "provisioning", "state")
	}
}

func withOnline(on bool) func(map[string]any) {
	return func(o map[string]any) { _ = unstructured.SetNestedField(o, on, "spec", "online") }
}

func withAnnotation(k, v string) func(map[string]any) {
	return func(o map[string]any) { _ = unstructured.SetNestedField(o, v, "metadata", "annotations", k) }
}

func withInsecure() func(map[string]any) {
	return func(o map[string]any) {
		_ = unstructured.SetNestedField(o, true, "spec", "bmc", "disableCertificateVerification")
	}
}

func m3Secret(name string) *corev1.Secret {
	s := secret(name, "admin-"+name, "pw-"+name)
	s.Namespace = m3ns
	return s
}

func newDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		metal3.BareMetalHosts: "BareMetalHostList",
		metal3.Metal3Machines: "Metal3MachineList",
		metal3.Machines:       "MachineList",
	}, objs...)
}

// byKey keeps the fake BMC built for each target.
type byKey map[string]*bmctest.Fake

func (b byKey) build(t bmc.Target) (bmc.Controller, error) {
	f := bmctest.New(clocktesting.NewFakeClock(time.Now()), bmctest.WithPower(true))
	b[t.Key()] = f
	return f, nil
}

type metal3World struct {
	inv  *Inventory
	dyn  *dynamicfake.FakeDynamicClient
	bmcs byKey
}

func newMetal3Inventory(t *testing.T, cfg config.Inventory, nodeSource listedNodes, secrets []*corev1.Secret, hosts ...runtime.Object) metal3World {
	t.Helper()
	client := fake.NewClientset()
	for _, s := range secrets {
		if _, err := client.CoreV1().Secrets(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w := metal3World{dyn: newDynamic(hosts...), bmcs: byKey{}}
	w.inv = New(Options{Config: cfg, Namespace: ns, Timeout: 3 * time.Second, Client: clientgo.Wrap(client), Dynamic: w.dyn, NewController: w.bmcs.build, Nodes: nodeSource})
	w.inv.Refresh(context.Background())
	return w
}

func metal3Config(source string) config.Inventory {
	return config.Inventory{Source: source, Metal3: config.Metal3{Namespaces: []string{m3ns}}, Defaults: config.BMCSettings{CredentialsSecret: "shared"}}
}

func TestMetal3Entries(t *testing.T) {
	type entryView struct {
		Target   string
		User     string
		Insecure bool
		Source   string
	}
	tests := []struct {
		name     string
		cfg      config.Inventory
		nodes    listedNodes
		hosts    []runtime.Object
		secrets  []*corev1.Secret
		want     map[string]entryView
		problems map[string]error // node → the sentinel its problem wraps (nil: any)
		hostErr  []string         // hosts reported unusable
	}{
		{
			name:    "redfish host with a system path, matched by providerID",
			cfg:     metal3Config(config.SourceMetal3),
			nodes:   listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")},
			hosts:   []runtime.Object{bmh("bmh-1", "redfish://10.0.0.5/redfish/v1/Systems/1")},
			secrets: []*corev1.Secret{m3Secret("bmh-1-bmc")},
			want: map[string]entryView{"w1": {Target: "redfish://10.0.0.5:443/1", User: "admin-bmh-1-bmc",
				Source: "BareMetalHost metal3/bmh-1 (providerID metal3://metal3/bmh-1/m3m-1)"}},
		},
		{
			name:    "disableCertificateVerification is insecureSkipVerify",
			cfg:     metal3Config(config.SourceMetal3),
			nodes:   listedNodes{"w1": nodeWithProviderID("w1", "metal3://uid-bmh-1")},
			hosts:   []runtime.Object{bmh("bmh-1", "idrac-virtualmedia://[fd00::5]:8443", withInsecure())},
			secrets: []*corev1.Secret{m3Secret("bmh-1-bmc")},
			want: map[string]entryView{"w1": {Target: "redfish://[fd00::5]:8443", User: "admin-bmh-1-bmc", Insecure: true,
				Source: "BareMetalHost metal3/bmh-1 (providerID metal3://uid-bmh-1)"}},
		},
		{
			name:    "ipmi host",
			cfg:     metal3Config(config.SourceMetal3),
			nodes:   listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")},
			hosts:   []runtime.Object{bmh("bmh-1", "10.0.0.8:6230")},
			secrets: []*corev1.Secret{m3Secret("bmh-1-bmc")},
			want: map[string]entryView{"w1": {Target: "ipmi://10.0.0.8:6230", User: "admin-bmh-1-bmc",
				Source: "BareMetalHost metal3/bmh-1 (providerID metal3://metal3/bmh-1/m3m-1)"}},
		},
		{
			name:     "unsupported scheme: reported for the node and the host",
			cfg:      metal3Config(config.SourceMetal3),
			nodes:    listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")},
			hosts:    []runtime.Object{bmh("bmh-1", "idrac://10.0.0.6"), bmh("bmh-2", "ilo4://10.0.0.7")},
			secrets:  []*corev1.Secret{m3Secret("bmh-1-bmc")},
			problems: map[string]error{"w1": metal3.ErrUnsupportedScheme},
			hostErr:  []string{"metal3/bmh-1", "metal3/bmh-2"},
		},
		{
			name:    "an iRMC host is powered through IPMI at its address, as the baremetal-operator does",
			cfg:     metal3Config(config.SourceMetal3),
			nodes:   listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")},
			hosts:   []runtime.Object{bmh("bmh-1", "irmc://10.0.0.7:443")},
			secrets: []*corev1.Secret{m3Secret("bmh-1-bmc")},
			want: map[string]entryView{"w1": {Target: "ipmi://10.0.0.7:623", User: "admin-bmh-1-bmc",
				Source: "BareMetalHost metal3/bmh-1 (providerID metal3://metal3/bmh-1/m3m-1; irmc:// is Fujitsu iRMC: the baremetal-operator's irmc driver powers the host through IPMI at the iRMC's address (Ironic's ipmitool power interface), and so does bmcfence (ipmi://10.0.0.7))"}},
		},
		{
			name:     "a host the operator is provisioning is not fenced",
			cfg:      metal3Config(config.SourceMetal3),
			nodes:    listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")},
			hosts:    []runtime.Object{bmh("bmh-1", "redfish://10.0.0.5", withState("deprovisioning"))},
			secrets:  []*corev1.Secret{m3Secret("bmh-1-bmc")},
			problems: map[string]error{"w1": metal3.ErrBusy},
		},
		{
			name:     "credentials Secret missing in the host's namespace",
			cfg:      metal3Config(config.SourceMetal3),
			nodes:    listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")},
			hosts:    []runtime.Object{bmh("bmh-1", "redfish://10.0.0.5")},
			problems: map[string]error{"w1": nil},
		},
		{
			name: "source both: the file's entry wins",
			cfg: func() config.Inventory {
				c := metal3Config(config.SourceBoth)
				c.Nodes = []config.NodeBMC{{Name: "w1", Address: "https://10.0.0.99", System: "9"}}
				return c
			}(),
			nodes:   listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1"), "w2": nodeWithProviderID("w2", "metal3://metal3/bmh-2/m3m-2")},
			hosts:   []runtime.Object{bmh("bmh-1", "redfish://10.0.0.5"), bmh("bmh-2", "redfish://10.0.0.6")},
			secrets: []*corev1.Secret{m3Secret("bmh-1-bmc"), m3Secret("bmh-2-bmc"), secret("shared", "file-user", "file-pw")},
			want: map[string]entryView{
				"w1": {Target: "redfish://10.0.0.99:443/9", User: "file-user"},
				"w2": {Target: "redfish://10.0.0.6:443", User: "admin-bmh-2-bmc", Source: "BareMetalHost metal3/bmh-2 (providerID metal3://metal3/bmh-2/m3m-2)"},
			},
		},
		{
			name: "source both: a host and a file entry on one BMC are both refused",
			cfg: func() config.Inventory {
				c := metal3Config(config.SourceBoth)
				c.Nodes = []config.NodeBMC{{Name: "w1", Address: "https://10.0.0.5"}}
				return c
			}(),
			nodes:    listedNodes{"w1": node("w1", "uuid-w1", nil), "w2": nodeWithProviderID("w2", "metal3://metal3/bmh-2/m3m-2")},
			hosts:    []runtime.Object{bmh("bmh-2", "redfish://10.0.0.5")},
			secrets:  []*corev1.Secret{m3Secret("bmh-2-bmc"), secret("shared", "u", "p")},
			problems: map[string]error{"w1": nil, "w2": nil},
		},
		{
			name:    "source configmap ignores hosts",
			cfg:     config.Inventory{Source: config.SourceConfigMap, Defaults: config.BMCSettings{CredentialsSecret: "shared"}},
			nodes:   listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")},
			hosts:   []runtime.Object{bmh("bmh-1", "redfish://10.0.0.5")},
			secrets: []*corev1.Secret{m3Secret("bmh-1-bmc")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newMetal3Inventory(t, tt.cfg, tt.nodes, tt.secrets, tt.hosts...)
			got := map[string]entryView{}
			for _, name := range w.inv.Names() {
				c, _ := w.inv.Lookup(name)
				got[name] = entryView{Target: c.Target.Key(), User: c.Target.Credentials.Username, Insecure: c.Target.InsecureSkipVerify, Source: c.Source}
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			problems := w.inv.Problems()
			if len(problems) != len(tt.problems) {
				t.Errorf("problems = %v, want nodes %v", problems, tt.problems)
			}
			for node, want := range tt.problems {
				err := problems[node]
				if err == nil {
					t.Errorf("node %s: no problem reported", node)
					continue
				}
				if want != nil && !errors.Is(err, want) {
					t.Errorf("node %s: %v does not wrap %v", node, err, want)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("node %s: problem %q is not one line", node, err)
				}
			}
			var hostErr []string
			for k := range w.inv.HostProblems() {
				hostErr = append(hostErr, k)
			}
			sort.Strings(hostErr)
			if diff := cmp.Diff(tt.hostErr, hostErr, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("hosts reported (-want +got):\n%s", diff)
			}
		})
	}
}

// holdAnnotation reads our annotation on a host ("" if absent).
func holdAnnotation(t *testing.T, w metal3World, name string) (string, bool) {
	t.Helper()
	u, err := w.dyn.Resource(metal3.BareMetalHosts).Namespace(m3ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, ok := u.GetAnnotations()[metal3.HoldAnnotation]
	return v, ok
}

func TestMetal3PowerHold(t *testing.T) {
	tests := []struct {
		name string
		host *unstructured.Unstructured
		// power is the command sent through the inventory's controller.
		off bool
		// wantErr is the sentinel the command's error wraps (nil: none).
		wantErr error
		// wantHeld is whether our annotation is on afterwards.
		wantHeld bool
		// wantBMC is how many power commands reached the BMC.
		wantBMC int
	}{
		{name: "ForceOff: the hold is written first", host: bmh("bmh-1", "redfish://10.0.0.5"), off: true, wantHeld: true, wantBMC: 1},
		{name: "ForceOff on a host we already hold", host: bmh("bmh-1", "redfish://10.0.0.5", withAnnotation(metal3.HoldAnnotation, metal3.HoldValue)), off: true, wantHeld: true, wantBMC: 1},
		{name: "ForceOff with someone else's hold too: both want it off", host: bmh("bmh-1", "redfish://10.0.0.5", withAnnotation("reboot.metal3.io/capm3-remediation-x", `{"mode":"hard"}`)), off: true, wantHeld: true, wantBMC: 1},
		{name: "power-on releases our hold first", host: bmh("bmh-1", "redfish://10.0.0.5", withAnnotation(metal3.HoldAnnotation, metal3.HoldValue)), wantHeld: false, wantBMC: 1},
		{name: "no power-on while spec.online is false", host: bmh("bmh-1", "redfish://10.0.0.5", withOnline(false), withAnnotation(metal3.HoldAnnotation, metal3.HoldValue)), wantErr: ErrPowerHeld, wantHeld: true, wantBMC: 0},
		{name: "no power-on while someone else holds it off", host: bmh("bmh-1", "redfish://10.0.0.5", withAnnotation(metal3.HoldAnnotation, metal3.HoldValue), withAnnotation("reboot.metal3.io", "")), wantErr: ErrPowerHeld, wantHeld: true, wantBMC: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newMetal3Inventory(t, metal3Config(config.SourceMetal3),
				listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")},
				[]*corev1.Secret{m3Secret("bmh-1-bmc")}, tt.host)
			c, err := w.inv.Lookup("w1")
			if err != nil {
				t.Fatal(err)
			}
			op := bmc.OpPowerOn
			if tt.off {
				op = bmc.OpPowerOff
				_, err = c.PowerOff(context.Background())
			} else {
				_, err = c.PowerOn(context.Background())
			}
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("error = %v, want one wrapping %v", err, tt.wantErr)
			}
			if _, held := holdAnnotation(t, w, "bmh-1"); held != tt.wantHeld {
				t.Errorf("our hold on = %v, want %v", held, tt.wantHeld)
			}
			if n := w.bmcs[c.Target.Key()].Count(op); n != tt.wantBMC {
				t.Errorf("%s sent to the BMC %d times, want %d", op, n, tt.wantBMC)
			}
		})
	}
}

// A hold that cannot be written stops the ForceOff: the operator would
// power the host back on under the fence.
func TestMetal3HoldFailureSendsNoForceOff(t *testing.T) {
	w := newMetal3Inventory(t, metal3Config(config.SourceMetal3),
		listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")},
		[]*corev1.Secret{m3Secret("bmh-1-bmc")}, bmh("bmh-1", "redfish://10.0.0.5"))
	c, err := w.inv.Lookup("w1")
	if err != nil {
		t.Fatal(err)
	}
	// The host is re-created (another UID) between the listing and the fence.
	if err := w.dyn.Resource(metal3.BareMetalHosts).Namespace(m3ns).Delete(context.Background(), "bmh-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := bmh("bmh-1", "redfish://10.0.0.5")
	again.SetUID("uid-new")
	if _, err := w.dyn.Resource(metal3.BareMetalHosts).Namespace(m3ns).Create(context.Background(), again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PowerOff(context.Background()); !errors.Is(err, ErrPowerHeld) {
		t.Errorf("PowerOff = %v, want ErrPowerHeld", err)
	}
	if n := w.bmcs[c.Target.Key()].Count(bmc.OpPowerOff); n != 0 {
		t.Errorf("ForceOff sent %d times without a hold", n)
	}
}

// An API blip while listing BareMetalHosts keeps the last listing: a
// failed list must not drop every node's BMC (and a fence in progress).
func TestMetal3ListingErrorKeepsTheLastListing(t *testing.T) {
	w := newMetal3Inventory(t, metal3Config(config.SourceMetal3),
		listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")},
		[]*corev1.Secret{m3Secret("bmh-1-bmc")}, bmh("bmh-1", "redfish://10.0.0.5"))
	before, err := w.inv.Lookup("w1")
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	w.dyn.PrependReactor("list", "baremetalhosts", func(k8stesting.Action) (bool, runtime.Object, error) {
		failed++
		return true, nil, errors.New("etcdserver: request timed out")
	})
	w.inv.Refresh(context.Background())
	if failed == 0 {
		t.Fatal("the listing did not fail: the test tests nothing")
	}
	after, err := w.inv.Lookup("w1")
	if err != nil {
		t.Fatalf("after a failed listing: %v", err)
	}
	if after != before {
		t.Error("the controller was rebuilt from a failed listing")
	}
}

// An unusable host is told on the host itself, once per problem, whether
// or not a node is tied to it yet.
func TestMetal3HostEvents(t *testing.T) {
	client := fake.NewClientset()
	var got []string
	inv := New(Options{
		Config: metal3Config(config.SourceMetal3), Namespace: ns, Client: clientgo.Wrap(client), NewController: byKey{}.build,
		Dynamic: newDynamic(bmh("bmh-1", "idrac://10.0.0.6"), bmh("bmh-2", "redfish://10.0.0.7/foo"), bmh("bmh-3", "redfish://10.0.0.8")),
		Nodes:   listedNodes{},
		HostEvent: func(ref *corev1.ObjectReference, reason, message string) {
			got = append(got, ref.Kind+" "+ref.Namespace+"/"+ref.Name+" "+string(ref.UID)+" "+reason)
		},
	})
	inv.Refresh(context.Background())
	inv.Refresh(context.Background())
	sort.Strings(got)
	want := []string{
		"BareMetalHost metal3/bmh-1 uid-bmh-1 FenceUnsupportedBMC",
		"BareMetalHost metal3/bmh-2 uid-bmh-2 FenceHostUnusable",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Events on hosts over two refreshes (-want +got):\n%s", diff)
	}
}

// Issue 17, defect 7, at run time: a node's merged policy is validated
// whenever the inventory builds its entry, not only at load. A node from a
// BareMetalHost takes inventory.defaults' windows; here they would let an Off
// we did not cause settle inside an off-dwell (a configuration that skipped
// the load's check, as a source with windows of its own could): the node is
// unfenceable, and the reason names the field and the fix.
func TestMergedPolicyOfABareMetalHostNodeIsValidated(t *testing.T) {
	cfg := metal3Config(config.SourceMetal3)
	cfg.Defaults.SettleWindow = 90 * time.Second
	w := newMetal3Inventory(t, cfg, listedNodes{"w1": nodeWithProviderID("w1", "metal3://metal3/bmh-1/m3m-1")},
		[]*corev1.Secret{m3Secret("bmh-1-bmc")}, bmh("bmh-1", "redfish://10.0.0.5/redfish/v1/Systems/1"))
	_, err := w.inv.Lookup("w1")
	if !errors.Is(err, fence.ErrSettleInsideDwell) || !strings.Contains(err.Error(), "node w1 (BareMetalHost metal3/bmh-1): inventory.defaults.settleWindow = 1m30s: not shorter than policy.unassistedSettleWindow = 1m0s") {
		t.Errorf("Lookup(w1) = %v; want it unfenceable, naming inventory.defaults.settleWindow", err)
	}
	if _, ok := w.inv.Controller("w1"); ok {
		t.Error("w1 has a controller: the runner would fence it under the unchecked merged policy")
	}
}
