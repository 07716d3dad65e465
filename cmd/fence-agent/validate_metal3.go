package main

import (
	"context"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory"
	"github.com/bmcfence/bmcfence/internal/kube"
)

// checkBareMetalHosts checks, with inventory.source metal3 or both, every
// BareMetalHost the agent would read (in this cluster, or in the management
// cluster of inventory.metal3.kubeconfigSecret): its address, its
// credentials Secret, its Node. Problems go to stderr, one line each;
// warnings (a host tied to no node, one being provisioned) and the summary
// to stdout. It reports whether there was no problem.
func checkBareMetalHosts(ctx context.Context, client kube.Interface, rc *rest.Config, cfg config.Agent, stdout, stderr io.Writer) bool {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		fmt.Fprintf(stderr, "fence-agent validate: BareMetalHosts: %v\n", err)
		return false
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(stderr, "fence-agent validate: BareMetalHosts: cannot list Nodes to tie the hosts to: %v\n", err)
		return false
	}
	summary, findings, err := inventory.CheckMetal3(ctx, inventory.Options{
		Config: cfg.Inventory, Namespace: cfg.Namespace, Client: client, Dynamic: dyn,
	}, nodes.Items)
	if err != nil {
		fmt.Fprintf(stderr, "fence-agent validate: BareMetalHosts: %v\n", err)
		return false
	}
	ok := true
	for _, f := range findings {
		if f.Problem {
			ok = false
			fmt.Fprintf(stderr, "fence-agent validate: %s\n", f)
			continue
		}
		fmt.Fprintf(stdout, "warning: %s\n", f)
	}
	verdict := "ok"
	if !ok {
		verdict = "checked"
	}
	fmt.Fprintf(stdout, "%s: %s\n", verdict, summary)
	return ok
}
