// Package testbed assembles what the end-to-end tests and `make demo` run
// bmcfence against: the real control plane (test/controlplane), one Redfish
// mock serving one system per node over HTTPS (each system with its own
// credentials, so each looks like its own BMC), optionally ipmi_sim as one
// node's BMC, the Secrets and CA ConfigMap the agent's inventory reads, and
// the fence-agent itself as a local process with the real kubeconfig.
//
// A bridge ties each node's "kubelet" (its kwok process) to its machine: when
// the BMC's machine is not on with its OS running, the node's kwok is killed;
// when it runs again, kwok is restarted. So a ForceOff sent by the agent
// really stops the node's heartbeats, and a power-on really brings it back.
// KubeletStop simulates a dead kubelet on a machine that stays on.
package testbed

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/ipmisim"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/test/controlplane"
)

// Namespace is where the agent's Secrets, ConfigMap and leader Lease live.
const Namespace = "bmcfence-system"

// Options configure a testbed.
type Options struct {
	// Nodes to create (default n1..n4). Zones, when set, labels node i with
	// Zones[i % len(Zones)].
	Nodes []string
	Zones []string
	// IPMINode, when set, gets ipmi_sim as its BMC instead of a mock system.
	IPMINode string
	// Timing of the mock machines (default: power-on 10 s, ForceOff 1 s,
	// restart off-dwell 2 s); NodeTiming overrides it per node.
	Timing     *machine.Timing
	NodeTiming map[string]machine.Timing
	// NodeMonitorGracePeriod for the controller-manager (default 20 s).
	NodeMonitorGracePeriod time.Duration
	// AgentAsServiceAccount applies deploy/base's ServiceAccount and RBAC
	// and runs every agent as that ServiceAccount (the admin kubeconfig,
	// impersonating it): the agent is proven with the grants it ships with.
	AgentAsServiceAccount bool
	// NodeLabels and NodeTaints add labels (e.g. the control-plane role)
	// and taints to named nodes.
	NodeLabels map[string]map[string]string
	NodeTaints map[string][]corev1.Taint
	// GroupSize, when positive, runs the nodes in kwok processes of this
	// many nodes each (Testbed.Groups, in order) instead of one per node,
	// and turns the bridge off: the test fails a group itself (the scale
	// harness).
	GroupSize int
	Logf      func(format string, args ...any)
	// PDUs are the mock's rack PDUs (redfishmock.Config.PDUs): their
	// outlets feed the nodes' power supplies ("feeds": "NODE/N", a node's
	// system Id being its name).
	PDUs []redfishmock.PDUConfig
	// PowerSupplies overrides a node's number of power supplies (the
	// mock's default: 2).
	PowerSupplies map[string]int
}

// Node is one testbed node and how its BMC is reached.
type Node struct {
	Name     string
	Address  string // https://127.0.0.1:PORT or ipmi://127.0.0.1:PORT
	System   string
	UUID     string
	Username string
	password string
	ipmi     bool
}

// Testbed is a running environment.
type Testbed struct {
	CP    *controlplane.ControlPlane
	Mock  *redfishmocktest.Server
	IPMI  *ipmisim.Sim
	Nodes []*Node
	// Groups are the kwok processes of a testbed started with GroupSize.
	Groups []*controlplane.KwokGroup

	dir  string
	logf func(string, ...any)
	// agentKubeconfig is what StartAgent gives the agent.
	agentKubeconfig string
	// NodeConfig is extra YAML AgentConfig writes into a node's inventory
	// entry (its fields, each line indented by 6 spaces), e.g. levels.
	NodeConfig map[string]string
	// AgentEnv is extra environment (NAME=value) for every agent
	// StartAgent runs, e.g. the DaemonSet's GOMEMLIMIT (the scale harness).
	AgentEnv []string

	mu          sync.Mutex
	kubeletDown map[string]bool
	restarting  map[string]bool
	stopBridge  context.CancelFunc
	bridgeDone  chan struct{}

	// Each node's OS as the network sees it, and its watchdog petter
	// (failure.go).
	reach   map[string]*reachListener
	cutOff  map[string]bool
	petters map[string]petterConfig
}

