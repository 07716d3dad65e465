// Package kube is the agent's client of the built-in Kubernetes APIs: the
// API groups it uses, their resources it calls, and no others.
//
// client-go's typed clients cost more than their code: each imports
// k8s.io/client-go/kubernetes/scheme, whose init registers every API
// group's types (about sixty group-versions), and the linker keeps all of
// their code, whose pages are then part of the process's memory. A typed
// client of one group links as much as the whole Clientset (cluster's
// footprint test: 51.7 MB and about 23.6 MiB RSS at start, either way). So
// this package has typed clients of its own (typed.go: what client-gen's
// make, with the same requests) on a scheme of its own, which registers
// only the seven groups below.
//
// Its interfaces are the methods the agent calls, with client-go's
// signatures, so client-go's typed clients (and their fakes) satisfy them
// resource by resource: package kube/clientgo wraps a kubernetes.Interface
// into an Interface, for tests and for kubectl-fence, which link client-go's
// Clientset anyway.
package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Scheme knows the seven API groups' types and nothing else; Codecs and
// ParameterCodec are built on it.
var (
	Scheme         = runtime.NewScheme()
	Codecs         = serializer.NewCodecFactory(Scheme)
	ParameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	for _, add := range []func(*runtime.Scheme) error{
		admissionregistrationv1.AddToScheme, appsv1.AddToScheme, authenticationv1.AddToScheme,
		authorizationv1.AddToScheme, coordinationv1.AddToScheme, corev1.AddToScheme, storagev1.AddToScheme,
	} {
		utilruntime.Must(add(Scheme))
	}
}

