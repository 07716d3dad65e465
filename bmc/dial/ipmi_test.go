package dial

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/ipmisim"
)

// The IPMI client itself is tested in bmc/ipmi against ipmi_sim and pyghmi;
// here, that New hands ipmi:// targets to it, IPv6 included, and that
// nothing needs ipmitool.

func ipmiAdapter(t *testing.T, addr, user, password string, timeout time.Duration) *Adapter {
	t.Helper()
	return newAdapter(t, ipmiTarget(t, addr, user, password, timeout))
}

func TestIPMIOverIPv4AndIPv6WithoutIpmitool(t *testing.T) {
	for _, address := range []string{"127.0.0.1", "::1"} {
		t.Run(address, func(t *testing.T) {
			if address == "::1" {
				pc, err := net.ListenPacket("udp6", "[::1]:0")
				if err != nil {
					t.Skipf("no IPv6 loopback: %v", err)
				}
				_ = pc.Close()
			}
			sim := ipmisim.StartT(t, ipmisim.Options{InitialPower: true, Address: address})
			t.Setenv("PATH", t.TempDir()) // no ipmitool, nor anything else
			a := ipmiAdapter(t, sim.Address(), sim.Username(), sim.Password(), 5*time.Second)
			if address == "::1" && !strings.HasPrefix(a.Target().Address.String(), "ipmi://[::1]:") {
				t.Errorf("target %s, want ipmi://[::1]:PORT", a.Target().Address)
			}
			ctx := context.Background()
			if st, err := a.PowerStatus(ctx); err != nil || st.State != bmc.PowerOn || st.Provider != "ipmi" {
				t.Fatalf("PowerStatus = %+v, %v; want On from ipmi", st, err)
			}
			if _, err := a.PowerOff(ctx); err != nil {
				t.Fatalf("PowerOff: %v", err)
			}
			if on, _ := sim.Power(); on {
				t.Error("machine still on after PowerOff")
			}
			if id, err := a.Identity(ctx); err != nil || id.UUID != sim.GUID() {
				t.Errorf("Identity = %+v, %v; want UUID %s", id, err, sim.GUID())
			}
		})
	}
}