// StartT starts a testbed for a test and stops it at cleanup.
func StartT(t *testing.T, opts Options) *Testbed {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	cp := controlplane.StartT(t, controlplane.Options{NodeMonitorGracePeriod: opts.NodeMonitorGracePeriod, Logf: opts.Logf})
	tb, err := Start(context.Background(), cp, opts, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tb.Stop)
	return tb
}

// Start assembles a testbed on a running control plane, keeping its files in
// dir. Stop releases it (the control plane is the caller's).
func Start(ctx context.Context, cp *controlplane.ControlPlane, opts Options, dir string) (*Testbed, error) {
	if len(opts.Nodes) == 0 {
		opts.Nodes = []string{"n1", "n2", "n3", "n4"}
	}
	timing := machine.Timing{PowerOn: 10 * time.Second, PowerOff: time.Second, GracefulShutdown: 3 * time.Second, RestartOff: 2 * time.Second}
	if opts.Timing != nil {
		timing = *opts.Timing
	}
	b := &Testbed{CP: cp, dir: dir, logf: opts.Logf, kubeletDown: map[string]bool{}, restarting: map[string]bool{},
		cutOff: map[string]bool{}, petters: map[string]petterConfig{}}
	var systems []redfishmock.SystemConfig
	for i, name := range opts.Nodes {
		n := &Node{Name: name, Username: "bmc-" + name, password: randomPassword(), UUID: fmt.Sprintf("00000000-b3cf-4e00-8000-%012d", i+1)}
		if name == opts.IPMINode {
			n.ipmi = true
			n.Username = "admin" // ipmi_sim's user
		} else {
			n.System = name
			sc := redfishmock.SystemConfig{ID: name, Name: name, UUID: n.UUID, PowerState: redfishmock.PowerOn, Username: n.Username, Password: n.password}
			if nt, ok := opts.NodeTiming[name]; ok {
				sc.Timing = &nt
			}
			sc.PowerSupplies = opts.PowerSupplies[name]
			systems = append(systems, sc)
		}
		b.Nodes = append(b.Nodes, n)
	}
	mock, err := redfishmocktest.Serve(redfishmock.Config{Username: "admin", Password: randomPassword(), Systems: systems, Timing: timing, PDUs: opts.PDUs,
		// One mock stands for every node's BMC: one event subscription each.
		Events: redfishmock.EventsConfig{MaxSubscriptions: max(len(systems), redfishmock.DefaultMaxSubscriptions)}}, true)
	if err != nil {
		return nil, err
	}
	b.Mock = mock
	for _, n := range b.Nodes {
		if !n.ipmi {
			n.Address = b.Mock.URL
			continue
		}
		sim, err := ipmisim.Start(ctx, ipmisim.Options{Password: n.password[:16], InitialPower: true, Dir: filepath.Join(dir, "ipmisim"), GUID: n.UUID})
		if err != nil {
			return nil, fmt.Errorf("ipmi_sim for %s: %w", n.Name, err)
		}
		n.password = sim.Password()
		n.Address = "ipmi://" + sim.Address()
		b.IPMI = sim
	}
	if err := b.createInventoryObjects(ctx); err != nil {
		return nil, err
	}
	b.agentKubeconfig = cp.Kubeconfig()
	// The project's API (CRDs, the request admission policy), as an
	// install of deploy/base has it.
	if err := b.ApplyAPI(ctx); err != nil {
		return nil, err
	}
	if opts.AgentAsServiceAccount {
		if err := b.ApplyAgentRBAC(ctx); err != nil {
			return nil, err
		}
		if b.agentKubeconfig, err = b.writeAgentKubeconfig(); err != nil {
			return nil, err
		}
	}
	var group []controlplane.NodeSpec
	for i, n := range b.Nodes {
		labels := map[string]string{}
		if len(opts.Zones) > 0 {
			labels["topology.kubernetes.io/zone"] = opts.Zones[i%len(opts.Zones)]
		}
		for k, v := range opts.NodeLabels[n.Name] {
			labels[k] = v
		}
		spec := controlplane.NodeSpec{Name: n.Name, SystemUUID: n.UUID, Labels: labels}
		if opts.GroupSize > 0 {
			group = append(group, spec)
			if len(group) == opts.GroupSize || i == len(b.Nodes)-1 {
				g, err := cp.AddNodeGroup(ctx, fmt.Sprintf("g%d", len(b.Groups)), group)
				if err != nil {
					return nil, err
				}
				b.Groups = append(b.Groups, g)
				group = nil
			}
			continue
		}
		if err := cp.AddNode(ctx, spec); err != nil {
			return nil, err
		}
	}
	if opts.GroupSize > 0 {
		return b, nil
	}
	if err := b.taintNodes(ctx, opts.NodeTaints); err != nil {
		return nil, err
	}
	if err := b.startReach(); err != nil {
		return nil, err
	}
	if err := b.publishKubeletPorts(ctx); err != nil {
		b.stopReach()
		return nil, err
	}
	bctx, cancel := context.WithCancel(context.Background())
	b.stopBridge, b.bridgeDone = cancel, make(chan struct{})
	go b.bridge(bctx)
	return b, nil
}

