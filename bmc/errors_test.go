package bmc

import (
	"errors"
	"fmt"
	"testing"
)

func TestOpErrorWrapsSentinel(t *testing.T) {
	err := error(&OpError{Op: OpPowerOff, Protocol: Redfish, Address: "https://h:443", System: "1", Err: fmt.Errorf("%w: 401 Unauthorized", ErrAuth)})
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("errors.Is(%v, ErrAuth) = false", err)
	}
	var op *OpError
	if !errors.As(err, &op) || op.Op != OpPowerOff {
		t.Fatalf("errors.As lost the OpError: %v", err)
	}
	if want := `redfish power-off https://h:443 system "1": BMC rejected the credentials: 401 Unauthorized`; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{ErrAuth, "auth"},
		{fmt.Errorf("x: %w", ErrTLS), "tls"},
		{&OpError{Err: ErrTimeout}, "timeout"},
		{ErrUnreachable, "unreachable"},
		{ErrUnsupported, "unsupported"},
		{ErrSystem, "system"},
		{ErrInvalidTarget, "invalid-target"},
		{ErrBMC, "bmc-error"},
		{errors.New("other"), "error"},
	}
	for _, tt := range tests {
		if got := Reason(tt.err); got != tt.want {
			t.Errorf("Reason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestRedact(t *testing.T) {
	if got := Redact("login hunter22 failed: hunter22", "hunter22"); got != "login [redacted] failed: [redacted]" {
		t.Errorf("Redact = %q", got)
	}
	if got := Redact("a bad day", "a"); got != "a bad day" {
		t.Errorf("Redact with a tiny secret garbled the text: %q", got)
	}
}

func TestOSRunning(t *testing.T) {
	for bp, want := range map[string]bool{"OSRunning": true, "OSBootStarted": true, "None": false, "": false, "SystemHardwareInitializationComplete": false} {
		if got := (PowerStatus{BootProgress: bp}).OSRunning(); got != want {
			t.Errorf("OSRunning(%q) = %v, want %v", bp, got, want)
		}
	}
}
