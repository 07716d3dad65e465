package bmctest

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"
)

// MinLeak is the shortest piece of a password that counts as a leak: the
// redaction does not search for passwords shorter than this (bmc.Redact),
// and three characters say nothing a guess would not.
const MinLeak = 4

// Leak returns a piece of password, at least MinLeak bytes long and cut on
// character boundaries, that text contains, or "" when there is none. A
// prefix left by a cut, a suffix, a middle left by collapsed whitespace:
// each holds such a piece. The caller makes sure the rest of the text
// shares no such piece with the password (fixed words, filler).
func Leak(text, password string) string {
	for i := 0; i < len(password); {
		// The shortest piece from i: any longer one contains it.
		j := i
		for j < len(password) && j-i < MinLeak {
			_, size := utf8.DecodeRuneInString(password[j:])
			j += size
		}
		if j-i < MinLeak {
			return ""
		}
		if p := password[i:j]; strings.Contains(text, p) {
			return p
		}
		_, size := utf8.DecodeRuneInString(password[i:])
		i += size
	}
	return ""
}

// Passwords with every character the redaction must see through:
// spaces (two in a row), quotes, backslashes, slashes, a plus, a percent,
// control characters, non-ASCII letters and a character outside the
// Basic Multilingual Plane. None shares a 4-byte piece with ordinary
// error text.
var Passwords = []string{
	"Zq#  9vK",              // two spaces in a row
	`Qx"7'Jw"`,              // quotes
	`Vb\\k\"P`,              // backslashes, an escaped-looking quote
	"Ry/9+W%2q",             // slash, plus, percent
	"Xt 8\tHz\nQ",           // tab and newline
	"Ñø€ßµ7Kq",              // non-ASCII
	"Gk😀9Wx z",              // outside the BMP, a space
	"AAAAbbbbCCCCddddEEEE7", // repetitive
}

// Forms lists ways a BMC or a library may echo a password inside an
// error body: as is, JSON-escaped (by encoding/json, and with every
// character as a \u escape), URL-escaped (query and path, and with
// lowercase hex), and in the HTTP Basic token with user.
func Forms(user, password string) map[string]string {
	var u strings.Builder
	for _, r := range password {
		if r > 0xFFFF {
			r1, r2 := utf16Pair(r)
			fmt.Fprintf(&u, `\u%04X\u%04x`, r1, r2)
			continue
		}
		fmt.Fprintf(&u, `\u%04x`, r)
	}
	jsonQuoted := func(s string) string {
		var b strings.Builder
		for _, r := range s {
			switch r {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\n':
				b.WriteString(`\n`)
			case '\t':
				b.WriteString(`\t`)
			case '/':
				b.WriteString(`\/`)
			default:
				b.WriteRune(r)
			}
		}
		return b.String()
	}
	return map[string]string{
		"raw":             password,
		"json":            jsonQuoted(password),
		"json \\u":        u.String(),
		"query escape":    url.QueryEscape(password),
		"path escape":     url.PathEscape(password),
		"lowercase hex":   lowerHex(url.QueryEscape(password)),
		"basic token":     base64.StdEncoding.EncodeToString([]byte(user + ":" + password)),
		"basic token raw": base64.RawStdEncoding.EncodeToString([]byte(user + ":" + password)),
	}
}

// lowerHex writes the hex digits of %XX escapes in lower case.
func lowerHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lower(b[i+1]), lower(b[i+2])
		}
	}
	return string(b)
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

func utf16Pair(r rune) (rune, rune) {
	r -= 0x10000
	return 0xD800 + (r>>10)&0x3FF, 0xDC00 + r&0x3FF
}
