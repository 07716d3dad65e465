package drain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/fence"
)

// Event reasons recorded on the Node.
const (
	ReasonDrainStarted    = "DrainStarted"
	ReasonDrainCompleted  = "DrainCompleted"
	ReasonDrainIncomplete = "DrainIncomplete"
	ReasonUndrained       = "Undrained"
	// ReasonMaintenanceReleased: the maintenance mark was removed so that
	// bmcfence may fence the node again (a drain that stopped on a node that
	// went down, or `kubectl fence undrain --release`); the cordon stays.
	ReasonMaintenanceReleased = "MaintenanceReleased"
)

// nodePatch is a JSON merge patch of a Node carrying the resourceVersion it
// was computed from: the API server applies it to that version only (409
// otherwise), so a write never overwrites a change it did not see (the
// agent's state annotation, another cordon). Nil values delete.
type nodePatch struct {
	Metadata nodePatchMeta `json:"metadata"`
	Spec     nodePatchSpec `json:"spec"`
}

type nodePatchMeta struct {
	ResourceVersion string             `json:"resourceVersion"`
	Annotations     map[string]*string `json:"annotations,omitempty"`
}

type nodePatchSpec struct {
	// true cordons; nil (null) uncordons, as `kubectl uncordon` leaves the
	// field unset.
	Unschedulable *bool `json:"unschedulable"`
}

// updateNode reads the node, lets change compute a patch (nil: nothing to
// do) and applies it, retrying on conflict with a fresh read.
func updateNode(ctx context.Context, client kubernetes.Interface, name string, change func(*corev1.Node) (*nodePatch, error)) (*corev1.Node, error) {
	var out *corev1.Node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p, err := change(n)
		if err != nil || p == nil {
			out = n
			return err
		}
		p.Metadata.ResourceVersion = n.ResourceVersion
		body, err := json.Marshal(p)
		if err != nil {
			return err
		}
		out, err = client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: cluster.DefaultComponent})
		return err
	})
	return out, err
}

// ErrFenced: a fence handles the node (it is being powered off or
// confirmed Off, or carries the out-of-service taint). Its pods cannot leave
// by eviction, and a maintenance mark would stop the fence halfway. Abort or
// unfence it first.
var ErrFenced = errors.New("a fence handles the node")

// CheckNotFenced returns ErrFenced, wrapped with what to do, when a fence
// handles the node. Execute checks it in the write that marks the node in
// maintenance (the fence's taint checks the mark the same way), so the two
// never both go ahead; a caller may check it earlier to refuse sooner.
func CheckNotFenced(n *corev1.Node) error {
	if raw := n.Annotations[cluster.AnnotationState]; raw != "" {
		st, err := fence.Decode(raw)
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if st.Phase.InFlight() {
			return fmt.Errorf("node %s is being fenced (phase %s): a drain cannot move its pods; \"kubectl fence abort\" or \"kubectl fence unfence\" it first: %w", n.Name, st.Phase, ErrFenced)
		}
	}
	if cluster.HasOutOfServiceTaint(n) {
		return fmt.Errorf("node %s carries the out-of-service taint: its pods are already being moved off; \"kubectl fence unfence\" it first: %w", n.Name, ErrFenced)
	}
	return nil
}

// markGrace is how much longer than the drain's own timeout the mark a
// running drain writes holds: the wrap-up after the timeout (wrapUpTimeout,
// 30 s) and the write that ends the drain's hold, with room for a slow API
// server. The agent counts from when it saw the mark, a moment after the
// write, so the mark can outlive the drain but never lapse under it; if the
// drain dies (a closed laptop, a killed process), the node goes back to
// fencing by itself that long after.
const markGrace = 2 * time.Minute

// runningFor is the expiry of the mark a running drain holds.
func runningFor(opts Options) time.Duration { return opts.Timeout + markGrace }

