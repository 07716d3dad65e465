package dial

import (
	"context"
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
