package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/bmcfence/bmcfence/internal/inventory/metal3"
	"github.com/bmcfence/bmcfence/test/controlplane"
)

// Planned reboots, as the ecosystem announces them (docs/failures.md says
// where each comes from): the kubelet's graceful node shutdown, kured's
// reboot lock, medik8s's NodeMaintenance, Cluster API's Machine deletion
// and remediation. Each helper writes exactly what its component writes,
// with that component's identity where it matters (the kubelet's writes
// as the node itself).

// The kubelet's graceful node shutdown (k8s.io/kubernetes v1.34
// pkg/kubelet/nodeshutdown, pkg/kubelet/nodestatus.ReadyCondition).
const (
	ShutdownEventReason   = "Shutdown" // kubeletevents.NodeShutdown
	ShutdownEventMessage  = "Shutdown manager detected shutdown event"
	ShutdownReadyReason   = "KubeletNotReady"
	ShutdownReadyMessage  = "node is shutting down"
	ShutdownPodReason     = "Terminated"
	ShutdownPodMessage    = "Pod was terminated in response to imminent node shutdown."
	ShutdownPodCondReason = "TerminationByKubelet" // v1.PodReasonTerminationByKubelet
)

// GracefulShutdown does what the node's kubelet does when logind tells it
// the machine shuts down and shutdownGracePeriod is set: an Event
// "Shutdown" on the Node; its Ready condition False with reason
// KubeletNotReady and message "node is shutting down" (and the
// NodeNotReady Event); every pod on it Failed, reason Terminated, with a
// DisruptionTarget condition (reason TerminationByKubelet); the volumes
// unmounted (status.volumesInUse emptied); and its Lease renewed every
// 10 s until grace has passed. The kubelet is then gone: call Reboot (or
// PowerLoss...) for what the machine does next, and KubeletStart so the
// kubelet comes back when the machine runs again.
//
// Node and pod writes are made as the node (system:node:NAME); kwok is
// stopped first, since it would set Ready back to True.
func (b *Testbed) GracefulShutdown(ctx context.Context, node string, grace time.Duration) error {
	if err := b.KubeletStop(node); err != nil {
		return err
	}
	nc, err := b.CP.NodeClient(node)
	if err != nil {
		return err
	}
	now := metav1.Now()
	if err := nodeEvent(ctx, nc.CoreV1().Events(metav1.NamespaceDefault), node, ShutdownEventReason, ShutdownEventMessage, now); err != nil {
		return fmt.Errorf("the kubelet's Shutdown Event: %w", err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range n.Status.Conditions {
			c := &n.Status.Conditions[i]
			if c.Type != corev1.NodeReady {
				continue
			}
			if c.Status != corev1.ConditionFalse {
				c.LastTransitionTime = now
			}
			c.Status, c.Reason, c.Message, c.LastHeartbeatTime = corev1.ConditionFalse, ShutdownReadyReason, ShutdownReadyMessage, now
		}
		// The volume manager unmounted the pods' volumes during the grace
		// period (WaitForAllPodsUnmount); the last status update says so.
		n.Status.VolumesInUse = nil
		_, err = nc.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("the kubelet's Ready=False: %w", err)
	}
	if err := nodeEvent(ctx, nc.CoreV1().Events(metav1.NamespaceDefault), node, "NodeNotReady",
		fmt.Sprintf("Node %s status is now: NodeNotReady", node), now); err != nil {
		return err
	}
	pods, err := b.CP.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := nc.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status.Phase = corev1.PodFailed
			cur.Status.Reason, cur.Status.Message = ShutdownPodReason, ShutdownPodMessage
			setPodCondition(&cur.Status, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: ShutdownPodCondReason, Message: ShutdownPodMessage, LastTransitionTime: now})
			setPodCondition(&cur.Status, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now})
			setPodCondition(&cur.Status, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, LastTransitionTime: now})
			for i := range cur.Status.ContainerStatuses {
				cs := &cur.Status.ContainerStatuses[i]
				cs.Ready, cs.Started = false, ptr.To(false)
				cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", FinishedAt: now}}
			}
			_, err = nc.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("the kubelet's status of pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	// The kubelet keeps renewing its Lease until the OS stops it.
	deadline := time.Now().Add(grace)
	for {
		if err := renewLease(ctx, nc, node); err != nil {
			return fmt.Errorf("the kubelet's Lease during its grace period: %w", err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(left, 10*time.Second)):
		}
	}
}

