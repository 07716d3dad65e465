package metal3

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/bmcfence/bmcfence/bmc"
)

func redfishAt(driver, scheme, host string, port int, system string) Address {
	return Address{Driver: driver, Endpoint: bmc.Endpoint{Protocol: bmc.Redfish, Scheme: scheme, Host: host, Port: port}, System: system}
}

func ipmiAt(driver, host string, port int) Address {
	return Address{Driver: driver, Endpoint: bmc.Endpoint{Protocol: bmc.IPMI, Scheme: "ipmi", Host: host, Port: port}}
}

func irmcAt(host string) Address {
	a := ipmiAt("irmc", host, 623)
	a.Via = "irmc:// is Fujitsu iRMC: the baremetal-operator's irmc driver powers the host through IPMI at the iRMC's address (Ironic's ipmitool power interface), and so does bmcfence (ipmi://" + bracket(host) + ")"
	return a
}

func TestParseAddress(t *testing.T) {
	tests := []struct {
		address string
		want    Address
	}{
		// Redfish: https unless +http says otherwise; the path picks the system.
		{"redfish://10.0.0.5", redfishAt("redfish", "https", "10.0.0.5", 443, "")},
		{"redfish://10.0.0.5/", redfishAt("redfish", "https", "10.0.0.5", 443, "")},
		{"redfish://10.0.0.5/redfish/v1/Systems/1", redfishAt("redfish", "https", "10.0.0.5", 443, "1")},
		{"redfish://10.0.0.5:8443/redfish/v1/Systems/System.Embedded.1/", redfishAt("redfish", "https", "10.0.0.5", 8443, "System.Embedded.1")},
		{"redfish+https://bmc.example.com/redfish/v1/Systems/1", redfishAt("redfish", "https", "bmc.example.com", 443, "1")},
		{"redfish+http://127.0.0.1:8000/redfish/v1/Systems/n1", redfishAt("redfish", "http", "127.0.0.1", 8000, "n1")},
		{"REDFISH://10.0.0.5", redfishAt("redfish", "https", "10.0.0.5", 443, "")},
		{"redfish:10.0.0.5", redfishAt("redfish", "https", "10.0.0.5", 443, "")},
		{"redfish://[fd00::5]/redfish/v1/Systems/1", redfishAt("redfish", "https", "fd00::5", 443, "1")},
		{"redfish+http://[fd00::5]:8000", redfishAt("redfish", "http", "fd00::5", 8000, "")},
		{"redfish-virtualmedia://10.0.0.5/redfish/v1/Systems/1", redfishAt("redfish-virtualmedia", "https", "10.0.0.5", 443, "1")},
		{"redfish-virtualmedia+http://10.0.0.5", redfishAt("redfish-virtualmedia", "http", "10.0.0.5", 80, "")},
		{"redfish-uefihttp://10.0.0.5", redfishAt("redfish-uefihttp", "https", "10.0.0.5", 443, "")},
		{"idrac-redfish://10.0.0.6/redfish/v1/Systems/System.Embedded.1", redfishAt("idrac-redfish", "https", "10.0.0.6", 443, "System.Embedded.1")},
		{"idrac-redfish+https://10.0.0.6", redfishAt("idrac-redfish", "https", "10.0.0.6", 443, "")},
		{"idrac-virtualmedia://10.0.0.6/redfish/v1/Systems/System.Embedded.1", redfishAt("idrac-virtualmedia", "https", "10.0.0.6", 443, "System.Embedded.1")},
		{"idrac-virtualmedia+http://10.0.0.6", redfishAt("idrac-virtualmedia", "http", "10.0.0.6", 80, "")},
		{"ilo5-redfish://10.0.0.7/redfish/v1/Systems/1", redfishAt("ilo5-redfish", "https", "10.0.0.7", 443, "1")},
		{"ilo5-virtualmedia+https://10.0.0.7:443", redfishAt("ilo5-virtualmedia", "https", "10.0.0.7", 443, "")},
		// IPMI: ipmi://, ipmi:, libvirt://, and bare IP[:PORT] or DNS name.
		{"ipmi://10.0.0.8", ipmiAt("ipmi", "10.0.0.8", 623)},
		{"ipmi://10.0.0.8:6230", ipmiAt("ipmi", "10.0.0.8", 6230)},
		{"ipmi:10.0.0.8", ipmiAt("ipmi", "10.0.0.8", 623)},
		{"ipmi://[fd00::8]:6230", ipmiAt("ipmi", "fd00::8", 6230)},
		{"ipmi://10.0.0.8?privilegelevel=ADMINISTRATOR", ipmiAt("ipmi", "10.0.0.8", 623)},
		{"libvirt://192.168.122.1:6233/?abc=def", ipmiAt("libvirt", "192.168.122.1", 6233)},
		{"10.0.0.8", ipmiAt("ipmi", "10.0.0.8", 623)},
		{"10.0.0.8:6230", ipmiAt("ipmi", "10.0.0.8", 6230)},
		{"[fd00::8]:6230", ipmiAt("ipmi", "fd00::8", 6230)},
		{"bmc-8.example.com", ipmiAt("ipmi", "bmc-8.example.com", 623)},
		// irmc: the baremetal-operator powers it through IPMI on 623 at the
		// iRMC's host (its port is the iRMC's HTTPS port), and so do we.
		{"irmc://10.0.0.9", irmcAt("10.0.0.9")},
		{"irmc://10.0.0.9:443", irmcAt("10.0.0.9")},
		{"irmc://[fd00::9]", irmcAt("fd00::9")},
	}
	for _, tt := range tests {
		t.Run(tt.address, func(t *testing.T) {
			got, err := ParseAddress(tt.address)
			if err != nil {
				t.Fatalf("ParseAddress(%q): %v", tt.address, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseAddress(%q) (-want +got):\n%s", tt.address, diff)
			}
		})
	}
}

func TestParseAddressRefuses(t *testing.T) {
	tests := []struct {
		address string
		want    error
		reason  string
	}{
		{"", ErrInvalidAddress, "spec.bmc.address is empty"},
		{"redfish://admin:pw@10.0.0.5", ErrInvalidAddress, "carries user info"},
		// Each driver bmcfence does not speak: what it speaks, and the
		// address of the same BMC's service that works.
		{"idrac://10.0.0.6", ErrUnsupportedScheme, `scheme "idrac" is iDRAC over WS-Man`},
		{"idrac://10.0.0.6", ErrUnsupportedScheme, "the same iDRAC serves Redfish (every iDRAC 9; iDRAC 7 and 8 from firmware 2.40.40.40): set spec.bmc.address to idrac-redfish://10.0.0.6"},
		{"idrac+https://10.0.0.6:8443", ErrUnsupportedScheme, `scheme "idrac+https" is iDRAC over WS-Man`},
		{"idrac+https://10.0.0.6:8443", ErrUnsupportedScheme, "set spec.bmc.address to idrac-redfish://10.0.0.6:8443"},
		{"idrac+http://10.0.0.6", ErrUnsupportedScheme, "set spec.bmc.address to idrac-redfish+http://10.0.0.6"},
		{"ilo4://10.0.0.7", ErrUnsupportedScheme, "iLO 4 through HPE's proliantutils over RIBCL"},
		{"ilo4://10.0.0.7:443", ErrUnsupportedScheme, "iLO 4 serves IPMI over LAN on port 623"},
		{"ilo4://10.0.0.7:443", ErrUnsupportedScheme, "set spec.bmc.address to ipmi://10.0.0.7"},
		{"ilo4-virtualmedia://[fd00::7]", ErrUnsupportedScheme, "set spec.bmc.address to ipmi://[fd00::7]"},
		{"ilo5://10.0.0.7", ErrUnsupportedScheme, "iLO 5 through HPE's proliantutils, not Redfish directly"},
		{"ilo5://10.0.0.7", ErrUnsupportedScheme, "iLO 5 serves standard Redfish on the same address: set spec.bmc.address to ilo5-redfish://10.0.0.7"},
		{"ibmc+https://10.0.0.7", ErrUnsupportedScheme, "Huawei iBMC through python-ibmcclient"},
		{"ibmc+https://10.0.0.7", ErrUnsupportedScheme, "set spec.bmc.address to redfish://10.0.0.7"},
		{"irmc://10.0.0.7/x", ErrInvalidAddress, "an irmc address takes no path"},
		{"irmc+https://10.0.0.7", ErrUnsupportedScheme, `scheme "irmc+https" is not a baremetal-operator BMC type`},
		{"https://10.0.0.5", ErrUnsupportedScheme, `scheme "https" is not a baremetal-operator BMC type`},
		{"bmc.example.com:623", ErrUnsupportedScheme, `scheme "bmc.example.com" is not a baremetal-operator BMC type`},
		{"redfish+ftp://10.0.0.5", ErrUnsupportedScheme, "redfish takes +http or +https"},
		{"ipmi+https://10.0.0.8", ErrUnsupportedScheme, `scheme "ipmi+https" is not a baremetal-operator BMC type`},
		{"redfish://10.0.0.5/foo", ErrInvalidAddress, `system path "/foo": bmcfence selects a system as /redfish/v1/Systems/<Id>`},
		{"redfish://10.0.0.5/redfish/v1/Systems/1/Bios", ErrInvalidAddress, "system path"},
		{"redfish://10.0.0.5/redfish/v1/Systems/1?x=1", ErrInvalidAddress, "no query or fragment"},
		{"ipmi://10.0.0.8/path", ErrInvalidAddress, "an IPMI address takes no path"},
		{"ipmi://10.0.0.8?privilegelevel=OPERATOR", ErrInvalidAddress, `privilegelevel "OPERATOR"`},
		{"redfish://10.0.0.5:0", ErrInvalidAddress, `port "0" must be 1-65535`},
		{"ipmi://10.0.0.8:70000", ErrInvalidAddress, `port "70000" must be 1-65535`},
		{"redfish://my-.example.com", ErrInvalidAddress, `host "my-.example.com" is neither an IP address nor a DNS name`},
		{"[fd00::8]", ErrInvalidAddress, "neither a URL nor HOST:PORT"},
		{"fd00::8", ErrInvalidAddress, `"fd00::8" has no host`},
		{"redfish://10.0.0.5:abc", ErrInvalidAddress, "neither a URL nor HOST:PORT"},
		{"redfish://", ErrInvalidAddress, "has no host"},
	}
	for _, tt := range tests {
		t.Run(tt.address+" "+tt.reason, func(t *testing.T) {
			got, err := ParseAddress(tt.address)
			if !errors.Is(err, tt.want) {
				t.Fatalf("ParseAddress(%q) = %+v, %v; want an error wrapping %v", tt.address, got, err, tt.want)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.reason) || strings.Contains(msg, "\n") {
				t.Errorf("ParseAddress(%q) error %q: want one line containing %q", tt.address, msg, tt.reason)
			}
			if strings.Contains(err.Error(), "pw") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

// Whatever a host's owner writes: no panic, a refusal wraps one of the two
// sentinels in one line, and an accepted address is one bmc.ParseAddress
// reads back as the same endpoint.
func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{
		"redfish://10.0.0.5/redfish/v1/Systems/1", "redfish+http://[fd00::5]:8000", "idrac-virtualmedia://h/redfish/v1/Systems/System.Embedded.1/",
		"ipmi:10.0.0.8", "10.0.0.8:6230", "[fd00::8]:6230", "bmc.example.com", "libvirt://192.168.122.1:6233/?abc=def",
		"idrac://10.0.0.6", "irmc://10.0.0.9:443", "ilo4://[fd00::7]", "bmc.example.com:623", "redfish://admin:pw@h", "", "fd00::8", "redfish://h:0", "ipmi://h?privilegelevel=OPERATOR",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, address string) {
		a, err := ParseAddress(address)
		if err != nil {
			if !errors.Is(err, ErrInvalidAddress) && !errors.Is(err, ErrUnsupportedScheme) {
				t.Fatalf("ParseAddress(%q): %v wraps neither sentinel", address, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("ParseAddress(%q): error %q is not one line", address, err)
			}
			return
		}
		back, err := bmc.ParseAddress(a.Endpoint.String())
		if err != nil {
			t.Fatalf("ParseAddress(%q) = %+v, whose endpoint %q bmc.ParseAddress refuses: %v", address, a, a.Endpoint.String(), err)
		}
		if back != a.Endpoint {
			t.Fatalf("ParseAddress(%q) endpoint %+v reads back as %+v", address, a.Endpoint, back)
		}
	})
}
