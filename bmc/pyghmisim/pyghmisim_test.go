package pyghmisim

import "testing"

// The GUID goes to the BMC in SMBIOS byte order, so a client that decodes
// Get System GUID the SMBIOS way reads back the string it was given.
func TestSMBIOSBytes(t *testing.T) {
	g, err := smbiosBytes(DefaultGUID)
	if err != nil {
		t.Fatal(err)
	}
	want := [16]byte{0x44, 0x45, 0x4c, 0x4c, 0x42, 0x00, 0x10, 0x44, 0x80, 0x30, 0xb5, 0xc0, 0x4f, 0x4d, 0x31, 0x32}
	if g != want {
		t.Errorf("smbiosBytes(%s) = %x, want %x", DefaultGUID, g, want)
	}
	if _, err := smbiosBytes("4c4c4544"); err == nil {
		t.Error("a short GUID was accepted")
	}
}

func TestBehaviorLine(t *testing.T) {
	for b, want := range map[Behavior]string{
		{}:                                  "honest 0.000 0.000\n",
		{Mode: Refusing, Delay: 1500 * 1e6}: "refusing 1.500 0.000\n",
		{Mode: Lying, CycleDwell: 3 * 1e9}:  "lying 0.000 3.000\n",
	} {
		if got := behaviorLine(b); got != want {
			t.Errorf("behaviorLine(%+v) = %q, want %q", b, got, want)
		}
	}
}
