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

func decodeStatus(t *testing.T, resp response) redfishmock.SystemStatus {
	t.Helper()
	var st redfishmock.SystemStatus
	if err := json.Unmarshal(resp.Body, &st); err != nil {
		t.Fatalf("not a SystemStatus: %v\n%s", err, resp.Body)
	}
	return st
}

func TestControlStatus(t *testing.T) {
	h := newHarness(t, twoSystems())
	h.reset("1", redfishmock.ResetForceOff)

	resp := h.do(http.MethodGet, "/mock/systems/1", "")
	if resp.Code != http.StatusOK {
		t.Fatalf("GET /mock/systems/1 = %d %s", resp.Code, resp.Body)
	}
	got := decodeStatus(t, resp)
	want := h.status("1")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status over HTTP differs from Status() (-want +got):\n%s", diff)
	}
	// The JSON spells what tests assert on.
	var raw map[string]any
	_ = json.Unmarshal(resp.Body, &raw)
	wantCounters := map[string]any{
		"requests": float64(1), "resets": map[string]any{"ForceOff": float64(1)},
		"lastResetType": "ForceOff", "lastResetTime": t0.Format(time.RFC3339),
	}
	if diff := cmp.Diff(wantCounters, raw["counters"]); diff != "" {
		t.Errorf("counters JSON (-want +got):\n%s", diff)
	}

	var list []redfishmock.SystemStatus
	if err := json.Unmarshal(h.do(http.MethodGet, "/mock/systems", "").Body, &list); err != nil || len(list) != 2 {
		t.Fatalf("GET /mock/systems: %v, %d systems", err, len(list))
	}
	if resp := h.do(http.MethodGet, "/mock/systems/9", ""); resp.Code != http.StatusNotFound {
		t.Errorf("unknown system = %d", resp.Code)
	}
}

