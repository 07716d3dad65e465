// Package clientgo wraps client-go's Clientset (or its fake) into a
// kube.Interface: client-go's typed clients satisfy kube's interfaces
// resource by resource, but not group by group (a group's methods return
// client-go's own interface types). Tests use it with the fake Clientset,
// and kubectl-fence with its Clientset, which it links anyway; the agent
// never imports it (it would link every API group again: package kube).
package clientgo

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bmcfence/bmcfence/internal/kube"
)

// Wrap returns cs as a kube.Interface.
func Wrap(cs kubernetes.Interface) kube.Interface { return wrapped{cs} }

type wrapped struct{ cs kubernetes.Interface }

func (w wrapped) Discovery() kube.Discovery { return w.cs.Discovery() }
func (w wrapped) AdmissionregistrationV1() kube.AdmissionregistrationV1Interface {
	return admissionregistration{w.cs}
}
func (w wrapped) AppsV1() kube.AppsV1Interface                     { return apps{w.cs} }
func (w wrapped) AuthenticationV1() kube.AuthenticationV1Interface { return authentication{w.cs} }
func (w wrapped) AuthorizationV1() kube.AuthorizationV1Interface   { return authorization{w.cs} }
func (w wrapped) CoordinationV1() kube.CoordinationV1Interface     { return coordination{w.cs} }
func (w wrapped) CoreV1() kube.CoreV1Interface                     { return core{w.cs} }
func (w wrapped) StorageV1() kube.StorageV1Interface               { return storage{w.cs} }

type admissionregistration struct{ cs kubernetes.Interface }

func (g admissionregistration) RESTClient() rest.Interface {
	return g.cs.AdmissionregistrationV1().RESTClient()
}
func (g admissionregistration) ValidatingAdmissionPolicies() kube.Resource[*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyList] {
	return g.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies()
}
func (g admissionregistration) ValidatingAdmissionPolicyBindings() kube.Resource[*admissionregistrationv1.ValidatingAdmissionPolicyBinding, *admissionregistrationv1.ValidatingAdmissionPolicyBindingList] {
	return g.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
}

type apps struct{ cs kubernetes.Interface }

func (g apps) RESTClient() rest.Interface { return g.cs.AppsV1().RESTClient() }
func (g apps) DaemonSets(namespace string) kube.Resource[*appsv1.DaemonSet, *appsv1.DaemonSetList] {
	return g.cs.AppsV1().DaemonSets(namespace)
}

type authentication struct{ cs kubernetes.Interface }

func (g authentication) RESTClient() rest.Interface { return g.cs.AuthenticationV1().RESTClient() }
func (g authentication) TokenReviews() kube.Creator[*authenticationv1.TokenReview] {
	return g.cs.AuthenticationV1().TokenReviews()
}

type authorization struct{ cs kubernetes.Interface }

func (g authorization) RESTClient() rest.Interface { return g.cs.AuthorizationV1().RESTClient() }
func (g authorization) SubjectAccessReviews() kube.Creator[*authorizationv1.SubjectAccessReview] {
	return g.cs.AuthorizationV1().SubjectAccessReviews()
}

type coordination struct{ cs kubernetes.Interface }

func (g coordination) RESTClient() rest.Interface { return g.cs.CoordinationV1().RESTClient() }
func (g coordination) Leases(namespace string) kube.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return g.cs.CoordinationV1().Leases(namespace)
}

type core struct{ cs kubernetes.Interface }

func (g core) RESTClient() rest.Interface { return g.cs.CoreV1().RESTClient() }
func (g core) ConfigMaps(namespace string) kube.Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return g.cs.CoreV1().ConfigMaps(namespace)
}
func (g core) Events(namespace string) kube.Resource[*corev1.Event, *corev1.EventList] {
	return g.cs.CoreV1().Events(namespace)
}
func (g core) Namespaces() kube.Resource[*corev1.Namespace, *corev1.NamespaceList] {
	return g.cs.CoreV1().Namespaces()
}
func (g core) Nodes() kube.Resource[*corev1.Node, *corev1.NodeList] { return g.cs.CoreV1().Nodes() }
func (g core) Pods(namespace string) kube.Resource[*corev1.Pod, *corev1.PodList] {
	return g.cs.CoreV1().Pods(namespace)
}
func (g core) Secrets(namespace string) kube.Resource[*corev1.Secret, *corev1.SecretList] {
	return g.cs.CoreV1().Secrets(namespace)
}
func (g core) ServiceAccounts(namespace string) kube.Resource[*corev1.ServiceAccount, *corev1.ServiceAccountList] {
	return g.cs.CoreV1().ServiceAccounts(namespace)
}

type storage struct{ cs kubernetes.Interface }

func (g storage) RESTClient() rest.Interface { return g.cs.StorageV1().RESTClient() }
func (g storage) VolumeAttachments() kube.Resource[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList] {
	return g.cs.StorageV1().VolumeAttachments()
}

// Unwrap returns the client-go Clientset c wraps, or nil if Wrap did not
// make c.
func Unwrap(c kube.Interface) kubernetes.Interface {
	if w, ok := c.(wrapped); ok {
		return w.cs
	}
	return nil
}
