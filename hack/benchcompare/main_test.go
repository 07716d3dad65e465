package main

import (
	"strings"
	"testing"
	"time"
)

func msd(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// Issue 23: on a fresh 2-core machine `make bench` printed Redfish 9.6x
// and IPMI 6.2x (32.8 vs 315.9 ms, 28.3 vs 176.3 ms) and exited 1 below its
// 10x: any Go binary took ~13 ms to start there, which no code of ours
// controls. The harness fails only on what the code does: its time above
// the Go runtime's start against the agent's above Python's, and what one
// status costs the BMC.
func TestJudgeFailsOnlyOnWhatTheCodeControls(t *testing.T) {
	b := budget{minRatio: 5, redfishRequests: defaultMaxRedfishRequests, redfishConns: defaultMaxRedfishConnections, ipmiDatagrams: defaultMaxIPMIDatagrams}
	oneGet := cost{requests: 1, connections: 1, unit: "requests"}
	tests := []struct {
		name string
		r    result
		want []string // substrings, one per failure
	}{
		{"the fresh machine's Redfish: slow to start any process, ours still far ahead",
			result{name: "Redfish", ours: msd(32.8), theirs: msd(315.9), goFloor: msd(13), pyFloor: msd(30), oursCost: oneGet}, nil},
		{"the fresh machine's IPMI",
			result{name: "IPMI", ours: msd(28.3), theirs: msd(176.3), goFloor: msd(13), pyFloor: msd(30), oursCost: cost{requests: 7, unit: "datagrams"}}, nil},
		{"three TLS connections and three GETs per read, as before the native client",
			result{name: "Redfish", ours: msd(39), theirs: msd(178.4), goFloor: msd(1.5), pyFloor: msd(12), oursCost: cost{requests: 3, connections: 3, unit: "requests"}},
			[]string{"Redfish: above each runtime's start, ours 37.5 ms and theirs 166.4 ms: 4.4x is below 5x", "Redfish: one bmc status cost 3 requests, 3 connections, the budget is 3 requests, 1 connection"}},
		{"a session per request over IPMI",
			result{name: "IPMI", ours: msd(9), theirs: msd(99.7), goFloor: msd(1.5), pyFloor: msd(12), oursCost: cost{requests: 14, unit: "datagrams"}},
			[]string{"IPMI: one bmc status sent 14 datagrams, the budget is 8"}},
		{"our own work grown to a third of theirs",
			result{name: "Redfish", ours: msd(61.5), theirs: msd(178.4), goFloor: msd(1.5), pyFloor: msd(12), oursCost: oneGet},
			[]string{"Redfish: above each runtime's start, ours 60.0 ms and theirs 166.4 ms: 2.8x is below 5x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := judge(tt.r, b)
			if len(got) != len(tt.want) {
				t.Fatalf("failures %v, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i].Error(), w) {
					t.Errorf("failure %q does not say %q", got[i], w)
				}
			}
		})
	}
}
