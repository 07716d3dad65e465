package bmc

import (
	"encoding/hex"
	"strings"
)

// SMBIOSSwapped reports whether a and b are the same UUID except that the
// first three fields are byte-swapped. SMBIOS 2.6+ stores those fields
// little-endian; firmware and kernels disagree on whether to swap them, so
// a BMC and the node's kernel can print the same machine's UUID differently.
func SMBIOSSwapped(a, b string) bool {
	ab, ok1 := uuidBytes(a)
	bb, ok2 := uuidBytes(b)
	if !ok1 || !ok2 {
		return false
	}
	swapped := ab
	for _, f := range [][2]int{{0, 4}, {4, 6}, {6, 8}} {
		for i, j := f[0], f[1]-1; i < j; i, j = i+1, j-1 {
			swapped[i], swapped[j] = swapped[j], swapped[i]
		}
	}
	return swapped == bb
}

func uuidBytes(s string) ([16]byte, bool) {
	var out [16]byte
	h := strings.ReplaceAll(strings.TrimSpace(s), "-", "")
	if len(h) != 32 {
		return out, false
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return out, false
	}
	copy(out[:], b)
	return out, true
}
