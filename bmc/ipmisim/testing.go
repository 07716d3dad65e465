package ipmisim

import (
	"context"
	"testing"
	"time"
)

// startTTimeout bounds StartT's start-up; see defaultStartTimeout.
const startTTimeout = 30 * time.Second

// StartT starts a Sim for a test: it skips the test (with the install hint) when ipmi_sim or
// ipmitool is missing, fails it when the sim does not start, and stops the sim in t.Cleanup. An
// empty opts.Dir becomes t.TempDir(), so the files outlive Stop until the test ends.
func StartT(t testing.TB, opts Options) *Sim {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err.Error())
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir() // registered before Stop's cleanup, so removed after it
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTTimeout)
	defer cancel()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping ipmi_sim at %s: %v", s.Address(), err)
		}
	})
	return s
}
