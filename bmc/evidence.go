package bmc

import (
	"context"
	"time"
)

// Hung-node evidence: what a BMC recorded about its host that the host's own
// OS does not control. Readers (bmc/redfish, bmc/ipmi) report it as typed
// entries and never decide anything: whether an entry counts (an SMS/OS
// expiry, first seen by us after the node's last observed renewal, in the
// current boot, for the verified system, with no planned reboot open) is
// the engine's question. Evidence starts things sooner; it never replaces
// the read-back Off after our own ForceOff.

// EvidenceKind is what an entry says happened.
type EvidenceKind string

const (
	// EvidenceWatchdogExpired: the BMC's host watchdog expired (IPMI
	// "Watchdog 2", sensor type 23h; Redfish SEL/Event log entries).
	EvidenceWatchdogExpired EvidenceKind = "watchdogExpired"
	// EvidenceOSCriticalStop: the host's OS reported a critical stop
	// (IPMI "OS Stop/Shutdown", sensor type 20h, offsets 00h/01h: a kernel
	// panic with ipmi_msghandler's panic_op=event).
	EvidenceOSCriticalStop EvidenceKind = "osCriticalStop"
)

// TimerUse is who armed the watchdog that expired, as the BMC reports it
// (IPMI timer use; OpenBMC's "timer use:" argument). Only TimerUseSMSOS
// says the running OS stopped petting it; BIOS/POST and OS Load timers
// expire on machines that are booting. TimerUseUnknown: the BMC does not
// say (iDRAC's ASR messages, HPE's IML, the expiration flags alone).
type TimerUse string

const (
	TimerUseUnknown  TimerUse = ""
	TimerUseBIOSFRB2 TimerUse = "BIOS FRB2"
	TimerUseBIOSPOST TimerUse = "BIOS/POST"
	TimerUseOSLoad   TimerUse = "OS Load"
	TimerUseSMSOS    TimerUse = "SMS/OS"
	TimerUseOEM      TimerUse = "OEM"
)

// BootRelation places an entry relative to the host's boots, by what the
// BMC itself reports (its own clock and its own record order; never
// compared with ours).
type BootRelation string

const (
	// BootUnknown: the BMC gives nothing to tell boots apart.
	BootUnknown BootRelation = ""
	// BootCurrent: logged at or after the start of the current boot.
	BootCurrent BootRelation = "current"
	// BootPrevious: logged before the current boot started (a stale entry).
	BootPrevious BootRelation = "previous"
)

// Evidence is one log entry or flag the BMC holds.
type Evidence struct {
	Kind EvidenceKind `json:"kind"`
	// Key identifies the entry across reads of the same BMC (the log
	// service and record id; the flag's name for IPMI's expiration flags).
	// A consumer keeps the time it first saw a key, on its own clock:
	// that is the entry's time for any proof, never BMCTime.
	Key string `json:"key"`
	// EntryID is the BMC's record id, informational.
	EntryID string `json:"entryId,omitempty"`
	// BMCTime is the BMC's timestamp, informational: another process's
	// clock (invariant 5). Zero when the BMC gives none.
	BMCTime time.Time `json:"bmcTime,omitempty"`
	// TimerUse and Action, for a watchdog expiry ("" when not reported).
	// Action is Redfish's TimeoutAction vocabulary: None, ResetSystem,
	// PowerDown, PowerCycle.
	TimerUse TimerUse `json:"timerUse,omitempty"`
	Action   string   `json:"action,omitempty"`
	// Boot places the entry relative to the current boot.
	Boot BootRelation `json:"boot,omitempty"`
	// Origin is the system the entry names (Redfish OriginOfCondition),
	// "" when it names none; OtherSystem is true when that is not the
	// target's system (a shared log on a multi-system BMC).
	Origin      string `json:"origin,omitempty"`
	OtherSystem bool   `json:"otherSystem,omitempty"`
	// Source names the log or register it came from ("SEL",
	// "Managers/1/LogServices/Sel", "expiration-flags").
	Source string `json:"source"`
	// Message is the BMC's text, for Events.
	Message string `json:"message,omitempty"`
}

