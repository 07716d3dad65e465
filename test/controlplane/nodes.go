package controlplane

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"k8s.io/client-go/util/retry"
	"os"
	"path/filepath"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

//go:embed stages/*.yaml
var stageFiles embed.FS

// NodeLeaseDurationSeconds is what every kwok puts on its node's Lease. 40 s
// is the kubelet's default; kwok, like the kubelet, renews at a quarter of it
// (every 10 s, 4 % jitter).
const NodeLeaseDurationSeconds = 40

// NodeSpec describes a fake node.
type NodeSpec struct {
	Name       string
	Labels     map[string]string // added to kubernetes.io/{hostname,os,arch}
	SystemUUID string            // status.nodeInfo.systemUUID (what a BMC reports)
	// Capacity (= allocatable). Zero values default to 4 CPUs, 16Gi, 110 pods.
	CPU, Memory, Pods resource.Quantity
}

// node is one fake node: its kwok (the "kubelet") and whether that kubelet
// is alive. mu serialises kill/restart with the volume reporter's writes, so
// that once KillNode returns nothing writes on the node's behalf any more.
type node struct {
	spec       NodeSpec
	idx        int
	kubeconfig string
	home       string

	mu    sync.Mutex
	proc  *process
	alive bool
}

// AddNode creates the Node object (with the attach/detach annotation and
// capacity a kubelet would register, and a CSINode for the e2e driver),
// starts a kwok that manages only this node with the node's own credentials,
// and waits until the node is Ready.
func (cp *ControlPlane) AddNode(ctx context.Context, spec NodeSpec) error {
	if spec.Name == "" {
		return errors.New("AddNode: empty node name")
	}
	cp.mu.Lock()
	if cp.stopped {
		cp.mu.Unlock()
		return errors.New("AddNode: control plane stopped")
	}
	if _, dup := cp.nodes[spec.Name]; dup {
		cp.mu.Unlock()
		return fmt.Errorf("AddNode: node %q already exists", spec.Name)
	}
	cp.nodeSeq++
	n := &node{spec: spec, idx: cp.nodeSeq}
	cp.nodes[spec.Name] = n
	cp.mu.Unlock()

	if err := cp.createNodeObjects(ctx, spec); err != nil {
		return fmt.Errorf("node %s: %w", spec.Name, err)
	}
	kp, err := cp.pki.nodeClient(spec.Name)
	if err != nil {
		return err
	}
	if n.kubeconfig, err = cp.writeKubeconfig("kwok-"+spec.Name, kp); err != nil {
		return err
	}
	n.home = filepath.Join(cp.workDir, "kwok", spec.Name)
	if err := os.MkdirAll(n.home, 0o700); err != nil {
		return err
	}
	started := time.Now()
	if err := cp.startKwok(n); err != nil {
		return err
	}
	if err := cp.waitNodeReady(ctx, n, started); err != nil {
		return err
	}
	cp.logf("controlplane: node %s Ready in %.1fs", spec.Name, time.Since(started).Seconds())
	return nil
}

func (cp *ControlPlane) createNodeObjects(ctx context.Context, spec NodeSpec) error {
	labels := map[string]string{
		corev1.LabelHostname:   spec.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
	}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    orDefault(spec.CPU, "4"),
		corev1.ResourceMemory: orDefault(spec.Memory, "16Gi"),
		corev1.ResourcePods:   orDefault(spec.Pods, "110"),
	}
	obj := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   spec.Name,
			Labels: labels,
			Annotations: map[string]string{
				// Set by every kubelet at registration; without it the
				// attach/detach controller ignores the node's volumes.
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
		},
	}
	created, err := cp.client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	// Capacity and identity as a kubelet reports them; kwok's node-initialize
	// stage keeps both when it marks the node Ready. The node lifecycle
	// controller may touch the new node meanwhile (a not-ready taint), so
	// the write retries on conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := cp.client.CoreV1().Nodes().Get(ctx, spec.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Capacity = capacity
		cur.Status.Allocatable = capacity
		cur.Status.NodeInfo.SystemUUID = spec.SystemUUID
		_, err = cp.client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	// The kubelet's CSI plugin manager registers installed drivers here.
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{
			Name: spec.Name,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: created.Name, UID: created.UID,
			}},
		},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
			Name: CSIDriverName, NodeID: spec.Name,
		}}},
	}
	_, err = cp.client.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{})
	return err
}

func orDefault(q resource.Quantity, def string) resource.Quantity {
	if q.IsZero() {
		return resource.MustParse(def)
	}
	return q
}

