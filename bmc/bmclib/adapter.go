// Package bmclib implements bmc.Controller over bmclib v2: Redfish through
// its gofish provider and IPMI through its ipmitool provider, with gofish used
// directly for what bmclib does not expose.
//
// Every operation builds its own bmclib client (and HTTP transport), restricts
// the client's registry to exactly one provider for good, and sets the
// per-provider timeout: without it bmclib silently drops the restriction and
// falls through to other providers (see docs/bmc-notes.md). TLS is verified unless the
// target says otherwise; the password reaches only an HTTP header or ipmitool's
// environment.
package bmclib

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	bmclibv2 "github.com/bmc-toolbox/bmclib/v2"
	"github.com/go-logr/logr"
	"github.com/stmcginnis/gofish"

	"github.com/bmcfence/bmcfence/bmc"
)

// Provider names as bmclib registers them.
const (
	providerGofish   = "gofish"
	providerIpmitool = "ipmitool"
)

// readAttempts bounds how often an idempotent read is tried within one
// operation's deadline. A second try absorbs one dropped connection or a 5xx
// from a busy BMC; more would only hide a sick BMC from the engine, which has
// its own backoff.
const readAttempts = 2

// Adapter is a bmc.Controller for one target. It holds no connection: each
// call connects, acts and disconnects, so an Adapter is safe for concurrent
// use and never keeps a BMC session slot.
type Adapter struct {
	target   bmc.Target
	tls      *tls.Config // nil for plain http and IPMI
	ipmitool string      // absolute path, IPMI only
}

var _ bmc.Controller = (*Adapter)(nil)

// New validates the target and prepares what every operation needs.
func New(target bmc.Target) (*Adapter, error) {
	target = target.WithDefaults()
	if err := target.Validate(); err != nil {
		return nil, err
	}
	a := &Adapter{target: target}
	switch target.Address.Scheme {
	case "https":
		cfg, err := tlsConfig(target)
		if err != nil {
			return nil, err
		}
		a.tls = cfg
	case "ipmi":
		path, err := exec.LookPath("ipmitool")
		if err != nil {
			return nil, fmt.Errorf("%w: ipmitool not found on PATH (Debian/Ubuntu: apt-get install ipmitool)", bmc.ErrUnsupported)
		}
		a.ipmitool = path
	}
	return a, nil
}

// Target returns the target with defaults applied.
func (a *Adapter) Target() bmc.Target { return a.target }

func tlsConfig(t bmc.Target) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case t.InsecureSkipVerify:
		cfg.InsecureSkipVerify = true //nolint:gosec // explicit operator choice, validated by Target
	case len(t.CACertificates) > 0:
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(t.CACertificates) {
			return nil, fmt.Errorf("%w: %s: the CA bundle holds no PEM certificate", bmc.ErrInvalidTarget, t.Address)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// PowerStatus reads the power state (and BootProgress over Redfish).
func (a *Adapter) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	var status bmc.PowerStatus
	err := a.do(ctx, bmc.OpPowerStatus, &status.Result, func(ctx context.Context) (string, error) {
		if a.target.Address.Protocol == bmc.IPMI {
			raw, err := a.ipmiPowerStatus(ctx)
			status.Raw, status.State = raw, bmc.ParseIPMIPowerState(raw)
			return providerIpmitool, err
		}
		return providerGofish, a.withRedfish(ctx, func(s *redfishSession) error {
			sys, err := s.system(a.target.System)
			if err != nil {
				return err
			}
			status.Raw = string(sys.PowerState)
			status.State = bmc.ParseRedfishPowerState(status.Raw)
			status.BootProgress = string(sys.BootProgress.LastState)
			return nil
		})
	})
	return status, err
}

// PowerOff sends a hard power-off: Redfish ForceOff, IPMI `chassis power
// off`. Never a cycle or reset, which can leave the machine on.
func (a *Adapter) PowerOff(ctx context.Context) (bmc.Result, error) {
	return a.setPower(ctx, bmc.OpPowerOff, "off", "ForceOff")
}

