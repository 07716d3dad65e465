// Package snmppdu is a pdu.Outlet for APC switched PDUs over SNMP (v1,
// v2c, v3 with USM), with github.com/gosnmp/gosnmp, from the APC
// PowerNet-MIB:
//
//	rPDU (AP79xx, AP89xx "rPDU" tables; what fence_apc_snmp uses for them)
//	  status  rPDUOutletStatusOutletState     .1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.N   1 on, 2 off
//	  control rPDUOutletControlOutletCommand  .1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.N   1 immediateOn, 2 immediateOff
//	  name    rPDUOutletStatusOutletName      .1.3.6.1.4.1.318.1.1.12.3.5.1.1.2.N
//	MasterSwitch (sPDU; the oldest, answered by every APC PDU)
//	  status and control sPDUOutletCtl        .1.3.6.1.4.1.318.1.1.4.4.2.1.3.N      1 outletOn, 2 outletOff
//	  name    sPDUOutletCtlName               .1.3.6.1.4.1.318.1.1.4.4.2.1.4.N
//	metering (metered-by-outlet models)
//	  rPDU2OutletMeteredStatusPower            .1.3.6.1.4.1.318.1.1.26.9.4.3.1.7.N   watts
//	identity rPDUIdentModelNumber .12.1.5.0, rPDUIdentSerialNumber .12.1.6.0
//
// The MIB flavour is chosen from sysObjectID (as fence_apc_snmp does) or
// given. An SNMP SET answered noError is the PDU's acceptance; SNMP has no
// "already off" answer, so every accepted off must still be read back.
//
// Credentials come from the same Secret as a BMC's (CredentialsFromSecret)
// and never reach a log: gosnmp's logger stays off, and every error is
// redacted. v1 and v2c send the community in clear text and authenticate
// nothing: a write community is a risky setting (Target.RiskySettings).
package snmppdu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gosnmp/gosnmp"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/pdu"
)

// Protocol names this client in errors and results.
const Protocol = "snmp"

// Version is the SNMP version.
type Version string

const (
	V1  Version = "1"
	V2c Version = "2c"
	V3  Version = "3"
)

// MIB is the PowerNet-MIB table family the PDU answers.
type MIB string

const (
	// MIBAuto reads sysObjectID and picks rPDU for switched rack PDUs
	// (.1.3.6.1.4.1.318.1.3.4.5), MasterSwitch otherwise.
	MIBAuto         MIB = ""
	MIBRackPDU      MIB = "rpdu"
	MIBMasterSwitch MIB = "masterswitch"
)

// Target is one outlet of an SNMP PDU.
type Target struct {
	// Host and Port (default 161) of the PDU's agent.
	Host string
	Port int
	// Outlet is the 1-based outlet number.
	Outlet  int
	Version Version
	// Community for v1 and v2c; it must allow writes to switch.
	Community bmc.Secret
	// User, AuthProtocol (MD5, SHA, SHA224, SHA256, SHA384, SHA512) with
	// AuthPassword, PrivProtocol (DES, AES, AES192, AES256) with
	// PrivPassword: SNMPv3 USM. No AuthProtocol means noAuthNoPriv; no
	// PrivProtocol authNoPriv.
	User         string
	AuthProtocol string
	AuthPassword bmc.Secret
	PrivProtocol string
	PrivPassword bmc.Secret
	MIB          MIB
	// Timeout bounds one operation (all retries); default 10 s.
	Timeout time.Duration
	// Retries of one request within it; default 1.
	Retries int
}

// DefaultTimeout bounds one operation: an SNMP agent answers in
// milliseconds, a busy PDU card in a second or two; ten seconds (as for a
// BMC) tolerates two lost datagrams without stalling a fence.
const DefaultTimeout = 10 * time.Second

var authProtocols = map[string]gosnmp.SnmpV3AuthProtocol{
	"MD5": gosnmp.MD5, "SHA": gosnmp.SHA, "SHA224": gosnmp.SHA224, "SHA256": gosnmp.SHA256,
	"SHA384": gosnmp.SHA384, "SHA512": gosnmp.SHA512,
}

var privProtocols = map[string]gosnmp.SnmpV3PrivProtocol{
	"DES": gosnmp.DES, "AES": gosnmp.AES, "AES192": gosnmp.AES192, "AES256": gosnmp.AES256,
}

