package redfishmock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

func TestPublicResourcesNeedNoAuth(t *testing.T) {
	h := newHarness(t, twoSystems())
	tests := []struct {
		path string
		want map[string]any
	}{
		{"/redfish", map[string]any{"v1": "/redfish/v1/"}},
		{"/redfish/", map[string]any{"v1": "/redfish/v1/"}},
	}
	for _, tt := range tests {
		resp := h.do(http.MethodGet, tt.path, "")
		if resp.Code != http.StatusOK {
			t.Fatalf("GET %s = %d", tt.path, resp.Code)
		}
		if diff := cmp.Diff(tt.want, resp.JSON(t)); diff != "" {
			t.Errorf("GET %s (-want +got):\n%s", tt.path, diff)
		}
	}
	for _, path := range []string{"/redfish/v1", "/redfish/v1/"} {
		resp := h.do(http.MethodGet, path, "")
		if resp.Code != http.StatusOK {
			t.Fatalf("GET %s = %d %s", path, resp.Code, resp.Body)
		}
		root := resp.JSON(t)
		got := map[string]any{
			"@odata.id": root["@odata.id"], "RedfishVersion": root["RedfishVersion"],
			"Systems": root["Systems"], "SessionService": root["SessionService"], "Links": root["Links"],
		}
		want := map[string]any{
			"@odata.id":      "/redfish/v1/",
			"RedfishVersion": "1.15.0",
			"Systems":        map[string]any{"@odata.id": "/redfish/v1/Systems"},
			"SessionService": map[string]any{"@odata.id": "/redfish/v1/SessionService"},
			"Links":          map[string]any{"Sessions": map[string]any{"@odata.id": "/redfish/v1/SessionService/Sessions"}},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("GET %s (-want +got):\n%s", path, diff)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q", ct)
		}
	}
}

func TestAuthentication(t *testing.T) {
	h := newHarness(t, twoSystems())
	tok, _ := h.login(adminUser, adminPass)
	tests := []struct {
		name string
		path string
		opts []reqOpt
		want int
	}{
		{"no credentials", "/redfish/v1/Systems", nil, http.StatusUnauthorized},
		{"wrong password", "/redfish/v1/Systems", []reqOpt{basic(adminUser, "wrong")}, http.StatusUnauthorized},
		{"unknown user", "/redfish/v1/Systems", []reqOpt{basic("root", adminPass)}, http.StatusUnauthorized},
		{"basic", "/redfish/v1/Systems", []reqOpt{asAdmin()}, http.StatusOK},
		{"session token", "/redfish/v1/Systems", []reqOpt{token(tok)}, http.StatusOK},
		{"bogus token", "/redfish/v1/Systems", []reqOpt{token("bogus")}, http.StatusUnauthorized},
		{"bogus token with good basic falls back to basic", "/redfish/v1/Systems", []reqOpt{token("bogus"), asAdmin()}, http.StatusOK},
		{"unknown path without credentials is 401, not 404", "/redfish/v1/Nope", nil, http.StatusUnauthorized},
		{"unknown path with credentials is 404", "/redfish/v1/Nope", []reqOpt{asAdmin()}, http.StatusNotFound},
		{"session service needs auth", "/redfish/v1/SessionService", nil, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.do(http.MethodGet, tt.path, "", tt.opts...)
			if resp.Code != tt.want {
				t.Fatalf("GET %s = %d, want %d: %s", tt.path, resp.Code, tt.want, resp.Body)
			}
			if resp.Code == http.StatusUnauthorized {
				if got := resp.Header.Get("WWW-Authenticate"); got != `Basic realm="redfish-mock"` {
					t.Errorf("WWW-Authenticate = %q", got)
				}
				if got := resp.ErrorCode(); got != "Base.1.8.NoValidSession" {
					t.Errorf("error code = %q", got)
				}
			}
		})
	}
}

