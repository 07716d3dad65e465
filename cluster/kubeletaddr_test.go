package cluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet port is reached at the node's InternalIP and its
// daemonEndpoints' kubelet port; without either it is not probed.
func TestKubeletAddrIsTheInternalIPAndTheKubeletEndpointPort(t *testing.T) {
	node := func(port int32, addrs ...corev1.NodeAddress) *corev1.Node {
		n := &corev1.Node{}
		n.Status.Addresses = addrs
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = port
		return n
	}
	ip := func(typ corev1.NodeAddressType, a string) corev1.NodeAddress {
		return corev1.NodeAddress{Type: typ, Address: a}
	}
	for _, c := range []struct {
		name string
		n    *corev1.Node
		want string
	}{
		{"internal IP and port", node(10250, ip(corev1.NodeHostName, "n1"), ip(corev1.NodeInternalIP, "10.0.0.7")), "10.0.0.7:10250"},
		{"IPv6", node(10250, ip(corev1.NodeInternalIP, "fd00::7")), "[fd00::7]:10250"},
		{"no port", node(0, ip(corev1.NodeInternalIP, "10.0.0.7")), ""},
		{"no internal IP", node(10250, ip(corev1.NodeExternalIP, "203.0.113.7")), ""},
	} {
		if got := kubeletAddr(c.n); got != c.want {
			t.Errorf("%s: kubeletAddr = %q, want %q", c.name, got, c.want)
		}
	}
}
