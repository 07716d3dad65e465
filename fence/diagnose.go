package fence

import (
	"errors"
	"time"

	unitmutant "github.com/bmcfence/bmcfence/internal/mutant"
)

// A crash dump before the off (Policy.DiagnoseBeforeOff, docs/safety.md,
// "Crash dump before the off"). A hung node's kernel is set up for kdump;
// an NMI makes it panic into the capture kernel, which writes the dump
// (and usually reboots). The NMI stops a live kernel as surely as a
// ForceOff stops its machine, so it goes out only where the ForceOff it
// precedes would, at the very place that ForceOff would be sent: after the
// same licence (hung-node evidence or FenceAfter), the same planned-reboot
// hold, attempts, storm guard and control-plane rules (admitPowerOff), and
// through the runner's fencing token, server recheck and identity check.
// Then the ForceOff waits DiagnoseTimeout, and the fence decides again from
// scratch: a node that came back (it renewed its Lease: kdump rebooted it
// into a healthy boot) is not fenced; one still due gets its ForceOff, gated
// again.

// MaxDiagnoseTimeout bounds Policy.DiagnoseTimeout: the wait holds the
// failover back, and a dump that takes longer than this is better taken
// with the node out of the fence (kubectl fence abort, then a dump by hand).
const MaxDiagnoseTimeout = 10 * time.Minute

// ErrDiagnoseTimeout: a diagnose timeout out of its range.
var ErrDiagnoseTimeout = errors.New("must be more than 0 and at most 10m0s")

// DiagnoseTimeoutError says whether d is a usable diagnose timeout (the
// configuration's policy, inventory.defaults and entries share it).
func DiagnoseTimeoutError(d time.Duration) error {
	if d <= 0 || d > MaxDiagnoseTimeout {
		return ErrDiagnoseTimeout
	}
	return nil
}

// diagnoseWanted: this fence would send a diagnostic interrupt before its
// ForceOff to a machine reading rd: the policy asks for it, the machine
// reads exactly On with no Off of ours behind (an Off machine, or one
// powering on or off, has no running kernel to dump), no ForceOff went out
// in this fence yet, and the fence is the agent's own for a hung node (a
// human's fence request and the NotReady opt-in go straight to the
// ForceOff).
func (st *stepper) diagnoseWanted(rd Reading) bool {
	return st.p.DiagnoseBeforeOff && !st.s.DiagnoseSkipped && rd.Failure == "" && rd.Power == PowerOn &&
		st.s.PowerOffs == 0 && !st.forceOffSent() && !st.s.Manual && !st.s.NotReadyFence && !st.s.Attested
}

// diagnoseFirst is called right where a ForceOff to a machine reading On
// is about to be sent, its licence and admission taken (why says them).
// It sends the diagnostic interrupt instead the first time, and holds the
// ForceOff back until DiagnoseTimeout has passed since; it reports whether
// it held it.
func (st *stepper) diagnoseFirst(rd Reading, why string) bool {
	if st.s.DiagnoseAt.IsZero() {
		if !st.diagnoseWanted(rd) {
			return false
		}
		st.sendDiagnose("%s: sending a diagnostic interrupt (NMI) for a crash dump first (policy diagnoseBeforeOff); the ForceOff waits %s (diagnoseTimeout), then the fence decides again", why)
		return true
	}
	if st.s.DiagnoseSkipped || st.s.PowerOffs > 0 || st.s.Manual {
		return false
	}
	if left := st.p.DiagnoseTimeout - st.now.Sub(st.s.DiagnoseAt); left > 0 {
		st.scheduleRead(left)
		return true
	}
	return false
}

func (st *stepper) sendDiagnose(format, why string) {
	st.s.DiagnoseAt = st.now
	st.event(true, "FenceDiagnose", format, why, st.p.DiagnoseTimeout)
	st.emit(ActDiagnose)
	st.scheduleRead(st.p.DiagnoseTimeout)
}

// diagnoseResult takes the runner's answer to the diagnostic interrupt; it
// reports whether it handled the input. One not sent (a BMC without a
// diagnostic interrupt, a Redfish system that does not list Nmi, the
// server recheck) is skipped with an Event, and the fence goes on at once;
// one sent, whatever the BMC answered, may have reached the kernel: the
// wait stands.
func (st *stepper) diagnoseResult() bool {
	if st.in.Kind != InputResult || st.in.Result.Action != ActDiagnose {
		return false
	}
	r := st.in.Result
	if r.Err == "" || !r.NotSent {
		st.wakeAtTime(st.s.NextReadAt)
		return true
	}
	st.s.DiagnoseSkipped = true
	st.sideEffct = true
	st.event(true, "FenceDiagnoseSkipped", "no crash dump: the diagnostic interrupt was not sent (%s); going on with the fence without waiting", r.Err)
	st.readNow()
	return true
}

// diagnoseUngated is the mutant of CheckDiagnoseGate: the interrupt goes
// out as soon as a suspect's machine reads On, before any licence or
// admission. It reports whether it sent one.
func (st *stepper) diagnoseUngated(rd Reading) bool {
	if Enabled(CheckDiagnoseGate) || !st.diagnoseWanted(rd) || !st.s.DiagnoseAt.IsZero() {
		return false
	}
	st.s.DiagnoseAt = st.now
	st.event(true, "FenceDiagnose", "sending a diagnostic interrupt (NMI) without the ForceOff's gate")
	st.emit(ActDiagnose)
	st.scheduleRead(st.p.ReadInterval)
	return true
}

// FleetPhase is the phase other nodes' fleet views count this state in
// (FleetView.InFlight, the control-plane counts). A fence that sent its
// diagnostic interrupt and waits on the dump counts as PoweringOff: in
// flight, as the ForceOff it stands for will be, since the interrupt may
// have stopped a kernel that ran; so maxConcurrentFences and the
// control-plane rules hold for the interrupts too, not only for the
// ForceOffs after them.
func (s State) FleetPhase() Phase {
	if s.Phase == Suspect && !s.DiagnoseAt.IsZero() && !s.DiagnoseSkipped && s.PowerOffs == 0 {
		return PoweringOff
	}
	return s.Phase
}

// evidenceAfterDiagnose: after this fence's diagnostic interrupt (a kdump
// kernel writes its dump and reboots the machine), hung-node evidence
// counts only if it was read with this very reading, after the interrupt:
// a read the runner cached may predate that reboot, and the entry it
// counts as this boot's be the old boot's, while the machine boots into a
// healthy kernel. Without an interrupt, evidence counts as it always did.
func (st *stepper) evidenceAfterDiagnose(rd Reading) bool {
	if st.s.DiagnoseAt.IsZero() || unitmutant.On(unitmutant.EvidenceAfterDiagnose) {
		return true
	}
	h := st.in.Host
	return !h.At.Before(rd.At) && h.At.After(st.s.DiagnoseAt)
}