// PowerOn sends a power-on: Redfish On, IPMI `chassis power on`.
func (a *Adapter) PowerOn(ctx context.Context) (bmc.Result, error) {
	return a.setPower(ctx, bmc.OpPowerOn, "on", "On")
}

// Identity reads what identifies the machine. IPMI has no identity bmclib can
// read portably, so it reports ErrUnsupported and callers skip the check.
func (a *Adapter) Identity(ctx context.Context) (bmc.Identity, error) {
	var id bmc.Identity
	if a.target.Address.Protocol == bmc.IPMI {
		return id, a.opError(bmc.OpIdentity, fmt.Errorf("%w: IPMI targets have no system identity to compare", bmc.ErrUnsupported))
	}
	err := a.do(ctx, bmc.OpIdentity, &id.Result, func(ctx context.Context) (string, error) {
		return providerGofish, a.withRedfish(ctx, func(s *redfishSession) error {
			sys, err := s.system(a.target.System)
			if err != nil {
				return err
			}
			id.SystemID, id.SystemName, id.UUID = sys.ID, sys.Name, sys.UUID
			id.SerialNumber, id.Manufacturer, id.Model = sys.SerialNumber, sys.Manufacturer, sys.Model
			for _, rt := range sys.SupportedResetTypes {
				id.AllowedResets = append(id.AllowedResets, string(rt))
			}
			return nil
		})
	})
	return id, err
}

// setPower sends a power command through bmclib. bmclib answers ok without
// sending anything when the state already matches, and ok from a BMC that
// ignores the command; callers must read back.
func (a *Adapter) setPower(ctx context.Context, op bmc.Op, bmclibState, resetType string) (bmc.Result, error) {
	var res bmc.Result
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, a.target.Timeout)
	defer cancel()

	var err error
	if a.target.Address.Protocol == bmc.IPMI {
		res.Provider, res.Attempts = providerIpmitool, 1
		err = a.bmclibSetPower(ctx, a.newIPMIClient(), bmclibState)
	} else {
		res.Provider, res.Attempts = providerGofish, 1
		err = a.redfishSetPower(ctx, bmclibState, resetType)
	}
	res.Latency = time.Since(start)
	if err != nil {
		return res, a.opError(op, a.classify(ctx, err, res.Latency))
	}
	return res, nil
}

// redfishSetPower resolves the system with gofish, then acts through bmclib.
// bmclib selects a system only by Name and takes the first match, so the
// resolution step insists the Name is unique before anything is sent: a
// duplicate name could power off the wrong machine.
func (a *Adapter) redfishSetPower(ctx context.Context, bmclibState, resetType string) error {
	var name string
	err := a.withRedfish(ctx, func(s *redfishSession) error {
		sys, err := s.system(a.target.System)
		if err != nil {
			return err
		}
		if err := s.requireUniqueName(sys); err != nil {
			return err
		}
		if !resetAllowed(sys.SupportedResetTypes, resetType) {
			return fmt.Errorf("%w: system %q does not allow ResetType %s (allowed: %v)", bmc.ErrUnsupported, sys.ID, resetType, sys.SupportedResetTypes)
		}
		name = sys.Name
		return nil
	})
	if err != nil {
		return err
	}
	return a.bmclibSetPower(ctx, a.newRedfishClient(ctx, name), bmclibState)
}

func (a *Adapter) bmclibSetPower(ctx context.Context, cl *bmclibv2.Client, state string) error {
	if a.target.Address.Protocol == bmc.Redfish {
		if err := cl.Open(ctx); err != nil {
			return err
		}
		defer closeQuietly(cl)
	}
	ok, err := cl.SetPowerState(ctx, state)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s refused power %s", bmc.ErrBMC, cl.GetMetadata().SuccessfulProvider, state)
	}
	return nil
}

