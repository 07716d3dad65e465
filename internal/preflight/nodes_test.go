package preflight

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

const (
	ns       = "bmcfence-system"
	password = "s3cret-Pa55word"
)

// ---- builders ---------------------------------------------------------------

type nodeOpt func(*corev1.Node)

func node(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	n.Status.NodeInfo.SystemUUID = uuidOf(name)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func withUUID(u string) nodeOpt { return func(n *corev1.Node) { n.Status.NodeInfo.SystemUUID = u } }
func notReady() nodeOpt {
	return func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown }
}
func annotated(k, v string) nodeOpt {
	return func(n *corev1.Node) { n.Annotations = map[string]string{k: v} }
}
func excluded() nodeOpt {
	return func(n *corev1.Node) { n.Labels[cluster.LabelExclude] = cluster.LabelExcludeValue }
}

// uuidOf gives each test node a distinct, well-formed UUID.
func uuidOf(name string) string {
	var sum int
	for _, c := range name {
		sum = sum*31 + int(c)
	}
	return fmt.Sprintf("4c4c4544-0042-3510-8052-%012x", sum)
}

func redfish(name string, opts ...func(*config.NodeBMC)) config.NodeBMC {
	e := config.NodeBMC{Name: name, Address: "https://" + name + ".bmc.example", System: "1"}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func ipmi(name string, opts ...func(*config.NodeBMC)) config.NodeBMC {
	e := config.NodeBMC{Name: name, Address: "ipmi://" + name + ".bmc.example"}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func expectUUID(u string) func(*config.NodeBMC) {
	return func(e *config.NodeBMC) { e.ExpectedUUID = u }
}

// vouched sets allowUnverifiedIdentity.
func vouched() func(*config.NodeBMC) {
	return func(e *config.NodeBMC) { e.AllowUnverifiedIdentity = true }
}

func insecure() func(*config.NodeBMC) {
	return func(e *config.NodeBMC) { e.InsecureSkipVerify = true }
}
func chassisIgnored() func(*config.NodeBMC) {
	return func(e *config.NodeBMC) { e.ChassisPower = string(bmc.ChassisPowerIgnore) }
}

func secretName(s string) func(*config.NodeBMC) {
	return func(e *config.NodeBMC) { e.CredentialsSecret = s }
}

func credentials(name, user, pass string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data: map[string][]byte{"username": []byte(user), "password": []byte(pass)}}
}

// fakeBMC is an honest, powered-on BMC for the named node.
func fakeBMC(name string, opts ...bmctest.Option) *bmctest.Fake {
	opts = append([]bmctest.Option{bmctest.WithIdentity(bmc.Identity{UUID: uuidOf(name)})}, opts...)
	return bmctest.New(clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0)), opts...)
}

func failing(name string, err error, ops ...bmc.Op) *bmctest.Fake {
	f := fakeBMC(name)
	f.Fail(err, ops...)
	return f
}

// stub answers with fixed values, for readings bmctest's machine model
// never produces (an Unknown state, a self-contradicting BMC).
type stub struct {
	bmc.Controller
	power bmc.PowerStatus
}

func (s stub) PowerStatus(context.Context) (bmc.PowerStatus, error) { return s.power, nil }

// hung never answers: the BMC whose web server is wedged.
type hung struct{ bmc.Controller }

func (hung) Identity(ctx context.Context) (bmc.Identity, error) {
	<-ctx.Done()
	return bmc.Identity{}, &bmc.OpError{Op: bmc.OpIdentity, Protocol: bmc.Redfish, Address: "https://hung", Err: fmt.Errorf("%w: %v", bmc.ErrTimeout, ctx.Err())}
}

