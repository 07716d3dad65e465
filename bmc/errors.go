package bmc

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/bmcfence/bmcfence/internal/mutant"
)

// Sentinel errors. Adapters wrap one of them inside an *OpError so callers
// can branch with errors.Is and operators read one line that says what failed.
var (
	ErrUnreachable   = errors.New("BMC unreachable")
	ErrTimeout       = errors.New("BMC did not answer in time")
	ErrAuth          = errors.New("BMC rejected the credentials")
	ErrTLS           = errors.New("BMC certificate not trusted")
	ErrUnsupported   = errors.New("operation not supported by the BMC")
	ErrBMC           = errors.New("BMC answered with an error")
	ErrSystem        = errors.New("BMC system selection failed")
	ErrInvalidTarget = errors.New("invalid BMC target")
	// ErrAlreadyInState: the BMC refused a power command because the
	// system already is (or claims to be) in the requested state: iDRAC's
	// 409, iLO's 400 InvalidOperationForSystemState, IPMI completion code
	// 0xD5. The BMC did nothing. It is not an error that stops a fence, and
	// it is not acceptance either: BMCs answer the same during a restart's
	// off-dwell, so an Off after it is not an Off we caused.
	ErrAlreadyInState = errors.New("BMC did nothing: the system is already in that state")
	// ErrBusy: the BMC said it cannot take the command now (iDRAC's SYS518
	// "not ready after a previous operation", a 503 with Retry-After, a
	// system in transition) and kept saying so through every retry the
	// operation's time allowed. Nothing was done.
	ErrBusy = errors.New("BMC busy: it did not take the command")
)

// Op names an operation in errors and metrics.
type Op string

const (
	OpPowerStatus Op = "power-status"
	OpPowerOff    Op = "power-off"
	OpPowerOn     Op = "power-on"
	OpIdentity    Op = "identity"
)

// OpError is the one error type adapters return. It names the operation and
// the BMC (never its credentials) and wraps a sentinel.
type OpError struct {
	Op       Op
	Protocol Protocol
	Address  string
	System   string
	Err      error
}

func (e *OpError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", e.Protocol, e.Op, e.Address)
	if e.System != "" {
		fmt.Fprintf(&b, " system %q", e.System)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *OpError) Unwrap() error { return e.Err }

// Reason is a short, stable label for an error: a metric label, an exit-code
// selector, an Event reason suffix.
func Reason(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrAlreadyInState):
		return "already"
	case errors.Is(err, ErrBusy):
		return "busy"
	case errors.Is(err, ErrAuth):
		return "auth"
	case errors.Is(err, ErrTLS):
		return "tls"
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrUnreachable):
		return "unreachable"
	case errors.Is(err, ErrUnsupported):
		return "unsupported"
	case errors.Is(err, ErrSystem):
		return "system"
	case errors.Is(err, ErrInvalidTarget):
		return "invalid-target"
	case errors.Is(err, ErrBMC):
		return "bmc-error"
	default:
		return "error"
	}
}

// Redact replaces every occurrence of secret in msg, in every form
// RedactCredentials knows. Adapters pass library error text through it as a
// last line of defence: a library that echoes a request body must not leak
// the password into our errors. Secrets shorter than four bytes are not
// searched for, because replacing them would garble ordinary words while
// protecting nothing real.
func Redact(msg string, secret Secret) string {
	return RedactCredentials(msg, Credentials{Password: secret})
}

// minSecret is the shortest password searched for.
const minSecret = 4

// RedactCredentials removes every form of the login a BMC or a library may
// echo: the password as is, or with any of its characters in any mix of
// JSON string escapes (\" \\ \/ \b \f \n \r \t, \uXXXX and surrogate
// pairs, either case) and URL escapes (%XX in either case, + for a space);
// and the HTTP Basic token (base64 of "user:password", padded or not),
// which a BMC that dumps the request headers into its error body would
// otherwise hand back.
//
// Redact the text as the BMC wrote it, before anything else touches it:
// collapsing its whitespace splits a passphrase with two spaces in a row,
// and cutting it to length leaves a prefix of the password (issue 17).
func RedactCredentials(msg string, c Credentials) string {
	if len(c.Password) < minSecret {
		return msg
	}
	pw := c.Password.Reveal()
	for _, token := range []string{
		base64.StdEncoding.EncodeToString([]byte(c.Username + ":" + pw)),
		base64.RawStdEncoding.EncodeToString([]byte(c.Username + ":" + pw)),
	} {
		msg = strings.ReplaceAll(msg, token, redacted)
	}
	if mutant.On(mutant.RedactEncodedForms) {
		// The mutant: the forms one by one, as before issue 17.
		for _, f := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw), strings.Trim(fmt.Sprintf("%q", pw), `"`)} {
			msg = strings.ReplaceAll(msg, f, redacted)
		}
		return msg
	}
	return replaceEncoded(msg, pw)
}

// replaceEncoded replaces every match of secret in msg, each character of
// it written as is or escaped (escapedAt), with redacted; matches are
// taken leftmost and longest.
func replaceEncoded(msg, secret string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(msg); {
		end := -1
		if mayStart(msg[i], secret[0]) {
			end = matchEncoded(msg, i, secret)
		}
		if end < 0 {
			i++
			continue
		}
		b.WriteString(msg[last:i])
		b.WriteString(redacted)
		last, i = end, end
	}
	if last == 0 {
		return msg
	}
	b.WriteString(msg[last:])
	return b.String()
}

