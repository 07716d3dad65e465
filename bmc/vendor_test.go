package bmc

import "testing"

func TestVendorIsOneOfAClosedList(t *testing.T) {
	tests := map[string]string{
		"Dell Inc.":                         "dell",
		"HPE":                               "hpe",
		"Hewlett Packard Enterprise":        "hpe",
		"Lenovo":                            "lenovo",
		"Supermicro":                        "supermicro",
		"OpenBMC":                           "openbmc",
		"NVIDIA":                            "nvidia",
		"American Megatrends International": "ami",
		"Sushy Emulator":                    "emulator",
		"bmcfence":                          "emulator",
		"":                                  VendorUnknown,
		"  ":                                VendorUnknown,
		"Acme Servers of Springfield":       VendorOther,
	}
	for m, want := range tests {
		if got := Vendor(m); got != want {
			t.Errorf("Vendor(%q) = %q, want %q", m, got, want)
		}
	}
	all := Vendors()
	for _, m := range []string{"Dell Inc.", "x", "", "quanta cloud"} {
		if v := Vendor(m); !contains(all, v) {
			t.Errorf("Vendor(%q) = %q is not in Vendors() %v", m, v, all)
		}
	}
}
