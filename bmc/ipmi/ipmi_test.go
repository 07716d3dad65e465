package ipmi

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/ipmisim"
	"github.com/bmcfence/bmcfence/bmc/pyghmisim"
)

// The client is tested against two independent IPMI 2.0 servers: OpenIPMI's
// ipmi_sim (C) and pyghmi's Bmc (Python). What one accepts by accident the
// other would not.

// peer is one BMC under test, with the machine behind it.
type peer struct {
	kind     string
	addr     string
	user, pw string
	guid     string
	power    func() (bool, error)
	commands func() []string // chassis control requests received, in the peer's words
	offCmd   string          // how the peer logs a power-down
	behave   func(behavior) error
}

// behavior is what a test asks of either peer.
type behavior struct {
	mode  string // "", "lying", "refusing"
	delay time.Duration
	busy  int // pyghmi only: the next n control requests answer 0xC0
}

const (
	simPeer    = "ipmi_sim"
	pyghmiPeer = "pyghmi"
)

var bothPeers = []string{simPeer, pyghmiPeer}

func startPeer(t *testing.T, kind, address string, on bool) *peer {
	t.Helper()
	switch kind {
	case simPeer:
		s := ipmisim.StartT(t, ipmisim.Options{InitialPower: on, Address: address})
		return &peer{
			kind: kind, addr: s.Address(), user: s.Username(), pw: s.Password(), guid: s.GUID(),
			power: s.Power, commands: s.Commands, offCmd: "set power 0",
			behave: func(b behavior) error {
				sb := ipmisim.Behavior{Delay: b.delay}
				switch b.mode {
				case "lying":
					sb.Stuck = true
				case "refusing":
					// ipmi_sim answers every failure of its chassis program with
					// 0xFF: it cannot say 0xD5. pyghmi shows the real refusal.
					sb.Failing = true
				}
				return s.SetBehavior(sb)
			},
		}
	case pyghmiPeer:
		s := pyghmisim.StartT(t, pyghmisim.Options{InitialPower: on, Address: address})
		return &peer{
			kind: kind, addr: s.Address(), user: s.Username(), pw: s.Password(), guid: pyghmisim.DefaultGUID,
			power: s.Power, commands: s.Commands, offCmd: "control_off",
			behave: func(b behavior) error {
				return s.SetBehavior(pyghmisim.Behavior{Mode: pyghmisim.Mode(b.mode), Delay: b.delay, Busy: b.busy})
			},
		}
	}
	t.Fatalf("unknown peer %q", kind)
	return nil
}

func newClient(t *testing.T, p *peer, opts ...func(*bmc.Target)) *Client {
	t.Helper()
	ep, err := bmc.ParseAddress("ipmi://" + p.addr)
	if err != nil {
		t.Fatal(err)
	}
	target := bmc.Target{Address: ep, Credentials: bmc.Credentials{Username: p.user, Password: bmc.Secret(p.pw)}, Timeout: 10 * time.Second}
	for _, o := range opts {
		o(&target)
	}
	c, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func withPassword(pw string) func(*bmc.Target) {
	return func(t *bmc.Target) { t.Credentials.Password = bmc.Secret(pw) }
}
func withTimeout(d time.Duration) func(*bmc.Target) { return func(t *bmc.Target) { t.Timeout = d } }
func withSuite(n int) func(*bmc.Target)             { return func(t *bmc.Target) { t.IPMICipherSuite = n } }

var ignoreLatency = cmpopts.IgnoreFields(bmc.Result{}, "Latency")

// checkOpError asserts what every error must be: an IPMI *bmc.OpError
// wrapping want, one line, without the password.
func checkOpError(t *testing.T, err, want error, op bmc.Op, password string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v (reason %s), want %v", op, err, bmc.Reason(err), want)
	}
	var opErr *bmc.OpError
	if !errors.As(err, &opErr) || opErr.Op != op || opErr.Protocol != bmc.IPMI {
		t.Errorf("%s: error %v is not an IPMI *bmc.OpError for %s", op, err, op)
	}
	msg := err.Error()
	t.Logf("%s: %s", op, msg)
	if strings.Contains(msg, "\n") || strings.Contains(msg, password) {
		t.Errorf("%s: error %q spans lines or leaks the password", op, msg)
	}
}

