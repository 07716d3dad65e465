package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GroupLabel names the kwok process that runs a node added by AddNodeGroup.
const GroupLabel = "bmcfence.dev/kwok-group"

// KwokGroup is a set of nodes run by one kwok process (the scale harness:
// a thousand nodes in a few processes instead of one process per node). The
// group fails together: Kill stops every heartbeat of its nodes at once, as
// a rack's PDU or its switch does. Its nodes are not in the per-node
// bookkeeping (KillNode, RestartNode, the volumesInUse reporter).
type KwokGroup struct {
	Name  string
	Nodes []string

	cp   *ControlPlane
	idx  int
	home string

	mu    sync.Mutex
	proc  *process
	alive bool
}

var groupSeq struct {
	sync.Mutex
	n int
}

// AddNodeGroup creates the Node objects of specs (labelled GroupLabel=name),
// starts one kwok that manages exactly them with the admin credentials, and
// waits until all are Ready.
func (cp *ControlPlane) AddNodeGroup(ctx context.Context, name string, specs []NodeSpec) (*KwokGroup, error) {
	if name == "" || len(specs) == 0 {
		return nil, errors.New("AddNodeGroup: a name and at least one node are needed")
	}
	groupSeq.Lock()
	groupSeq.n++
	g := &KwokGroup{Name: name, cp: cp, idx: groupSeq.n}
	groupSeq.Unlock()
	g.home = filepath.Join(cp.workDir, "kwok-groups", name)
	if err := os.MkdirAll(g.home, 0o700); err != nil {
		return nil, err
	}
	// Node objects in parallel: a thousand sequential creates (each two
	// writes and a CSINode) take minutes on two cores.
	var created errgroup.Group
	created.SetLimit(8)
	errs := make([]error, len(specs))
	for i := range specs {
		spec := specs[i]
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		spec.Labels[GroupLabel] = name
		g.Nodes = append(g.Nodes, spec.Name)
		created.Go(func() error {
			// Every node's error, not the first one's: errs below.
			if err := cp.createNodeObjects(ctx, spec); err != nil {
				errs[i] = fmt.Errorf("node %s: %w", spec.Name, err)
			}
			return nil
		})
	}
	_ = created.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	started := time.Now()
	if err := g.start(); err != nil {
		return nil, err
	}
	if err := g.waitReady(ctx); err != nil {
		return nil, err
	}
	cp.logf("controlplane: group %s: %d nodes Ready in %.1fs", name, len(specs), time.Since(started).Seconds())
	return g, nil
}

func (g *KwokGroup) start() error {
	kwokConfigMu.Lock()
	config, err := g.cp.kwokConfigPath()
	kwokConfigMu.Unlock()
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + g.cp.kubeconfig,
		"--manage-nodes-with-label-selector=" + GroupLabel + "=" + g.Name,
		"--config=" + config,
		fmt.Sprintf("--node-lease-duration-seconds=%d", NodeLeaseDurationSeconds),
		// One /16 of pod IPs per group, apart from the per-node kwoks'
		// 10.244.0.0/16.
		fmt.Sprintf("--cidr=10.%d.0.0/16", 100+g.idx%100),
		fmt.Sprintf("--node-ip=198.51.100.%d", g.idx%250+1),
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p, err := startProcess("kwok-group-"+g.Name, filepath.Join(g.cp.binDir, "kwok"), args,
		minimalEnv("HOME="+g.home), g.cp.LogPath("kwok-group-"+g.Name))
	if err != nil {
		return err
	}
	g.cp.addProc(p)
	g.proc, g.alive = p, true
	return nil
}

// waitReady waits until every node of the group is Ready.
func (g *KwokGroup) waitReady(ctx context.Context) error {
	sel := GroupLabel + "=" + g.Name
	return g.cp.WaitFor(ctx, "group "+g.Name+" Ready", func() (bool, error) {
		g.mu.Lock()
		p := g.proc
		g.mu.Unlock()
		if p.exited() {
			return false, p.exitError()
		}
		list, err := g.cp.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, nil
		}
		ready := 0
		for i := range list.Items {
			if nodeReady(&list.Items[i]) {
				ready++
			}
		}
		return ready == len(g.Nodes), nil
	})
}

// Kill SIGKILLs the group's kwok: every node of the group stops renewing
// its Lease at once.
func (g *KwokGroup) Kill() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.alive {
		return fmt.Errorf("group %s is already dead", g.Name)
	}
	g.alive = false
	g.proc.kill()
	g.cp.logf("controlplane: killed kwok of group %s (%d kubelets dead)", g.Name, len(g.Nodes))
	return nil
}

// Alive reports whether the group's kwok runs.
func (g *KwokGroup) Alive() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.alive
}

// Restart starts the group's kwok again, after deleting its nodes' Leases
// (held under the dead process's identity, see RestartNode), and waits
// until every node is Ready.
func (g *KwokGroup) Restart(ctx context.Context) error {
	if g.Alive() {
		return fmt.Errorf("group %s is alive; Kill it first", g.Name)
	}
	for _, n := range g.Nodes {
		err := g.cp.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, n, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("group %s: delete lease %s: %w", g.Name, n, err)
		}
	}
	if err := g.start(); err != nil {
		return err
	}
	return g.waitReady(ctx)
}