// Validate names the first field that cannot work.
func (t Target) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: snmp %s: %s", pdu.ErrInvalid, net.JoinHostPort(t.Host, strconv.Itoa(t.port())), fmt.Sprintf(format, args...))
	}
	switch {
	case t.Host == "":
		return fmt.Errorf("%w: snmp: host is empty", pdu.ErrInvalid)
	case t.Port < 0 || t.Port > 65535:
		return bad("port %d: want 1-65535", t.Port)
	case t.Outlet < 1:
		return bad("outlet %d: want the 1-based outlet number", t.Outlet)
	case t.Timeout < 0:
		return bad("timeout %s is negative", t.Timeout)
	}
	switch t.MIB {
	case MIBAuto, MIBRackPDU, MIBMasterSwitch:
	default:
		return bad("mib %q: want rpdu, masterswitch or empty (from sysObjectID)", t.MIB)
	}
	switch t.Version {
	case V1, V2c:
		if t.Community.IsEmpty() {
			return bad("SNMP v%s needs a community (Secret key community)", t.Version)
		}
		if t.User != "" || !t.AuthPassword.IsEmpty() || !t.PrivPassword.IsEmpty() {
			return bad("a v3 user and passwords are given for SNMP v%s: choose one version", t.Version)
		}
	case V3:
		if t.User == "" {
			return bad("SNMP v3 needs a user (Secret key username)")
		}
		if !t.Community.IsEmpty() {
			return bad("a community is given for SNMP v3: remove it")
		}
		if t.AuthProtocol != "" {
			if _, ok := authProtocols[strings.ToUpper(t.AuthProtocol)]; !ok {
				return bad("authProtocol %q: want MD5, SHA, SHA224, SHA256, SHA384 or SHA512", t.AuthProtocol)
			}
			if len(t.AuthPassword) < 8 {
				return bad("the v3 auth password must have at least 8 characters (RFC 3414)")
			}
		}
		if t.PrivProtocol != "" {
			if t.AuthProtocol == "" {
				return bad("privacy needs authentication: set authProtocol too")
			}
			if _, ok := privProtocols[strings.ToUpper(t.PrivProtocol)]; !ok {
				return bad("privProtocol %q: want DES, AES, AES192 or AES256", t.PrivProtocol)
			}
			if len(t.PrivPassword) < 8 {
				return bad("the v3 privacy password must have at least 8 characters (RFC 3414)")
			}
		}
	default:
		return bad("version %q: want 1, 2c or 3", t.Version)
	}
	return nil
}

func (t Target) port() int {
	if t.Port == 0 {
		return 161
	}
	return t.Port
}

// Address is "snmp://host:port".
func (t Target) Address() string { return "snmp://" + net.JoinHostPort(t.Host, strconv.Itoa(t.port())) }

// RiskySettings lists what an operator should be told (a log line and a
// metric): SNMP v1 and v2c put a write community on the wire in clear
// text, and anyone who reads it can switch every outlet of the PDU; v3
// without privacy sends the commands in clear.
func (t Target) RiskySettings() []string {
	var out []string
	switch t.Version {
	case V1, V2c:
		out = append(out, fmt.Sprintf("SNMP v%s write community for %s: sent in clear text and authenticating nothing; whoever reads it can switch every outlet (use SNMPv3 with authPriv)", t.Version, t.Address()))
	case V3:
		if t.AuthProtocol == "" {
			out = append(out, fmt.Sprintf("SNMPv3 without authentication for %s (noAuthNoPriv): anyone can send it commands", t.Address()))
		} else if t.PrivProtocol == "" {
			out = append(out, fmt.Sprintf("SNMPv3 without privacy for %s (authNoPriv): commands travel in clear text", t.Address()))
		}
	}
	return out
}

// CredentialsFromSecret fills t's credentials from a Secret's data, the
// same Secret mechanism BMCs use: v1/v2c read key community (else
// password); v3 keys username, password (the auth passphrase) and
// privPassword. Values are trimmed of a trailing newline; missing keys
// are named.
func CredentialsFromSecret(t Target, data map[string][]byte) (Target, error) {
	get := func(k string) string { return strings.TrimRight(string(data[k]), "\r\n") }
	switch t.Version {
	case V1, V2c:
		c := get("community")
		if c == "" {
			c = get("password")
		}
		if c == "" {
			return t, fmt.Errorf("%w: the credentials Secret needs key community (or password) for SNMP v%s", pdu.ErrInvalid, t.Version)
		}
		t.Community = bmc.Secret(c)
	case V3:
		t.User = strings.TrimSpace(get("username"))
		if t.User == "" {
			return t, fmt.Errorf("%w: the credentials Secret needs key username for SNMPv3", pdu.ErrInvalid)
		}
		t.AuthPassword = bmc.Secret(get("password"))
		t.PrivPassword = bmc.Secret(get("privPassword"))
		if t.AuthProtocol != "" && t.AuthPassword.IsEmpty() {
			return t, fmt.Errorf("%w: the credentials Secret needs key password for SNMPv3 authentication", pdu.ErrInvalid)
		}
		if t.PrivProtocol != "" && t.PrivPassword.IsEmpty() {
			return t, fmt.Errorf("%w: the credentials Secret needs key privPassword for SNMPv3 privacy", pdu.ErrInvalid)
		}
	default:
		return t, fmt.Errorf("%w: version %q: want 1, 2c or 3", pdu.ErrInvalid, t.Version)
	}
	return t, nil
}

