package cluster

import (
	"testing"

	"github.com/bmcfence/bmcfence/test/controlplane"
)

// SharedControlPlane is the package's control plane, for its external
// tests (package cluster_test, which may import test/testbed).
func SharedControlPlane(t *testing.T) *controlplane.ControlPlane { return controlPlane(t) }

// WatchedPodNodes is how many nodes' pods are watched now
// (PodsOfFencingNodesOnly).
func (c *Cluster) WatchedPodNodes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.podViews)
}

// WatchesPodsOf reports whether the node's pods are watched now
// (PodsOfFencingNodesOnly).
func (c *Cluster) WatchesPodsOf(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.podViews[node] != nil
}
