package redfishmock_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

const (
	adminUser = "admin"
	adminPass = "secret"
)

// harness drives a Mock in process with a fake clock.
type harness struct {
	t     testing.TB
	mock  *redfishmock.Mock
	clock *clocktesting.FakeClock
}

func twoSystems() redfishmock.Config {
	return redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(2)}
}

func newHarness(t testing.TB, cfg redfishmock.Config) *harness {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	m, err := redfishmock.New(cfg, redfishmock.WithClock(clk))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(m.Close)
	return &harness{t: t, mock: m, clock: clk}
}

type response struct {
	Code   int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as an object.
func (r response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.Body)
	}
	return v
}

// ErrorCode is the Redfish error code of the body, or "".
func (r response) ErrorCode() string {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &e)
	return e.Error.Code
}

func (r response) ErrorMessage() string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &e)
	return e.Error.Message
}

type reqOpt func(*http.Request)

func basic(user, pass string) reqOpt {
	return func(r *http.Request) { r.SetBasicAuth(user, pass) }
}

func asAdmin() reqOpt { return basic(adminUser, adminPass) }

func token(tok string) reqOpt {
	return func(r *http.Request) { r.Header.Set("X-Auth-Token", tok) }
}

func withContext(ctx context.Context) reqOpt {
	return func(r *http.Request) { *r = *r.WithContext(ctx) }
}

func (h *harness) do(method, path, body string, opts ...reqOpt) response {
	h.t.Helper()
	return serve(h.mock, method, path, body, opts...)
}

func serve(handler http.Handler, method, path, body string, opts ...reqOpt) response {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for _, opt := range opts {
		opt(req)
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	return response{Code: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
}

func (h *harness) login(user, pass string) (tok, location string) {
	h.t.Helper()
	resp := h.do(http.MethodPost, "/redfish/v1/SessionService/Sessions", `{"UserName":"`+user+`","Password":"`+pass+`"}`)
	if resp.Code != http.StatusCreated {
		h.t.Fatalf("login as %s: %d %s", user, resp.Code, resp.Body)
	}
	return resp.Header.Get("X-Auth-Token"), resp.Header.Get("Location")
}

func (h *harness) reset(id string, rt redfishmock.ResetType, opts ...reqOpt) response {
	h.t.Helper()
	if len(opts) == 0 {
		opts = []reqOpt{asAdmin()}
	}
	return h.do(http.MethodPost, "/redfish/v1/Systems/"+id+"/Actions/ComputerSystem.Reset", `{"ResetType":"`+string(rt)+`"}`, opts...)
}

func (h *harness) status(id string) redfishmock.SystemStatus {
	h.t.Helper()
	st, err := h.mock.Status(id)
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

func (h *harness) setFaults(id string, f redfishmock.Faults) {
	h.t.Helper()
	if err := h.mock.SetFaults(id, f); err != nil {
		h.t.Fatal(err)
	}
}

// async serves a request in the background.
func (h *harness) async(method, path, body string, opts ...reqOpt) <-chan response {
	done := make(chan response, 1)
	go func() { done <- serve(h.mock, method, path, body, opts...) }()
	return done
}

// waitForTimer returns once some request is waiting on the fake clock.
func (h *harness) waitForTimer() {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !h.clock.HasWaiters() {
		if time.Now().After(deadline) {
			h.t.Fatal("no request started waiting on the clock")
		}
		runtime.Gosched() // let the request goroutine reach its timer
	}
}

// waitForRequests returns once system id has counted n requests.
func (h *harness) waitForRequests(id string, n int64) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.status(id).Counters.Requests < n {
		if time.Now().After(deadline) {
			h.t.Fatalf("system %s never counted %d requests", id, n)
		}
		runtime.Gosched()
	}
}

func receive(t testing.TB, ch <-chan response) response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("request did not complete")
		return response{}
	}
}