// markMaintenance cordons the node and puts it in maintenance, in one
// write, unless a fence handles it (CheckNotFenced). The mark records
// whether this write cordoned the node (undrain uncordons only then) and
// expires runningFor(opts) after the agent sees it, so that a drain that
// dies does not keep the node from fencing for ever; Execute makes it
// permanent (or Options.MaintenanceFor) once the drain completes. A mark
// without an expiry (a completed drain's, or one set by hand) is kept, and
// so are its by and since: a second drain continues that maintenance. A mark
// with an expiry (a drain that stopped, or is running elsewhere) is renewed:
// a new value, which the agent counts from again. It returns the node and
// the mark's value as written or kept.
func markMaintenance(ctx context.Context, client kubernetes.Interface, name string, opts Options) (*corev1.Node, string, error) {
	var mark string
	n, err := updateNode(ctx, client, name, func(n *corev1.Node) (*nodePatch, error) {
		if err := CheckNotFenced(n); err != nil {
			return nil, err
		}
		cordon := !n.Spec.Unschedulable
		raw := n.Annotations[cluster.AnnotationMaintenance]
		m, err := cluster.DecodeMaintenance(raw)
		ours := err == nil
		write := true
		switch {
		case raw == "" || (ours && m.Expiry() > 0):
			reason := opts.Reason
			if reason == "" {
				reason = m.Reason
			}
			m = cluster.Maintenance{By: opts.User, Reason: reason, Since: opts.Clock.Now().UTC(), Cordoned: m.Cordoned || cordon,
				For: &metav1.Duration{Duration: runningFor(opts)}}
		case !ours && cordon:
			// A mark set by hand on a node we cordon now: ours from here
			// on (no end, like the hand-set one), so undrain knows.
			m = cluster.Maintenance{By: opts.User, Reason: opts.Reason, Since: opts.Clock.Now().UTC(), Cordoned: true}
		case !ours:
			write = false // maintenance without an end, nothing of ours to undo
		default:
			// A completed drain's mark: that maintenance goes on.
			write = cordon && !m.Cordoned
			m.Cordoned = true
		}
		mark = raw
		if !write && !cordon {
			return nil, nil
		}
		// Cordoned, or kept so: the field is always sent.
		p := &nodePatch{Spec: nodePatchSpec{Unschedulable: ptr.To(true)}}
		if write {
			value, err := cluster.EncodeMaintenance(m)
			if err != nil {
				return nil, err
			}
			mark = value
			p.Metadata.Annotations = map[string]*string{cluster.AnnotationMaintenance: &value}
		}
		return p, nil
	})
	return n, mark, err
}

// settleMark replaces the mark a completed drain held (mark) with one
// that lasts for (0: until undrain), keeping who, why, since and whether
// the drain cordoned. It changes nothing when the mark is no longer mark
// (undrained meanwhile, or renewed by another drain): the node is no
// longer this drain's to hold. It returns the value now on the node.
func settleMark(ctx context.Context, client kubernetes.Interface, name, mark string, d time.Duration) (string, error) {
	m, err := cluster.DecodeMaintenance(mark)
	if err != nil || m.Expiry() == d {
		return mark, nil // a value set by hand is left as it is
	}
	m.For = nil
	if d > 0 {
		m.For = &metav1.Duration{Duration: d}
	}
	value, err := cluster.EncodeMaintenance(m)
	if err != nil {
		return "", err
	}
	_, err = updateNode(ctx, client, name, func(n *corev1.Node) (*nodePatch, error) {
		if n.Annotations[cluster.AnnotationMaintenance] != mark {
			value = n.Annotations[cluster.AnnotationMaintenance]
			return nil, nil
		}
		return &nodePatch{
			Metadata: nodePatchMeta{Annotations: map[string]*string{cluster.AnnotationMaintenance: &value}},
			Spec:     nodePatchSpec{Unschedulable: ptr.To(n.Spec.Unschedulable)},
		}, nil
	})
	return value, err
}

