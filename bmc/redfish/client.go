// Package redfish implements bmc.Controller over Redfish (DSP0266) with
// net/http and encoding/json alone.
//
// It replaced bmclib's gofish provider, which could not carry the fencing
// contract: bmclib's SetPowerState sends nothing when the state already
// matches (a restart's off-dwell reads Off, so our ForceOff would never go
// out), selects systems by Name (two systems sharing one could not be
// commanded at all), and gofish v0.20.0 adds If-Match to every action POST
// (iDRAC10 answers 412), drops a 202's task monitor, and fetches the
// service root on every connection. Here:
//
//   - a system is chosen by Id (one GET of /redfish/v1/Systems/{Id}), by
//     Name only when no member has that Id, or as the only member; reads
//     and commands address the same URI;
//   - PowerOff always POSTs ComputerSystem.Reset ForceOff; "already in that
//     state" answers (iDRAC 409 PSU501, iLO 400 InvalidOperationForSystemState)
//     wrap bmc.ErrAlreadyInState, busy answers (iDRAC SYS518, 503 with
//     Retry-After, 409 ResourceInUse) are retried with backoff inside the
//     operation's timeout, a 202 is followed through its task monitor;
//   - a system that reads Off counts as Off only if its chassis, where it
//     reports power, agrees (OpenBMC derives the system's PowerState from
//     the host firmware state);
//   - one keep-alive connection is reused across operations, closed when
//     idle for 15 s (between the probe's reads, once a minute; the next
//     handshake resumes the TLS session), and once the system's URI is
//     known a power read is a single GET.
//
// Every error is a *bmc.OpError wrapping one of bmc's sentinels, one line,
// with every form of the password removed, including a BMC error body that
// echoes the login.
package redfish

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
)

// Provider is the name Result.Provider carries.
const Provider = "redfish"

// Fixed by DSP0266: the service root, the systems collection, and the
// sessions collection live at these URIs on every Redfish service.
const (
	serviceRootURI = "/redfish/v1/"
	systemsURI     = "/redfish/v1/Systems"
	chassisURI     = "/redfish/v1/Chassis"
	sessionsURI    = "/redfish/v1/SessionService/Sessions"
)

// maxBody bounds what is read of any answer: Redfish documents for one
// system are a few kilobytes; a BMC streaming more is broken.
const maxBody = 1 << 20

// logoutTimeout bounds ending a session after the operation: a BMC that
// answered the login answers a DELETE in well under a second, and an
// operation that timed out should not wait much longer than its timeout.
// A session left open costs the BMC a slot (often one of a handful) until
// it expires, commonly 30 minutes.
const logoutTimeout = 2 * time.Second

// idleConnTimeout is how long an idle keep-alive connection to a BMC is
// kept. Shorter than the probe interval (1 m): at rest each BMC is read
// once a minute, and a connection kept between probes cost the agent two
// goroutines and their buffers per BMC (some 40 KiB; a thousand BMCs, the
// largest share of its memory) and each BMC a slot of its small connection
// table, all the time. A fence reads every second or two and keeps its
// connection. The next probe's handshake resumes the TLS session
// (sessionCacheSize): no certificate to send, verify or sign for.
const idleConnTimeout = 15 * time.Second

// sessionCacheSize: TLS sessions kept per client (per target): one server,
// a spare for a session ticket the BMC rotates.
const sessionCacheSize = 2

// readAttempts bounds how often an idempotent read is tried within one
// operation's deadline. A second try absorbs one dropped connection or a
// 5xx from a busy BMC; more would only hide a sick BMC from the engine,
// which has its own backoff.
const readAttempts = 2

// Client is a bmc.Controller for one Redfish target. It is safe for
// concurrent use. It keeps one HTTP transport (so a keep-alive connection
// is reused between operations) and what it learnt about the system's
// URIs; it keeps no session between operations.
type Client struct {
	target bmc.Target
	base   string // scheme://host:port
	hc     *http.Client

	// now stamps what the client learns (the age of a bound identity);
	// time.Now, a fake in tests.
	now func() time.Time

	mu    sync.Mutex
	cache resolved // guarded by mu
}

var _ bmc.Controller = (*Client)(nil)

