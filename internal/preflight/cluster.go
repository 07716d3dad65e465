package preflight

import (
	"context"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/bmcfence/bmcfence/cluster"
)

// Cluster check names, in the order they are made.
const (
	CheckVersion        = "kubernetes-version"
	CheckNamespace      = "namespace"
	CheckServiceAccount = "serviceaccount"
	CheckRBAC           = "rbac"
	CheckTolerations    = "tolerations"
	CheckForceDetach    = "force-detach"
)

// Checks deliberately left out, each for a reason:
//
//   - Pods that tolerate node.kubernetes.io/unreachable (or not-ready)
//     forever: they slow failover only without bmcfence. The out-of-service
//     taint is another key, its NoExecute effect evicts such pods anyway.
//     Only a toleration of the out-of-service taint itself (or of every
//     taint) defeats it, and checkTolerations finds those.
//   - StatefulSets whose terminationGracePeriodSeconds is long (longer than
//     policy.detachTimeout, or kube-controller-manager's 6-minute
//     maxWaitForUnmountDuration): it never delays a fenced node's failover.
//     The taint eviction controller deletes the pods of a tainted node with
//     their grace period, which makes them terminating at once; pod GC
//     (gcTerminating, Kubernetes 1.34: markFailedAndDeletePod with
//     NewDeleteOptions(0)) and the agent's forceDeletePods
//     (cluster.DeleteTerminatingPods, GracePeriodSeconds 0) then delete
//     them with no grace at all, and the attach/detach controller detaches
//     at once on the taint. A lint on it would warn about every database
//     and be wrong every time.
//   - Credentials Secrets and CA ConfigMaps: every node's inventory check
//     resolves them and names the one that is missing.
//   - kube-controller-manager's --node-monitor-grace-period: it sets when
//     a node turns NotReady, which bmcfence does not wait for (it watches
//     the Lease itself).
func checkCluster(ctx context.Context, o Options) []Result {
	return []Result{
		checkVersion(o),
		checkNamespace(ctx, o),
		checkServiceAccount(ctx, o),
		checkRBAC(ctx, o),
		checkTolerations(ctx, o),
		checkForceDetach(ctx, o),
		checkPlannedReboots(ctx, o),
	}
}

// outOfServiceGA is the release in which the out-of-service taint
// (KEP-2268, non-graceful node shutdown: pod GC force-deletes, the
// attach/detach controller force-detaches) went GA. It was beta in 1.26 and
// 1.27, alpha before: a cluster there may run with it off.
var outOfServiceGA = version.MajorMinor(1, 28)

// admissionPolicyGA is the release in which ValidatingAdmissionPolicy
// went GA (admissionregistration.k8s.io/v1): deploy/base and the chart
// install the request identity policy at v1 (Chart.yaml's kubeVersion).
var admissionPolicyGA = version.MajorMinor(1, 30)

// checkVersion reads the API server's version. The controllers that act on
// the taint run in kube-controller-manager, which the API does not report;
// a version-skewed control plane has it no newer than the API server.
func checkVersion(o Options) Result {
	r := Result{Scope: ScopeCluster, Check: CheckVersion}
	info, err := o.Client.Discovery().ServerVersion()
	if err != nil {
		r.Status = StatusWarn
		r.Message = fmt.Sprintf("cannot read the server version (%v): make sure the cluster runs Kubernetes 1.28 or later, where the out-of-service taint is GA", err)
		return r
	}
	v, err := version.ParseGeneric(info.GitVersion)
	if err != nil {
		// Some distributions put a suffix on Minor ("28+"); GitVersion is
		// the reliable field, Major.Minor the fallback.
		v, err = version.ParseGeneric(strings.TrimSuffix(info.Major, "+") + "." + strings.TrimSuffix(info.Minor, "+"))
	}
	if err != nil {
		r.Status = StatusWarn
		r.Message = fmt.Sprintf("cannot parse the server version %q: make sure the cluster runs Kubernetes 1.28 or later, where the out-of-service taint is GA", info.GitVersion)
		return r
	}
	if !v.AtLeast(outOfServiceGA) {
		r.Status = StatusFail
		r.Message = fmt.Sprintf("Kubernetes %s: the out-of-service taint is GA from 1.28 (beta, feature gate NodeOutOfServiceVolumeDetach, in 1.26-1.27); below, a fenced node's pods and volumes may never be released: upgrade the control plane", info.GitVersion)
		return r
	}
	if !v.AtLeast(admissionPolicyGA) {
		r.Status = StatusWarn
		r.Message = fmt.Sprintf("Kubernetes %s: the out-of-service taint is GA (1.28+), but deploy/base and the chart need 1.30: the ValidatingAdmissionPolicy that authenticates kubectl fence's requests is admissionregistration.k8s.io/v1 (GA in 1.30), and without it the agent refuses every request; kube-controller-manager's --disable-force-detach-on-timeout is 1.30+ too: upgrade the control plane to 1.30 or later", info.GitVersion)
		return r
	}
	r.Status = StatusOK
	r.Message = fmt.Sprintf("Kubernetes %s: the out-of-service taint is GA (1.28+), the request admission policy's API (1.30+) is served", info.GitVersion)
	return r
}

