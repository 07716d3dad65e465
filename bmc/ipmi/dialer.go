package ipmi

import (
	"context"
	"fmt"
	"net"
	"sync"
)

// dialer is the proxy.Dialer go-ipmi sends its datagrams through. It dials
// the target's own host:port (go-ipmi would join an IPv6 host without
// brackets), with the operation's context, and remembers the socket so the
// operation closes it even when go-ipmi's Close gives up early (it skips
// closing the socket when Close Session fails).
type dialer struct {
	ctx  context.Context
	addr string
	// suite is the cipher suite asked for: the BMC's Open Session
	// Response must name exactly its algorithms.
	suite int

	mu        sync.Mutex
	conns     []net.Conn
	downgrade error // set when the BMC answered with other algorithms
}

// Dial ignores go-ipmi's address (see dialer).
func (d *dialer) Dial(_, _ string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(d.ctx, "udp", d.addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.conns = append(d.conns, c)
	d.mu.Unlock()
	return &preSessionV15{Conn: c, d: d}, nil
}

// downgraded returns the error that stopped a session whose algorithms
// were not the ones asked for, or nil.
func (d *dialer) downgraded() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.downgrade
}

func (d *dialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		_ = c.Close()
	}
	d.conns = nil
}

// preSessionV15 rewrites the pre-session IPMI requests go-ipmi sends in the
// RMCP+ (IPMI v2.0) format into the IPMI v1.5 session format. Before a
// session exists, the only IPMI messages a remote console sends are Get
// Channel Authentication Capabilities (and Get Channel Cipher Suites), and
// IPMI 2.0 §13.14/§22.13 has consoles send them in the v1.5 format, with
// the "IPMI v2.0+ extended data" bit set; ipmitool does, and OpenIPMI's
// ipmi_sim answers nothing else. Everything else (Open Session, RAKP, and
// all in-session traffic) passes through untouched; answers in either
// format are parsed by go-ipmi.
type preSessionV15 struct {
	net.Conn
	d *dialer
}

// Read passes every answer through, except an RMCP+ Open Session Response
// whose algorithms are not exactly those of the suite asked for: go-ipmi
// takes whatever the BMC negotiates (pyghmi's BMC answers a request for
// suite 17 with suite 3's SHA-1 algorithms), which would silently turn a
// request for HMAC-SHA256 into HMAC-SHA1. ipmitool refuses such an answer
// ("Authentication algorithm 0x01 is not what we requested 0x03"); so do
// we, and the session is never opened.
func (c *preSessionV15) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil || c.d == nil {
		return n, err
	}
	if derr := checkNegotiated(b[:n], c.d.suite); derr != nil {
		c.d.mu.Lock()
		c.d.downgrade = derr
		c.d.mu.Unlock()
		return 0, derr
	}
	return n, nil
}

// Algorithms of the suites this client speaks (IPMI 2.0 table 22-20).
type suiteAlgorithms struct{ auth, integrity, crypt byte }

var suites = map[int]suiteAlgorithms{
	3:  {auth: 0x01, integrity: 0x01, crypt: 0x01}, // RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128
	17: {auth: 0x03, integrity: 0x04, crypt: 0x01}, // RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128
}

var algNames = map[string]map[byte]string{
	"authentication":  {0x00: "RAKP-none", 0x01: "RAKP-HMAC-SHA1", 0x02: "RAKP-HMAC-MD5", 0x03: "RAKP-HMAC-SHA256"},
	"integrity":       {0x00: "none", 0x01: "HMAC-SHA1-96", 0x02: "HMAC-MD5-128", 0x03: "MD5-128", 0x04: "HMAC-SHA256-128"},
	"confidentiality": {0x00: "none", 0x01: "AES-CBC-128", 0x02: "xRC4-128", 0x03: "xRC4-40"},
}

// payloadOpenSessionResponse is the RMCP+ payload type of an Open Session
// Response (IPMI 2.0 table 13-16).
const payloadOpenSessionResponse = 0x11

// checkNegotiated returns an error wrapping errDowngrade when b is an
// RMCP+ Open Session Response that accepted the session with algorithms
// other than suite's.
func checkNegotiated(b []byte, suite int) error {
	want, ok := suites[suite]
	if !ok || len(b) < v20HeaderLen || b[3] != rmcpClassIPMI || b[4] != authTypeRMCPPlus || b[5]&0x3f != payloadOpenSessionResponse {
		return nil
	}
	p := b[v20HeaderLen:]
	// tag, status, privilege, reserved, console session ID (4), BMC
	// session ID (4), then three 8-byte algorithm payloads, the algorithm
	// at offset 4 of each.
	if len(p) < 36 || p[1] != 0 {
		return nil // a refusal or a short answer: go-ipmi reports it
	}
	got := suiteAlgorithms{auth: p[16], integrity: p[24], crypt: p[32]}
	for _, a := range []struct {
		kind      string
		got, want byte
	}{{"authentication", got.auth, want.auth}, {"integrity", got.integrity, want.integrity}, {"confidentiality", got.crypt, want.crypt}} {
		if a.got != a.want {
			return &downgradeError{suite: suite, kind: a.kind, got: a.got, want: a.want}
		}
	}
	return nil
}

// downgradeError is a BMC that answered a request for one cipher suite
// with another's algorithms.
type downgradeError struct {
	suite     int
	kind      string
	got, want byte
}

func (e *downgradeError) Error() string {
	name := func(b byte) string {
		if n, ok := algNames[e.kind][b]; ok {
			return fmt.Sprintf("%#02x (%s)", b, n)
		}
		return fmt.Sprintf("%#02x", b)
	}
	return fmt.Sprintf("asked for IPMI cipher suite %d, the BMC answered with %s algorithm %s, not %s: it does not offer suite %d, and a weaker session than asked for is refused",
		e.suite, e.kind, name(e.got), name(e.want), e.suite)
}

// Offsets in an RMCP+ packet: RMCP header (4 bytes), then auth type (0x06),
// payload type, session ID (4), session sequence (4), payload length (2,
// little-endian), payload.
const (
	rmcpHeaderLen    = 4
	rmcpClassIPMI    = 0x07
	authTypeRMCPPlus = 0x06
	v20HeaderLen     = rmcpHeaderLen + 1 + 1 + 4 + 4 + 2
)

func (c *preSessionV15) Write(b []byte) (int, error) {
	if out, ok := toV15(b); ok {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// toV15 returns b in the v1.5 format if it is a pre-session (session ID 0)
// RMCP+ packet carrying a plain IPMI payload (payload type 0, neither
// encrypted nor authenticated).
func toV15(b []byte) ([]byte, bool) {
	if len(b) < v20HeaderLen || b[3] != rmcpClassIPMI || b[4] != authTypeRMCPPlus || b[5] != 0 {
		return nil, false
	}
	for _, x := range b[6:14] { // session ID and sequence
		if x != 0 {
			return nil, false
		}
	}
	n := int(b[14]) | int(b[15])<<8
	if len(b) != v20HeaderLen+n || n > 255 {
		return nil, false
	}
	// v1.5: RMCP header, auth type 0 (none), sequence (4), session ID (4),
	// payload length (1), payload.
	out := make([]byte, 0, rmcpHeaderLen+10+n)
	out = append(out, b[:rmcpHeaderLen]...)
	out = append(out, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(n))
	out = append(out, b[v20HeaderLen:]...)
	return out, true
}
