package drain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

// markMaintenance cordons the node and puts it in maintenance, in one
// write, unless a fence handles it (CheckNotFenced). An existing maintenance
// value is kept: a second drain continues the first one's maintenance (its
// by/since stay true).
func markMaintenance(ctx context.Context, client kubernetes.Interface, name string, opts Options) (*corev1.Node, error) {
	value, err := cluster.EncodeMaintenance(cluster.Maintenance{By: opts.User, Reason: opts.Reason, Since: opts.Clock.Now().UTC()})
	if err != nil {
		return nil, err
	}
	return updateNode(ctx, client, name, func(n *corev1.Node) (*nodePatch, error) {
		if err := CheckNotFenced(n); err != nil {
			return nil, err
		}
		if n.Spec.Unschedulable && cluster.InMaintenance(n) {
			return nil, nil
		}
		p := &nodePatch{Spec: nodePatchSpec{Unschedulable: ptr.To(true)}}
		if !cluster.InMaintenance(n) {
			p.Metadata.Annotations = map[string]*string{cluster.AnnotationMaintenance: &value}
		}
		return p, nil
	})
}

// clearMaintenance uncordons the node and removes the maintenance
// annotation, in one write; nothing when neither is set.
func clearMaintenance(ctx context.Context, client kubernetes.Interface, name string) (n *corev1.Node, changed bool, err error) {
	n, err = updateNode(ctx, client, name, func(n *corev1.Node) (*nodePatch, error) {
		changed = false
		if _, ok := n.Annotations[cluster.AnnotationMaintenance]; !ok && !n.Spec.Unschedulable {
			return nil, nil
		}
		changed = true
		return &nodePatch{
			Metadata: nodePatchMeta{Annotations: map[string]*string{cluster.AnnotationMaintenance: nil}},
			Spec:     nodePatchSpec{Unschedulable: nil},
		}, nil
	})
	return n, changed, err
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