// checkNamespace: the agent's Secrets, ConfigMaps and leader Lease live
// there.
func checkNamespace(ctx context.Context, o Options) Result {
	r := Result{Scope: ScopeCluster, Check: CheckNamespace}
	_, err := o.Client.CoreV1().Namespaces().Get(ctx, o.Namespace, metav1.GetOptions{})
	switch {
	case err == nil:
		r.Status, r.Message = StatusOK, fmt.Sprintf("%s exists", o.Namespace)
	case apierrors.IsNotFound(err):
		r.Status, r.Message = StatusFail, fmt.Sprintf("namespace %s not found: it holds the agent's credentials Secrets, CA ConfigMaps and leader Lease; install the agent (kubectl apply -k deploy/base) or pass the namespace it runs in", o.Namespace)
	default:
		r.Status, r.Message = StatusWarn, fmt.Sprintf("cannot read namespace %s: %v", o.Namespace, err)
	}
	return r
}

// checkServiceAccount: the agent's pods cannot be created without it, and
// the RBAC below is granted to it.
func checkServiceAccount(ctx context.Context, o Options) Result {
	r := Result{Scope: ScopeCluster, Check: CheckServiceAccount}
	_, err := o.Client.CoreV1().ServiceAccounts(o.Namespace).Get(ctx, o.ServiceAccount, metav1.GetOptions{})
	switch {
	case err == nil:
		r.Status, r.Message = StatusOK, fmt.Sprintf("%s/%s exists", o.Namespace, o.ServiceAccount)
	case apierrors.IsNotFound(err):
		r.Status, r.Message = StatusFail, fmt.Sprintf("ServiceAccount %s/%s not found: the agent runs as it; apply deploy/base (serviceaccount.yaml)", o.Namespace, o.ServiceAccount)
	default:
		r.Status, r.Message = StatusWarn, fmt.Sprintf("cannot read ServiceAccount %s/%s: %v", o.Namespace, o.ServiceAccount, err)
	}
	return r
}

// checkRBAC asks the API server, one SubjectAccessReview per verb, whether
// the agent's ServiceAccount may do what the agent does. The reviews carry
// the groups a ServiceAccount token authenticates with, so bindings to
// system:serviceaccounts[:NS] count as they would for the agent.
func checkRBAC(ctx context.Context, o Options) Result {
	r := Result{Scope: ScopeCluster, Check: CheckRBAC}
	user := "system:serviceaccount:" + o.Namespace + ":" + o.ServiceAccount
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + o.Namespace, "system:authenticated"}
	var missing []string
	for _, p := range o.namedPermissions() {
		var denied []string
		for _, verb := range p.Verbs {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: p.Namespace, Name: p.Name, Verb: verb, Group: p.Group, Resource: p.Resource},
			}}
			resp, err := o.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				r.Status = StatusWarn
				r.Message = fmt.Sprintf("cannot check RBAC: %v (creating SubjectAccessReviews needs a cluster admin's rights)", err)
				return r
			}
			if !resp.Status.Allowed {
				denied = append(denied, verb)
			}
		}
		if len(denied) > 0 {
			missing = append(missing, p.describe(denied))
		}
	}
	if len(missing) > 0 {
		r.Status = StatusFail
		r.Message = fmt.Sprintf("%s may not: %s; apply deploy/base/rbac.yaml (kubectl apply -k deploy/base)", user, strings.Join(missing, "; "))
		return r
	}
	r.Status = StatusOK
	r.Message = fmt.Sprintf("%s has every permission the agent uses", user)
	return r
}

