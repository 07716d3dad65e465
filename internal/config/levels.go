package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/bmcfence/bmcfence/bmc"
)

// Level is one fencing level below the BMC, Pacemaker-style. Level 1 is
// always the node's BMC (its address); levels[0] is level 2, tried only
// when level 1 cannot fence (unreachable, refused, unsupported), never to
// overrule a level that reads On. A PDU level counts only when every one
// of its outlets is switched off by us and read back Off: a machine with
// two supplies has two outlets.
type Level struct {
	Outlets []Outlet `mapstructure:"outlets"`
}

// Outlet is one switched PDU outlet feeding the node's machine.
type Outlet struct {
	// Address is the PDU: host[:port] for SNMP, http(s)://host[:port]
	// for Redfish.
	Address string `mapstructure:"address"`
	// Protocol is redfish or snmp.
	Protocol string `mapstructure:"protocol"`
	// Outlet is the outlet: its 1-based number for SNMP, its Redfish Id
	// (else Name).
	Outlet string `mapstructure:"outlet"`
	// PDU is the Redfish RackPDU's Id (empty: the only one).
	PDU string `mapstructure:"pdu"`
	// CredentialsSecret names a Secret in the agent's namespace: SNMP v1
	// and v2c key community; v3 keys username, password, privPassword;
	// Redfish keys username and password. Never logged.
	CredentialsSecret string `mapstructure:"credentialsSecret"`
	// SNMPVersion (1, 2c, 3; default 3), AuthProtocol, PrivProtocol: SNMP.
	SNMPVersion  string `mapstructure:"snmpVersion"`
	AuthProtocol string `mapstructure:"authProtocol"`
	PrivProtocol string `mapstructure:"privProtocol"`
	// InsecureSkipVerify: Redfish over https without verification.
	InsecureSkipVerify bool `mapstructure:"insecureSkipVerify"`
	// AllowUnverifiedOutlet lets this outlet count without a recorded
	// outlet identity proof (pdu.VerifyOutlet): the operator vouches that
	// it feeds this node's machine. Off by default; shown by `kubectl
	// fence check`.
	AllowUnverifiedOutlet bool `mapstructure:"allowUnverifiedOutlet"`
}

// OutletProofsConfigMap is the ConfigMap, in the agent's namespace, that
// holds the recorded outlet identity proofs (internal/inventory reads it).
const OutletProofsConfigMap = "bmcfence-outlet-proofs"

// Outlet protocols.
const (
	OutletRedfish = "redfish"
	OutletSNMP    = "snmp"
)

// RiskUnverifiedOutlet and RiskSNMPCommunity are the risky settings of
// fencing levels.
const (
	RiskUnverifiedOutlet = "allowUnverifiedOutlet"
	RiskSNMPCommunity    = "snmpWriteCommunity"
)

// ResolvedLevels is the node's levels: its own when it lists any, else the
// defaults'.
func (n NodeBMC) ResolvedLevels(d BMCSettings) []Level {
	if len(n.Levels) > 0 {
		return n.Levels
	}
	return d.Levels
}

// validateLevels reports every mistake in a levels list, one line each,
// each naming the field.
func validateLevels(field string, levels []Level) []error {
	var errs []error
	bad := func(f, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", f, fmt.Sprintf(format, args...)))
	}
	seen := map[string]string{}
	for i, l := range levels {
		lf := fmt.Sprintf("%s.levels[%d]", field, i)
		if len(l.Outlets) == 0 {
			bad(lf+".outlets", "empty: a PDU level needs every outlet that feeds the machine (level 1 is the BMC, always; levels[0] is level 2)")
		}
		for j, o := range l.Outlets {
			of := fmt.Sprintf("%s.outlets[%d]", lf, j)
			errs = append(errs, o.validate(of)...)
			key := strings.ToLower(o.Address) + "/" + o.PDU + "/" + o.Outlet
			if prev, dup := seen[key]; dup {
				bad(of, "the same outlet as %s", prev)
			}
			seen[key] = of
		}
	}
	return errs
}