func setPodCondition(st *corev1.PodStatus, c corev1.PodCondition) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == c.Type {
			st.Conditions[i] = c
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
}

// nodeEvent records an Event on a Node as the kubelet does: in the default
// namespace, the involved object's UID being the node's name, source
// kubelet on that host.
func nodeEvent(ctx context.Context, events interface {
	Create(context.Context, *corev1.Event, metav1.CreateOptions) (*corev1.Event, error)
}, node, reason, message string, at metav1.Time) error {
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: node + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(typesUID(node))},
		Reason:         reason, Message: message, Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "kubelet", Host: node},
		FirstTimestamp: at, LastTimestamp: at, Count: 1,
	}
	_, err := events.Create(ctx, ev, metav1.CreateOptions{})
	return err
}

func typesUID(node string) string { return node } // the kubelet's nodeRef carries the name as UID

// renewLease renews the node's Lease as its kubelet does.
func renewLease(ctx context.Context, nc kubernetes.Interface, node string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := nc.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		_, err = nc.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
}

// ---- kured ------------------------------------------------------------------

// kured's defaults (github.com/kubereboot/kured cmd/kured/main.go:
// --ds-namespace kube-system, --ds-name kured, --lock-annotation).
const (
	KuredNamespace      = "kube-system"
	KuredDaemonSet      = "kured"
	KuredLockAnnotation = "weave.works/kured-node-lock"
)