func TestComputerSystemDocument(t *testing.T) {
	cfg := twoSystems()
	cfg.Systems[1] = redfishmock.SystemConfig{ID: "node-b", Name: "node-b", UUID: "4C4C4544-0042-3510-8052-B4C04F4E3532", SerialNumber: "SN1", PowerState: redfishmock.PowerOff}
	h := newHarness(t, cfg)

	resp := h.do(http.MethodGet, "/redfish/v1/Systems/node-b", "", asAdmin())
	if resp.Code != http.StatusOK {
		t.Fatalf("GET system = %d %s", resp.Code, resp.Body)
	}
	var doc struct {
		ODataID      string `json:"@odata.id"`
		ODataType    string `json:"@odata.type"`
		ID           string `json:"Id"`
		Name         string
		UUID         string
		SerialNumber string
		PowerState   string
		BootProgress struct{ LastState, LastStateTime string }
		Status       struct{ State, Health string }
		Actions      struct {
			Reset struct {
				Target  string   `json:"target"`
				Allowed []string `json:"ResetType@Redfish.AllowableValues"`
			} `json:"#ComputerSystem.Reset"`
		}
		Links struct {
			ManagedBy []map[string]string
			Chassis   []map[string]string
		}
	}
	if err := json.Unmarshal(resp.Body, &doc); err != nil {
		t.Fatal(err)
	}
	want := doc
	want.ODataID = "/redfish/v1/Systems/node-b"
	want.ID, want.Name, want.SerialNumber = "node-b", "node-b", "SN1"
	want.UUID = "4C4C4544-0042-3510-8052-B4C04F4E3532" // as configured, case and all
	want.PowerState = "Off"
	want.BootProgress.LastState = "None"
	want.BootProgress.LastStateTime = t0.Format(time.RFC3339)
	want.Status.State, want.Status.Health = "Enabled", "OK"
	want.Actions.Reset.Target = "/redfish/v1/Systems/node-b/Actions/ComputerSystem.Reset"
	want.Actions.Reset.Allowed = []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart", "PowerCycle", "Nmi"}
	want.Links.ManagedBy = []map[string]string{{"@odata.id": "/redfish/v1/Managers/node-b"}}
	want.Links.Chassis = []map[string]string{{"@odata.id": "/redfish/v1/Chassis/node-b"}}
	if diff := cmp.Diff(want, doc); diff != "" {
		t.Errorf("system document (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(doc.ODataType, "#ComputerSystem.v1_") {
		t.Errorf("@odata.type = %q", doc.ODataType)
	}

	for _, path := range []string{"/redfish/v1/Chassis/node-b", "/redfish/v1/Managers/node-b"} {
		if resp := h.do(http.MethodGet, path, "", asAdmin()); resp.Code != http.StatusOK {
			t.Errorf("GET %s = %d", path, resp.Code)
		}
	}
	for _, path := range []string{"/redfish/v1/Systems", "/redfish/v1/Chassis", "/redfish/v1/Managers"} {
		coll := h.do(http.MethodGet, path, "", asAdmin()).JSON(t)
		if coll["Members@odata.count"] != float64(2) {
			t.Errorf("GET %s: Members@odata.count = %v", path, coll["Members@odata.count"])
		}
	}
}

func TestResetValidation(t *testing.T) {
	h := newHarness(t, twoSystems())
	path := "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"
	tests := []struct {
		name     string
		method   string
		path     string
		body     string
		wantCode int
		wantErr  string
	}{
		{"ForceOff", http.MethodPost, path, `{"ResetType":"ForceOff"}`, http.StatusNoContent, ""},
		{"extra fields are tolerated", http.MethodPost, path, `{"ResetType":"On","Oem":{}}`, http.StatusNoContent, ""},
		{"malformed JSON", http.MethodPost, path, `{"ResetType":`, http.StatusBadRequest, "Base.1.8.MalformedJSON"},
		{"missing ResetType", http.MethodPost, path, `{}`, http.StatusBadRequest, "Base.1.8.ActionParameterMissing"},
		{"unknown ResetType", http.MethodPost, path, `{"ResetType":"Explode"}`, http.StatusBadRequest, "Base.1.8.ActionParameterValueNotInList"},
		{"ForceOn is not offered", http.MethodPost, path, `{"ResetType":"ForceOn"}`, http.StatusBadRequest, "Base.1.8.ActionParameterValueNotInList"},
		{"wrong type", http.MethodPost, path, `{"ResetType":1}`, http.StatusBadRequest, "Base.1.8.MalformedJSON"},
		{"GET on an action", http.MethodGet, path, ``, http.StatusMethodNotAllowed, "Base.1.8.ActionNotSupported"},
		{"unknown system", http.MethodPost, "/redfish/v1/Systems/9/Actions/ComputerSystem.Reset", `{"ResetType":"On"}`, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI"},
		{"DELETE a system", http.MethodDelete, "/redfish/v1/Systems/1", ``, http.StatusMethodNotAllowed, "Base.1.8.ActionNotSupported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.do(tt.method, tt.path, tt.body, asAdmin())
			if resp.Code != tt.wantCode {
				t.Fatalf("%s %s = %d, want %d: %s", tt.method, tt.path, resp.Code, tt.wantCode, resp.Body)
			}
			if got := resp.ErrorCode(); got != tt.wantErr {
				t.Errorf("error code = %q, want %q", got, tt.wantErr)
			}
			if resp.Code == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
				t.Error("405 without an Allow header")
			}
		})
	}
}

