package redfish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
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
			e := newHTTPError(http.MethodPost, "/x", tt.resp, bmc.Credentials{})
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
	late := newHTTPError(http.MethodGet, "/redfish/v1/Systems", answer(503, "", `{"error":{"code":"Base.1.8.ServiceTemporarilyUnavailable"}}`), bmc.Credentials{})
	if err := c.classify(ctx, late); !errors.Is(err, bmc.ErrTimeout) {
		t.Errorf("classify(late 503) = %v, want %v", err, bmc.ErrTimeout)
	}
	if err := c.classify(context.Background(), late); errors.Is(err, bmc.ErrTimeout) {
		t.Errorf("classify(503 in time) = %v, want the BMC's error", err)
	}
}

// The redaction property (issue 17, defect 6): whatever a BMC puts in an
// error body, with the password (4 bytes or longer) in any form bmctest.Forms
// knows, anywhere in it, and wherever the cut to maxMessage falls, the error
// text carries no piece of the password, nor of the form it came in, 4 bytes
// or longer: no prefix left by the cut, no part split by collapsed
// whitespace. The password is redacted in the BMC's own text first; only
// then is the text made one line and cut.
func TestRedfishErrorsNeverCarryAPieceOfThePassword(t *testing.T) {
	const user = "admin"
	leaks, cases := 0, 0
	defer func() {
		if leaks > 0 {
			t.Errorf("%d of %d error texts carry a piece of the password", leaks, cases)
		}
	}()
	for _, pw := range bmctest.Passwords {
		c := &Client{target: bmc.Target{Auth: bmc.AuthBasic, Credentials: bmc.Credentials{Username: user, Password: bmc.Secret(pw)}}}
		for formName, form := range bmctest.Forms(user, pw) {
			// The bodies, each with the form at the end of n filler bytes.
			bodies := map[string]func(n int) string{
				// A Redfish error whose message quotes the form: the JSON
				// decoder unescapes what encoding/json escaped.
				"redfish error": func(n int) string {
					b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": "Base.1.8.GeneralError",
						"@Message.ExtendedInfo": []map[string]string{{"MessageId": "Oem.1.0.LoginFailed", "Message": strings.Repeat("~", n) + form + " was refused."}}}})
					return string(b)
				},
				// The same, the form spliced in undecoded (a \u escape
				// stays one to the JSON decoder only if it is written so).
				"redfish error, spliced": func(n int) string {
					if formName != "json \\u" && formName != "json" {
						return ""
					}
					return `{"error":{"code":"Base.1.8.GeneralError","@Message.ExtendedInfo":[{"MessageId":"Oem.1.0.LoginFailed","Message":"` + strings.Repeat("~", n) + form + ` was refused."}]}}`
				},
				// Not JSON (an HTML page, a proxy's text, a body cut short):
				// kept as text.
				"text": func(n int) string { return "<p>" + strings.Repeat("~", n) + form + " was refused</p>" },
			}
			for bodyName, body := range bodies {
				// Every cut: the form, as the message holds it (decoded, in
				// a spliced body), starts from before maxMessage to after it.
				quoted := len(form)
				if bodyName == "redfish error, spliced" {
					quoted = len(pw)
				}
				for n := maxMessage - quoted - 2; n <= maxMessage+1; n++ {
					b := body(n)
					if b == "" {
						continue
					}
					e := newHTTPError(http.MethodPost, "/redfish/v1/SessionService/Sessions", answer(http.StatusUnauthorized, "", b), c.target.Credentials)
					// classify gives an *httpError to classifyHTTP.
					text := c.classify(context.Background(), e).Error()
					cases++
					for _, secret := range []string{pw, form} {
						if piece := bmctest.Leak(text, secret); piece != "" {
							leaks++
							if leaks <= 5 {
								t.Errorf("password %q, %s form in a %s body, form at %d: the error carries %q:\n%s", pw, formName, bodyName, n, piece, text)
							}
						}
					}
				}
			}
		}
	}
}

// A task's messages and a library's error text are redacted before they
// are made one line: a passphrase with two spaces in a row still matches.
func TestRedfishTaskAndLibraryErrorsAreRedactedBeforeOneLine(t *testing.T) {
	for _, pw := range bmctest.Passwords {
		c := &Client{target: bmc.Target{Auth: bmc.AuthBasic, Credentials: bmc.Credentials{Username: "admin", Password: bmc.Secret(pw)}}}
		var task taskDoc
		msg, _ := json.Marshal("the request was\n  {\"Password\": \"" + pw + "\"}")
		if err := json.Unmarshal([]byte(`{"Messages":[{"MessageId":"Oem.1.0.Echo","Message":`+string(msg)+`}]}`), &task); err != nil {
			t.Fatal(err)
		}
		for name, err := range map[string]error{
			"task":    fmt.Errorf("%w: the task at /t/1 ended Exception: %s", bmc.ErrBMC, taskMessages(task)),
			"library": fmt.Errorf("post https://bmc/redfish: body %q: parse failure near\n%s", pw, pw),
		} {
			text := c.classify(context.Background(), err).Error()
			if piece := bmctest.Leak(text, pw); piece != "" || strings.Contains(text, "\n") {
				t.Errorf("%s error with password %q: %q carries %q (or spans lines)", name, pw, text, piece)
			}
		}
	}
}
