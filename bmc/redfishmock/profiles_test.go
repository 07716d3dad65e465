package redfishmock_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

func profileHarness(t *testing.T, p redfishmock.Profile, timing redfishmock.Timing) *harness {
	t.Helper()
	cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1), Profile: p, Timing: timing}
	return newHarness(t, cfg)
}

// firstMessageID is @Message.ExtendedInfo[0].MessageId of an error body.
func firstMessageID(t *testing.T, r response) string {
	t.Helper()
	var e struct {
		Error struct {
			Extended []struct {
				MessageID string `json:"MessageId"`
			} `json:"@Message.ExtendedInfo"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &e); err != nil || len(e.Error.Extended) == 0 {
		t.Fatalf("no @Message.ExtendedInfo in %s", r.Body)
	}
	return e.Error.Extended[0].MessageID
}

// Each profile answers a ForceOff of an Off system, and an On of an On one,
// the way its vendor does.
func TestProfileAlreadyInStateAnswers(t *testing.T) {
	tests := []struct {
		profile        redfishmock.Profile
		offCode        int
		offID          string
		onCode         int
		acceptedStatus int
	}{
		{redfishmock.ProfileGeneric, http.StatusNoContent, "", http.StatusNoContent, http.StatusNoContent},
		{redfishmock.ProfileIDRAC9, http.StatusConflict, "IDRAC.2.9.PSU501", http.StatusConflict, http.StatusNoContent},
		{redfishmock.ProfileIDRAC10, http.StatusConflict, "IDRAC.2.9.PSU501", http.StatusConflict, http.StatusNoContent},
		{redfishmock.ProfileILO5, http.StatusBadRequest, "iLO.2.16.InvalidOperationForSystemState", http.StatusBadRequest, http.StatusOK},
		{redfishmock.ProfileILO6, http.StatusBadRequest, "iLO.2.18.InvalidOperationForSystemState", http.StatusBadRequest, http.StatusOK},
		{redfishmock.ProfileXCC, http.StatusNoContent, "", http.StatusNoContent, http.StatusNoContent},
		{redfishmock.ProfileOpenBMC, http.StatusNoContent, "", http.StatusNoContent, http.StatusNoContent},
		{redfishmock.ProfileSupermicro, http.StatusOK, "", http.StatusOK, http.StatusOK},
		{redfishmock.ProfileAMIMulti, http.StatusAccepted, "", http.StatusAccepted, http.StatusAccepted},
	}
	for _, tt := range tests {
		t.Run(string(tt.profile), func(t *testing.T) {
			h := profileHarness(t, tt.profile, redfishmock.Timing{})
			if r := h.reset("1", redfishmock.ResetForceOff); r.Code != tt.acceptedStatus {
				t.Fatalf("ForceOff of an On system = %d %s, want %d", r.Code, r.Body, tt.acceptedStatus)
			}
			if tt.profile == redfishmock.ProfileIDRAC9 || tt.profile == redfishmock.ProfileIDRAC10 {
				// iDRAC is busy right after an operation: SYS518, once.
				r := h.reset("1", redfishmock.ResetForceOff)
				if r.Code != http.StatusInternalServerError || firstMessageID(t, r) != "IDRAC.2.9.SYS518" {
					t.Fatalf("Reset right after a Reset = %d %s, want 500 SYS518", r.Code, r.Body)
				}
			}
			r := h.reset("1", redfishmock.ResetForceOff)
			if r.Code != tt.offCode || (tt.offID != "" && firstMessageID(t, r) != tt.offID) {
				t.Errorf("ForceOff of an Off system = %d %s, want %d %s", r.Code, r.Body, tt.offCode, tt.offID)
			}
			if st := h.status("1"); st.PowerState != redfishmock.PowerOff {
				t.Errorf("power = %s", st.PowerState)
			}
			if r := h.reset("1", redfishmock.ResetOn); r.Code != tt.acceptedStatus {
				t.Fatalf("On of an Off system = %d %s", r.Code, r.Body)
			}
			if tt.profile == redfishmock.ProfileIDRAC9 || tt.profile == redfishmock.ProfileIDRAC10 {
				h.reset("1", redfishmock.ResetOn) // the SYS518 after the On
			}
			if r := h.reset("1", redfishmock.ResetOn); r.Code != tt.onCode {
				t.Errorf("On of an On system = %d %s, want %d", r.Code, r.Body, tt.onCode)
			}
		})
	}
}

// iDRAC during a restart's off-dwell: the ForceOff is refused as "already
// off" and the restart goes on, so the machine comes back On.
func TestIDRACRefusesForceOffDuringARestartAndTheRestartGoesOn(t *testing.T) {
	h := profileHarness(t, redfishmock.ProfileIDRAC9, redfishmock.Timing{RestartOff: 10 * time.Second, PowerOn: time.Second})
	if r := h.reset("1", redfishmock.ResetForceRestart); r.Code != http.StatusNoContent {
		t.Fatalf("ForceRestart = %d", r.Code)
	}
	h.reset("1", redfishmock.ResetForceOff) // SYS518
	r := h.reset("1", redfishmock.ResetForceOff)
	if r.Code != http.StatusConflict || firstMessageID(t, r) != "IDRAC.2.9.PSU501" {
		t.Fatalf("ForceOff in the restart's off-dwell = %d %s, want 409 PSU501", r.Code, r.Body)
	}
	h.clock.Step(11 * time.Second)
	if st := h.status("1"); st.PowerState != redfishmock.PowerOn {
		t.Errorf("after the dwell: %s, want On (the BMC ignored our ForceOff)", st.PowerState)
	}
}

func TestProfileAdvertisesItsResetTypes(t *testing.T) {
	for _, p := range redfishmock.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			h := profileHarness(t, p, redfishmock.Timing{})
			doc := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin()).JSON(t)
			reset := doc["Actions"].(map[string]any)["#ComputerSystem.Reset"].(map[string]any)
			var got []any
			if info, ok := reset["@Redfish.ActionInfo"].(string); ok {
				ai := h.do(http.MethodGet, info, "", asAdmin())
				if ai.Code != http.StatusOK {
					t.Fatalf("GET %s = %d", info, ai.Code)
				}
				got = ai.JSON(t)["Parameters"].([]any)[0].(map[string]any)["AllowableValues"].([]any)
			} else {
				got = reset["ResetType@Redfish.AllowableValues"].([]any)
			}
			if len(got) == 0 {
				t.Fatal("no AllowableValues")
			}
			for _, v := range got {
				if r := h.reset("1", redfishmock.ResetType(v.(string))); r.Code >= 400 && r.Code != http.StatusConflict &&
					r.Code != http.StatusInternalServerError && !strings.Contains(string(r.Body), "InvalidOperationForSystemState") {
					t.Errorf("advertised %s refused: %d %s", v, r.Code, r.Body)
				}
			}
			if _, ok := doc["BootProgress"]; ok != (p != redfishmock.ProfileILO5 && p != redfishmock.ProfileSupermicro && p != redfishmock.ProfileAMIMulti && p != redfishmock.ProfileSushy) {
				t.Errorf("BootProgress present = %v", ok)
			}
		})
	}
	// XCC does not take PushPowerButton.
	h := profileHarness(t, redfishmock.ProfileXCC, redfishmock.Timing{})
	if r := h.reset("1", redfishmock.ResetPushPowerButton); r.Code != http.StatusBadRequest {
		t.Errorf("PushPowerButton on XCC = %d, want 400", r.Code)
	}
}

func TestOpenBMCSystemFollowsTheHost(t *testing.T) {
	h := profileHarness(t, redfishmock.ProfileOpenBMC, redfishmock.Timing{PowerOn: 30 * time.Second})
	if err := h.mock.SetPower("1", redfishmock.PowerOff); err != nil {
		t.Fatal(err)
	}
	h.reset("1", redfishmock.ResetOn)
	sys := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin()).JSON(t)
	ch := h.do(http.MethodGet, "/redfish/v1/Chassis/1", "", asAdmin()).JSON(t)
	if sys["PowerState"] != "Off" || ch["PowerState"] != "PoweringOn" {
		t.Errorf("while powering on: system %v, chassis %v; want Off and PoweringOn", sys["PowerState"], ch["PowerState"])
	}
}

func TestAMIMultiAnswers503WhileOffAnd202WithATask(t *testing.T) {
	h := profileHarness(t, redfishmock.ProfileAMIMulti, redfishmock.Timing{PowerOff: 5 * time.Second})
	r := h.reset("1", redfishmock.ResetForceOff)
	monitor := r.Header.Get("Location")
	if r.Code != http.StatusAccepted || !strings.HasPrefix(monitor, "/redfish/v1/TaskService/TaskMonitors/") {
		t.Fatalf("ForceOff = %d Location %q", r.Code, monitor)
	}
	if m := h.do(http.MethodGet, monitor, "", asAdmin()); m.Code != http.StatusAccepted || m.JSON(t)["TaskState"] != "Running" {
		t.Errorf("monitor while running = %d %s", m.Code, m.Body)
	}
	h.clock.Step(5 * time.Second)
	if m := h.do(http.MethodGet, monitor, "", asAdmin()); m.Code != http.StatusNoContent {
		t.Errorf("monitor when done = %d %s, want 204", m.Code, m.Body)
	}
	if task := h.do(http.MethodGet, "/redfish/v1/TaskService/Tasks/1", "", asAdmin()); task.JSON(t)["TaskState"] != "Completed" {
		t.Errorf("task = %s", task.Body)
	}
	if s := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin()); s.Code != http.StatusServiceUnavailable {
		t.Errorf("GET of the off system = %d, want 503", s.Code)
	}
	if c := h.do(http.MethodGet, "/redfish/v1/Chassis/1", "", asAdmin()).JSON(t); c["PowerState"] != "Off" {
		t.Errorf("chassis = %v", c["PowerState"])
	}
}

func TestProfileCanChangeThroughTheControlAPI(t *testing.T) {
	h := newHarness(t, twoSystems())
	r := h.do(http.MethodPut, "/mock/systems/2/profile", `{"profile":"ilo6"}`)
	if r.Code != http.StatusOK || r.JSON(t)["profile"] != "ilo6" {
		t.Fatalf("PUT profile = %d %s", r.Code, r.Body)
	}
	if h.status("1").Profile != redfishmock.ProfileGeneric {
		t.Error("system 1 changed too")
	}
	if r := h.do(http.MethodPut, "/mock/systems/2/profile", `{"profile":"cray"}`); r.Code != http.StatusBadRequest {
		t.Errorf("unknown profile = %d", r.Code)
	}
}

func TestAuthModes(t *testing.T) {
	for _, tt := range []struct {
		mode         redfishmock.AuthMode
		basicCode    int
		loginCode    int
		basicOffered bool
		rootSessions bool
	}{
		{redfishmock.AuthBoth, http.StatusOK, http.StatusCreated, true, true},
		{redfishmock.AuthBasicOnly, http.StatusOK, http.StatusUnauthorized, true, false},
		{redfishmock.AuthSessionOnly, http.StatusUnauthorized, http.StatusCreated, false, true},
	} {
		t.Run(string(tt.mode), func(t *testing.T) {
			cfg := twoSystems()
			cfg.AuthMode = tt.mode
			h := newHarness(t, cfg)
			r := h.do(http.MethodGet, "/redfish/v1/Systems", "", asAdmin())
			if r.Code != tt.basicCode {
				t.Errorf("GET with Basic = %d, want %d", r.Code, tt.basicCode)
			}
			if r := h.do(http.MethodGet, "/redfish/v1/Systems", ""); (r.Header.Get("WWW-Authenticate") != "") != tt.basicOffered {
				t.Errorf("WWW-Authenticate = %q", r.Header.Get("WWW-Authenticate"))
			}
			login := h.do(http.MethodPost, "/redfish/v1/SessionService/Sessions", `{"UserName":"admin","Password":"secret"}`)
			if login.Code != tt.loginCode {
				t.Errorf("login = %d, want %d", login.Code, tt.loginCode)
			}
			root := h.do(http.MethodGet, "/redfish/v1/", "").JSON(t)
			if _, ok := root["SessionService"]; ok != tt.rootSessions {
				t.Errorf("service root names a SessionService: %v", ok)
			}
		})
	}
}

func TestConformance(t *testing.T) {
	h := newHarness(t, twoSystems())
	t.Run("$metadata needs no auth and names the schemas", func(t *testing.T) {
		r := h.do(http.MethodGet, "/redfish/v1/$metadata", "")
		if r.Code != http.StatusOK || r.Header.Get("Content-Type") != "application/xml" ||
			!strings.Contains(string(r.Body), `<edmx:Include Namespace="ComputerSystem"/>`) {
			t.Errorf("$metadata = %d %s %s", r.Code, r.Header.Get("Content-Type"), r.Body)
		}
	})
	t.Run("OData service document", func(t *testing.T) {
		r := h.do(http.MethodGet, "/redfish/v1/odata", "")
		doc := r.JSON(t)
		if r.Code != http.StatusOK || doc["@odata.context"] != "/redfish/v1/$metadata" || len(doc["value"].([]any)) < 5 {
			t.Errorf("odata = %d %s", r.Code, r.Body)
		}
	})
	t.Run("Allow and Link on GET", func(t *testing.T) {
		r := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin())
		if r.Header.Get("Allow") != "GET, HEAD" || r.Header.Get("Link") != "<http://redfish.dmtf.org/schemas/v1/ComputerSystem.v1_20_0.json>; rel=describedby" {
			t.Errorf("Allow %q, Link %q", r.Header.Get("Allow"), r.Header.Get("Link"))
		}
		if r.Header.Get("ETag") == "" {
			t.Error("no ETag on a ComputerSystem")
		}
	})
	t.Run("Allow on 405", func(t *testing.T) {
		r := h.do(http.MethodPatch, "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", "{}", asAdmin())
		if r.Code != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "POST" {
			t.Errorf("PATCH of an action = %d, Allow %q", r.Code, r.Header.Get("Allow"))
		}
	})
	t.Run("another OData-Version is refused", func(t *testing.T) {
		r := h.do(http.MethodGet, "/redfish/v1/Systems", "", asAdmin(), func(r *http.Request) { r.Header.Set("OData-Version", "5.0") })
		if r.Code != http.StatusPreconditionFailed {
			t.Errorf("OData-Version 5.0 = %d", r.Code)
		}
		r = h.do(http.MethodGet, "/redfish/v1/Systems", "", asAdmin(), func(r *http.Request) { r.Header.Set("OData-Version", "4.0") })
		if r.Code != http.StatusOK {
			t.Errorf("OData-Version 4.0 = %d", r.Code)
		}
	})
	t.Run("AccountService with the predefined roles", func(t *testing.T) {
		r := h.do(http.MethodGet, "/redfish/v1/AccountService/Roles", "", asAdmin())
		var ids []string
		for _, m := range r.JSON(t)["Members"].([]any) {
			ids = append(ids, m.(map[string]any)["@odata.id"].(string))
		}
		want := []string{"/redfish/v1/AccountService/Roles/Administrator", "/redfish/v1/AccountService/Roles/Operator", "/redfish/v1/AccountService/Roles/ReadOnly"}
		if diff := cmp.Diff(want, ids); diff != "" {
			t.Errorf("roles (-want +got):\n%s", diff)
		}
		role := h.do(http.MethodGet, "/redfish/v1/AccountService/Roles/ReadOnly", "", asAdmin()).JSON(t)
		if role["IsPredefined"] != true {
			t.Errorf("ReadOnly role = %v", role)
		}
		acct := h.do(http.MethodGet, "/redfish/v1/AccountService/Accounts/1", "", asAdmin())
		if acct.JSON(t)["UserName"] != adminUser || strings.Contains(string(acct.Body), adminPass) {
			t.Errorf("account = %s", acct.Body)
		}
	})
}