// setup builds a fake cluster and an inventory whose BMCs are the given
// controllers, keyed by node name (the address's host prefix).
func setup(t *testing.T, nodes []*corev1.Node, entries []config.NodeBMC, bmcs map[string]bmc.Controller, objs ...runtime.Object) Options {
	t.Helper()
	all := append([]runtime.Object{credentials("bmc", "admin", password)}, objs...)
	for _, n := range nodes {
		all = append(all, n)
	}
	client := fake.NewClientset(all...)
	inv := inventory.New(inventory.Options{
		Config:    config.Inventory{Defaults: config.BMCSettings{CredentialsSecret: "bmc"}, Nodes: entries},
		Namespace: ns, Timeout: time.Second, Client: clientgo.Wrap(client),
		NewController: func(tg bmc.Target) (bmc.Controller, error) {
			name, _, _ := strings.Cut(tg.Address.Host, ".")
			c, ok := bmcs[name]
			if !ok {
				return nil, fmt.Errorf("test: no BMC for %s", name)
			}
			return c, nil
		},
	})
	return Options{Client: clientgo.Wrap(client), Inventory: inv, Namespace: ns, Timeout: time.Second, Concurrency: 3}.withDefaults()
}

// row is a result without its message: what tables compare exactly.
type row struct {
	Scope, Check string
	Status       Status
}

func rows(rs []Result) []row {
	out := make([]row, len(rs))
	for i, r := range rs {
		out[i] = row{r.Scope, r.Check, r.Status}
	}
	return out
}

// healthy is the four lines of a node that can be fenced.
func healthy(name string) []row {
	s := NodeScope(name)
	return []row{{s, CheckInventory, StatusOK}, {s, CheckBMC, StatusOK}, {s, CheckIdentity, StatusOK}, {s, CheckPower, StatusOK}}
}

func messages(rs []Result) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "%s %s %s: %s\n", r.Status, r.Scope, r.Check, r.Message)
	}
	return b.String()
}

// ---- per-node checks ---------------------------------------------------------

