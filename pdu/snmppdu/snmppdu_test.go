package snmppdu_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfish"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
	"github.com/bmcfence/bmcfence/pdu"
	"github.com/bmcfence/bmcfence/pdu/snmppdu"
	"github.com/bmcfence/bmcfence/pdu/snmpsim"
)

func v2c(a *snmpsim.Agent, outlet int, community string) snmppdu.Target {
	return snmppdu.Target{Host: a.Host, Port: a.Port, Outlet: outlet, Version: snmppdu.V2c, Community: bmc.Secret(community), Timeout: 2 * time.Second}
}

func v3(a *snmpsim.Agent, outlet int, user string) snmppdu.Target {
	return snmppdu.Target{Host: a.Host, Port: a.Port, Outlet: outlet, Version: snmppdu.V3, User: user,
		AuthProtocol: "SHA", AuthPassword: snmpsim.V3AuthPass, PrivProtocol: "AES", PrivPassword: snmpsim.V3PrivPass, Timeout: 2 * time.Second}
}

func newClient(t *testing.T, tg snmppdu.Target) *snmppdu.Client {
	t.Helper()
	c, err := snmppdu.New(tg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSNMPOutletOffIsAcceptedAndReadsBackOff(t *testing.T) {
	for _, mib := range []snmppdu.MIB{snmppdu.MIBAuto, snmppdu.MIBRackPDU, snmppdu.MIBMasterSwitch} {
		for name, tg := range map[string]func(*snmpsim.Agent) snmppdu.Target{
			"v2c": func(a *snmpsim.Agent) snmppdu.Target { return v2c(a, 3, snmpsim.WriteCommunity) },
			"v3":  func(a *snmpsim.Agent) snmppdu.Target { return v3(a, 3, snmpsim.V3User) },
		} {
			t.Run(string(mib)+"/"+name, func(t *testing.T) {
				bank := snmpsim.NewMemoryBank(4)
				a := snmpsim.StartT(t, bank)
				target := tg(a)
				target.MIB = mib
				c := newClient(t, target)
				ctx := context.Background()
				if st, err := c.PowerStatus(ctx); err != nil || st.State != bmc.PowerOn {
					t.Fatalf("before: %+v %v", st, err)
				}
				res, err := c.PowerOff(ctx)
				if err != nil || !strings.HasPrefix(res.Sent, "SET .1.3.6.1.4.1.318.") {
					t.Fatalf("off: %+v %v", res, err)
				}
				if _, on, _, _ := bank.Outlet(3); on {
					t.Error("the PDU's outlet 3 is still on")
				}
				if st, _ := c.PowerStatus(ctx); st.State != bmc.PowerOff {
					t.Errorf("after: %+v", st)
				}
				if _, err := c.PowerOn(ctx); err != nil {
					t.Fatal(err)
				}
				if _, on, _, _ := bank.Outlet(3); !on {
					t.Error("not back on")
				}
				id, err := c.OutletIdentity(ctx)
				if err != nil || id.SerialNumber != "ZA1234567890" || id.Model != "AP7921B" || id.OutletName != "Outlet 3" || id.Key() != "ZA1234567890/3" {
					t.Errorf("identity %+v %v", id, err)
				}
			})
		}
	}
}

func TestSNMPErrorsNameTheCauseAndNeverTheSecret(t *testing.T) {
	bank := snmpsim.NewMemoryBank(2)
	a := snmpsim.StartT(t, bank)
	ctx := context.Background()
	tests := []struct {
		name   string
		target snmppdu.Target
		off    bool
		want   error
		secret string
	}{
		{"a read-only community cannot switch", v2c(a, 1, snmpsim.ReadCommunity), true, bmc.ErrAuth, snmpsim.ReadCommunity},
		{"a read-only v3 user cannot switch", v3(a, 1, snmpsim.V3ReadUser), true, bmc.ErrAuth, snmpsim.V3AuthPass},
		{"a wrong community is not answered at all", func() snmppdu.Target {
			tg := v2c(a, 1, "wrong-community-1")
			tg.Timeout = 300 * time.Millisecond
			return tg
		}(), false, bmc.ErrTimeout, "wrong-community-1"},
		{"a wrong v3 password", func() snmppdu.Target {
			tg := v3(a, 1, snmpsim.V3User)
			tg.AuthPassword = "wrong-auth-pass-1"
			tg.Timeout = 300 * time.Millisecond
			return tg
		}(), false, bmc.ErrAuth, "wrong-auth-pass-1"},
		{"an outlet the PDU does not have", v2c(a, 9, snmpsim.ReadCommunity), false, pdu.ErrNoSuchOutlet, snmpsim.ReadCommunity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, tt.target)
			var err error
			if tt.off {
				_, err = c.PowerOff(ctx)
			} else {
				_, err = c.PowerStatus(ctx)
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("%v; want %v", err, tt.want)
			}
			if strings.Contains(err.Error(), tt.secret) {
				t.Errorf("the error shows a secret: %v", err)
			}
		})
	}
	if _, on, _, _ := bank.Outlet(1); !on {
		t.Error("a refused SET switched the outlet")
	}
}

