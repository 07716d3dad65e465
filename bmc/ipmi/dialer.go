package ipmi

import (
	"context"
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

	mu    sync.Mutex
	conns []net.Conn
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
	return &preSessionV15{Conn: c}, nil
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
type preSessionV15 struct{ net.Conn }

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
