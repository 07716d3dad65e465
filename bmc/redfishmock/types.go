package redfishmock

import (
	"github.com/bmcfence/bmcfence/bmc/machine"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// The machine model (power states, reset types, events, timing) lives in
// bmc/machine, shared with the in-memory fake BMC; these aliases keep the
// mock's API self-contained.
type (
	PowerState = machine.PowerState
	ResetType  = machine.ResetType
	Event      = machine.Event
	Timing     = machine.Timing
)

const (
	PowerOn          = machine.PowerOn
	PowerOff         = machine.PowerOff
	PowerPoweringOn  = machine.PowerPoweringOn
	PowerPoweringOff = machine.PowerPoweringOff

	ResetOn               = machine.ResetOn
	ResetForceOff         = machine.ResetForceOff
	ResetGracefulShutdown = machine.ResetGracefulShutdown
	ResetForceRestart     = machine.ResetForceRestart
	ResetGracefulRestart  = machine.ResetGracefulRestart
	ResetPowerCycle       = machine.ResetPowerCycle
	ResetNmi              = machine.ResetNmi
	ResetForceOn          = machine.ResetForceOn
	ResetPushPowerButton  = machine.ResetPushPowerButton

	EventPowerLoss    = machine.EventPowerLoss
	EventPowerRestore = machine.EventPowerRestore
	EventOSHang       = machine.EventOSHang
	EventOSRecover    = machine.EventOSRecover
	EventOSReboot     = machine.EventOSReboot
)

// AllowedResetTypes lists every ResetType the mock accepts.
func AllowedResetTypes() []ResetType { return machine.AllowedResetTypes() }

// KnownResetTypes lists every ResetType the machine understands, including
// those only some profiles advertise (ForceOn, PushPowerButton).
func KnownResetTypes() []ResetType { return machine.KnownResetTypes() }

// Events lists every machine event.
func Events() []Event { return machine.Events() }

// DefaultTiming returns the timing the redfish-mock binary uses unless told
// otherwise (see machine.DefaultTiming).
func DefaultTiming() Timing { return machine.DefaultTiming() }

// Faults are the ways one system's BMC misbehaves. The zero Faults is an
// honest, healthy BMC.
type Faults struct {
	// Latency is added to every request for the system. The wait ends early
	// when the request's context ends or the mock is closed.
	Latency time.Duration
	// ErrorRate is the fraction (0..1) of requests for the system answered
	// with 500 or 503, drawn from a per-system RNG seeded from Config.Seed,
	// so a run is reproducible.
	ErrorRate float64
	// Hang makes requests for the system block until the client gives up,
	// the request context ends or the mock is closed: a wedged BMC web server.
	Hang bool
	// ConflictWhenOff answers ForceOff and GracefulShutdown on a system that
	// is already Off with 409 Conflict, as some BMCs do.
	ConflictWhenOff bool
	// IgnoreCommands makes a lying BMC: every Reset is answered 204 and
	// nothing changes.
	IgnoreCommands bool
	// IgnoreDuringTransition answers a Reset sent while the system is
	// PoweringOn, PoweringOff or in a restart's Off dwell with 204 and
	// ignores it, as some BMCs do mid-restart.
	IgnoreDuringTransition bool
	// PowerOnFails makes PoweringOn fall back to Off at the end of the power-on
	// time (a failed POST).
	PowerOnFails bool
	// SessionLimit, when positive, caps the sessions open for this system
	// below Config.MaxSessions; further logins get 503.
	SessionLimit int
	// SessionsExhausted answers every login for the system with 503
	// SessionLimitExceeded, as a BMC whose session table leaked full does.
	SessionsExhausted bool
	// WrongUUID makes the system report a UUID other than the configured one,
	// as if the inventory pointed at a different machine.
	WrongUUID bool
	// AuthFailure answers every authenticated request for the system with
	// 401, as a BMC whose password was changed behind our back does.
	AuthFailure bool
}

// behavior is the part of the faults that changes what a Reset does.
func (f Faults) behavior() machine.Behavior {
	return machine.Behavior{
		ConflictWhenOff:        f.ConflictWhenOff,
		IgnoreCommands:         f.IgnoreCommands,
		IgnoreDuringTransition: f.IgnoreDuringTransition,
		PowerOnFails:           f.PowerOnFails,
	}
}

func (f Faults) validate() error {
	var errs []error
	if f.Latency < 0 {
		errs = append(errs, fmt.Errorf("latency: %v is negative", f.Latency))
	}
	if !(f.ErrorRate >= 0 && f.ErrorRate <= 1) { // also rejects NaN
		errs = append(errs, fmt.Errorf("errorRate: %v is outside 0..1 (it is a fraction of requests)", f.ErrorRate))
	}
	if f.SessionLimit < 0 {
		errs = append(errs, fmt.Errorf("sessionLimit: %d is negative; use 0 for no per-system limit", f.SessionLimit))
	}
	return errors.Join(errs...)
}

// faultsJSON is Faults on the wire. omitempty keeps a healthy system's
// faults at "{}", so a status shows only what is switched on.
type faultsJSON struct {
	Latency                machine.Duration `json:"latency,omitempty"`
	ErrorRate              float64          `json:"errorRate,omitempty"`
	Hang                   bool             `json:"hang,omitempty"`
	ConflictWhenOff        bool             `json:"conflictWhenOff,omitempty"`
	IgnoreCommands         bool             `json:"ignoreCommands,omitempty"`
	IgnoreDuringTransition bool             `json:"ignoreDuringTransition,omitempty"`
	PowerOnFails           bool             `json:"powerOnFails,omitempty"`
	SessionLimit           int              `json:"sessionLimit,omitempty"`
	SessionsExhausted      bool             `json:"sessionsExhausted,omitempty"`
	WrongUUID              bool             `json:"wrongUUID,omitempty"`
	AuthFailure            bool             `json:"authFailure,omitempty"`
}

func (f Faults) wire() faultsJSON {
	return faultsJSON{
		Latency:                machine.Duration(f.Latency),
		ErrorRate:              f.ErrorRate,
		Hang:                   f.Hang,
		ConflictWhenOff:        f.ConflictWhenOff,
		IgnoreCommands:         f.IgnoreCommands,
		IgnoreDuringTransition: f.IgnoreDuringTransition,
		PowerOnFails:           f.PowerOnFails,
		SessionLimit:           f.SessionLimit,
		SessionsExhausted:      f.SessionsExhausted,
		WrongUUID:              f.WrongUUID,
		AuthFailure:            f.AuthFailure,
	}
}

// MarshalJSON writes the faults that are switched on, with camelCase names
// and the latency as a duration string.
func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(f.wire())
}

// UnmarshalJSON merges the fields present in data into f (the semantics of
// PATCH /mock/systems/{id}/faults). Unknown fields are errors.
func (f *Faults) UnmarshalJSON(data []byte) error {
	wire := f.wire()
	if err := decodeStrict(data, &wire); err != nil {
		return err
	}
	*f = Faults{
		Latency:                time.Duration(wire.Latency),
		ErrorRate:              wire.ErrorRate,
		Hang:                   wire.Hang,
		ConflictWhenOff:        wire.ConflictWhenOff,
		IgnoreCommands:         wire.IgnoreCommands,
		IgnoreDuringTransition: wire.IgnoreDuringTransition,
		PowerOnFails:           wire.PowerOnFails,
		SessionLimit:           wire.SessionLimit,
		SessionsExhausted:      wire.SessionsExhausted,
		WrongUUID:              wire.WrongUUID,
		AuthFailure:            wire.AuthFailure,
	}
	return nil
}

// decodeStrict decodes exactly one JSON value into v, rejecting unknown
// fields and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// truncate shortens untrusted input quoted in an error message.
func truncate(s string, max int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
