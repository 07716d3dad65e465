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
// bmcfence does not speak (iDRAC WS-Man, iLO RIBCL, iRMC, iBMC, ...): such a
// host is reported, never fenced through a guessed protocol.
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
}

// redfishDrivers are the baremetal-operator schemes whose power interface
// is Redfish (Ironic's redfish, idrac-redfish and ilo5-redfish hardware
// types; the -virtualmedia variants differ only in how they boot), each
// with an optional +http or +https transport, https by default.
// redfish-uefihttp came after hardwareutils v0.5.1 and is Redfish too.
var redfishDrivers = map[string]bool{
	"redfish": true, "redfish-virtualmedia": true, "redfish-uefihttp": true,
	"idrac-redfish": true, "idrac-virtualmedia": true,
	"ilo5-redfish": true, "ilo5-virtualmedia": true,
}

// ipmiDrivers take no transport suffix; libvirt is BMO's name for a
// virtualbmc (IPMI) in front of a VM.
var ipmiDrivers = map[string]bool{"ipmi": true, "libvirt": true}

// otherDrivers are the baremetal-operator schemes whose protocol bmcfence
// does not speak: named, so the report says what the driver is.
var otherDrivers = map[string]string{
	"idrac":             "iDRAC over WS-Man",
	"ilo4":              "iLO 4 over RIBCL",
	"ilo4-virtualmedia": "iLO 4 over RIBCL",
	"ilo5":              "iLO 5 over RIBCL/proliantutils",
	"irmc":              "Fujitsu iRMC",
	"ibmc":              "Huawei iBMC",
}

// dnsName is hardwareutils' checkDNSValid: a host that is not an IP must be
// a DNS name.
var dnsName = regexp.MustCompile(`^(([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])\.)*([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9\-]{0,61}[A-Za-z0-9])$`)

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
	case otherDrivers[driver] != "":
		return Address{}, fmt.Errorf("%w: scheme %q is %s: bmcfence speaks Redfish and IPMI only (use a redfish:// or ipmi:// address for this BMC, or list the node in inventory.nodes)", ErrUnsupportedScheme, u.Scheme, otherDrivers[driver])
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
