package redfishmock_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

// FuzzHandler sends one arbitrary request to a fresh mock: it must never
// panic, and must answer with a sane status and, unless the status forbids
// a body, a JSON one.
func FuzzHandler(f *testing.F) {
	seeds := []struct{ method, path, auth, token, body string }{
		{"GET", "/redfish/v1/", "", "", ""},
		{"GET", "/redfish/v1/Systems/1", "admin:secret", "", ""},
		{"POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", "admin:secret", "", `{"ResetType":"ForceOff"}`},
		{"POST", "/redfish/v1/Systems/2/Actions/ComputerSystem.Reset", "admin:secret", "", `{"ResetType":"PowerCycle"}`},
		{"POST", "/redfish/v1/SessionService/Sessions", "", "", `{"UserName":"admin","Password":"secret"}`},
		{"DELETE", "/redfish/v1/SessionService/Sessions/1", "admin:secret", "", ""},
		{"GET", "/redfish/v1/SessionService/Sessions", "", "deadbeef", ""},
		{"PATCH", "/mock/systems/1/faults", "", "", `{"latency":"1s","errorRate":0.5}`},
		{"PUT", "/mock/systems/1/faults", "", "", `{"hang":true}`},
		{"POST", "/mock/systems/1/events", "", "", `{"event":"os-hang"}`},
		{"PUT", "/mock/systems/2/power", "", "", `{"state":"Off"}`},
		{"POST", "/mock/reset", "", "", ""},
		{"BREW", "/redfish/v1/../../etc/passwd", "a:b:c", "", "\x00\xff"},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.auth, s.token, s.body)
	}
	f.Fuzz(func(t *testing.T, method, path, auth, tok, body string) {
		if !validMethod(method) || !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\t#?") {
			t.Skip("not a request a server would parse")
		}
		h := newHarness(t, twoSystems())
		req := httptest.NewRequest(http.MethodGet, "/", strings.NewReader(body))
		req.Method = method
		req.URL.Path = path
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			req.SetBasicAuth(user, pass)
		}
		if tok != "" && !strings.ContainsAny(tok, "\r\n") {
			req.Header.Set("X-Auth-Token", tok)
		}
		// A fault set by this very request (hang, latency) only affects later
		// requests, of which there are none, so nothing here can block.
		rec := httptest.NewRecorder()
		h.mock.ServeHTTP(rec, req)

		if rec.Code < 200 || rec.Code > 599 {
			t.Fatalf("%s %s: status %d", method, path, rec.Code)
		}
		if rec.Code == http.StatusNoContent || method == http.MethodHead {
			return
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", method, path, ct)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Errorf("%s %s: %d with a body that is not JSON: %q", method, path, rec.Code, rec.Body.Bytes())
		}
		if rec.Code >= 400 {
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Errorf("%s %s: %d without a Redfish error body: %s", method, path, rec.Code, rec.Body.Bytes())
			}
		}
	})
}

// validMethod is what net/http accepts as a method token.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, r := range m {
		if r < '!' || r > '~' || strings.ContainsRune(`()<>@,;:\"/[]?={}`, r) {
			return false
		}
	}
	return true
}

// FuzzParseConfig: any document either fails with ErrInvalidConfig or
// yields a config New accepts or rejects cleanly. Nothing panics.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("username: admin\npassword: secret\nsystems: [{}]"))
	f.Add([]byte("systems:\n  - id: 1\n    powerState: Off\n    timing: {powerOnTime: 45s}\n    faults: {errorRate: 0.5}\n"))
	f.Add([]byte("timing: {powerOnTime: 30}"))
	f.Add([]byte("faults: {latency: -1s}\nsessionTimeout: 1h"))
	f.Add([]byte("{}"))
	f.Add([]byte("- a\n- b"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := redfishmock.ParseConfig(data)
		if err != nil {
			return
		}
		if len(cfg.Systems) > 64 {
			t.Skip("too many systems to build quickly")
		}
		_, _ = redfishmock.New(cfg)
	})
}

// FuzzFaultsJSON: decoding faults never panics, and whatever decodes
// survives a round trip unchanged.
func FuzzFaultsJSON(f *testing.F) {
	f.Add([]byte(`{"latency":"250ms","errorRate":0.1,"hang":true}`))
	f.Add([]byte(`{"sessionLimit":3,"wrongUUID":true,"authFailure":true}`))
	f.Add([]byte(`{"latency":5}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var faults redfishmock.Faults
		if err := faults.UnmarshalJSON(data); err != nil {
			return
		}
		encoded, err := json.Marshal(faults)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", faults, err)
		}
		var again redfishmock.Faults
		if err := json.Unmarshal(encoded, &again); err != nil {
			t.Fatalf("Unmarshal(%s): %v", encoded, err)
		}
		if diff := cmp.Diff(faults, again); diff != "" {
			t.Errorf("round trip of %s (-first +second):\n%s", data, diff)
		}

		var timing redfishmock.Timing
		_ = timing.UnmarshalJSON(data)
	})
}
