package redfishmock_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

func TestControlPetterWatchdogAndLog(t *testing.T) {
	h := newHarness(t, twoSystems())
	if resp := h.do(http.MethodPut, "/mock/systems/1/petter", `{"timeout":"30s","action":"None"}`); resp.Code != http.StatusOK {
		t.Fatalf("PUT petter = %d %s", resp.Code, resp.Body)
	}
	if resp := h.do(http.MethodPost, "/mock/systems/1/events", `{"event":"os-hang"}`); resp.Code != http.StatusOK {
		t.Fatalf("os-hang = %d %s", resp.Code, resp.Body)
	}
	h.clock.Step(30 * time.Second)
	var wd map[string]any
	_ = json.Unmarshal(h.do(http.MethodGet, "/mock/systems/1/watchdog", "").Body, &wd)
	if wd["armed"] != false || wd["timerUse"] != "SMS/OS" || wd["expiredFlags"] != float64(1<<4) {
		t.Errorf("watchdog after the expiry: %v", wd)
	}
	var log []map[string]any
	_ = json.Unmarshal(h.do(http.MethodGet, "/mock/systems/1/log", "").Body, &log)
	if len(log) != 1 || log[0]["kind"] != "watchdog-expired" || log[0]["timerUse"] != "SMS/OS" || log[0]["action"] != "None" {
		t.Errorf("log %v", log)
	}
	// The lies a test injects: a POST timer, another system's entry.
	if resp := h.do(http.MethodPost, "/mock/systems/1/log", `{"kind":"watchdog-expired","timerUse":"BIOS/POST","origin":"2"}`); resp.Code != http.StatusCreated {
		t.Fatalf("POST log = %d %s", resp.Code, resp.Body)
	}
	// The SEL as a Redfish client reads it.
	resp := h.do(http.MethodGet, "/redfish/v1/Systems/1/LogServices/SEL/Entries", "", asAdmin())
	body := string(resp.Body)
	if resp.Code != http.StatusOK || strings.Count(body, `"SensorType":"Watchdog"`) != 2 || !strings.Contains(body, "timer use: BIOS/POST") ||
		!strings.Contains(body, `"/redfish/v1/Systems/2"`) {
		t.Errorf("SEL entries = %d %s", resp.Code, body)
	}
	for _, bad := range []struct{ method, path, body, want string }{
		{http.MethodPut, "/mock/systems/1/petter", `{"action":"None"}`, "timeout: required"},
		{http.MethodPut, "/mock/systems/1/petter", `{"timeout":"30s","action":"Explode"}`, `action: "Explode"`},
		{http.MethodPost, "/mock/systems/1/log", `{"kind":"nap"}`, `kind "nap"`},
		{http.MethodPost, "/mock/systems/1/log", `{"kind":"watchdog-expired","timerUse":"BIOS"}`, `timerUse "BIOS"`},
		{http.MethodPut, "/mock/systems/1/kernel", `{}`, "panicOnNMI: required"},
	} {
		resp := h.do(bad.method, bad.path, bad.body)
		if resp.Code != http.StatusBadRequest || !strings.Contains(resp.ErrorMessage(), bad.want) {
			t.Errorf("%s %s %s = %d %q; want 400 saying %q", bad.method, bad.path, bad.body, resp.Code, resp.ErrorMessage(), bad.want)
		}
	}
	// A petter needs a running OS: a 409, as for the events.
	h.do(http.MethodPut, "/mock/systems/2/power", `{"state":"Off"}`)
	if resp := h.do(http.MethodPut, "/mock/systems/2/petter", `{"timeout":"30s"}`); resp.Code != http.StatusConflict {
		t.Errorf("petter on an Off system = %d %s", resp.Code, resp.Body)
	}
}

func TestLogServicesLiveWhereTheProfileKeepsThem(t *testing.T) {
	cfg := twoSystems()
	cfg.Systems[0].Profile = redfishmock.ProfileIDRAC9
	h := newHarness(t, cfg)
	for path, want := range map[string]int{
		"/redfish/v1/Managers/1/LogServices/Sel/Entries":  http.StatusOK,
		"/redfish/v1/Systems/1/LogServices/SEL/Entries":   http.StatusNotFound,
		"/redfish/v1/Systems/2/LogServices/SEL":           http.StatusOK,
		"/redfish/v1/Systems/2/LogServices/SEL/Entries/9": http.StatusNotFound,
		"/redfish/v1/Managers/2/LogServices":              http.StatusNotFound,
	} {
		if resp := h.do(http.MethodGet, path, "", asAdmin()); resp.Code != want {
			t.Errorf("GET %s = %d, want %d: %s", path, resp.Code, want, resp.Body)
		}
	}
}

// Every profile says where its watchdog and log come from (a new profile
// would otherwise read as the generic one without saying so).
func TestEveryProfileNamesItsEvidenceSource(t *testing.T) {
	for _, p := range redfishmock.Profiles() {
		if p != redfishmock.ProfileGeneric && p.EvidenceSource() == redfishmock.ProfileGeneric.EvidenceSource() {
			t.Errorf("profile %s has no evidence spec of its own (evidence.go's evidenceSpecs)", p)
		}
	}
}