// HostWatchdog is the watchdog's configuration and state as the BMC shows
// it. Redfish shows only FunctionEnabled and TimeoutAction; IPMI's Get
// Watchdog Timer shows the rest.
type HostWatchdog struct {
	// Reported: the BMC reports a host watchdog at all.
	Reported bool `json:"reported"`
	// FunctionEnabled (Redfish) or "timer running" (IPMI).
	Enabled bool `json:"enabled"`
	// TimeoutAction in Redfish's vocabulary.
	TimeoutAction string   `json:"timeoutAction,omitempty"`
	TimerUse      TimerUse `json:"timerUse,omitempty"`
	// Timeout and Remaining (IPMI initial and present countdown).
	Timeout   time.Duration `json:"timeout,omitempty"`
	Remaining time.Duration `json:"remaining,omitempty"`
	// ExpiredUses lists the timer uses whose expiration flag is set (IPMI).
	ExpiredUses []TimerUse `json:"expiredUses,omitempty"`
}

// BootMarker is what the BMC says about the current boot.
type BootMarker struct {
	// LastReset is when the BMC says the system was last reset or powered
	// on (Redfish ComputerSystem.LastResetTime), on the BMC's clock.
	LastReset time.Time `json:"lastReset,omitempty"`
	// BootProgress is Redfish BootProgress.LastState.
	BootProgress string `json:"bootProgress,omitempty"`
	// EntryID is the log record that marks the current boot's start
	// ("System Boot/Restart Initiated", OpenBMC's DCPowerOn), when found.
	EntryID string `json:"entryId,omitempty"`
}

// EvidenceReport is one read of a BMC's hung-node evidence, with the
// identity of the system it came from, read in the same operation.
type EvidenceReport struct {
	Identity Identity     `json:"identity"`
	Watchdog HostWatchdog `json:"watchdog"`
	Boot     BootMarker   `json:"boot"`
	Entries  []Evidence   `json:"entries,omitempty"`
	// Unsupported lists what this BMC could not be asked (no LogServices,
	// no SEL, no watchdog), so an Event can say which evidence is missing.
	Unsupported []string `json:"unsupported,omitempty"`
	Result
}

// EvidenceReader reads hung-node evidence. Implemented by the Redfish and
// IPMI clients; consumers declare their own narrower interfaces.
type EvidenceReader interface {
	ReadEvidence(ctx context.Context) (EvidenceReport, error)
}

// OpReadEvidence names the operation in errors and metrics.
const OpReadEvidence Op = "read-evidence"

// FirstSeen remembers, on the consumer's clock, when each evidence key was
// first seen. It is bookkeeping, not a decision: an entry first seen after
// the node's last observed renewal is one the node could not have written
// while we still heard from it. Not safe for concurrent use.
type FirstSeen struct {
	seen map[string]time.Time
}

// Observe records the keys of entries not seen before at now and returns
// each entry's first-seen time, in the entries' order. Keys are never
// forgotten: a read that misses an entry (a log service that failed to
// answer, a cleared log) must not make an old entry new again when it
// reappears; a recycled record id stays old, which can only make evidence
// count less. Entries present at the first read are first seen then, which
// is before any renewal observed afterwards.
func (f *FirstSeen) Observe(now time.Time, entries []Evidence) []time.Time {
	if f.seen == nil {
		f.seen = map[string]time.Time{}
	}
	out := make([]time.Time, len(entries))
	for i, e := range entries {
		t, ok := f.seen[e.Key]
		if !ok {
			t = now
			f.seen[e.Key] = t
		}
		out[i] = t
	}
	return out
}

// OpDiagnostic names the diagnostic interrupt (NMI for a crash dump):
// Redfish ComputerSystem.Reset Nmi, IPMI chassis control 04h.
const OpDiagnostic Op = "diagnostic-interrupt"

// Diagnoser sends the host an NMI for a crash dump. Implemented by the
// Redfish client (ResetType Nmi, only where AllowableValues lists it) and
// the IPMI client (chassis power diag). Gating it (the same evidence as a
// ForceOff, the storm guard, the fencing token) is the engine's business.
type Diagnoser interface {
	Diagnostic(ctx context.Context) (Result, error)
}
