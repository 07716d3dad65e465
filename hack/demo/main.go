// Command demo is `make demo`: a local control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, one kwok kubelet per node), a
// Redfish mock as every node's BMC, and the fence-agent with its default
// policy. A StatefulSet with a volume runs; its node loses power; the demo
// prints the failover as it happens, then powers the node back on and shows
// the taint removed. Everything stops when it ends (or on Ctrl-C).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/cluster/history"
	"github.com/bmcfence/bmcfence/test/controlplane"
	"github.com/bmcfence/bmcfence/test/testbed"
)

func main() {
	var opts options
	flag.StringVar(&opts.bin, "bin", "bin", "directory holding fence-agent, bmcfence-cli and bin/e2e")
	flag.StringVar(&opts.svg, "svg", "", "also write the fence's timeline as SVG to this file (kubectl fence history NODE RECORD -o svg)")
	flag.StringVar(&opts.record, "record", "", "also write the fence's BMCFenceRecord as JSON to this file")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil {
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

// options are the demo's flags.
type options struct {
	bin    string
	svg    string
	record string
}

func run(ctx context.Context, opts options) error {
	bin := opts.bin
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
	pr := newProof(os.Stdout, start, time.Now, true)
	pr.once(stepPowerLost, "power lost")
	err = cp.WaitFor(ctx, "the failover", func() (bool, error) {
		v := failoverView{Node: node, Events: nodeEvents(ctx, c, node, start), VolumeOn: cp.AttachedNode(ctx, "demo", "data-db-0")}
		if n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
			v.Tainted = cluster.HasOutOfServiceTaint(n)
		}
		if p, err := c.CoreV1().Pods("demo").Get(ctx, "db-0", metav1.GetOptions{}); err == nil {
			v.PodNode, v.PodRunning = p.Spec.NodeName, p.Status.Phase == corev1.PodRunning
		}
		return pr.failover(v), nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("   %stotal: %.1fs from power loss to the replacement Running%s\n", green+bold, time.Since(start).Seconds(), reset)

	step("Powering %s back on (the BMC's On; it boots in ~10s)", node)
	back := newProof(os.Stdout, time.Now(), time.Now, true)
	if err := tb.PowerRestore(node); err != nil {
		return err
	}
	back.once(stepPowerBack, "power restored")
	err = cp.WaitFor(ctx, "the taint removed", func() (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return back.recovery(recoveryView{Node: node, Ready: cluster.NodeReady(n) && cp.NodeAlive(node), Tainted: cluster.HasOutOfServiceTaint(n)}), nil
	})
	if err != nil {
		return err
	}

	step("The fence's record, as a postmortem reads it")
	if err := showRecord(ctx, cp, bin, cfg, node, opts); err != nil {
		return err
	}
	step("Done. Everything stops now.")
	return nil
}

// showRecord waits for the node's fence record to be closed (the agent
// closes it once the node is back), prints `kubectl fence history NODE
// RECORD --timeline` of it, and writes what opts ask for.
func showRecord(ctx context.Context, cp *controlplane.ControlPlane, bin, cfg, node string, opts options) error {
	fc, err := fencingclient.NewForConfig(cp.RESTConfig())
	if err != nil {
		return err
	}
	var rec v1alpha1.BMCFenceRecord
	err = cp.WaitFor(ctx, "the fence record closed", func() (bool, error) {
		list, err := fc.FencingV1alpha1().BMCFenceRecords().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRecordNode + "=" + node})
		if err != nil || len(list.Items) == 0 {
			return false, nil
		}
		history.SortNewestFirst(list.Items)
		rec = list.Items[0]
		return rec.Status.FinishedAt != nil, nil
	})
	if err != nil {
		return err
	}
	if opts.record != "" {
		b, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(opts.record, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Printf("   wrote %s (the BMCFenceRecord)\n", opts.record)
	}
	cli := func(args ...string) ([]byte, error) {
		args = append(args, "--kubeconfig", cp.Kubeconfig(), "--config", cfg)
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "bmcfence-cli"), args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("kubectl fence %s: %w: %s", strings.Join(args[:len(args)-4], " "), err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
	fmt.Printf("   $ kubectl fence history %s %s --timeline\n", node, rec.Name)
	out, err := cli("history", node, rec.Name, "--timeline")
	if err != nil {
		return err
	}
	for _, line := range strings.SplitAfter(string(out), "\n") {
		switch line {
		case "":
		case "\n":
			fmt.Println()
		default:
			fmt.Print("   " + line)
		}
	}
	if opts.svg != "" {
		svg, err := cli("history", node, rec.Name, "-o", "svg")
		if err != nil {
			return err
		}
		if err := os.WriteFile(opts.svg, svg, 0o644); err != nil {
			return err
		}
		fmt.Printf("   wrote %s (kubectl fence history %s %s -o svg)\n", opts.svg, node, rec.Name)
	}
	return nil
}

// nodeEvents lists the node's Events since a time, oldest first (by
// time, then by name: Event names end in the nanoseconds of their
// creation, finer than their one-second timestamps).
func nodeEvents(ctx context.Context, c kubernetes.Interface, node string, since time.Time) []nodeEvent {
	list, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
	if err != nil {
		return nil
	}
	items := slices.DeleteFunc(list.Items, func(e corev1.Event) bool { return e.LastTimestamp.Time.Before(since.Add(-time.Second)) })
	slices.SortStableFunc(items, func(a, b corev1.Event) int {
		if c := a.FirstTimestamp.Compare(b.FirstTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var out []nodeEvent
	for _, e := range items {
		out = append(out, nodeEvent{Reason: e.Reason, Message: e.Message})
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
