package redfish

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/internal/mutant"
)

// httpError is a non-2xx answer, with what the Redfish error body said.
// Its text is built from the BMC's own words; classify redacts it.
type httpError struct {
	method, path string
	status       int
	retryAfter   time.Duration // 0 when absent
	messageIDs   []string      // error.code and every @Message.ExtendedInfo MessageId
	message      string        // the first human message, one line
	wwwAuth      string        // the WWW-Authenticate header of a 401
}

func (e *httpError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", e.status)
	ids := e.specificIDs()
	if len(ids) > 0 {
		fmt.Fprintf(&b, " %s", strings.Join(ids, ", "))
	}
	if e.message != "" {
		fmt.Fprintf(&b, ": %s", e.message)
	}
	return b.String()
}

// specificIDs drops the generic envelope codes ("Base.1.12.GeneralError",
// "iLO.0.10.ExtendedInfo") when a more specific MessageId is there.
func (e *httpError) specificIDs() []string {
	var out []string
	for _, id := range e.messageIDs {
		if (isGenericID(id) && len(e.messageIDs) > 1) || slices.Contains(out, id) {
			continue
		}
		out = append(out, id)
	}
	return out
}

func isGenericID(id string) bool {
	return strings.HasSuffix(id, ".GeneralError") || strings.HasSuffix(id, ".ExtendedInfo")
}

// hasID reports whether any MessageId ends with one of suffixes, ignoring
// the registry prefix and version ("IDRAC.2.9.PSU501" has suffix "PSU501").
func (e *httpError) hasID(suffixes ...string) bool {
	for _, id := range e.messageIDs {
		for _, s := range suffixes {
			if strings.HasSuffix(id, "."+s) || id == s {
				return true
			}
		}
	}
	return false
}

// maxMessage bounds the BMC's words quoted in an error.
const maxMessage = 300

// newHTTPError reads a non-2xx answer. The BMC's words are redacted as it
// wrote them (after JSON decoding, which the redaction also sees through),
// and only then made one line and cut to maxMessage: collapsing first
// splits a passphrase with two spaces in a row, and cutting first leaves a
// prefix of the password (issue 17).
//
// secrets are more to redact the same way (a subscription's Context token).
func newHTTPError(method, path string, resp *response, creds bmc.Credentials, secrets ...bmc.Secret) *httpError {
	e := &httpError{method: method, path: path, status: resp.status, wwwAuth: resp.header.Get("WWW-Authenticate")}
	if s := resp.header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n >= 0 {
			e.retryAfter = time.Duration(n) * time.Second
		} else if t, err := http.ParseTime(s); err == nil {
			e.retryAfter = time.Until(t)
		}
	}
	var body struct {
		Error struct {
			Code     string `json:"code"`
			Message  string `json:"message"`
			Extended []struct {
				MessageID   string   `json:"MessageId"`
				Message     string   `json:"Message"`
				MessageArgs []string `json:"MessageArgs"`
			} `json:"@Message.ExtendedInfo"`
		} `json:"error"`
	}
	if json.Unmarshal(resp.body, &body) == nil {
		if body.Error.Code != "" {
			e.messageIDs = append(e.messageIDs, body.Error.Code)
		}
		var msgs []string
		for _, x := range body.Error.Extended {
			if x.MessageID != "" {
				e.messageIDs = append(e.messageIDs, x.MessageID)
			}
			switch {
			case x.Message != "":
				msgs = append(msgs, x.Message)
			case len(x.MessageArgs) > 0:
				msgs = append(msgs, strings.Join(x.MessageArgs, ", "))
			}
		}
		// The envelope's message is often a pointer to the extended info
		// ("See @Message.ExtendedInfo for more information."); prefer the
		// extended messages, which say what happened.
		if len(msgs) == 0 && body.Error.Message != "" {
			msgs = append(msgs, body.Error.Message)
		}
		e.message = bmcWords(strings.Join(msgs, "\n"), creds, secrets)
	} else if len(resp.body) > 0 && !json.Valid(resp.body) {
		e.message = bmcWords(string(resp.body), creds, secrets)
	}
	return e
}

