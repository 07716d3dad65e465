package redfishmock_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/common"
	"github.com/stmcginnis/gofish/redfish"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

// These tests speak to the mock through the clients the BMC adapter uses:
// gofish v0.20.0 directly and bmclib v2.3.5's "gofish" provider, over TLS
// verified against the mock's certificate.

func connectGofish(t *testing.T, srv *redfishmocktest.Server, basicAuth bool) *gofish.APIClient {
	t.Helper()
	client, err := gofish.ConnectContext(context.Background(), gofish.ClientConfig{
		Endpoint:   srv.URL,
		Username:   adminUser,
		Password:   adminPass,
		BasicAuth:  basicAuth,
		HTTPClient: srv.Client(),
	})
	if err != nil {
		t.Fatalf("gofish connect (basic auth %v): %v", basicAuth, err)
	}
	t.Cleanup(client.Logout)
	return client
}

func TestGofishReadsAndResets(t *testing.T) {
	for _, tc := range []struct {
		name      string
		basicAuth bool
	}{{"session auth", false}, {"basic auth", true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redfishmocktest.Start(t, twoSystems())
			client := connectGofish(t, srv, tc.basicAuth)

			if client.Service.RedfishVersion != redfishmock.RedfishVersion {
				t.Errorf("RedfishVersion = %q", client.Service.RedfishVersion)
			}
			systems, err := client.Service.Systems()
			if err != nil {
				t.Fatal(err)
			}
			if len(systems) != 2 {
				t.Fatalf("%d systems, want 2", len(systems))
			}
			var sys *redfish.ComputerSystem
			for _, s := range systems {
				if s.ID == "1" {
					sys = s
				}
			}
			want := srv.Mock.Statuses()[0]
			got := []string{sys.Name, sys.UUID, string(sys.PowerState), string(sys.BootProgress.LastState)}
			if diff := cmp.Diff([]string{want.Name, want.UUID, "On", "OSRunning"}, got); diff != "" {
				t.Errorf("system 1 as gofish reads it (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(redfishResetTypes(), sys.SupportedResetTypes); diff != "" {
				t.Errorf("SupportedResetTypes (-want +got):\n%s", diff)
			}
			if err := sys.Reset(redfish.ForceOnResetType); err == nil {
				t.Error("gofish sent ForceOn, which the system does not list")
			}

			if err := sys.Reset(redfish.ForceOffResetType); err != nil {
				t.Fatalf("Reset(ForceOff): %v", err)
			}
			if got := readPower(t, client, sys.ODataID); got != redfish.OffPowerState {
				t.Errorf("after ForceOff: %s", got)
			}
			// PowerCycle of an Off system: a 409 gofish surfaces as *common.Error.
			var rfErr *common.Error
			if err := sys.Reset(redfish.PowerCycleResetType); !errors.As(err, &rfErr) || rfErr.HTTPReturnedStatusCode != http.StatusConflict {
				t.Errorf("PowerCycle when Off: %v, want a 409 *common.Error", err)
			}
			if err := sys.Reset(redfish.OnResetType); err != nil {
				t.Fatalf("Reset(On): %v", err)
			}
			if got := readPower(t, client, sys.ODataID); got != redfish.OnPowerState {
				t.Errorf("after On: %s", got)
			}
			if n := srv.Mock.Statuses()[0].Counters.Resets[redfishmock.ResetForceOff]; n != 1 {
				t.Errorf("mock received %d ForceOff, want 1", n)
			}
		})
	}
}

func redfishResetTypes() []redfish.ResetType {
	var out []redfish.ResetType
	for _, rt := range redfishmock.AllowedResetTypes() {
		out = append(out, redfish.ResetType(rt))
	}
	return out
}

func readPower(t *testing.T, client *gofish.APIClient, uri string) redfish.PowerState {
	t.Helper()
	sys, err := redfish.GetComputerSystem(client, uri)
	if err != nil {
		t.Fatalf("GET %s: %v", uri, err)
	}
	return sys.PowerState
}

func TestGofishLogoutEndsTheSession(t *testing.T) {
	srv := redfishmocktest.Start(t, twoSystems())
	client, err := gofish.Connect(gofish.ClientConfig{Endpoint: srv.URL, Username: adminUser, Password: adminPass, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := client.Service.Sessions()
	if err != nil || len(sessions) != 1 {
		t.Fatalf("sessions while logged in: %d, %v", len(sessions), err)
	}
	client.Logout()
	resp := serve(srv.Mock, http.MethodGet, "/redfish/v1/SessionService/Sessions", "", asAdmin())
	if n := resp.JSON(t)["Members@odata.count"]; n != float64(0) {
		t.Errorf("%v sessions left after Logout", n)
	}
}

func TestGofishOverPlainHTTP(t *testing.T) {
	srv := redfishmocktest.StartHTTP(t, twoSystems())
	client := connectGofish(t, srv, false)
	if _, err := client.Service.Systems(); err != nil {
		t.Fatal(err)
	}
}

func TestBmclibGofishProvider(t *testing.T) {
	cfg := twoSystems()
	cfg.Systems[0] = redfishmock.SystemConfig{Name: "node-a"}
	cfg.Systems[1] = redfishmock.SystemConfig{Name: "node-b"}
	srv := redfishmocktest.Start(t, cfg)

	for _, tc := range []struct {
		name      string
		basicAuth bool
	}{{"session auth", false}, {"basic auth", true}} {
		t.Run(tc.name, func(t *testing.T) {
			if err := srv.Mock.SetPower("2", redfishmock.PowerOn); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := bmclib.NewClient(srv.Host, adminUser, adminPass,
				bmclib.WithRedfishPort(srv.Port),
				bmclib.WithSecureTLS(srv.CertPool),
				bmclib.WithRedfishSystemName("node-b"), // by Name, not Id
				bmclib.WithRedfishUseBasicAuth(tc.basicAuth),
				bmclib.WithPerProviderTimeout(10*time.Second),
			)
			cl.Registry.Drivers = cl.Registry.For("gofish")
			if err := cl.Open(ctx); err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer cl.Close(ctx)

			state, err := cl.GetPowerState(ctx)
			if err != nil || state != "On" {
				t.Fatalf("GetPowerState = %q, %v", state, err)
			}
			if ok, err := cl.SetPowerState(ctx, "off"); !ok || err != nil {
				t.Fatalf("SetPowerState(off) = %v, %v", ok, err)
			}
			if state, err := cl.GetPowerState(ctx); err != nil || state != "Off" {
				t.Errorf("after off: %q, %v", state, err)
			}
			if st := srv.Mock.Statuses(); st[0].PowerState != redfishmock.PowerOn {
				t.Errorf("node-a was touched: %s", st[0].PowerState)
			}
		})
	}
}
