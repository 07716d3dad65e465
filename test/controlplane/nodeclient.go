package controlplane

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// NodeClient is a client with the node's own identity (system:node:NAME,
// confined by the Node authorizer and NodeRestriction like a kubelet): for
// tests that write what a kubelet writes (its graceful shutdown's node and
// pod statuses, its Lease renewals) while the node's kwok is stopped.
func (cp *ControlPlane) NodeClient(name string) (kubernetes.Interface, error) {
	n, err := cp.node(name)
	if err != nil {
		return nil, err
	}
	if n.kubeconfig == "" {
		return nil, fmt.Errorf("node %s has no kubeconfig (a grouped node?)", name)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", n.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100
	return kubernetes.NewForConfig(cfg)
}
