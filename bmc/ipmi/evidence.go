package ipmi

import (
	"context"
	"fmt"
	"time"

	goipmi "github.com/bougou/go-ipmi"

	"github.com/bmcfence/bmcfence/bmc"
)

// Hung-node evidence over IPMI, in one session: Get System GUID (the
// identity of the system the evidence is about), Get Watchdog Timer (its
// configuration and the timer use expiration flags) and the System Event
// Log (Get SEL Info, then Get SEL Entry from the first record, at most
// maxSELEntries). Nothing here decides.
//
// What counts as what (IPMI 2.0 table 42-3):
//
//	sensor type 23h "Watchdog 2", offsets 00h-03h   a watchdog expiry; the offset is the action
//	                                                 (none, hard reset, power down, power cycle),
//	                                                 event data 2 [3:0] the timer use
//	sensor type 20h "OS Stop/Shutdown", 00h, 01h     an OS critical stop (during load, at run time)
//	sensor type 1Dh "System Boot/Restart Initiated"  a boot: the marker of the current boot
//
// Entries after the latest boot record are in the current boot, entries
// before it in a previous one (record order, then the BMC's timestamps);
// with no boot record, unknown. The expiration flags are reported as
// evidence of their own, with no boot: they survive reboots until cleared.

// maxSELEntries bounds one read: BMC SELs hold up to a few thousand
// records, and a read that walks them all, one request each, takes long.
const maxSELEntries = 1024

// IPMI values the reader recognises.
const (
	sensorTypeOSStop     = 0x20
	sensorTypeWatchdog2  = 0x23
	sensorTypeSystemBoot = 0x1d
	netFnApp             = 0x06
	cmdGetWatchdogTimer  = 0x25
)

var timerUses = map[uint8]bmc.TimerUse{1: bmc.TimerUseBIOSFRB2, 2: bmc.TimerUseBIOSPOST, 3: bmc.TimerUseOSLoad, 4: bmc.TimerUseSMSOS, 5: bmc.TimerUseOEM}

var watchdogActions = map[uint8]string{0: "None", 1: "ResetSystem", 2: "PowerDown", 3: "PowerCycle"}

var _ bmc.EvidenceReader = (*Client)(nil)

// ReadEvidence reads the BMC's watchdog and SEL; see the comment above.
func (c *Client) ReadEvidence(ctx context.Context) (bmc.EvidenceReport, error) {
	var rep bmc.EvidenceReport
	err := c.run(ctx, bmc.OpReadEvidence, &rep.Result, func(ctx context.Context, cl *goipmi.Client) error {
		guid, err := cl.GetSystemGUID(ctx)
		if err != nil {
			return err
		}
		if rep.Identity.UUID, err = SMBIOSUUID(guid.GUID); err != nil {
			return fmt.Errorf("%w: Get System GUID: %v", bmc.ErrBMC, err)
		}
		if err := readWatchdog(ctx, cl, &rep); err != nil {
			return err
		}
		return readSEL(ctx, cl, &rep)
	})
	return rep, err
}

// readWatchdog reads Get Watchdog Timer raw: some BMCs answer it short
// (OpenIPMI's ipmi_sim 2.0.33 leaves out the present countdown), and the
// fields that matter come first.
func readWatchdog(ctx context.Context, cl *goipmi.Client, rep *bmc.EvidenceReport) error {
	res, err := cl.RawCommand(ctx, netFnApp, cmdGetWatchdogTimer, nil, "Get Watchdog Timer")
	if cc, ok := completionCode(err); ok && (cc == goipmi.CompletionCodeInvalidCommand || cc == goipmi.CompletionCodeRequestDataFieldInvalid) {
		rep.Unsupported = append(rep.Unsupported, "Get Watchdog Timer")
		return nil
	}
	if err != nil {
		return err
	}
	b := res.Response
	if len(b) < 6 {
		return fmt.Errorf("%w: Get Watchdog Timer answered %d bytes, want at least 6", bmc.ErrBMC, len(b))
	}
	w := bmc.HostWatchdog{Reported: true, Enabled: b[0]&0x40 != 0, TimerUse: timerUses[b[0]&0x07],
		TimeoutAction: watchdogActions[b[1]&0x07],
		Timeout:       time.Duration(uint16(b[4])|uint16(b[5])<<8) * 100 * time.Millisecond}
	if len(b) >= 8 {
		w.Remaining = time.Duration(uint16(b[6])|uint16(b[7])<<8) * 100 * time.Millisecond
	}
	for use := uint8(1); use <= 5; use++ {
		if b[3]&(1<<use) == 0 {
			continue
		}
		w.ExpiredUses = append(w.ExpiredUses, timerUses[use])
		rep.Entries = append(rep.Entries, bmc.Evidence{Kind: bmc.EvidenceWatchdogExpired, Key: "expiration-flags/" + string(timerUses[use]),
			TimerUse: timerUses[use], Source: "expiration-flags",
			Message: fmt.Sprintf("Get Watchdog Timer: the %s timer expired (its flag is set until cleared)", timerUses[use])})
	}
	rep.Watchdog = w
	return nil
}