// OIDs.
const (
	oidSysObjectID    = ".1.3.6.1.2.1.1.2.0"
	rackPDUObjectID   = ".1.3.6.1.4.1.318.1.3.4.5"
	oidRPDUStatus     = ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.4."
	oidRPDUControl    = ".1.3.6.1.4.1.318.1.1.12.3.3.1.1.4."
	oidRPDUName       = ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.2."
	oidSPDUCtl        = ".1.3.6.1.4.1.318.1.1.4.4.2.1.3."
	oidSPDUName       = ".1.3.6.1.4.1.318.1.1.4.4.2.1.4."
	oidMeteredPower   = ".1.3.6.1.4.1.318.1.1.26.9.4.3.1.7."
	oidIdentModel     = ".1.3.6.1.4.1.318.1.1.12.1.5.0"
	oidIdentSerial    = ".1.3.6.1.4.1.318.1.1.12.1.6.0"
	valueOn, valueOff = 1, 2
)

// Client is a pdu.Outlet for one SNMP outlet. Safe for concurrent use:
// each operation opens its own socket.
type Client struct {
	t Target

	mu  sync.Mutex
	mib MIB // resolved
}

var _ pdu.Outlet = (*Client)(nil)

// New validates the target.
func New(t Target) (*Client, error) {
	t.AuthProtocol, t.PrivProtocol = strings.ToUpper(t.AuthProtocol), strings.ToUpper(t.PrivProtocol)
	if t.Timeout == 0 {
		t.Timeout = DefaultTimeout
	}
	if t.Retries == 0 {
		t.Retries = 1
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &Client{t: t, mib: t.MIB}, nil
}

// session opens a gosnmp session bounded by ctx.
func (c *Client) session(ctx context.Context) (*gosnmp.GoSNMP, error) {
	t := c.t
	g := &gosnmp.GoSNMP{
		Target:  t.Host,
		Port:    uint16(t.port()),
		Context: ctx,
		// Each try gets an even share of the operation's time.
		Timeout: t.Timeout / time.Duration(t.Retries+1),
		Retries: t.Retries,
		MaxOids: gosnmp.MaxOids,
	}
	switch t.Version {
	case V1:
		g.Version, g.Community = gosnmp.Version1, t.Community.Reveal()
	case V2c:
		g.Version, g.Community = gosnmp.Version2c, t.Community.Reveal()
	case V3:
		g.Version, g.SecurityModel = gosnmp.Version3, gosnmp.UserSecurityModel
		usm := &gosnmp.UsmSecurityParameters{UserName: t.User}
		g.MsgFlags = gosnmp.NoAuthNoPriv
		if t.AuthProtocol != "" {
			g.MsgFlags = gosnmp.AuthNoPriv
			usm.AuthenticationProtocol, usm.AuthenticationPassphrase = authProtocols[t.AuthProtocol], t.AuthPassword.Reveal()
		}
		if t.PrivProtocol != "" {
			g.MsgFlags = gosnmp.AuthPriv
			usm.PrivacyProtocol, usm.PrivacyPassphrase = privProtocols[t.PrivProtocol], t.PrivPassword.Reveal()
		}
		g.SecurityParameters = usm
	}
	if err := g.Connect(); err != nil {
		return nil, err
	}
	return g, nil
}

// run bounds one operation and turns its error into a redacted
// *pdu.OpError.
func (c *Client) run(ctx context.Context, op bmc.Op, res *bmc.Result, fn func(g *gosnmp.GoSNMP) error) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.t.Timeout)
	defer cancel()
	err := func() error {
		g, err := c.session(ctx)
		if err != nil {
			return err
		}
		defer g.Conn.Close()
		return fn(g)
	}()
	res.Provider, res.Latency = "snmp", time.Since(start)
	if res.Attempts == 0 {
		res.Attempts = 1
	}
	if err == nil {
		return nil
	}
	return &pdu.OpError{Op: op, Protocol: Protocol, Address: c.t.Address(), Outlet: strconv.Itoa(c.t.Outlet), Err: c.classify(ctx, err)}
}

