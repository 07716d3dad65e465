package ipmi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
)

// A library's error text is redacted before it is made one line and cut to
// length (issue 17, defect 6, the same order bug as Redfish's): a
// passphrase with two spaces in a row still matches, and no cut leaves a
// prefix of it, wherever the cut falls.
func TestIPMIErrorsNeverCarryAPieceOfThePassword(t *testing.T) {
	paths := map[string]func(filler, pw string) error{
		// go-ipmi's own text: classified by its words.
		"library": func(filler, pw string) error {
			return errors.New("rakp2 authcode not equal:" + filler + pw + "\ttail")
		},
		// An error already carrying our sentinel.
		"wrapped": func(filler, pw string) error { return fmt.Errorf("%w: %s%s\n  more", bmc.ErrBMC, filler, pw) },
	}
	for name, mk := range paths {
		t.Run(name, func(t *testing.T) {
			bad := 0
			for _, pw := range bmctest.Passwords {
				c := &Client{target: bmc.Target{Credentials: bmc.Credentials{Username: "admin", Password: bmc.Secret(pw)}}, addr: "10.0.0.6:623"}
				// Wherever the cut at 300 bytes falls, the prefix before the
				// filler included.
				for n := 240; n <= 301; n++ {
					text := c.classify(context.Background(), mk(strings.Repeat("~", n), pw)).Error()
					if piece := bmctest.Leak(text, pw); piece != "" || strings.Contains(text, "\n") {
						if bad++; bad <= 3 {
							t.Errorf("password %q at %d: %q carries %q (or spans lines)", pw, n, text, piece)
						}
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d error texts carry a piece of the password or span lines", bad)
			}
		})
	}
}
