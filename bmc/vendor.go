package bmc

import "strings"

// Vendors a BMC metric may name: a closed list, so that the label's
// cardinality stays bounded whatever a BMC reports. VendorOther is a
// manufacturer not listed; VendorUnknown is a BMC not identified yet (or
// one that reports none: IPMI's Get System GUID names no manufacturer).
const (
	VendorUnknown = "unknown"
	VendorOther   = "other"
)

// vendorNames: a word of the system's Manufacturer (lower case) and the
// vendor it names. The mock and the emulators are "emulator": their
// timings and faults are not a vendor's.
var vendorNames = []struct{ word, vendor string }{
	{"dell", "dell"},
	{"hpe", "hpe"},
	{"hewlett", "hpe"},
	{"lenovo", "lenovo"},
	{"supermicro", "supermicro"},
	{"openbmc", "openbmc"},
	{"american megatrends", "ami"},
	{"nvidia", "nvidia"},
	{"fujitsu", "fujitsu"},
	{"cisco", "cisco"},
	{"huawei", "huawei"},
	{"inspur", "inspur"},
	{"intel", "intel"},
	{"gigabyte", "gigabyte"},
	{"quanta", "quanta"},
	{"asrock", "asrock"},
	{"sushy", "emulator"},
	{"bmcfence", "emulator"},
}

// Vendor names the vendor of a system's Manufacturer ("Dell Inc." is
// "dell"), one of a closed list, VendorOther or VendorUnknown.
func Vendor(manufacturer string) string {
	m := strings.ToLower(strings.TrimSpace(manufacturer))
	if m == "" {
		return VendorUnknown
	}
	for _, v := range vendorNames {
		if strings.Contains(m, v.word) {
			return v.vendor
		}
	}
	return VendorOther
}

// Vendors lists every value Vendor can return.
func Vendors() []string {
	out := []string{VendorUnknown, VendorOther}
	for _, v := range vendorNames {
		if !contains(out, v.vendor) {
			out = append(out, v.vendor)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
