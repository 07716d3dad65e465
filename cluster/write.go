package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/mutant"
)

// writeBackoff paces retries of a node write that lost a race against an
// unrelated write (a kubelet status update, a label): a few quick tries,
// since each retry re-reads the node and the race window is one round trip.
// Each pause is jittered by up to as much again, so the tries fall out of
// step with a writer that writes on a period: 20 tries over 2-4 s (the last
// pauses 0.3-0.6 s). 10 tries over ~1 s (jitter 0.1) were once all lost on a
// loaded 2-core machine to a writer that wrote every 20 ms
// (TestIntegrationSaveStateOneWriterWins). No Cap: wait.Backoff stops the
// retries when the cap is reached.
var writeBackoff = wait.Backoff{Steps: 20, Duration: 10 * time.Millisecond, Factor: 1.2, Jitter: 1}

// nodePatch is a JSON merge patch of a Node that carries the resourceVersion
// it was computed from: the API server applies it only to that version and
// answers 409 Conflict otherwise. This is how Kubernetes writes taints
// (controller.PatchNodeTaints): spec.taints has no merge key, so the whole
// list is replaced and must not overwrite a change we did not see.
type nodePatch struct {
	Metadata nodePatchMeta  `json:"metadata"`
	Spec     *nodePatchSpec `json:"spec,omitempty"`
}

type nodePatchMeta struct {
	ResourceVersion string `json:"resourceVersion"`
	// A nil value deletes the annotation.
	Annotations map[string]*string `json:"annotations,omitempty"`
}

type nodePatchSpec struct {
	// Always serialised: [] and null both clear the list.
	Taints []corev1.Taint `json:"taints"`
}

// patchNode applies p; the view takes in the result at once (adoptNode).
func (c *Cluster) patchNode(ctx context.Context, name string, p nodePatch) error {
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	n, err := c.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: c.component})
	if err != nil {
		return err
	}
	c.adoptNode(n)
	c.serve(n)
	return nil
}

// getNode reads the node from the server; the view takes in what it read
// (adoptNode).
func (c *Cluster) getNode(ctx context.Context, name string) (*corev1.Node, error) {
	n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	c.adoptNode(n)
	c.serve(n)
	return n, nil
}

// A guarded write (SaveState, guardedWrite) reads the node, checks it, and
// patches it with the resourceVersion it read as a precondition: two round
// trips, each 1 to 2.5 s on an API server loaded by 100 power losses at
// 1000 × 30, four times on a fence's way to its taint. The node as the
// server last answered us (our last write's answer, the recheck's read)
// is usually still the server's: a fence's node changes little but by our
// own writes. Its first attempt checks that node instead of reading it
// again, and patches with that node's resourceVersion: if the server's
// node changed since, the precondition fails (409), nothing is written,
// and the retry reads the node afresh, as before. The precondition is what
// makes the check hold for the node written, whichever read it rests on.

// servedNode is a node as the server answered one of our reads or writes,
// and when.
type servedNode struct {
	node *corev1.Node
	at   time.Time
}

const (
	// servedTTL: an answer older than this is not used (a node that
	// changed since would cost a 409 and a read anyway).
	servedTTL = 30 * time.Second
	// servedKeep bounds the nodes remembered: past it, those older than
	// servedTTL are dropped, and then the oldest (a fence's nodes are
	// few; a full node with its images list can weigh 20 KiB).
	servedKeep = 128
)

func (c *Cluster) serve(n *corev1.Node) {
	now := c.clock.Now()
	c.servedMu.Lock()
	defer c.servedMu.Unlock()
	if c.served == nil {
		c.served = map[string]servedNode{}
	}
	if old, ok := c.served[n.Name]; ok {
		// A slow answer that comes after a newer one is older news.
		if !rvAfter(old.node.ResourceVersion, n.ResourceVersion) {
			c.served[n.Name] = servedNode{node: n, at: now}
		}
		return
	}
	if len(c.served) >= servedKeep {
		oldest := ""
		for k, v := range c.served {
			if now.Sub(v.at) >= servedTTL {
				delete(c.served, k)
			} else if oldest == "" || v.at.Before(c.served[oldest].at) {
				oldest = k
			}
		}
		if len(c.served) >= servedKeep {
			delete(c.served, oldest)
		}
	}
	c.served[n.Name] = servedNode{node: n, at: now}
}

