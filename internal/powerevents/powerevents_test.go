package powerevents

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfish"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Two nodes on one two-system BMC share one stream; an event names its
// system, and each node gets its own system to compare it with; the
// streams stop with the lead.
func TestOneStreamPerBMCEachNodeWithItsSystem(t *testing.T) {
	srv := redfishmocktest.Start(t, redfishmock.Config{Systems: redfishmock.Systems(2), Username: "admin", Password: "pw-123456"})
	ep, err := bmc.ParseAddress(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	tgt := func(system string) bmc.Target {
		return bmc.Target{Address: ep, System: system, CACertificates: srv.CAPEM,
			Credentials: bmc.Credentials{Username: "admin", Password: bmc.Secret("pw-123456")}, Timeout: 5 * time.Second}
	}
	var mu sync.Mutex
	poked := map[string]int{}
	m := New(Options{
		Targets: func() map[string]bmc.Target { return map[string]bmc.Target{"n1": tgt("1"), "n2": tgt("2")} },
		Notify:  func(n string) { mu.Lock(); poked[n]++; mu.Unlock() },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	waitFor(t, "one connected stream", func() bool { return m.Counts()[redfish.StreamConnected] == 1 })
	if st, ok := m.NodeState("n1"); !ok || st.Mode != redfish.StreamConnected {
		t.Fatalf("n1's stream: %+v %v", st, ok)
	}
	if err := srv.Mock.Event("2", redfishmock.EventPowerLoss); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the event", func() bool { ev, _, _ := m.OffEvent("n2"); return !ev.Received.IsZero() })
	ev, sys2, ok := m.OffEvent("n2")
	if !ok || ev.System != "/redfish/v1/Systems/2" || sys2 != "/redfish/v1/Systems/2" || ev.Replay || ev.ConnectedAt.IsZero() {
		t.Fatalf("n2: event %+v, system %q, ok %v", ev, sys2, ok)
	}
	// n1 hears the same stream's event, and its own system tells the
	// engine the event is not its machine's.
	ev1, sys1, ok := m.OffEvent("n1")
	if !ok || ev1.System != "/redfish/v1/Systems/2" || sys1 != "/redfish/v1/Systems/1" {
		t.Fatalf("n1: event %+v, system %q, ok %v", ev1, sys1, ok)
	}
	waitFor(t, "both workers poked", func() bool { mu.Lock(); defer mu.Unlock(); return poked["n1"] > 0 && poked["n2"] > 0 })

	cancel()
	<-done
	if c := m.Counts(); c[redfish.StreamConnected] != 0 {
		t.Fatalf("after the lead ended: %v", c)
	}
	if _, _, ok := m.OffEvent("n2"); ok {
		t.Fatal("an event still offered after the lead ended")
	}
}

// A BMC that is not Redfish gets no stream: polling only.
func TestIPMIBMCsArePolled(t *testing.T) {
	ep, err := bmc.ParseAddress("ipmi://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	m := New(Options{Targets: func() map[string]bmc.Target { return map[string]bmc.Target{"n1": {Address: ep}} }})
	m.reconcile(context.Background())
	if _, _, ok := m.OffEvent("n1"); ok {
		t.Fatal("an IPMI BMC offers events")
	}
	if c := m.Counts(); len(m.streams) != 0 || c[redfish.StreamConnected] != 0 {
		t.Fatalf("streams %v", c)
	}
}

// walkCounts is Counts as it was: every stream's mode, read now.
func walkCounts(m *Manager) map[redfish.StreamMode]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[redfish.StreamMode]int{redfish.StreamConnecting: 0, redfish.StreamConnected: 0, redfish.StreamPolling: 0}
	for _, s := range m.streams {
		out[s.s.State().Mode]++
	}
	return out
}

func sameCounts(a, b map[redfish.StreamMode]int) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// The counts kept as the streams change agree with a walk of every
// stream: through connecting, connected and a BMC that cannot be reached,
// a BMC removed (its stream stops after it left the counts) and added back
// under the same key (the old stream's last state must not land on the
// new one's count), and the end of the lead.
func TestCountsFollowEveryModeChange(t *testing.T) {
	var targets sync.Map // "now" → map[string]bmc.Target
	tgt := func(srv *redfishmocktest.Server) bmc.Target {
		ep, err := bmc.ParseAddress(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		return bmc.Target{Address: ep, System: "1", CACertificates: srv.CAPEM,
			Credentials: bmc.Credentials{Username: "admin", Password: bmc.Secret("pw-123456")}, Timeout: 5 * time.Second}
	}
	cfg := redfishmock.Config{Systems: redfishmock.Systems(1), Username: "admin", Password: "pw-123456"}
	a, b := tgt(redfishmocktest.Start(t, cfg)), tgt(redfishmocktest.Start(t, cfg))
	down, err := bmc.ParseAddress("https://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := bmc.Target{Address: down, System: "1", InsecureSkipVerify: true,
		Credentials: bmc.Credentials{Username: "admin", Password: bmc.Secret("pw-123456")}, Timeout: time.Second}
	all := map[string]bmc.Target{"n1": a, "n2": b, "n3": unreachable}
	targets.Store("now", all)
	m := New(Options{Refresh: 10 * time.Millisecond, Targets: func() map[string]bmc.Target {
		v, _ := targets.Load("now")
		return v.(map[string]bmc.Target)
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	agree := func(what string, want func(map[redfish.StreamMode]int) bool) {
		t.Helper()
		waitFor(t, what, func() bool {
			c := m.Counts()
			return want(c) && sameCounts(c, walkCounts(m))
		})
	}
	agree("two connected, one not", func(c map[redfish.StreamMode]int) bool {
		return c[redfish.StreamConnected] == 2 && c[redfish.StreamConnected]+c[redfish.StreamConnecting]+c[redfish.StreamPolling] == 3
	})
	for range 3 {
		targets.Store("now", map[string]bmc.Target{"n1": a, "n3": unreachable})
		agree("n2's BMC gone", func(c map[redfish.StreamMode]int) bool { return c[redfish.StreamConnected] == 1 })
		targets.Store("now", all)
		agree("n2's BMC back", func(c map[redfish.StreamMode]int) bool { return c[redfish.StreamConnected] == 2 })
	}
	// Settled: a while later the counts still agree (no late callback of
	// a replaced stream moved them).
	time.Sleep(200 * time.Millisecond)
	if c, w := m.Counts(), walkCounts(m); !sameCounts(c, w) || c[redfish.StreamConnected] != 2 {
		t.Fatalf("counts %v, a walk of the streams %v", c, w)
	}
	cancel()
	<-done
	for mode, n := range m.Counts() {
		if n != 0 {
			t.Fatalf("after the lead ended: %d streams %s", n, mode)
		}
	}
}

// BenchmarkCounts is the metric's read at 1000 BMCs, as it was (a walk of
// every stream, each behind its own lock) and kept as the states change.
// OnState calls it on every state change of any stream:
//
//	go test -run '^$' -bench Counts ./internal/powerevents/
func BenchmarkCounts(b *testing.B) {
	m := New(Options{})
	for i := range 1000 {
		ep, err := bmc.ParseAddress(fmt.Sprintf("https://10.0.%d.%d", i/250, i%250+1))
		if err != nil {
			b.Fatal(err)
		}
		rs, err := redfish.NewStream(bmc.Target{Address: ep, InsecureSkipVerify: true,
			Credentials: bmc.Credentials{Username: "admin", Password: bmc.Secret("pw-123456")}}, redfish.StreamOptions{})
		if err != nil {
			b.Fatal(err)
		}
		s := &stream{s: rs, live: true, counted: rs.State().Mode}
		m.streams[ep.Host] = s
		m.counts[s.counted]++
	}
	b.Run("walk-before", func(b *testing.B) {
		for b.Loop() {
			walkCounts(m)
		}
	})
	b.Run("kept", func(b *testing.B) {
		for b.Loop() {
			m.Counts()
		}
	})
}