func TestNodeChecks(t *testing.T) {
	w1 := NodeScope("w1")
	authErr := fmt.Errorf("%w: HTTP 401 for user admin", bmc.ErrAuth)
	tlsErr := fmt.Errorf("%w: x509: certificate signed by unknown authority", bmc.ErrTLS)
	swapped := "44454c4c-4200-1035-8052-" + uuidOf("w1")[24:] // w1's UUID, SMBIOS byte order

	tests := []struct {
		name     string
		nodes    []*corev1.Node
		entries  []config.NodeBMC
		bmcs     map[string]bmc.Controller
		objs     []runtime.Object
		timeout  time.Duration // default 1s
		want     []row
		contains []string // in the joined messages
	}{
		{
			name:     "a redfish node that can be fenced",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": fakeBMC("w1")},
			want:     healthy("w1"),
			contains: []string{`accepted user "admin"; TLS verified with the system CAs`, "matches the Node's status.nodeInfo.systemUUID", "power: On"},
		},
		{
			name:     "an excluded node gets one line and no BMC request",
			nodes:    []*corev1.Node{node("w1", excluded())},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": failing("w1", bmctest.ErrUnreachableFake)},
			want:     []row{{w1, CheckExcluded, StatusOK}},
			contains: []string{"bmcfence.dev/exclude=true: never fenced"},
		},
		{
			name:     "a node without an entry",
			nodes:    []*corev1.Node{node("w1")},
			want:     []row{{w1, CheckInventory, StatusFail}},
			contains: []string{"no BMC entry: add it to the agent's inventory"},
		},
		{
			name:     "an annotated node when the inventory does not read annotations",
			nodes:    []*corev1.Node{node("w1", annotated(cluster.AnnotationBMCAddress, "https://10.0.0.1"))},
			want:     []row{{w1, CheckInventory, StatusFail}},
			contains: []string{"annotations count only with inventory.fromAnnotations: true"},
		},
		{
			name:     "an entry whose Secret is missing says which",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1", secretName("bmc-w1"))},
			want:     []row{{w1, CheckInventory, StatusFail}},
			contains: []string{"entry unusable, the node cannot be fenced: credentials Secret bmcfence-system/bmc-w1 not found"},
		},
		{
			name:     "rejected credentials point at the Secret",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": failing("w1", authErr)},
			want:     []row{{w1, CheckInventory, StatusOK}, {w1, CheckBMC, StatusFail}},
			contains: []string{`the BMC rejected user "admin": check the credentials Secret`},
		},
		{
			name:     "an untrusted certificate asks for the CA",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": failing("w1", tlsErr)},
			want:     []row{{w1, CheckInventory, StatusOK}, {w1, CheckBMC, StatusFail}},
			contains: []string{"give the CA (caConfigMap, key ca.crt) or set insecureSkipVerify explicitly", "x509"},
		},
		{
			name:     "an unreachable BMC is a network problem",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": failing("w1", bmctest.ErrUnreachableFake)},
			want:     []row{{w1, CheckInventory, StatusOK}, {w1, CheckBMC, StatusFail}},
			contains: []string{"cannot reach the BMC at w1.bmc.example:443: check the address and the network path"},
		},
		{
			name:     "a BMC that never answers is cut off at the timeout",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": hung{}},
			timeout:  50 * time.Millisecond,
			want:     []row{{w1, CheckInventory, StatusOK}, {w1, CheckBMC, StatusFail}},
			contains: []string{"did not answer within 50ms"},
		},
		{
			name:     "another machine's BMC fails identity and is not read further",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": fakeBMC("w2")},
			want:     []row{{w1, CheckInventory, StatusOK}, {w1, CheckBMC, StatusOK}, {w1, CheckIdentity, StatusFail}},
			contains: []string{"points at another machine", uuidOf("w2")},
		},
		{
			name:     "the same UUID in SMBIOS byte order fails, with the fix",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": bmctest.New(clocktesting.NewFakeClock(time.Now()), bmctest.WithIdentity(bmc.Identity{UUID: swapped}))},
			want:     []row{{w1, CheckInventory, StatusOK}, {w1, CheckBMC, StatusOK}, {w1, CheckIdentity, StatusFail}},
			contains: []string{"byte-swapped", "set expectedUUID: " + swapped},
		},
		{
			name:     "a BMC that reports no UUID cannot be verified",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": bmctest.New(clocktesting.NewFakeClock(time.Now()))},
			want:     []row{{w1, CheckInventory, StatusOK}, {w1, CheckBMC, StatusOK}, {w1, CheckIdentity, StatusFail}, {w1, CheckPower, StatusOK}},
			contains: []string{"the BMC reports no system UUID", "the agent will not fence this node"},
		},
		{
			name:     "the inventory's expectedUUID wins over the Node's",
			nodes:    []*corev1.Node{node("w1", withUUID("not-what-the-bmc-says"))},
			entries:  []config.NodeBMC{redfish("w1", expectUUID(strings.ToUpper(uuidOf("w1"))))},
			bmcs:     map[string]bmc.Controller{"w1": fakeBMC("w1")},
			want:     healthy("w1"),
			contains: []string{"matches the inventory expectedUUID"},
		},
		{
			name:     "nothing to compare: not fenceable, and the BMC's UUID is named",
			nodes:    []*corev1.Node{node("w1", withUUID(""))},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": fakeBMC("w1")},
			want:     []row{{w1, CheckInventory, StatusOK}, {w1, CheckBMC, StatusOK}, {w1, CheckIdentity, StatusFail}, {w1, CheckPower, StatusOK}},
			contains: []string{"nothing to compare", uuidOf("w1"), "the agent will not fence this node"},
		},
		{
			name:     "nothing to compare, but the entry vouches for it: a warning",
			nodes:    []*corev1.Node{node("w1", withUUID(""))},
			entries:  []config.NodeBMC{redfish("w1", vouched())},
			bmcs:     map[string]bmc.Controller{"w1": fakeBMC("w1")},
			want:     []row{{w1, CheckInventory, StatusOK}, {w1, CheckBMC, StatusOK}, {w1, CheckIdentity, StatusWarn}, {w1, CheckPower, StatusOK}},
			contains: []string{"allowUnverifiedIdentity, so the agent fences it on your word"},
		},
		{
			name:     "IPMI: the system GUID is the identity",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{ipmi("w1")},
			bmcs:     map[string]bmc.Controller{"w1": fakeBMC("w1")},
			want:     healthy("w1"),
			contains: []string{"IPMI lanplus, cipher suite 3", "matches the Node's status.nodeInfo.systemUUID"},
		},
		{
			name:     "a BMC without any identity: reached with a power read, not fenceable",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{ipmi("w1")},
			bmcs:     map[string]bmc.Controller{"w1": failing("w1", fmt.Errorf("%w: no Get System GUID", bmc.ErrUnsupported), bmc.OpIdentity)},
			want:     []row{{w1, CheckInventory, StatusOK}, {w1, CheckBMC, StatusOK}, {w1, CheckIdentity, StatusFail}, {w1, CheckPower, StatusOK}},
			contains: []string{"cannot report a system identity", "the agent will not fence this node"},
		},
		{
			name:     "insecureSkipVerify is a warning",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1", insecure())},
			bmcs:     map[string]bmc.Controller{"w1": fakeBMC("w1")},
			want:     append([]row{{w1, CheckInventory, StatusWarn}}, healthy("w1")[1:]...),
			contains: []string{"insecureSkipVerify is set", "TLS not verified"},
		},
		{
			name:     "chassisPower: ignore is a warning",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1", chassisIgnored())},
			bmcs:     map[string]bmc.Controller{"w1": fakeBMC("w1")},
			want:     append([]row{{w1, CheckInventory, StatusWarn}}, healthy("w1")[1:]...),
			contains: []string{"chassisPower: ignore", "nova or ironic"},
		},
		{
			name:     "Off on a NotReady node is just Off",
			nodes:    []*corev1.Node{node("w1", notReady())},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": fakeBMC("w1", bmctest.WithPower(false))},
			want:     healthy("w1"),
			contains: []string{"power: Off"},
		},
		{
			name:     "Off on a Ready node whose BMC proved its identity: a warning",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": fakeBMC("w1", bmctest.WithPower(false))},
			want:     append(healthy("w1")[:3], row{w1, CheckPower, StatusWarn}),
			contains: []string{"Off, yet the Node reports Ready"},
		},
		{
			name:     "Off on a Ready node behind a vouched, unverifiable BMC: a failure",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{ipmi("w1", vouched())},
			bmcs:     map[string]bmc.Controller{"w1": noIdentity(fakeBMC("w1", bmctest.WithPower(false)))},
			want:     []row{{w1, CheckInventory, StatusOK}, {w1, CheckBMC, StatusOK}, {w1, CheckIdentity, StatusWarn}, {w1, CheckPower, StatusFail}},
			contains: []string{"the entry likely points at another machine"},
		},
		{
			name:     "a transitional state is a warning",
			nodes:    []*corev1.Node{node("w1", notReady())},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": poweringOff("w1")},
			want:     append(healthy("w1")[:3], row{w1, CheckPower, StatusWarn}),
			contains: []string{"PoweringOff: the machine is changing state"},
		},
		{
			name:     "an answer outside the allow-list is a warning that quotes it",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": stub{Controller: fakeBMC("w1"), power: bmc.PowerStatus{State: bmc.PowerUnknown, Raw: "off"}}},
			want:     append(healthy("w1")[:3], row{w1, CheckPower, StatusWarn}),
			contains: []string{`the BMC answered "off"`},
		},
		{
			name:     "Off while claiming the OS runs is a warning",
			nodes:    []*corev1.Node{node("w1", notReady())},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": stub{Controller: fakeBMC("w1"), power: bmc.PowerStatus{State: bmc.PowerOff, Raw: "Off", BootProgress: "OSRunning"}}},
			want:     append(healthy("w1")[:3], row{w1, CheckPower, StatusWarn}),
			contains: []string{"BootProgress OSRunning: it contradicts itself"},
		},
		{
			name:     "a power read that fails is a failure",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1")},
			bmcs:     map[string]bmc.Controller{"w1": failing("w1", fmt.Errorf("%w: HTTP 500", bmc.ErrBMC), bmc.OpPowerStatus)},
			want:     append(healthy("w1")[:3], row{w1, CheckPower, StatusFail}),
			contains: []string{"cannot read the power state"},
		},
		{
			name:     "an entry for a node the cluster does not have",
			nodes:    []*corev1.Node{node("w1")},
			entries:  []config.NodeBMC{redfish("w1"), redfish("wl")},
			bmcs:     map[string]bmc.Controller{"w1": fakeBMC("w1"), "wl": fakeBMC("wl")},
			want:     append(healthy("w1"), row{NodeScope("wl"), CheckNode, StatusWarn}),
			contains: []string{`the cluster has no Node "wl"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := setup(t, tt.nodes, tt.entries, tt.bmcs, tt.objs...)
			if tt.timeout > 0 {
				o.Timeout = tt.timeout
			}
			got := checkNodes(context.Background(), o)
			if diff := cmp.Diff(tt.want, rows(got)); diff != "" {
				t.Errorf("results (-want +got):\n%s\n%s", diff, messages(got))
			}
			all := messages(got)
			for _, s := range tt.contains {
				if !strings.Contains(all, s) {
					t.Errorf("no result says %q:\n%s", s, all)
				}
			}
			if strings.Contains(all, password) {
				t.Errorf("the password appears in the results:\n%s", all)
			}
		})
	}
}

// noIdentity makes f a BMC that reports no identity at all.
func noIdentity(f *bmctest.Fake) *bmctest.Fake {
	f.Fail(fmt.Errorf("%w: no Get System GUID", bmc.ErrUnsupported), bmc.OpIdentity)
	return f
}

func poweringOff(name string) *bmctest.Fake {
	f := fakeBMC(name, bmctest.WithTiming(machine.Timing{PowerOff: time.Hour}))
	if err := f.Press(machine.ResetForceOff); err != nil {
		panic(err)
	}
	return f
}

// A library that echoes the password into an error must not get it printed.
func TestBMCFailureRedactsThePassword(t *testing.T) {
	o := setup(t, []*corev1.Node{node("w1")}, []config.NodeBMC{redfish("w1")},
		map[string]bmc.Controller{"w1": failing("w1", fmt.Errorf("%w: login admin:%s refused", bmc.ErrAuth, password))})
	got := messages(checkNodes(context.Background(), o))
	if strings.Contains(got, password) || !strings.Contains(got, "[redacted]") {
		t.Errorf("want the password redacted:\n%s", got)
	}
}

// counting records how many of its kind are in a BMC request at once.
type counting struct {
	bmc.Controller
	mu            *sync.Mutex
	inFlight, max *int
}

func (c counting) Identity(ctx context.Context) (bmc.Identity, error) {
	c.mu.Lock()
	*c.inFlight++
	*c.max = max(*c.max, *c.inFlight)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		*c.inFlight--
		c.mu.Unlock()
	}()
	return c.Controller.Identity(ctx)
}

func TestConcurrencyBoundsBMCRequests(t *testing.T) {
	var (
		mu             sync.Mutex
		inFlight, peak int
		nodes          []*corev1.Node
		entries        []config.NodeBMC
	)
	bmcs := map[string]bmc.Controller{}
	for i := range 12 {
		name := fmt.Sprintf("w%02d", i)
		nodes = append(nodes, node(name))
		entries = append(entries, redfish(name))
		bmcs[name] = counting{Controller: fakeBMC(name), mu: &mu, inFlight: &inFlight, max: &peak}
	}
	o := setup(t, nodes, entries, bmcs)
	o.Concurrency = 2
	got := checkNodes(context.Background(), o)
	if w := Worst(got); w != StatusOK {
		t.Fatalf("worst = %s:\n%s", w, messages(got))
	}
	if len(got) != 12*4 {
		t.Errorf("%d results, want %d", len(got), 12*4)
	}
	if peak > 2 {
		t.Errorf("%d BMC requests at once, want at most 2", peak)
	}
}

func TestSMBIOSSwapped(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"4c4c4544-0042-3510-8052-b3c04f4e4d32", "44454c4c-4200-1035-8052-b3c04f4e4d32", true},
		{"44454C4C-4200-1035-8052-B3C04F4E4D32", "4c4c4544-0042-3510-8052-b3c04f4e4d32", true},
		{"4c4c4544-0042-3510-8052-b3c04f4e4d32", "4c4c4544-0042-3510-8052-b3c04f4e4d33", false},
		{"4c4c4544-0042-3510-8052-b3c04f4e4d32", "44454c4c-4200-1035-8052-b3c04f4e4d33", false},
		{"not-a-uuid", "44454c4c-4200-1035-8052-b3c04f4e4d32", false},
	}
	for _, tt := range tests {
		if got := bmc.SMBIOSSwapped(tt.a, tt.b); got != tt.want {
			t.Errorf("bmc.SMBIOSSwapped(%s, %s) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}