// servedNode is the node as the server last answered us, if recent; nil
// otherwise. Callers only read it.
func (c *Cluster) servedNode(name string) *corev1.Node {
	c.servedMu.Lock()
	defer c.servedMu.Unlock()
	v, ok := c.served[name]
	if !ok || c.clock.Now().Sub(v.at) >= servedTTL {
		return nil
	}
	return v.node
}

// nodeForWrite is the node a guarded write's attempt checks: on the first
// attempt the node as the server last answered us, if recent and ok says
// it passes the write's check; otherwise the node read now. A served node
// that fails the check is read again rather than trusted to fail it.
//
// Only a patch checks the node it rests on: a caller that decides on a
// served node to write nothing, or to refuse, must decide again on the node
// read now (served says which it got).
func (c *Cluster) nodeForWrite(ctx context.Context, name string, attempt int, ok func(*corev1.Node) bool) (n *corev1.Node, served bool, err error) {
	if attempt == 1 {
		if n := c.servedNode(name); n != nil && ok(n) {
			return n, true, nil
		}
	}
	n, err = c.getNode(ctx, name)
	return n, false, err
}

// SaveState is the per-node fence lock: a compare-and-swap of the state
// annotation against the API server (never the cache). It takes the node
// as the server last answered us, or reads it (nodeForWrite), compares its
// state annotation with old (absent counts as ""), and writes next,
// removing the request annotation if its id is ackCommandID, in one patch
// preconditioned on that node's resourceVersion.
//
// If the annotation differs from old, another agent or a human wrote it:
// runner.ErrConflict, and nothing is written. If the patch meets a 409, the
// node changed between our read and our write; we read again: a changed
// annotation is ErrConflict, anything else (a status update) is retried, a
// bounded number of times. Two agents can thus never both advance a node
// from the same state.
//
// A write that takes a request in (ackCommandID) is the take: right before
// each patch it asks that the request is still pending (not refused,
// withdrawn or replaced since the runner read it) and that its check
// (OfferRequest) passes, and writes nothing, with ErrRequestNotVouched,
// when the request may no longer be taken.
func (c *Cluster) SaveState(ctx context.Context, node, old, next, ackCommandID string) error {
	attempts := 0
	takenElsewhere := false
	c.takingRequest(node, ackCommandID, true)
	defer c.takingRequest(node, ackCommandID, false) // still pending: the write failed
	err := retry.RetryOnConflict(c.writeBackoff, func() error {
		attempts++
		if err := ctx.Err(); err != nil {
			return err
		}
		// Served or read, the node's state annotation is old: the
		// patch below, preconditioned on its resourceVersion, checks it.
		n, _, err := c.nodeForWrite(ctx, node, attempts, func(n *corev1.Node) bool {
			// A request's take reads the node: it is rare, and the
			// request's own annotations decide it.
			return ackCommandID == "" && n.Annotations[AnnotationState] == old
		})
		if err != nil {
			return err
		}
		if ackCommandID != "" && n.Annotations[AnnotationRequestTaken] == ackCommandID {
			// Another engine took it in (kubectl-fence while no agent
			// ran, or the agent that came back): its state write won.
			takenElsewhere = true
			return fmt.Errorf("node %s: %w: request %s was already taken in by another engine", node, runner.ErrConflict, ackCommandID)
		}
		if cur := n.Annotations[AnnotationState]; cur != old {
			return fmt.Errorf("node %s: %w: the state annotation is not what we last read", node, runner.ErrConflict)
		}
		// The write that would take the request in is the take: asked
		// right before each patch, retries after a 409 included.
		if err := c.vouchRequest(node, ackCommandID); err != nil {
			return err
		}
		annotations := map[string]*string{AnnotationState: nilIfEmpty(next)}
		if ackCommandID != "" {
			annotations[AnnotationRequestTaken] = &ackCommandID
			if r, err := DecodeRequest(n.Annotations[AnnotationRequest]); err == nil && r.ID == ackCommandID {
				annotations[AnnotationRequest] = nil
			}
		}
		return c.patchNode(ctx, node, nodePatch{Metadata: nodePatchMeta{ResourceVersion: n.ResourceVersion, Annotations: annotations}})
	})
	if err == nil || takenElsewhere {
		// Taken, by us or by the other engine: no longer ours to offer.
		c.takeRequest(node, ackCommandID)
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, runner.ErrConflict) {
		return err
	}
	if apierrors.IsConflict(err) {
		return fmt.Errorf("node %s: save fence state: the node kept changing under us (%d attempts): %w", node, attempts, err)
	}
	return fmt.Errorf("node %s: save fence state: %w", node, err)
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// CurrentState reads the state annotation from the API server.
func (c *Cluster) CurrentState(ctx context.Context, node string) (string, error) {
	n, err := c.getNode(ctx, node)
	if err != nil {
		return "", fmt.Errorf("node %s: read fence state: %w", node, err)
	}
	return n.Annotations[AnnotationState], nil
}

// Recheck reads the node and its Lease from the API server. The node is
// alive (LeaseRenewed) if the server holds a Lease renewal, or a Ready
// heartbeat, that our view has not taken in: the same two signs of life the
// observation builder credits. A node we never observed counts as renewed
// if it has either: we cannot tell its silence from our ignorance. It also
// reports our view's signs of life now (HeartbeatAt, RenewedAt): our own
// reads of the node (the state persist's) take in what they read, so the
// runner compares those with the view its decision rested on.
func (c *Cluster) Recheck(ctx context.Context, node string) (runner.Recheck, error) {
	// A plain read: Recheck compares the server with what our informers
	// delivered, and changes nothing. The node and its Lease are read at
	// once (one round trip, not two: the recheck stands between a settled
	// Off and the taint); both reads start after the decision, which is
	// all the recheck needs of them.
	type leaseRead struct {
		lease *coordinationv1.Lease
		err   error
	}
	leaseCh := make(chan leaseRead, 1)
	go func() {
		l, err := c.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
		leaseCh <- leaseRead{l, err}
	}()
	n, err := c.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	lr := <-leaseCh
	if err != nil {
		return runner.Recheck{}, fmt.Errorf("node %s: recheck: %w", node, err)
	}
	// The write the recheck guards checks this node (nodeForWrite).
	c.serve(n)
	var renew time.Time
	lease, err := lr.lease, lr.err
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return runner.Recheck{}, fmt.Errorf("node %s: recheck lease: %w", node, err)
	case lease.Spec.RenewTime != nil:
		renew = lease.Spec.RenewTime.Time
	}
	_, beat := readiness(n)

	c.mu.Lock()
	var leaseSeen, beatSeen signal
	var heartbeatAt, renewedAt time.Time
	if e := c.entries[node]; e != nil {
		leaseSeen, beatSeen = e.obs.lease, e.obs.readyBeat
		heartbeatAt, renewedAt = e.obs.heartbeatAt, e.obs.renewedAt
	}
	c.mu.Unlock()
	return runner.Recheck{
		LeaseRenewed: leaseSeen.newerThanObserved(renew) || beatSeen.newerThanObserved(beat),
		Maintenance:  c.maintenanceInForce(n),
		Excluded:     n.Labels[LabelExclude] == LabelExcludeValue,
		State:        n.Annotations[AnnotationState],
		HeartbeatAt:  heartbeatAt,
		RenewedAt:    renewedAt,
		LeaseMissing: renew.IsZero(),
	}, nil
}

