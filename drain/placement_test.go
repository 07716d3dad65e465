package drain

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkPlace places the pods of one node on a 500-node cluster of
// 15,000 pods, one in ten of them with required pod anti-affinity: the
// size a drain plan must stay interactive at.
func BenchmarkPlace(b *testing.B) {
	const nodes, podsPerNode, movers = 500, 30, 30
	var ns []*corev1.Node
	var staying []*corev1.Pod
	for i := range nodes {
		name := fmt.Sprintf("n%d", i)
		ns = append(ns, node(name, allocatable("64", 110), nodeLabel("zone", fmt.Sprintf("z%d", i%3))))
		if i == 0 {
			continue
		}
		for j := range podsPerNode {
			opts := []podOpt{requests("100m"), podLabel("app", fmt.Sprintf("app%d", j))}
			if j%10 == 0 {
				opts = append(opts, antiAffinity(fmt.Sprintf("app%d", j), corev1.LabelHostname))
			}
			p := pod(fmt.Sprintf("p-%d-%d", i, j), name, opts...)
			p.UID = types.UID(p.Name)
			staying = append(staying, p)
		}
	}
	var ms []mover
	for j := range movers {
		p := pod(fmt.Sprintf("m-%d", j), "n0", requests("100m"), podLabel("app", fmt.Sprintf("mover%d", j)))
		p.UID = types.UID(p.Name)
		ms = append(ms, mover{pod: p})
	}
	nsLabels := func(string) labels.Set { return nil }
	b.ReportAllocs()
	for b.Loop() {
		out := place("n0", ns, staying, ms, nsLabels)
		if len(out) != movers || out[ms[0].pod.UID].target == "" {
			b.Fatalf("placements: %v", out[ms[0].pod.UID])
		}
	}
}
