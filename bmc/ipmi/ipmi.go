// Package ipmi implements bmc.Controller over IPMI 2.0 (RMCP+, "lanplus")
// in Go, with github.com/bougou/go-ipmi: no ipmitool at run time, the
// password never in argv or an environment, IPv4 and IPv6 alike.
//
// Each operation opens a session (cipher suite 3 unless the target says
// 17), runs one command and closes the session, all bounded by the
// operation's timeout:
//
//	PowerStatus  Get Chassis Status: the power bit, as ipmitool words it
//	PowerOff     Chassis Control power down, always sent; completion code
//	             0xD5 ("not supported in present state", what real BMCs
//	             answer to an off machine) wraps bmc.ErrAlreadyInState
//	PowerOn      Chassis Control power up
//	Identity     Get System GUID, decoded the SMBIOS way, so it reads like
//	             the node's /sys/class/dmi/id/product_uuid and kubelet's
//	             status.nodeInfo.systemUUID
//
// Two things go-ipmi v0.8.3 does not do are done here: it sends Get Channel
// Authentication Capabilities in the RMCP+ format, which OpenIPMI's
// ipmi_sim (and older BMCs) ignore, so the one pre-session request is
// rewritten to the IPMI v1.5 format ipmitool uses (IPMI 2.0 §13.14); and it
// joins host and port without brackets, so every datagram goes through our
// own dialer, which also honours the operation's context.
package ipmi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	goipmi "github.com/bougou/go-ipmi"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/internal/mutant"
)

// Provider is the name Result.Provider carries.
const Provider = "ipmi"

// Sent names the commands as ipmitool users know them.
const (
	sentOff = "chassis power off"
	sentOn  = "chassis power on"
)

// closeTimeout bounds closing the session after the operation: the BMC
// answered the operation, so it answers Close Session at once, and a
// session left open costs one of a BMC's few slots until it times out
// (commonly 60 s).
const closeTimeout = 2 * time.Second

// Busy retries (completion codes 0xC0 node busy, 0xC3 timeout in the BMC):
// the first wait and its cap, as for Redfish.
const (
	busyFirstWait = 250 * time.Millisecond
	busyMaxWait   = 2 * time.Second
)

// Client is a bmc.Controller for one IPMI target. It holds no session
// between operations, so it is safe for concurrent use.
type Client struct {
	target bmc.Target
	addr   string // host:port, IPv6 bracketed
}

var _ bmc.Controller = (*Client)(nil)

// New validates an IPMI target.
func New(target bmc.Target) (*Client, error) {
	target = target.WithDefaults()
	if err := target.Validate(); err != nil {
		return nil, err
	}
	if target.Address.Protocol != bmc.IPMI {
		return nil, fmt.Errorf("%w: %s is not an IPMI address", bmc.ErrInvalidTarget, target.Address)
	}
	for _, suite := range []int{target.IPMICipherSuite, target.IPMICipherSuiteFallback} {
		if _, ok := suites[suite]; !ok && suite != 0 {
			return nil, fmt.Errorf("%w: %s: IPMI cipher suite %d: this client speaks 3 (HMAC-SHA1, AES-CBC-128) and 17 (HMAC-SHA256, AES-CBC-128)",
				bmc.ErrInvalidTarget, target.Address, suite)
		}
	}
	if len(target.Credentials.Username) > goipmi.IPMI_MAX_USER_NAME_LENGTH {
		return nil, fmt.Errorf("%w: %s: IPMI user names hold at most %d bytes", bmc.ErrInvalidTarget, target.Address, goipmi.IPMI_MAX_USER_NAME_LENGTH)
	}
	return &Client{target: target, addr: target.Address.HostPort()}, nil
}

// Target returns the target with defaults applied.
func (c *Client) Target() bmc.Target { return c.target }

// PowerStatus reads the chassis power bit.
func (c *Client) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	var st bmc.PowerStatus
	err := c.run(ctx, bmc.OpPowerStatus, &st.Result, func(ctx context.Context, cl *goipmi.Client) error {
		res, err := cl.GetChassisStatus(ctx)
		if err != nil {
			return err
		}
		st.Raw = "Chassis Power is off"
		if res.PowerIsOn {
			st.Raw = "Chassis Power is on"
		}
		st.State = bmc.ParseIPMIPowerState(st.Raw)
		st.Trusted = bmc.PowerSource{Resource: "ipmi chassis", Why: "Get Chassis Status's power bit: IPMI has no other power to read"}
		return nil
	})
	return st, err
}

