package dial

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/ipmisim"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

// BenchmarkRedfishPowerStatus is one PowerStatus as the engine issues it
// from its long-lived adapter: TLS verified against the mock's CA, Basic
// auth, the kept-alive connection reused and the system's URI known, so
// one GET.
func BenchmarkRedfishPowerStatus(b *testing.B) {
	srv := redfishmocktest.Start(b, mockConfig())
	a := newAdapter(b, redfishTarget(b, srv.URL, srv.CAPEM))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		st, err := a.PowerStatus(ctx)
		if err != nil || st.State != bmc.PowerOn {
			b.Fatalf("PowerStatus = %v, %v", st.State, err)
		}
	}
}

// BenchmarkIPMIPowerStatus is one PowerStatus over IPMI 2.0 lanplus against
// ipmi_sim: a session (five exchanges), Get Chassis Status, Close Session.
func BenchmarkIPMIPowerStatus(b *testing.B) {
	sim := ipmisim.StartT(b, ipmisim.Options{InitialPower: true})
	a := newAdapter(b, ipmiTarget(b, sim.Address(), sim.Username(), sim.Password(), 5*time.Second))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		st, err := a.PowerStatus(ctx)
		if err != nil || st.State != bmc.PowerOn {
			b.Fatalf("PowerStatus = %v, %v", st.State, err)
		}
	}
}

func ipmiTarget(tb testing.TB, addr, user, password string, timeout time.Duration) bmc.Target {
	tb.Helper()
	ep, err := bmc.ParseAddress("ipmi://" + addr)
	if err != nil {
		tb.Fatal(err)
	}
	return bmc.Target{Address: ep, Credentials: bmc.Credentials{Username: user, Password: bmc.Secret(password)}, Timeout: timeout}
}

// BenchmarkRedfishProbeConnection is the fenceability probe (one identity
// read, as the agent sends each BMC once a minute) three ways: on a
// kept-alive connection; on a new connection with a full TLS handshake;
// on a new connection that resumes the TLS session (the agent's way since
// idle connections close between probes). Client and mock run in this
// process: the figures are both sides' CPU, as the agent and the BMC
// share the cost of a handshake.
func BenchmarkRedfishProbeConnection(b *testing.B) {
	srv := redfishmocktest.Start(b, mockConfig())
	ctx := context.Background()
	for _, mode := range []struct {
		name          string
		close, resume bool
	}{{"kept-alive", false, true}, {"full-handshake", true, false}, {"resumed", true, true}} {
		b.Run(mode.name, func(b *testing.B) {
			a := newAdapter(b, redfishTarget(b, srv.URL, srv.CAPEM))
			closer := a.Controller.(interface{ CloseIdleConnections() })
			if !mode.resume {
				a.Controller.(interface{ DisableSessionResumption() }).DisableSessionResumption()
			}
			if _, err := a.Identity(ctx); err != nil { // finds the system, binds it
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			n := 0
			for b.Loop() {
				if mode.close {
					closer.CloseIdleConnections()
				}
				if _, err := a.Identity(ctx); err != nil {
					b.Fatal(err)
				}
				n++
			}
			// CPU time, not wall time: on a shared machine the latter
			// measures the neighbours.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(n), "cpu-ns/op")
		})
	}
}

// processCPU is this process's user+system CPU time so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
