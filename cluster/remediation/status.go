// Package remediation serves the remediation CRs that health checkers
// create: NodeHealthCheck's External Remediation Template contract and
// Cluster API MachineHealthCheck's external remediation. It resolves each
// BMCFenceRemediation to a node, tells the fence engine which nodes are
// asked for (fence.NodeView.Remediation), holds a finalizer while it acts,
// and reports the conditions the health checker reads. It never deletes a
// CR: its creator does, once the node is healthy.
package remediation

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/fence"
)

// Situation is everything the conditions depend on; Conditions is a pure
// function of it, so every case is a table row in the tests.
type Situation struct {
	// Node is the node the CR resolved to ("" when it did not resolve).
	Node string
	// Unresolved says why the CR names no node (a Machine without a
	// nodeRef, a Machine that cannot be read).
	Unresolved string
	// NodeFound: the Node exists.
	NodeFound bool
	// TimedOut: NodeHealthCheck gave up on this CR
	// (remediation.medik8s.io/nhc-timed-out).
	TimedOut bool
	// Phase and Stuck: the node's fence state, as the agent last wrote it.
	Phase fence.Phase
	Stuck fence.StuckReason
	// Unfenceable says why the agent cannot fence the node (excluded,
	// maintenance, no usable BMC entry), or "".
	Unfenceable string
	// Fenced: this CR already saw the node fenced (Succeeded=True stays
	// True when the node recovers and the phase is Healthy again).
	Fenced bool
}

// Conditions returns the conditions for s: Processing, Succeeded and
// PermanentNodeDeletionExpected, in that order, without times (SetConditions
// keeps a condition's lastTransitionTime while its status holds).
func Conditions(s Situation) []metav1.Condition {
	processing := func(st metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: v1alpha1.ConditionProcessing, Status: st, Reason: reason, Message: msg}
	}
	succeeded := func(st metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: v1alpha1.ConditionSucceeded, Status: st, Reason: reason, Message: msg}
	}
	// bmcfence never deletes a Node: NHC may delete this CR as soon as the
	// node is gone or healthy.
	keep := metav1.Condition{Type: v1alpha1.ConditionPermanentNodeDeletionExpected, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonNodeKept, Message: "bmcfence powers the node off and taints it; it never deletes the Node"}
	cannot := func(msg string) []metav1.Condition {
		// Succeeded=False: NodeHealthCheck escalates to its next remediator.
		return []metav1.Condition{
			processing(metav1.ConditionFalse, v1alpha1.ReasonCannotFence, msg),
			succeeded(metav1.ConditionFalse, v1alpha1.ReasonCannotFence, msg),
			keep,
		}
	}
	fenced := func(msg string) []metav1.Condition {
		return []metav1.Condition{
			processing(metav1.ConditionFalse, v1alpha1.ReasonFenced, msg),
			succeeded(metav1.ConditionTrue, v1alpha1.ReasonFenced, msg),
			keep,
		}
	}
	switch {
	case s.Fenced || tainted(s.Phase):
		return fenced(fmt.Sprintf("node %s was confirmed off by its BMC and tainted out-of-service; its workloads may run elsewhere (phase %s)", s.Node, s.Phase))
	case s.TimedOut:
		msg := "NodeHealthCheck timed out this remediation; bmcfence stopped (a fence whose power-off the BMC accepted still ends with the taint, removed only when the node is back)"
		return []metav1.Condition{
			processing(metav1.ConditionFalse, v1alpha1.ReasonTimedOut, msg),
			succeeded(metav1.ConditionFalse, v1alpha1.ReasonTimedOut, msg),
			keep,
		}
	case s.Unresolved != "":
		return cannot(s.Unresolved)
	case !s.NodeFound:
		return cannot(fmt.Sprintf("node %s does not exist", s.Node))
	case s.Unfenceable != "":
		return cannot(fmt.Sprintf("node %s cannot be fenced by bmcfence: %s", s.Node, s.Unfenceable))
	case s.Phase == fence.Stuck:
		return cannot(fmt.Sprintf("the fence of node %s is stuck (%s) and needs a human: see kubectl fence status %s", s.Node, s.Stuck, s.Node))
	case s.Phase == fence.Maintenance:
		return cannot(fmt.Sprintf("node %s is under planned maintenance (kubectl fence drain); it is never fenced", s.Node))
	case s.Phase != fence.Healthy && s.Phase.PreTaint():
		return []metav1.Condition{
			processing(metav1.ConditionTrue, v1alpha1.ReasonFencing, fmt.Sprintf("fencing node %s (phase %s)", s.Node, s.Phase)),
			succeeded(metav1.ConditionUnknown, v1alpha1.ReasonFencing, "the fence is under way"),
			keep,
		}
	default:
		return []metav1.Condition{
			processing(metav1.ConditionTrue, v1alpha1.ReasonWaiting, fmt.Sprintf("waiting for node %s's Lease to be silent long enough (policy suspectAfter) and for the storm guard", s.Node)),
			succeeded(metav1.ConditionUnknown, v1alpha1.ReasonWaiting, "no fence started yet"),
			keep,
		}
	}
}

// tainted: phases after our taint went on, before the fence's end.
func tainted(p fence.Phase) bool {
	switch p {
	case fence.Detaching, fence.Fenced, fence.PoweringOn, fence.Recovering, fence.Untainting:
		return true
	case fence.Healthy, fence.Suspect, fence.ConfirmingOff, fence.PoweringOff, fence.Tainting, fence.Stuck, fence.Maintenance:
	}
	return false
}
