package cluster

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// shuttingDown is the Ready condition the kubelet writes when logind tells
// it the machine shuts down (test/testbed.GracefulShutdown writes the same).
func shuttingDown(beat time.Time) nodeOpt {
	return func(n *corev1.Node) {
		notReady(beat)(n)
		n.Status.Conditions[0].Reason = "KubeletNotReady"
		n.Status.Conditions[0].Message = "node is shutting down"
	}
}

func stoppedPosting(beat time.Time) nodeOpt {
	return func(n *corev1.Node) {
		readyUnknown(beat)(n)
		n.Status.Conditions[0].Reason = "NodeStatusUnknown"
		n.Status.Conditions[0].Message = "Kubelet stopped posting node status."
	}
}

func TestGracefulShutdownIsAPlannedRebootUntilTheNodeIsReadyAgain(t *testing.T) {
	type step struct {
		at     time.Duration
		node   *corev1.Node
		want   bool
		wantAt time.Duration
	}
	tests := []struct {
		name  string
		steps []step
	}{{
		name: "announced, then overwritten by the node lifecycle controller, then Ready again",
		steps: []step{
			{at: 0, node: node("w1", ready(at(0)))},
			{at: 10 * time.Second, node: node("w1", shuttingDown(at(10*time.Second))), want: true, wantAt: 10 * time.Second},
			{at: 20 * time.Second, node: node("w1", shuttingDown(at(20*time.Second))), want: true, wantAt: 10 * time.Second},
			{at: 60 * time.Second, node: node("w1", stoppedPosting(at(20*time.Second))), want: true, wantAt: 10 * time.Second},
			{at: 7 * time.Minute, node: node("w1", ready(at(7*time.Minute)))},
		},
	}, {
		name: "NotReady for another reason is no planned reboot",
		steps: []step{
			{at: 0, node: node("w1", notReady(at(0)))},
			{at: time.Minute, node: node("w1", stoppedPosting(at(0)))},
		},
	}, {
		name: "an agent that starts after the announcement was overwritten knows nothing of it",
		steps: []step{
			{at: 0, node: node("w1", stoppedPosting(at(0)))},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newObservation(at(0))
			for _, s := range tt.steps {
				o.observeNode(s.node, at(s.at))
				v := buildInfo(s.node, o, nil, true, nil).View
				if v.PlannedReboot != s.want {
					t.Fatalf("at %s: PlannedReboot = %v, want %v", s.at, v.PlannedReboot, s.want)
				}
				if s.want && (!v.PlannedRebootAt.Equal(at(s.wantAt)) || v.PlannedRebootBy != SignalGracefulShutdown) {
					t.Fatalf("at %s: PlannedRebootAt %s by %q, want %s by %q", s.at, v.PlannedRebootAt.Sub(t0), v.PlannedRebootBy, s.wantAt, SignalGracefulShutdown)
				}
			}
		})
	}
}

func TestControlPlaneLabelMakesAControlPlaneNode(t *testing.T) {
	o := newObservation(at(0))
	cp := node("cp1", ready(at(0)))
	cp.Labels = map[string]string{LabelControlPlane: ""}
	if v := buildInfo(cp, o, nil, true, nil).View; !v.ControlPlane {
		t.Errorf("a node labelled %s: ControlPlane false", LabelControlPlane)
	}
	if v := buildInfo(node("w1", ready(at(0))), o, nil, true, nil).View; v.ControlPlane {
		t.Errorf("a worker: ControlPlane true")
	}
}
