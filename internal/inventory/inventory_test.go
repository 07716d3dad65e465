package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

const ns = "bmcfence-system"

func secret(name, user, pass string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string][]byte{"username": []byte(user), "password": []byte(pass)}}
}

// nodes is a NodeSource over fixed Node objects.
type nodes map[string]*corev1.Node

func (n nodes) NodeObject(name string) (*corev1.Node, bool) { o, ok := n[name]; return o, ok }

func node(name, uuid string, annotations map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{SystemUUID: uuid}}}
}

// fakes records the targets built and returns in-memory BMCs.
type fakes struct {
	targets []bmc.Target
	byNode  map[string]*bmctest.Fake
}

func (f *fakes) build(t bmc.Target) (bmc.Controller, error) {
	f.targets = append(f.targets, t)
	c := bmctest.New(clocktesting.NewFakeClock(time.Now()), bmctest.WithIdentity(bmc.Identity{UUID: "uuid-" + t.System}))
	return c, nil
}

func newInventory(t *testing.T, cfg config.Inventory, objs ...any) (*Inventory, *fakes, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset()
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Secret:
			if _, err := client.CoreV1().Secrets(ns).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case *corev1.ConfigMap:
			if _, err := client.CoreV1().ConfigMaps(ns).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := &fakes{}
	inv := New(Options{Config: cfg, Namespace: ns, Timeout: 3 * time.Second, Client: clientgo.Wrap(client), NewController: f.build,
		Nodes: nodes{"w1": node("w1", "uuid-1", nil), "w2": node("w2", "uuid-OTHER", nil)}})
	inv.Refresh(context.Background())
	return inv, f, client
}

func TestRefreshResolvesCredentialsAndCA(t *testing.T) {
	cfg := config.Inventory{
		Defaults: config.BMCSettings{CredentialsSecret: "shared", CAConfigMap: "bmc-ca"},
		Nodes: []config.NodeBMC{
			{Name: "w1", Address: "https://10.0.0.1", System: "1"},
			{Name: "w2", Address: "ipmi://10.0.0.2", BMCSettings: config.BMCSettings{CredentialsSecret: "w2"}},
		},
	}
	ca := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bmc-ca", Namespace: ns}, Data: map[string]string{"ca.crt": "-----BEGIN CERTIFICATE-----"}}
	inv, f, _ := newInventory(t, cfg, secret("shared", "admin", "pw-shared\n"), secret("w2", "root", "pw-w2"), ca)
	if p := inv.Problems(); len(p) != 0 {
		t.Fatalf("problems: %v", p)
	}
	if len(f.targets) != 2 {
		t.Fatalf("built %d targets, want 2", len(f.targets))
	}
	for _, tg := range f.targets {
		switch tg.Address.Host {
		case "10.0.0.1":
			if tg.Credentials.Username != "admin" || tg.Credentials.Password.Reveal() != "pw-shared" || len(tg.CACertificates) == 0 || tg.Timeout != 3*time.Second {
				t.Errorf("w1 target = %+v", tg)
			}
		case "10.0.0.2":
			if tg.Credentials.Username != "root" || tg.Credentials.Password.Reveal() != "pw-w2" || len(tg.CACertificates) != 0 {
				t.Errorf("w2 target = %+v (IPMI takes no CA)", tg)
			}
		}
	}
	if _, ok := inv.Controller("w1"); !ok {
		t.Error("no controller for w1")
	}
	if _, ok := inv.Controller("w9"); ok {
		t.Error("a controller for a node not in the inventory")
	}
}

func TestUnusableEntriesAreProblemsNotGuesses(t *testing.T) {
	cfg := config.Inventory{Nodes: []config.NodeBMC{
		{Name: "w1", Address: "https://10.0.0.1", BMCSettings: config.BMCSettings{CredentialsSecret: "missing"}},
		{Name: "w2", Address: "https://10.0.0.2", BMCSettings: config.BMCSettings{CredentialsSecret: "empty"}},
	}}
	inv, _, _ := newInventory(t, cfg, secret("empty", "", ""))
	p := inv.Problems()
	if !strings.Contains(p["w1"].Error(), "Secret bmcfence-system/missing not found") {
		t.Errorf("w1: %v", p["w1"])
	}
	if !strings.Contains(p["w2"].Error(), "needs non-empty keys username and password") {
		t.Errorf("w2: %v", p["w2"])
	}
	if _, ok := inv.Controller("w1"); ok {
		t.Error("a controller despite a missing Secret")
	}
}