func haveIPv6(t *testing.T) {
	t.Helper()
	pc, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	_ = pc.Close()
}

func TestPowerStatus(t *testing.T) {
	t.Parallel()
	for _, kind := range bothPeers {
		for _, address := range []string{"127.0.0.1", "::1"} {
			for _, on := range []bool{true, false} {
				name := kind + "/" + address + "/off"
				if on {
					name = kind + "/" + address + "/on"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					if address == "::1" {
						haveIPv6(t)
					}
					p := startPeer(t, kind, address, on)
					c := newClient(t, p)
					if address == "::1" && !strings.HasPrefix(c.Target().Address.String(), "ipmi://[::1]:") {
						t.Errorf("address %s: want ipmi://[::1]:PORT", c.Target().Address)
					}
					got, err := c.PowerStatus(context.Background())
					if err != nil {
						t.Fatalf("PowerStatus: %v", err)
					}
					want := bmc.PowerStatus{State: bmc.PowerOff, Raw: "Chassis Power is off", Result: bmc.Result{Provider: "ipmi", Attempts: 1, CipherSuite: 3},
						Trusted: bmc.PowerSource{Resource: "ipmi chassis", Why: "Get Chassis Status's power bit: IPMI has no other power to read"}}
					if on {
						want.State, want.Raw = bmc.PowerOn, "Chassis Power is on"
					}
					if diff := cmp.Diff(want, got, ignoreLatency); diff != "" || got.Latency <= 0 {
						t.Errorf("PowerStatus (-want +got):\n%s", diff)
					}
				})
			}
		}
	}
}

// PowerOff sends the power-down every time, also to a machine that reads
// off: a restart's off-dwell reads off, and only an off we caused counts.
func TestPowerOffAlwaysSends(t *testing.T) {
	t.Parallel()
	for _, kind := range bothPeers {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p := startPeer(t, kind, "", false)
			c := newClient(t, p)
			ctx := context.Background()
			for i := 1; i <= 2; i++ {
				res, err := c.PowerOff(ctx)
				if err != nil {
					t.Fatalf("PowerOff %d of an off machine (honest BMC): %v", i, err)
				}
				if diff := cmp.Diff(bmc.Result{Provider: "ipmi", Sent: "chassis power off", Attempts: 1, CipherSuite: 3}, res, ignoreLatency); diff != "" {
					t.Errorf("PowerOff %d (-want +got):\n%s", i, diff)
				}
			}
			if diff := cmp.Diff([]string{p.offCmd, p.offCmd}, p.commands()); diff != "" {
				t.Errorf("commands received (-want +got):\n%s", diff)
			}
			if _, err := c.PowerOn(ctx); err != nil {
				t.Fatalf("PowerOn: %v", err)
			}
			if on, err := p.power(); err != nil || !on {
				t.Errorf("machine on = %v, %v after PowerOn", on, err)
			}
		})
	}
}

