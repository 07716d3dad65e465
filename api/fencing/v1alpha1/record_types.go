package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Trigger is what started a fence.
// +kubebuilder:validation:Enum=builtin;nhc;mhc;human
type Trigger string

// The triggers.
const (
	// TriggerBuiltin: the agent's own detection (Lease silence).
	TriggerBuiltin Trigger = "builtin"
	// TriggerNHC: a BMCFenceRemediation created by NodeHealthCheck.
	TriggerNHC Trigger = "nhc"
	// TriggerMHC: a BMCFenceRemediation created by a MachineHealthCheck.
	TriggerMHC Trigger = "mhc"
	// TriggerHuman: a BMCFenceRequest.
	TriggerHuman Trigger = "human"
)

// LabelRecordNode on a BMCFenceRecord names its node, so history lists one
// node's records with a label selector.
const LabelRecordNode = "fencing.bmcfence.io/node"

// BMCFenceRecordSpec says what was fenced, by whom and why. Written once.
type BMCFenceRecordSpec struct {
	// NodeName is the fenced node.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`
	// Trigger: builtin, nhc, mhc or human.
	Trigger Trigger `json:"trigger"`
	// RequestedBy: the user of a human request, or the remediation CR
	// (namespace/name) of NHC or MHC, or the agent for builtin.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	RequestedBy string `json:"requestedBy,omitempty"`
	// Reason the fence started.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
}

// EntryKind is the kind of a timeline entry.
// +kubebuilder:validation:Enum=Reading;Decision;Action;Request
type EntryKind string

// The entry kinds.
const (
	EntryReading  EntryKind = "Reading"
	EntryDecision EntryKind = "Decision"
	EntryAction   EntryKind = "Action"
	EntryRequest  EntryKind = "Request"
)

// TimelineEntry is one piece of evidence: a BMC reading, a decision of the
// engine, an action and its result, or a human's request.
type TimelineEntry struct {
	// Time, on the agent's clock.
	Time metav1.Time `json:"time"`
	// Kind: Reading, Decision, Action or Request.
	Kind EntryKind `json:"kind"`
	// Phase of the fence after this entry.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Who: the agent replica, or the user of a request.
	// +optional
	Who string `json:"who,omitempty"`
	// Message: the reading, the decision's reason, the action's result.
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
}

// BMCFenceRecordStatus carries the evidence.
type BMCFenceRecordStatus struct {
	// Phase is the fence's last phase.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Outcome: empty while under way; Stuck while stuck; then Fenced (the
	// node was tainted and detached), Abandoned (a fence stopped before
	// that) or Cleared (a suspicion that ended without a power-off).
	// +optional
	Outcome string `json:"outcome,omitempty"`
	// StartedAt and FinishedAt, on the agent's clock.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Timeline, oldest first; at most 200 entries (the oldest readings are
	// dropped first, decisions and actions are kept).
	// +optional
	// +kubebuilder:validation:MaxItems=200
	// +listType=atomic
	Timeline []TimelineEntry `json:"timeline,omitempty"`
}

// BMCFenceRecord is one fence's durable history (kubectl fence history).
// The agent keeps the newest records per node and deletes those older than
// its retention (history.maxPerNode, history.maxAge).
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bfrec,categories=bmcfence
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Trigger",type=string,JSONPath=`.spec.trigger`
// +kubebuilder:printcolumn:name="By",type=string,JSONPath=`.spec.requestedBy`
// +kubebuilder:printcolumn:name="Outcome",type=string,JSONPath=`.status.outcome`
// +kubebuilder:printcolumn:name="Started",type=date,JSONPath=`.status.startedAt`
type BMCFenceRecord struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
	Spec BMCFenceRecordSpec `json:"spec"`
	// +optional
	Status BMCFenceRecordStatus `json:"status,omitempty"`
}

// BMCFenceRecordList is a list of BMCFenceRecord.
//
// +kubebuilder:object:root=true
type BMCFenceRecordList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BMCFenceRecord `json:"items"`
}