func TestResetDrivesTheStateMachine(t *testing.T) {
	cfg := twoSystems()
	cfg.Timing = redfishmock.Timing{PowerOn: 45 * time.Second, PowerOff: time.Second, RestartOff: 3 * time.Second}
	h := newHarness(t, cfg)
	power := func() string {
		return h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin()).JSON(t)["PowerState"].(string)
	}

	if resp := h.reset("1", redfishmock.ResetForceOff); resp.Code != http.StatusNoContent {
		t.Fatalf("ForceOff = %d", resp.Code)
	}
	got := []string{power()}
	h.clock.Step(time.Second)
	got = append(got, power())
	if resp := h.reset("1", redfishmock.ResetPowerCycle); resp.Code != http.StatusConflict || resp.ErrorCode() != "Base.1.8.ResourceInStandby" {
		t.Errorf("PowerCycle when Off = %d %s, want 409 ResourceInStandby", resp.Code, resp.ErrorCode())
	}
	h.reset("1", redfishmock.ResetOn)
	got = append(got, power())
	h.clock.Step(45 * time.Second)
	got = append(got, power())
	if diff := cmp.Diff([]string{"PoweringOff", "Off", "PoweringOn", "On"}, got); diff != "" {
		t.Errorf("power readings (-want +got):\n%s", diff)
	}

	st := h.status("1")
	wantCounters := redfishmock.Counters{
		Requests:      st.Counters.Requests,
		Resets:        map[redfishmock.ResetType]int64{"ForceOff": 1, "PowerCycle": 1, "On": 1},
		LastResetType: redfishmock.ResetOn,
		LastResetTime: ptr(t0.Add(time.Second)),
	}
	if diff := cmp.Diff(wantCounters, st.Counters); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
	if other := h.status("2"); other.Counters.Resets[redfishmock.ResetForceOff] != 0 {
		t.Errorf("system 2 received %d ForceOff", other.Counters.Resets[redfishmock.ResetForceOff])
	}
}

func ptr[T any](v T) *T { return &v }

