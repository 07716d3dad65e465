package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/fence"
)

// The kubelet dies but the machine stays On (a hung kubelet). Nothing may
// happen before fenceAfter; then the agent powers the node off, confirms the
// Off, taints, and the pod moves.
func TestKubeletDeadNodeIsPoweredOffOnlyAfterFenceAfter(t *testing.T) {
	e := newEnv(t)
	e.agent("a1", "policy:\n  fenceAfter: 40s\n")
	node := e.statefulSet("kubelet-dead", "web")
	start := time.Now()
	if err := e.tb.KubeletStop(node); err != nil {
		t.Fatal(err)
	}
	// Until fenceAfter (40 s of silence; the last heartbeat may predate the
	// kill by up to 10 s): no ForceOff, no taint.
	deadline := start.Add(28 * time.Second)
	e.waitFor(40*time.Second, "fenceAfter to approach with nothing done", func() (bool, error) {
		if e.forceOffsSince(node) > 0 {
			return false, fmt.Errorf("ForceOff sent %s after the kubelet died, before fenceAfter", time.Since(start))
		}
		if cluster.HasOutOfServiceTaint(e.node(node)) {
			return false, fmt.Errorf("tainted a node whose machine is On")
		}
		return time.Now().After(deadline), nil
	})
	e.waitFor(60*time.Second, node+" powered off and tainted", func() (bool, error) {
		return cluster.HasOutOfServiceTaint(e.node(node)), nil
	})
	if on, _ := e.tb.MachineOn(node); e.forceOffsSince(node) < 1 || on {
		t.Errorf("%s: %d power-offs, machine on %v; want a power-off and the machine off", node, e.forceOffsSince(node), on)
	}
	if elapsed := time.Since(start); elapsed < 40*time.Second {
		t.Errorf("tainted %s after the kubelet died; fenceAfter is 40s", elapsed)
	}
	e.podMovedOff("kubelet-dead", "web-0", node, 60*time.Second)
	for _, r := range []string{"FenceWaiting", "FencePowerOff", "FenceConfirmedOff", "FenceTainted"} {
		if !e.hasEvent(node, r) {
			t.Errorf("no %s Event; events: %v", r, e.events(node))
		}
	}
}