// New validates a Redfish target and prepares its transport.
func New(target bmc.Target) (*Client, error) {
	target = target.WithDefaults()
	if err := target.Validate(); err != nil {
		return nil, err
	}
	if target.Address.Protocol != bmc.Redfish {
		return nil, fmt.Errorf("%w: %s is not a Redfish address", bmc.ErrInvalidTarget, target.Address)
	}
	tr := &http.Transport{
		// BMCs sit on a management network; an egress proxy from the
		// environment would be the wrong path to them.
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: target.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: target.Timeout,
		// One connection is what a BMC expects from one client; several
		// would compete for its small connection table.
		MaxIdleConnsPerHost: 1,
		// Kept through a fence, closed between probes (idleConnTimeout). A
		// BMC that closed it first costs nothing: the transport retries an
		// idempotent GET on a new connection when a reused one turns out
		// closed.
		IdleConnTimeout:   idleConnTimeout,
		ForceAttemptHTTP2: false,
	}
	if target.Address.Scheme == "https" {
		cfg, err := tlsConfig(target)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = cfg
	}
	return &Client{
		target: target,
		base:   target.Address.Scheme + "://" + target.Address.HostPort(),
		// Every request carries the operation's context; the client-wide
		// timeout is a backstop for a context without a deadline.
		hc:  &http.Client{Transport: tr, Timeout: target.Timeout, CheckRedirect: sameOrigin(target.Address)},
		now: time.Now,
	}, nil
}

// maxRedirects bounds a chain of redirects: sushy-tools answers a system's
// Name with one 307 to its Id; a longer chain is a loop.
const maxRedirects = 3

// sameOrigin is the redirect rule of every Redfish client here (the
// operations' and the event stream's):
//
//   - only a GET (or HEAD) is followed. A command is never redirected: for
//     a 301, 302 or 303 net/http would turn a POST into a GET of the new
//     location, whose 2xx would read as the BMC's acceptance of a
//     ForceOff it never took; for a 307 or 308 it would POST the command
//     again to another resource (another system's Reset), one whose
//     identity nobody checked. The redirect answer itself is returned to
//     the caller as an error.
//   - a GET is followed only to the target's own scheme, host and port
//     (sushy-tools answers GET /redfish/v1/Systems/<Name> with 307 to the
//     system's Id): a redirect to any other origin would hand our
//     credentials, Basic or session token, to a host we did not choose.
//
// What a redirected GET returns must be the resource redirected to (see
// checkRedirected).
func sameOrigin(ep bmc.Endpoint) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		first := via[0]
		if first.Method != http.MethodGet && first.Method != http.MethodHead {
			status := "a redirect"
			if req.Response != nil {
				status = fmt.Sprintf("HTTP %d", req.Response.StatusCode)
			}
			return fmt.Errorf("%w: %s %s was answered %s to %s: a command is never redirected (the BMC did not take it here, and it must not reach another resource), so it was not sent again",
				bmc.ErrBMC, first.Method, first.URL.Path, status, req.URL.Redacted())
		}
		u := req.URL
		port := u.Port()
		if port == "" {
			switch strings.ToLower(u.Scheme) {
			case "https":
				port = "443"
			case "http":
				port = "80"
			}
		}
		if !strings.EqualFold(u.Scheme, ep.Scheme) || !strings.EqualFold(u.Hostname(), ep.Host) || port != fmt.Sprint(ep.Port) {
			return fmt.Errorf("%w: the BMC redirected to %s, another origin than %s: not followed (it would receive the credentials)",
				bmc.ErrBMC, u.Redacted(), ep)
		}
		if len(via) > maxRedirects {
			return fmt.Errorf("%w: the BMC redirected %d times (last to %s): not followed further", bmc.ErrBMC, len(via), u.Redacted())
		}
		return nil
	}
}

// checkRedirected refuses the answer to a redirected GET unless it is the
// resource redirected to: its @odata.id must be the path the BMC sent us
// to. A redirect to the front page, a login page or another system would
// otherwise be read as the resource asked for.
func checkRedirected(method, path string, resp *response) error {
	if resp.finalPath == "" || !resp.ok() {
		return nil
	}
	var doc struct {
		ODataID string `json:"@odata.id"`
	}
	_ = json.Unmarshal(resp.body, &doc)
	if doc.ODataID == "" || !samePath(doc.ODataID, resp.finalPath) {
		return fmt.Errorf("%w: %s %s was redirected to %s, which answered a resource whose @odata.id is %q: not the resource redirected to, so not read",
			bmc.ErrBMC, method, path, resp.finalPath, truncateText(doc.ODataID, 120))
	}
	return nil
}

// Target returns the target with defaults applied.
func (c *Client) Target() bmc.Target { return c.target }