func TestBehaviours(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		peer      string
		on        bool
		b         behavior
		op        bmc.Op
		wantErr   error // nil: accepted
		wantOn    bool  // the machine afterwards
		wantCmds  int   // control requests the BMC received
		wantTries int
	}{
		{name: "honest power off", peer: simPeer, on: true, op: bmc.OpPowerOff, wantCmds: 1, wantTries: 1},
		{name: "honest power off", peer: pyghmiPeer, on: true, op: bmc.OpPowerOff, wantCmds: 1, wantTries: 1},
		{name: "lying BMC accepts and ignores", peer: simPeer, on: true, b: behavior{mode: "lying"}, op: bmc.OpPowerOff, wantOn: true, wantCmds: 1, wantTries: 1},
		{name: "lying BMC accepts and ignores", peer: pyghmiPeer, on: true, b: behavior{mode: "lying"}, op: bmc.OpPowerOff, wantOn: true, wantCmds: 1, wantTries: 1},
		{name: "refusing BMC: 0xD5 to power off when off", peer: pyghmiPeer, b: behavior{mode: "refusing"}, op: bmc.OpPowerOff, wantErr: bmc.ErrAlreadyInState, wantCmds: 1, wantTries: 1},
		{name: "refusing BMC: 0xD5 to power on when on", peer: pyghmiPeer, on: true, b: behavior{mode: "refusing"}, op: bmc.OpPowerOn, wantErr: bmc.ErrAlreadyInState, wantOn: true, wantCmds: 1, wantTries: 1},
		{name: "refusing BMC still obeys a command the state allows", peer: pyghmiPeer, on: true, b: behavior{mode: "refusing"}, op: bmc.OpPowerOff, wantCmds: 1, wantTries: 1},
		{name: "failing BMC: 0xFF is a refusal, not already-in-state", peer: simPeer, on: true, b: behavior{mode: "refusing"}, op: bmc.OpPowerOff, wantErr: bmc.ErrBMC, wantOn: true, wantCmds: 1, wantTries: 1},
		{name: "slow BMC", peer: simPeer, on: true, b: behavior{delay: 1500 * time.Millisecond}, op: bmc.OpPowerOff, wantCmds: 1, wantTries: 1},
		{name: "slow BMC", peer: pyghmiPeer, on: true, b: behavior{delay: 1500 * time.Millisecond}, op: bmc.OpPowerOff, wantCmds: 1, wantTries: 1},
		{name: "busy BMC: 0xC0 is retried", peer: pyghmiPeer, on: true, b: behavior{busy: 2}, op: bmc.OpPowerOff, wantCmds: 3, wantTries: 3},
	}
	for _, tt := range tests {
		t.Run(tt.peer+"/"+tt.name, func(t *testing.T) {
			t.Parallel()
			p := startPeer(t, tt.peer, "", tt.on)
			if err := p.behave(tt.b); err != nil {
				t.Fatal(err)
			}
			c := newClient(t, p)
			start := time.Now()
			var res bmc.Result
			var err error
			if tt.op == bmc.OpPowerOff {
				res, err = c.PowerOff(context.Background())
			} else {
				res, err = c.PowerOn(context.Background())
			}
			took := time.Since(start)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("%s: %v", tt.op, err)
				}
			} else {
				checkOpError(t, err, tt.wantErr, tt.op, p.pw)
			}
			if res.Attempts != tt.wantTries {
				t.Errorf("%s: %d attempts, want %d", tt.op, res.Attempts, tt.wantTries)
			}
			if n := len(p.commands()); n != tt.wantCmds {
				t.Errorf("the BMC received %d control requests %q, want %d", n, p.commands(), tt.wantCmds)
			}
			if on, err := p.power(); err != nil || on != tt.wantOn {
				t.Errorf("machine on = %v, %v; want %v", on, err, tt.wantOn)
			}
			if tt.b.delay > 0 && took < tt.b.delay {
				t.Errorf("%s took %v against a BMC that answers after %v", tt.op, took, tt.b.delay)
			}
		})
	}
}

// Identity is the system GUID, SMBIOS-decoded, so it equals the node's
// systemUUID; both peers are configured with a GUID and must give it back.
func TestIdentityIsTheSystemGUID(t *testing.T) {
	t.Parallel()
	for _, kind := range bothPeers {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p := startPeer(t, kind, "", true)
			id, err := newClient(t, p).Identity(context.Background())
			if err != nil {
				t.Fatalf("Identity: %v", err)
			}
			if id.UUID != p.guid || id.Provider != "ipmi" {
				t.Errorf("Identity = %+v, want UUID %s", id, p.guid)
			}
		})
	}
}