// ipmiPowerStatus reads `chassis power status` through bmclib. The client is
// not Opened: for ipmitool Open only runs the same status command, which would
// double the cost of every read.
func (a *Adapter) ipmiPowerStatus(ctx context.Context) (string, error) {
	return a.newIPMIClient().GetPowerState(ctx)
}

// newRedfishClient builds a one-operation bmclib client restricted to gofish.
// The HTTP client goes in through WithHTTPClient: bmclib v2.3.5 builds the
// gofish provider from its top-level client and ignores
// WithRedfishHTTPClient, so that is the only way our TLS settings (and the
// operation's deadline, see newHTTPClient) take effect.
func (a *Adapter) newRedfishClient(ctx context.Context, systemName string) *bmclibv2.Client {
	ep := a.target.Address
	deadline, _ := ctx.Deadline()
	cl := bmclibv2.NewClient(ep.Scheme+"://"+bracketHost(ep.Host), a.target.Credentials.Username, a.target.Credentials.Password.Reveal(),
		bmclibv2.WithLogger(logr.Discard()),
		bmclibv2.WithHTTPClient(a.newHTTPClient(deadline)),
		bmclibv2.WithRedfishPort(strconv.Itoa(ep.Port)),
		bmclibv2.WithRedfishUseBasicAuth(a.target.Auth == bmc.AuthBasic),
		bmclibv2.WithRedfishSystemName(systemName),
		bmclibv2.WithPerProviderTimeout(a.target.Timeout),
	)
	cl.Registry.Drivers = cl.Registry.For(providerGofish)
	return cl
}

// newIPMIClient builds a one-operation bmclib client restricted to ipmitool,
// with the cipher suite pinned so bmclib does not retry with suite 17 and
// mask the real error. The password travels in IPMITOOL_PASSWORD.
func (a *Adapter) newIPMIClient() *bmclibv2.Client {
	ep := a.target.Address
	cl := bmclibv2.NewClient(ep.Host, a.target.Credentials.Username, a.target.Credentials.Password.Reveal(),
		bmclibv2.WithLogger(logr.Discard()),
		bmclibv2.WithIpmitoolPath(a.ipmitool),
		bmclibv2.WithIpmitoolPort(strconv.Itoa(ep.Port)),
		bmclibv2.WithIpmitoolCipherSuite(strconv.Itoa(a.target.IPMICipherSuite)),
		bmclibv2.WithPerProviderTimeout(a.target.Timeout),
	)
	cl.Registry.Drivers = cl.Registry.For(providerIpmitool)
	return cl
}

// newHTTPClient returns a fresh client per operation: bmclib overwrites the
// client's Timeout from the context, so sharing one would race.
//
// The client enforces the operation's deadline (zero: none) by itself,
// because bmclib's gofish client sends its requests without our context: each
// is bounded only by an http.Client timeout bmclib sets per request, so a BMC
// slow on every answer stretched one power command to several timeouts.
// Every connection expires at the deadline (gofish opens one per request).
// Once the deadline has passed, only a DELETE may still go out: the logout
// that frees the BMC's session slot, on a connection that lives
// logoutTimeout. bmclib requires an *http.Transport (it clones it), so the
// transport's own hooks carry this rather than a wrapping RoundTripper.
func (a *Adapter) newHTTPClient(deadline time.Time) *http.Client {
	dialer := &net.Dialer{Timeout: a.target.Timeout}
	tr := &http.Transport{
		Proxy: func(req *http.Request) (*url.URL, error) {
			if !deadline.IsZero() && req.Method != http.MethodDelete && !time.Now().Before(deadline) {
				return nil, fmt.Errorf("%s %s after the operation's deadline: %w", req.Method, req.URL.Path, context.DeadlineExceeded)
			}
			// BMCs sit on a management network; an egress proxy from the
			// environment would be the wrong path to them.
			return nil, nil
		},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil || deadline.IsZero() {
				return conn, err
			}
			expires := deadline
			if now := time.Now(); !now.Before(deadline) {
				expires = now.Add(logoutTimeout)
			}
			if err := conn.SetDeadline(expires); err != nil {
				_ = conn.Close()
				return nil, err
			}
			return conn, nil
		},
		TLSClientConfig:     a.tls.Clone(),
		TLSHandshakeTimeout: a.target.Timeout,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     a.target.Timeout,
	}
	return &http.Client{Transport: tr, Timeout: a.target.Timeout}
}

