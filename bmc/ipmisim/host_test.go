package ipmisim

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// The host arms the BMC's watchdog in-band and stops petting it: ipmi_sim
// resets the host and logs Watchdog 2 in its SEL, as ipmitool (the
// independent decoder) reads it over the LAN.
func TestInBandWatchdogExpiryResetsTheHostAndIsLogged(t *testing.T) {
	s := StartT(t, Options{Host: true, InitialPower: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := s.InBand()
	if err := h.ArmWatchdog(ctx, 2*time.Second, WatchdogHardReset); err != nil {
		t.Fatal(err)
	}
	out, err := s.Ipmitool(ctx, "mc", "watchdog", "get")
	if err != nil || !strings.Contains(out.Stdout, "SMS/OS") || !strings.Contains(out.Stdout, "Hard Reset") {
		t.Fatalf("mc watchdog get: %+v %v", out, err)
	}
	for !slices.ContainsFunc(h.Ops(), func(o HostOp) bool { return o.Op == "reset" }) {
		select {
		case <-ctx.Done():
			t.Fatalf("no reset; ops %v", h.Ops())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := h.OSCriticalStop(ctx); err != nil {
		t.Fatal(err)
	}
	// ipmitool words them "Watchdog2 | Hard reset" and "OS Critical Stop
	// | Run-time critical stop"; the times read "Pre-Init": ipmi_sim's SEL
	// clock starts at zero.
	out, err = s.Ipmitool(ctx, "sel", "list")
	if err != nil || !strings.Contains(out.Stdout, "Watchdog2 | Hard reset | Asserted") ||
		!strings.Contains(out.Stdout, "OS Critical Stop | Run-time critical stop | Asserted") {
		t.Errorf("sel elist: %q %q %v; want the Watchdog 2 hard reset and the run-time critical stop", out.Stdout, out.Stderr, err)
	}
}