// bmcWords is text a BMC wrote, fit to quote: redacted, one line, at most
// maxMessage bytes (cut on a character boundary).
func bmcWords(text string, creds bmc.Credentials, secrets []bmc.Secret) string {
	redact := func(t string) string {
		t = bmc.RedactCredentials(t, creds)
		for _, sec := range secrets {
			t = bmc.Redact(t, sec)
		}
		return t
	}
	if mutant.On(mutant.RedactRawFirst) {
		// The mutant: one line and cut first, as before issue 17.
		return redact(clip(oneLine(text), maxMessage))
	}
	return clip(oneLine(redact(text)), maxMessage)
}

// clip cuts s to at most n bytes, on a character boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Vendor MessageIds (registry prefix and version stripped).
var (
	// alreadyIDs: the BMC refused because the system already is in the
	// requested state. iDRAC: PSU501 "Server is already powered OFF."
	// (409); iLO: InvalidOperationForSystemState (400); the Base registry's
	// ResourceInStandby, which bmcfence's mock answers.
	alreadyIDs = []string{"PSU501", "PSU502", "InvalidOperationForSystemState", "ResourceInStandby"}
	// busyIDs: the BMC cannot take the command now and asks to retry.
	// iDRAC: SYS518 "iDRAC is not ready ... retry"; the Base registry's
	// ResourceInUse (a transition under way) and ServiceTemporarilyUnavailable;
	// iLO: ResourceNotReadyRetry.
	busyIDs = []string{"SYS518", "ResourceInUse", "ServiceTemporarilyUnavailable", "ResourceNotReadyRetry"}
	// unsupportedIDs: the service does not offer what was asked.
	unsupportedIDs = []string{"ActionParameterNotSupported", "ActionParameterValueNotInList", "ActionNotSupported",
		"ActionParameterValueError", "PropertyValueNotInList"}
)

// busy reports whether an answer to a command means "not now, retry".
func (e *httpError) busy() bool {
	switch {
	case e.hasID(busyIDs...):
		return true
	case e.status == http.StatusServiceUnavailable && e.retryAfter > 0:
		return true
	}
	return false
}

// already reports whether an answer to a power command means "the system
// is already in that state; nothing was done". A 409 that is not busy is
// read the same way: Conflict on a reset means the state rules it out.
func (e *httpError) already() bool {
	if e.busy() {
		return false
	}
	return e.hasID(alreadyIDs...) || e.status == http.StatusConflict
}

// classify maps an error to one of bmc's sentinels with a one-line message,
// free of every form of the password, that says what to fix where we can
// tell.
func (c *Client) classify(ctx context.Context, err error) error {
	for _, s := range []error{bmc.ErrUnreachable, bmc.ErrTimeout, bmc.ErrAuth, bmc.ErrTLS, bmc.ErrUnsupported,
		bmc.ErrBMC, bmc.ErrSystem, bmc.ErrInvalidTarget, bmc.ErrAlreadyInState, bmc.ErrBusy} {
		if errors.Is(err, s) {
			return c.redacted(err)
		}
	}
	var (
		herr        *httpError
		netErr      net.Error
		unknownCA   x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		invalidCert x509.CertificateInvalidError
		verifyErr   *tls.CertificateVerificationError
		recordErr   tls.RecordHeaderError
		alert       tls.AlertError
		dnsErr      *net.DNSError
		opErr       *net.OpError
	)
	msg := c.oneLine(err.Error())
	switch {
	case errors.As(err, &herr) && expired(ctx):
		// An answer that came after our deadline answers a request we had
		// given up on; the race is real (the mock even answers "abandoned").
		return fmt.Errorf("%w: no answer within %s (a late %d came after)", bmc.ErrTimeout, c.target.Timeout, herr.status)
	case errors.As(err, &herr):
		return c.classifyHTTP(herr)
	case errors.Is(err, context.Canceled) && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("cancelled: %w", context.Canceled)
	case errors.Is(err, context.DeadlineExceeded) || expired(ctx) || (errors.As(err, &netErr) && netErr.Timeout()):
		return fmt.Errorf("%w: no answer within %s", bmc.ErrTimeout, c.target.Timeout)
	case errors.As(err, &unknownCA):
		n := c.target.Names
		return fmt.Errorf("%w: certificate signed by an unknown authority: give the BMC's CA bundle with %s, or skip verification explicitly with %s", bmc.ErrTLS, n.CA, n.Insecure)
	case errors.As(err, &hostErr):
		return fmt.Errorf("%w: certificate is not valid for %s: %s", bmc.ErrTLS, c.target.Address.Host, msg)
	case errors.As(err, &invalidCert), errors.As(err, &verifyErr), errors.As(err, &alert):
		return fmt.Errorf("%w: %s", bmc.ErrTLS, msg)
	case errors.As(err, &recordErr), strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%w: the BMC does not speak TLS on this port (use http:// if it serves plain HTTP)", bmc.ErrTLS)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("%w: cannot resolve %s", bmc.ErrUnreachable, c.target.Address.Host)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w: connection refused by %s", bmc.ErrUnreachable, c.target.Address.HostPort())
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &opErr):
		return fmt.Errorf("%w: %s", bmc.ErrUnreachable, msg)
	}
	return fmt.Errorf("%w: %s", bmc.ErrBMC, msg)
}

