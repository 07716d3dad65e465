//go:build !bmcfast

package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/fence"
)

// `kubectl fence status` shows a node's maintenance mark and, from the
// agent's state, whether the agent found it expired.
func TestStatusShowsTheMaintenanceMark(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	// The agent's state: in Maintenance, then out of it because the mark
	// expired (or because it was removed).
	step := func(s fence.State, v fence.NodeView, at time.Duration) fence.State {
		v.Ready, v.HeartbeatAt, v.RenewedAt, v.HasBMC = fence.ReadyTrue, t0.Add(at), t0.Add(at), true
		return fence.Step(fence.DefaultPolicy(), s, fence.Input{Kind: fence.InputTick, Node: v}, t0.Add(at)).State
	}
	encode := func(s fence.State) string {
		raw, err := fence.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	inMaintenance := step(fence.State{}, fence.NodeView{Maintenance: true}, 0)
	expired := encode(step(inMaintenance, fence.NodeView{MaintenanceExpired: true}, 10*time.Minute))
	removed := encode(step(inMaintenance, fence.NodeView{}, 10*time.Minute))

	const mark = `{"by":"alice","reason":"DIMM","since":"2025-03-01T10:00:00Z","cordoned":true,"for":"12m0s"}`
	since := t0
	tests := []struct {
		name, mark, state string
		want              *maintenanceStatus
		column            string
	}{
		{"no mark", "", "", nil, "-"},
		{"a mark until undrain", `{"by":"alice","since":"2025-03-01T10:00:00Z"}`, encode(inMaintenance),
			&maintenanceStatus{By: "alice", Since: &since}, "until undrain"},
		{"a mark with a duration", mark, encode(inMaintenance),
			&maintenanceStatus{By: "alice", Reason: "DIMM", Since: &since, For: "12m0s", CordonedByDrain: true}, "for 12m0s"},
		{"the agent found it expired", mark, expired,
			&maintenanceStatus{By: "alice", Reason: "DIMM", Since: &since, For: "12m0s", CordonedByDrain: true, Expired: true}, "expired"},
		{"a removed mark is not an expired one (a new mark came since)", mark, removed,
			&maintenanceStatus{By: "alice", Reason: "DIMM", Since: &since, For: "12m0s", CordonedByDrain: true}, "for 12m0s"},
		{"a mark set by hand", "yes", "", &maintenanceStatus{}, "until undrain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{}}}
			if tt.mark != "" {
				n.Annotations[cluster.AnnotationMaintenance] = tt.mark
			}
			got := maintenanceOf(n, tt.state)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("maintenanceOf (-want +got):\n%s", diff)
			}
			if got.String() != tt.column {
				t.Errorf("column %q, want %q", got.String(), tt.column)
			}
		})
	}
}