// Stop stops the bridge, the mock and ipmi_sim.
func (b *Testbed) Stop() {
	if b.stopBridge != nil {
		b.stopBridge()
		<-b.bridgeDone
	}
	b.stopReach()
	if b.IPMI != nil {
		_ = b.IPMI.Stop()
	}
	if b.Mock != nil {
		b.Mock.Close()
	}
}

func randomPassword() string {
	buf := make([]byte, 12)
	_, _ = rand.Read(buf)
	return "Pw-" + hex.EncodeToString(buf)
}

// createInventoryObjects writes the namespace, one credentials Secret per
// node and the mock's CA as a ConfigMap.
func (b *Testbed) createInventoryObjects(ctx context.Context) error {
	c := b.CP.Client()
	if err := b.CP.CreateNamespace(ctx, Namespace); err != nil {
		return err
	}
	for _, n := range b.Nodes {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "bmc-" + n.Name, Namespace: Namespace},
			StringData: map[string]string{"username": n.Username, "password": n.password},
		}
		if _, err := c.CoreV1().Secrets(Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Secret %s: %w", s.Name, err)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bmc-ca", Namespace: Namespace}, Data: map[string]string{"ca.crt": string(b.Mock.CAPEM)}}
	if _, err := c.CoreV1().ConfigMaps(Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ConfigMap bmc-ca: %w", err)
	}
	return nil
}

// Node returns a node by name.
func (b *Testbed) Node(name string) *Node {
	for _, n := range b.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Target is how a client reaches a node's BMC, as the agent's inventory
// entry says (its address, system, credentials, the mock's CA).
func (b *Testbed) Target(name string) (bmc.Target, error) {
	n := b.Node(name)
	if n == nil {
		return bmc.Target{}, fmt.Errorf("no node %q", name)
	}
	addr, err := bmc.ParseAddress(n.Address)
	if err != nil {
		return bmc.Target{}, err
	}
	return bmc.Target{Address: addr, System: n.System, Credentials: bmc.Credentials{Username: n.Username, Password: bmc.Secret(n.password)},
		CACertificates: b.Mock.CAPEM}, nil
}

// AgentConfig writes an agent config file with the inventory and the given
// extra YAML (policy overrides, e.g. "policy:\n  fenceAfter: 30s\n") and
// returns its path.
func (b *Testbed) AgentConfig(extra string) (string, error) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "namespace: %s\ninventory:\n  defaults:\n    caConfigMap: bmc-ca\n  nodes:\n", Namespace)
	for _, n := range b.Nodes {
		fmt.Fprintf(&sb, "    - name: %s\n      address: %s\n      credentialsSecret: bmc-%s\n", n.Name, n.Address, n.Name)
		if n.System != "" {
			fmt.Fprintf(&sb, "      system: %q\n", n.System)
		}
		// An IPMI node is verified like the others: its ipmi_sim reports
		// the node's systemUUID as its system GUID (see Start).
		sb.WriteString(b.NodeConfig[n.Name])
	}
	sb.WriteString(extra)
	f, err := os.CreateTemp(b.dir, "agent-*.yaml")
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.WriteString(sb.String())
	return f.Name(), err
}

