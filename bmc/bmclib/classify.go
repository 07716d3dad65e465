package bmclib

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/stmcginnis/gofish/common"

	"github.com/bmcfence/bmcfence/bmc"
)

var sentinels = []error{
	bmc.ErrUnreachable, bmc.ErrTimeout, bmc.ErrAuth, bmc.ErrTLS,
	bmc.ErrUnsupported, bmc.ErrBMC, bmc.ErrSystem, bmc.ErrInvalidTarget,
}

// classify maps a library error to one of bmc's sentinels with a one-line,
// password-free message that says what to fix where we can tell. elapsed is
// how long the failed attempt took; ipmitool's errors need it (below).
func (a *Adapter) classify(ctx context.Context, err error, elapsed time.Duration) error {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return err // already ours
		}
	}
	msg := bmc.Redact(oneLine(err), a.target.Credentials.Password)

	var rfErr *common.Error
	var netErr net.Error
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidCert x509.CertificateInvalidError
	var verifyErr *tls.CertificateVerificationError
	var recordErr tls.RecordHeaderError
	var alert tls.AlertError
	var dnsErr *net.DNSError
	var opErr *net.OpError

	switch {
	case errors.Is(err, context.Canceled) && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("cancelled: %w", context.Canceled)
	case errors.Is(err, context.DeadlineExceeded) || expired(ctx) ||
		(errors.As(err, &netErr) && netErr.Timeout()):
		return fmt.Errorf("%w: no answer within %s", bmc.ErrTimeout, a.target.Timeout)
	case errors.As(err, &rfErr):
		return classifyHTTP(rfErr)
	case errors.As(err, &unknownCA):
		return fmt.Errorf("%w: certificate signed by an unknown authority: give the BMC's CA bundle, or mark this BMC insecure explicitly", bmc.ErrTLS)
	case errors.As(err, &hostErr):
		return fmt.Errorf("%w: certificate is not valid for %s: %s", bmc.ErrTLS, a.target.Address.Host, msg)
	case errors.As(err, &invalidCert), errors.As(err, &verifyErr), errors.As(err, &alert):
		return fmt.Errorf("%w: %s", bmc.ErrTLS, msg)
	case errors.As(err, &recordErr):
		return fmt.Errorf("%w: the BMC does not speak TLS on this port (use http:// if it serves plain HTTP)", bmc.ErrTLS)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("%w: cannot resolve %s", bmc.ErrUnreachable, a.target.Address.Host)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w: connection refused by %s", bmc.ErrUnreachable, a.target.Address.HostPort())
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.As(err, &opErr):
		return fmt.Errorf("%w: %s", bmc.ErrUnreachable, msg)
	}
	if a.target.Address.Protocol == bmc.IPMI {
		return classifyIPMI(msg, elapsed)
	}
	if strings.Contains(msg, "server gave HTTP response to HTTPS client") {
		return fmt.Errorf("%w: the BMC does not speak TLS on this port (use http:// if it serves plain HTTP)", bmc.ErrTLS)
	}
	return fmt.Errorf("%w: %s", bmc.ErrBMC, msg)
}

// expired reports whether ctx's deadline has passed. ctx.Err() alone is not
// enough: connections expire at the same instant (see newHTTPClient), and
// gofish flattens some errors to text (Service.Systems does), so an error
// caused by the deadline can arrive, unrecognisable, just before the
// context's own timer has fired.
func expired(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

// classifyHTTP maps a Redfish error response. The BMC's own message (never an
// echo of our request) is kept for the operator.
func classifyHTTP(e *common.Error) error {
	detail := fmt.Sprintf("HTTP %d", e.HTTPReturnedStatusCode)
	if m := redfishMessage(e); m != "" {
		detail += ": " + m
	}
	switch code := e.HTTPReturnedStatusCode; {
	case code == 401 || code == 403:
		return fmt.Errorf("%w (%s): check the username and password", bmc.ErrAuth, detail)
	case code == 404:
		return fmt.Errorf("%w: %s", bmc.ErrSystem, detail)
	case code == 405 || code == 501:
		return fmt.Errorf("%w: %s", bmc.ErrUnsupported, detail)
	default:
		return fmt.Errorf("%w: %s", bmc.ErrBMC, detail)
	}
}

func redfishMessage(e *common.Error) string {
	if e.Message != "" {
		return oneLineString(e.Message)
	}
	for _, x := range e.ExtendedInfos {
		if x.Message != "" {
			return oneLineString(x.Message)
		}
	}
	return ""
}

// ipmitool reports failures only as text. These are the sentences ipmitool
// 1.8.19 prints for each case (checked against ipmi_sim).
var ipmiAuthMarkers = []string{
	"RAKP 2 HMAC is invalid",
	"unauthorized name",
	"Invalid user name",
	"Insufficient privilege",
	"RAKP 2 message indicates an error",
}

var ipmiUnreachableMarkers = []string{
	"Unable to establish IPMI v2 / RMCP+ session",
	"No response from remote controller",
	"Get Auth Capabilities error",
	"Get Channel Cipher Suites",
}

// ipmiRefusalWindow separates the two causes of ipmitool's "Unable to
// establish IPMI v2 / RMCP+ session", which it prints both for a wrong
// password and for a silent address: a BMC that refuses the RAKP exchange
// answers at once (~30 ms against ipmi_sim), while an address nobody answers
// costs at least one retransmission timeout (1 s with -N 1, 5 s as bmclib
// runs it).
const ipmiRefusalWindow = 900 * time.Millisecond

func classifyIPMI(msg string, elapsed time.Duration) error {
	for _, m := range ipmiAuthMarkers {
		if strings.Contains(msg, m) {
			return fmt.Errorf("%w (%s): check the username and password", bmc.ErrAuth, msg)
		}
	}
	if strings.Contains(msg, "Unable to establish IPMI v2 / RMCP+ session") && elapsed < ipmiRefusalWindow {
		return fmt.Errorf("%w: the BMC refused the IPMI session: check the username and password (or the cipher suite)", bmc.ErrAuth)
	}
	for _, m := range ipmiUnreachableMarkers {
		if strings.Contains(msg, m) {
			return fmt.Errorf("%w: %s", bmc.ErrUnreachable, msg)
		}
	}
	return fmt.Errorf("%w: %s", bmc.ErrBMC, msg)
}

// oneLine flattens bmclib's multi-line multierror text to one line.
func oneLine(err error) string {
	var me *multierror.Error
	if errors.As(err, &me) && len(me.Errors) > 0 {
		parts := make([]string, 0, len(me.Errors))
		for _, e := range me.Errors {
			parts = append(parts, oneLineString(e.Error()))
		}
		return strings.Join(parts, "; ")
	}
	return oneLineString(err.Error())
}

func oneLineString(s string) string { return strings.Join(strings.Fields(s), " ") }