// CloseIdleConnections closes the kept-alive connection, if any.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// DisableSessionResumption makes every new connection a full TLS
// handshake (a benchmark's baseline).
func (c *Client) DisableSessionResumption() {
	if tr, ok := c.hc.Transport.(*http.Transport); ok && tr.TLSClientConfig != nil {
		tr.TLSClientConfig.ClientSessionCache = nil
	}
}

func tlsConfig(t bmc.Target) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(sessionCacheSize), CurvePreferences: ClassicalCurves()}
	switch {
	case t.InsecureSkipVerify:
		cfg.InsecureSkipVerify = true //nolint:gosec // explicit operator choice, validated by Target
	case len(t.CACertificates) > 0:
		pool, err := sharedPool(t.CACertificates)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", bmc.ErrInvalidTarget, t.Address, err)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// ClassicalCurves are the key exchanges offered to a BMC or PDU: X25519,
// then the NIST curves. Go's default puts the X25519MLKEM768 hybrid first,
// whose 1.2 KB key share and ML-KEM key generation every handshake pays
// (the identity probe resumes a session once a minute per node, and a
// TLS 1.3 resumption still computes a fresh key share): it showed in the
// agent's CPU profile at 300 nodes. BMC TLS stacks (iDRAC, iLO, OpenBMC's
// bmcweb, XCC) negotiate X25519 or P-256; a post-quantum exchange protects
// recorded traffic against a future decryption, and a BMC's power
// commands are not secrets that outlive a fence.
func ClassicalCurves() []tls.CurveID {
	return []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384}
}

// maxSharedPools bounds the pools kept by sharedPool: a configuration
// names few distinct CA bundles; past the bound (bundles rotated many
// times in one process's life) a bundle gets its own pool, as before.
const maxSharedPools = 64

var (
	poolsMu sync.Mutex
	pools   = map[[sha256.Size]byte]*x509.CertPool{}
)

// sharedPool returns one parsed pool per distinct CA bundle: every BMC
// behind the same CA (a whole fleet, typically) verifies against the same
// read-only pool instead of parsing the bundle once per client (and once
// more per event stream). A CertPool is only read after this returns.
func sharedPool(pem []byte) (*x509.CertPool, error) {
	key := sha256.Sum256(pem)
	poolsMu.Lock()
	defer poolsMu.Unlock()
	if p, ok := pools[key]; ok {
		return p, nil
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		return nil, errors.New("the CA bundle holds no PEM certificate")
	}
	if len(pools) < maxSharedPools {
		pools[key] = p
	}
	return p, nil
}

// conn is one operation's view of the BMC: its context, its
// authentication, and how many requests it made.
type conn struct {
	c        *Client
	ctx      context.Context
	token    string // X-Auth-Token of the operation's session; "" with Basic auth
	location string // the session's URI, for the logout
	requests int
}

// onlyPath keeps the path and query of a URI a BMC handed us (a Location,
// an @odata.id), which may be absolute: requests go to the target's own
// address only, so credentials never reach a host we did not choose.
func onlyPath(uri string) string {
	if !strings.Contains(uri, "://") {
		return uri
	}
	u, err := url.Parse(uri)
	if err != nil {
		return uri
	}
	return u.RequestURI()
}

// response is a whole HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
	// finalPath is the path a GET was redirected to; "" when it was not.
	finalPath string
}

func (r *response) ok() bool { return r.status >= 200 && r.status < 300 }

// request sends one request and reads the whole answer. A non-2xx status is
// not an error here: callers decide what it means.
func (cn *conn) request(method, path string, body any, idempotent bool) (*response, error) {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(cn.ctx, method, cn.c.base+onlyPath(path), rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("OData-Version", "4.0")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idempotent && method == http.MethodPost {
		// A power command may go out on a kept-alive connection the BMC
		// closed meanwhile. Marking it idempotent lets net/http resend it
		// on a fresh connection when the old one failed before any answer;
		// sending ForceOff or On twice is harmless. The nil value sends no
		// header.
		req.Header["Idempotency-Key"] = nil
	}
	switch {
	case cn.token != "":
		req.Header.Set("X-Auth-Token", cn.token)
	case !strings.HasSuffix(path, sessionsURI) || method != http.MethodPost:
		req.SetBasicAuth(cn.c.target.Credentials.Username, cn.c.target.Credentials.Password.Reveal())
	}
	cn.requests++
	resp, err := cn.c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, err
	}
	out := &response{status: resp.StatusCode, header: resp.Header, body: b}
	if resp.Request != nil && resp.Request.URL.Path != req.URL.Path {
		out.finalPath = resp.Request.URL.Path
	}
	return out, nil
}

