package fence

import (
	"fmt"
	"strings"
	"time"

	unitmutant "github.com/bmcfence/bmcfence/internal/mutant"
)

// Hung-node evidence: what a node's BMC recorded about its host that the
// host's OS does not control (a watchdog that expired, an OS critical stop).
// The runner reads it (only for a node in Suspect whose BMC reads On) and
// hands it to Step with each reading as Input.Host; the engine lets an entry
// make a ForceOff due before FenceAfter only when it counts
// (evidenceLicence). Evidence starts the power-off sooner; it never stands
// in for the read-back Off after our own accepted ForceOff, nor for the
// Lease silence that gates the taint, and the storm guard's full admission
// applies as for any machine that reads On. These types mirror bmc's
// evidence types so that this package stays standard-library only.

// SignKind is what a BMC's entry says happened.
type SignKind uint8

const (
	SignUnknown SignKind = iota
	// SignWatchdogExpired: the BMC's host watchdog expired.
	SignWatchdogExpired
	// SignOSCriticalStop: the host's OS reported a critical stop (a
	// kernel panic) through the BMC.
	SignOSCriticalStop
)

func (k SignKind) String() string {
	switch k {
	case SignWatchdogExpired:
		return "watchdog expiry"
	case SignOSCriticalStop:
		return "OS critical stop"
	case SignUnknown:
	}
	return "unknown entry"
}

// SignTimerUse is who armed a watchdog that expired, as the BMC says.
// Only SMS/OS says the running OS stopped petting it.
type SignTimerUse uint8

const (
	// TimerUseUnknown: the BMC does not say (iDRAC's and iLO's Redfish
	// logs, IPMI's expiration flags alone).
	TimerUseUnknown SignTimerUse = iota
	TimerUseBIOSFRB2
	TimerUseBIOSPOST
	TimerUseOSLoad
	TimerUseSMSOS
	TimerUseOEM
)

func (u SignTimerUse) String() string {
	switch u {
	case TimerUseBIOSFRB2:
		return "BIOS FRB2"
	case TimerUseBIOSPOST:
		return "BIOS/POST"
	case TimerUseOSLoad:
		return "OS Load"
	case TimerUseSMSOS:
		return "SMS/OS"
	case TimerUseOEM:
		return "OEM"
	case TimerUseUnknown:
	}
	return "unknown timer use"
}

// SignBoot places an entry relative to the host's current boot, by what the
// BMC itself reports.
type SignBoot uint8

const (
	SignBootUnknown SignBoot = iota
	SignBootCurrent
	SignBootPrevious
)

// Sign is one entry of a BMC's hung-node evidence.
type Sign struct {
	Kind     SignKind
	TimerUse SignTimerUse
	Boot     SignBoot
	// OtherSystem: the entry names another system than the target's (a
	// log shared by several systems).
	OtherSystem bool
	// FirstSeen is when the runner first saw the entry's key, on our
	// clock: the entry's only time for any proof (the BMC's timestamp is
	// another process's clock).
	FirstSeen time.Time
	// Key identifies the entry (for Events); Source names its log.
	Key    string
	Source string
}

// HostEvidence is the latest read of a node's BMC evidence, as the runner
// hands it to Step with a reading. The zero value is "not read".
type HostEvidence struct {
	// At is when the read was sent (zero: never read in this fence).
	At time.Time
	// Target is the BMC target it was read from, and Verified says the
	// runner had verified that target's identity for the node when it
	// read it.
	Target   string
	Verified bool
	Signs    []Sign
	// WatchdogReported and WatchdogArmed: what the BMC says about its
	// host watchdog (for the Event that says what was missing).
	WatchdogReported bool
	WatchdogArmed    bool
	// Unsupported lists what the BMC could not be asked; Failure is the
	// read's error, if it failed.
	Unsupported []string
	Failure     string
}

// While a planned reboot's window is open (plannedRebootOpen, step.go:
// NodeView.PlannedReboot within Policy.RebootWindow), no evidence counts (a
// POST, or a petter stopped for the reboot, expires a watchdog on a machine
// that is fine).

