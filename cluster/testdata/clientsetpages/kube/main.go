// Command kube starts with the agent's own client (internal/kube): the
// seven API groups' types in a scheme of its own, gentype's generic typed
// clients on it, and none of client-go's typed packages, whose
// kubernetes/scheme would register every API group at init.
// It prints its RSS after start (clientset_footprint_test.go).
package main

import (
	"k8s.io/client-go/rest"

	"github.com/bmcfence/bmcfence/cluster/testdata/clientsetpages/rss"
	"github.com/bmcfence/bmcfence/internal/kube"
)

func main() {
	if _, err := kube.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"}); err != nil {
		panic(err)
	}
	rss.Print()
}