// kwokConfigPath writes the embedded stages once and returns the file.
func (cp *ControlPlane) kwokConfigPath() (string, error) {
	path := filepath.Join(cp.workDir, "kwok", "stages.yaml")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	var all bytes.Buffer
	files, err := fs.Glob(stageFiles, "stages/*.yaml")
	if err != nil {
		return "", err
	}
	for _, f := range files {
		data, err := stageFiles.ReadFile(f)
		if err != nil {
			return "", err
		}
		all.WriteString("---\n")
		all.Write(data)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, all.Bytes(), 0o600); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

var kwokConfigMu sync.Mutex

// kwokArgs is the command line of the node's kwok. kwok serves nothing
// (no --server-address, no --node-port), so it needs no port.
func (cp *ControlPlane) kwokArgs(n *node) ([]string, error) {
	kwokConfigMu.Lock()
	config, err := cp.kwokConfigPath()
	kwokConfigMu.Unlock()
	if err != nil {
		return nil, err
	}
	return []string{
		"--kubeconfig=" + n.kubeconfig,
		"--manage-single-node=" + n.spec.Name,
		// Stages from a file, not Stage CRDs: nothing to install in the cluster.
		"--config=" + config,
		fmt.Sprintf("--node-lease-duration-seconds=%d", NodeLeaseDurationSeconds),
		// Per-node pod CIDR and node IP so pods of different kwoks never get
		// the same IP. 192.0.2.0/24 is TEST-NET-1: obviously not routable.
		fmt.Sprintf("--cidr=10.244.%d.0/24", n.idx%250),
		fmt.Sprintf("--node-ip=192.0.2.%d", n.idx%250+1),
	}, nil
}

// startKwok launches the node's kwok and marks the node's kubelet alive.
func (cp *ControlPlane) startKwok(n *node) error {
	args, err := cp.kwokArgs(n)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	p, err := startProcess("kwok-"+n.spec.Name, filepath.Join(cp.binDir, "kwok"), args,
		minimalEnv("HOME="+n.home), cp.LogPath("kwok-"+n.spec.Name))
	if err != nil {
		return err
	}
	n.proc = p
	n.alive = true
	cp.simulator.kick()
	return nil
}

// waitNodeReady waits for Ready=True with a heartbeat at or after since and
// a Lease renewed at or after since (both written by the current kwok).
func (cp *ControlPlane) waitNodeReady(ctx context.Context, n *node, since time.Time) error {
	name := n.spec.Name
	since = since.Truncate(time.Second) // condition times have second precision
	err := cp.WaitFor(ctx, "node "+name+" Ready", func() (bool, error) {
		n.mu.Lock()
		p := n.proc
		n.mu.Unlock()
		if p.exited() {
			return false, p.exitError()
		}
		obj, err := cp.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		// Ready, and a Lease renewed by this kwok. The Ready condition's own
		// heartbeat is not awaited: kwok rewrites it only when the node is
		// not Ready (its heartbeat stage runs every 10-20 minutes), so a
		// kubelet back before the node controller noticed would never
		// write it.
		if !nodeReady(obj) {
			return false, nil
		}
		lease, err := cp.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		return lease.Spec.RenewTime != nil && !lease.Spec.RenewTime.Time.Before(since), nil
	})
	if err != nil && ctx.Err() != nil { // an early exit already carries the log tail
		return fmt.Errorf("%w; last log lines of kwok-%s:\n%s", err, name, tailFile(cp.LogPath("kwok-"+name), 20))
	}
	return err
}

func (cp *ControlPlane) node(name string) (*node, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	n, ok := cp.nodes[name]
	if !ok {
		return nil, fmt.Errorf("no node %q in this control plane", name)
	}
	return n, nil
}

// KillNode SIGKILLs the node's kwok: its kubelet is dead. Lease renewals,
// status updates, pod status and pod deletions for this node stop, and so
// does the node's volumesInUse reporter (its volumes stay "in use", as on a
// dead machine). Nothing else changes; the node controller notices after
// the grace period.
func (cp *ControlPlane) KillNode(name string) error {
	n, err := cp.node(name)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.alive {
		return fmt.Errorf("KillNode: node %s is already dead", name)
	}
	n.alive = false
	n.proc.kill()
	cp.logf("controlplane: killed kwok of node %s (its kubelet is dead)", name)
	return nil
}

// RestartNode starts the node's kwok again and waits until the node is
// Ready with a fresh Lease.
//
// It first deletes the node's Lease: a real kubelet holds the Lease under the
// node's name and renews it at once after a restart, but kwok holds it under a
// random per-process identity and would wait until the dead process's Lease
// expires (up to 40 s) before managing the node again. The new kwok creates
// a fresh Lease immediately.
func (cp *ControlPlane) RestartNode(ctx context.Context, name string) error {
	n, err := cp.node(name)
	if err != nil {
		return err
	}
	n.mu.Lock()
	alive := n.alive
	n.mu.Unlock()
	if alive {
		return fmt.Errorf("RestartNode: node %s is alive; KillNode it first", name)
	}
	err = cp.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("RestartNode: delete stale lease: %w", err)
	}
	started := time.Now()
	if err := cp.startKwok(n); err != nil {
		return err
	}
	if err := cp.waitNodeReady(ctx, n, started); err != nil {
		return err
	}
	cp.logf("controlplane: node %s Ready again %.1fs after restart", name, time.Since(started).Seconds())
	return nil
}

// NodeAlive reports whether the node's kwok (its kubelet) is running.
func (cp *ControlPlane) NodeAlive(name string) bool {
	n, err := cp.node(name)
	if err != nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.alive
}

// Lease returns the node's Lease in kube-node-lease.
func (cp *ControlPlane) Lease(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return cp.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
}