// PowerOff sends Chassis Control power down, whatever the chassis reads.
func (c *Client) PowerOff(ctx context.Context) (bmc.Result, error) {
	return c.control(ctx, bmc.OpPowerOff, goipmi.ChassisControlPowerDown, sentOff)
}

// PowerOn sends Chassis Control power up.
func (c *Client) PowerOn(ctx context.Context) (bmc.Result, error) {
	return c.control(ctx, bmc.OpPowerOn, goipmi.ChassisControlPowerUp, sentOn)
}

func (c *Client) control(ctx context.Context, op bmc.Op, ctl goipmi.ChassisControl, sent string) (bmc.Result, error) {
	var res bmc.Result
	err := c.run(ctx, op, &res, func(ctx context.Context, cl *goipmi.Client) error {
		res.Sent = sent
		wait := busyFirstWait
		for attempt := 1; ; attempt++ {
			res.Attempts = attempt
			_, err := cl.ChassisControl(ctx, ctl)
			cc, ok := completionCode(err)
			res.Reply = ""
			if ok {
				// The BMC's own words, whatever they mean to us.
				res.Reply = fmt.Sprintf("completion code %#02x (%s)", uint8(cc), cc)
			}
			if !ok || !busyCode(cc) {
				return err
			}
			if d, has := ctx.Deadline(); has && time.Until(d) < wait+busyFirstWait {
				return &busyError{fmt.Sprintf("%v: %s answered completion code %#02x (%s); still busy after %d attempts", bmc.ErrBusy, sent, uint8(cc), cc, attempt)}
			}
			if err := sleep(ctx, wait); err != nil {
				return err
			}
			wait = min(2*wait, busyMaxWait)
		}
	})
	return res, err
}

// Identity reads the system GUID (Get System GUID, not the BMC's Get Device
// GUID: the node's systemUUID is the host's SMBIOS UUID).
func (c *Client) Identity(ctx context.Context) (bmc.Identity, error) {
	var id bmc.Identity
	err := c.run(ctx, bmc.OpIdentity, &id.Result, func(ctx context.Context, cl *goipmi.Client) error {
		res, err := cl.GetSystemGUID(ctx)
		if err != nil {
			if cc, ok := completionCode(err); ok && cc == goipmi.CompletionCodeInvalidCommand {
				return fmt.Errorf("%w: the BMC does not implement Get System GUID, so it cannot prove which machine it controls", bmc.ErrUnsupported)
			}
			return err
		}
		u, err := SMBIOSUUID(res.GUID)
		if err != nil {
			return fmt.Errorf("%w: Get System GUID: %v", bmc.ErrBMC, err)
		}
		id.UUID = u
		return nil
	})
	return id, err
}

// SMBIOSUUID renders a 16-byte system GUID as SMBIOS 2.6+ does and Linux
// shows it in /sys/class/dmi/id/product_uuid (which kubelet reports as the
// node's systemUUID): the first three fields little-endian, the last two as
// they come, lower-case hex. BMCs return Get System GUID in this byte
// order, the SMBIOS table's. An all-zero or all-0xFF GUID means "not set"
// and is refused: it would match any other unset one.
func SMBIOSUUID(g [16]byte) (string, error) {
	zero, ones := true, true
	for _, b := range g {
		zero = zero && b == 0
		ones = ones && b == 0xff
	}
	if zero || ones {
		return "", errors.New("the BMC reports no system GUID (all bytes 0x00 or 0xFF)")
	}
	return fmt.Sprintf("%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		g[3], g[2], g[1], g[0], g[5], g[4], g[7], g[6],
		g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]), nil
}

// run opens a session, runs fn, closes the session; every step bounded by
// ctx and the target's timeout. Errors are classified into bmc's sentinels.
func (c *Client) run(ctx context.Context, op bmc.Op, res *bmc.Result, fn func(context.Context, *goipmi.Client) error) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.target.Timeout)
	defer cancel()
	suite, err := c.session(ctx, fn)
	res.Provider = Provider
	res.CipherSuite = suite
	res.Latency = time.Since(start)
	if res.Attempts == 0 {
		res.Attempts = 1
	}
	if err != nil {
		return c.opError(op, c.classify(ctx, err))
	}
	return nil
}