func TestSessions(t *testing.T) {
	cfg := twoSystems()
	cfg.MaxSessions = 2
	cfg.SessionTimeout = 10 * time.Minute
	h := newHarness(t, cfg)

	tok, location := h.login(adminUser, adminPass)
	if !strings.HasPrefix(location, "/redfish/v1/SessionService/Sessions/") || tok == "" {
		t.Fatalf("login: token %q, Location %q", tok, location)
	}
	if got := h.do(http.MethodGet, location, "", token(tok)).JSON(t)["UserName"]; got != adminUser {
		t.Errorf("session UserName = %v", got)
	}
	svc := h.do(http.MethodGet, "/redfish/v1/SessionService", "", token(tok)).JSON(t)
	if svc["SessionTimeout"] != float64(600) {
		t.Errorf("SessionTimeout = %v, want 600", svc["SessionTimeout"])
	}

	// The table holds two sessions; a third login is refused like on a BMC.
	tok2, location2 := h.login(adminUser, adminPass)
	full := h.do(http.MethodPost, "/redfish/v1/SessionService/Sessions", `{"UserName":"admin","Password":"secret"}`)
	if full.Code != http.StatusServiceUnavailable || full.ErrorCode() != "Base.1.8.SessionLimitExceeded" {
		t.Fatalf("third login = %d %s, want 503 SessionLimitExceeded", full.Code, full.ErrorCode())
	}
	list := h.do(http.MethodGet, "/redfish/v1/SessionService/Sessions", "", asAdmin()).JSON(t)
	if list["Members@odata.count"] != float64(2) {
		t.Errorf("sessions listed: %v", list["Members@odata.count"])
	}

	// Logging out frees a slot and kills the token.
	if resp := h.do(http.MethodDelete, location2, "", token(tok2)); resp.Code != http.StatusNoContent {
		t.Fatalf("DELETE session = %d", resp.Code)
	}
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems", "", token(tok2)); resp.Code != http.StatusUnauthorized {
		t.Errorf("GET with a deleted session's token = %d", resp.Code)
	}
	if resp := h.do(http.MethodDelete, location2, "", asAdmin()); resp.Code != http.StatusNotFound {
		t.Errorf("second DELETE = %d, want 404", resp.Code)
	}
	tok3, _ := h.login(adminUser, adminPass)

	// Idle sessions expire; use keeps a session alive.
	h.clock.Step(9 * time.Minute)
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems", "", token(tok3)); resp.Code != http.StatusOK {
		t.Fatalf("GET with a used session = %d", resp.Code)
	}
	h.clock.Step(time.Minute)
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems", "", token(tok)); resp.Code != http.StatusUnauthorized {
		t.Errorf("GET with a session idle for the timeout = %d, want 401", resp.Code)
	}
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems", "", token(tok3)); resp.Code != http.StatusOK {
		t.Errorf("GET with a session used 1 min ago = %d, want 200", resp.Code)
	}
	h.login(adminUser, adminPass) // the expired session's slot is free again
}

func TestLoginErrors(t *testing.T) {
	h := newHarness(t, twoSystems())
	tests := []struct {
		name, body string
		wantCode   int
		wantErr    string
	}{
		{"wrong password", `{"UserName":"admin","Password":"nope"}`, http.StatusUnauthorized, "Base.1.8.NoValidSession"},
		{"missing password", `{"UserName":"admin"}`, http.StatusBadRequest, "Base.1.8.CreateFailedMissingReqProperties"},
		{"not JSON", `UserName=admin`, http.StatusBadRequest, "Base.1.8.MalformedJSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.do(http.MethodPost, "/redfish/v1/SessionService/Sessions", tt.body)
			if resp.Code != tt.wantCode || resp.ErrorCode() != tt.wantErr {
				t.Errorf("login = %d %s, want %d %s", resp.Code, resp.ErrorCode(), tt.wantCode, tt.wantErr)
			}
		})
	}
}