func TestSNMPTargetsAreValidatedAndRiskyOnesNamed(t *testing.T) {
	ok := snmppdu.Target{Host: "10.0.0.9", Outlet: 1, Version: snmppdu.V2c, Community: "private"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if r := ok.RiskySettings(); len(r) != 1 || !strings.Contains(r[0], "clear text") || strings.Contains(r[0], "private") {
		t.Errorf("risky: %v", r)
	}
	good3 := snmppdu.Target{Host: "10.0.0.9", Outlet: 1, Version: snmppdu.V3, User: "u", AuthProtocol: "SHA", AuthPassword: "12345678", PrivProtocol: "AES", PrivPassword: "12345678"}
	if err := good3.Validate(); err != nil || len(good3.RiskySettings()) != 0 {
		t.Errorf("v3 authPriv: %v %v", err, good3.RiskySettings())
	}
	for _, bad := range []snmppdu.Target{
		{Outlet: 1, Version: snmppdu.V2c, Community: "c"},
		{Host: "h", Version: snmppdu.V2c, Community: "c"},
		{Host: "h", Outlet: 1, Version: snmppdu.V2c},
		{Host: "h", Outlet: 1, Version: "4", Community: "c"},
		{Host: "h", Outlet: 1, Version: snmppdu.V3},
		{Host: "h", Outlet: 1, Version: snmppdu.V3, User: "u", AuthProtocol: "SHA", AuthPassword: "short"},
		{Host: "h", Outlet: 1, Version: snmppdu.V3, User: "u", PrivProtocol: "AES", PrivPassword: "12345678"},
		{Host: "h", Outlet: 1, Version: snmppdu.V2c, Community: "c", MIB: "eaton"},
	} {
		if _, err := snmppdu.New(bad); !errors.Is(err, pdu.ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestSNMPCredentialsComeFromTheBMCSecretKeys(t *testing.T) {
	tg, err := snmppdu.CredentialsFromSecret(snmppdu.Target{Version: snmppdu.V2c}, map[string][]byte{"community": []byte("private\n")})
	if err != nil || tg.Community.Reveal() != "private" {
		t.Errorf("v2c: %v", err)
	}
	tg, err = snmppdu.CredentialsFromSecret(snmppdu.Target{Version: snmppdu.V3, AuthProtocol: "SHA", PrivProtocol: "AES"},
		map[string][]byte{"username": []byte("fence"), "password": []byte("auth-pass-1"), "privPassword": []byte("priv-pass-1")})
	if err != nil || tg.User != "fence" || tg.AuthPassword.Reveal() != "auth-pass-1" || tg.PrivPassword.Reveal() != "priv-pass-1" {
		t.Errorf("v3: %+v %v", tg, err)
	}
	if _, err := snmppdu.CredentialsFromSecret(snmppdu.Target{Version: snmppdu.V3, AuthProtocol: "SHA", PrivProtocol: "AES"},
		map[string][]byte{"username": []byte("fence"), "password": []byte("auth-pass-1")}); err == nil || !strings.Contains(err.Error(), "privPassword") {
		t.Errorf("missing privPassword: %v", err)
	}
}

func TestFenceAPCSNMPDrivesTheSNMPPDUMock(t *testing.T) {
	bank := snmpsim.NewMemoryBank(8)
	a := snmpsim.StartT(t, bank)
	v2 := []string{"--snmp-version=2c", "--community=" + snmpsim.WriteCommunity, "--plug=5"}
	if out, code := snmpsim.FenceAPCSNMP(t, a, append(v2, "--action=status")...); code != 0 || out != "Status: ON" {
		t.Fatalf("status: %d %q", code, out)
	}
	if _, code := snmpsim.FenceAPCSNMP(t, a, append(v2, "--action=off")...); code != 0 {
		t.Fatalf("off: exit %d", code)
	}
	if _, on, _, _ := bank.Outlet(5); on {
		t.Fatal("outlet 5 is on after fence_apc_snmp --action=off")
	}
	// Our client reads what fence_apc_snmp did.
	st, err := newClient(t, v2c(a, 5, snmpsim.ReadCommunity)).PowerStatus(context.Background())
	if err != nil || st.State != bmc.PowerOff {
		t.Errorf("our client reads %+v %v", st, err)
	}
	if out, code := snmpsim.FenceAPCSNMP(t, a, append(v2, "--action=status")...); code != 2 || out != "Status: OFF" {
		t.Errorf("status of an off outlet: %d %q (fence agents exit 2 for off)", code, out)
	}
	// SNMPv3 authPriv, on again.
	v3args := []string{"--snmp-version=3", "--username=" + snmpsim.V3User, "--password=" + snmpsim.V3AuthPass, "--snmp-auth-prot=SHA",
		"--snmp-sec-level=authPriv", "--snmp-priv-prot=AES", "--snmp-priv-passwd=" + snmpsim.V3PrivPass, "--plug=5", "--action=on"}
	if _, code := snmpsim.FenceAPCSNMP(t, a, v3args...); code != 0 {
		t.Fatalf("on over v3: exit %d", code)
	}
	if _, on, _, _ := bank.Outlet(5); !on {
		t.Error("outlet 5 is off after fence_apc_snmp --action=on")
	}
	// What it sent: rPDUOutletControlOutletCommand, 2 then 1.
	var got []string
	for _, s := range a.Sets() {
		got = append(got, s.OID+"="+strconv.Itoa(s.Value))
	}
	want := ".1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.5=2 .1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.5=1"
	if strings.Join(got, " ") != want {
		t.Errorf("sets %v", got)
	}
}

// TestSNMPOutletFeedsAMachinesSupply wires the SNMP agent to a redfishmock
// PDU: switching the outlet over SNMP takes that supply's input away, as
// the machine's BMC reports, and VerifyOutlet proves it.
func TestSNMPOutletFeedsAMachinesSupply(t *testing.T) {
	srv := redfishmocktest.Start(t, redfishmock.Config{Username: "admin", Password: "secret-Pa55", Systems: redfishmock.Systems(1),
		PDUs: []redfishmock.PDUConfig{{Outlets: []redfishmock.OutletConfig{{Feeds: "1/1"}, {Feeds: "1/2"}}}}})
	bank, err := srv.Mock.PDUBank("1")
	if err != nil {
		t.Fatal(err)
	}
	a := snmpsim.StartT(t, bank)
	o := newClient(t, v3(a, 2, snmpsim.V3User))
	ctx := context.Background()
	r, err := o.Metering(ctx)
	if err != nil || r.Watts != redfishmock.OnWatts/2 {
		t.Fatalf("metering %+v %v", r, err)
	}
	ep, _ := bmc.ParseAddress(srv.URL)
	m, err := redfish.New(bmc.Target{Address: ep, System: "1", CACertificates: srv.CAPEM, Credentials: bmc.Credentials{Username: "admin", Password: "secret-Pa55"}})
	if err != nil {
		t.Fatal(err)
	}
	proof, err := pdu.VerifyOutlet(ctx, m, o, pdu.VerifyOptions{Poll: 10 * time.Millisecond, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if proof.PSU != "2" || proof.Outlet.Key() != "PDU-1/2" {
		t.Errorf("proof: PSU %q, outlet %q", proof.PSU, proof.Outlet.Key())
	}
	if st, _ := srv.Mock.Status("1"); st.PowerState != redfishmock.PowerOn {
		t.Errorf("machine %s after the test", st.PowerState)
	}
}
