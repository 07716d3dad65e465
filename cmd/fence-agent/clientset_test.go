package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentBuildsNoFullClientset: the agent's packages use internal/kube,
// not client-go's kubernetes.Clientset. Building the full Clientset links a
// client for every API group (about 7 MB more code, measured with size(1)),
// and its pages are part of the agent's memory. client-go's own packages
// may still import the kubernetes package (leaderelection does, for an
// unused feature); the linker keeps its clients only if something builds
// them.
func TestAgentBuildsNoFullClientset(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		if !strings.HasPrefix(pkg, "github.com/bmcfence/bmcfence/") {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if imp == "k8s.io/client-go/kubernetes" {
				t.Errorf("%s imports k8s.io/client-go/kubernetes: take a kube.Interface (internal/kube) instead", pkg)
			}
		}
	}
}