// checkTolerations finds pods that tolerate the out-of-service taint: the
// taint's NoExecute effect never evicts them, so they are never moved off a
// fenced node and pod GC never force-deletes them (it only takes pods
// already terminating). A toleration with no key and operator Exists
// tolerates every taint, this one included. They are named by workload
// (Deployment, StatefulSet, ...), where the toleration is to be fixed.
//
// DaemonSet and static (mirror) pods are left out: they belong to their
// node, nothing replaces them elsewhere, and many system DaemonSets
// tolerate everything by design. Finished pods hold nothing.
func checkTolerations(ctx context.Context, o Options) Result {
	r := Result{Scope: ScopeCluster, Check: CheckTolerations}
	pods, err := o.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		r.Status = StatusWarn
		r.Message = fmt.Sprintf("cannot list pods to check their tolerations: %v", err)
		return r
	}
	taint := cluster.OutOfServiceTaint()
	type finding struct {
		pods    int
		every   bool
		seconds *int64
	}
	found := map[string]*finding{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if boundToNode(p) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, t := range p.Spec.Tolerations {
			if !t.ToleratesTaint(&taint) {
				continue
			}
			w := workloadOf(p)
			f := found[w]
			if f == nil {
				f = &finding{}
				found[w] = f
			}
			f.pods++
			f.every = f.every || t.Key == ""
			if t.TolerationSeconds != nil {
				f.seconds = t.TolerationSeconds
			}
			break
		}
	}
	if len(found) == 0 {
		r.Status = StatusOK
		r.Message = "no pod tolerates the out-of-service taint (DaemonSet and static pods, which belong to their node, not counted)"
		return r
	}
	names := make([]string, 0, len(found))
	for w := range found {
		names = append(names, w)
	}
	sort.Strings(names)
	described := make([]string, 0, len(names))
	for _, w := range names {
		f := found[w]
		var notes []string
		if f.pods > 1 {
			notes = append(notes, fmt.Sprintf("%d pods", f.pods))
		}
		if f.every {
			notes = append(notes, "tolerates every taint")
		}
		if f.seconds != nil {
			// Evicted after that long: failover is delayed, not
			// prevented, but the delay is worth knowing.
			notes = append(notes, fmt.Sprintf("for %ds", *f.seconds))
		}
		if len(notes) > 0 {
			w += " (" + strings.Join(notes, ", ") + ")"
		}
		described = append(described, w)
	}
	r.Status = StatusWarn
	subject := fmt.Sprintf("%d workloads tolerate", len(found))
	if len(found) == 1 {
		subject = "1 workload tolerates"
	}
	r.Message = fmt.Sprintf("%s %s=%s:%s, so a fence does not move their pods off the fenced node: %s; fix: remove that toleration from the workload's pod template (a toleration with operator Exists and no key tolerates every taint: give it the key it is meant for)",
		subject, taint.Key, taint.Value, taint.Effect, list(described, 10))
	return r
}

// workloadOf names the workload a pod is fixed in: its Deployment (its
// ReplicaSet's name less the pod-template-hash the Deployment appended),
// StatefulSet, Job, ... or the pod itself.
func workloadOf(p *corev1.Pod) string {
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return "Pod " + p.Namespace + "/" + p.Name
	}
	if ref.Kind == "ReplicaSet" {
		if hash := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; hash != "" && strings.HasSuffix(ref.Name, "-"+hash) {
			return "Deployment " + p.Namespace + "/" + strings.TrimSuffix(ref.Name, "-"+hash)
		}
	}
	return ref.Kind + " " + p.Namespace + "/" + ref.Name
}

// boundToNode reports DaemonSet pods and static pods' mirrors.
func boundToNode(p *corev1.Pod) bool {
	if _, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return true
	}
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "DaemonSet" && strings.HasPrefix(ref.APIVersion, appsv1.GroupName+"/") {
		return true
	}
	return false
}

// namedPermissions is agentPermissions with the Secret and ConfigMap reads
// asked for by name when Options.ByName says so.
func (o Options) namedPermissions() []permission {
	var out []permission
	for _, p := range agentPermissions(o.Namespace, o.LeaseName) {
		names := map[string][]string{"secrets": o.SecretNames, "configmaps": o.ConfigMapNames}
		if n, ok := names[p.Resource]; ok && p.Group == "" && o.ByName {
			for _, name := range n {
				q := p
				q.Name = name
				out = append(out, q)
			}
			continue
		}
		out = append(out, p)
	}
	for _, ns := range o.Metal3Namespaces {
		out = append(out, metal3Permissions(ns)...)
	}
	return out
}