func TestRotatedPasswordRebuildsTheController(t *testing.T) {
	cfg := config.Inventory{Defaults: config.BMCSettings{CredentialsSecret: "shared"}, Nodes: []config.NodeBMC{{Name: "w1", Address: "https://10.0.0.1"}}}
	inv, f, client := newInventory(t, cfg, secret("shared", "admin", "old"))
	inv.Refresh(context.Background())
	if len(f.targets) != 1 {
		t.Fatalf("an unchanged entry was rebuilt: %d builds", len(f.targets))
	}
	if _, err := client.CoreV1().Secrets(ns).Update(context.Background(), secret("shared", "admin", "new"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	inv.Refresh(context.Background())
	if len(f.targets) != 2 || f.targets[1].Credentials.Password.Reveal() != "new" {
		t.Fatalf("after rotation: %d builds", len(f.targets))
	}
}

func TestAnnotationsOnlyWhenEnabled(t *testing.T) {
	annotated := node("w3", "", map[string]string{cluster.AnnotationBMCAddress: "https://10.0.0.3", cluster.AnnotationBMCCredentials: "shared"})
	for _, enabled := range []bool{false, true} {
		client := fake.NewClientset(secret("shared", "admin", "pw"))
		src := sourceWithList{nodes: nodes{"w3": annotated}}
		f := &fakes{}
		inv := New(Options{Config: config.Inventory{FromAnnotations: enabled}, Namespace: ns, Timeout: time.Second, Client: clientgo.Wrap(client), Nodes: src, NewController: f.build})
		inv.Refresh(context.Background())
		if _, ok := inv.Controller("w3"); ok != enabled {
			t.Errorf("fromAnnotations=%v: controller for an annotated node = %v", enabled, ok)
		}
	}
}

// sourceWithList also lists its nodes, as the cluster view does.
type sourceWithList struct{ nodes }

func (s sourceWithList) Nodes() []runner.NodeInfo {
	var out []runner.NodeInfo
	for name := range s.nodes {
		out = append(out, runner.NodeInfo{Name: name})
	}
	return out
}

func TestVerifyComparesTheNodesSystemUUID(t *testing.T) {
	cfg := config.Inventory{Defaults: config.BMCSettings{CredentialsSecret: "shared"}, Nodes: []config.NodeBMC{
		{Name: "w1", Address: "https://10.0.0.1", System: "1"},
		{Name: "w2", Address: "https://10.0.0.2", System: "2"},
		{Name: "w3", Address: "https://10.0.0.3", System: "3", ExpectedUUID: "UUID-3"},
	}}
	inv, _, _ := newInventory(t, cfg, secret("shared", "admin", "pw"))
	ctx := context.Background()
	for node, wantErr := range map[string]bool{"w1": false, "w2": true, "w3": false} {
		c, err := inv.Lookup(node)
		if err != nil {
			t.Fatal(err)
		}
		err = c.Verify(ctx)
		if (err != nil) != wantErr || (err != nil && !errors.Is(err, ErrIdentity)) {
			t.Errorf("%s: Verify = %v, want error %v", node, err, wantErr)
		}
	}
}

// Why 3 (issue "Safety…"): a node without systemUUID passed the identity
// check, and IPMI had none at all. What cannot be compared is unverified,
// and unfenceable unless the entry vouches for it.
func TestVerifyRefusesWhatItCannotCompare(t *testing.T) {
	cfg := config.Inventory{Defaults: config.BMCSettings{CredentialsSecret: "shared"}, Nodes: []config.NodeBMC{
		{Name: "w4", Address: "https://10.0.0.4", System: "4"},                                // no systemUUID, no expectedUUID
		{Name: "w5", Address: "https://10.0.0.5", System: "5", AllowUnverifiedIdentity: true}, // vouched for
	}}
	inv, _, _ := newInventory(t, cfg, secret("shared", "admin", "pw"))
	for node, want := range map[string]error{"w4": ErrUnverified, "w5": nil} {
		c, err := inv.Lookup(node)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Verify(context.Background()); !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("%s: Verify = %v, want %v", node, err, want)
		}
	}
}

// Why 3: two nodes on one BMC loaded without complaint, here through
// annotations the file does not see.
func TestTwoNodesOnOneBMCAreBothRefused(t *testing.T) {
	cfg := config.Inventory{FromAnnotations: true, Defaults: config.BMCSettings{CredentialsSecret: "shared"}, Nodes: []config.NodeBMC{
		{Name: "w1", Address: "https://BMC.example", System: "1"},
	}}
	src := sourceWithList{nodes: nodes{
		"w2": node("w2", "uuid-2", map[string]string{cluster.AnnotationBMCAddress: "https://bmc.example:443", cluster.AnnotationBMCSystem: "1"}),
	}}
	client := fake.NewClientset(secret("shared", "admin", "pw"))
	f := &fakes{}
	inv := New(Options{Config: cfg, Namespace: ns, Timeout: time.Second, Client: clientgo.Wrap(client), NewController: f.build, Nodes: src})
	inv.Refresh(context.Background())
	for node, other := range map[string]string{"w1": "w2", "w2": "w1"} {
		if _, err := inv.Lookup(node); err == nil || !strings.Contains(err.Error(), "node "+other) {
			t.Errorf("%s: Lookup = %v, want a refusal naming %s", node, err, other)
		}
	}
}

// echoing is a BMC whose error bodies echo the login.
type echoing struct{ *bmctest.Fake }

func (echoing) PowerStatus(context.Context) (bmc.PowerStatus, error) {
	return bmc.PowerStatus{}, fmt.Errorf("%w: HTTP 400: invalid request {\"UserName\":\"admin\",\"Password\":\"s3cr3t-pw\"}", bmc.ErrBMC)
}

// Why 7: a BMC error body that echoes the login put the password into the
// reading's failure, and from there into Events, logs and the annotation.
func TestBMCErrorsLeaveTheInventoryRedacted(t *testing.T) {
	cfg := config.Inventory{Defaults: config.BMCSettings{CredentialsSecret: "shared"}, Nodes: []config.NodeBMC{{Name: "w1", Address: "https://10.0.0.1", System: "1"}}}
	client := fake.NewClientset(secret("shared", "admin", "s3cr3t-pw"))
	inv := New(Options{Config: cfg, Namespace: ns, Timeout: time.Second, Client: clientgo.Wrap(client),
		NewController: func(bmc.Target) (bmc.Controller, error) {
			return echoing{bmctest.New(clocktesting.NewFakeClock(time.Now()))}, nil
		}})
	inv.Refresh(context.Background())
	c, err := inv.Lookup("w1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.PowerStatus(context.Background())
	if err == nil || strings.Contains(err.Error(), "s3cr3t-pw") || !errors.Is(err, bmc.ErrBMC) {
		t.Errorf("PowerStatus error = %v: want it redacted and still a bmc.ErrBMC", err)
	}
}

// An expectedUUID is for firmware that prints the Node's UUID byte-swapped.
// One that is neither the Node's systemUUID nor its swap is stale: the node
// was re-created on another machine under the old entry. Found by the
// randomized simulation (fault 5, a systemUUID changed mid-run).
func TestAStaleExpectedUUIDIsRefused(t *testing.T) {
	cfg := config.Inventory{Defaults: config.BMCSettings{CredentialsSecret: "shared"}, Nodes: []config.NodeBMC{
		// The BMC (the fake answers "uuid-1") agrees with the entry, but
		// the Node w2 now reports another machine's UUID.
		{Name: "w2", Address: "https://10.0.0.2", System: "1", ExpectedUUID: "uuid-1"},
	}}
	inv, _, _ := newInventory(t, cfg, secret("shared", "admin", "pw"))
	c, err := inv.Lookup("w2")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(context.Background()); !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), "stale") {
		t.Errorf("Verify = %v, want a stale expectedUUID refused", err)
	}
}

