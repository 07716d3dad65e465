package ipmi

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/ipmisim"
)

// The IPMI evidence reader against ipmi_sim with its system interface
// connected (ipmisim.Options.Host): the host arms the BMC watchdog in-band,
// as Linux's ipmi_watchdog does, and the BMC's own timer expires, logs
// Watchdog 2 in its SEL and resets the host.
//
// Debian's ipmi_sim 2.0.33 has watchdog faults the tests work around:
// Reset Watchdog Timer does not restart a running timer (fixed upstream in
// OpenIPMI 53aa324c, 2025-04), so a petted timer still expires one timeout
// after it was armed: the hangs here come within that timeout; a timer
// whose action is "no action" never runs: the tests arm a hard reset; Get
// Watchdog Timer answers 6 data bytes (no present countdown); and it has
// no Platform Event Message (ipmisim's host adds the record instead).

func readEvidence(t *testing.T, c *Client) bmc.EvidenceReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep, err := c.ReadEvidence(ctx)
	if err != nil {
		t.Fatalf("ReadEvidence: %v", err)
	}
	return rep
}

func simWithHost(t *testing.T) (*ipmisim.Sim, *Client) {
	t.Helper()
	s := ipmisim.StartT(t, ipmisim.Options{InitialPower: true, Host: true})
	p := &peer{addr: s.Address(), user: s.Username(), pw: s.Password()}
	return s, newClient(t, p)
}

func TestEvidenceOfAHungHostOverIPMI(t *testing.T) {
	t.Parallel()
	s, c := simWithHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := s.InBand()
	if err := h.BootInitiated(ctx, false); err != nil { // BIOS, as the machine came up
		t.Fatal(err)
	}
	rep := readEvidence(t, c)
	if len(rep.Entries) != 0 || !rep.Watchdog.Reported || rep.Watchdog.Enabled || rep.Identity.UUID != ipmisim.DefaultGUID {
		t.Fatalf("before arming: %+v", rep)
	}
	if err := h.StartPetting(ctx, 3*time.Second, time.Second, ipmisim.WatchdogHardReset); err != nil {
		t.Fatal(err)
	}
	rep = readEvidence(t, c)
	w := rep.Watchdog
	if !w.Enabled || w.TimerUse != bmc.TimerUseSMSOS || w.TimeoutAction != "ResetSystem" || w.Timeout != 3*time.Second || len(rep.Entries) != 0 {
		t.Fatalf("armed: %+v, entries %+v", w, rep.Entries)
	}
	// The OS hangs: nothing pets any more; the BMC resets the host.
	if err := h.StopPetting(ctx, false); err != nil {
		t.Fatal(err)
	}
	for !slices.ContainsFunc(h.Ops(), func(o ipmisim.HostOp) bool { return o.Op == "reset" }) {
		select {
		case <-ctx.Done():
			t.Fatalf("the BMC never reset the hung host; ops %v", h.Ops())
		case <-time.After(100 * time.Millisecond):
		}
	}
	rep = readEvidence(t, c)
	var sel, flags []bmc.Evidence
	for _, e := range rep.Entries {
		if e.Source == "SEL" {
			sel = append(sel, e)
		} else {
			flags = append(flags, e)
		}
	}
	if len(sel) != 1 || sel[0].Kind != bmc.EvidenceWatchdogExpired || sel[0].TimerUse != bmc.TimerUseSMSOS ||
		sel[0].Action != "ResetSystem" || sel[0].Boot != bmc.BootCurrent || sel[0].Key == "" || sel[0].BMCTime.IsZero() {
		t.Errorf("SEL evidence %+v; want one SMS/OS hard-reset expiry in the current boot", sel)
	}
	// (ipmi_sim 2.0.33 echoes the Set request's "don't stop" bit as
	// "running" after the expiry: Enabled is not checked here.)
	if len(flags) != 1 || flags[0].TimerUse != bmc.TimerUseSMSOS || flags[0].Boot != bmc.BootUnknown ||
		!slices.Equal(rep.Watchdog.ExpiredUses, []bmc.TimerUse{bmc.TimerUseSMSOS}) {
		t.Errorf("expiration flags %+v, watchdog %+v; want the SMS/OS flag, in no particular boot", flags, rep.Watchdog)
	}
	// The host boots again (BIOS logs it): the expiry is from the boot before.
	if err := h.BootInitiated(ctx, true); err != nil {
		t.Fatal(err)
	}
	for _, e := range readEvidence(t, c).Entries {
		if e.Source == "SEL" && e.Boot != bmc.BootPrevious {
			t.Errorf("after the next boot: %+v, want boot previous", e)
		}
	}
}

func TestEvidenceOfAPanicOverIPMI(t *testing.T) {
	t.Parallel()
	s, c := simWithHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// What ipmi_msghandler sends on a panic with panic_op=event.
	if err := s.InBand().OSCriticalStop(ctx); err != nil {
		t.Fatal(err)
	}
	rep := readEvidence(t, c)
	if len(rep.Entries) != 1 || rep.Entries[0].Kind != bmc.EvidenceOSCriticalStop || rep.Entries[0].Boot != bmc.BootUnknown {
		t.Errorf("entries %+v; want one OS critical stop, boot unknown (no boot record)", rep.Entries)
	}
}

// Chassis control 04h, the NMI: pyghmi's Bmc takes it and leaves the power
// as it is; ipmi_sim refuses it (invalid data field: unsupported).
func TestDiagnosticInterrupt(t *testing.T) {
	t.Parallel()
	for _, kind := range bothPeers {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p := startPeer(t, kind, "127.0.0.1", true)
			c := newClient(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := c.Diagnostic(ctx)
			switch kind {
			case simPeer:
				checkOpError(t, err, bmc.ErrUnsupported, bmc.OpDiagnostic, p.pw)
			case pyghmiPeer:
				if err != nil || res.Sent != "chassis power diag" {
					t.Fatalf("Diagnostic: %+v, %v", res, err)
				}
				if !slices.Contains(p.commands(), "control_diag") {
					t.Errorf("pyghmi saw %v, want control_diag", p.commands())
				}
			}
			if on, err := p.power(); !on || err != nil {
				t.Errorf("power after the NMI: on %v, %v; want on", on, err)
			}
			if errors.Is(err, bmc.ErrAlreadyInState) {
				t.Errorf("an NMI is not a power command: %v", err)
			}
		})
	}
}
