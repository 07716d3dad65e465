package preflight

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// permission is one thing the agent does to the API. deploy/base/rbac.yaml
// grants each of them (TestManifestGrantsEveryCheckedPermission keeps the
// two in step).
type permission struct {
	Group    string
	Resource string
	// Namespace the agent acts in; "" for cluster-scoped resources and for
	// all namespaces.
	Namespace string
	// Name, when set, is the one object the agent acts on (RBAC may grant
	// it by resourceNames).
	Name  string
	Verbs []string
}

// agentPermissions lists the manifest's grants, each checked in the
// namespace the agent really acts in rather than "all", so a
// least-privilege setup (a Role where the manifest has a ClusterRole) is not
// failed for a reach the agent never uses. The verbs are exactly the
// manifest's, and the manifest grants only what the agent calls.
func agentPermissions(ns, leaseName string) []permission {
	return []permission{
		// The cluster view's informer; the taint, the state and the
		// annotations are patches.
		{Resource: "nodes", Verbs: []string{"get", "list", "watch", "patch"}},
		// The view watches pods on every node; forceDeletePods deletes a
		// fenced node's terminating pods, in any namespace.
		{Resource: "pods", Verbs: []string{"get", "list", "watch", "delete"}},
		// Detaching waits for the node's volumes to be released.
		{Group: "storage.k8s.io", Resource: "volumeattachments", Verbs: []string{"get", "list", "watch"}},
		// Node heartbeats: the kubelets' Leases, listed (not watched) and
		// read one by one before a ForceOff.
		{Group: "coordination.k8s.io", Resource: "leases", Namespace: corev1.NamespaceNodeLease, Verbs: []string{"get", "list"}},
		// The agent's own leader Lease, by name (create cannot be granted
		// by name).
		{Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: leaseName, Verbs: []string{"get", "update"}},
		{Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Verbs: []string{"create"}},
		// Events on Nodes: client-go's recorder writes core/v1 Events for
		// cluster-scoped objects in "default", and patches them to count
		// repeats.
		{Resource: "events", Namespace: metav1.NamespaceDefault, Verbs: []string{"create", "patch"}},
		// server.metricsAuth: who may read /metrics (as kube-rbac-proxy).
		{Group: "authentication.k8s.io", Resource: "tokenreviews", Verbs: []string{"create"}},
		{Group: "authorization.k8s.io", Resource: "subjectaccessreviews", Verbs: []string{"create"}},
		// The admission policy that authenticates humans' requests, and
		// its binding, watched by name (a request is trusted only if both
		// were in force from before its creation).
		{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies", Name: "bmcfence-request-identity", Verbs: []string{"get", "list", "watch"}},
		{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings", Name: "bmcfence-request-identity", Verbs: []string{"get", "list", "watch"}},
		// Credentials and CA bundles, read by name.
		{Resource: "secrets", Namespace: ns, Verbs: []string{"get"}},
		{Resource: "configmaps", Namespace: ns, Verbs: []string{"get"}},
	}
}

// metal3Permissions are the agent's grants in a BareMetalHosts' namespace
// (inventory.source metal3 or both). deploy/overlays/metal3 grants each
// (TestMetal3OverlayGrantsEveryCheckedPermission keeps the two in step).
func metal3Permissions(ns string) []permission {
	return []permission{
		// The hosts: watched (an informer), read again and annotated
		// (reboot.metal3.io/bmcfence) around our power commands.
		{Group: "metal3.io", Resource: "baremetalhosts", Namespace: ns, Verbs: []string{"get", "list", "watch", "patch"}},
		// The consumer chain to the Node: Metal3Machine → Machine.
		{Group: "infrastructure.cluster.x-k8s.io", Resource: "metal3machines", Namespace: ns, Verbs: []string{"list", "watch"}},
		{Group: "cluster.x-k8s.io", Resource: "machines", Namespace: ns, Verbs: []string{"list", "watch"}},
		// Each host's spec.bmc.credentialsName.
		{Resource: "secrets", Namespace: ns, Verbs: []string{"get"}},
	}
}

// describe names the denied verbs: "patch, update nodes",
// "get secrets in bmcfence-system", "list volumeattachments.storage.k8s.io".
func (p permission) describe(verbs []string) string {
	what := p.Resource
	if p.Group != "" {
		what += "." + p.Group
	}
	s := strings.Join(verbs, ", ") + " " + what
	if p.Name != "" {
		s += " " + p.Name
	}
	if p.Namespace != "" {
		s += fmt.Sprintf(" in %s", p.Namespace)
	}
	return s
}
