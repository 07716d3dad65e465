package bmctest

import (
	"context"
	"strconv"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/machine"
)

var _ bmc.EvidenceReader = (*Fake)(nil)

// ReadEvidence reports the machine's host watchdog and the log its BMC
// keeps (machine.LogEntry), as an IPMI BMC would: each watchdog expiry with
// its timer use (or none, after SetHideTimerUse: iDRAC's and iLO's Redfish
// logs), each OS critical stop, placed in the current or a previous boot by
// the machine's boot count, and an entry about another system
// (LogEntry.Origin) marked as such.
func (f *Fake) ReadEvidence(ctx context.Context) (bmc.EvidenceReport, error) {
	var rep bmc.EvidenceReport
	err := f.do(ctx, bmc.OpReadEvidence, func(now time.Time) error {
		rep.Identity = f.identity
		wd := f.hw.Watchdog(now)
		rep.Watchdog = bmc.HostWatchdog{Reported: true, Enabled: wd.Armed, TimeoutAction: wd.Action.Redfish(),
			TimerUse: timerUse(wd.Use, f.hideTimerUse), Timeout: wd.Timeout, Remaining: wd.Remaining}
		boots := f.hw.Read(now).Boots
		for _, e := range f.hw.Log(now) {
			ev := bmc.Evidence{Key: "SEL/" + strconv.Itoa(e.ID), EntryID: strconv.Itoa(e.ID), BMCTime: e.At, Source: "SEL",
				Origin: e.Origin, OtherSystem: e.Origin != ""}
			switch e.Kind {
			case machine.LogWatchdogExpired:
				ev.Kind, ev.TimerUse, ev.Action = bmc.EvidenceWatchdogExpired, timerUse(e.Use, f.hideTimerUse), e.Action.Redfish()
			case machine.LogOSCriticalStop:
				ev.Kind = bmc.EvidenceOSCriticalStop
			case machine.LogSystemBoot:
				continue
			default:
				continue
			}
			ev.Boot = bmc.BootPrevious
			if e.Boot == boots {
				ev.Boot = bmc.BootCurrent
			}
			rep.Entries = append(rep.Entries, ev)
		}
		return nil
	})
	rep.Result = bmc.Result{Provider: "fake", Attempts: 1, Latency: f.latency}
	return rep, err
}

func timerUse(u machine.TimerUse, hide bool) bmc.TimerUse {
	if hide {
		return bmc.TimerUseUnknown
	}
	switch u {
	case machine.TimerUseBIOSFRB2:
		return bmc.TimerUseBIOSFRB2
	case machine.TimerUseBIOSPOST:
		return bmc.TimerUseBIOSPOST
	case machine.TimerUseOSLoad:
		return bmc.TimerUseOSLoad
	case machine.TimerUseSMSOS:
		return bmc.TimerUseSMSOS
	case machine.TimerUseOEM:
		return bmc.TimerUseOEM
	case machine.TimerUseNone:
	}
	return bmc.TimerUseUnknown
}

// SetHideTimerUse makes ReadEvidence report no timer use, as iDRAC's and
// iLO's Redfish logs do.
func (f *Fake) SetHideTimerUse(hide bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hideTimerUse = hide
}

// StartPetter starts the node-side watchdog petter on the machine's OS
// (machine.Machine.StartPetter).
func (f *Fake) StartPetter(timeout time.Duration, action machine.WatchdogAction) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hw.StartPetter(f.clock.Now(), timeout, action)
}

// StopPetter stops the petter; without disarm the watchdog runs on (an
// evicted or killed petter).
func (f *Fake) StopPetter(disarm bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hw.StopPetter(f.clock.Now(), disarm)
}

// Watchdog is the machine's watchdog now, bypassing the BMC's faults.
func (f *Fake) Watchdog() machine.WatchdogStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hw.Watchdog(f.clock.Now())
}

// AppendLog adds an entry to the BMC's log (a stale or foreign entry, a
// POST timer's expiry), stamped now unless e.At is set.
func (f *Fake) AppendLog(e machine.LogEntry) machine.LogEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	if e.At.IsZero() {
		e.At = now
	}
	return f.hw.AppendLog(now, e)
}
