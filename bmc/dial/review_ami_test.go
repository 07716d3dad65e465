package dial

// Review (issue 20): the AMI identity fallback is only as safe as its
// binding to the BMC and chassis it was read beside, yet no test makes the
// binding matter: with `fp != known.fingerprint` in
// bmc/redfish/system.go's identityWhileUnavailable replaced by false,
// every test of bmc/dial and internal/inventory still passes. This test
// fails under that mutant and passes on main.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

func TestReviewAMIIdentityIsRefusedOnceTheBMCIsAnother(t *testing.T) {
	for _, tt := range []struct {
		name, path, field string
	}{
		{"another BMC at the address (service root UUID)", "/redfish/v1/", "UUID"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var swapped atomic.Bool
			cfg := mockConfig(redfishmock.Systems(2)...)
			cfg.Profile = redfishmock.ProfileAMIMulti
			_, url := startWrapped(t, cfg, func(_ *redfishmock.Mock, next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if !swapped.Load() || r.Method != http.MethodGet || r.URL.Path != tt.path {
						next.ServeHTTP(w, r)
						return
					}
					rec := httptest.NewRecorder()
					next.ServeHTTP(rec, r)
					var doc map[string]any
					if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					doc[tt.field] = "00000000-0000-4000-8000-000000000001"
					w.Header().Set("Content-Type", "application/json")
					_ = json.NewEncoder(w).Encode(doc)
				})
			})
			a := newAdapter(t, redfishTarget(t, url, nil, withSystem("2")))
			if _, err := a.Identity(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, err := a.PowerOff(context.Background()); err != nil {
				t.Fatal(err)
			}
			swapped.Store(true)
			id, err := a.Identity(context.Background())
			if err == nil || !strings.Contains(err.Error(), "has changed") {
				t.Errorf("Identity after the BMC changed = %+v, %v; want it refused", id, err)
			}
		})
	}
}