func TestSMBIOSUUID(t *testing.T) {
	tests := []struct {
		name  string
		bytes [16]byte
		want  string
		ok    bool
	}{
		{
			// The first three fields are stored little-endian, as in the
			// SMBIOS table Linux reads product_uuid from.
			name:  "SMBIOS byte order",
			bytes: [16]byte{0x44, 0x45, 0x4c, 0x4c, 0x42, 0x00, 0x10, 0x44, 0x80, 0x30, 0xb5, 0xc0, 0x4f, 0x4d, 0x31, 0x32},
			want:  "4c4c4544-0042-4410-8030-b5c04f4d3132", ok: true,
		},
		{name: "all zero: not set"},
		{name: "all ones: not set", bytes: [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SMBIOSUUID(tt.bytes)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("SMBIOSUUID = %q, %v; want %q (ok %v)", got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestWrongPasswordIsAnAuthErrorAtOnce(t *testing.T) {
	t.Parallel()
	for _, kind := range bothPeers {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p := startPeer(t, kind, "", true)
			const wrong = "wrong-Pa55word-x"
			c := newClient(t, p, withPassword(wrong))
			start := time.Now()
			_, err := c.PowerOff(context.Background())
			checkOpError(t, err, bmc.ErrAuth, bmc.OpPowerOff, wrong)
			// Well within the 10 s timeout: refused at once, not taken for silence.
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("a rejected password took %v to report", took)
			}
			if n := len(p.commands()); n != 0 {
				t.Errorf("%d control requests reached the BMC without a session", n)
			}
		})
	}
}

// ipmi_sim offers cipher suites up to 3; asked for 17, the client says so.
func TestUnsupportedCipherSuite(t *testing.T) {
	t.Parallel()
	p := startPeer(t, simPeer, "", true)
	_, err := newClient(t, p, withSuite(17)).PowerStatus(context.Background())
	checkOpError(t, err, bmc.ErrUnsupported, bmc.OpPowerStatus, p.pw)
	if !strings.Contains(err.Error(), "cipher suite 17") {
		t.Errorf("error %q does not name the cipher suite", err)
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	t.Run("port closed: refused at once", func(t *testing.T) {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := pc.LocalAddr().String()
		_ = pc.Close()
		c := newClient(t, &peer{addr: addr, user: "admin", pw: "secret-pw"})
		start := time.Now()
		_, err = c.PowerStatus(context.Background())
		checkOpError(t, err, bmc.ErrUnreachable, bmc.OpPowerStatus, "secret-pw")
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("a closed port took %v", took)
		}
	})
	t.Run("silent: bounded by the timeout", func(t *testing.T) {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0") // reads nothing, answers nothing
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pc.Close() })
		const timeout = 1500 * time.Millisecond
		c := newClient(t, &peer{addr: pc.LocalAddr().String(), user: "admin", pw: "secret-pw"}, withTimeout(timeout))
		start := time.Now()
		_, err = c.PowerOff(context.Background())
		checkOpError(t, err, bmc.ErrTimeout, bmc.OpPowerOff, "secret-pw")
		if took := time.Since(start); took > timeout+2*time.Second {
			t.Errorf("a silent BMC took %v with a %v timeout", took, timeout)
		}
	})
}

// No ipmitool at run time: with PATH emptied once the peer runs, everything
// still works.
func TestNoIpmitoolNeeded(t *testing.T) {
	p := startPeer(t, simPeer, "", true)
	t.Setenv("PATH", t.TempDir())
	c := newClient(t, p)
	ctx := context.Background()
	if _, err := c.PowerOff(ctx); err != nil {
		t.Fatalf("PowerOff without ipmitool: %v", err)
	}
	if st, err := c.PowerStatus(ctx); err != nil || st.State != bmc.PowerOff {
		t.Fatalf("PowerStatus without ipmitool = %v, %v", st.State, err)
	}
	if _, err := c.PowerOn(ctx); err != nil {
		t.Fatalf("PowerOn without ipmitool: %v", err)
	}
	if _, err := os.Stat("/proc/self"); err != nil {
		t.Skip("no /proc")
	}
}