// session opens a session with the target's cipher suite, or, when the
// BMC refuses that suite and the target names a fallback, with the
// fallback; runs fn; closes the session. It returns the suite used.
func (c *Client) session(ctx context.Context, fn func(context.Context, *goipmi.Client) error) (int, error) {
	suite := c.target.IPMICipherSuite
	cl, closeSession, err := c.connect(ctx, suite)
	if err != nil && c.target.IPMICipherSuiteFallback != 0 && suiteRefused(err) && ctx.Err() == nil {
		suite = c.target.IPMICipherSuiteFallback
		cl, closeSession, err = c.connect(ctx, suite)
	}
	if err != nil {
		return 0, err
	}
	defer closeSession()
	return suite, fn(ctx, cl)
}

// connect opens a session with one cipher suite. A BMC that answers with
// weaker algorithms than the suite's is refused (downgradeError).
func (c *Client) connect(ctx context.Context, suite int) (*goipmi.Client, func(), error) {
	creds := c.target.Credentials
	cl, err := goipmi.NewClient(c.target.Address.Host, c.target.Address.Port, creds.Username, creds.Password.Reveal())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", bmc.ErrInvalidTarget, err)
	}
	d := &dialer{ctx: ctx, addr: c.addr, suite: suite}
	cl.WithUDPProxy(d)
	// A lost datagram is resent after exchangeTimeout; the context bounds
	// the total. A quarter of the operation lets a BMC that takes seconds
	// per request (ipmi_sim runs a program for each chassis request, and
	// is silent meanwhile) answer without being asked twice, and still
	// leaves room for resends.
	exchange := min(max(c.target.Timeout/4, time.Second), 5*time.Second)
	cl.WithTimeout(exchange)
	cl.WithRetry(int(c.target.Timeout/exchange) + 1)
	cl.WithCipherSuiteID(goipmi.CipherSuiteID(suite))
	cl.WithMaxPrivilegeLevel(goipmi.PrivilegeLevelAdministrator)
	if err := cl.Connect(ctx); err != nil {
		d.close()
		if derr := d.downgraded(); derr != nil {
			return nil, nil, fmt.Errorf("%w: %w", bmc.ErrUnsupported, derr)
		}
		return nil, nil, err
	}
	return cl, func() {
		// Close Session with a short context of its own: the operation's
		// may have expired, and the BMC's session slot must be freed.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer ccancel()
		_ = cl.Close(cctx)
		d.close()
	}, nil
}

// suiteRefused reports whether a failed connect means the BMC does not
// offer the cipher suite: it answered it with other algorithms, or refused
// the Open Session request.
func suiteRefused(err error) bool {
	var derr *downgradeError
	return errors.As(err, &derr) || errors.Is(err, bmc.ErrUnsupported) ||
		containsAny(err.Error(), "No Cipher Suite match", "Invalid authentication algorithm", "Invalid integrity algorithm",
			"Invalid confidentiality algorithm", "no matching cipher suite", "RMCP+ Open Session failed")
}

func (c *Client) opError(op bmc.Op, err error) error {
	return &bmc.OpError{Op: op, Protocol: bmc.IPMI, Address: c.target.Address.String(), Err: err}
}

// completionCode extracts an IPMI completion code from a go-ipmi error.
func completionCode(err error) (goipmi.CompletionCode, bool) {
	var rerr *goipmi.ResponseError
	if errors.As(err, &rerr) {
		return rerr.CompletionCode(), true
	}
	return 0, false
}

// busyCode: the BMC asks to be asked again (IPMI 2.0 table 5-2).
func busyCode(cc goipmi.CompletionCode) bool {
	return cc == goipmi.CompletionCodeNodeBusy || cc == goipmi.CompletionCodeProcessTimeout
}

// busyError is a command the BMC kept refusing as busy: both bmc.ErrBusy
// (what happened) and bmc.ErrBMC (who refused).
type busyError struct{ msg string }

func (e *busyError) Error() string { return e.msg }
func (e *busyError) Is(target error) bool {
	return target == bmc.ErrBusy || target == bmc.ErrBMC
}