// snmpError is an error-status in a response.
type snmpError struct {
	status gosnmp.SNMPError
	oid    string
}

func (e *snmpError) Error() string {
	return fmt.Sprintf("the agent answered %s for %s", e.status, e.oid)
}

func (c *Client) classify(ctx context.Context, err error) error {
	msg := pdu.Words(err.Error(), 0, bmc.Credentials{Password: c.t.Community}, c.t.AuthPassword, c.t.PrivPassword)
	for _, s := range []error{pdu.ErrNoSuchOutlet, pdu.ErrUnsupported, pdu.ErrDevice} {
		if errors.Is(err, s) {
			return fmt.Errorf("%w: %s", s, strings.TrimPrefix(msg, s.Error()+": "))
		}
	}
	var se *snmpError
	if errors.As(err, &se) {
		switch se.status {
		case gosnmp.NoAccess, gosnmp.AuthorizationError, gosnmp.ReadOnly:
			return fmt.Errorf("%w (%s): the community or user may not write: give one with write access", pdu.ErrAuth, msg)
		case gosnmp.NotWritable, gosnmp.NoCreation, gosnmp.NoSuchName:
			return fmt.Errorf("%w (%s): a read-only community, or the PDU does not have this MIB (try the other mib)", pdu.ErrUnsupported, msg)
		case gosnmp.ResourceUnavailable, gosnmp.CommitFailed:
			return fmt.Errorf("%w: %s", pdu.ErrBusy, msg)
		}
		return fmt.Errorf("%w: %s", pdu.ErrDevice, msg)
	}
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "authentic") || strings.Contains(low, "unknown user") || strings.Contains(low, "wrong digest") ||
		strings.Contains(low, "decryption"):
		return fmt.Errorf("%w (%s): check the v3 user and passwords", pdu.ErrAuth, msg)
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || strings.Contains(low, "timeout") || strings.Contains(low, "request timeout"):
		hint := ""
		if c.t.Version != V3 {
			hint = " (an agent drops a request with a wrong community without a word)"
		}
		return fmt.Errorf("%w: no answer within %s%s", pdu.ErrTimeout, c.t.Timeout, hint)
	case strings.Contains(low, "refused") || strings.Contains(low, "no route") || strings.Contains(low, "unreachable"):
		return fmt.Errorf("%w: %s", pdu.ErrUnreachable, msg)
	}
	return fmt.Errorf("%w: %s", pdu.ErrDevice, msg)
}

// get reads one integer or string OID.
func get(g *gosnmp.GoSNMP, oid string) (gosnmp.SnmpPDU, error) {
	r, err := g.Get([]string{oid})
	if err != nil {
		return gosnmp.SnmpPDU{}, err
	}
	if r.Error != gosnmp.NoError {
		return gosnmp.SnmpPDU{}, &snmpError{status: r.Error, oid: oid}
	}
	if len(r.Variables) != 1 {
		return gosnmp.SnmpPDU{}, fmt.Errorf("%w: GET %s answered %d variables", pdu.ErrDevice, oid, len(r.Variables))
	}
	v := r.Variables[0]
	switch v.Type {
	case gosnmp.NoSuchObject, gosnmp.NoSuchInstance, gosnmp.EndOfMibView, gosnmp.Null:
		return v, fmt.Errorf("%w: %s is not there (%s)", pdu.ErrNoSuchOutlet, oid, v.Type)
	}
	return v, nil
}

// mibOf resolves the MIB flavour once, from sysObjectID.
func (c *Client) mibOf(g *gosnmp.GoSNMP) (MIB, error) {
	c.mu.Lock()
	m := c.mib
	c.mu.Unlock()
	if m != MIBAuto {
		return m, nil
	}
	v, err := get(g, oidSysObjectID)
	if err != nil {
		return "", err
	}
	m = MIBMasterSwitch
	if s, ok := v.Value.(string); ok && "."+strings.TrimPrefix(s, ".") == rackPDUObjectID {
		m = MIBRackPDU
	}
	c.mu.Lock()
	c.mib = m
	c.mu.Unlock()
	return m, nil
}

func (c *Client) statusOID(m MIB) string {
	if m == MIBRackPDU {
		return oidRPDUStatus + strconv.Itoa(c.t.Outlet)
	}
	return oidSPDUCtl + strconv.Itoa(c.t.Outlet)
}

func (c *Client) controlOID(m MIB) string {
	if m == MIBRackPDU {
		return oidRPDUControl + strconv.Itoa(c.t.Outlet)
	}
	return oidSPDUCtl + strconv.Itoa(c.t.Outlet)
}

