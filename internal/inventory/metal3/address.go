// Package metal3 reads Metal3 BareMetalHosts as bmcfence inventory entries:
// what a host's spec.bmc.address means (the baremetal-operator's schemes,
// parsed the way its pkg/hardwareutils/bmc parses them), which Node a host
// is (its consumer Metal3Machine's owner Machine's status.nodeRef, or the
// Node's metal3:// providerID), and whether the baremetal-operator is busy
// with the host's power. It does no I/O: the inventory lists the objects and
// hands them here as unstructured content, so bmcfence does not link the
// baremetal-operator's Go types (and controller-runtime with them).
package metal3

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/bmcfence/bmcfence/bmc"
)

// ErrUnsupportedScheme is wrapped when a host's BMC address names a driver
// whose protocol bmcfence does not speak (iDRAC WS-Man, iLO RIBCL, iBMC's
// client): such a host is reported, with the address of the same BMC's
// Redfish or IPMI service that would work, and never fenced through a
// guessed protocol.
var ErrUnsupportedScheme = errors.New("BMC address scheme not supported by bmcfence")

// ErrInvalidAddress is wrapped when a host's BMC address cannot be parsed,
// or carries something bmcfence cannot honour (a path outside
// /redfish/v1/Systems, an IPMI privilege level other than administrator).
var ErrInvalidAddress = errors.New("invalid BMC address")

// Address is what a BareMetalHost's spec.bmc.address means to bmcfence.
type Address struct {
	// Driver is the baremetal-operator's name for the scheme without its
	// transport suffix: redfish, idrac-virtualmedia, ipmi, ...
	Driver   string
	Endpoint bmc.Endpoint
	// System is the Redfish ComputerSystem Id from the address's path
	// (/redfish/v1/Systems/<Id>); empty means the BMC's only system.
	System string
	// Via, when the driver's power goes through another protocol than
	// its scheme names (irmc: IPMI), says so for the operator.
	Via string
}

// The baremetal-operator's drivers (pkg/hardwareutils/bmc, every one it
// has registered from v0.5 to v0.13) by what powers the host off. Read from
// each driver's factory and its Ironic driver_info and interfaces.

// redfishDrivers are the schemes whose power interface is Redfish (Ironic's
// redfish, idrac-redfish and ilo5-redfish hardware types; the -virtualmedia
// and -uefihttp variants differ only in how they boot), each with an
// optional +http or +https transport, https by default.
var redfishDrivers = map[string]bool{
	"redfish": true, "redfish-virtualmedia": true, "redfish-uefihttp": true,
	"idrac-redfish": true, "idrac-virtualmedia": true,
	"ilo5-redfish": true, "ilo5-virtualmedia": true,
}

// ipmiDrivers take no transport suffix; libvirt is BMO's name for a
// virtualbmc (IPMI) in front of a VM.
var ipmiDrivers = map[string]bool{"ipmi": true, "libvirt": true}

// ipmiPoweredDrivers speak a vendor protocol for everything else but power
// the host through IPMI at the same address, with the same credentials:
// the baremetal-operator's irmc driver (v0.5 to v0.12) gives Ironic's irmc
// hardware type power_interface ipmitool and ipmi_address = the iRMC's
// host; the address's port is the iRMC's HTTPS (SCCI) port, not IPMI's.
// bmcfence powers them as the baremetal-operator does.
var ipmiPoweredDrivers = map[string]string{
	"irmc": "Fujitsu iRMC: the baremetal-operator's irmc driver powers the host through IPMI at the iRMC's address (Ironic's ipmitool power interface), and so does bmcfence",
}

// otherDriver is a scheme whose protocol bmcfence does not speak, what it
// is, and the address of the same BMC's service that bmcfence (and the
// baremetal-operator) can use instead.
type otherDriver struct {
	// what the driver speaks, and when the baremetal-operator dropped it.
	what string
	// instead builds the working address from the host (bracketed when
	// IPv6), its port ("" if none) and the transport ("", http, https).
	instead func(host, port, transport string) string
	// why the instead address is the same BMC.
	why string
}

func withPort(host, port string) string {
	if port == "" {
		return host
	}
	return host + ":" + port
}

func redfishInstead(scheme string) func(host, port, transport string) string {
	return func(host, port, transport string) string {
		if transport == "http" {
			scheme += "+http"
		}
		return scheme + "://" + withPort(host, port)
	}
}

