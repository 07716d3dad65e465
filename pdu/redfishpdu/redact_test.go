package redfishpdu_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/pdu/redfishpdu"
)

// Issue 17, defect 6, in the PDU's Redfish client (the same order bug as
// the BMC's): the PDU's error message is redacted as it wrote it, then
// made one line and cut to 300 bytes, so no piece of the password (4 bytes
// or longer) survives a cut at any offset or collapsed whitespace.
func TestRedfishPDUErrorsNeverCarryAPieceOfThePassword(t *testing.T) {
	var mu sync.Mutex
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		b := body
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(b))
	}))
	defer srv.Close()
	ep, err := bmc.ParseAddress(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, pw := range bmctest.Passwords {
		c, err := redfishpdu.New(redfishpdu.Target{Outlet: "A1", Device: bmc.Target{Address: ep,
			Credentials: bmc.Credentials{Username: "admin", Password: bmc.Secret(pw)}, Timeout: 3 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		for n := 300 - len(pw) - 2; n <= 301; n++ {
			msg, _ := json.Marshal(map[string]any{"error": map[string]any{"code": "Base.1.8.GeneralError", "message": strings.Repeat("~", n) + pw + " refused"}})
			mu.Lock()
			body = string(msg)
			mu.Unlock()
			_, err := c.PowerStatus(context.Background())
			if err == nil {
				t.Fatal("no error from a 400")
			}
			if piece := bmctest.Leak(err.Error(), pw); piece != "" || strings.Contains(err.Error(), "\n") {
				if bad++; bad <= 3 {
					t.Errorf("password %q at %d: %q carries %q (or spans lines)", pw, n, err, piece)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d error texts carry a piece of the password or span lines", bad)
	}
}
