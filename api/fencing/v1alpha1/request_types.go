package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RequestAction is what a human asks the agent to do to a node.
// +kubebuilder:validation:Enum=fence;confirm;abort;unfence
type RequestAction string

// The request actions; each is a separate RBAC grant (see deploy/base/rbac-users.yaml):
// fence, abort and unfence need bmcfence-operator; confirm needs bmcfence-attester.
const (
	ActionFence   RequestAction = "fence"
	ActionConfirm RequestAction = "confirm"
	ActionAbort   RequestAction = "abort"
	ActionUnfence RequestAction = "unfence"
)

// BMCFenceRequestSpec is a human's request. The ValidatingAdmissionPolicy
// bmcfence-request-identity requires RequestedBy to be the API server's
// name for whoever creates it and makes the spec immutable, so the
// attester the agent records is who the API server says it is.
// +kubebuilder:validation:XValidation:rule="!has(self.force) || !self.force || (has(self.reason) && size(self.reason) > 0)",message="force needs a reason"
// +kubebuilder:validation:XValidation:rule="!has(self.force) || !self.force || self.action == 'confirm'",message="force applies to confirm only"
// +kubebuilder:validation:XValidation:rule="!has(self.powerOn) || !self.powerOn || self.action == 'unfence'",message="powerOn applies to unfence only"
type BMCFenceRequestSpec struct {
	// NodeName is the node the request is about.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`

	// Action: fence, confirm, abort or unfence.
	Action RequestAction `json:"action"`

	// RequestedBy must equal the requesting user's name (enforced at
	// admission).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	RequestedBy string `json:"requestedBy"`

	// Reason is recorded with the fence.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// PowerOn: unfence powers the node on first.
	// +optional
	PowerOn bool `json:"powerOn,omitempty"`

	// Force: a confirm that overrides a contrary live witness; needs a
	// reason.
	// +optional
	Force bool `json:"force,omitempty"`
}

// RequestOutcome is what the agent did with a request.
// +kubebuilder:validation:Enum=Pending;Taken;Refused;Expired
type RequestOutcome string

// The outcomes.
const (
	OutcomePending RequestOutcome = "Pending"
	OutcomeTaken   RequestOutcome = "Taken"
	OutcomeRefused RequestOutcome = "Refused"
	OutcomeExpired RequestOutcome = "Expired"
)

// BMCFenceRequestStatus is written by the agent.
type BMCFenceRequestStatus struct {
	// Outcome: Pending, Taken, Refused or Expired.
	// +optional
	Outcome RequestOutcome `json:"outcome,omitempty"`
	// Message says why (a refusal names the missing grant).
	// +optional
	Message string `json:"message,omitempty"`
	// SeenAt is when the agent first observed the request, on its clock;
	// requests expire maxRequestAge after it.
	// +optional
	SeenAt *metav1.Time `json:"seenAt,omitempty"`
	// Record names the BMCFenceRecord the request went into.
	// +optional
	Record string `json:"record,omitempty"`
	// FinishedAt is when the agent gave the request its final outcome
	// (Taken, Refused or Expired), on its clock: the agent deletes the
	// request requests.ttl (default 24h) after it.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// BMCFenceRequest is a human's authenticated request (kubectl fence
// fence|confirm|abort|unfence). Cluster-scoped, like the Node it names.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bfreq,categories=bmcfence
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`
// +kubebuilder:printcolumn:name="By",type=string,JSONPath=`.spec.requestedBy`
// +kubebuilder:printcolumn:name="Outcome",type=string,JSONPath=`.status.outcome`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BMCFenceRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
	Spec BMCFenceRequestSpec `json:"spec"`
	// +optional
	Status BMCFenceRequestStatus `json:"status,omitempty"`
}

// BMCFenceRequestList is a list of BMCFenceRequest.
//
// +kubebuilder:object:root=true
type BMCFenceRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BMCFenceRequest `json:"items"`
}