var otherDrivers = map[string]otherDriver{
	"idrac": {
		what:    "iDRAC over WS-Man (Ironic's idrac hardware type through python-dracclient; dropped by the baremetal-operator in v0.6.0)",
		instead: redfishInstead("idrac-redfish"),
		why:     "the same iDRAC serves Redfish (every iDRAC 9; iDRAC 7 and 8 from firmware 2.40.40.40)",
	},
	"ilo4": {
		what:    "iLO 4 through HPE's proliantutils over RIBCL, iLO's XML interface (Ironic's ilo hardware type; dropped by the baremetal-operator in v0.12.0)",
		instead: func(host, _, _ string) string { return "ipmi://" + host },
		why:     "iLO 4 serves IPMI over LAN on port 623 (enable \"IPMI/DCMI over LAN\" in iLO's Access Settings if it is off), as the baremetal-operator advises for iLO 4",
	},
	"ilo4-virtualmedia": {
		what:    "iLO 4 through HPE's proliantutils over RIBCL, iLO's XML interface (Ironic's ilo hardware type; dropped by the baremetal-operator in v0.12.0)",
		instead: func(host, _, _ string) string { return "ipmi://" + host },
		why:     "iLO 4 serves IPMI over LAN on port 623 (enable \"IPMI/DCMI over LAN\" in iLO's Access Settings if it is off), as the baremetal-operator advises for iLO 4",
	},
	"ilo5": {
		what:    "iLO 5 through HPE's proliantutils, not Redfish directly (Ironic's ilo5 hardware type; dropped by the baremetal-operator in v0.12.0)",
		instead: redfishInstead("ilo5-redfish"),
		why:     "iLO 5 serves standard Redfish on the same address",
	},
	"ibmc": {
		what:    "Huawei iBMC through python-ibmcclient (Ironic's ibmc hardware type; dropped by the baremetal-operator in v0.6.0)",
		instead: redfishInstead("redfish"),
		why:     "iBMC serves Redfish on the same address, which the baremetal-operator advises using",
	},
}

// dnsName is hardwareutils' checkDNSValid: a host that is not an IP must be
// a DNS name.
var dnsName = regexp.MustCompile(`^(([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])\.)*([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9\-]{0,61}[A-Za-z0-9])$`)

// bracket writes an IPv6 host as a URL needs it.
func bracket(host string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}

// redfishSystemPath is the only path form bmcfence maps to a system: Ironic
// hands the path to sushy as the system's URI, and bmcfence selects systems
// by their Id in the Systems collection.
var redfishSystemPath = regexp.MustCompile(`^/redfish/v1/Systems/([^/]+)/?$`)