// checkToken is the fencing token's check (invariant 4), made against the
// node as read for the write it guards: the state annotation must be the
// one the caller last wrote. The write then carries that node's
// resourceVersion, so the check and the write are one.
func checkToken(n *corev1.Node, token string) error {
	switch {
	case token == "" || token == runner.NoToken:
		return fmt.Errorf("node %s: no fencing token given: refusing an unguarded write", n.Name)
	case n.Annotations[AnnotationState] != token:
		return fmt.Errorf("node %s: %w: the fence state is not the one this agent wrote (another agent took over)", n.Name, runner.ErrConflict)
	}
	return nil
}

// maintenanceInForce judges the mark on n, as read from the server, the
// way the view does: the value we observed, by when we first saw it; a
// value we have not observed yet is in force from now (it counts from our
// first sight, which is now or later).
func (c *Cluster) maintenanceInForce(n *corev1.Node) bool {
	raw := n.Annotations[AnnotationMaintenance]
	if raw == "" {
		return false
	}
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[n.Name]; e != nil && e.obs.maintenance.raw == raw {
		inForce, _ := e.obs.maintenance.at(now)
		return inForce
	}
	return true
}

// ErrMaintenance is returned by ApplyTaint when the node it read is in
// maintenance: a drain marked it after the runner's recheck.
var ErrMaintenance = errors.New("the node is in maintenance")

