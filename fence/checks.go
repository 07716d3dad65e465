package fence

// Check names one safety check. Every check is on in every build but the
// mutation test's (build tag "mutant"), which turns exactly one off to prove
// that the randomized simulation notices: a check no mutant proves is a
// check nobody has tested (docs/design.md §2, "Evidence that can fail").
type Check string

// The checks a mutant may disable. The engine consults the first three and
// keep-off and request-age; the runner the others.
const (
	// CheckOurOwnOff: an Off counts only after a ForceOff of ours the BMC
	// accepted; otherwise only over UnassistedSettleWindow.
	CheckOurOwnOff Check = "our-own-off"
	// CheckLeaseWitness: suspicion needs Lease silence (not NotReady), and
	// a renewal after our accepted ForceOff stops the fence.
	CheckLeaseWitness Check = "lease-witness"
	// CheckIdentity: the BMC target is verified against the node's UUID
	// whenever it changes, before every ForceOff and before the taint.
	CheckIdentity Check = "identity-per-target"
	// CheckFencingToken: the taint and a ForceOff's licence are
	// conditional on the state annotation being what this runner wrote.
	CheckFencingToken Check = "fencing-token"
	// CheckOneClock: a state another process wrote is adopted onto our
	// clock (Adopt) before any of its times are compared with ours.
	CheckOneClock Check = "one-clock"
	// CheckRequestAge: a fence or confirm request expires MaxRequestAge
	// after we first saw it, checked when it is taken.
	CheckRequestAge Check = "request-age"
	// CheckAdmission: the storm guard's admission is atomic across the
	// runner's workers.
	CheckAdmission Check = "atomic-admission"
	// CheckPowerLossOff: the power-loss admission (AdmitPowerLoss: no
	// storm fraction, no cooldown) is taken only on an exact-Off reading;
	// a ForceOff to a machine reading anything else needs the whole guard.
	CheckPowerLossOff Check = "power-loss-reads-off"
	// CheckKeepOff: from the taint until detach completes, power is read
	// again and a machine found On is forced off again.
	CheckKeepOff Check = "keep-off"
)

// Checks lists every check a mutant may disable.
func Checks() []Check {
	return []Check{CheckOurOwnOff, CheckLeaseWitness, CheckIdentity, CheckFencingToken,
		CheckOneClock, CheckRequestAge, CheckAdmission, CheckKeepOff, CheckPowerLossOff}
}
