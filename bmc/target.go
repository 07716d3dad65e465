package bmc

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Protocol is how a BMC is reached.
type Protocol string

const (
	Redfish Protocol = "redfish"
	IPMI    Protocol = "ipmi"
)

// Endpoint is a parsed BMC address. It never carries credentials.
type Endpoint struct {
	Protocol Protocol
	// Scheme is "https" or "http" for Redfish and "ipmi" for IPMI-over-LAN.
	Scheme string
	Host   string
	Port   int
}

// ParseAddress parses the address forms an operator writes:
//
//	https://HOST[:PORT]  Redfish over TLS (port 443)
//	http://HOST[:PORT]   Redfish in clear text (port 80), for labs and mocks
//	ipmi://HOST[:PORT]   IPMI 2.0 lanplus (UDP port 623)
//
// A path, query or user info is refused rather than ignored: a path usually
// means the operator meant to pick a system (use the system setting), and
// credentials in a URL end up in logs.
func ParseAddress(s string) (Endpoint, error) {
	const want = "want https://HOST[:PORT], http://HOST[:PORT] or ipmi://HOST[:PORT]"
	// Every error shows the address redacted: a password with a '/', '?'
	// or '#' in it makes url.Parse read the user info as host and path, so
	// u.User alone does not find every credential.
	shown := redactURL(s)
	if scheme, host, ok := unbracketedIPv6(s); ok {
		// url.Parse takes "fd00::7" as host "fd00:" and port 7.
		port := map[string]string{"https": "443", "http": "80", "ipmi": "623"}[scheme]
		if port == "" {
			port = "PORT"
		}
		return Endpoint{}, fmt.Errorf("%w: address %q: an IPv6 address needs brackets: %s://[%s] (with a port: %s://[%s]:%s)", ErrInvalidTarget, shown, scheme, host, scheme, host, port)
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return Endpoint{}, fmt.Errorf("%w: address %q: %s", ErrInvalidTarget, shown, want)
	}
	if u.User != nil || strings.Contains(s, "@") {
		return Endpoint{}, fmt.Errorf("%w: address %q carries credentials: remove them and use a password file, env var or Secret", ErrInvalidTarget, shown)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return Endpoint{}, fmt.Errorf("%w: address %q has a path or query: give only scheme, host and port (choose a Redfish system with the system setting)", ErrInvalidTarget, shown)
	}
	ep := Endpoint{Scheme: strings.ToLower(u.Scheme), Host: u.Hostname()}
	var defaultPort int
	switch ep.Scheme {
	case "https":
		ep.Protocol, defaultPort = Redfish, 443
	case "http":
		ep.Protocol, defaultPort = Redfish, 80
	case "ipmi":
		ep.Protocol, defaultPort = IPMI, 623
	default:
		return Endpoint{}, fmt.Errorf("%w: address %q: unknown scheme %q: %s", ErrInvalidTarget, shown, u.Scheme, want)
	}
	ep.Port = defaultPort
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Endpoint{}, fmt.Errorf("%w: address %q: port %q must be 1-65535", ErrInvalidTarget, shown, p)
		}
		ep.Port = n
	}
	if ep.Host == "" {
		return Endpoint{}, fmt.Errorf("%w: address %q has no host: %s", ErrInvalidTarget, shown, want)
	}
	return ep, nil
}

// unbracketedIPv6 finds an IPv6 address written without the brackets a
// URL needs around it: "ipmi://fd00::7" (its host, after any user info,
// has more than one colon and no bracket).
func unbracketedIPv6(s string) (scheme, host string, ok bool) {
	scheme, rest, found := strings.Cut(s, "://")
	if !found {
		return "", "", false
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		return "", "", false // credentials: refused on their own
	}
	if strings.Contains(rest, "[") || strings.Count(rest, ":") < 2 {
		return "", "", false
	}
	return strings.ToLower(scheme), rest, true
}

// HostPort returns "host:port" (IPv6 hosts bracketed).
func (e Endpoint) HostPort() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// String returns the canonical address, e.g. "https://10.0.0.5:443".
func (e Endpoint) String() string {
	if e.Scheme == "" {
		return ""
	}
	return e.Scheme + "://" + e.HostPort()
}

// redactURL drops everything before the last '@' (user info, whatever
// shape the address has: "user:pass@host" and "//user:pass@host" have no
// "://") before the address is echoed in an error; a scheme stays.
func redactURL(s string) string {
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return s
	}
	if scheme, _, ok := strings.Cut(s[:at], "://"); ok {
		return scheme + "://[redacted]@" + s[at+1:]
	}
	return "[redacted]@" + s[at+1:]
}

// Key identifies the target for identity purposes: protocol, host (lower
// case, IPv6 compressed), port (defaults applied) and system. Two entries
// with the same key reach the same BMC; a change of key means another
// machine may answer.
func (t Target) Key() string {
	host := strings.ToLower(t.Address.Host)
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	k := string(t.Address.Protocol) + "://" + net.JoinHostPort(host, strconv.Itoa(t.Address.Port))
	if t.System != "" {
		k += "/" + t.System
	}
	return k
}