// Resource is what the agent calls on one kind of object: client-go's
// typed client methods, with their signatures.
type Resource[T runtime.Object, L runtime.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// Creator is a resource that is only created: a review.
type Creator[T runtime.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
}

// Discovery is what the agent asks the API server about itself.
type Discovery interface {
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
	ServerVersion() (*version.Info, error)
}

// Interface is the agent's client of the built-in APIs.
type Interface interface {
	Discovery() Discovery
	AdmissionregistrationV1() AdmissionregistrationV1Interface
	AppsV1() AppsV1Interface
	AuthenticationV1() AuthenticationV1Interface
	AuthorizationV1() AuthorizationV1Interface
	CoordinationV1() CoordinationV1Interface
	CoreV1() CoreV1Interface
	StorageV1() StorageV1Interface
}

type (
	// AdmissionregistrationV1Interface: the admission policy the agent installs.
	AdmissionregistrationV1Interface interface {
		RESTClient() rest.Interface
		ValidatingAdmissionPolicies() Resource[*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyList]
		ValidatingAdmissionPolicyBindings() Resource[*admissionregistrationv1.ValidatingAdmissionPolicyBinding, *admissionregistrationv1.ValidatingAdmissionPolicyBindingList]
	}
	// AppsV1Interface: the agent's own DaemonSet.
	AppsV1Interface interface {
		RESTClient() rest.Interface
		DaemonSets(namespace string) Resource[*appsv1.DaemonSet, *appsv1.DaemonSetList]
	}
	// AuthenticationV1Interface: the metrics endpoint's token reviews.
	AuthenticationV1Interface interface {
		RESTClient() rest.Interface
		TokenReviews() Creator[*authenticationv1.TokenReview]
	}
	// AuthorizationV1Interface: the metrics endpoint's access reviews.
	AuthorizationV1Interface interface {
		RESTClient() rest.Interface
		SubjectAccessReviews() Creator[*authorizationv1.SubjectAccessReview]
	}
	// CoordinationV1Interface: node Leases and the leader's Lease.
	CoordinationV1Interface interface {
		RESTClient() rest.Interface
		Leases(namespace string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
	}
	// CoreV1Interface: the core objects the agent reads and writes.
	CoreV1Interface interface {
		RESTClient() rest.Interface
		ConfigMaps(namespace string) Resource[*corev1.ConfigMap, *corev1.ConfigMapList]
		Events(namespace string) Resource[*corev1.Event, *corev1.EventList]
		Namespaces() Resource[*corev1.Namespace, *corev1.NamespaceList]
		Nodes() Resource[*corev1.Node, *corev1.NodeList]
		Pods(namespace string) Resource[*corev1.Pod, *corev1.PodList]
		Secrets(namespace string) Resource[*corev1.Secret, *corev1.SecretList]
		ServiceAccounts(namespace string) Resource[*corev1.ServiceAccount, *corev1.ServiceAccountList]
	}
	// StorageV1Interface: VolumeAttachments.
	StorageV1Interface interface {
		RESTClient() rest.Interface
		VolumeAttachments() Resource[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList]
	}
)

// Clientset implements Interface with one REST client per group, sharing
// one HTTP client and one rate limiter, as client-go's Clientset does.
type Clientset struct {
	discovery                                   *discovery
	admissionregistration, apps, authentication *rest.RESTClient
	authorization, coordination, core, storage  *rest.RESTClient
}

var _ Interface = (*Clientset)(nil)

// NewForConfig builds the clients the way kubernetes.NewForConfig does:
// the default user agent if c has none, one HTTP client (one connection to
// the API server), and one token bucket for c's QPS and Burst shared by
// every group.
func NewForConfig(c *rest.Config) (*Clientset, error) {
	cfg := *c
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	httpClient, err := rest.HTTPClientFor(&cfg)
	if err != nil {
		return nil, err
	}
	return NewForConfigAndClient(&cfg, httpClient)
}

// NewForConfigAndClient builds the clients on httpClient.
func NewForConfigAndClient(c *rest.Config, httpClient *http.Client) (*Clientset, error) {
	cfg := *c
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		if cfg.Burst <= 0 {
			return nil, fmt.Errorf("a client with a QPS of %v needs a burst above 0", cfg.QPS)
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	group := func(gv schema.GroupVersion) (*rest.RESTClient, error) {
		g := cfg
		g.GroupVersion = &gv
		g.APIPath = "/apis"
		if gv.Group == "" {
			g.APIPath = "/api"
		}
		// As client-gen's clients: the scheme's codecs, no conversion.
		g.NegotiatedSerializer = Codecs.WithoutConversion()
		rc, err := rest.RESTClientForConfigAndClient(&g, httpClient)
		if err != nil {
			return nil, fmt.Errorf("%s client: %w", gv, err)
		}
		return rc, nil
	}
	var cs Clientset
	for _, g := range []struct {
		rc **rest.RESTClient
		gv schema.GroupVersion
	}{
		{&cs.admissionregistration, admissionregistrationv1.SchemeGroupVersion},
		{&cs.apps, appsv1.SchemeGroupVersion},
		{&cs.authentication, authenticationv1.SchemeGroupVersion},
		{&cs.authorization, authorizationv1.SchemeGroupVersion},
		{&cs.coordination, coordinationv1.SchemeGroupVersion},
		{&cs.core, corev1.SchemeGroupVersion},
		{&cs.storage, storagev1.SchemeGroupVersion},
	} {
		rc, err := group(g.gv)
		if err != nil {
			return nil, err
		}
		*g.rc = rc
	}
	// Discovery reads unversioned paths (/version, /apis/<group>/<version>)
	// with the same HTTP client and rate limiter.
	d := cfg
	d.GroupVersion = nil
	d.APIPath = ""
	d.NegotiatedSerializer = Codecs.WithoutConversion()
	// Discovery documents are read as JSON, whatever c prefers for objects.
	d.AcceptContentTypes, d.ContentType = "application/json", "application/json"
	unversioned, err := rest.UnversionedRESTClientForConfigAndClient(&d, httpClient)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	cs.discovery = &discovery{rc: unversioned}
	return &cs, nil
}

func (c *Clientset) Discovery() Discovery { return c.discovery }

func (c *Clientset) AdmissionregistrationV1() AdmissionregistrationV1Interface {
	return admissionregistrationV1{c.admissionregistration}
}
func (c *Clientset) AppsV1() AppsV1Interface { return appsV1{c.apps} }
func (c *Clientset) AuthenticationV1() AuthenticationV1Interface {
	return authenticationV1{c.authentication}
}
func (c *Clientset) AuthorizationV1() AuthorizationV1Interface {
	return authorizationV1{c.authorization}
}
func (c *Clientset) CoordinationV1() CoordinationV1Interface { return coordinationV1{c.coordination} }
func (c *Clientset) CoreV1() CoreV1Interface                 { return coreV1{c.core} }
func (c *Clientset) StorageV1() StorageV1Interface           { return storageV1{c.storage} }

func resource[T object, L runtime.Object](name string, rc rest.Interface, namespace string, newObj func() T, newList func() L) Resource[T, L] {
	return &typed[T, L]{rc: rc, resource: name, namespace: namespace, newObject: newObj, newList: newList}
}

// creator is a client of a resource that is only created (a review); the
// list type is never used.
func creator[T object](name string, rc rest.Interface, newObj func() T) Creator[T] {
	return &typed[T, T]{rc: rc, resource: name, newObject: newObj, newList: newObj}
}

type admissionregistrationV1 struct{ rc *rest.RESTClient }

func (g admissionregistrationV1) RESTClient() rest.Interface { return g.rc }
func (g admissionregistrationV1) ValidatingAdmissionPolicies() Resource[*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyList] {
	return resource("validatingadmissionpolicies", g.rc, "",
		func() *admissionregistrationv1.ValidatingAdmissionPolicy {
			return &admissionregistrationv1.ValidatingAdmissionPolicy{}
		},
		func() *admissionregistrationv1.ValidatingAdmissionPolicyList {
			return &admissionregistrationv1.ValidatingAdmissionPolicyList{}
		})
}
func (g admissionregistrationV1) ValidatingAdmissionPolicyBindings() Resource[*admissionregistrationv1.ValidatingAdmissionPolicyBinding, *admissionregistrationv1.ValidatingAdmissionPolicyBindingList] {
	return resource("validatingadmissionpolicybindings", g.rc, "",
		func() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
			return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		},
		func() *admissionregistrationv1.ValidatingAdmissionPolicyBindingList {
			return &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{}
		})
}

type appsV1 struct{ rc *rest.RESTClient }

func (g appsV1) RESTClient() rest.Interface { return g.rc }
func (g appsV1) DaemonSets(namespace string) Resource[*appsv1.DaemonSet, *appsv1.DaemonSetList] {
	return resource("daemonsets", g.rc, namespace,
		func() *appsv1.DaemonSet { return &appsv1.DaemonSet{} },
		func() *appsv1.DaemonSetList { return &appsv1.DaemonSetList{} })
}

type authenticationV1 struct{ rc *rest.RESTClient }

func (g authenticationV1) RESTClient() rest.Interface { return g.rc }
func (g authenticationV1) TokenReviews() Creator[*authenticationv1.TokenReview] {
	return creator("tokenreviews", g.rc, func() *authenticationv1.TokenReview { return &authenticationv1.TokenReview{} })
}

type authorizationV1 struct{ rc *rest.RESTClient }

func (g authorizationV1) RESTClient() rest.Interface { return g.rc }
func (g authorizationV1) SubjectAccessReviews() Creator[*authorizationv1.SubjectAccessReview] {
	return creator("subjectaccessreviews", g.rc,
		func() *authorizationv1.SubjectAccessReview { return &authorizationv1.SubjectAccessReview{} })
}

type coordinationV1 struct{ rc *rest.RESTClient }

func (g coordinationV1) RESTClient() rest.Interface { return g.rc }
func (g coordinationV1) Leases(namespace string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return resource("leases", g.rc, namespace,
		func() *coordinationv1.Lease { return &coordinationv1.Lease{} },
		func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} })
}