func TestSystemScopedCredentialsLookLikeTheirOwnBMC(t *testing.T) {
	cfg := twoSystems()
	cfg.Systems[0] = redfishmock.SystemConfig{Name: "node-a", Username: "node-a", Password: "pa"}
	cfg.Systems[1] = redfishmock.SystemConfig{Name: "node-b", Username: "node-b", Password: "pb"}
	h := newHarness(t, cfg)

	coll := h.do(http.MethodGet, "/redfish/v1/Systems", "", basic("node-a", "pa")).JSON(t)
	want := []any{map[string]any{"@odata.id": "/redfish/v1/Systems/1"}}
	if diff := cmp.Diff(want, coll["Members"]); diff != "" {
		t.Errorf("node-a's Systems (-want +got):\n%s", diff)
	}
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems/2", "", basic("node-a", "pa")); resp.Code != http.StatusNotFound {
		t.Errorf("node-a reading system 2 = %d, want 404", resp.Code)
	}
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems/2", "", basic("node-a", "pb")); resp.Code != http.StatusUnauthorized {
		t.Errorf("node-a with node-b's password = %d, want 401", resp.Code)
	}

	// Faults of system 2 do not leak into node-a's view of the service.
	h.setFaults("2", redfishmock.Faults{AuthFailure: true, ErrorRate: 1})
	tokA, _ := h.login("node-a", "pa")
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems", "", token(tokA)); resp.Code != http.StatusOK {
		t.Errorf("node-a listing systems while node-b is faulty = %d", resp.Code)
	}
	// But node-b's own login is its BMC's: it fails.
	if resp := h.do(http.MethodPost, "/redfish/v1/SessionService/Sessions", `{"UserName":"node-b","Password":"pb"}`); resp.Code != http.StatusUnauthorized {
		t.Errorf("node-b login with authFailure = %d, want 401", resp.Code)
	}
	// Sessions are private to their system.
	if list := h.do(http.MethodGet, "/redfish/v1/SessionService/Sessions", "", basic("node-b", "pb")); list.Code != http.StatusUnauthorized {
		t.Errorf("node-b listing sessions with authFailure = %d, want 401", list.Code)
	}
	h.setFaults("2", redfishmock.Faults{})
	list := h.do(http.MethodGet, "/redfish/v1/SessionService/Sessions", "", basic("node-b", "pb")).JSON(t)
	if list["Members@odata.count"] != float64(0) {
		t.Errorf("node-b sees %v sessions, want 0 (node-a's is not its own)", list["Members@odata.count"])
	}
}

func TestFaultAuthFailure(t *testing.T) {
	h := newHarness(t, twoSystems())
	h.setFaults("1", redfishmock.Faults{AuthFailure: true})
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin()); resp.Code != http.StatusUnauthorized {
		t.Errorf("system 1 = %d, want 401", resp.Code)
	}
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems/2", "", asAdmin()); resp.Code != http.StatusOK {
		t.Errorf("system 2 = %d, want 200", resp.Code)
	}
	if resp := h.reset("1", redfishmock.ResetForceOff); resp.Code != http.StatusUnauthorized {
		t.Errorf("Reset of system 1 = %d, want 401", resp.Code)
	}
	if got := h.status("1").Counters.Resets; got != nil {
		t.Errorf("a Reset refused at authentication was counted: %v", got)
	}

	// With one system, the whole service is that system's BMC.
	single := newHarness(t, redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1)})
	single.setFaults("1", redfishmock.Faults{AuthFailure: true})
	if resp := single.do(http.MethodPost, "/redfish/v1/SessionService/Sessions", `{"UserName":"admin","Password":"secret"}`); resp.Code != http.StatusUnauthorized {
		t.Errorf("login = %d, want 401", resp.Code)
	}
	if resp := single.do(http.MethodGet, "/redfish/v1/", ""); resp.Code != http.StatusOK {
		t.Errorf("unauthenticated service root = %d, want 200", resp.Code)
	}
}

func TestFaultSessions(t *testing.T) {
	single := func() redfishmock.Config {
		return redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1)}
	}
	t.Run("sessionsExhausted refuses every login", func(t *testing.T) {
		h := newHarness(t, single())
		h.setFaults("1", redfishmock.Faults{SessionsExhausted: true})
		resp := h.do(http.MethodPost, "/redfish/v1/SessionService/Sessions", `{"UserName":"admin","Password":"secret"}`)
		if resp.Code != http.StatusServiceUnavailable || resp.ErrorCode() != "Base.1.8.SessionLimitExceeded" {
			t.Errorf("login = %d %s", resp.Code, resp.ErrorCode())
		}
		if resp := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin()); resp.Code != http.StatusOK {
			t.Errorf("Basic auth still works: got %d", resp.Code)
		}
	})
	t.Run("sessionLimit caps one system's sessions", func(t *testing.T) {
		h := newHarness(t, single())
		h.setFaults("1", redfishmock.Faults{SessionLimit: 1})
		h.login(adminUser, adminPass)
		resp := h.do(http.MethodPost, "/redfish/v1/SessionService/Sessions", `{"UserName":"admin","Password":"secret"}`)
		if resp.Code != http.StatusServiceUnavailable {
			t.Errorf("second login = %d, want 503", resp.Code)
		}
	})
}

