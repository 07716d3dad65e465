package powerevents

import (
	"context"
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
