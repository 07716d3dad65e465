package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/internal/power"
)

// Exit codes. Each failure a script may want to tell apart has its own.
const (
	exitOK          = 0
	exitFailed      = 1   // the operation ran and failed (see the message)
	exitUsage       = 2   // bad flags, bad address, missing confirmation
	exitAuth        = 3   // the BMC rejected the credentials
	exitUnreachable = 4   // the BMC did not answer (unreachable, timeout)
	exitTLS         = 5   // the BMC's certificate is not trusted
	exitUnsupported = 6   // the BMC cannot do that (no such system, reset type)
	exitNotOff      = 7   // the BMC never read back a settled Off
	exitRefused     = 8   // refused for safety (node Ready, not our taint, …)
	exitBMCError    = 9   // the BMC answered with an error
	exitDeclined    = 10  // the human answered no at the confirmation prompt
	exitNoCluster   = 11  // no cluster configured (no kubeconfig, not in a cluster)
	exitNoAPIServer = 12  // the API server did not answer
	exitSinglePSU   = 13  // verify-outlets: the machine has one power supply
	exitInterrupted = 130 // interrupted (Ctrl-C)
)

const exitCodesHelp = `Exit codes:
  0    success
  1    the operation failed
  2    usage error (bad flag, bad address, confirmation needed: use --yes)
  3    BMC authentication failed
  4    BMC unreachable or timed out
  5    BMC certificate not trusted (--ca-file, or --insecure)
  6    not supported by the BMC (system, reset type)
  7    the BMC did not confirm a settled Off
  8    refused for safety
  9    the BMC answered with an error
  10   declined at the confirmation prompt
  11   no cluster configured (no kubeconfig, not in a cluster)
  12   the API server did not answer
  13   verify-outlets refused: the machine has a single power supply
  130  interrupted`

// exitError carries an exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

func usageError(format string, args ...any) error {
	return withCode(exitUsage, fmt.Errorf(format, args...))
}

// exitCode picks the code for an error: an explicit one, else by the BMC
// sentinel it wraps.
func exitCode(err error) int {
	var e *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &e):
		return e.code
	case errors.Is(err, power.ErrNotOff):
		return exitNotOff
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.Is(err, bmc.ErrAuth):
		return exitAuth
	case errors.Is(err, bmc.ErrUnreachable), errors.Is(err, bmc.ErrTimeout):
		return exitUnreachable
	case errors.Is(err, bmc.ErrTLS):
		return exitTLS
	case errors.Is(err, bmc.ErrUnsupported), errors.Is(err, bmc.ErrSystem):
		return exitUnsupported
	case errors.Is(err, bmc.ErrInvalidTarget):
		return exitUsage
	case errors.Is(err, bmc.ErrBMC):
		return exitBMCError
	default:
		return exitFailed
	}
}
