package dial

// Review (issue 20) findings: the same-origin redirect rule is applied to
// every method, so a power command can be redirected. Each test here
// states the property the adapter should keep and fails on main at
// a446e5e.

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

const resetPath1 = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"

// A ForceOff POST answered with a same-origin 303 (or 301/302: net/http
// turns the POST into a GET) is not the BMC's acceptance of the command:
// the 2xx the adapter then sees is the answer to a GET it never meant to
// send. Counting it as "accepted" lets an Off that is a restart's
// off-dwell settle over the short settleWindow instead of the unassisted
// window.
func TestReviewRedirectedForceOffIsNotAcceptance(t *testing.T) {
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			mock, url := startWrapped(t, mockConfig(), func(_ *redfishmock.Mock, next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Method == http.MethodPost && r.URL.Path == resetPath1 {
						// e.g. a BMC web server sending a request it does not
						// route to its front page
						http.Redirect(w, r, "/redfish/v1/", code)
						return
					}
					next.ServeHTTP(w, r)
				})
			})
			a := newAdapter(t, redfishTarget(t, url, nil, withSystem("1")))
			res, err := a.PowerOff(context.Background())
			got := resets(t, mock, "1")[redfishmock.ResetForceOff]
			if err == nil {
				t.Errorf("PowerOff = %+v, nil error; the BMC received %d ForceOff: a redirected POST was reported as accepted", res, got)
			}
		})
	}
}

// A ForceOff for system 1 that the BMC answers with 307 to system 2's
// Reset is re-POSTed there by net/http (same origin): the identity was
// checked on system 1, and system 2 is powered off.
func TestReviewForceOffIsNotRedirectedToAnotherSystem(t *testing.T) {
	mock, url := startWrapped(t, mockConfig(redfishmock.Systems(2)...), func(_ *redfishmock.Mock, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path == resetPath1 {
				http.Redirect(w, r, strings.Replace(resetPath1, "/1/", "/2/", 1), http.StatusTemporaryRedirect)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	a := newAdapter(t, redfishTarget(t, url, nil, withSystem("1")))
	id, err := a.Identity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.PowerOff(context.Background())
	if n := resets(t, mock, "2")[redfishmock.ResetForceOff]; n != 0 {
		t.Errorf("identity checked on system 1 (UUID %s), yet system 2 received %d ForceOff (PowerOff error: %v)", id.UUID, n, err)
	}
	if st := mustPowerStatus(t, a); st.State == bmc.PowerOn && err == nil {
		t.Errorf("PowerOff reported success while the selected system still reads %s", st.State)
	}
}
