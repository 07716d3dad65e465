package cluster

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The taint applied to a node proven off. Kubernetes' non-graceful node
// shutdown: with it, pod GC force-deletes the node's terminating pods and the
// attach/detach controller force-detaches its volumes. The controllers look
// for the key only; the NoExecute effect makes the taint manager evict the
// node's pods at once.
const (
	TaintKey                       = corev1.TaintNodeOutOfService // node.kubernetes.io/out-of-service
	TaintValue                     = "nodeshutdown"
	TaintEffect corev1.TaintEffect = corev1.TaintEffectNoExecute
)

// Node annotations and labels bmcfence reads or writes.
const (
	// AnnotationTaintOwner, set to TaintOwnerMark(taint) in the same write
	// that adds the taint, marks the out-of-service taint as ours. A taint
	// without it, or whose TimeAdded the mark does not name, is foreign and
	// is never removed by bmcfence.
	AnnotationTaintOwner = "bmcfence.dev/taint-owner"
	TaintOwnerValue      = "bmcfence"

	// AnnotationState holds the fence engine's encoded state (fence.Encode).
	// It is also the per-node fence lock: it only ever changes by
	// compare-and-swap (Cluster.SaveState).
	AnnotationState = "bmcfence.dev/state"

	// AnnotationRequest holds a human's pending command (see Request). The
	// agent removes it in the state write that acknowledges it.
	AnnotationRequest = "bmcfence.dev/request"

	// AnnotationRequestTaken names the last request (a BMCFenceRequest, by
	// name) an engine took in for the node, written in the same
	// compare-and-swap as the state that takes it in: an engine that finds
	// its request named there does not take it again. Two engines may hold
	// the same request: kubectl-fence drives the engine itself while no
	// agent runs, and an agent that comes back offers the request too.
	AnnotationRequestTaken = "bmcfence.dev/request-taken"

	// AnnotationMaintenance: any non-empty value (by convention a JSON
	// Maintenance) puts the node in maintenance: never fenced, for as long
	// as the mark's duration (Maintenance.For) on the agent's clock, if it
	// has one.
	AnnotationMaintenance = "bmcfence.dev/maintenance"

	// LabelExclude=true excludes a node from fencing.
	LabelExclude      = "bmcfence.dev/exclude"
	LabelExcludeValue = "true"

	// LabelZone is the topology zone the storm guard counts per.
	LabelZone = corev1.LabelTopologyZone
)

// Inventory annotations: where a node's BMC is and how to reach it. The
// agent's inventory reads them from the Node (NodeObject).
const (
	// AnnotationBMCAddress: "https://10.0.0.5", "ipmi://10.0.0.5:623"...
	AnnotationBMCAddress = "bmcfence.dev/bmc-address"
	// AnnotationBMCSystem names the Redfish system when a BMC has several.
	AnnotationBMCSystem = "bmcfence.dev/bmc-system"
	// AnnotationBMCCredentials names a Secret in the agent's namespace.
	AnnotationBMCCredentials = "bmcfence.dev/bmc-credentials"
	// AnnotationBMCCA names a ConfigMap in the agent's namespace holding the
	// BMC's CA bundle under BMCCAKey.
	AnnotationBMCCA = "bmcfence.dev/bmc-ca"
	BMCCAKey        = "ca.crt"
	// AnnotationBMCInsecureSkipVerify="true" disables TLS verification for
	// this BMC only.
	AnnotationBMCInsecureSkipVerify = "bmcfence.dev/bmc-insecure-skip-verify"
	// AnnotationBMCExpectedUUID: the system UUID the BMC must report (else
	// the Node's status.nodeInfo.systemUUID is expected).
	AnnotationBMCExpectedUUID = "bmcfence.dev/bmc-expected-uuid"
)

// DefaultComponent is the Event source and the field manager of our writes.
const DefaultComponent = "bmcfence"

// TaintOwnerMark is the owner annotation's value for our taint t:
// "bmcfence@<TimeAdded>". It names that one taint, so a mark left behind
// (someone removed our taint by hand) can never claim a taint added later by
// someone else, whose TimeAdded differs.
func TaintOwnerMark(t corev1.Taint) string {
	at := ""
	if t.TimeAdded != nil {
		at = t.TimeAdded.UTC().Format(time.RFC3339)
	}
	return TaintOwnerValue + "@" + at
}

// OutOfServiceTaint returns the taint bmcfence applies (TimeAdded unset).
func OutOfServiceTaint() corev1.Taint {
	return corev1.Taint{Key: TaintKey, Value: TaintValue, Effect: TaintEffect}
}
