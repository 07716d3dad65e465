package snmpsim

import (
	"context"
	"testing"
	"time"
)

// Two packages' tests start snmpd at once: a port one of them took between
// the other's probe and its snmpd's bind makes the second snmpd fail to
// bind and exit, while the first answers the second's readiness probe. The
// second agent must not take that answer for its own (its clients would
// talk to another test's PDU until it stops, then get "connection
// refused").
func TestAStartOnAPortAnotherSnmpdHoldsIsNotReady(t *testing.T) {
	first := StartT(t, NewMemoryBank(2))
	defer func(p func() (int, error)) { pickUDPPort = p }(pickUDPPort)
	pickUDPPort = func() (int, error) { return first.Port, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second, err := Start(ctx, NewMemoryBank(2), t.TempDir())
	if err == nil {
		second.Stop()
		t.Fatalf("a second agent started on udp %d, which the first one's snmpd holds: its readiness probe was answered by the first", first.Port)
	}
	t.Logf("refused as it should be: %v", err)
}