func TestToV15(t *testing.T) {
	// Get Channel Authentication Capabilities as go-ipmi sends it (RMCP+,
	// session 0) and as ipmitool sends it (v1.5).
	v20 := []byte{0x06, 0x00, 0xff, 0x07, 0x06, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0x09, 0x00,
		0x20, 0x18, 0xc8, 0x81, 0x04, 0x38, 0x8e, 0x04, 0xb1}
	want := []byte{0x06, 0x00, 0xff, 0x07, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0x09,
		0x20, 0x18, 0xc8, 0x81, 0x04, 0x38, 0x8e, 0x04, 0xb1}
	got, ok := toV15(v20)
	if !ok {
		t.Fatal("toV15 left a pre-session IPMI request alone")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("toV15 (-want +got):\n%s", diff)
	}
	inSession := append([]byte(nil), v20...)
	inSession[6] = 0x01 // a session ID: in-session traffic is never touched
	openSession := append([]byte(nil), v20...)
	openSession[5] = 0x10 // RMCP+ Open Session Request
	for name, b := range map[string][]byte{"in session": inSession, "open session": openSession, "short": v20[:10]} {
		if _, ok := toV15(b); ok {
			t.Errorf("%s: toV15 rewrote it", name)
		}
	}
}

// Asked for suite 17, a BMC that offers only suite 3 must not give a
// suite-3 session: ipmi_sim refuses the Open Session, pyghmi answers it
// with suite 3's SHA-1 algorithms (go-ipmi took that silently). Both are
// refused, naming the suite, and nothing is sent.
func TestSuite17IsNeverDowngradedSilently(t *testing.T) {
	t.Parallel()
	for _, kind := range bothPeers {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p := startPeer(t, kind, "", true)
			res, err := newClient(t, p, withSuite(17)).PowerOff(context.Background())
			checkOpError(t, err, bmc.ErrUnsupported, bmc.OpPowerOff, p.pw)
			if !strings.Contains(err.Error(), "cipher suite 17") || !strings.Contains(err.Error(), "cipherSuiteFallback") {
				t.Errorf("error %q does not name the suite and the fallback setting", err)
			}
			if n := len(p.commands()); n != 0 || res.Sent != "" {
				t.Errorf("the BMC received %d control requests (%q) over a session it should never have had", n, p.commands())
			}
		})
	}
}

// With a fallback configured, the refused suite gives way to it, and the
// result says which suite the session used.
func TestSuiteFallbackOnlyWhenConfigured(t *testing.T) {
	t.Parallel()
	for _, kind := range bothPeers {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p := startPeer(t, kind, "", true)
			c := newClient(t, p, withSuite(17), func(t *bmc.Target) { t.IPMICipherSuiteFallback = 3 })
			st, err := c.PowerStatus(context.Background())
			if err != nil || st.State != bmc.PowerOn || st.CipherSuite != 3 {
				t.Fatalf("PowerStatus = %+v, %v; want On over the fallback suite 3", st, err)
			}
		})
	}
}

// A refusal's completion code is the BMC's own words, kept in the result.
func TestRefusalKeepsTheCompletionCode(t *testing.T) {
	t.Parallel()
	p := startPeer(t, pyghmiPeer, "", false)
	if err := p.behave(behavior{mode: "refusing"}); err != nil {
		t.Fatal(err)
	}
	res, err := newClient(t, p).PowerOff(context.Background())
	checkOpError(t, err, bmc.ErrAlreadyInState, bmc.OpPowerOff, p.pw)
	if !strings.HasPrefix(res.Reply, "completion code 0xd5") {
		t.Errorf("Reply = %q, want the BMC's completion code 0xd5", res.Reply)
	}
}

// What the configuration accepts (bmc.IPMICipherSuites) is what this
// client speaks.
func TestSuitesAreThoseTheConfigurationAccepts(t *testing.T) {
	var got []int
	for s := range suites {
		got = append(got, s)
	}
	slices.Sort(got)
	if !slices.Equal(got, bmc.IPMICipherSuites) {
		t.Errorf("the client speaks suites %v; bmc.IPMICipherSuites says %v", got, bmc.IPMICipherSuites)
	}
}