// With SecretMaxAge, a Secret read by one Refresh is not read again by the
// next (a thousand per-node Secrets were re-read every 30 s), and its age
// is spread within [max/2, max] by name.
func TestSecretMaxAgeKeepsSecretsBetweenRefreshes(t *testing.T) {
	cfg := config.Inventory{Defaults: config.BMCSettings{CredentialsSecret: "shared"}, Nodes: []config.NodeBMC{{Name: "w1", Address: "https://10.0.0.1"}}}
	inv, _, client := newInventory(t, cfg, secret("shared", "admin", "pw"))
	inv.opts.SecretMaxAge = 5 * time.Minute
	gets := func() int {
		k := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "secrets" {
				k++
			}
		}
		return k
	}
	inv.Refresh(context.Background()) // reads it (newInventory's ran without SecretMaxAge)
	before := gets()
	inv.Refresh(context.Background())
	if got := gets() - before; got != 0 {
		t.Errorf("%d Secret reads by the next Refresh, want 0", got)
	}
	for _, name := range []string{"a", "shared", "bmc-n0001"} {
		if d := secretAge(name, 5*time.Minute); d < 150*time.Second || d > 5*time.Minute {
			t.Errorf("secretAge(%q) = %s, want within [2m30s, 5m]", name, d)
		}
	}
}