func (o Outlet) validate(field string) []error {
	var errs []error
	bad := func(f, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", field, f, fmt.Sprintf(format, args...)))
	}
	switch o.Protocol {
	case OutletSNMP:
		if o.Address == "" {
			bad("address", "empty: give the PDU's host[:port]")
		} else if strings.Contains(o.Address, "://") {
			bad("address", "%q: an SNMP PDU is host[:port], without a scheme", o.Address)
		} else if host, port, err := splitHostPort(o.Address); err != nil || host == "" {
			bad("address", "%q: want host[:port]", o.Address)
		} else if port != "" {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				bad("address", "%q: port %q: want 1-65535", o.Address, port)
			}
		}
		if n, err := strconv.Atoi(o.Outlet); err != nil || n < 1 {
			bad("outlet", "%q: want the 1-based outlet number", o.Outlet)
		}
		if o.PDU != "" {
			bad("pdu", "%q: only Redfish PDUs are chosen by Id; remove it", o.PDU)
		}
		switch o.SNMPVersion {
		case "", "1", "2c", "3":
		default:
			bad("snmpVersion", "%q: want 1, 2c or 3", o.SNMPVersion)
		}
		switch strings.ToUpper(o.AuthProtocol) {
		case "", "MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512":
		default:
			bad("authProtocol", "%q: want MD5, SHA, SHA224, SHA256, SHA384 or SHA512", o.AuthProtocol)
		}
		switch strings.ToUpper(o.PrivProtocol) {
		case "", "DES", "AES", "AES192", "AES256":
		default:
			bad("privProtocol", "%q: want DES, AES, AES192 or AES256", o.PrivProtocol)
		}
		if o.PrivProtocol != "" && o.AuthProtocol == "" {
			bad("privProtocol", "privacy needs authentication: set authProtocol too")
		}
		if (o.AuthProtocol != "" || o.PrivProtocol != "") && o.SNMPVersion != "" && o.SNMPVersion != "3" {
			bad("snmpVersion", "%q: authProtocol and privProtocol are SNMPv3's", o.SNMPVersion)
		}
		if o.InsecureSkipVerify {
			bad("insecureSkipVerify", "SNMP has no TLS; remove it")
		}
	case OutletRedfish:
		ep, err := bmc.ParseAddress(o.Address)
		switch {
		case o.Address == "":
			bad("address", "empty: give the PDU's Redfish service, https://host[:port]")
		case err != nil:
			bad("address", "%q: %v", o.Address, err)
		case ep.Protocol != bmc.Redfish:
			bad("address", "%q: a Redfish PDU is http(s)://host[:port]", o.Address)
		}
		if strings.TrimSpace(o.Outlet) == "" {
			bad("outlet", "empty: give the outlet's Redfish Id (or Name)")
		}
		if o.SNMPVersion != "" || o.AuthProtocol != "" || o.PrivProtocol != "" {
			bad("protocol", "redfish: snmpVersion, authProtocol and privProtocol are SNMP's; remove them")
		}
	case "":
		bad("protocol", "empty: want redfish or snmp")
	default:
		bad("protocol", "%q: want redfish or snmp", o.Protocol)
	}
	if o.CredentialsSecret == "" {
		bad("credentialsSecret", "empty: name the Secret with the PDU's credentials (SNMP: community, or username/password/privPassword for v3; Redfish: username/password)")
	} else {
		for _, m := range validation.IsDNS1123Subdomain(o.CredentialsSecret) {
			bad("credentialsSecret", "%q: %s", o.CredentialsSecret, m)
		}
	}
	return errs
}

// splitHostPort accepts host or host:port (and [v6]:port).
func splitHostPort(s string) (host, port string, err error) {
	if h, p, err := net.SplitHostPort(s); err == nil {
		return h, p, nil
	}
	if strings.Count(s, ":") > 1 || strings.ContainsAny(s, "[]/ ") {
		if ip := net.ParseIP(s); ip != nil {
			return s, "", nil
		}
		return "", "", fmt.Errorf("not host[:port]")
	}
	return s, "", nil
}

// levelRisks lists the risky settings of the levels in inv: outlets that
// count without an identity proof, and SNMP v1/v2c write communities.
func (inv Inventory) levelRisks() []Risk {
	var unverified, community []string
	note := func(who string, levels []Level) {
		for _, l := range levels {
			for _, o := range l.Outlets {
				name := who + " " + o.Address + " outlet " + o.Outlet
				if o.AllowUnverifiedOutlet {
					unverified = append(unverified, name)
				}
				if o.Protocol == OutletSNMP && (o.SNMPVersion == "1" || o.SNMPVersion == "2c") {
					community = append(community, name)
				}
			}
		}
	}
	note("inventory.defaults:", inv.Defaults.Levels)
	for _, n := range inv.Nodes {
		note(n.Name+":", n.Levels)
	}
	var out []Risk
	if len(unverified) > 0 {
		out = append(out, Risk{RiskUnverifiedOutlet, fmt.Sprintf("allowUnverifiedOutlet (%s): these outlets count without a recorded outlet identity test; a wrong outlet cuts another machine's power and lets a running node be tainted", strings.Join(unverified, ", "))})
	}
	if len(community) > 0 {
		out = append(out, Risk{RiskSNMPCommunity, fmt.Sprintf("SNMP v1/v2c write communities (%s): sent in clear text; whoever reads one can switch every outlet of the PDU (use SNMPv3 with authPriv)", strings.Join(community, ", "))})
	}
	return out
}

// outletSecrets names the Secrets the fencing levels read.
func (inv Inventory) outletSecrets() []string {
	var out []string
	add := func(levels []Level) {
		for _, l := range levels {
			for _, o := range l.Outlets {
				out = append(out, o.CredentialsSecret)
			}
		}
	}
	add(inv.Defaults.Levels)
	for _, n := range inv.Nodes {
		add(n.Levels)
	}
	return out
}