// containsEncoded reports whether msg holds secret in any form
// replaceEncoded finds.
func containsEncoded(msg, secret string) bool {
	for i := range len(msg) {
		if mayStart(msg[i], secret[0]) && matchEncoded(msg, i, secret) >= 0 {
			return true
		}
	}
	return false
}

// mayStart reports whether a match of a secret whose first byte is first
// may begin with the byte c: that byte, or an escape.
func mayStart(c, first byte) bool {
	return c == first || c == '%' || c == '\\' || c == '+'
}

// matchEncoded returns the end of the longest match of secret that begins
// at msg[i], or -1. It follows every way each character may be written at
// once (a set of positions), so a choice that fails later never hides one
// that would have matched.
func matchEncoded(msg string, i int, secret string) int {
	at := []int{i}
	for _, r := range secret {
		var next []int
		for _, p := range at {
			for _, q := range escapedAt(msg, p, r) {
				if !slices.Contains(next, q) {
					next = append(next, q)
				}
			}
		}
		if len(next) == 0 {
			return -1
		}
		at = next
	}
	return slices.Max(at)
}

// escapedAt returns the ends of every way r is written at msg[p]: as is,
// as a JSON escape, or with each of its UTF-8 bytes as is or %XX (+ for a
// space).
func escapedAt(msg string, p int, r rune) []int {
	// Byte by byte: as is, %XX, or + for a space. A character's bytes may
	// mix the two (a library escapes only what it must), and a byte may
	// read either way ('%' as is, then "25"; or "%25"): every way is kept.
	var buf [utf8.UTFMax]byte
	ends := []int{p}
	for _, c := range buf[:utf8.EncodeRune(buf[:], r)] {
		var next []int
		for _, q := range ends {
			if q < len(msg) && msg[q] == c {
				next = append(next, q+1)
			}
			if q+2 < len(msg) && msg[q] == '%' && hexByte(msg[q+1], msg[q+2]) == int(c) {
				next = append(next, q+3)
			}
			if c == ' ' && q < len(msg) && msg[q] == '+' {
				next = append(next, q+1)
			}
		}
		ends = next
	}
	// A JSON escape of the whole character.
	if p+1 < len(msg) && msg[p] == '\\' {
		if short, ok := jsonShort[r]; ok && msg[p+1] == short {
			ends = append(ends, p+2)
		}
		if v, n := unicodeEscape(msg[p:]); n > 0 && v == r {
			ends = append(ends, p+n)
		}
	}
	return ends
}

// jsonShort are the two-character JSON escapes, by the character they
// stand for.
var jsonShort = map[rune]byte{'"': '"', '\\': '\\', '/': '/', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}

// unicodeEscape reads a \uXXXX escape, or a surrogate pair of them, at the
// start of s: the character and the bytes it took, or 0 bytes.
func unicodeEscape(s string) (rune, int) {
	u1, ok := hex4(s)
	if !ok {
		return 0, 0
	}
	if !utf16.IsSurrogate(u1) {
		return u1, 6
	}
	u2, ok := hex4(s[6:])
	if !ok {
		return 0, 0
	}
	if r := utf16.DecodeRune(u1, u2); r != utf8.RuneError {
		return r, 12
	}
	return 0, 0
}

func hex4(s string) (rune, bool) {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return 0, false
	}
	var v rune
	for _, c := range []byte(s[2:6]) {
		d := hexDigit(c)
		if d < 0 {
			return 0, false
		}
		v = v<<4 | rune(d)
	}
	return v, true
}

func hexByte(a, b byte) int {
	x, y := hexDigit(a), hexDigit(b)
	if x < 0 || y < 0 {
		return -1
	}
	return x<<4 | y
}

func hexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// RedactError returns err with every occurrence of secret removed from its
// text, keeping what errors.Is finds in it (our sentinels, context's). Every
// error leaving an adapter passes through it: a BMC whose error body echoes
// the login must not put the password into a reading, an Event, a log line
// or an annotation. The wrapped chain is not exposed (Unwrap gives only the
// sentinels), so nothing can reach the unredacted text through errors.As.
func RedactError(err error, secret Secret) error {
	if err == nil || len(secret) < minSecret || !containsEncoded(err.Error(), secret.Reveal()) {
		return err
	}
	return redactErrorText(err, Redact(err.Error(), secret))
}

// RedactCredentialsError is RedactError for every form of the login
// RedactCredentials knows.
func RedactCredentialsError(err error, c Credentials) error {
	if err == nil {
		return nil
	}
	msg := RedactCredentials(err.Error(), c)
	if msg == err.Error() {
		return err
	}
	return redactErrorText(err, msg)
}

// WithText is err with the text msg (err's own, redacted), keeping what
// errors.Is finds in it: our sentinels and context's. Nothing can reach
// err's original text through errors.As.
func WithText(err error, msg string) error { return redactErrorText(err, msg) }

// redactErrorText is err with the text msg, keeping only its sentinels.
func redactErrorText(err error, msg string) error {
	r := &redactedError{msg: msg}
	for _, s := range []error{ErrUnreachable, ErrTimeout, ErrAuth, ErrTLS, ErrUnsupported, ErrBMC, ErrSystem,
		ErrInvalidTarget, ErrAlreadyInState, ErrBusy, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, s) {
			r.kinds = append(r.kinds, s)
		}
	}
	return r
}

type redactedError struct {
	msg   string
	kinds []error
}

func (e *redactedError) Error() string   { return e.msg }
func (e *redactedError) Unwrap() []error { return e.kinds }