// ---- what happens to machines ------------------------------------------------

func (b *Testbed) event(node string, ev machine.Event) error {
	n := b.Node(node)
	if n.ipmi {
		switch ev {
		case machine.EventPowerLoss:
			return b.IPMI.SetPower(false)
		case machine.EventPowerRestore:
			return b.IPMI.SetPower(true)
		}
		return fmt.Errorf("ipmi_sim models power only, not %s", ev)
	}
	return b.Mock.Mock.Event(n.System, ev)
}

// PowerLoss cuts a machine's power: it reads Off at once and its kubelet dies.
func (b *Testbed) PowerLoss(node string) error { return b.event(node, machine.EventPowerLoss) }

// PowerRestore powers a machine back on (PoweringOn, then On).
func (b *Testbed) PowerRestore(node string) error { return b.event(node, machine.EventPowerRestore) }

// Reboot makes a machine's OS reboot by itself: Off briefly, then on again.
func (b *Testbed) Reboot(node string) error { return b.event(node, machine.EventOSReboot) }

// KubeletStop kills the node's kubelet while its machine stays on.
func (b *Testbed) KubeletStop(node string) error {
	b.mu.Lock()
	b.kubeletDown[node] = true
	b.mu.Unlock()
	return b.CP.KillNode(node)
}

// KubeletStart lets the bridge start the node's kubelet again (if its
// machine runs).
func (b *Testbed) KubeletStart(node string) {
	b.mu.Lock()
	delete(b.kubeletDown, node)
	b.mu.Unlock()
}

// SetFaults sets a mock system's faults (a lying BMC, an unreachable one...).
func (b *Testbed) SetFaults(node string, f redfishmock.Faults) error {
	n := b.Node(node)
	if n.ipmi {
		return errors.New("ipmi_sim node: use b.IPMI.SetBehavior")
	}
	return b.Mock.Mock.SetFaults(n.System, f)
}

// ForceOffs counts the hard power-offs the node's BMC has received so far
// (Redfish ForceOff, IPMI chassis power off).
func (b *Testbed) ForceOffs(node string) int {
	n := b.Node(node)
	if n.ipmi {
		k := 0
		for _, c := range b.IPMI.Commands() {
			if c == "set power 0" {
				k++
			}
		}
		return k
	}
	st, err := b.Mock.Mock.Status(n.System)
	if err != nil {
		return 0
	}
	return int(st.Counters.Resets[redfishmock.ResetForceOff])
}

// MachineOn reports whether the node's machine runs its OS (a hung OS runs
// nothing: its kubelet is dead).
func (b *Testbed) MachineOn(node string) (bool, error) {
	n := b.Node(node)
	if n.ipmi {
		return b.IPMI.Power()
	}
	st, err := b.Mock.Mock.Status(n.System)
	if err != nil {
		return false, err
	}
	return st.PowerState == redfishmock.PowerOn && st.BootProgress == "OSRunning" && !st.OSHung, nil
}

