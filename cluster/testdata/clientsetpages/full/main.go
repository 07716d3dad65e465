// Command full starts as the agent's Kubernetes client does today: the
// whole client-go clientset, every API group's types registered at init.
// It prints its RSS after start (clientset_footprint_test.go).
package main

import (
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bmcfence/bmcfence/cluster/testdata/clientsetpages/rss"
)

func main() {
	if _, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"}); err != nil {
		panic(err)
	}
	rss.Print()
}
