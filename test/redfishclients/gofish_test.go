package redfishclients

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

// gofish v0.23.0 (github.com/stmcginnis/gofish/schemas) against the mock,
// over TLS verified against the mock's certificate.

const (
	adminUser = "admin"
	adminPass = "secret-Pa55"
)

func twoSystems() redfishmock.Config {
	return redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(2)}
}

func connect(t *testing.T, srv *redfishmocktest.Server, basicAuth bool) *gofish.APIClient {
	t.Helper()
	client, err := gofish.ConnectContext(context.Background(), gofish.ClientConfig{
		Endpoint: srv.URL, Username: adminUser, Password: adminPass, BasicAuth: basicAuth, HTTPClient: srv.Client(),
	})
	if err != nil {
		t.Fatalf("gofish connect (basic auth %v): %v", basicAuth, err)
	}
	t.Cleanup(client.Logout)
	return client
}

func system(t *testing.T, client *gofish.APIClient, id string) *schemas.ComputerSystem {
	t.Helper()
	systems, err := client.Service.Systems()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range systems {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("no system %s among %d", id, len(systems))
	return nil
}

func TestGofishReadsAndResets(t *testing.T) {
	for _, tc := range []struct {
		name      string
		basicAuth bool
	}{{"session auth", false}, {"basic auth", true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redfishmocktest.Start(t, twoSystems())
			client := connect(t, srv, tc.basicAuth)
			if client.Service.RedfishVersion != redfishmock.RedfishVersion {
				t.Errorf("RedfishVersion = %q", client.Service.RedfishVersion)
			}
			sys := system(t, client, "1")
			want := srv.Mock.Statuses()[0]
			if sys.Name != want.Name || sys.UUID != want.UUID || sys.PowerState != schemas.OnPowerState || sys.BootProgress.LastState != schemas.OSRunningBootProgressTypes {
				t.Errorf("system 1 as gofish reads it: %q %q %s %s", sys.Name, sys.UUID, sys.PowerState, sys.BootProgress.LastState)
			}
			if _, err := sys.Reset(schemas.ForceOnResetType); err == nil {
				t.Error("gofish sent ForceOn, which the system does not list")
			}
			if _, err := sys.Reset(schemas.ForceOffResetType); err != nil {
				t.Fatalf("Reset(ForceOff): %v", err)
			}
			if got := system(t, client, "1").PowerState; got != schemas.OffPowerState {
				t.Errorf("after ForceOff: %s", got)
			}
			if _, err := sys.Reset(schemas.OnResetType); err != nil {
				t.Fatalf("Reset(On): %v", err)
			}
			if n := srv.Mock.Statuses()[0].Counters.Resets[redfishmock.ResetForceOff]; n != 1 {
				t.Errorf("mock received %d ForceOff, want 1", n)
			}
			if other := srv.Mock.Statuses()[1]; len(other.Counters.Resets) != 0 {
				t.Errorf("system 2 received %v", other.Counters.Resets)
			}
		})
	}
}

func TestGofishLogoutEndsTheSession(t *testing.T) {
	srv := redfishmocktest.Start(t, twoSystems())
	client, err := gofish.Connect(gofish.ClientConfig{Endpoint: srv.URL, Username: adminUser, Password: adminPass, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if n := sessions(t, srv); n != 1 {
		t.Fatalf("%d sessions while logged in, want 1", n)
	}
	client.Logout()
	if n := sessions(t, srv); n != 0 {
		t.Errorf("%d sessions left after Logout", n)
	}
}

// sessions counts the mock's open sessions.
func sessions(t *testing.T, srv *redfishmocktest.Server) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/redfish/v1/SessionService/Sessions", nil)
	req.SetBasicAuth(adminUser, adminPass)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var coll struct {
		Count int `json:"Members@odata.count"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&coll); err != nil {
		t.Fatal(err)
	}
	return coll.Count
}

func TestGofishOverPlainHTTP(t *testing.T) {
	srv := redfishmocktest.StartHTTP(t, twoSystems())
	client := connect(t, srv, false)
	if _, err := client.Service.Systems(); err != nil {
		t.Fatal(err)
	}
}

// gofish sends the system's ETag as If-Match on the Reset; iDRAC10 (the
// mock's idrac10 profile) answers 412, and gofish (since v0.21.5) retries
// without it: one ForceOff lands.
func TestGofishRetriesIDRAC10sPreconditionFailure(t *testing.T) {
	cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileIDRAC10}
	srv := redfishmocktest.Start(t, cfg)
	client := connect(t, srv, true)
	sys := system(t, client, "1")
	if _, err := sys.Reset(schemas.ForceOffResetType); err != nil {
		t.Fatalf("gofish Reset against idrac10 = %v, want it accepted after retrying without If-Match", err)
	}
	// The 412 comes before the mock counts a Reset: one ForceOff lands.
	st := srv.Mock.Statuses()[0]
	if st.Counters.Resets[redfishmock.ResetForceOff] != 1 || st.PowerState != redfishmock.PowerOff || st.Counters.Requests < 2 {
		t.Errorf("resets %v, %d requests, power %s: want the retried ForceOff landed and the system off", st.Counters.Resets, st.Counters.Requests, st.PowerState)
	}
}