func TestFaultWrongUUID(t *testing.T) {
	h := newHarness(t, twoSystems())
	configured := h.status("1").UUID
	h.setFaults("1", redfishmock.Faults{WrongUUID: true})
	reported := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin()).JSON(t)["UUID"]
	if reported == configured {
		t.Fatalf("system reports its configured UUID %s despite wrongUUID", configured)
	}
	st := h.status("1")
	if st.UUID != configured || st.ReportedUUID != reported {
		t.Errorf("status uuid=%s reportedUUID=%s, want %s and %s", st.UUID, st.ReportedUUID, configured, reported)
	}
	h.setFaults("1", redfishmock.Faults{})
	if got := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin()).JSON(t)["UUID"]; got != configured {
		t.Errorf("after clearing: UUID %v, want %s", got, configured)
	}
}

func TestFaultConflictWhenOff(t *testing.T) {
	h := newHarness(t, twoSystems())
	if err := h.mock.UpdateFaults("1", func(f *redfishmock.Faults) { f.ConflictWhenOff = true }); err != nil {
		t.Fatal(err)
	}
	if resp := h.reset("1", redfishmock.ResetForceOff); resp.Code != http.StatusNoContent {
		t.Fatalf("ForceOff when On = %d", resp.Code)
	}
	if resp := h.reset("1", redfishmock.ResetForceOff); resp.Code != http.StatusConflict {
		t.Errorf("ForceOff when Off = %d, want 409", resp.Code)
	}
	if got := h.status("1").Counters.Resets[redfishmock.ResetForceOff]; got != 2 {
		t.Errorf("ForceOff received %d times, want 2 (a refused one still arrived)", got)
	}
}

func TestFaultIgnoreCommands(t *testing.T) {
	h := newHarness(t, twoSystems())
	h.setFaults("1", redfishmock.Faults{IgnoreCommands: true})
	if resp := h.reset("1", redfishmock.ResetForceOff); resp.Code != http.StatusNoContent {
		t.Fatalf("ForceOff = %d, want the lying 204", resp.Code)
	}
	h.clock.Step(time.Hour)
	if st := h.status("1"); st.PowerState != redfishmock.PowerOn || st.Counters.Resets[redfishmock.ResetForceOff] != 1 {
		t.Errorf("after an ignored ForceOff: %s, %v", st.PowerState, st.Counters.Resets)
	}
}