// releaseMark gives the node back to fencing: it removes the maintenance
// mark, if it is still mark (any mark when mark is ""), and keeps the
// cordon (what is left on the node must not come back to it). It returns
// the value it removed, "" when it removed none.
func releaseMark(ctx context.Context, client kubernetes.Interface, name, mark string) (string, error) {
	var removed string
	_, err := updateNode(ctx, client, name, func(n *corev1.Node) (*nodePatch, error) {
		removed = ""
		cur := n.Annotations[cluster.AnnotationMaintenance]
		if cur == "" || (mark != "" && cur != mark) {
			return nil, nil
		}
		removed = cur
		return &nodePatch{
			Metadata: nodePatchMeta{Annotations: map[string]*string{cluster.AnnotationMaintenance: nil}},
			Spec:     nodePatchSpec{Unschedulable: ptr.To(n.Spec.Unschedulable)},
		}, nil
	})
	return removed, err
}

// endMaintenance removes the maintenance mark and, when the drain
// cordoned the node (the mark says so) and it is still cordoned, the
// cordon, in one write. A node without the mark is not touched: its cordon,
// if any, is not ours.
func endMaintenance(ctx context.Context, client kubernetes.Interface, name string) (n *corev1.Node, res UndrainResult, err error) {
	n, err = updateNode(ctx, client, name, func(n *corev1.Node) (*nodePatch, error) {
		res = UndrainResult{}
		raw, ok := n.Annotations[cluster.AnnotationMaintenance]
		if !ok {
			return nil, nil
		}
		res.InMaintenance = true
		p := &nodePatch{Metadata: nodePatchMeta{Annotations: map[string]*string{cluster.AnnotationMaintenance: nil}}}
		// Unschedulable is always sent (the patch's null uncordons):
		// here it keeps what is there unless the cordon is ours.
		p.Spec.Unschedulable = ptr.To(n.Spec.Unschedulable)
		m, derr := cluster.DecodeMaintenance(raw)
		switch {
		case !n.Spec.Unschedulable:
		case derr == nil && m.Cordoned:
			p.Spec.Unschedulable = nil
			res.Uncordoned = true
		case derr != nil:
			res.KeptCordon = "the maintenance mark was not written by a drain, so the cordon is not known to be ours (\"kubectl uncordon " + n.Name + "\" if it is)"
		default:
			res.KeptCordon = "it was cordoned before the drain (\"kubectl uncordon " + n.Name + "\" when its owner agrees)"
		}
		return p, nil
	})
	return n, res, err
}

// maxEventMessage: events.k8s.io caps a note at 1 KiB; core/v1 Events do
// not, but a longer message is unreadable in `kubectl describe node`.
const maxEventMessage = 1024

// recordEvent writes a core/v1 Event on the Node (namespace default, as for
// every Node Event), from component bmcfence. It writes directly rather
// than through client-go's broadcaster: a CLI exits right after, and the
// broadcaster would drop what it has not sent.
func recordEvent(ctx context.Context, client kubernetes.Interface, node *corev1.Node, opts Options, typ, reason, message string) error {
	now := metav1.NewTime(opts.Clock.Now())
	if len(message) > maxEventMessage {
		// Cut at a character boundary: a reason may be any UTF-8.
		cut := maxEventMessage - len("…")
		for cut > 0 && !utf8.RuneStart(message[cut]) {
			cut--
		}
		message = message[:cut] + "…"
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			// Like client-go's recorder (name.<nanos>), plus a random
			// suffix: two Events at one instant of a fake clock must not
			// collide.
			Name:      fmt.Sprintf("%s.%x.%s", node.Name, now.UnixNano(), utilrand.String(5)),
			Namespace: metav1.NamespaceDefault,
		},
		InvolvedObject:      corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID},
		Reason:              reason,
		Message:             message,
		Type:                typ,
		Source:              corev1.EventSource{Component: cluster.DefaultComponent},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: cluster.DefaultComponent,
	}
	if _, err := client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("record Event %s on node %s: %w", reason, node.Name, err)
	}
	return nil
}

// who describes the maintenance for Event messages.
func who(opts Options) string {
	var parts []string
	if opts.User != "" {
		parts = append(parts, "by "+opts.User)
	}
	if opts.Reason != "" {
		parts = append(parts, "reason: "+opts.Reason)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
