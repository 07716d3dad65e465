// Package pdu is bmcfence's port to switched PDU outlets: the devices of a
// fencing level below the BMC. An outlet is switched off when the BMC
// cannot fence (it died with the host: a failed PSU, a pulled cord, a
// tripped breaker take the BMC's standby power too), and an outlet we
// switched off and read back off is proof that no power reaches that
// supply.
//
// An Outlet answers the same three power calls as a BMC (bmc.Controller's
// PowerStatus, PowerOff, PowerOn, with bmc's types), so a fencing level is
// a list of devices, not a new engine; and it adds the outlet's metering
// (a dead machine draws about 0 W) and its identity. The same rules hold:
// a nil error from PowerOff means the PDU accepted the command, nothing
// more; an "already off" answer wraps bmc.ErrAlreadyInState and is not
// acceptance; only a later reading of exactly Off proves anything.
//
// Clients: pdu/redfishpdu (Redfish PowerDistribution, RackPDU outlets) and
// pdu/snmppdu (APC PowerNet-MIB over SNMP v1, v2c, v3). VerifyOutlet is
// the active test that ties an outlet to a machine's power supply.
package pdu

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/internal/mutant"
)

// Outlet is one switched outlet of a PDU. Implementations must be safe for
// concurrent use and bound every call by the context and their timeout.
type Outlet interface {
	// PowerStatus reads the outlet: State is exactly On or Off, else
	// Unknown (a PDU mid-reboot, a value outside the MIB's allow-list).
	PowerStatus(ctx context.Context) (bmc.PowerStatus, error)
	// PowerOff always sends the off command. nil: the PDU accepted it.
	PowerOff(ctx context.Context) (bmc.Result, error)
	PowerOn(ctx context.Context) (bmc.Result, error)
	// Metering reads what the outlet draws; ErrUnsupported wrapped when
	// the PDU does not meter its outlets.
	Metering(ctx context.Context) (Reading, error)
	// OutletIdentity says which PDU and which outlet answered.
	OutletIdentity(ctx context.Context) (Identity, error)
}

// Reading is one metering of an outlet.
type Reading struct {
	Watts float64 `json:"watts"`
	// Raw is what the PDU said ("PowerWatts.Reading=0",
	// "rPDU2OutletMeteredStatusPower.3=0").
	Raw string `json:"raw"`
	bmc.Result
}

// Identity is which PDU and outlet answer.
type Identity struct {
	// Device is the PDU's address (scheme://host:port).
	Device       string `json:"device"`
	Manufacturer string `json:"manufacturer,omitempty"`
	Model        string `json:"model,omitempty"`
	SerialNumber string `json:"serialNumber,omitempty"`
	UUID         string `json:"uuid,omitempty"`
	// OutletID is the outlet's Redfish Id or SNMP index; OutletName its
	// name as the PDU reports it.
	OutletID   string `json:"outletId"`
	OutletName string `json:"outletName,omitempty"`
	bmc.Result
}

// Key is a stable name for the outlet: the PDU's serial number (or its
// address when it reports none) and the outlet id. An outlet identity
// record is about this key; a PDU swapped behind the same address changes
// it.
func (i Identity) Key() string {
	dev := i.SerialNumber
	if dev == "" {
		dev = i.Device
	}
	return dev + "/" + i.OutletID
}

// Operations, beyond bmc's, in errors and metrics.
const OpMetering bmc.Op = "metering"

// sentinel is a PDU error that also matches the bmc sentinel of the same
// meaning, so a caller that branches on bmc.ErrUnreachable treats a BMC and
// a PDU alike, while the text says PDU.
type sentinel struct {
	msg string
	bmc error
}

func (s *sentinel) Error() string        { return s.msg }
func (s *sentinel) Is(target error) bool { return target == s.bmc }

// Sentinel errors; each also matches its bmc counterpart with errors.Is.
var (
	ErrUnreachable = &sentinel{"PDU unreachable", bmc.ErrUnreachable}
	ErrTimeout     = &sentinel{"PDU did not answer in time", bmc.ErrTimeout}
	ErrAuth        = &sentinel{"PDU rejected the credentials", bmc.ErrAuth}
	ErrTLS         = &sentinel{"PDU certificate not trusted", bmc.ErrTLS}
	ErrUnsupported = &sentinel{"operation not supported by the PDU", bmc.ErrUnsupported}
	ErrDevice      = &sentinel{"PDU answered with an error", bmc.ErrBMC}
	ErrInvalid     = &sentinel{"invalid PDU target", bmc.ErrInvalidTarget}
	// ErrNoSuchOutlet: the PDU has no such outlet (or PDU).
	ErrNoSuchOutlet = &sentinel{"no such outlet on the PDU", bmc.ErrSystem}
	// ErrAlreadyInState: the PDU refused because the outlet already is in
	// that state. Not acceptance.
	ErrAlreadyInState = &sentinel{"PDU did nothing: the outlet is already in that state", bmc.ErrAlreadyInState}
	ErrBusy           = &sentinel{"PDU busy: it did not take the command", bmc.ErrBusy}
)

// OpError is the one error type PDU clients return: the operation, the
// device and outlet (never a credential), and a sentinel.
type OpError struct {
	Op       bmc.Op
	Protocol string // "redfish", "snmp"
	Address  string
	Outlet   string
	Err      error
}

func (e *OpError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pdu %s %s %s", e.Protocol, e.Op, e.Address)
	if e.Outlet != "" {
		fmt.Fprintf(&b, " outlet %q", e.Outlet)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *OpError) Unwrap() error { return e.Err }

// Redact removes every form of the login and of each other secret (an
// SNMP community, a privacy passphrase) from s: a PDU's error text may
// echo what it was sent.
func Redact(s string, login bmc.Credentials, secrets ...bmc.Secret) string {
	s = bmc.RedactCredentials(s, login)
	for _, sec := range secrets {
		s = bmc.Redact(s, sec)
	}
	return s
}

// Words is a device's text fit to quote: redacted as it was written (every
// form of the login and the secrets), then made one line, then, when max is
// positive, cut to at most max bytes on a character boundary. In that
// order: collapsing first splits a passphrase with two spaces in a row, and
// cutting first leaves a prefix of it (issue 17).
func Words(s string, max int, login bmc.Credentials, secrets ...bmc.Secret) string {
	if mutant.On(mutant.RedactRawFirst) {
		// The mutant: one line and cut first, as before issue 17.
		return Redact(cut(strings.Join(strings.Fields(s), " "), max), login, secrets...)
	}
	return cut(strings.Join(strings.Fields(Redact(s, login, secrets...)), " "), max)
}

func cut(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max] + "…"
}
