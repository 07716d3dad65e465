// Package e2e proves bmcfence on a real control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kwok kubelets), with the Redfish
// mock and ipmi_sim as BMCs and the fence-agent as a local process: the
// taint's effect is the controllers', so only they can show it works.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/test/controlplane"
	"github.com/bmcfence/bmcfence/test/testbed"
)

// The package shares one control plane and testbed: six nodes, n1-n5 with
// Redfish BMCs (the mock) and n6 with an IPMI BMC (ipmi_sim). Each test
// resets it first. n2's machine boots slowly (a 25 s POST), for the reboot
// scenario.
var (
	agentBin string
	cliBin   string
	shared   *testbed.Testbed
	sharedCP *controlplane.ControlPlane
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if err := controlplane.BinariesAvailable(""); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "bmcfence-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if agentBin, err = testbed.BuildAgent(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if cliBin, err = testbed.Build(dir, "kubectl-fence"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	sharedCP, err = controlplane.Start(ctx, controlplane.Options{WorkDir: filepath.Join(dir, "cp"), Logf: logf})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: control plane:", err)
		return 1
	}
	defer sharedCP.Stop()
	slow := machine.Timing{PowerOn: 25 * time.Second, PowerOff: time.Second, GracefulShutdown: 3 * time.Second, RestartOff: 2 * time.Second}
	// n5's restart holds it off for 40 s: longer than the settle window.
	longDwell := machine.Timing{PowerOn: 10 * time.Second, PowerOff: time.Second, GracefulShutdown: 3 * time.Second, RestartOff: 40 * time.Second}
	shared, err = testbed.Start(ctx, sharedCP, testbed.Options{
		Nodes: []string{"n1", "n2", "n3", "n4", "n5", "n6"}, IPMINode: "n6",
		NodeTiming: map[string]machine.Timing{"n2": slow, "n5": longDwell}, Logf: logf,
		// Every agent here runs with deploy/base's grants and no more.
		AgentAsServiceAccount: true,
		// A rack PDU for the outlet identity test: n1's two supplies on
		// outlets 1 and 2, n4's single supply on outlet 3.
		PowerSupplies: map[string]int{"n4": 1},
		PDUs: []redfishmock.PDUConfig{{ID: "pdu-e2e", Outlets: []redfishmock.OutletConfig{
			{Feeds: "n1/1"}, {Feeds: "n1/2"}, {Feeds: "n4/1"}}}},
	}, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: testbed:", err)
		fmt.Fprintln(os.Stderr, sharedCP.LogTails(20))
		return 1
	}
	defer shared.Stop()
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, sharedCP.LogTails(15))
	}
	return code
}

// env is one scenario's view of the shared world. The shared cluster keeps
// Events and BMC counters from earlier tests: start and forceOffs are the
// baseline.
type env struct {
	t         *testing.T
	tb        *testbed.Testbed
	c         kubernetes.Interface
	start     time.Time
	forceOffs map[string]int
}

// newEnv resets the shared testbed for a scenario.
func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := shared.Reset(ctx); err != nil {
		t.Fatalf("resetting the testbed: %v", err)
	}
	e := &env{t: t, tb: shared, c: shared.CP.Client(), start: time.Now(), forceOffs: map[string]int{}}
	for _, n := range shared.Nodes {
		e.forceOffs[n.Name] = shared.ForceOffs(n.Name)
	}
	return e
}

// forceOffsSince counts the hard power-offs a node's BMC got in this test.
func (e *env) forceOffsSince(node string) int { return e.tb.ForceOffs(node) - e.forceOffs[node] }

// agent starts a fence-agent with policy overrides (YAML under policy:).
func (e *env) agent(name, policy string, extra ...string) *testbed.Agent {
	e.t.Helper()
	cfg, err := e.tb.AgentConfig(policy)
	if err != nil {
		e.t.Fatal(err)
	}
	a, err := e.tb.StartAgent(context.Background(), agentBin, name, cfg, extra...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		a.Stop()
		if e.t.Failed() {
			e.t.Logf("agent %s log (tail):\n%s", name, lastLines(a.Logs(), 60))
		}
	})
	return a
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// statefulSet runs a one-replica StatefulSet with a volume and returns the
// node its pod runs on, once its volume is attached there.
func (e *env) statefulSet(ns, name string) string {
	e.t.Helper()
	ctx := context.Background()
	if err := e.tb.CP.CreateNamespace(ctx, ns); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.c.AppsV1().StatefulSets(ns).Create(ctx, controlplane.StatefulSet(ns, name, 1), metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = e.c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	var node string
	e.waitFor(2*time.Minute, "pod "+name+"-0 Running with its volume attached", func() (bool, error) {
		p, err := e.c.CoreV1().Pods(ns).Get(ctx, name+"-0", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			return false, nil
		}
		node = p.Spec.NodeName
		return e.tb.CP.AttachedNode(context.Background(), ns, "data-"+name+"-0") == node, nil
	})
	return node
}

func (e *env) waitFor(limit time.Duration, desc string, cond func() (bool, error)) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := e.tb.CP.WaitFor(ctx, desc, cond); err != nil {
		e.t.Fatalf("%s: %v", desc, err)
	}
}

func (e *env) node(name string) *corev1.Node {
	e.t.Helper()
	n, err := e.c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// events returns the reasons of the Events recorded on a node.
func (e *env) events(node string) []string {
	list, err := e.c.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		last := ev.LastTimestamp.Time
		if last.IsZero() {
			last = ev.EventTime.Time
		}
		if last.Before(e.start.Add(-time.Second)) {
			continue // an earlier test's
		}
		out = append(out, ev.Reason)
	}
	return out
}

// hasEvent reports whether the node gets an Event with the reason within
// eventLag: the agent's Events go through client-go's asynchronous
// broadcaster, so one can land just after the change it explains.
func (e *env) hasEvent(node, reason string) bool {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventLag)
	defer cancel()
	return controlplane.WaitFor(ctx, nil, "Event "+reason+" on "+node, func() (bool, error) {
		return slices.Contains(e.events(node), reason), nil
	}) == nil
}

// eventLag bounds how long an Event may trail what it records.
const eventLag = 10 * time.Second

// neverTainted fails if the node gets the out-of-service taint within d.
func (e *env) neverTainted(node string, d time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
	defer cancel()
	if err := controlplane.Consistently(ctx, d, node+" never tainted", func() (bool, error) {
		return !cluster.HasOutOfServiceTaint(e.node(node)), nil
	}); err != nil {
		e.t.Fatal(err)
	}
}