// bridge keeps each node's kwok in step with its machine.
func (b *Testbed) bridge(ctx context.Context) {
	defer close(b.bridgeDone)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, n := range b.Nodes {
			on, err := b.MachineOn(n.Name)
			if err != nil {
				continue
			}
			b.mu.Lock()
			down, busy := b.kubeletDown[n.Name], b.restarting[n.Name]
			b.mu.Unlock()
			alive := b.CP.NodeAlive(n.Name)
			switch {
			case !on && alive:
				b.logf("testbed: %s's machine is off: its kubelet dies", n.Name)
				_ = b.CP.KillNode(n.Name)
			case on && !alive && !down && !busy:
				b.mu.Lock()
				b.restarting[n.Name] = true
				b.mu.Unlock()
				go func(name string) {
					b.logf("testbed: %s's machine runs: its kubelet starts", name)
					rctx, cancel := context.WithTimeout(ctx, time.Minute)
					defer cancel()
					if err := b.CP.RestartNode(rctx, name); err != nil && ctx.Err() == nil {
						b.logf("testbed: restarting %s's kubelet: %v", name, err)
					} else {
						b.restartPetter(name) // a DaemonSet pod: it comes back with its kubelet
					}
					b.mu.Lock()
					delete(b.restarting, name)
					b.mu.Unlock()
				}(n.Name)
			}
		}
	}
}

// Reset returns every machine to On with an honest BMC, lets every kubelet
// run, removes every out-of-service taint and bmcfence annotation, and waits
// until every node is Ready: a clean slate for the next scenario.
func (b *Testbed) Reset(ctx context.Context) error {
	b.mu.Lock()
	b.cutOff = map[string]bool{}
	petters := b.petters
	b.petters = map[string]petterConfig{}
	b.mu.Unlock()
	for node := range petters {
		_ = b.Mock.Mock.StopPetter(b.Node(node).System, true)
	}
	for _, n := range b.Nodes {
		b.KubeletStart(n.Name)
		if n.ipmi {
			if err := b.IPMI.SetBehavior(ipmisim.Behavior{}); err != nil {
				return err
			}
			if err := b.IPMI.SetPower(true); err != nil {
				return err
			}
			continue
		}
		if err := b.Mock.Mock.SetFaults(n.System, redfishmock.Faults{}); err != nil {
			return err
		}
		if err := b.Mock.Mock.FailSupplies(n.System, false); err != nil {
			return err
		}
		if err := b.Mock.Mock.SetPower(n.System, redfishmock.PowerOn); err != nil {
			return err
		}
	}
	c := b.CP.Client()
	for _, n := range b.Nodes {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			node, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			var keep []corev1.Taint
			for _, t := range node.Spec.Taints {
				if t.Key != corev1.TaintNodeOutOfService {
					keep = append(keep, t)
				}
			}
			node.Spec.Taints = keep
			node.Spec.Unschedulable = false // a drain test's cordon
			for k := range node.Annotations {
				if strings.HasPrefix(k, "bmcfence.dev/") {
					delete(node.Annotations, k)
				}
			}
			_, err = c.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("resetting node %s: %w", n.Name, err)
		}
	}
	for _, n := range b.Nodes {
		err := b.CP.WaitFor(ctx, n.Name+" Ready with its kubelet running", func() (bool, error) {
			node, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return cluster.NodeReady(node) && b.CP.NodeAlive(n.Name), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ---- the agent --------------------------------------------------------------

// BuildAgent builds cmd/fence-agent into dir and returns its path.
func BuildAgent(dir string) (string, error) { return Build(dir, "fence-agent") }

// commit names the work tree's commit, with "-dirty" when it has
// uncommitted changes; "unknown" without git.
func commit(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += "-dirty"
	}
	return c
}

// Build builds cmd/NAME into dir and returns its path.
func Build(dir, name string) (string, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	// The commit, as make build stamps it (a plain go build may carry no
	// VCS information: GOFLAGS=-buildvcs=false): the scale harness
	// records which agent it measured.
	ldflags := "-X github.com/bmcfence/bmcfence/internal/version.Commit=" + commit(root)
	cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", out, "./cmd/"+name)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", name, err, b)
	}
	return out, nil
}
