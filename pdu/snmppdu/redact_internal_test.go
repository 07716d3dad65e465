package snmppdu

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/pdu"
)

// Issue 17, defect 6, in the SNMP client: a library's or an agent's text
// is redacted (community, passphrases) before it is made one line, so a
// community with two spaces in a row still matches.
func TestSNMPErrorsNeverCarryAPieceOfTheCommunity(t *testing.T) {
	bad := 0
	for _, pw := range bmctest.Passwords {
		c := &Client{t: Target{Community: bmc.Secret(pw), AuthPassword: bmc.Secret(pw + "-auth"), PrivPassword: bmc.Secret(pw + "-priv")}}
		for name, err := range map[string]error{
			"library": fmt.Errorf("request timeout after sending community %q\nretries exhausted: %s", pw, pw),
			"wrapped": fmt.Errorf("%w: the agent echoed\n  %s", pdu.ErrDevice, pw),
		} {
			text := c.classify(context.Background(), err).Error()
			if piece := bmctest.Leak(text, pw); piece != "" || strings.Contains(text, "\n") {
				if bad++; bad <= 3 {
					t.Errorf("%s error, community %q: %q carries %q (or spans lines)", name, pw, text, piece)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d error texts carry a piece of the community or span lines", bad)
	}
}
