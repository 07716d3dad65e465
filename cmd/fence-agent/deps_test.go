package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The agent links none of client-go's typed clients, informers or leader
// election: each of those imports k8s.io/client-go/kubernetes/scheme, whose
// init registers every API group's types, and with them the linker keeps
// about 20 MB of code whose pages the agent then holds (package kube; the
// footprint test in cluster). An import that brings one back fails here.
func TestAgentLinksNoClientGoScheme(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case pkg == "k8s.io/client-go/kubernetes/scheme",
			pkg == "k8s.io/client-go/kubernetes",
			strings.HasPrefix(pkg, "k8s.io/client-go/kubernetes/typed/"),
			strings.HasPrefix(pkg, "k8s.io/client-go/informers"),
			strings.HasPrefix(pkg, "k8s.io/client-go/tools/leaderelection"):
			t.Errorf("the agent links %s", pkg)
		}
	}
}
