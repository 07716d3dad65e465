package fence

// Check names one safety check. Every check is on in every build but the
// mutation test's (build tag "mutant"), which turns exactly one off to prove
// that the randomized simulation notices: a check no mutant proves is a
// check nobody has tested (docs/design.md §2, "Evidence that can fail").
type Check string

// The checks a mutant may disable. The engine consults our-own-off,
// lease-witness, identity-per-target's reading side, keep-off, request-age,
// power-loss-reads-off, own-off-within, untrusted-acceptance,
// notready-lease-after-forceoff and storm-exemption-ours; the runner
// identity-per-target, fencing-token, one-clock, atomic-admission,
// recheck-decided-view and split-brain-count; the cluster adapter (package cluster, and its model
// in fencesim) pod-delete-recheck, pod-delete-preconditions and
// write-precondition. The engine also consults pods-listed.
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
	// CheckOwnOffWithin: an accepted ForceOff makes an Off ours only if the
	// machine reads Off within Policy.OwnOffWithin of it; a later Off (a
	// watchdog's power cycle after an ignored ForceOff) settles only over
	// UnassistedSettleWindow.
	CheckOwnOffWithin Check = "own-off-within"
	// CheckUntrustedAcceptance: a machine that runs after this BMC accepted
	// a ForceOff (On ownOffWithin later, or up again after reading Off)
	// voids every acceptance of this BMC for the rest of the fence.
	CheckUntrustedAcceptance Check = "untrusted-acceptance"
	// CheckNotReadyLease: a fence under the powerOffNotReadyAfter opt-in
	// (its kubelet renewed until we acted) taints only once the Lease has
	// been silent for SuspectAfter after our ForceOff, so a BMC that
	// accepts and reads Off while the machine runs meets the kubelet's
	// next renewal (a contradiction) first.
	CheckNotReadyLease Check = "notready-lease-after-forceoff"
	// CheckStormExemptionOurs: a storm holds back every taint but one whose
	// Off is ours (accepted, trusted, begun within ownOffWithin), not
	// merely accepted.
	CheckStormExemptionOurs Check = "storm-exemption-ours"
	// CheckPodDeleteRecheck: right before each force-delete of a pod the
	// cluster adapter reads the node again and checks the fencing token and
	// the out-of-service taint: a leader paused between the list and the
	// delete deletes nothing once another moved on or the taint is gone.
	CheckPodDeleteRecheck Check = "pod-delete-recheck"
	// CheckPodDeletePreconditions: each force-delete carries the pod's UID
	// and resourceVersion as listed: a pod its kubelet (or anyone) touched
	// since, or a new pod under the name, is never deleted by a stale act.
	CheckPodDeletePreconditions Check = "pod-delete-preconditions"
	// CheckPodsListed: a fence counts its node detached only when the
	// node's pods were listed (NodeView.PodsUnknown false): the agent
	// lists the pods of a node only once its fence reaches the taint, and
	// an unfinished list reads as no pods.
	CheckPodsListed Check = "pods-listed"
	// CheckWritePrecondition: a token-guarded write (the taint, its
	// removal) is preconditioned on the resourceVersion of the node it
	// checked the token against, so the check and the write are one.
	CheckWritePrecondition Check = "write-precondition"
	// CheckSplitBrainCount: fences in flight and their admissions are
	// counted from the persisted states of all nodes, not only from this
	// agent's memory: two agents that both believe they lead count each
	// other's.
	CheckSplitBrainCount Check = "split-brain-count"
	// CheckRecheckDecided: the server recheck before a ForceOff or a taint
	// compares with the view the engine decided on, not with what our own
	// reads (the state persist) took in since: a heartbeat the persist
	// absorbed still stops the act.
	CheckRecheckDecided Check = "recheck-decided-view"
	// CheckPlannedReboot: while a planned-reboot signal holds (NodeView.
	// PlannedReboot, within Policy.RebootWindow of when we saw it), no
	// ForceOff of the agent's own goes to a machine that reads anything
	// but exact Off: a long POST is not a dead node.
	CheckPlannedReboot Check = "planned-reboot"
	// CheckControlPlaneOne: at most one control-plane node in a fence (an
	// in-flight phase) at a time.
	CheckControlPlaneOne Check = "control-plane-one-at-a-time"
	// CheckEtcdQuorum: no ForceOff to a control-plane node unless the
	// other control-plane nodes whose machines may run (not confirmed off
	// by our fence) are a quorum of all of them.
	CheckEtcdQuorum Check = "etcd-quorum"
	// CheckEventSystem: a power-off event starts a fence early only if it
	// names the node's own system (not empty, not another system of a
	// multi-system BMC).
	CheckEventSystem Check = "event-system"
	// CheckEventFresh: a power-off event starts a fence early only if it
	// is live: not a replay, no gap before it, on a stream connected before
	// the node's last observed sign of life, and received after it.
	CheckEventFresh Check = "event-fresh"
	// CheckEventSilence: a power-off event starts a fence early only once
	// the Lease has been silent for Policy.EventSilence plus our view's
	// staleness.
	CheckEventSilence Check = "event-silence"
	// CheckOutletDrawless: a fencing level's reading is drawless (the
	// power-loss path: no fenceAfter, no storm fraction) only when every
	// outlet's own metering reads about 0 W; an outlet that is on may feed
	// a running machine behind a partition. The runner's.
	CheckOutletDrawless Check = "outlet-drawless-metered"
	// CheckOutletsAllOff: a PDU level reads Off only when every one of its
	// outlets reads exactly Off: a machine with two supplies runs on the
	// outlet left on. The level's (the inventory's and fencesim's).
	CheckOutletsAllOff Check = "outlets-all-off"
	// CheckOutletProof: an outlet counts only with a recorded outlet
	// identity proof for this node's machine (or the explicit
	// allowUnverifiedOutlet opt-in): a wrong outlet cuts another machine
	// and reads Off while this one runs. The level's Verify.
	CheckOutletProof Check = "outlet-proof"
	// Hung-node evidence (fence/hostevidence.go): an entry of the BMC's
	// log makes a ForceOff to a machine reading On due before FenceAfter
	// only if each of these holds.
	//
	// CheckEvidenceKind: the entry is an OS critical stop, or a watchdog
	// expiry whose timer use is SMS/OS (BIOS/POST and OS Load timers
	// expire on booting machines; an unknown use proves nothing).
	CheckEvidenceKind Check = "evidence-kind"
	// CheckEvidenceBoot: the entry was logged in the current boot.
	CheckEvidenceBoot Check = "evidence-boot"
	// CheckEvidenceSystem: the entry is about the target's own system.
	CheckEvidenceSystem Check = "evidence-system"
	// (That the evidence was read from the fence's BMC target, its
	// identity verified, is the runner's perimeter: the unit mutant
	// internal/mutant.EvidenceTarget.)
	// CheckEvidenceAfterRenewal: we first saw the entry after the node's
	// last observed renewal.
	CheckEvidenceAfterRenewal Check = "evidence-after-renewal"
	// CheckOwnNode: no ForceOff (through the BMC or a fencing level's
	// outlets) goes to the node the deciding agent's own replica runs on
	// (NodeView.RunsThisAgent): another replica fences it once it leads.
	CheckOwnNode Check = "own-node"
	// CheckDiagnoseGate: the diagnostic interrupt before the off
	// (Policy.DiagnoseBeforeOff: an NMI panics a live kernel set up for
	// kdump) goes out only where the ForceOff it precedes would: the same
	// licence (hung-node evidence or FenceAfter), planned-reboot hold,
	// storm guard and control-plane rules, and the runner's fencing token
	// and server recheck.
	CheckDiagnoseGate Check = "diagnose-gate"
	// (That after the fence's diagnostic interrupt hung-node evidence
	// counts only if read with the reading it comes with is the unit
	// mutant internal/mutant.EvidenceAfterDiagnose: the simulation found
	// the hazard once, but reaches it too rarely to kill a mutant in its
	// budget.)
)

// Checks lists every check a mutant may disable.
func Checks() []Check {
	return []Check{CheckOurOwnOff, CheckLeaseWitness, CheckIdentity, CheckFencingToken,
		CheckOneClock, CheckRequestAge, CheckAdmission, CheckKeepOff, CheckPowerLossOff,
		CheckOwnOffWithin, CheckUntrustedAcceptance, CheckNotReadyLease, CheckStormExemptionOurs,
		CheckPodDeleteRecheck, CheckPodDeletePreconditions, CheckPodsListed, CheckWritePrecondition, CheckRecheckDecided,
		CheckSplitBrainCount, CheckOutletDrawless, CheckOutletsAllOff, CheckOutletProof,
		CheckEvidenceKind, CheckEvidenceBoot, CheckEvidenceSystem, CheckEvidenceAfterRenewal,
		CheckPlannedReboot, CheckControlPlaneOne, CheckEtcdQuorum,
		CheckEventSystem, CheckEventFresh, CheckEventSilence,
		CheckOwnNode,
		CheckDiagnoseGate}
}