// classify maps an error to one of bmc's sentinels, one line, free of
// every form of the password.
func (c *Client) classify(ctx context.Context, err error) error {
	// The text is redacted as the library wrote it, then made one line:
	// collapsing first would split a passphrase with two spaces in a row
	// (issue 17); shorten cuts only redacted text.
	msg := bmc.RedactCredentials(err.Error(), c.target.Credentials)
	if mutant.On(mutant.RedactRawFirst) {
		msg = bmc.RedactCredentials(oneLine(err.Error()), c.target.Credentials)
	}
	msg = oneLine(msg)
	for _, s := range []error{bmc.ErrAlreadyInState, bmc.ErrBusy, bmc.ErrUnsupported, bmc.ErrBMC, bmc.ErrInvalidTarget, bmc.ErrAuth} {
		if errors.Is(err, s) {
			var derr *downgradeError
			if errors.As(err, &derr) {
				n := c.target.Names
				return fmt.Errorf("%w: %v (ipmitool refuses it too); ask for the suite the BMC offers with %s, or allow one fallback suite with %s",
					bmc.ErrUnsupported, derr, n.CipherSuite, n.CipherSuiteFallback)
			}
			if msg == err.Error() {
				return err
			}
			return bmc.WithText(err, msg)
		}
	}
	if cc, ok := completionCode(err); ok {
		switch cc {
		case goipmi.CompletionCodeCannotExecuteCommandNotSupported:
			// 0xD5: "cannot execute command, not supported in present
			// state": what BMCs answer to power down on an off chassis.
			return fmt.Errorf("%w: completion code 0xd5 (%s)", bmc.ErrAlreadyInState, cc)
		case goipmi.CompletionCodeInvalidCommand, goipmi.CompletionCodeRequestDataFieldInvalid, goipmi.CompletionCodeParameterOutOfRange:
			return fmt.Errorf("%w: completion code %#02x (%s)", bmc.ErrUnsupported, uint8(cc), cc)
		case goipmi.CompletionCodeCannotExecuteCommandSecurityRestrict:
			return fmt.Errorf("%w: completion code 0xd4 (%s): the user needs the operator or administrator privilege", bmc.ErrAuth, cc)
		default:
			return fmt.Errorf("%w: completion code %#02x (%s)", bmc.ErrBMC, uint8(cc), cc)
		}
	}
	var netErr net.Error
	switch {
	case errors.Is(err, context.Canceled) && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("cancelled: %w", context.Canceled)
	case containsAny(msg, "rakp2 authcode not equal", "Unauthorized name", "Invalid name", "Invalid role",
		"Insufficient resources for role", "Invalid integrity check value", "rakp4"):
		return fmt.Errorf("%w (%s): check the username and password", bmc.ErrAuth, shorten(msg))
	case containsAny(msg, "No Cipher Suite match", "Invalid authentication algorithm", "Invalid integrity algorithm",
		"Invalid confidentiality algorithm", "no matching cipher suite", "RMCP+ Open Session failed"):
		// Open Session carries no credential: a BMC refusing it refuses
		// the algorithms asked for.
		return fmt.Errorf("%w: the BMC does not offer IPMI cipher suite %d (%s); ask for one it offers with %s, or allow one fallback suite with %s",
			bmc.ErrUnsupported, c.target.IPMICipherSuite, shorten(msg), c.target.Names.CipherSuite, c.target.Names.CipherSuiteFallback)
	case errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(msg, "connection refused"):
		return fmt.Errorf("%w: nothing answers IPMI at %s (port unreachable)", bmc.ErrUnreachable, c.addr)
	case errors.Is(err, context.DeadlineExceeded) || expired(ctx) ||
		(errors.As(err, &netErr) && netErr.Timeout()) || strings.Contains(msg, "no datagram matched") ||
		strings.Contains(msg, "no matching IPMI response"):
		return fmt.Errorf("%w: no IPMI answer from %s within %s (a wrong username looks the same on BMCs that ignore unknown users)",
			bmc.ErrTimeout, c.addr, c.target.Timeout)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return fmt.Errorf("%w: cannot resolve %s", bmc.ErrUnreachable, c.target.Address.Host)
	}
	return fmt.Errorf("%w: %s", bmc.ErrBMC, shorten(msg))
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// shorten bounds a library message quoted in an error: go-ipmi joins every
// cipher suite's failure into one long text.
func shorten(s string) string {
	const max = 300
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

func expired(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
