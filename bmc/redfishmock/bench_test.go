package redfishmock_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

// TestMemoryOf1000Systems checks that idle systems cost only their structs:
// no goroutine, no timer per system.
func TestMemoryOf1000Systems(t *testing.T) {
	const n = 1000
	goroutinesBefore := runtime.NumGoroutine()
	before := heapInUse()

	cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(n)}
	for i := range cfg.Systems {
		// Scoped credentials too, as the end-to-end harness uses them.
		cfg.Systems[i].Username = "node-" + strconv.Itoa(i)
		cfg.Systems[i].Password = "pw-" + strconv.Itoa(i)
	}
	h := newHarness(t, cfg)
	for i := 1; i <= n; i++ {
		id := strconv.Itoa(i)
		if resp := h.do(http.MethodGet, "/redfish/v1/Systems/"+id, "", asAdmin()); resp.Code != http.StatusOK {
			t.Fatalf("GET system %s = %d", id, resp.Code)
		}
		h.reset(id, redfishmock.ResetGracefulRestart) // every system mid-transition
	}
	after := heapInUse()
	runtime.KeepAlive(h.mock)

	used := float64(after-before) / (1 << 20)
	t.Logf("heap in use for %d systems (each read and restarted): %.2f MiB", n, used)
	if used > 100 {
		t.Errorf("%d systems use %.1f MiB, want well under 100 MiB", n, used)
	}
	if extra := runtime.NumGoroutine() - goroutinesBefore; extra > 0 {
		t.Errorf("%d goroutines started for idle systems", extra)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func BenchmarkGetSystem(b *testing.B) {
	h := newHarness(b, twoSystems())
	tok, _ := h.login(adminUser, adminPass)
	for _, bc := range []struct {
		name string
		auth func(*http.Request)
	}{
		{"basic", func(r *http.Request) { r.SetBasicAuth(adminUser, adminPass) }},
		{"session", func(r *http.Request) { r.Header.Set("X-Auth-Token", tok) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/redfish/v1/Systems/1", nil)
			bc.auth(req)
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.mock.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("GET = %d", rec.Code)
				}
			}
		})
	}
}

func BenchmarkReset(b *testing.B) {
	h := newHarness(b, twoSystems())
	req := httptest.NewRequest(http.MethodPost, "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", nil)
	req.SetBasicAuth(adminUser, adminPass)
	bodies := []string{`{"ResetType":"ForceOff"}`, `{"ResetType":"On"}`}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req.Body = io.NopCloser(strings.NewReader(bodies[i%2]))
		i++
		rec := httptest.NewRecorder()
		h.mock.ServeHTTP(rec, req)
		if rec.Code != http.StatusNoContent {
			b.Fatalf("Reset = %d", rec.Code)
		}
	}
}
