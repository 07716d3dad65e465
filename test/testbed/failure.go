package testbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/bmcfence/bmcfence/bmc/machine"
)

// The ways a node fails that the failure matrix (test/failures) needs
// beyond power: the node's OS as the network sees it (its kubelet port),
// a node cut off from the network, and the node-side watchdog petter.

// Reach is what a connection to a node's kubelet port meets.
type Reach int

const (
	// ReachAnswers: the kubelet answers (OS and kubelet run).
	ReachAnswers Reach = iota
	// ReachReset: the OS answers with a reset (TCP RST): it runs, only the
	// kubelet is dead.
	ReachReset
	// ReachTimeout: nothing answers (powered off, hung, or cut off from
	// the network): a partition looks the same, so it proves nothing.
	ReachTimeout
)

func (r Reach) String() string {
	switch r {
	case ReachAnswers:
		return "answers"
	case ReachReset:
		return "reset"
	case ReachTimeout:
		return "timeout"
	}
	return "unknown"
}

// reachListener stands in for a node's kubelet port on 127.0.0.1: every
// connection is answered ("ok\n"), reset (RST) or left hanging, by what the
// node's machine, OS, kubelet and network are doing at that moment.
type reachListener struct {
	ln     net.Listener
	node   string
	b      *Testbed
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

func (b *Testbed) startReach() error {
	b.reach = map[string]*reachListener{}
	for _, n := range b.Nodes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.stopReach()
			return fmt.Errorf("kubelet-port stand-in for %s: %w", n.Name, err)
		}
		r := &reachListener{ln: ln, node: n.Name, b: b, conns: map[net.Conn]bool{}}
		b.reach[n.Name] = r
		r.wg.Add(1)
		go r.serve()
	}
	return nil
}

func (b *Testbed) stopReach() {
	for _, r := range b.reach {
		r.mu.Lock()
		r.closed = true
		for c := range r.conns {
			_ = c.Close()
		}
		r.mu.Unlock()
		_ = r.ln.Close()
		r.wg.Wait()
	}
}

func (r *reachListener) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		switch r.b.ReachOf(r.node) {
		case ReachAnswers:
			_, _ = c.Write([]byte("ok\n"))
			_ = c.Close()
		case ReachReset:
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close with RST, as a closed port answers
			}
			_ = c.Close()
		case ReachTimeout:
			// Hold it, unanswered, until the client gives up or we stop.
			r.mu.Lock()
			if r.closed {
				_ = c.Close()
			} else {
				r.conns[c] = true
			}
			r.mu.Unlock()
		}
	}
}

// publishKubeletPorts writes each node's kubelet-port stand-in into its
// status, as a kubelet registers its own: InternalIP 127.0.0.1 and
// daemonEndpoints.kubeletEndpoint.Port, so the agent's prober of suspect
// nodes' kubelet ports meets the stand-in. kwok's heartbeat keeps both (its
// stages copy status.addresses, and write daemonEndpoints only with a
// --node-port, which it is not given).
func (b *Testbed) publishKubeletPorts(ctx context.Context) error {
	for name, r := range b.reach {
		port := r.ln.Addr().(*net.TCPAddr).Port
		patch := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":"127.0.0.1"},{"type":"Hostname","address":%q}],"daemonEndpoints":{"kubeletEndpoint":{"Port":%d}}}}`, name, port)
		if _, err := b.CP.Client().CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("kubelet-port stand-in for %s: publishing it in the node's status: %w", name, err)
		}
	}
	return nil
}

// KubeletAddress is the node's kubelet-port stand-in, "127.0.0.1:PORT".
func (b *Testbed) KubeletAddress(node string) string {
	if r := b.reach[node]; r != nil {
		return r.ln.Addr().String()
	}
	return ""
}

// ReachOf is what the node's kubelet port does now: it follows the
// machine (off or hung: nothing answers), the network (cut off: nothing
// answers) and the kubelet (dead on a running OS: reset).
func (b *Testbed) ReachOf(node string) Reach {
	b.mu.Lock()
	cut, down := b.cutOff[node], b.kubeletDown[node]
	b.mu.Unlock()
	if cut {
		return ReachTimeout
	}
	if on, err := b.MachineOn(node); err != nil || !on {
		return ReachTimeout
	}
	if down || !b.CP.NodeAlive(node) {
		return ReachReset
	}
	return ReachAnswers
}

