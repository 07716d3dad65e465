// Command typed starts with client-go's typed clients of only the seven API
// groups the agent calls, as the agent did before internal/kube had its own:
// each typed package imports kubernetes/scheme, whose init registers every
// API group's types, so it links about as much as the whole clientset.
// It prints its RSS after start (clientset_footprint_test.go).
package main

import (
	admissionregistrationv1 "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	appsv1 "k8s.io/client-go/kubernetes/typed/apps/v1"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	storagev1 "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/client-go/rest"

	"github.com/bmcfence/bmcfence/cluster/testdata/clientsetpages/rss"
)

func main() {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, build := range []func(*rest.Config) error{
		func(c *rest.Config) error { _, err := admissionregistrationv1.NewForConfig(c); return err },
		func(c *rest.Config) error { _, err := appsv1.NewForConfig(c); return err },
		func(c *rest.Config) error { _, err := authenticationv1.NewForConfig(c); return err },
		func(c *rest.Config) error { _, err := authorizationv1.NewForConfig(c); return err },
		func(c *rest.Config) error { _, err := coordinationv1.NewForConfig(c); return err },
		func(c *rest.Config) error { _, err := corev1.NewForConfig(c); return err },
		func(c *rest.Config) error { _, err := storagev1.NewForConfig(c); return err },
	} {
		if err := build(cfg); err != nil {
			panic(err)
		}
	}
	rss.Print()
}