// SameBMC reports whether two targets may reach the same machine: the same
// BMC (protocol, host, port) and the same system, or no system named on one
// of them (which then means the BMC's only system).
func SameBMC(a, b Target) bool {
	ka, kb := a, b
	ka.System, kb.System = "", ""
	if ka.Key() != kb.Key() {
		return false
	}
	return a.System == "" || b.System == "" || a.System == b.System
}

// Secret is a password. Every way fmt, JSON or YAML can print it prints
// "[redacted]"; the value is reachable only through Reveal, which adapters call
// at the last moment (an HTTP header, an IPMI RAKP key).
type Secret string

const redacted = "[redacted]"

func (Secret) String() string               { return redacted }
func (Secret) GoString() string             { return `"` + redacted + `"` }
func (Secret) Format(f fmt.State, _ rune)   { _, _ = io.WriteString(f, redacted) }
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
func (s Secret) Reveal() string             { return string(s) }
func (s Secret) IsEmpty() bool              { return s == "" }

// Credentials authenticate to a BMC.
type Credentials struct {
	Username string
	Password Secret
}

// AuthMode selects Redfish authentication. Basic is the default: many BMCs and
// emulators only implement it, and with one client per operation a session
// costs two extra requests and can leak a slot on the BMC when the logout is
// lost.
type AuthMode string

const (
	AuthBasic   AuthMode = "basic"
	AuthSession AuthMode = "session"
)

// Defaults for a Target.
const (
	// DefaultTimeout bounds one operation, all requests included. A healthy
	// BMC answers a power read in well under a second; ten seconds tolerates a
	// loaded one (and a busy one's retries) without letting an unreachable
	// address stall a fence.
	DefaultTimeout = 10 * time.Second
	// DefaultIPMICipherSuite is suite 3 (RAKP-HMAC-SHA1, AES-CBC-128), the one
	// every IPMI 2.0 BMC implements; 17 (HMAC-SHA256) is the stronger choice
	// where the BMC offers it. One suite is tried, never a fallback, so a
	// failure names the real cause.
	DefaultIPMICipherSuite = 3
)

// Target is everything needed to reach one machine's BMC.
type Target struct {
	Address Endpoint
	// System selects a Redfish ComputerSystem by Id or Name. Empty means "the
	// only one": a BMC with several systems and no selection is refused.
	System      string
	Credentials Credentials
	Auth        AuthMode
	// CACertificates is a PEM bundle that verifies the BMC's certificate.
	// Empty means the system roots.
	CACertificates []byte
	// InsecureSkipVerify disables TLS verification. Only an explicit operator
	// choice sets it.
	InsecureSkipVerify bool
	// Timeout bounds each operation. Zero means DefaultTimeout.
	Timeout         time.Duration
	IPMICipherSuite int
	// IPMICipherSuiteFallback, when set, is the one suite tried after the
	// BMC refused IPMICipherSuite (or answered it with weaker algorithms
	// than the suite names). Zero: no fallback, the refusal is the answer.
	IPMICipherSuiteFallback int
	// ChassisPower says whether a Redfish system's Off must be confirmed by
	// its chassis (see ChassisPower). Empty means ChassisPowerAuto.
	ChassisPower ChassisPower
	// Names are the words for the settings an error may ask the operator
	// to change: the CLI's flags or the agent's configuration keys.
	Names SettingNames
}

// ChassisPower is the rule for a Redfish system that reads Off while its
// chassis reports power.
type ChassisPower string

const (
	// ChassisPowerAuto checks the chassis (an Off counts only if the
	// chassis agrees: OpenBMC derives the system's PowerState from the
	// host's firmware state, and the chassis carries the real power),
	// except on a pure emulator positively identified from its service
	// root whose chassis never follows the machine (HPE's iLO emulator):
	// there the chassis is set aside. sushy-tools is identified but not
	// set aside: what its system's Off means depends on its driver, so
	// its Off is refused, saying it needs ChassisPowerIgnore.
	ChassisPowerAuto ChassisPower = "auto"
	// ChassisPowerCheck always checks the chassis.
	ChassisPowerCheck ChassisPower = "check"
	// ChassisPowerIgnore never reads the chassis: the operator knows the
	// system's PowerState is the machine's power on this BMC (sushy-tools
	// with its libvirt or fake driver). The agent takes it per inventory
	// entry only.
	ChassisPowerIgnore ChassisPower = "ignore"
)

// IPMICipherSuites are the RMCP+ cipher suites bmc/ipmi speaks: 3
// (RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128) and 17 (RAKP-HMAC-SHA256,
// HMAC-SHA256-128, AES-CBC-128). Configuration is checked against them, so
// a suite the client would refuse is refused when the configuration loads.
var IPMICipherSuites = []int{3, 17}