// A BMC that rejects the credentials has its Secret read again at the next
// Refresh once the cached copy is rereadAfterRejection old: a rotated
// password is picked up within a refresh, not at the end of SecretMaxAge,
// and a BMC that keeps rejecting costs one read in rereadAfterRejection.
func TestRejectedCredentialsAreReadAgainAtTheNextRefresh(t *testing.T) {
	cfg := config.Inventory{Defaults: config.BMCSettings{CredentialsSecret: "shared"}, Nodes: []config.NodeBMC{{Name: "w1", Address: "https://10.0.0.1", System: "1"}}}
	inv, f, client := newInventory(t, cfg, secret("shared", "admin", "old-pw"))
	inv.opts.SecretMaxAge = time.Hour
	ctx := context.Background()
	inv.Refresh(ctx) // cached from here on
	if _, err := client.CoreV1().Secrets(ns).Update(ctx, secret("shared", "admin", "new-pw"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	inv.Refresh(ctx)
	if got := f.targets[len(f.targets)-1].Credentials.Password.Reveal(); got != "old-pw" {
		t.Fatalf("before any rejection: password %q, want the cached old-pw", got)
	}
	c, err := inv.Lookup("w1")
	if err != nil {
		t.Fatal(err)
	}
	fk := c.ctrl.(*bmctest.Fake)
	fk.Fail(fmt.Errorf("401: %w", bmc.ErrAuth), bmc.OpPowerStatus)
	reject := func() {
		t.Helper()
		if _, err := c.PowerStatus(ctx); !errors.Is(err, bmc.ErrAuth) {
			t.Fatalf("PowerStatus: %v, want ErrAuth", err)
		}
	}
	reject() // the cached copy was read just now: kept
	inv.Refresh(ctx)
	if got := f.targets[len(f.targets)-1].Credentials.Password.Reveal(); got != "old-pw" {
		t.Fatalf("a rejection right after the Secret was read: password %q, want the cached old-pw", got)
	}
	inv.cacheMu.Lock()
	for k, cs := range inv.cached {
		cs.read = cs.read.Add(-rereadAfterRejection)
		inv.cached[k] = cs
	}
	inv.cacheMu.Unlock()
	reject()
	inv.Refresh(ctx)
	if got := f.targets[len(f.targets)-1].Credentials.Password.Reveal(); got != "new-pw" {
		t.Errorf("after the BMC rejected the credentials: the controller was built with %q, want new-pw", got)
	}
}

// suiteBMC answers every operation as a session of a given IPMI cipher
// suite would.
type suiteBMC struct {
	bmc.Controller
	suite *int
}

func (s suiteBMC) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	st, err := s.Controller.PowerStatus(ctx)
	st.CipherSuite = *s.suite
	return st, err
}

func (s suiteBMC) Identity(ctx context.Context) (bmc.Identity, error) {
	id, err := s.Controller.Identity(ctx)
	id.CipherSuite = *s.suite
	return id, err
}

type fallbacks struct{ suites []int }

func (f *fallbacks) BMC(bmc.Protocol, string, bmc.Op, time.Duration, error) {}
func (f *fallbacks) CipherSuiteFallback(suite int)                          { f.suites = append(f.suites, suite) }

// A session that fell back to the entry's cipherSuiteFallback (the BMC
// refused cipherSuite) is invisible in readings: the agent logs it and
// counts it, once per BMC and change of suite.
func TestCipherSuiteFallbackIsLoggedAndCountedOncePerChange(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	obs := &fallbacks{}
	suite := 3
	ep, err := bmc.ParseAddress("ipmi://10.0.0.7")
	if err != nil {
		t.Fatal(err)
	}
	c := &Controller{Node: "w1", Target: bmc.Target{Address: ep, IPMICipherSuite: 17, IPMICipherSuiteFallback: 3},
		ctrl: suiteBMC{Controller: bmctest.New(clocktesting.NewFakeClock(time.Now())), suite: &suite}, obs: obs, log: zap.New(core)}
	ctx := context.Background()
	for range 3 { // the BMC refuses 17: every session is suite 3
		_, _ = c.PowerStatus(ctx)
		_, _ = c.Identity(ctx)
	}
	suite = 17 // 17 again (a firmware update)
	_, _ = c.PowerStatus(ctx)
	_, _ = c.PowerStatus(ctx)
	suite = 3 // and back
	_, _ = c.Identity(ctx)
	var got []string
	for _, e := range logs.All() {
		got = append(got, fmt.Sprintf("%s %v", e.Level, e.ContextMap()["suiteUsed"]))
	}
	if want := []string{"warn 3", "info 17", "warn 3"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("log lines %v, want %v", got, want)
	}
	if fmt.Sprint(obs.suites) != "[3 3]" {
		t.Errorf("fallbacks counted %v, want [3 3]", obs.suites)
	}
	if e := logs.All()[0]; !strings.Contains(e.Message, "refused cipher suite 17") || e.ContextMap()["node"] != "w1" {
		t.Errorf("warning %q %v does not name the suite refused and the node", e.Message, e.ContextMap())
	}
}

// observed records the labels of every BMC operation.
type observed []string

func (o *observed) BMC(protocol bmc.Protocol, vendor string, op bmc.Op, _ time.Duration, err error) {
	*o = append(*o, fmt.Sprintf("%s %s %s %v", protocol, vendor, op, err != nil))
}

// The BMC metrics name the BMC's vendor, from the Manufacturer its identity
// reports: unknown until it was read, then one of a closed list.
func TestBMCOperationsNameTheVendorOnceIdentified(t *testing.T) {
	cfg := config.Inventory{Defaults: config.BMCSettings{CredentialsSecret: "shared"}, Nodes: []config.NodeBMC{{Name: "w1", Address: "https://10.0.0.1", System: "1"}}}
	var obs observed
	inv := New(Options{Config: cfg, Namespace: ns, Timeout: time.Second, Client: clientgo.Wrap(fake.NewClientset(secret("shared", "admin", "pw"))), Observer: &obs,
		Nodes: nodes{"w1": node("w1", "uuid-1", nil)},
		NewController: func(bmc.Target) (bmc.Controller, error) {
			return bmctest.New(clocktesting.NewFakeClock(time.Now()), bmctest.WithIdentity(bmc.Identity{UUID: "uuid-1", Manufacturer: "Dell Inc."})), nil
		}})
	inv.Refresh(context.Background())
	c, err := inv.Lookup("w1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.PowerStatus(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PowerStatus(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"redfish unknown power-status false", "redfish dell identity false", "redfish dell power-status false"}
	if fmt.Sprint(obs) != fmt.Sprint(want) {
		t.Errorf("observed %q, want %q", obs, want)
	}
}

// A file entry's policy problem names the entry by its index in
// inventory.nodes, as the config's own checks do.
func TestFileEntryPolicyProblemNamesItsIndex(t *testing.T) {
	cfg := config.Inventory{Defaults: config.BMCSettings{CredentialsSecret: "shared"}, Nodes: []config.NodeBMC{
		{Name: "w1", Address: "https://10.0.0.1"},
		{Name: "w2", Address: "https://10.0.0.2", BMCSettings: config.BMCSettings{UnassistedSettleWindow: 2 * time.Second}},
	}}
	inv, _, _ := newInventory(t, cfg, secret("shared", "admin", "pw"))
	p := inv.Problems()
	if len(p) != 1 || p["w2"] == nil || !strings.Contains(p["w2"].Error(), "inventory.nodes[1] (w2).unassistedSettleWindow = 2s") {
		t.Fatalf("problems = %v, want w2's, naming inventory.nodes[1]", p)
	}
}