// get fetches path and decodes a 2xx answer into v; any other answer is an
// *httpError.
func (cn *conn) get(path string, v any) error {
	resp, err := cn.request(http.MethodGet, path, nil, true)
	if err != nil {
		return err
	}
	if !resp.ok() {
		return newHTTPError(http.MethodGet, path, resp, cn.c.target.Credentials)
	}
	if err := checkRedirected(http.MethodGet, path, resp); err != nil {
		return err
	}
	if err := json.Unmarshal(resp.body, v); err != nil {
		return fmt.Errorf("%w: GET %s: the answer is not a Redfish JSON document: %v", bmc.ErrBMC, path, err)
	}
	return nil
}

// login opens a session for the operation (POST to the sessions
// collection, whose URI DSP0266 fixes).
func (cn *conn) login() error {
	creds := cn.c.target.Credentials
	resp, err := cn.request(http.MethodPost, sessionsURI, map[string]string{
		"UserName": creds.Username,
		"Password": creds.Password.Reveal(),
	}, false)
	if err != nil {
		return err
	}
	if !resp.ok() {
		herr := newHTTPError(http.MethodPost, sessionsURI, resp, cn.c.target.Credentials)
		switch resp.status {
		case http.StatusUnauthorized, http.StatusNotFound, http.StatusMethodNotAllowed:
			// A refused login may mean there is no SessionService at all;
			// the service root, which needs no login, says whether there is.
			if !cn.hasSessionService() {
				return fmt.Errorf("%w: the BMC has no Redfish SessionService (its service root names none; the login answered HTTP %d): use basic authentication (%s)",
					bmc.ErrUnsupported, resp.status, authSetting(cn.c.target.Names, bmc.AuthBasic))
			}
		}
		return herr
	}
	cn.token = resp.header.Get("X-Auth-Token")
	cn.location = resp.header.Get("Location")
	if cn.token == "" {
		return fmt.Errorf("%w: the BMC's login answer (HTTP %d) carries no X-Auth-Token", bmc.ErrBMC, resp.status)
	}
	if cn.location == "" {
		var doc struct {
			ODataID string `json:"@odata.id"`
		}
		if json.Unmarshal(resp.body, &doc) == nil {
			cn.location = doc.ODataID
		}
	}
	return nil
}

// hasSessionService reports whether the service root links a
// SessionService (true when that cannot be read: no claim is made then).
func (cn *conn) hasSessionService() bool {
	resp, err := cn.request(http.MethodGet, serviceRootURI, nil, true)
	if err != nil || !resp.ok() {
		return true
	}
	var root struct {
		SessionService *link `json:"SessionService"`
		Links          struct {
			Sessions *link `json:"Sessions"`
		} `json:"Links"`
	}
	if json.Unmarshal(resp.body, &root) != nil {
		return true
	}
	return root.SessionService != nil || root.Links.Sessions != nil
}

// logout ends the operation's session with a short context of its own: the
// operation's may have expired, and the slot must be freed anyway.
func (cn *conn) logout() {
	if cn.token == "" || cn.location == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(cn.ctx), logoutTimeout)
	defer cancel()
	saved := cn.ctx
	cn.ctx = ctx
	resp, err := cn.request(http.MethodDelete, cn.location, nil, true)
	cn.ctx = saved
	_ = resp
	_ = err // nothing more can be done; the BMC expires the session eventually
	cn.token = ""
}

// run executes one operation: a context bounded by the target's timeout, a
// session if the target asks for one, and fn. Errors are classified and
// wrapped in a *bmc.OpError.
func (c *Client) run(ctx context.Context, op bmc.Op, res *bmc.Result, fn func(*conn) error) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.target.Timeout)
	defer cancel()
	cn := &conn{c: c, ctx: ctx}
	err := func() error {
		if c.target.Auth == bmc.AuthSession {
			if err := cn.login(); err != nil {
				return err
			}
			defer cn.logout()
		}
		return fn(cn)
	}()
	res.Provider = Provider
	res.Latency = time.Since(start)
	if res.Attempts == 0 {
		res.Attempts = 1
	}
	if err != nil {
		return c.opError(op, c.classify(ctx, err))
	}
	return nil
}

func (c *Client) opError(op bmc.Op, err error) error {
	return &bmc.OpError{
		Op:       op,
		Protocol: bmc.Redfish,
		Address:  c.target.Address.String(),
		System:   c.target.System,
		Err:      err,
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