// ParseAddress parses spec.bmc.address as the baremetal-operator does
// (hardwareutils/bmc GetParsedURL and its factories): SCHEME://HOST[:PORT][/PATH],
// SCHEME:HOST (no slashes), a bare IP[:PORT] or DNS name meaning IPMI. A
// bare DNSNAME:PORT reads as an unknown scheme there, and here. Each error
// is one line and wraps ErrUnsupportedScheme or ErrInvalidAddress.
func ParseAddress(address string) (Address, error) {
	// No user info in an address: it would end up in logs and Events.
	if strings.Contains(address, "@") {
		return Address{}, fmt.Errorf("%w: the address carries user info: credentials belong in spec.bmc.credentialsName", ErrInvalidAddress)
	}
	if address == "" {
		return Address{}, fmt.Errorf("%w: spec.bmc.address is empty", ErrInvalidAddress)
	}
	u, err := url.Parse(address)
	switch {
	case err != nil:
		// "10.0.0.5:623" and "[fd00::5]:623" fail url.Parse (a colon in
		// the first path segment): BMO reads them as IPMI HOST:PORT.
		if strings.Contains(address, ":") {
			if _, _, err2 := net.SplitHostPort(address); err2 != nil {
				return Address{}, fmt.Errorf("%w: %q: neither a URL nor HOST:PORT", ErrInvalidAddress, address)
			}
		}
		u = &url.URL{Scheme: "ipmi", Host: address}
	case u.Opaque != "":
		// "ipmi:10.0.0.5" → "ipmi://10.0.0.5".
		if u, err = url.Parse(strings.Replace(address, ":", "://", 1)); err != nil {
			return Address{}, fmt.Errorf("%w: %q: not a URL", ErrInvalidAddress, address)
		}
	case u.Scheme == "" && u.Hostname() == "":
		// A bare host: url.Parse read it as a path.
		if u, err = url.Parse("ipmi://" + address); err != nil {
			return Address{}, fmt.Errorf("%w: %q: not a host", ErrInvalidAddress, address)
		}
	}
	host := u.Hostname()
	if host == "" {
		return Address{}, fmt.Errorf("%w: %q has no host", ErrInvalidAddress, address)
	}
	if net.ParseIP(host) == nil && !dnsName.MatchString(host) {
		return Address{}, fmt.Errorf("%w: host %q is neither an IP address nor a DNS name", ErrInvalidAddress, host)
	}
	driver, transport, _ := strings.Cut(u.Scheme, "+")
	a := Address{Driver: driver, Endpoint: bmc.Endpoint{Host: host}}
	switch {
	case redfishDrivers[driver]:
		switch transport {
		case "", "https":
			a.Endpoint.Protocol, a.Endpoint.Scheme, a.Endpoint.Port = bmc.Redfish, "https", 443
		case "http":
			a.Endpoint.Protocol, a.Endpoint.Scheme, a.Endpoint.Port = bmc.Redfish, "http", 80
		default:
			return Address{}, fmt.Errorf("%w: scheme %q: %s takes +http or +https", ErrUnsupportedScheme, u.Scheme, driver)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return Address{}, fmt.Errorf("%w: %q: a Redfish address takes no query or fragment", ErrInvalidAddress, address)
		}
		switch path := u.Path; {
		case path == "" || path == "/":
		case redfishSystemPath.MatchString(path):
			a.System = redfishSystemPath.FindStringSubmatch(path)[1]
		default:
			return Address{}, fmt.Errorf("%w: system path %q: bmcfence selects a system as /redfish/v1/Systems/<Id>", ErrInvalidAddress, path)
		}
	case ipmiDrivers[driver] && transport == "":
		a.Endpoint.Protocol, a.Endpoint.Scheme, a.Endpoint.Port = bmc.IPMI, "ipmi", 623
		if u.Path != "" && u.Path != "/" {
			return Address{}, fmt.Errorf("%w: %q: an IPMI address takes no path", ErrInvalidAddress, address)
		}
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return Address{}, fmt.Errorf("%w: %q: bad query: %v", ErrInvalidAddress, address, err)
		}
		if p := q.Get("privilegelevel"); p != "" && !strings.EqualFold(p, "ADMINISTRATOR") {
			return Address{}, fmt.Errorf("%w: privilegelevel %q: bmcfence opens IPMI sessions as ADMINISTRATOR", ErrInvalidAddress, p)
		}
	case ipmiPoweredDrivers[driver] != "" && transport == "":
		// The port is the vendor service's; IPMI is on 623.
		if u.Path != "" && u.Path != "/" {
			return Address{}, fmt.Errorf("%w: %q: an %s address takes no path", ErrInvalidAddress, address, driver)
		}
		a.Endpoint.Protocol, a.Endpoint.Scheme, a.Endpoint.Port = bmc.IPMI, "ipmi", 623
		a.Via = fmt.Sprintf("%s:// is %s (ipmi://%s)", driver, ipmiPoweredDrivers[driver], bracket(host))
		return a, nil
	case otherDrivers[driver].what != "":
		o := otherDrivers[driver]
		if transport != "" && transport != "http" && transport != "https" {
			return Address{}, fmt.Errorf("%w: scheme %q is not a baremetal-operator BMC type", ErrUnsupportedScheme, u.Scheme)
		}
		return Address{}, fmt.Errorf("%w: scheme %q is %s, which bmcfence does not speak (it speaks Redfish and IPMI); %s: set spec.bmc.address to %s", ErrUnsupportedScheme, u.Scheme, o.what, o.why, o.instead(bracket(host), u.Port(), transport))
	default:
		return Address{}, fmt.Errorf("%w: scheme %q is not a baremetal-operator BMC type (a bare HOST:PORT is IPMI only with an IP address; write ipmi://HOST:PORT)", ErrUnsupportedScheme, u.Scheme)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Address{}, fmt.Errorf("%w: port %q must be 1-65535", ErrInvalidAddress, p)
		}
		a.Endpoint.Port = n
	}
	return a, nil
}