// signRejection says why one entry does not count, or "" when it does.
func (st *stepper) signRejection(h HostEvidence, rd Reading, sg Sign) string {
	n := st.node()
	switch {
	case Enabled(CheckEvidenceKind) && !(sg.Kind == SignOSCriticalStop || (sg.Kind == SignWatchdogExpired && sg.TimerUse == TimerUseSMSOS)):
		if sg.Kind == SignWatchdogExpired {
			return fmt.Sprintf("a watchdog expiry with timer use %s (only SMS/OS says the running OS stopped petting it)", sg.TimerUse)
		}
		return "not a watchdog expiry nor an OS critical stop"
	case Enabled(CheckEvidenceBoot) && sg.Boot != SignBootCurrent:
		if sg.Boot == SignBootPrevious {
			return "logged before the current boot"
		}
		return "the BMC does not say in which boot it was logged"
	case Enabled(CheckEvidenceBoot) && rd.Power != PowerOn:
		// A boot that has not reached On: a long POST expires the SMS/OS
		// timer Linux re-arms for 120 s on reboot.
		return "the machine reads " + rd.Power.String() + ", not On: its boot is not over"
	case Enabled(CheckEvidenceBoot) && st.bootedDuringFence():
		// The machine went through a boot since the failure began: an
		// expiry of the current boot may be its POST's, and the OS that
		// came up has not renewed yet.
		return "the machine was read off or booting during this fence: the current boot began while the node was silent"
	case Enabled(CheckEvidenceSystem) && sg.OtherSystem:
		return "about another system than the node's"
	case !unitmutant.On(unitmutant.EvidenceTarget) && (!h.Verified || h.Target == "" || h.Target != rd.Target || h.Target != st.s.Target):
		return "not read from the fence's BMC target with its identity verified"
	case Enabled(CheckEvidenceAfterRenewal) && !sg.FirstSeen.After(n.RenewedAt):
		return "first seen by us before the node's last renewal (" + stamp(n.RenewedAt) + ")"
	case Enabled(CheckPlannedReboot) && plannedRebootOpen(st.p, n, st.now):
		return "a planned reboot's window is open"
	}
	return ""
}

// evidenceLicence returns what makes a ForceOff to a machine reading On due
// before FenceAfter: the first entry of the node's evidence that counts,
// described for the Event; "" when none does. The Lease silence of
// SuspectAfter (invariant 2) is checked by the admission as for every
// ForceOff.
func (st *stepper) evidenceLicence(rd Reading) string {
	if st.s.Manual || st.s.Attested || st.s.NotReadyFence {
		return ""
	}
	h := st.in.Host
	for _, sg := range h.Signs {
		if st.signRejection(h, rd, sg) == "" {
			return fmt.Sprintf("the BMC logged a %s (%s, %s, first seen %s, after the node's last renewal)", signText(sg), sg.Source, sg.Key, stamp(sg.FirstSeen))
		}
	}
	return ""
}

func signText(sg Sign) string {
	if sg.Kind == SignWatchdogExpired {
		return sg.TimerUse.String() + " " + sg.Kind.String()
	}
	return sg.Kind.String()
}

// evidenceMissing says which evidence was missing when a node reached
// FenceAfter without any that counts.
func (st *stepper) evidenceMissing(rd Reading) string {
	h := st.in.Host
	switch {
	case h.At.IsZero():
		return "no BMC evidence was read"
	case h.Failure != "":
		return "the BMC's evidence could not be read (" + h.Failure + ")"
	}
	var parts []string
	if len(h.Unsupported) > 0 {
		parts = append(parts, "the BMC does not offer "+strings.Join(h.Unsupported, ", "))
	}
	if h.WatchdogReported && !h.WatchdogArmed {
		parts = append(parts, "no host watchdog armed")
	} else if !h.WatchdogReported {
		parts = append(parts, "no host watchdog reported")
	}
	if len(h.Signs) == 0 {
		parts = append(parts, "no watchdog expiry or OS critical stop logged")
	}
	for i, sg := range h.Signs {
		if i == 4 {
			parts = append(parts, fmt.Sprintf("%d more entries", len(h.Signs)-i))
			break
		}
		if why := st.signRejection(h, rd, sg); why != "" {
			parts = append(parts, fmt.Sprintf("%s %s refused: %s", signText(sg), sg.Key, why))
		}
	}
	return strings.Join(parts, "; ")
}

// bootedDuringFence: a reading since the failure began saw the machine off,
// powering off or booting.
func (st *stepper) bootedDuringFence() bool {
	for _, r := range st.s.Evidence.Records() {
		if r.Kind != RecReading || r.Until.Before(st.s.FailureStart) {
			continue
		}
		switch r.Power {
		case PowerOff, PowerPoweringOff, PowerPoweringOn:
			return true
		case PowerOn, PowerUnknown:
		}
	}
	return false
}