// guardedWrite is one write of the fence, guarded by the fencing token: it
// takes the node as the server last answered us, or reads it
// (nodeForWrite), checks the token against it, asks change for the patch
// (nil: nothing to write) and writes it preconditioned on that node's
// resourceVersion, so the check and the write are one. A write that
// lost a race with an unrelated one is computed again (RetryOnConflict).
func (c *Cluster) guardedWrite(ctx context.Context, node, token, what string, change func(*corev1.Node) (*nodePatch, error)) error {
	attempts := 0
	err := retry.RetryOnConflict(c.writeBackoff, func() error {
		attempts++
		n, served, err := c.nodeForWrite(ctx, node, attempts, func(n *corev1.Node) bool {
			// Without the precondition (its mutant) a served node could
			// be stale: read.
			return fence.Enabled(fence.CheckWritePrecondition) && checkToken(n, token) == nil
		})
		if err != nil {
			return err
		}
		if err := checkToken(n, token); err != nil {
			return err
		}
		p, err := change(n)
		if served && (err != nil || p == nil) {
			// Nothing to write, or a refusal, decided on a node no
			// patch checks: decide on the server's node.
			if n, err = c.getNode(ctx, node); err != nil {
				return err
			}
			if err := checkToken(n, token); err != nil {
				return err
			}
			p, err = change(n)
		}
		if err != nil || p == nil {
			return err
		}
		if fence.Enabled(fence.CheckWritePrecondition) {
			p.Metadata.ResourceVersion = n.ResourceVersion
		}
		return c.patchNode(ctx, node, *p)
	})
	if err != nil {
		return fmt.Errorf("node %s: %s: %w", node, what, err)
	}
	return nil
}

// ApplyTaint adds the out-of-service taint, with TimeAdded from our clock,
// and the owner annotation, in one write against the node as read (retried
// on conflict). If a taint with the key is already there, ours or anyone's,
// it does nothing: the node is already out of service, and a foreign taint
// is never claimed. A node in maintenance is refused (ErrMaintenance): the
// drain's mark is written the same way and refuses a taint, so whichever
// write lands first wins and the other sees it.
func (c *Cluster) ApplyTaint(ctx context.Context, node, token string) error {
	return c.guardedWrite(ctx, node, token, "apply the out-of-service taint", func(n *corev1.Node) (*nodePatch, error) {
		if HasOutOfServiceTaint(n) {
			return nil, nil
		}
		if c.maintenanceInForce(n) {
			return nil, ErrMaintenance
		}
		t := OutOfServiceTaint()
		// The API keeps TimeAdded to the second; so does the owner mark.
		t.TimeAdded = ptr.To(metav1.NewTime(c.clock.Now().Truncate(time.Second)))
		taints := append(append(make([]corev1.Taint, 0, len(n.Spec.Taints)+1), n.Spec.Taints...), t)
		return &nodePatch{
			Metadata: nodePatchMeta{Annotations: map[string]*string{AnnotationTaintOwner: ptr.To(TaintOwnerMark(t))}},
			Spec:     &nodePatchSpec{Taints: taints},
		}, nil
	})
}

// RemoveTaint removes our out-of-service taint, the one the owner mark
// names, and the mark, in one write guarded by the fencing token. Without a
// mark it does nothing. A mark left without its taint (someone removed our
// taint by hand) is removed on its own; a taint the mark does not name
// (added later by someone else) is never touched.
func (c *Cluster) RemoveTaint(ctx context.Context, node, token string) error {
	return c.guardedWrite(ctx, node, token, "remove the out-of-service taint", func(n *corev1.Node) (*nodePatch, error) {
		mark, ok := n.Annotations[AnnotationTaintOwner]
		if !ok {
			return nil, nil
		}
		p := &nodePatch{Metadata: nodePatchMeta{Annotations: map[string]*string{AnnotationTaintOwner: nil}}}
		if i := ourTaintIndex(n); i >= 0 && mark == TaintOwnerMark(n.Spec.Taints[i]) {
			// The engine decided on its view (Ready, renewed after our
			// taint); a view that lags may show Ready after the node died
			// again. The server's node, read for this write, must agree.
			if ready, _ := readiness(n); ready != fence.ReadyTrue && !mutant.On(mutant.UntaintServerReady) {
				return nil, fmt.Errorf("node %s: not removing our taint: the API server has the node Ready=%s (our view lags)", node, ready)
			}
			p.Spec = &nodePatchSpec{Taints: append(append([]corev1.Taint{}, n.Spec.Taints[:i]...), n.Spec.Taints[i+1:]...)}
		} else {
			c.log.Info("removing a stale taint-owner annotation (our taint is gone)", zap.String("node", node))
		}
		return p, nil
	})
}