// KuredLock takes kured's reboot lock for the node the way kured does
// before it drains and reboots (pkg/daemonsetlock: a JSON annotation on
// its own DaemonSet, {"nodeID","metadata":{"unschedulable"},"created",
// "TTL"}), creating a kured DaemonSet that runs nowhere if there is none.
// kured then cordons and drains the node, and reboots it.
func (b *Testbed) KuredLock(ctx context.Context, node string) error {
	c := b.CP.Client()
	ds, err := c.AppsV1().DaemonSets(KuredNamespace).Get(ctx, KuredDaemonSet, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		labels := map[string]string{"name": "kured"}
		ds, err = c.AppsV1().DaemonSets(KuredNamespace).Create(ctx, &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: KuredDaemonSet, Namespace: KuredNamespace},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						// It runs nowhere here: only its lock matters.
						NodeSelector: map[string]string{"bmcfence.dev/kured-stand-in": "nowhere"},
						Containers:   []corev1.Container{{Name: "kured", Image: "ghcr.io/kubereboot/kured:1.17.1"}},
					},
				},
			},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	lock, _ := json.Marshal(map[string]any{
		"nodeID": node, "metadata": map[string]any{"unschedulable": false},
		"created": time.Now().UTC().Format(time.RFC3339Nano), "TTL": 0,
	})
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := c.AppsV1().DaemonSets(KuredNamespace).Get(ctx, ds.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[KuredLockAnnotation] = string(lock)
		_, err = c.AppsV1().DaemonSets(KuredNamespace).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// KuredUnlock releases kured's lock (kured removes the annotation once the
// node is back and uncordoned).
func (b *Testbed) KuredUnlock(ctx context.Context) error {
	c := b.CP.Client()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := c.AppsV1().DaemonSets(KuredNamespace).Get(ctx, KuredDaemonSet, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		delete(cur.Annotations, KuredLockAnnotation)
		_, err = c.AppsV1().DaemonSets(KuredNamespace).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// ---- medik8s NodeMaintenance ------------------------------------------------

// NodeMaintenances is medik8s's NodeMaintenance resource
// (github.com/medik8s/node-maintenance-operator api/v1beta1).
var NodeMaintenances = schema.GroupVersionResource{Group: "nodemaintenance.medik8s.io", Version: "v1beta1", Resource: "nodemaintenances"}

// NodeMaintenance creates a NodeMaintenance for the node and does what the
// operator does with it (internal/controller): the node labelled
// remediation.medik8s.io/exclude-from-remediation=true, cordoned, tainted
// node.kubernetes.io/unschedulable:NoSchedule and medik8s.io/drain:NoSchedule,
// a Lease node-NODE in medik8s-leases held by "node-maintenance" for
// 3600 s, and the CR's status.phase Running. (It drains; it does not
// reboot: whoever does the maintenance does.)
func (b *Testbed) NodeMaintenance(ctx context.Context, node, reason string) error {
	if err := b.installStandInCRD(ctx, "ecosystem/nodemaintenance-standin.yaml", NodeMaintenances); err != nil {
		return err
	}
	dyn, err := b.Dynamic()
	if err != nil {
		return err
	}
	nm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
		"metadata": map[string]any{"name": "nm-" + node},
		"spec":     map[string]any{"nodeName": node, "reason": reason},
	}}
	created, err := dyn.Resource(NodeMaintenances).Create(ctx, nm, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating NodeMaintenance nm-%s: %w", node, err)
	}
	created.Object["status"] = map[string]any{"phase": "Running", "lastUpdate": time.Now().UTC().Format(time.RFC3339)}
	if _, err := dyn.Resource(NodeMaintenances).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return err
	}
	c := b.CP.Client()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["remediation.medik8s.io/exclude-from-remediation"] = "true"
		n.Spec.Unschedulable = true
		n.Spec.Taints = append(n.Spec.Taints,
			corev1.Taint{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule},
			corev1.Taint{Key: "medik8s.io/drain", Effect: corev1.TaintEffectNoSchedule})
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	const leaseNS = "medik8s-leases"
	if _, err := c.CoreV1().Namespaces().Get(ctx, leaseNS, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if err := b.CP.CreateNamespace(ctx, leaseNS); err != nil {
			return err
		}
	}
	now := metav1.NewMicroTime(time.Now())
	_, err = c.CoordinationV1().Leases(leaseNS).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "node-" + node, Namespace: leaseNS},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-maintenance"), LeaseDurationSeconds: ptr.To(int32(3600)),
			AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{})
	return err
}

// ---- Cluster API ------------------------------------------------------------

// CAPINamespace holds the stand-in Machines of DeleteMachine and
// RemediateMachine.
const CAPINamespace = metav1.NamespaceDefault

// capiMachine creates machine-NODE as Cluster API has it for a node: the
// finalizer machine.cluster.x-k8s.io, the cluster-name label,
// status.nodeRef, and on the Node the annotations cluster.x-k8s.io/machine,
// cluster-namespace, cluster-name.
func (b *Testbed) capiMachine(ctx context.Context, node string) (*unstructured.Unstructured, error) {
	if err := b.InstallCAPIStandInCRDs(ctx); err != nil {
		return nil, err
	}
	dyn, err := b.Dynamic()
	if err != nil {
		return nil, err
	}
	name := "machine-" + node
	m, err := dyn.Resource(metal3.Machines).Namespace(CAPINamespace).Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return m, nil
	}
	m = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
		"metadata": map[string]any{"name": name, "namespace": CAPINamespace,
			"labels":     map[string]any{"cluster.x-k8s.io/cluster-name": "testbed"},
			"finalizers": []any{"machine.cluster.x-k8s.io"}},
		"spec": map[string]any{"clusterName": "testbed"},
	}}
	if m, err = dyn.Resource(metal3.Machines).Namespace(CAPINamespace).Create(ctx, m, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	m.Object["status"] = map[string]any{"nodeRef": map[string]any{"apiVersion": "v1", "kind": "Node", "name": node}, "phase": "Running"}
	if m, err = dyn.Resource(metal3.Machines).Namespace(CAPINamespace).UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	c := b.CP.Client()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations["cluster.x-k8s.io/machine"] = name
		n.Annotations["cluster.x-k8s.io/cluster-namespace"] = CAPINamespace
		n.Annotations["cluster.x-k8s.io/cluster-name"] = "testbed"
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	return m, err
}