// ProbeKubelet connects to the node's kubelet port as a remote prober would
// and says what it met, within timeout.
func (b *Testbed) ProbeKubelet(ctx context.Context, node string, timeout time.Duration) Reach {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", b.KubeletAddress(node))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return ReachTimeout
		}
		return ReachReset
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(dl)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	var ne net.Error
	switch {
	case err == nil && line == "ok\n":
		return ReachAnswers
	case errors.As(err, &ne) && ne.Timeout():
		return ReachTimeout
	default:
		return ReachReset
	}
}

// CutOff cuts the node off the network: its kubelet can no longer reach
// the API server (it stops renewing) and nothing answers on its kubelet
// port, while its machine and OS run and its BMC, on the management
// network, still answers.
func (b *Testbed) CutOff(node string) error {
	b.mu.Lock()
	b.cutOff[node] = true
	b.mu.Unlock()
	return b.KubeletStop(node)
}

// Reconnect ends a CutOff: the kubelet reaches the API server again.
func (b *Testbed) Reconnect(node string) {
	b.mu.Lock()
	delete(b.cutOff, node)
	b.mu.Unlock()
	b.KubeletStart(node)
}

// OSHang freezes the node's OS: the BMC still reads On, its kubelet stops,
// a watchdog petter stops petting.
func (b *Testbed) OSHang(node string) error { return b.event(node, machine.EventOSHang) }

// OSRecover unfreezes a hung OS.
func (b *Testbed) OSRecover(node string) error { return b.event(node, machine.EventOSRecover) }

// petterConfig is how the node-side petter (cmd/bmc-watchdog, as a
// DaemonSet) arms the node's BMC watchdog.
type petterConfig struct {
	timeout time.Duration
	action  machine.WatchdogAction
}

// StartPetter runs the node-side watchdog petter on the node: it arms the
// BMC watchdog (timer use SMS/OS) and keeps petting it while the OS runs,
// and it comes back whenever the node's kubelet does (a DaemonSet pod).
func (b *Testbed) StartPetter(node string, timeout time.Duration, action machine.WatchdogAction) error {
	n := b.Node(node)
	if n.ipmi {
		return errors.New("ipmi_sim node: the petter is modelled on the Redfish mock only")
	}
	b.mu.Lock()
	b.petters[node] = petterConfig{timeout: timeout, action: action}
	b.mu.Unlock()
	return b.Mock.Mock.StartPetter(n.System, timeout, action)
}

// StopPetter stops the node's petter: on purpose (the magic close disarms
// the watchdog) or killed (the timer runs on and expires).
func (b *Testbed) StopPetter(node string, disarm bool) error {
	b.mu.Lock()
	delete(b.petters, node)
	b.mu.Unlock()
	n := b.Node(node)
	if n.ipmi {
		return nil
	}
	return b.Mock.Mock.StopPetter(n.System, disarm)
}

func (b *Testbed) restartPetter(node string) {
	b.mu.Lock()
	cfg, ok := b.petters[node]
	b.mu.Unlock()
	if !ok {
		return
	}
	if err := b.Mock.Mock.StartPetter(b.Node(node).System, cfg.timeout, cfg.action); err != nil {
		b.logf("testbed: restarting %s's watchdog petter: %v", node, err)
	}
}

// MachineLog is the BMC's log about the node's machine (watchdog expiries,
// OS critical stops, boots), oldest first.
func (b *Testbed) MachineLog(node string) ([]machine.LogEntry, error) {
	n := b.Node(node)
	if n.ipmi {
		return nil, errors.New("ipmi_sim node: read its SEL over IPMI")
	}
	return b.Mock.Mock.Log(n.System)
}

// taintNodes adds taints (a control-plane node's NoSchedule).
func (b *Testbed) taintNodes(ctx context.Context, taints map[string][]corev1.Taint) error {
	c := b.CP.Client()
	for name, ts := range taints {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Taints = append(n.Spec.Taints, ts...)
			_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("tainting %s: %w", name, err)
		}
	}
	return nil
}
