package redfish_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfish"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

// An AMI multi-system BMC answers 503 on the system while its host is off;
// the adapter identifies it then by the identity it read from the system
// right before our ForceOff. These tests pin down which identity that is.

// amiClient serves the ami-multi profile (system "2" of two) behind wrap,
// and a client of it whose clock the test sets.
func amiClient(t *testing.T, wrap func(http.Handler) http.Handler) (*redfish.Client, *redfishmock.Mock, *time.Time) {
	t.Helper()
	cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(2), Profile: redfishmock.ProfileAMIMulti}
	mock, err := redfishmock.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(wrap(mock))
	t.Cleanup(func() {
		mock.Close()
		srv.Close()
	})
	ep, err := bmc.ParseAddress(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := redfish.New(bmc.Target{Address: ep, System: "2", Credentials: bmc.Credentials{Username: adminUser, Password: adminPass}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	var mu sync.Mutex
	redfish.SetNow(c, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	return c, mock, &now
}

// The identity read right before our ForceOff identifies the system for
// knownIdentityMaxAge, then no longer: an old read says nothing about
// whose machine answers now.
func TestAMIIdentityBoundBeforeOurForceOffAges(t *testing.T) {
	c, _, now := amiClient(t, func(h http.Handler) http.Handler { return h })
	ctx := context.Background()
	if _, err := c.PowerOff(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := c.Identity(ctx)
	if err != nil || id.UUID == "" || !strings.Contains(id.Source, "503") {
		t.Fatalf("Identity right after our ForceOff = %+v, %v; want the identity read before it", id, err)
	}
	*now = now.Add(redfish.KnownIdentityMaxAge + time.Second)
	id, err = c.Identity(ctx)
	if err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("Identity %s after the read = %+v, %v; want it refused as too old", redfish.KnownIdentityMaxAge+time.Second, id, err)
	}
}

// A fresh read of the system whose BMC and chassis cannot be read beside
// it (fingerprinted) leaves no identity bound: the older one is dropped,
// not kept.
func TestAMIIdentityIsDroppedWhenAFreshReadCannotBeBound(t *testing.T) {
	var chassisFails atomic.Bool
	c, mock, _ := amiClient(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if chassisFails.Load() && strings.HasPrefix(r.URL.Path, "/redfish/v1/Chassis") {
				http.Error(w, "chassis unavailable", http.StatusInternalServerError)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()
	if _, err := c.PowerOff(ctx); err != nil { // bound: the system answered, its chassis read
		t.Fatal(err)
	}
	if err := mock.SetPower("2", redfishmock.PowerOn); err != nil {
		t.Fatal(err)
	}
	chassisFails.Store(true)
	if _, err := c.PowerOff(ctx); err != nil { // the system answers; its chassis cannot be read
		t.Fatal(err)
	}
	chassisFails.Store(false)
	id, err := c.Identity(ctx)
	if err == nil || !strings.Contains(err.Error(), "never read") {
		t.Errorf("Identity while off = %+v, %v; want it refused: the last read of the system could not be bound", id, err)
	}
}
