package bmclib

import (
	"context"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/ipmisim"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

// BenchmarkRedfishPowerStatus is one PowerStatus as the engine issues it:
// a fresh transport, TLS verified against the mock's CA, Basic auth. gofish
// closes the connection after every request, so each of the three requests
// (service root, Systems collection, the system) pays a TCP connect and a
// TLS handshake.
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
// ipmi_sim: an ipmitool process per call.
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