// DeleteMachine deletes the node's Machine as a scale-down or a rollout
// does: the Machine gets a deletionTimestamp (its finalizer holds it), its
// v1beta2 Deleting condition says DrainingNode, and the node is cordoned
// (the Machine controller drains it, then deletes the infrastructure and
// the Node).
func (b *Testbed) DeleteMachine(ctx context.Context, node string) error {
	m, err := b.capiMachine(ctx, node)
	if err != nil {
		return err
	}
	dyn, _ := b.Dynamic()
	if err := dyn.Resource(metal3.Machines).Namespace(CAPINamespace).Delete(ctx, m.GetName(), metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := b.machineConditions(ctx, m.GetName(), map[string]any{"type": "Deleting", "status": "True", "reason": "DrainingNode",
		"message": "Drain not completed yet", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}); err != nil {
		return err
	}
	return b.cordon(ctx, node)
}

// RemediateMachine marks the node's Machine for remediation by its owner,
// as a MachineHealthCheck without an external remediation template does:
// HealthCheckSucceeded False (reason UnhealthyNode) and OwnerRemediated
// False (reason WaitingForRemediation); a human does it with the
// annotation cluster.x-k8s.io/remediate-machine. The owner (a
// MachineSet, KubeadmControlPlane) then deletes the Machine.
func (b *Testbed) RemediateMachine(ctx context.Context, node string) error {
	m, err := b.capiMachine(ctx, node)
	if err != nil {
		return err
	}
	now := time.Now().UTC().Format(time.RFC3339)
	return b.machineConditions(ctx, m.GetName(),
		map[string]any{"type": "HealthCheckSucceeded", "status": "False", "reason": "UnhealthyNode", "lastTransitionTime": now},
		map[string]any{"type": "OwnerRemediated", "status": "False", "reason": "WaitingForRemediation", "lastTransitionTime": now})
}

func (b *Testbed) machineConditions(ctx context.Context, name string, conds ...map[string]any) error {
	dyn, err := b.Dynamic()
	if err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m, err := dyn.Resource(metal3.Machines).Namespace(CAPINamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		status, _ := m.Object["status"].(map[string]any)
		if status == nil {
			status = map[string]any{}
		}
		var list []any
		for _, c := range conds {
			list = append(list, c)
		}
		status["conditions"] = list
		m.Object["status"] = status
		_, err = dyn.Resource(metal3.Machines).Namespace(CAPINamespace).UpdateStatus(ctx, m, metav1.UpdateOptions{})
		return err
	})
}

func (b *Testbed) cordon(ctx context.Context, node string) error {
	c := b.CP.Client()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Unschedulable = true
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// installStandInCRD creates a CRD from test/testdata/FILE (already there is
// fine) and waits until gvr is served.
func (b *Testbed) installStandInCRD(ctx context.Context, file string, gvr schema.GroupVersionResource) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(root, "test", "testdata", file))
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	dyn, err := b.Dynamic()
	if err != nil {
		return err
	}
	crd := &unstructured.Unstructured{Object: obj}
	if _, err := dyn.Resource(crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CRD %s: %w", crd.GetName(), err)
	}
	return b.CP.WaitFor(ctx, gvr.Resource+" served", func() (bool, error) {
		_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
}
