package dial

// Review (issue 20): the agent's probe is one Identity per node per minute,
// documented as one BMC request (internal/inventory.Controller.Probe, the
// README's "BMC load holds (one request per node per minute)", make scale's
// maxBMCPerMin = 1.0). Since the AMI binding, every Identity that reads the
// system also reads the service root and the chassis to fingerprint them
// (bmc/redfish/system.go bind): three requests. Fails on main at a446e5e.

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

func TestReviewProbeIsOneRequest(t *testing.T) {
	var n atomic.Int32
	var paths []string
	_, url := startWrapped(t, mockConfig(), func(_ *redfishmock.Mock, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			paths = append(paths, r.Method+" "+r.URL.Path)
			next.ServeHTTP(w, r)
		})
	})
	a := newAdapter(t, redfishTarget(t, url, nil, withSystem("1")))
	if _, err := a.Identity(context.Background()); err != nil { // resolves and caches the system
		t.Fatal(err)
	}
	n.Store(0)
	paths = nil
	if _, err := a.Identity(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("a probe (Identity of a known system) sent %d requests: %v; documented: one", got, paths)
	}
}