func TestControlEvents(t *testing.T) {
	h := newHarness(t, twoSystems())
	tests := []struct {
		name      string
		body      string
		wantCode  int
		wantPower redfishmock.PowerState
		wantInMsg string
	}{
		{"os-hang", `{"event":"os-hang"}`, http.StatusOK, redfishmock.PowerOn, ""},
		{"power-loss", `{"event":"power-loss"}`, http.StatusOK, redfishmock.PowerOff, ""},
		{"os-hang on an Off system", `{"event":"os-hang"}`, http.StatusConflict, redfishmock.PowerOff, "needs a system that is On"},
		{"power-restore", `{"event":"power-restore"}`, http.StatusOK, redfishmock.PowerOn, ""},
		{"unknown event", `{"event":"flood"}`, http.StatusBadRequest, redfishmock.PowerOn, "power-loss"},
		{"missing event", `{}`, http.StatusBadRequest, redfishmock.PowerOn, "event: required"},
		{"unknown field", `{"event":"os-hang","when":"now"}`, http.StatusBadRequest, redfishmock.PowerOn, `unknown field "when"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.do(http.MethodPost, "/mock/systems/1/events", tt.body)
			if resp.Code != tt.wantCode {
				t.Fatalf("POST events %s = %d, want %d: %s", tt.body, resp.Code, tt.wantCode, resp.Body)
			}
			if !strings.Contains(resp.ErrorMessage(), tt.wantInMsg) {
				t.Errorf("message %q does not contain %q", resp.ErrorMessage(), tt.wantInMsg)
			}
			if got := h.status("1").PowerState; got != tt.wantPower {
				t.Errorf("power = %s, want %s", got, tt.wantPower)
			}
		})
	}
	if resp := h.do(http.MethodGet, "/mock/systems/1/events", ""); resp.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET events = %d, want 405", resp.Code)
	}
}

func TestControlFaults(t *testing.T) {
	h := newHarness(t, twoSystems())
	path := "/mock/systems/2/faults"
	steps := []struct {
		method, body string
		wantCode     int
		want         redfishmock.Faults
		wantInMsg    string
	}{
		{http.MethodPut, `{"latency":"250ms","hang":true}`, http.StatusOK, redfishmock.Faults{Latency: 250 * time.Millisecond, Hang: true}, ""},
		{http.MethodPatch, `{"hang":false,"errorRate":0.5}`, http.StatusOK, redfishmock.Faults{Latency: 250 * time.Millisecond, ErrorRate: 0.5}, ""},
		{http.MethodPut, `{"wrongUUID":true}`, http.StatusOK, redfishmock.Faults{WrongUUID: true}, ""},
		{http.MethodPatch, `{"latncy":"1s"}`, http.StatusBadRequest, redfishmock.Faults{WrongUUID: true}, `unknown field "latncy"`},
		{http.MethodPatch, `{"errorRate":2}`, http.StatusBadRequest, redfishmock.Faults{WrongUUID: true}, "errorRate"},
		{http.MethodPut, `{"latency":5}`, http.StatusBadRequest, redfishmock.Faults{WrongUUID: true}, "duration string"},
		{http.MethodPut, `{"latency":"-1s"}`, http.StatusBadRequest, redfishmock.Faults{WrongUUID: true}, "latency"},
		{http.MethodDelete, ``, http.StatusOK, redfishmock.Faults{}, ""},
		{http.MethodPost, `{}`, http.StatusMethodNotAllowed, redfishmock.Faults{}, ""},
	}
	for i, s := range steps {
		resp := h.do(s.method, path, s.body)
		if resp.Code != s.wantCode {
			t.Fatalf("step %d: %s %s = %d, want %d: %s", i, s.method, s.body, resp.Code, s.wantCode, resp.Body)
		}
		if !strings.Contains(resp.ErrorMessage(), s.wantInMsg) {
			t.Errorf("step %d: message %q does not contain %q", i, resp.ErrorMessage(), s.wantInMsg)
		}
		if diff := cmp.Diff(s.want, h.status("2").Faults); diff != "" {
			t.Errorf("step %d: faults (-want +got):\n%s", i, diff)
		}
	}
	h.setFaults("2", redfishmock.Faults{PowerOnFails: true, Latency: time.Second})
	resp := h.do(http.MethodGet, path, "")
	if string(resp.Body) != `{"latency":"1s","powerOnFails":true}` {
		t.Errorf("GET faults = %s", resp.Body)
	}
}

func TestControlPower(t *testing.T) {
	h := newHarness(t, twoSystems())
	tests := []struct {
		body      string
		wantCode  int
		wantPower redfishmock.PowerState
	}{
		{`{"state":"Off"}`, http.StatusOK, redfishmock.PowerOff},
		{`{"state":"On"}`, http.StatusOK, redfishmock.PowerOn},
		{`{"state":"PoweringOn"}`, http.StatusBadRequest, redfishmock.PowerOn},
		{`{"state":"off"}`, http.StatusBadRequest, redfishmock.PowerOn},
		{`{}`, http.StatusBadRequest, redfishmock.PowerOn},
		{`[]`, http.StatusBadRequest, redfishmock.PowerOn},
	}
	for _, tt := range tests {
		resp := h.do(http.MethodPut, "/mock/systems/1/power", tt.body)
		if resp.Code != tt.wantCode {
			t.Errorf("PUT power %s = %d, want %d: %s", tt.body, resp.Code, tt.wantCode, resp.Body)
		}
		if got := h.status("1").PowerState; got != tt.wantPower {
			t.Errorf("after %s: %s, want %s", tt.body, got, tt.wantPower)
		}
	}
	if got := h.status("1").Counters.Resets; got != nil {
		t.Errorf("setting power directly counted resets: %v", got)
	}
}

func TestControlResetRestoresTheConfiguredState(t *testing.T) {
	cfg := twoSystems()
	cfg.Systems[1].PowerState = redfishmock.PowerOff
	cfg.Systems[1].Faults = &redfishmock.Faults{ConflictWhenOff: true}
	h := newHarness(t, cfg)
	before := h.mock.Statuses()
	tok, _ := h.login(adminUser, adminPass)

	h.reset("1", redfishmock.ResetForceOff)
	h.reset("2", redfishmock.ResetOn)
	h.setFaults("2", redfishmock.Faults{Hang: true})
	if err := h.mock.Event("1", redfishmock.EventPowerLoss); err != nil {
		t.Fatal(err)
	}

	if resp := h.do(http.MethodPost, "/mock/reset", ""); resp.Code != http.StatusNoContent {
		t.Fatalf("POST /mock/reset = %d", resp.Code)
	}
	if diff := cmp.Diff(before, h.mock.Statuses()); diff != "" {
		t.Errorf("after reset (-configured +got):\n%s", diff)
	}
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems", "", token(tok)); resp.Code != http.StatusUnauthorized {
		t.Errorf("a session survived /mock/reset: %d", resp.Code)
	}
}

func TestControlUnknownEndpoint(t *testing.T) {
	h := newHarness(t, twoSystems())
	for _, path := range []string{"/mock", "/mock/", "/mock/nope", "/mock/systems/1/nope", "/"} {
		resp := h.do(http.MethodGet, path, "")
		if resp.Code != http.StatusNotFound && resp.Code != http.StatusUnauthorized {
			t.Errorf("GET %s = %d", path, resp.Code)
		}
		if !json.Valid(resp.Body) {
			t.Errorf("GET %s: body is not JSON: %s", path, resp.Body)
		}
	}
}
