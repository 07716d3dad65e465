package bmc

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// Redact replaces every occurrence of secret in msg. Adapters pass library
// error text through it as a last line of defence: a library that echoes a
// request body must not leak the password into our errors. Secrets shorter
// than four bytes are not searched for, because replacing them would garble
// ordinary words while protecting nothing real.
func Redact(msg string, secret Secret) string {
	if len(secret) < 4 {
		return msg
	}
	return strings.ReplaceAll(msg, secret.Reveal(), redacted)
}

// RedactError returns err with every occurrence of secret removed from its
// text, keeping what errors.Is finds in it (our sentinels, context's). Every
// error leaving an adapter passes through it: a BMC whose error body echoes
// the login must not put the password into a reading, an Event, a log line
// or an annotation. The wrapped chain is not exposed (Unwrap gives only the
// sentinels), so nothing can reach the unredacted text through errors.As.
func RedactError(err error, secret Secret) error {
	if err == nil || len(secret) < 4 || !strings.Contains(err.Error(), secret.Reveal()) {
		return err
	}
	r := &redactedError{msg: Redact(err.Error(), secret)}
	for _, s := range []error{ErrUnreachable, ErrTimeout, ErrAuth, ErrTLS, ErrUnsupported, ErrBMC, ErrSystem,
		ErrInvalidTarget, ErrAlreadyInState, context.Canceled, context.DeadlineExceeded} {
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
