// Package redfishpdu is a pdu.Outlet over Redfish PowerDistribution
// (DSP0268 2019.4 and later): a RackPDU under /redfish/v1/PowerEquipment,
// its Outlets, Outlet.PowerState, Outlet.PowerWatts and the
// Outlet.PowerControl action. net/http and encoding/json only.
package redfishpdu

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/pdu"
)

// Protocol names this client in errors and results.
const Protocol = "redfish"

// Target is one outlet of a Redfish PDU.
type Target struct {
	// Device is the PDU's Redfish service: address, credentials (HTTP
	// Basic; from the same Secret keys as a BMC's: username, password),
	// CA bundle or explicit insecure, timeout. Its System must be empty.
	Device bmc.Target
	// PDU is the RackPDU's Id; empty means the only one.
	PDU string
	// Outlet is the outlet's Id, else its Name. Required.
	Outlet string
}

// Client is a pdu.Outlet for one Redfish outlet. Safe for concurrent use.
type Client struct {
	t    Target
	base string
	hc   *http.Client

	mu        sync.Mutex
	pduURI    string
	outletURI string
}

var _ pdu.Outlet = (*Client)(nil)

// New validates the target and prepares its transport.
func New(t Target) (*Client, error) {
	d := t.Device.WithDefaults()
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", pdu.ErrInvalid, err)
	}
	switch {
	case d.Address.Protocol != bmc.Redfish:
		return nil, fmt.Errorf("%w: %s is not a Redfish (http or https) address", pdu.ErrInvalid, d.Address)
	case d.System != "":
		return nil, fmt.Errorf("%w: %s: a PDU has no system selection; name the outlet (and the PDU) instead", pdu.ErrInvalid, d.Address)
	case d.Auth != bmc.AuthBasic:
		return nil, fmt.Errorf("%w: %s: only HTTP Basic authentication is implemented for PDUs", pdu.ErrInvalid, d.Address)
	case strings.TrimSpace(t.Outlet) == "":
		return nil, fmt.Errorf("%w: %s: outlet is empty: give its Id (or Name)", pdu.ErrInvalid, d.Address)
	}
	t.Device = d
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: d.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: d.Timeout,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     90 * time.Second,
	}
	if d.Address.Scheme == "https" {
		// X25519 and the NIST curves, not Go's default hybrid
		// X25519MLKEM768 first: a cheaper handshake, and what PDU TLS
		// stacks negotiate anyway (bmc/redfish.ClassicalCurves says why).
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384}}
		switch {
		case d.InsecureSkipVerify:
			cfg.InsecureSkipVerify = true //nolint:gosec // explicit operator choice, validated by bmc.Target
		case len(d.CACertificates) > 0:
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(d.CACertificates) {
				return nil, fmt.Errorf("%w: %s: the CA bundle holds no PEM certificate", pdu.ErrInvalid, d.Address)
			}
			cfg.RootCAs = pool
		}
		tr.TLSClientConfig = cfg
	}
	return &Client{
		t:    t,
		base: d.Address.Scheme + "://" + d.Address.HostPort(),
		hc: &http.Client{Transport: tr, Timeout: d.Timeout, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			return fmt.Errorf("the PDU redirected to %s: redirects are not followed", req.URL.Redacted())
		}},
	}, nil
}

type link struct {
	ODataID string `json:"@odata.id"`
}

type outletDoc struct {
	ODataID    string   `json:"@odata.id"`
	ID         string   `json:"Id"`
	Name       string   `json:"Name"`
	PowerState *string  `json:"PowerState"`
	PowerWatts *sensor  `json:"PowerWatts"`
	Actions    *actions `json:"Actions"`
}

type sensor struct {
	Reading *float64 `json:"Reading"`
}

type actions struct {
	PowerControl *struct {
		Target string `json:"target"`
	} `json:"#Outlet.PowerControl"`
}

// httpError is a non-2xx answer.
type httpError struct {
	method, path string
	status       int
	ids          []string
	message      string
}

