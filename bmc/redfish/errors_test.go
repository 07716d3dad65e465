package redfish

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
)

func answer(status int, retryAfter, body string) *response {
	h := http.Header{}
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	return &response{status: status, header: h, body: []byte(body)}
}

// The vendor answers a power command can get, and what each means.
func TestClassifyingAnswersToACommand(t *testing.T) {
	tests := []struct {
		name          string
		resp          *response
		busy, already bool
		sentinel      error // classifyHTTP's, for the rest
	}{
		{name: "iDRAC already off", resp: answer(409, "", `{"error":{"code":"Base.1.12.GeneralError","message":"","@Message.ExtendedInfo":[{"Message":"Server is already powered OFF.","MessageId":"IDRAC.2.9.PSU501"}]}}`), already: true},
		{name: "iLO already off", resp: answer(400, "", `{"error":{"code":"iLO.0.10.ExtendedInfo","message":"See @Message.ExtendedInfo for more information.","@Message.ExtendedInfo":[{"MessageArgs":["Power is off"],"MessageId":"iLO.2.16.InvalidOperationForSystemState"}]}}`), already: true},
		{name: "a bare 409", resp: answer(409, "", ``), already: true},
		{name: "iDRAC busy", resp: answer(500, "", `{"error":{"@Message.ExtendedInfo":[{"MessageId":"IDRAC.2.7.SYS518"}]}}`), busy: true},
		{name: "503 with Retry-After", resp: answer(503, "2", ``), busy: true},
		{name: "in transition", resp: answer(409, "", `{"error":{"code":"Base.1.8.ResourceInUse"}}`), busy: true},
		{name: "503 without Retry-After", resp: answer(503, "", `{"error":{"code":"Base.1.8.ServiceTemporarilyUnavailable"}}`), busy: true},
		{name: "not allowed", resp: answer(400, "", `{"error":{"code":"Base.1.8.ActionParameterValueNotInList"}}`), sentinel: bmc.ErrUnsupported},
		{name: "refused", resp: answer(400, "", `{"error":{"code":"Oem.1.0.NoWay","message":"no"}}`), sentinel: bmc.ErrBMC},
		{name: "precondition", resp: answer(412, "", `{"error":{"code":"Base.1.18.PreconditionFailed"}}`), sentinel: bmc.ErrBMC},
		{name: "auth", resp: answer(401, "", ``), sentinel: bmc.ErrAuth},
	}
	c := &Client{target: bmc.Target{Auth: bmc.AuthBasic}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newHTTPError(http.MethodPost, "/x", tt.resp)
			if e.busy() != tt.busy || e.already() != tt.already {
				t.Errorf("busy %v already %v; want %v %v (%s)", e.busy(), e.already(), tt.busy, tt.already, e)
			}
			if tt.sentinel != nil && !errors.Is(c.classifyHTTP(e), tt.sentinel) {
				t.Errorf("classified %v, want %v", c.classifyHTTP(e), tt.sentinel)
			}
		})
	}
}

// Requests go to the target's own address, whatever absolute URI a BMC
// hands back in a Location or an @odata.id.
func TestOnlyPath(t *testing.T) {
	for in, want := range map[string]string{
		"/redfish/v1/TaskService/TaskMonitors/1":                    "/redfish/v1/TaskService/TaskMonitors/1",
		"https://evil.example/redfish/v1/TaskMonitors/1?x=1":        "/redfish/v1/TaskMonitors/1?x=1",
		"http://10.0.0.5:8000/redfish/v1/SessionService/Sessions/7": "/redfish/v1/SessionService/Sessions/7",
	} {
		if got := onlyPath(in); got != want {
			t.Errorf("onlyPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// An answer that arrives once our deadline has passed answers a request
// we had given up on (a BMC may even say so: "abandoned"). It is a
// timeout, as the operator sees it, not the BMC's own error.
func TestAnswerAfterTheDeadlineIsATimeout(t *testing.T) {
	c := &Client{target: bmc.Target{Auth: bmc.AuthBasic, Timeout: 300 * time.Millisecond}}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	late := newHTTPError(http.MethodGet, "/redfish/v1/Systems", answer(503, "", `{"error":{"code":"Base.1.8.ServiceTemporarilyUnavailable"}}`))
	if err := c.classify(ctx, late); !errors.Is(err, bmc.ErrTimeout) {
		t.Errorf("classify(late 503) = %v, want %v", err, bmc.ErrTimeout)
	}
	if err := c.classify(context.Background(), late); errors.Is(err, bmc.ErrTimeout) {
		t.Errorf("classify(503 in time) = %v, want the BMC's error", err)
	}
}
