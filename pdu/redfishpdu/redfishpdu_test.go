package redfishpdu_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
	"github.com/bmcfence/bmcfence/pdu"
	"github.com/bmcfence/bmcfence/pdu/redfishpdu"
)

const (
	adminUser = "admin"
	adminPass = "pdu-Secret-9"
)

func start(t *testing.T) *redfishmocktest.Server {
	t.Helper()
	return redfishmocktest.Start(t, redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(2),
		PDUs: []redfishmock.PDUConfig{{SerialNumber: "SN-PDU-1", Outlets: []redfishmock.OutletConfig{
			{ID: "A1", Name: "node-a psu1", Feeds: "1/1"}, {ID: "A2", Name: "node-a psu2", Feeds: "1/2"},
			{ID: "B1", Name: "spare"}, {ID: "B2", Name: "spare"},
		}}}})
}

func client(t *testing.T, srv *redfishmocktest.Server, outlet, pass string) *redfishpdu.Client {
	t.Helper()
	ep, err := bmc.ParseAddress(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := redfishpdu.New(redfishpdu.Target{Outlet: outlet, Device: bmc.Target{Address: ep, CACertificates: srv.CAPEM,
		Credentials: bmc.Credentials{Username: adminUser, Password: bmc.Secret(pass)}, Timeout: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRedfishOutletOffIsAcceptedAndReadsBackOff(t *testing.T) {
	srv := start(t)
	c := client(t, srv, "A1", adminPass)
	ctx := context.Background()
	st, err := c.PowerStatus(ctx)
	if err != nil || st.State != bmc.PowerOn {
		t.Fatalf("before: %v %v", st, err)
	}
	m, err := c.Metering(ctx)
	if err != nil || m.Watts != redfishmock.OnWatts/2 {
		t.Fatalf("metering %+v %v", m, err)
	}
	res, err := c.PowerOff(ctx)
	if err != nil || res.Sent != "Outlet.PowerControl Off" {
		t.Fatalf("off: %+v %v", res, err)
	}
	if st, _ := c.PowerStatus(ctx); st.State != bmc.PowerOff || st.Raw != "Off" {
		t.Errorf("after: %+v", st)
	}
	if m, _ := c.Metering(ctx); m.Watts != 0 || m.Raw != "PowerWatts.Reading=0" {
		t.Errorf("metering after off: %+v", m)
	}
	if _, err := c.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := c.OutletIdentity(ctx)
	if err != nil || id.SerialNumber != "SN-PDU-1" || id.OutletID != "A1" || id.OutletName != "node-a psu1" || id.Key() != "SN-PDU-1/A1" {
		t.Errorf("identity %+v %v", id, err)
	}
}

func TestRedfishOutletAlreadyOffIsNotAcceptance(t *testing.T) {
	srv := start(t)
	_ = srv.Mock.SetOutlet("1", "B1", redfishmock.PowerOff)
	_ = srv.Mock.SetPDUFaults("1", redfishmock.PDUFaults{ConflictWhenOff: true})
	_, err := client(t, srv, "B1", adminPass).PowerOff(context.Background())
	if !errors.Is(err, pdu.ErrAlreadyInState) || !errors.Is(err, bmc.ErrAlreadyInState) {
		t.Errorf("%v; want ErrAlreadyInState (as a BMC's 409)", err)
	}
}

func TestRedfishOutletErrorsAreClassifiedAndRedacted(t *testing.T) {
	srv := start(t)
	tests := []struct {
		name   string
		outlet string
		pass   string
		want   error
	}{
		{"wrong password", "A1", "wrong-Pass-1", bmc.ErrAuth},
		{"no such outlet", "Z9", adminPass, pdu.ErrNoSuchOutlet},
		{"a Name shared by two outlets", "spare", adminPass, pdu.ErrNoSuchOutlet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client(t, srv, tt.outlet, tt.pass).PowerStatus(context.Background())
			if !errors.Is(err, tt.want) {
				t.Fatalf("%v; want %v", err, tt.want)
			}
			var oe *pdu.OpError
			if !errors.As(err, &oe) || strings.Contains(err.Error(), tt.pass) {
				t.Errorf("%q", err)
			}
		})
	}
	if _, err := client(t, srv, "node-a psu2", adminPass).PowerStatus(context.Background()); err != nil {
		t.Errorf("by Name: %v", err)
	}
}

func TestRedfishOutletOfAHungPDUTimesOut(t *testing.T) {
	srv := start(t)
	_ = srv.Mock.SetPDUFaults("1", redfishmock.PDUFaults{Hang: true})
	ep, _ := bmc.ParseAddress(srv.URL)
	c, err := redfishpdu.New(redfishpdu.Target{Outlet: "A1", Device: bmc.Target{Address: ep, CACertificates: srv.CAPEM,
		Credentials: bmc.Credentials{Username: adminUser, Password: adminPass}, Timeout: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PowerOff(context.Background()); !errors.Is(err, bmc.ErrTimeout) {
		t.Errorf("%v", err)
	}
}

func TestRedfishPDUTargetsAreValidated(t *testing.T) {
	ep, _ := bmc.ParseAddress("https://10.0.0.9")
	ipmi, _ := bmc.ParseAddress("ipmi://10.0.0.9")
	creds := bmc.Credentials{Username: "u", Password: "p"}
	for _, tt := range []redfishpdu.Target{
		{Device: bmc.Target{Address: ep, Credentials: creds}},
		{Device: bmc.Target{Address: ipmi, Credentials: creds}, Outlet: "1"},
		{Device: bmc.Target{Address: ep, Credentials: creds, System: "1"}, Outlet: "1"},
		{Device: bmc.Target{Address: ep, Credentials: creds, Auth: bmc.AuthSession}, Outlet: "1"},
	} {
		if _, err := redfishpdu.New(tt); !errors.Is(err, pdu.ErrInvalid) {
			t.Errorf("%+v: %v", tt, err)
		}
	}
}

// A command that fails after it may have reached the PDU (no answer
// within the timeout) is reported as sent: it may have landed.
func TestRedfishOutletCommandWithoutAnswerIsReportedSent(t *testing.T) {
	mock, err := redfishmock.New(redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1),
		PDUs: []redfishmock.PDUConfig{{SerialNumber: "SN-PDU-1", Outlets: []redfishmock.OutletConfig{{ID: "A1", Feeds: "1/1"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			<-release // taken, never answered
			return
		}
		mock.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		close(release)
		srv.Close()
		mock.Close()
	})
	ep, err := bmc.ParseAddress(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := redfishpdu.New(redfishpdu.Target{Outlet: "A1", Device: bmc.Target{Address: ep,
		Credentials: bmc.Credentials{Username: adminUser, Password: adminPass}, Timeout: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.PowerOff(context.Background())
	if err == nil || res.Sent != "Outlet.PowerControl Off" {
		t.Errorf("PowerOff without an answer = %+v, %v; want an error and the command named as sent", res, err)
	}
}
