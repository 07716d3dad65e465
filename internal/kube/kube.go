// Package kube is the agent's client of the built-in Kubernetes APIs: the
// API groups it uses, and no others.
//
// client-go's Clientset builds a typed client for every group the API server
// serves (about fifty); once a program builds one, the linker keeps all of
// their code, and its pages are part of the process's memory. The agent
// builds this smaller set instead (make scale measures the difference), and
// its packages take Interface, which client-go's Clientset and its fake also
// satisfy, so tests and kubectl-fence pass theirs unchanged.
package kube

import (
	"fmt"
	"net/http"

	"k8s.io/client-go/discovery"
	admissionregistrationv1 "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	appsv1 "k8s.io/client-go/kubernetes/typed/apps/v1"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	storagev1 "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Interface is the part of client-go's kubernetes.Interface the agent uses.
type Interface interface {
	Discovery() discovery.DiscoveryInterface
	AdmissionregistrationV1() admissionregistrationv1.AdmissionregistrationV1Interface
	AppsV1() appsv1.AppsV1Interface
	AuthenticationV1() authenticationv1.AuthenticationV1Interface
	AuthorizationV1() authorizationv1.AuthorizationV1Interface
	CoordinationV1() coordinationv1.CoordinationV1Interface
	CoreV1() corev1.CoreV1Interface
	StorageV1() storagev1.StorageV1Interface
}

// Clientset implements Interface with one client per group, sharing one
// HTTP client and one rate limiter, as client-go's Clientset does.
type Clientset struct {
	discovery               *discovery.DiscoveryClient
	admissionregistrationV1 *admissionregistrationv1.AdmissionregistrationV1Client
	appsV1                  *appsv1.AppsV1Client
	authenticationV1        *authenticationv1.AuthenticationV1Client
	authorizationV1         *authorizationv1.AuthorizationV1Client
	coordinationV1          *coordinationv1.CoordinationV1Client
	coreV1                  *corev1.CoreV1Client
	storageV1               *storagev1.StorageV1Client
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
	var cs Clientset
	var err error
	if cs.admissionregistrationV1, err = admissionregistrationv1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, err
	}
	if cs.appsV1, err = appsv1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, err
	}
	if cs.authenticationV1, err = authenticationv1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, err
	}
	if cs.authorizationV1, err = authorizationv1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, err
	}
	if cs.coordinationV1, err = coordinationv1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, err
	}
	if cs.coreV1, err = corev1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, err
	}
	if cs.storageV1, err = storagev1.NewForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, err
	}
	if cs.discovery, err = discovery.NewDiscoveryClientForConfigAndClient(&cfg, httpClient); err != nil {
		return nil, err
	}
	return &cs, nil
}

func (c *Clientset) Discovery() discovery.DiscoveryInterface { return c.discovery }

func (c *Clientset) AdmissionregistrationV1() admissionregistrationv1.AdmissionregistrationV1Interface {
	return c.admissionregistrationV1
}

func (c *Clientset) AppsV1() appsv1.AppsV1Interface { return c.appsV1 }

func (c *Clientset) AuthenticationV1() authenticationv1.AuthenticationV1Interface {
	return c.authenticationV1
}

func (c *Clientset) AuthorizationV1() authorizationv1.AuthorizationV1Interface {
	return c.authorizationV1
}

func (c *Clientset) CoordinationV1() coordinationv1.CoordinationV1Interface { return c.coordinationV1 }

func (c *Clientset) CoreV1() corev1.CoreV1Interface { return c.coreV1 }

func (c *Clientset) StorageV1() storagev1.StorageV1Interface { return c.storageV1 }
