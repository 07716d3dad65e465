// Command groups starts with a REST client and only the API groups the
// agent calls (core, coordination, apps, storage, admissionregistration,
// authentication, authorization) in its scheme: what a clientset of its
// own would link. It
// prints its RSS after start (clientset_footprint_test.go).
package main

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"github.com/bmcfence/bmcfence/cluster/testdata/clientsetpages/rss"
)

func main() {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, coordinationv1.AddToScheme,
		appsv1.AddToScheme, storagev1.AddToScheme, admissionregistrationv1.AddToScheme,
		authenticationv1.AddToScheme, authorizationv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	cfg := &rest.Config{Host: "https://127.0.0.1:1", APIPath: "/api"}
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	if _, err := rest.RESTClientFor(cfg); err != nil {
		panic(err)
	}
	rss.Print()
}
