package drain

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bmcfence/bmcfence/cluster"
)

// Undrain ends the node's maintenance: it removes the maintenance mark and,
// if the drain cordoned the node (the mark says so), uncordons it, in one
// conflict-safe write (from then on the agent may fence it again), and
// records an Undrained Event. A cordon from before the drain stays, and
// the result says why. A node without the mark is not touched at all: no
// write, no Event; its cordon, if any, is someone else's. Power and
// readiness are the caller's (see WaitReady): the CLI powers the node on
// and waits for it before undraining.
func Undrain(ctx context.Context, client kubernetes.Interface, node string, opts Options) (UndrainResult, error) {
	opts = opts.withDefaults()
	before, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return UndrainResult{}, fmt.Errorf("undrain %s: read the node: %w", node, err)
	}
	since := maintenanceSummary(before)
	n, res, err := endMaintenance(ctx, client, node)
	if err != nil {
		return res, fmt.Errorf("undrain %s: end the maintenance: %w", node, err)
	}
	if !res.InMaintenance {
		return res, nil
	}
	did := "uncordoned"
	if !res.Uncordoned {
		did = "left cordoned: " + res.KeptCordon
		if !n.Spec.Unschedulable {
			did = "it was not cordoned"
		}
	}
	if err := recordEvent(ctx, client, n, opts, corev1.EventTypeNormal, ReasonUndrained,
		fmt.Sprintf("Maintenance of %s ended%s%s; %s", node, who(opts), since, did)); err != nil {
		return res, fmt.Errorf("undrain %s: done, but %w", node, err)
	}
	return res, nil
}

// Release gives a node back to fencing at once, whatever its state: it
// removes the maintenance mark and keeps the cordon, in one conflict-safe
// write, and records a MaintenanceReleased Event. It is for a node that went
// down in maintenance (a drain that stopped on a node that died): undrain
// waits for the node to be Ready, which a dead node never is, and meanwhile
// the agent would never fence it. It reports whether there was a mark.
func Release(ctx context.Context, client kubernetes.Interface, node string, opts Options) (bool, error) {
	opts = opts.withDefaults()
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("release %s: read the node: %w", node, err)
	}
	since := maintenanceSummary(n)
	removed, err := releaseMark(ctx, client, node, "")
	if err != nil {
		return false, fmt.Errorf("release %s: remove the maintenance mark: %w", node, err)
	}
	if removed == "" {
		return false, nil
	}
	if err := recordEvent(ctx, client, n, opts, corev1.EventTypeWarning, ReasonMaintenanceReleased,
		fmt.Sprintf("Maintenance of %s released%s%s: bmcfence may fence it again; it stays cordoned", node, who(opts), since)); err != nil {
		return true, fmt.Errorf("release %s: done, but %w", node, err)
	}
	return true, nil
}

// maintenanceSummary says who set the node's mark and when (by their
// clock), for Event messages.
func maintenanceSummary(n *corev1.Node) string {
	m, err := cluster.DecodeMaintenance(n.Annotations[cluster.AnnotationMaintenance])
	if err != nil || m.Since.IsZero() {
		return ""
	}
	s := fmt.Sprintf(", in maintenance since %s", m.Since.UTC().Format(time.RFC3339))
	if m.By != "" {
		s += " by " + m.By
	}
	return s
}

// ErrNotReady is wrapped by WaitReady when the node did not become Ready
// with a fresh Lease in time.
var ErrNotReady = errors.New("node not Ready")

// WaitReady waits until the node is Ready and its kubelet renews its Lease
// while we watch: renewTime changes between two of our reads. A renewTime is
// the node's own clock, possibly skewed either way, so its value proves
// nothing (a dead node's stale Lease may even lie in our future); a change we
// observe cannot be stale, whatever the node's clock says. The cost is up to
// one renewal interval (10 s for a kubelet). It gives up after
// Options.Timeout or when ctx ends.
func WaitReady(ctx context.Context, client kubernetes.Interface, node string, opts Options) error {
	opts = opts.withDefaults()
	ctx, cancel := withClockTimeout(ctx, opts.Clock, opts.Timeout, fmt.Errorf("gave up after %s", opts.Timeout))
	defer cancel()
	var first *metav1.MicroTime
	seen := false
	last := "not read yet"
	for {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case err != nil:
			last = "reading the node: " + err.Error()
		case !cluster.NodeReady(n):
			last = "the node is not Ready"
		default:
			lease, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				last = "the node has no Lease yet"
			case err != nil:
				last = "reading the node's Lease: " + err.Error()
			case lease.Spec.RenewTime == nil:
				last = "the node's Lease was never renewed"
			default:
				renew := lease.Spec.RenewTime
				if !seen {
					first, seen = renew.DeepCopy(), true
				}
				changed := !renew.Equal(first)
				if changed {
					return nil
				}
				last = fmt.Sprintf("Ready, waiting to see its Lease renewed (renewTime still %s)", renew.UTC().Format(time.RFC3339Nano))
			}
		}
		if err := sleep(ctx, opts.Clock, opts.PollInterval); err != nil {
			return fmt.Errorf("%w: %s: %s (%w)", ErrNotReady, node, last, context.Cause(ctx))
		}
	}
}