func (e *httpError) Error() string {
	s := fmt.Sprintf("%s %s: HTTP %d", e.method, e.path, e.status)
	if len(e.ids) > 0 {
		s += " " + strings.Join(e.ids, ", ")
	}
	if e.message != "" {
		s += ": " + e.message
	}
	return s
}

func (c *Client) do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	if strings.Contains(path, "://") {
		if u, err := url.Parse(path); err == nil {
			path = u.RequestURI() // only ever our own address
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("OData-Version", "4.0")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.SetBasicAuth(c.t.Device.Credentials.Username, c.t.Device.Credentials.Password.Reveal())
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &httpError{method: method, path: path, status: resp.StatusCode}
		var eb struct {
			Error struct {
				Code     string `json:"code"`
				Message  string `json:"message"`
				Extended []struct {
					MessageID string `json:"MessageId"`
					Message   string `json:"Message"`
				} `json:"@Message.ExtendedInfo"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &eb) == nil {
			if eb.Error.Code != "" {
				e.ids = append(e.ids, eb.Error.Code)
			}
			for _, x := range eb.Error.Extended {
				if x.MessageID != "" && x.MessageID != eb.Error.Code {
					e.ids = append(e.ids, x.MessageID)
				}
			}
			// Redacted as the PDU wrote it, then one line, then cut
			// (issue 17: cutting or collapsing first leaves pieces of
			// the password).
			e.message = pdu.Words(eb.Error.Message, 300, c.t.Device.Credentials)
		}
		return e
	}
	if out == nil || len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: %s %s: not a Redfish JSON document: %v", pdu.ErrDevice, method, path, err)
	}
	return nil
}

// run bounds one operation by the timeout and turns its error into a
// redacted *pdu.OpError.
func (c *Client) run(ctx context.Context, op bmc.Op, res *bmc.Result, fn func(ctx context.Context) error) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.t.Device.Timeout)
	defer cancel()
	err := fn(ctx)
	res.Provider, res.Latency = "redfish-pdu", time.Since(start)
	if res.Attempts == 0 {
		res.Attempts = 1
	}
	if err == nil {
		return nil
	}
	return &pdu.OpError{Op: op, Protocol: Protocol, Address: c.t.Device.Address.String(), Outlet: c.t.Outlet, Err: c.classify(ctx, err)}
}

func (c *Client) classify(ctx context.Context, err error) error {
	msg := pdu.Words(err.Error(), 0, c.t.Device.Credentials)
	var herr *httpError
	var netErr net.Error
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var verifyErr *tls.CertificateVerificationError
	for _, s := range []error{pdu.ErrNoSuchOutlet, pdu.ErrUnsupported, pdu.ErrDevice, pdu.ErrAlreadyInState} {
		if errors.Is(err, s) { // already worded: keep the sentinel, redact the rest
			return fmt.Errorf("%w: %s", s, strings.TrimPrefix(msg, s.Error()+": "))
		}
	}
	switch {
	case errors.As(err, &herr):
		switch {
		case herr.status == http.StatusUnauthorized || herr.status == http.StatusForbidden:
			return fmt.Errorf("%w (%s): check the username and password", pdu.ErrAuth, msg)
		case herr.status == http.StatusNotFound:
			return fmt.Errorf("%w: %s", pdu.ErrNoSuchOutlet, msg)
		case herr.status == http.StatusServiceUnavailable:
			return fmt.Errorf("%w: %s", pdu.ErrBusy, msg)
		case herr.status == http.StatusMethodNotAllowed || herr.status == http.StatusNotImplemented:
			return fmt.Errorf("%w: %s", pdu.ErrUnsupported, msg)
		}
		return fmt.Errorf("%w: %s", pdu.ErrDevice, msg)
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || (errors.As(err, &netErr) && netErr.Timeout()):
		return fmt.Errorf("%w: no answer within %s", pdu.ErrTimeout, c.t.Device.Timeout)
	case errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &verifyErr):
		return fmt.Errorf("%w: %s", pdu.ErrTLS, msg)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF):
		return fmt.Errorf("%w: %s", pdu.ErrUnreachable, msg)
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return fmt.Errorf("%w: %s", pdu.ErrUnreachable, msg)
	}
	return fmt.Errorf("%w: %s", pdu.ErrDevice, msg)
}

// resolve finds the PDU and the outlet: by Id, else by Name; it refuses to
// guess (several PDUs and none named, a Name shared by two outlets).
func (c *Client) resolve(ctx context.Context) (pduURI, outletURI string, err error) {
	c.mu.Lock()
	pduURI, outletURI = c.pduURI, c.outletURI
	c.mu.Unlock()
	if outletURI != "" {
		return pduURI, outletURI, nil
	}
	var coll struct {
		Members []link `json:"Members"`
	}
	if err := c.do(ctx, http.MethodGet, "/redfish/v1/PowerEquipment/RackPDUs", nil, &coll); err != nil {
		return "", "", err
	}
	switch {
	case c.t.PDU != "":
		for _, m := range coll.Members {
			if lastSegment(m.ODataID) == c.t.PDU {
				pduURI = m.ODataID
			}
		}
		if pduURI == "" {
			return "", "", fmt.Errorf("%w: no RackPDU %q (the service lists %d)", pdu.ErrNoSuchOutlet, c.t.PDU, len(coll.Members))
		}
	case len(coll.Members) == 1:
		pduURI = coll.Members[0].ODataID
	default:
		return "", "", fmt.Errorf("%w: the service lists %d RackPDUs: name one", pdu.ErrNoSuchOutlet, len(coll.Members))
	}
	var p struct {
		Outlets *link `json:"Outlets"`
	}
	if err := c.do(ctx, http.MethodGet, pduURI, nil, &p); err != nil {
		return "", "", err
	}
	if p.Outlets == nil {
		return "", "", fmt.Errorf("%w: %s links no Outlets", pdu.ErrUnsupported, pduURI)
	}
	var outlets struct {
		Members []link `json:"Members"`
	}
	if err := c.do(ctx, http.MethodGet, p.Outlets.ODataID, nil, &outlets); err != nil {
		return "", "", err
	}
	var named []string
	for _, m := range outlets.Members {
		if lastSegment(m.ODataID) == c.t.Outlet {
			outletURI = m.ODataID
			break
		}
	}
	if outletURI == "" {
		for _, m := range outlets.Members {
			var o outletDoc
			if err := c.do(ctx, http.MethodGet, m.ODataID, nil, &o); err != nil {
				return "", "", err
			}
			if o.ID == c.t.Outlet {
				outletURI = m.ODataID
				break
			}
			if o.Name == c.t.Outlet {
				named = append(named, m.ODataID)
			}
		}
	}
	if outletURI == "" {
		switch len(named) {
		case 1:
			outletURI = named[0]
		case 0:
			return "", "", fmt.Errorf("%w: %s has no outlet with Id or Name %q", pdu.ErrNoSuchOutlet, pduURI, c.t.Outlet)
		default:
			return "", "", fmt.Errorf("%w: %d outlets of %s are named %q: use the Id", pdu.ErrNoSuchOutlet, len(named), pduURI, c.t.Outlet)
		}
	}
	c.mu.Lock()
	c.pduURI, c.outletURI = pduURI, outletURI
	c.mu.Unlock()
	return pduURI, outletURI, nil
}

func lastSegment(uri string) string {
	uri = strings.TrimRight(uri, "/")
	return uri[strings.LastIndexByte(uri, '/')+1:]
}

func (c *Client) outlet(ctx context.Context) (*outletDoc, error) {
	_, uri, err := c.resolve(ctx)
	if err != nil {
		return nil, err
	}
	var o outletDoc
	if err := c.do(ctx, http.MethodGet, uri, nil, &o); err != nil {
		var herr *httpError
		if errors.As(err, &herr) && herr.status == http.StatusNotFound {
			c.mu.Lock()
			c.pduURI, c.outletURI = "", "" // the PDU was reconfigured: resolve again next time
			c.mu.Unlock()
		}
		return nil, err
	}
	return &o, nil
}

// PowerStatus reads Outlet.PowerState; exactly "On" or "Off" count.
func (c *Client) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	var st bmc.PowerStatus
	err := c.run(ctx, bmc.OpPowerStatus, &st.Result, func(ctx context.Context) error {
		o, err := c.outlet(ctx)
		if err != nil {
			return err
		}
		if o.PowerState != nil {
			st.Raw = *o.PowerState
		}
		st.State = bmc.ParseRedfishPowerState(st.Raw)
		return nil
	})
	return st, err
}

// PowerOff POSTs Outlet.PowerControl {"PowerState":"Off"}, whatever the
// outlet reads.
func (c *Client) PowerOff(ctx context.Context) (bmc.Result, error) {
	return c.control(ctx, bmc.OpPowerOff, "Off")
}

// PowerOn POSTs Outlet.PowerControl {"PowerState":"On"}.
func (c *Client) PowerOn(ctx context.Context) (bmc.Result, error) {
	return c.control(ctx, bmc.OpPowerOn, "On")
}

func (c *Client) control(ctx context.Context, op bmc.Op, state string) (bmc.Result, error) {
	var res bmc.Result
	err := c.run(ctx, op, &res, func(ctx context.Context) error {
		o, err := c.outlet(ctx)
		if err != nil {
			return err
		}
		target := o.ODataID + "/Actions/Outlet.PowerControl"
		if o.Actions != nil && o.Actions.PowerControl != nil && o.Actions.PowerControl.Target != "" {
			target = o.Actions.PowerControl.Target
		}
		res.Attempts = 1
		// Named before the round trip: a command that timed out may have
		// reached the PDU and landed, and the caller must know it was sent.
		res.Sent = "Outlet.PowerControl " + state
		err = c.do(ctx, http.MethodPost, target, map[string]string{"PowerState": state}, nil)
		var herr *httpError
		if errors.As(err, &herr) && already(herr) {
			return fmt.Errorf("%w (%s)", pdu.ErrAlreadyInState, pdu.Redact(herr.Error(), c.t.Device.Credentials))
		}
		return err
	})
	return res, err
}

// already: a 409, or a message saying the outlet is in that state: the PDU
// did nothing.
func already(e *httpError) bool {
	if e.status == http.StatusConflict {
		return true
	}
	for _, id := range e.ids {
		if strings.HasSuffix(id, "ResourceInStandby") || strings.HasSuffix(id, "InvalidOperationForSystemState") {
			return true
		}
	}
	return false
}

// Metering reads Outlet.PowerWatts.Reading.
func (c *Client) Metering(ctx context.Context) (pdu.Reading, error) {
	var r pdu.Reading
	err := c.run(ctx, pdu.OpMetering, &r.Result, func(ctx context.Context) error {
		o, err := c.outlet(ctx)
		if err != nil {
			return err
		}
		if o.PowerWatts == nil || o.PowerWatts.Reading == nil {
			return fmt.Errorf("%w: outlet %s reports no PowerWatts.Reading", pdu.ErrUnsupported, o.ODataID)
		}
		r.Watts = *o.PowerWatts.Reading
		r.Raw = "PowerWatts.Reading=" + strconv.FormatFloat(r.Watts, 'f', -1, 64)
		return nil
	})
	return r, err
}

// OutletIdentity reads the RackPDU's identity and the outlet's Id and Name.
func (c *Client) OutletIdentity(ctx context.Context) (pdu.Identity, error) {
	id := pdu.Identity{Device: c.t.Device.Address.String()}
	err := c.run(ctx, bmc.OpIdentity, &id.Result, func(ctx context.Context) error {
		o, err := c.outlet(ctx)
		if err != nil {
			return err
		}
		var p struct {
			Manufacturer string `json:"Manufacturer"`
			Model        string `json:"Model"`
			SerialNumber string `json:"SerialNumber"`
			UUID         string `json:"UUID"`
		}
		c.mu.Lock()
		pduURI := c.pduURI
		c.mu.Unlock()
		if err := c.do(ctx, http.MethodGet, pduURI, nil, &p); err != nil {
			return err
		}
		id.Manufacturer, id.Model, id.SerialNumber, id.UUID = p.Manufacturer, p.Model, p.SerialNumber, p.UUID
		id.OutletID, id.OutletName = o.ID, o.Name
		return nil
	})
	return id, err
}