func TestFaultHangBlocksUntilTheClientGivesUp(t *testing.T) {
	h := newHarness(t, twoSystems())
	h.setFaults("1", redfishmock.Faults{Hang: true})

	if resp := h.do(http.MethodGet, "/redfish/v1/Systems/2", "", asAdmin()); resp.Code != http.StatusOK {
		t.Fatalf("the other system = %d", resp.Code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := h.async(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin(), withContext(ctx))
	h.waitForRequests("1", 1) // it has reached the fault
	select {
	case r := <-done:
		t.Fatalf("hung request returned before the client gave up: %d", r.Code)
	default:
	}
	cancel()
	if r := receive(t, done); r.Code != http.StatusServiceUnavailable {
		t.Errorf("abandoned request = %d", r.Code)
	}

	// Close releases what is hung, so servers can shut down.
	done = h.async(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin())
	h.mock.Close()
	if r := receive(t, done); r.Code != http.StatusServiceUnavailable {
		t.Errorf("request released by Close = %d", r.Code)
	}
}

func TestFaultLatencyWaitsOnTheClock(t *testing.T) {
	h := newHarness(t, twoSystems())
	h.setFaults("1", redfishmock.Faults{Latency: 2 * time.Second})
	done := h.async(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin())
	h.waitForTimer()
	h.clock.Step(2*time.Second - time.Nanosecond)
	select {
	case r := <-done:
		t.Fatalf("returned %d before the latency elapsed", r.Code)
	default:
	}
	h.clock.Step(time.Nanosecond)
	if r := receive(t, done); r.Code != http.StatusOK {
		t.Errorf("delayed request = %d", r.Code)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done = h.async(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin(), withContext(ctx))
	h.waitForTimer()
	cancel()
	if r := receive(t, done); r.Code != http.StatusServiceUnavailable {
		t.Errorf("request cancelled during latency = %d", r.Code)
	}
}

func TestFaultErrorRateIsSeededAndDeterministic(t *testing.T) {
	statuses := func(seed int64, rate float64) []int {
		cfg := twoSystems()
		cfg.Seed = seed
		h := newHarness(t, cfg)
		h.setFaults("1", redfishmock.Faults{ErrorRate: rate})
		var out []int
		for range 400 {
			out = append(out, h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin()).Code)
		}
		return out
	}
	count := func(codes []int) map[int]int {
		m := map[int]int{}
		for _, c := range codes {
			m[c]++
		}
		return m
	}

	first, again := statuses(42, 0.25), statuses(42, 0.25)
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("same seed, different sequence (-first +again):\n%s", diff)
	}
	if diff := cmp.Diff(first, statuses(43, 0.25)); diff == "" {
		t.Error("different seeds gave the same sequence")
	}
	got := count(first)
	failures := got[500] + got[503]
	if failures < 60 || failures > 140 || got[500] == 0 || got[503] == 0 {
		t.Errorf("rate 0.25 over 400 requests: %v", got)
	}
	if got := count(statuses(1, 1)); got[200] != 0 {
		t.Errorf("rate 1: %v", got)
	}
	if got := count(statuses(1, 0)); got[200] != 400 {
		t.Errorf("rate 0: %v", got)
	}
}

func TestRequestsAreAttributed(t *testing.T) {
	h := newHarness(t, twoSystems())
	h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin())
	h.do(http.MethodGet, "/redfish/v1/Chassis/1", "", asAdmin())
	h.do(http.MethodGet, "/redfish/v1/Managers/2", "", asAdmin())
	h.do(http.MethodGet, "/redfish/v1/Systems", "", asAdmin()) // with two systems: nobody's
	if got := []int64{h.status("1").Counters.Requests, h.status("2").Counters.Requests}; !cmp.Equal(got, []int64{2, 1}) {
		t.Errorf("requests per system = %v, want [2 1]", got)
	}
}

func TestHeadAndTrailingSlash(t *testing.T) {
	h := newHarness(t, twoSystems())
	if resp := h.do(http.MethodHead, "/redfish/v1/Systems/1/", "", asAdmin()); resp.Code != http.StatusOK {
		t.Errorf("HEAD with trailing slash = %d", resp.Code)
	}
}

func TestOverTheWire(t *testing.T) {
	for _, useTLS := range []bool{true, false} {
		start := redfishmocktest.StartHTTP
		if useTLS {
			start = redfishmocktest.Start
		}
		srv := start(t, twoSystems())
		client := srv.Client() // trusts exactly the server's certificate
		login := func() string {
			t.Helper()
			resp, err := client.Post(srv.URL+"/redfish/v1/SessionService/Sessions", "application/json",
				strings.NewReader(`{"UserName":"admin","Password":"secret"}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("login = %d", resp.StatusCode)
			}
			return resp.Header.Get("X-Auth-Token")
		}
		for name, auth := range map[string]func(*http.Request){
			"basic":   func(r *http.Request) { r.SetBasicAuth(adminUser, adminPass) },
			"session": func(r *http.Request) { r.Header.Set("X-Auth-Token", login()) },
		} {
			t.Run(fmt.Sprintf("tls=%v/%s", useTLS, name), func(t *testing.T) {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/redfish/v1/Systems/2/Actions/ComputerSystem.Reset",
					strings.NewReader(`{"ResetType":"ForceOff"}`))
				auth(req)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					t.Fatalf("Reset = %d", resp.StatusCode)
				}
				req, _ = http.NewRequest(http.MethodGet, srv.URL+"/redfish/v1/Systems/2", nil)
				auth(req)
				resp, err = client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var sys struct{ PowerState string }
				if err := json.NewDecoder(resp.Body).Decode(&sys); err != nil || sys.PowerState != "Off" {
					t.Errorf("after ForceOff: %q, %v", sys.PowerState, err)
				}
				if err := srv.Mock.SetPower("2", redfishmock.PowerOn); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