type coreV1 struct{ rc *rest.RESTClient }

func (g coreV1) RESTClient() rest.Interface { return g.rc }
func (g coreV1) ConfigMaps(namespace string) Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return resource("configmaps", g.rc, namespace,
		func() *corev1.ConfigMap { return &corev1.ConfigMap{} },
		func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} })
}
func (g coreV1) Events(namespace string) Resource[*corev1.Event, *corev1.EventList] {
	return resource("events", g.rc, namespace,
		func() *corev1.Event { return &corev1.Event{} },
		func() *corev1.EventList { return &corev1.EventList{} })
}
func (g coreV1) Namespaces() Resource[*corev1.Namespace, *corev1.NamespaceList] {
	return resource("namespaces", g.rc, "",
		func() *corev1.Namespace { return &corev1.Namespace{} },
		func() *corev1.NamespaceList { return &corev1.NamespaceList{} })
}
func (g coreV1) Nodes() Resource[*corev1.Node, *corev1.NodeList] {
	return resource("nodes", g.rc, "",
		func() *corev1.Node { return &corev1.Node{} },
		func() *corev1.NodeList { return &corev1.NodeList{} })
}
func (g coreV1) Pods(namespace string) Resource[*corev1.Pod, *corev1.PodList] {
	return resource("pods", g.rc, namespace,
		func() *corev1.Pod { return &corev1.Pod{} },
		func() *corev1.PodList { return &corev1.PodList{} })
}
func (g coreV1) Secrets(namespace string) Resource[*corev1.Secret, *corev1.SecretList] {
	return resource("secrets", g.rc, namespace,
		func() *corev1.Secret { return &corev1.Secret{} },
		func() *corev1.SecretList { return &corev1.SecretList{} })
}
func (g coreV1) ServiceAccounts(namespace string) Resource[*corev1.ServiceAccount, *corev1.ServiceAccountList] {
	return resource("serviceaccounts", g.rc, namespace,
		func() *corev1.ServiceAccount { return &corev1.ServiceAccount{} },
		func() *corev1.ServiceAccountList { return &corev1.ServiceAccountList{} })
}