// classifyHTTP maps a Redfish error answer. The BMC's own words are kept
// for the operator, redacted: some BMCs echo the request, login included.
func (c *Client) classifyHTTP(e *httpError) error {
	detail := c.redact(e.Error())
	switch code := e.status; {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		hint := "check the username and password"
		if code == http.StatusUnauthorized && c.target.Auth == bmc.AuthBasic && !strings.Contains(strings.ToLower(e.wwwAuth), "basic") {
			// A BMC that refuses Basic auth altogether says so by not
			// offering it; it may take the same credentials in a session.
			hint += "; this BMC does not offer HTTP Basic authentication, try " + authSetting(c.target.Names, bmc.AuthSession)
		}
		return fmt.Errorf("%w (%s): %s", bmc.ErrAuth, detail, hint)
	case code == http.StatusNotFound:
		return fmt.Errorf("%w: %s %s: %s", bmc.ErrSystem, e.method, e.path, detail)
	case code == http.StatusMethodNotAllowed || code == http.StatusNotImplemented || e.hasID(unsupportedIDs...):
		return fmt.Errorf("%w: %s %s: %s", bmc.ErrUnsupported, e.method, e.path, detail)
	default:
		return fmt.Errorf("%w: %s %s: %s", bmc.ErrBMC, e.method, e.path, detail)
	}
}

// authSetting says how to choose an authentication mode in the reader's
// words: a flag takes a value after a space, a configuration key a colon.
func authSetting(n bmc.SettingNames, mode bmc.AuthMode) string {
	if strings.HasPrefix(n.Auth, "-") {
		return n.Auth + " " + string(mode)
	}
	return n.Auth + ": " + string(mode)
}

// redact removes every form of the password from msg.
func (c *Client) redact(msg string) string {
	return bmc.RedactCredentials(msg, c.target.Credentials)
}

// oneLine is msg redacted, then made one line: in that order, or a
// passphrase with two spaces in a row would no longer match.
func (c *Client) oneLine(msg string) string {
	if mutant.On(mutant.RedactRawFirst) {
		return c.redact(oneLine(msg))
	}
	return oneLine(c.redact(msg))
}

// redacted is err with every form of the password removed from its text,
// made one line, keeping its sentinels (bmc.RedactCredentialsError).
func (c *Client) redacted(err error) error {
	msg := c.oneLine(err.Error())
	if msg == err.Error() {
		return err
	}
	return bmc.WithText(err, msg)
}

// expired reports whether ctx's deadline has passed. ctx.Err() alone is not
// enough: an error caused by the deadline can arrive just before the
// context's own timer has fired.
func expired(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