func readSEL(ctx context.Context, cl *goipmi.Client, rep *bmc.EvidenceReport) error {
	info, err := cl.GetSELInfo(ctx)
	if cc, ok := completionCode(err); ok && cc == goipmi.CompletionCodeInvalidCommand {
		rep.Unsupported = append(rep.Unsupported, "SEL")
		return nil
	}
	if err != nil {
		return err
	}
	type record struct {
		id    uint16
		order int
		std   *goipmi.SELStandard
	}
	var recs []record
	next := uint16(0)
	for i := 0; i < int(info.Entries) && i < maxSELEntries && next != 0xffff; i++ {
		e, err := cl.GetSELEntry(ctx, 0, next)
		if cc, ok := completionCode(err); ok && cc == goipmi.CompletionCodeRequestedDataNotPresent {
			break // the SEL shrank meanwhile
		}
		if err != nil {
			return err
		}
		sel, err := goipmi.ParseSEL(e.Data)
		if err != nil {
			return fmt.Errorf("%w: SEL record %#04x: %v", bmc.ErrBMC, next, err)
		}
		if sel.Standard != nil {
			recs = append(recs, record{id: sel.RecordID, order: i, std: sel.Standard})
		}
		next = e.NextRecordID
	}
	// The latest boot record: the start of the current boot.
	boot := -1
	for i, r := range recs {
		if uint8(r.std.SensorType) == sensorTypeSystemBoot && r.std.EventDir == goipmi.EventDirAssertion {
			boot = i
		}
	}
	if boot >= 0 {
		rep.Boot.EntryID = fmt.Sprintf("%#04x", recs[boot].id)
	}
	for i, r := range recs {
		s := r.std
		if s.EventDir != goipmi.EventDirAssertion {
			continue
		}
		offset := s.EventData.EventData1 & 0x0f
		ev := bmc.Evidence{Key: fmt.Sprintf("SEL/%#04x/%d", r.id, s.Timestamp.Unix()), EntryID: fmt.Sprintf("%#04x", r.id),
			BMCTime: s.Timestamp, Source: "SEL"}
		switch uint8(s.SensorType) {
		case sensorTypeWatchdog2:
			if offset > 3 {
				continue // a pre-timeout interrupt, not an expiry
			}
			ev.Kind, ev.Action = bmc.EvidenceWatchdogExpired, watchdogActions[offset]
			// Event data 2 holds the timer use when event data 1 says so
			// ([7:6] = 11b: OEM data, or 10b sensor-specific here).
			if s.EventData.EventData1&0xc0 != 0 {
				ev.TimerUse = timerUses[s.EventData.EventData2&0x0f]
			}
			ev.Message = fmt.Sprintf("Watchdog 2: %s, timer use %s", map[string]string{"None": "timer expired", "ResetSystem": "hard reset",
				"PowerDown": "power down", "PowerCycle": "power cycle"}[ev.Action], orUnknown(ev.TimerUse))
		case sensorTypeOSStop:
			if offset > 1 {
				continue // a graceful stop or shutdown
			}
			ev.Kind = bmc.EvidenceOSCriticalStop
			ev.Message = map[uint8]string{0: "OS Stop/Shutdown: critical stop during OS load", 1: "OS Stop/Shutdown: run-time critical stop"}[offset]
		default:
			continue
		}
		switch {
		case boot < 0:
		case i > boot:
			ev.Boot = bmc.BootCurrent
		default:
			ev.Boot = bmc.BootPrevious
		}
		rep.Entries = append(rep.Entries, ev)
	}
	return nil
}

func orUnknown(u bmc.TimerUse) string {
	if u == bmc.TimerUseUnknown {
		return "not given"
	}
	return string(u)
}

// Diagnostic pulses the host's diagnostic interrupt: Chassis Control 04h
// ("pulse Diagnostic Interrupt", an NMI; ipmitool chassis power diag). A
// kernel set up for kdump panics on it and writes a crash dump; others
// log it and go on. A BMC without it answers "invalid data field" (CCh):
// bmc.ErrUnsupported. (05h is a soft shutdown through a fake
// over-temperature: never sent.)
func (c *Client) Diagnostic(ctx context.Context) (bmc.Result, error) {
	return c.control(ctx, bmc.OpDiagnostic, goipmi.ChassisControlDiagnosticInterrupt, sentDiag)
}

const sentDiag = "chassis power diag"