type storageV1 struct{ rc *rest.RESTClient }

func (g storageV1) RESTClient() rest.Interface { return g.rc }
func (g storageV1) VolumeAttachments() Resource[*storagev1.VolumeAttachment, *storagev1.VolumeAttachmentList] {
	return resource("volumeattachments", g.rc, "",
		func() *storagev1.VolumeAttachment { return &storagev1.VolumeAttachment{} },
		func() *storagev1.VolumeAttachmentList { return &storagev1.VolumeAttachmentList{} })
}

// discovery reads what client-go's discovery client reads for the two
// questions the agent asks.
type discovery struct{ rc *rest.RESTClient }

// ServerResourcesForGroupVersion GETs /api/v1 or /apis/<group>/<version>;
// a group-version the server does not serve is a NotFound error, as from
// client-go's.
func (d *discovery) ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error) {
	path := "/apis/" + groupVersion
	if groupVersion == "v1" {
		path = "/api/v1"
	}
	var list metav1.APIResourceList
	if err := d.get(path, &list); err != nil {
		return nil, err
	}
	// Old servers left it out; client-go fills it in too.
	if list.GroupVersion == "" {
		list.GroupVersion = groupVersion
	}
	return &list, nil
}

// ServerVersion GETs /version.
func (d *discovery) ServerVersion() (*version.Info, error) {
	var info version.Info
	if err := d.get("/version", &info); err != nil {
		return nil, err
	}
	return &info, nil
}

func (d *discovery) get(path string, into any) error {
	body, err := d.rc.Get().AbsPath(path).Do(context.TODO()).Raw()
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}
