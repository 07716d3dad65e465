package snmpsim

import (
	"context"
	"testing"
	"time"
)

// StartT starts an agent for a test: it skips the test (with the install
// hint) when snmpd is missing, fails it when the agent does not start,
// and stops it in t.Cleanup.
func StartT(t testing.TB, bank Bank) *Agent {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Start(ctx, bank, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}
