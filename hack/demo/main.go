// Command demo is `make demo`: a local control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, one kwok kubelet per node), a
// Redfish mock as every node's BMC, and the fence-agent with its default
// policy. A StatefulSet with a volume runs; its node loses power; the demo
// prints the failover as it happens, then powers the node back on and shows
// the taint removed. Everything stops when it ends (or on Ctrl-C).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/test/controlplane"
	"github.com/bmcfence/bmcfence/test/testbed"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding fence-agent and bin/e2e")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *bin); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo: %v\n", err)
		os.Exit(1)
	}
}

const (
	bold  = "\033[1m"
	dim   = "\033[2m"
	green = "\033[32m"
	reset = "\033[0m"
)

func step(format string, args ...any) {
	fmt.Printf("\n%s== %s%s\n", bold, fmt.Sprintf(format, args...), reset)
}

func run(ctx context.Context, bin string) error {
	dir, err := os.MkdirTemp("", "bmcfence-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	quiet := func(string, ...any) {}

	step("Starting a local control plane with four nodes (etcd, apiserver, controller-manager, scheduler, kwok)")
	t0 := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{BinDir: filepath.Join(bin, "e2e"), WorkDir: filepath.Join(dir, "cp"), Logf: quiet})
	if err != nil {
		return err
	}
	defer cp.Stop()
	tb, err := testbed.Start(ctx, cp, testbed.Options{Logf: quiet}, dir)
	if err != nil {
		return err
	}
	defer tb.Stop()
	fmt.Printf("   up in %.1fs; BMCs: a Redfish mock at %s, one system per node\n", time.Since(t0).Seconds(), tb.Mock.URL)

	step("Starting the bmcfence agent (default policy: suspect after 20s of silence, 3 Off reads over 6s)")
	cfg, err := tb.AgentConfig("")
	if err != nil {
		return err
	}
	agent, err := tb.StartAgent(ctx, filepath.Join(bin, "fence-agent"), "demo", cfg)
	if err != nil {
		return err
	}
	defer agent.Stop()
	fmt.Printf("   agent log: %s\n", agent.LogPath)

	c := cp.Client()
	step("Running a StatefulSet with a volume")
	if err := cp.CreateNamespace(ctx, "demo"); err != nil {
		return err
	}
	if _, err := c.AppsV1().StatefulSets("demo").Create(ctx, controlplane.StatefulSet("demo", "db", 1), metav1.CreateOptions{}); err != nil {
		return err
	}
	var node string
	if err := cp.WaitFor(ctx, "db-0 Running with its volume", func() (bool, error) {
		p, err := c.CoreV1().Pods("demo").Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		node = p.Spec.NodeName
		return cp.AttachedNode(ctx, "demo", "data-db-0") == node, nil
	}); err != nil {
		return err
	}
	fmt.Printf("   db-0 runs on %s%s%s, its volume attached there\n", bold, node, reset)
	// Give the agent a heartbeat or two to watch.
	if err := sleep(ctx, 12*time.Second); err != nil {
		return err
	}

	step("Cutting %s's power (its BMC reads Off, its kubelet dies)", node)
	start := time.Now()
	if err := tb.PowerLoss(node); err != nil {
		return err
	}
	tl := timeline{start: start}
	tl.mark("power lost")
	err = cp.WaitFor(ctx, "the failover", func() (bool, error) {
		events := reasons(ctx, c, node, start)
		if !tl.has("detected") && events["FenceSuspect"] {
			tl.mark("detected: no heartbeat for 20s, reading the BMC")
		}
		if !tl.has("confirmed") && events["FenceConfirmedOff"] {
			tl.mark("confirmed: BMC read Off 3 times over 6s")
		}
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil && !tl.has("tainted") && cluster.HasOutOfServiceTaint(n) {
			tl.mark("tainted: node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")
		}
		p, err := c.CoreV1().Pods("demo").Get(ctx, "db-0", metav1.GetOptions{})
		if !tl.has("pods moved") && (err != nil || p.Spec.NodeName != node) {
			tl.mark("pods moved: the old db-0 is deleted")
		}
		on := cp.AttachedNode(ctx, "demo", "data-db-0")
		if !tl.has("volumes detached") && tl.has("pods moved") && on != node {
			tl.mark("volumes detached from " + node)
		}
		if err == nil && p.Spec.NodeName != node && p.Status.Phase == corev1.PodRunning && on == p.Spec.NodeName && on != "" {
			tl.mark(fmt.Sprintf("replacement db-0 Running on %s with its volume", p.Spec.NodeName))
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("   %stotal: %.1fs from power loss to the replacement Running%s\n", green+bold, time.Since(start).Seconds(), reset)

	step("Powering %s back on (the BMC's On; it boots in ~10s)", node)
	back := timeline{start: time.Now()}
	if err := tb.PowerRestore(node); err != nil {
		return err
	}
	back.mark("power restored")
	err = cp.WaitFor(ctx, "the taint removed", func() (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if !back.has("Ready") && cluster.NodeReady(n) && cp.NodeAlive(node) {
			back.mark(node + " Ready again, its kubelet renewing its lease")
		}
		if !cluster.HasOutOfServiceTaint(n) {
			back.mark("our taint removed: " + node + " takes work again")
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	step("Done. Everything stops now.")
	return nil
}

// timeline prints events as they happen, with the time since start.
type timeline struct {
	start time.Time
	seen  []string
}

func (t *timeline) mark(what string) {
	t.seen = append(t.seen, what)
	fmt.Printf("   %s+%5.1fs%s  %s\n", dim, time.Since(t.start).Seconds(), reset, what)
}

func (t *timeline) has(prefix string) bool {
	for _, s := range t.seen {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func reasons(ctx context.Context, c kubernetes.Interface, node string, since time.Time) map[string]bool {
	out := map[string]bool{}
	list, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
	if err != nil {
		return out
	}
	for _, e := range list.Items {
		if !e.LastTimestamp.Time.Before(since.Add(-time.Second)) {
			out[e.Reason] = true
		}
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
