package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The condition types a remediator reports on its CR, as NodeHealthCheck
// reads them (github.com/medik8s/common pkg/conditions, v1.17.0). NHC reads
// only the type and status: Succeeded=False makes it escalate to its next
// remediator, Succeeded=True ends the remediation; it never reads a reason.
const (
	ConditionProcessing                    = "Processing"
	ConditionSucceeded                     = "Succeeded"
	ConditionPermanentNodeDeletionExpected = "PermanentNodeDeletionExpected"
)

// Reasons on those conditions, for humans and for `kubectl get -o wide`.
const (
	// ReasonFencing: the fence is under way (Processing=True).
	ReasonFencing = "Fencing"
	// ReasonFenced: the node is confirmed off and tainted out-of-service
	// (Processing=False, Succeeded=True).
	ReasonFenced = "Fenced"
	// ReasonCannotFence: the node cannot be fenced by us (no BMC entry,
	// unverifiable identity, excluded, in maintenance, no such node, Stuck)
	// (Processing=False, Succeeded=False: NHC escalates).
	ReasonCannotFence = "CannotFence"
	// ReasonTimedOut: NHC gave up on us (annotation AnnotationNHCTimedOut);
	// we stopped.
	ReasonTimedOut = "TimedOut"
	// ReasonNodeKept: we never delete a Node (PermanentNodeDeletionExpected=False).
	ReasonNodeKept = "NodeNotDeleted"
	// ReasonWaiting: the CR is seen but the agent has not started a fence
	// (detection, storm guard, cooldown).
	ReasonWaiting = "Waiting"
)

// Annotations of the NHC External Remediation contract
// (github.com/medik8s/common pkg/annotations, v1.17.0).
const (
	// AnnotationNHCTimedOut: NHC stopped waiting for this remediation.
	AnnotationNHCTimedOut = "remediation.medik8s.io/nhc-timed-out"
	// AnnotationMultipleTemplatesSupport on a template: NHC then creates the
	// CR with generateName and names the node in AnnotationNodeName.
	AnnotationMultipleTemplatesSupport = "remediation.medik8s.io/multiple-templates-support"
	// AnnotationNodeName names the node when the CR's name does not.
	AnnotationNodeName = "remediation.medik8s.io/node-name"
)

// FinalizerRemediation keeps a remediation CR until the agent has stopped
// acting for it and recorded the outcome.
const FinalizerRemediation = "fencing.bmcfence.io/remediation"

// BMCFenceRemediationSpec is what NHC copies from the template's
// spec.template.spec, or what MHC copies from its template.
type BMCFenceRemediationSpec struct {
	// PowerOnAfterFence powers the node on once its pods and volumes have
	// moved, as the agent's policy powerOnAfterDetach does; unset follows the
	// agent's policy.
	// +optional
	PowerOnAfterFence *bool `json:"powerOnAfterFence,omitempty"`

	// Reason is recorded in the fence's history and Events.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
}

// BMCFenceRemediationStatus is what the agent reports.
type BMCFenceRemediationStatus struct {
	// Conditions: Processing, Succeeded, PermanentNodeDeletionExpected.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// NodeName is the node this CR remediates, as the agent resolved it
	// (the CR's name, the node-name annotation, or a Machine's nodeRef).
	// +optional
	NodeName string `json:"nodeName,omitempty"`

	// Phase is the node's fence phase when last reported.
	// +optional
	Phase string `json:"phase,omitempty"`

	// Record names the BMCFenceRecord of this fence.
	// +optional
	Record string `json:"record,omitempty"`

	// ObservedGeneration is the generation the status was written for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// BMCFenceRemediation asks the agent to fence one node: created by
// NodeHealthCheck (named after the node) or by Cluster API's
// MachineHealthCheck (named after the Machine). The agent never deletes it;
// its creator does once the node is healthy.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bfrem,categories=bmcfence
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Succeeded",type=string,JSONPath=`.status.conditions[?(@.type=="Succeeded")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Succeeded")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BMCFenceRemediation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec BMCFenceRemediationSpec `json:"spec,omitempty"`
	// +optional
	Status BMCFenceRemediationStatus `json:"status,omitempty"`
}

// BMCFenceRemediationList is a list of BMCFenceRemediation.
//
// +kubebuilder:object:root=true
type BMCFenceRemediationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BMCFenceRemediation `json:"items"`
}

// BMCFenceRemediationTemplateResource is the template's body.
type BMCFenceRemediationTemplateResource struct {
	// Spec is copied into each BMCFenceRemediation.
	Spec BMCFenceRemediationSpec `json:"spec"`
}

// BMCFenceRemediationTemplateSpec holds the template (spec.template.spec,
// the shape NHC and MHC copy from).
type BMCFenceRemediationTemplateSpec struct {
	Template BMCFenceRemediationTemplateResource `json:"template"`
}

// BMCFenceRemediationTemplate is what a NodeHealthCheck's
// remediationTemplate (or escalatingRemediations) or a MachineHealthCheck's
// remediation.templateRef names.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=bfremt,categories=bmcfence
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BMCFenceRemediationTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BMCFenceRemediationTemplateSpec `json:"spec"`
}

// BMCFenceRemediationTemplateList is a list of BMCFenceRemediationTemplate.
//
// +kubebuilder:object:root=true
type BMCFenceRemediationTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BMCFenceRemediationTemplate `json:"items"`
}