// ParseChassisPower accepts "", auto, check or ignore.
func ParseChassisPower(s string) (ChassisPower, error) {
	switch ChassisPower(s) {
	case "", ChassisPowerAuto:
		return ChassisPowerAuto, nil
	case ChassisPowerCheck, ChassisPowerIgnore:
		return ChassisPower(s), nil
	}
	return "", fmt.Errorf("%w: chassis power %q: want auto, check or ignore", ErrInvalidTarget, s)
}

// SettingNames are how the operator spells the settings an error may point
// at. The zero value is the agent's configuration keys; the CLI gives its
// flags, so each reader is told what to change in their own words.
type SettingNames struct {
	CA, Insecure, System, Auth, CipherSuite, CipherSuiteFallback, ChassisPower string
}

// AgentNames are the agent's configuration keys (an inventory entry's).
var AgentNames = SettingNames{
	CA: "caConfigMap", Insecure: "insecureSkipVerify", System: "system", Auth: "auth",
	CipherSuite: "cipherSuite", CipherSuiteFallback: "cipherSuiteFallback", ChassisPower: "chassisPower",
}

// Or returns n with every empty name taken from AgentNames.
func (n SettingNames) Or() SettingNames {
	pick := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	d := AgentNames
	return SettingNames{
		CA: pick(n.CA, d.CA), Insecure: pick(n.Insecure, d.Insecure), System: pick(n.System, d.System),
		Auth: pick(n.Auth, d.Auth), CipherSuite: pick(n.CipherSuite, d.CipherSuite),
		CipherSuiteFallback: pick(n.CipherSuiteFallback, d.CipherSuiteFallback), ChassisPower: pick(n.ChassisPower, d.ChassisPower),
	}
}

// WithDefaults fills unset optional fields.
func (t Target) WithDefaults() Target {
	if t.Timeout == 0 {
		t.Timeout = DefaultTimeout
	}
	if t.Auth == "" {
		t.Auth = AuthBasic
	}
	if t.IPMICipherSuite == 0 {
		t.IPMICipherSuite = DefaultIPMICipherSuite
	}
	if t.ChassisPower == "" {
		t.ChassisPower = ChassisPowerAuto
	}
	t.Names = t.Names.Or()
	return t
}

// Validate reports the first field that cannot work, naming it.
func (t Target) Validate() error {
	switch t.Address.Protocol {
	case Redfish, IPMI:
	case "":
		return fmt.Errorf("%w: address is empty", ErrInvalidTarget)
	default:
		return fmt.Errorf("%w: address protocol %q: want redfish or ipmi", ErrInvalidTarget, t.Address.Protocol)
	}
	if t.Credentials.Username == "" {
		return fmt.Errorf("%w: %s: username is empty", ErrInvalidTarget, t.Address)
	}
	if t.Credentials.Password.IsEmpty() {
		return fmt.Errorf("%w: %s: password is empty", ErrInvalidTarget, t.Address)
	}
	switch t.Auth {
	case "", AuthBasic, AuthSession:
	default:
		return fmt.Errorf("%w: %s: auth %q: want basic or session", ErrInvalidTarget, t.Address, t.Auth)
	}
	if t.Timeout < 0 {
		return fmt.Errorf("%w: %s: timeout %s must not be negative", ErrInvalidTarget, t.Address, t.Timeout)
	}
	if t.IPMICipherSuite < 0 || t.IPMICipherSuite > 17 {
		return fmt.Errorf("%w: %s: IPMI cipher suite %d: want 0-17", ErrInvalidTarget, t.Address, t.IPMICipherSuite)
	}
	if t.IPMICipherSuiteFallback < 0 || t.IPMICipherSuiteFallback > 17 {
		return fmt.Errorf("%w: %s: IPMI cipher suite fallback %d: want 0-17", ErrInvalidTarget, t.Address, t.IPMICipherSuiteFallback)
	}
	if t.IPMICipherSuiteFallback != 0 && t.Address.Protocol != IPMI {
		return fmt.Errorf("%w: %s: an IPMI cipher suite fallback is set for a Redfish address; drop it", ErrInvalidTarget, t.Address)
	}
	switch t.ChassisPower {
	case "", ChassisPowerAuto, ChassisPowerCheck:
	case ChassisPowerIgnore:
		if t.Address.Protocol != Redfish {
			return fmt.Errorf("%w: %s: chassis power %q applies to Redfish only; IPMI reads the chassis power itself", ErrInvalidTarget, t.Address, t.ChassisPower)
		}
	default:
		return fmt.Errorf("%w: %s: chassis power %q: want auto, check or ignore", ErrInvalidTarget, t.Address, t.ChassisPower)
	}
	if t.Address.Protocol == IPMI && t.System != "" {
		return fmt.Errorf("%w: %s: system %q: IPMI has no system selection; remove it", ErrInvalidTarget, t.Address, t.System)
	}
	if t.Address.Scheme == "http" && (t.InsecureSkipVerify || len(t.CACertificates) > 0) {
		return fmt.Errorf("%w: %s: TLS settings given for a plain http address; use https:// or drop them", ErrInvalidTarget, t.Address)
	}
	return nil
}