// do runs an idempotent read with the operation timeout, retrying once on a
// transient failure, and fills res.
func (a *Adapter) do(ctx context.Context, op bmc.Op, res *bmc.Result, read func(context.Context) (string, error)) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, a.target.Timeout)
	defer cancel()
	var err error
	for res.Attempts = 1; ; res.Attempts++ {
		attempt := time.Now()
		res.Provider, err = read(ctx)
		if err == nil {
			break
		}
		err = a.classify(ctx, err, time.Since(attempt))
		if res.Attempts >= readAttempts || !transient(err) || ctx.Err() != nil {
			break
		}
	}
	res.Latency = time.Since(start)
	if err != nil {
		return a.opError(op, err)
	}
	return nil
}

func transient(err error) bool {
	return errors.Is(err, bmc.ErrBMC) || errors.Is(err, bmc.ErrUnreachable)
}

func (a *Adapter) opError(op bmc.Op, err error) error {
	return &bmc.OpError{
		Op:       op,
		Protocol: a.target.Address.Protocol,
		Address:  a.target.Address.String(),
		System:   a.target.System,
		Err:      err,
	}
}

// withRedfish opens one gofish connection for the duration of fn.
func (a *Adapter) withRedfish(ctx context.Context, fn func(*redfishSession) error) error {
	ep := a.target.Address
	deadline, _ := ctx.Deadline()
	client, err := gofish.ConnectContext(ctx, gofish.ClientConfig{
		Endpoint:   ep.Scheme + "://" + ep.HostPort(),
		Username:   a.target.Credentials.Username,
		Password:   a.target.Credentials.Password.Reveal(),
		BasicAuth:  a.target.Auth == bmc.AuthBasic,
		HTTPClient: a.newHTTPClient(deadline),
	})
	if err != nil {
		return err
	}
	defer a.logout(ctx, client)
	return fn(&redfishSession{client: client})
}

// logoutTimeout bounds ending a session after the operation: a BMC that
// answered the login answers a DELETE in well under a second, and an
// operation that timed out should not wait much longer than its timeout.
const logoutTimeout = 2 * time.Second

// logout ends client's session, if it has one (Basic auth has none). gofish's
// own Logout sends the DELETE with the context the client was connected with,
// which has expired when the operation timed out: the session would stay open
// until the BMC expires it (often 30 minutes), and a BMC whose small session
// table fills up refuses every later login, fencing included. So the DELETE
// gets a short context of its own.
func (a *Adapter) logout(ctx context.Context, client *gofish.APIClient) {
	defer client.HTTPClient.CloseIdleConnections()
	session, err := client.GetSession()
	if err != nil {
		return // no session: Basic auth
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), logoutTimeout)
	defer cancel()
	ep := a.target.Address
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, ep.Scheme+"://"+ep.HostPort()+session.ID, http.NoBody)
	if err != nil {
		return
	}
	req.Header.Set("X-Auth-Token", session.Token)
	resp, err := client.HTTPClient.Do(req)
	if err != nil {
		return
	}
	_ = resp.Body.Close()
}

func closeQuietly(cl *bmclibv2.Client) {
	// Close gets its own short context: the operation's may have expired,
	// and a session left open costs the BMC a slot.
	ctx, cancel := context.WithTimeout(context.Background(), logoutTimeout)
	defer cancel()
	_ = cl.Close(ctx)
}

func bracketHost(h string) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}