// ForgetTaint removes our owner mark when the taint it names is no longer on
// the node, in one write guarded by the fencing token. It never removes a
// taint: if ours is there after all (the caller's view lagged), it does
// nothing and the caller sees the taint on its next look.
func (c *Cluster) ForgetTaint(ctx context.Context, node, token string) error {
	return c.guardedWrite(ctx, node, token, "forget the taint owner mark", func(n *corev1.Node) (*nodePatch, error) {
		mark, ok := n.Annotations[AnnotationTaintOwner]
		if !ok {
			return nil, nil
		}
		if i := ourTaintIndex(n); i >= 0 && mark == TaintOwnerMark(n.Spec.Taints[i]) {
			return nil, nil
		}
		return &nodePatch{Metadata: nodePatchMeta{Annotations: map[string]*string{AnnotationTaintOwner: nil}}}, nil
	})
}

// DeleteTerminatingPods force-deletes (grace period 0) the node's pods that
// are already being deleted, as pod GC would on its 20 s loop for a NotReady
// node with the out-of-service taint. The runner calls it only for a node
// proven off and tainted: nothing can still be running those pods. It
// returns how many it deleted; pods already gone, or changed since the
// list, are not errors.
//
// A leader may pause between any two of its calls (a GC pause, a frozen VM)
// while another leader moves on and the node comes back. So, in order: the
// node is read and the fencing token and the out-of-service taint checked;
// the pods are listed from the server (after that check, never before);
// and right before each delete the node is read and both are checked again
// (a stale leader deletes nothing once the state or the taint changed).
// Each delete is preconditioned on the pod's UID and resourceVersion as
// listed: a new pod that took the name, or a pod its kubelet (or anyone)
// touched since, is never deleted by a stale act; the API server answers
// 409. fence/fencesim models these calls one by one, in this order.
func (c *Cluster) DeleteTerminatingPods(ctx context.Context, node, token string) (int, error) {
	if err := c.podDeleteGuard(ctx, node, token); err != nil {
		return 0, err
	}
	pods, err := c.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return 0, fmt.Errorf("node %s: list pods: %w", node, err)
	}
	deleted := 0
	var errs []error
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != node || p.DeletionTimestamp == nil {
			continue
		}
		if fence.Enabled(fence.CheckPodDeleteRecheck) {
			if err := c.podDeleteGuard(ctx, node, token); err != nil {
				return deleted, err
			}
		}
		pre := &metav1.Preconditions{UID: &p.UID, ResourceVersion: &p.ResourceVersion}
		if !fence.Enabled(fence.CheckPodDeletePreconditions) {
			pre = nil // the mutant
		}
		err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      pre,
		})
		switch {
		case err == nil:
			deleted++
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone already, or changed since we listed it (the name now
			// belongs to another pod, or its kubelet touched it).
		default:
			errs = append(errs, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return deleted, fmt.Errorf("node %s: force-delete terminating pods: %w", node, err)
	}
	return deleted, nil
}

// podDeleteGuard reads the node from the server and checks the fencing
// token and the out-of-service taint: a deposed leader must never
// force-delete the pods of a node that came back.
func (c *Cluster) podDeleteGuard(ctx context.Context, node, token string) error {
	n, err := c.getNode(ctx, node)
	if err != nil {
		return fmt.Errorf("node %s: force-delete terminating pods: %w", node, err)
	}
	if err := checkToken(n, token); err != nil {
		return err
	}
	if !HasOutOfServiceTaint(n) {
		return fmt.Errorf("node %s: not force-deleting pods: the node has no out-of-service taint", node)
	}
	return nil
}
