package redfish_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

// An AMI system that answers 503 while its host is off cannot say which
// ResetTypes it takes: the NMI is refused, nothing is sent, and the error
// says why (a PowerOff still goes out to the derived target; an NMI is
// never needed by a machine that is off).
func TestDiagnosticToASystemAnswering503SendsNothing(t *testing.T) {
	c, mock, _ := amiClient(t, func(h http.Handler) http.Handler { return h })
	ctx := context.Background()
	if err := mock.SetPower("2", redfishmock.PowerOff); err != nil {
		t.Fatal(err)
	}
	res, err := c.Diagnostic(ctx)
	st, serr := mock.Status("2")
	if serr != nil {
		t.Fatal(serr)
	}
	if !errors.Is(err, bmc.ErrUnsupported) || res.Sent != "" || st.Counters.Resets[redfishmock.ResetNmi] != 0 {
		t.Fatalf("Diagnostic = %+v, %v, %d Nmi received; want ErrUnsupported and nothing sent", res, err, st.Counters.Resets[redfishmock.ResetNmi])
	}
	if !strings.Contains(err.Error(), "503") {
		t.Errorf("error %q: want it to say the system answered 503", err)
	}
}