// PowerStatus reads the outlet's state: exactly 1 is On, 2 Off; anything
// else (a reboot in progress, a delayed command) is Unknown.
func (c *Client) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	var st bmc.PowerStatus
	err := c.run(ctx, bmc.OpPowerStatus, &st.Result, func(g *gosnmp.GoSNMP) error {
		m, err := c.mibOf(g)
		if err != nil {
			return err
		}
		oid := c.statusOID(m)
		v, err := get(g, oid)
		if err != nil {
			return err
		}
		n, ok := asInt(v)
		st.Raw = fmt.Sprintf("%s=%v", oid, v.Value)
		switch {
		case ok && n == valueOn:
			st.State = bmc.PowerOn
		case ok && n == valueOff:
			st.State = bmc.PowerOff
		default:
			st.State = bmc.PowerUnknown
		}
		return nil
	})
	return st, err
}

func asInt(v gosnmp.SnmpPDU) (int64, bool) {
	if v.Type != gosnmp.Integer {
		return 0, false
	}
	return gosnmp.ToBigInt(v.Value).Int64(), true
}

// PowerOff SETs the outlet's command to off (rPDU immediateOff, sPDU
// outletOff), whatever it reads.
func (c *Client) PowerOff(ctx context.Context) (bmc.Result, error) {
	return c.set(ctx, bmc.OpPowerOff, valueOff)
}

// PowerOn SETs it to on (immediateOn, outletOn).
func (c *Client) PowerOn(ctx context.Context) (bmc.Result, error) {
	return c.set(ctx, bmc.OpPowerOn, valueOn)
}

func (c *Client) set(ctx context.Context, op bmc.Op, value int) (bmc.Result, error) {
	var res bmc.Result
	err := c.run(ctx, op, &res, func(g *gosnmp.GoSNMP) error {
		m, err := c.mibOf(g)
		if err != nil {
			return err
		}
		oid := c.controlOID(m)
		// Named before the round trip: a SET that timed out may have
		// reached the PDU and landed, and the caller must know it was sent.
		res.Sent = fmt.Sprintf("SET %s = %d", oid, value)
		r, err := g.Set([]gosnmp.SnmpPDU{{Name: oid, Type: gosnmp.Integer, Value: value}})
		if err != nil {
			return err
		}
		if r.Error != gosnmp.NoError {
			return &snmpError{status: r.Error, oid: oid}
		}
		return nil
	})
	return res, err
}

// Metering reads rPDU2OutletMeteredStatusPower (watts), for PDUs metered
// by outlet; ErrUnsupported where there is none.
func (c *Client) Metering(ctx context.Context) (pdu.Reading, error) {
	var r pdu.Reading
	err := c.run(ctx, pdu.OpMetering, &r.Result, func(g *gosnmp.GoSNMP) error {
		oid := oidMeteredPower + strconv.Itoa(c.t.Outlet)
		v, err := get(g, oid)
		if errors.Is(err, pdu.ErrNoSuchOutlet) {
			return fmt.Errorf("%w: the PDU does not meter its outlets (%s is not there)", pdu.ErrUnsupported, oid)
		}
		if err != nil {
			return err
		}
		n, ok := asInt(v)
		if !ok {
			return fmt.Errorf("%w: %s is %s, not an integer", pdu.ErrDevice, oid, v.Type)
		}
		r.Watts, r.Raw = float64(n), fmt.Sprintf("%s=%d", oid, n)
		return nil
	})
	return r, err
}

// OutletIdentity reads the PDU's model and serial number and the outlet's
// name.
func (c *Client) OutletIdentity(ctx context.Context) (pdu.Identity, error) {
	id := pdu.Identity{Device: c.t.Address(), OutletID: strconv.Itoa(c.t.Outlet), Manufacturer: "APC"}
	err := c.run(ctx, bmc.OpIdentity, &id.Result, func(g *gosnmp.GoSNMP) error {
		m, err := c.mibOf(g)
		if err != nil {
			return err
		}
		nameOID := oidSPDUName
		if m == MIBRackPDU {
			nameOID = oidRPDUName
		}
		for oid, dst := range map[string]*string{oidIdentModel: &id.Model, oidIdentSerial: &id.SerialNumber, nameOID + id.OutletID: &id.OutletName} {
			v, err := get(g, oid)
			if errors.Is(err, pdu.ErrNoSuchOutlet) && oid != nameOID+id.OutletID {
				continue // an old card without rPDUIdent
			}
			if err != nil {
				return err
			}
			if b, ok := v.Value.([]byte); ok {
				*dst = string(b)
			}
		}
		return nil
	})
	return id, err
}
