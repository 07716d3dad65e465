package bmc_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
)

// RedactCredentials finds the password in every form a BMC or a library may
// echo it in (bmctest.Forms: as is, JSON-escaped, every character a \u
// escape, URL-escaped in either case, the Basic token), and in a mix of
// them; it leaves no piece of it, 4 bytes or longer.
func TestRedactCredentialsFindsEveryForm(t *testing.T) {
	for _, pw := range bmctest.Passwords {
		creds := bmc.Credentials{Username: "admin", Password: bmc.Secret(pw)}
		for name, form := range bmctest.Forms("admin", pw) {
			msg := "login refused: {" + form + "} and again " + form + "."
			got := bmc.RedactCredentials(msg, creds)
			for _, secret := range []string{pw, form} {
				if piece := bmctest.Leak(got, secret); piece != "" {
					t.Errorf("password %q, %s form: %q carries %q", pw, name, got, piece)
				}
			}
			if !strings.HasPrefix(got, "login refused: {") || !strings.HasSuffix(got, ".") {
				t.Errorf("password %q, %s form: the text around it changed: %q", pw, name, got)
			}
		}
	}
	// A mix: the first half URL-escaped, the rest JSON-escaped.
	pw := `Qx"7'Jw"`
	mixed := url.QueryEscape(pw[:4]) + `\u0027Jw\"`
	if got := bmc.RedactCredentials("body: "+mixed, bmc.Credentials{Password: bmc.Secret(pw)}); got != "body: [redacted]" {
		t.Errorf("mixed escapes: %q", got)
	}
	// Short passwords are not searched for (they would garble words).
	if got := bmc.RedactCredentials("a bad day", bmc.Credentials{Password: "bad"}); got != "a bad day" {
		t.Errorf("a 3-byte password garbled the text: %q", got)
	}
}