// Faults that must never end in a taint, on three nodes at once: a reboot
// through a slow POST (n2), a lying BMC on a node whose kubelet died (n3),
// and a BMC that stops answering while its node loses power (n4).
func TestNoTaintWithoutProof(t *testing.T) {
	e := newEnv(t)
	a := e.agent("a1", "policy:\n  fenceAfter: 30s\n  powerTimeout: 10s\n  powerOffAttempts: 2\n")
	if err := e.tb.SetFaults("n3", redfishmock.Faults{IgnoreCommands: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.tb.SetFaults("n4", redfishmock.Faults{Hang: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.tb.Reboot("n2"); err != nil {
		t.Fatal(err)
	}
	if err := e.tb.KubeletStop("n3"); err != nil {
		t.Fatal(err)
	}
	if err := e.tb.PowerLoss("n4"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := sharedCP.WaitFor(ctx, "n3 Stuck (lying BMC) after 80 s with no taint anywhere", func() (bool, error) {
		for _, n := range []string{"n2", "n3", "n4"} {
			if cluster.HasOutOfServiceTaint(e.node(n)) {
				return false, fmt.Errorf("%s tainted without a settled Off", n)
			}
		}
		stuck, _ := a.Metric("bmcfence_node_phase", `node="n3"`, `phase="Stuck"`)
		return stuck == 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if k := e.forceOffsSince("n3"); k != 2 {
		t.Errorf("n3 got %d ForceOffs, want powerOffAttempts=2", k)
	}
	if !e.hasEvent("n3", "FenceStuck") {
		t.Errorf("n3 events: %v", e.events("n3"))
	}
	if !e.hasEvent("n4", "FenceCannotVerify") {
		t.Errorf("n4 events: %v", e.events("n4"))
	}
	if v, _ := a.Metric("bmcfence_bmc_errors_total", `reason="timeout"`); v < 1 {
		t.Errorf("bmcfence_bmc_errors_total{reason=timeout} = %v, want > 0", v)
	}
	if v, _ := a.Metric("bmcfence_node_phase", `node="n2"`, `phase="Healthy"`); v != 1 {
		t.Errorf("n2 (rebooted) is not back to Healthy")
	}
	if e.forceOffsSince("n2") != 0 {
		t.Errorf("a ForceOff was sent to the rebooting n2")
	}
}

// A fenced node comes back: our taint is removed once it is Ready with a
// fresh lease; someone else's out-of-service taint on another node stays.
func TestReturningNodeLosesOnlyOurTaint(t *testing.T) {
	e := newEnv(t)
	e.agent("a1", "")
	// n5 carries someone else's taint (a human's): not ours to remove.
	e.addForeignTaint("n5")
	if err := e.tb.PowerLoss("n1"); err != nil {
		t.Fatal(err)
	}
	e.waitFor(60*time.Second, "n1 tainted", func() (bool, error) { return cluster.HasOutOfServiceTaint(e.node("n1")), nil })
	e.waitFor(30*time.Second, "n1 Fenced", func() (bool, error) { return e.phase("n1") == "Fenced", nil })
	if err := e.tb.PowerRestore("n1"); err != nil {
		t.Fatal(err)
	}
	e.waitFor(90*time.Second, "n1 back and untainted", func() (bool, error) { return !cluster.HasOutOfServiceTaint(e.node("n1")), nil })
	if !e.hasEvent("n1", "FenceUntainted") {
		t.Errorf("n1 events: %v", e.events("n1"))
	}
	n5 := e.node("n5")
	if !cluster.HasOutOfServiceTaint(n5) || n5.Annotations[cluster.AnnotationTaintOwner] != "" {
		t.Errorf("the foreign taint on n5 was touched: taints %v", n5.Spec.Taints)
	}
}

// Four of six nodes' kubelets stop at once while their machines run (BMCs
// read On): more than 55%, a storm or a partition. Past fenceAfter the storm
// guard powers none of them off, and says why once (FenceStorm). Nodes
// whose BMCs read Off instead (a power loss) would be fenced: a partition
// cannot fake an Off (the scale harness shows both).
func TestStormGuardFencesNoneAndSaysWhy(t *testing.T) {
	e := newEnv(t)
	a := e.agent("a1", "policy:\n  fenceAfter: 25s\n")
	failed := []string{"n1", "n2", "n3", "n4"}
	for _, n := range failed {
		if err := e.tb.KubeletStop(n); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor(90*time.Second, "a storm-guard refusal", func() (bool, error) {
		v, err := a.Metric("bmcfence_storm_guard_refusals_total", `reason="ClusterUnhealthy"`)
		return v >= 1, err
	})
	for _, n := range failed {
		e.neverTainted(n, 5*time.Second)
	}
	e.neverTainted("n1", 20*time.Second)
	for _, n := range failed {
		if k := e.forceOffsSince(n); k != 0 {
			t.Errorf("%s got %d ForceOffs in a storm", n, k)
		}
	}
	msg := e.eventMessage(failed, "FenceStorm")
	if !strings.Contains(msg, "of 6 nodes are unhealthy") {
		t.Errorf("storm message %q does not give the numbers", msg)
	}
}

// Two agents: exactly one leads. The leader is SIGKILLed mid-fence; the other
// takes over from the annotation, completes the fence, and no taint leaks.
func TestTwoAgentsOneActsAndACrashResumes(t *testing.T) {
	e := newEnv(t)
	a1 := e.agent("a1", "")
	a2 := e.agent("a2", "")
	e.waitFor(30*time.Second, "exactly one leader", func() (bool, error) {
		return a1.Leading() != a2.Leading(), nil
	})
	leader, standby := a1, a2
	if a2.Leading() {
		leader, standby = a2, a1
	}
	if err := e.tb.PowerLoss("n1"); err != nil {
		t.Fatal(err)
	}
	e.waitFor(60*time.Second, "n1 confirming Off", func() (bool, error) { return e.phase("n1") == "ConfirmingOff", nil })
	leader.Kill()
	t.Logf("killed the leader %s mid-fence (SIGKILL)", leader.Name)
	e.waitFor(90*time.Second, "the standby takes over and fences n1", func() (bool, error) {
		return standby.Leading() && cluster.HasOutOfServiceTaint(e.node("n1")) && e.phase("n1") == "Fenced", nil
	})
	if v, _ := standby.Metric("bmcfence_fences_total"); v != 1 {
		t.Errorf("the new leader applied %v taints, want 1", v)
	}
	tainted := 0
	for _, r := range e.events("n1") {
		if r == "FenceTainted" {
			tainted++
		}
	}
	if tainted != 1 {
		t.Errorf("%d FenceTainted events on n1, want 1", tainted)
	}
	if err := e.tb.PowerRestore("n1"); err != nil {
		t.Fatal(err)
	}
	e.waitFor(90*time.Second, "n1 back and untainted", func() (bool, error) { return !cluster.HasOutOfServiceTaint(e.node("n1")), nil })
}

// Failover through an IPMI BMC (ipmi_sim, spoken to in Go): its system GUID
// is the node's systemUUID, and the fence sends its own power-off to the
// machine that lost power (only an Off we caused is proof).
func TestFailoverThroughIPMI(t *testing.T) {
	e := newEnv(t)
	e.agent("a1", "")
	if err := e.tb.PowerLoss("n6"); err != nil {
		t.Fatal(err)
	}
	e.waitFor(60*time.Second, "n6 (IPMI) tainted", func() (bool, error) { return cluster.HasOutOfServiceTaint(e.node("n6")), nil })
	if !e.hasEvent("n6", "FenceConfirmedOff") {
		t.Errorf("n6 events: %v", e.events("n6"))
	}
	if e.forceOffsSince("n6") < 1 {
		t.Error("no chassis power off of our own before the taint")
	}
}

// Why 1 of the safety issue, as reproduced on this control plane: a node
// whose kubelet stops while its machine restarts with a 40 s off-dwell (n5)
// was tainted at +20 s on an Off it did not cause, and the machine read On
// again at +40 s. Now the agent sends its own ForceOff during the dwell; the
// BMC accepts it and the machine stays off, so the taint is on a machine
// that is off for good.
func TestRestartOffDwellIsNotTakenForAnOff(t *testing.T) {
	e := newEnv(t)
	e.agent("a1", "")
	start := time.Now()
	if err := e.tb.Reboot("n5"); err != nil {
		t.Fatal(err)
	}
	var tainted time.Duration
	e.waitFor(90*time.Second, "n5 tainted", func() (bool, error) {
		if cluster.HasOutOfServiceTaint(e.node("n5")) {
			tainted = time.Since(start)
			return true, nil
		}
		return false, nil
	})
	if e.forceOffsSince("n5") < 1 {
		t.Fatalf("tainted at +%s without a ForceOff of ours (the Off was the restart's)", tainted.Round(100*time.Millisecond))
	}
	// Past the restart's 40 s dwell and a power-on: it stays off.
	e.waitFor(60*time.Second, "n5 staying off 30 s past its restart's dwell", func() (bool, error) {
		if on, err := e.tb.MachineOn("n5"); on || err != nil {
			return false, fmt.Errorf("n5's machine runs again (%v) after the taint at +%s", err, tainted.Round(100*time.Millisecond))
		}
		return time.Since(start) > 40*time.Second+30*time.Second, nil
	})
	t.Logf("n5: our ForceOff during the restart's dwell, tainted at +%.1fs, off for good", tainted.Seconds())
}

// The deploy manifests render with kustomize and the API server accepts
// every object (server-side dry-run).
func TestDeployManifestsAreValid(t *testing.T) {
	kubectl := sharedCP.BinDir() + "/kubectl"
	for _, dir := range []string{"../../deploy/base", "../../deploy/overlays/local"} {
		rendered, err := exec.Command(kubectl, "kustomize", dir).Output()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		apply := exec.Command(kubectl, "--kubeconfig", sharedCP.Kubeconfig(), "apply", "--dry-run=server", "-f", "-")
		apply.Stdin = strings.NewReader(string(rendered))
		if out, err := apply.CombinedOutput(); err != nil {
			t.Errorf("server-side dry-run of %s: %v\n%s", dir, err, out)
		}
	}
}

// The agent's footprint on the e2e cluster: RSS ≤ 100 MiB, idle CPU ≤ 2%.
func TestAgentFootprint(t *testing.T) {
	e := newEnv(t)
	a := e.agent("a1", "")
	e.waitFor(30*time.Second, "leadership", func() (bool, error) { return a.Leading(), nil })
	// A measurement window, not a synchronisation: let start-up settle,
	// then count CPU over 30 s of an idle cluster.
	<-time.After(10 * time.Second)
	c0, err := a.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	window := 30 * time.Second
	<-time.After(window)
	c1, _ := a.CPUTime()
	rss, err := a.RSS()
	if err != nil {
		t.Fatal(err)
	}
	cpu := float64(c1-c0) / float64(time.Since(start))
	t.Logf("agent: RSS %.1f MiB, idle CPU %.2f%% of a core over %s", float64(rss)/(1<<20), cpu*100, window)
	fmt.Printf("agent footprint: RSS %.1f MiB, idle CPU %.2f%%\n", float64(rss)/(1<<20), cpu*100)
	if rss > 100<<20 {
		t.Errorf("RSS %d MiB > 100 MiB", rss>>20)
	}
	if cpu > 0.02 {
		t.Errorf("idle CPU %.2f%% > 2%%", cpu*100)
	}
}

// ---- helpers ----

func (e *env) phase(node string) string {
	raw := e.node(node).Annotations[cluster.AnnotationState]
	if raw == "" {
		return "Healthy"
	}
	s, err := fence.Decode(raw)
	if err != nil {
		return "undecodable"
	}
	return s.Phase.String()
}

func (e *env) addForeignTaint(node string) {
	e.t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: cluster.TaintKey, Value: "by-hand", Effect: corev1.TaintEffectNoSchedule})
		_, err = e.c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) eventMessage(nodes []string, reason string) string {
	for _, n := range nodes {
		list, err := e.c.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + n})
		if err != nil {
			continue
		}
		for _, ev := range list.Items {
			if ev.Reason == reason {
				return ev.Message
			}
		}
	}
	return ""
}

// podMovedOff waits for a StatefulSet pod to run on another node with its
// volume.
func (e *env) podMovedOff(ns, pod, node string, limit time.Duration) {
	e.t.Helper()
	claim := "data-" + pod
	e.waitFor(limit, pod+" Running elsewhere with its volume", func() (bool, error) {
		p, err := e.c.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == node || p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		on := e.tb.CP.AttachedNode(context.Background(), ns, claim)
		return on != "" && on != node, nil
	})
}
