// Package mutant switches off one rule at a time in a mutation test of the
// unit tests: a rule outside the simulation's reach (redaction, the merged
// per-node policy's validation, request authorization, the refusal of a
// state written by a newer version, the chassis rule's exceptions, the
// identity of a system that answers 503, the outlet identity test) is
// proven by its own tests only if
// they fail when the rule is gone. A rule no mutant proves is a rule
// nobody has tested.
//
// In every build but the mutation test's, On is a constant false and the
// compiler removes every branch that tests it. Under the build tag mutant,
// On(name) is true for exactly the name set at link time:
//
//	go test -tags mutant -ldflags "-X github.com/bmcfence/bmcfence/internal/mutant.name=redact-raw-first" ./bmc/...
//
// hack/unitmutants runs every mutant against the tests that must kill it
// (make unit-mutants). The package imports nothing, so the pure engine
// (fence) may use it without leaving the standard library's world.
package mutant

// Name names one unit mutant: the rule it switches off.
type Name string

// The unit mutants. Each lists, in All, the packages whose tests must fail
// when it is on.
const (
	// RedactRawFirst: BMC error text is redacted before it is collapsed
	// into one line or cut to length. The mutant collapses and cuts first
	// (the defect fixed in issue 17).
	RedactRawFirst Name = "redact-raw-first"
	// RedactEncodedForms: the password is found in any mix of JSON and URL
	// escapes. The mutant looks for it as is only.
	RedactEncodedForms Name = "redact-encoded-forms"
	// MergedPolicy: every merged per-node policy (the agent's policy with
	// inventory.defaults' or a node entry's settle windows) is validated,
	// at load and when the inventory changes. The mutant validates the
	// policy alone.
	MergedPolicy Name = "merged-policy"
	// RequestAuthorization: a request is acted on only if the admission
	// policy and its Deny binding were in force, observed by the agent,
	// from before the request's creation until it is taken. The mutant
	// trusts a request whenever the binding exists (the defect fixed in
	// issue 17).
	RequestAuthorization Name = "request-authorization"
	// MixedVersion: a fence state this version cannot read exactly (an
	// unknown field, name or version) is refused, never read with the
	// unknown parts dropped. The mutant reads what it knows and drops the
	// rest.
	MixedVersion Name = "mixed-version"
	// MetricsTokenHash: the metrics token cache is keyed by a hash of the
	// token, never the token. The mutant keys it by the token itself.
	MetricsTokenHash Name = "metrics-token-hash"
	// ChassisSetAside: a Redfish system's Off counts without its chassis's
	// agreement only where the chassis is no evidence: the service root
	// identifies an emulator whose chassis is a static template and whose
	// system follows the machine (HPE's iLO emulator), or the operator
	// configured chassisPower: ignore. The mutant sets aside any chassis
	// that disagrees, under auto.
	ChassisSetAside Name = "chassis-set-aside"
	// SushyChassisByConfiguration: sushy-tools' chassis is set aside only
	// by chassisPower: ignore, never because its service root names it
	// (behind the same root, its nova and ironic drivers read machines
	// that are not off as Off). The mutant sets it aside when the service
	// root names sushy-tools.
	SushyChassisByConfiguration Name = "sushy-chassis-by-configuration"
	// AMIIdentityBinding: a system that answers 503 while its host is off
	// (AMI multi-system BMCs) is identified by the identity last read from
	// it only while its BMC and chassis still read as they did then. The
	// mutant returns the remembered identity without comparing.
	AMIIdentityBinding Name = "ami-identity-binding"
	// VerifyOutletOneSupply: the outlet identity test ties an outlet to a
	// supply only if exactly one of the machine's supplies lost its input.
	// The mutant accepts any number.
	VerifyOutletOneSupply Name = "verify-outlet-one-supply"
	// OutletOffReadBack: the outlet identity test reads the outlet back
	// after the PDU accepted the off, and a loss counts only if it reads
	// Off. The mutant takes the acceptance for the Off.
	OutletOffReadBack Name = "outlet-off-read-back"
	// EvidenceTarget: hung-node evidence counts only when it was read
	// from the fence's BMC target, that target's identity verified: the
	// runner reads it anew whenever the target changes, and the engine
	// compares the targets. The mutant takes whatever evidence the runner
	// read last, from any target, verified or not.
	EvidenceTarget Name = "evidence-target"
	// EvidenceAfterDiagnose: after the fence's diagnostic interrupt (a
	// kdump kernel reboots the machine), hung-node evidence counts only if
	// read with the reading it comes with: a cached read may predate the
	// reboot. The mutant takes the cached read.
	EvidenceAfterDiagnose Name = "evidence-after-diagnose"
	// LeaseReadCurrent: a live Lease read stamps the view fresh
	// (NodeView.LeaseReadAt) only when the server holds no renewal and no
	// Ready heartbeat that our view has not taken in. The mutant stamps
	// whatever the read found. (The simulation cannot kill it: the
	// server recheck right before the ForceOff asks the same question
	// later and stops the ForceOff; this rule is the earlier line.)
	LeaseReadCurrent Name = "lease-read-current"
	// QuietRenewalsOnly: the runner's scheduling loop keeps a node's due
	// time, handing no sync to a worker, only for a renewal of a quiet
	// Healthy node (a sync that would step nothing). The mutant keeps it
	// for any change of a node that is due later: a human's request, a
	// Ready turning False, a state someone else wrote wait for the node's
	// next wake.
	QuietRenewalsOnly Name = "quiet-renewals-only"
	// LeaseListStart: a list of the node Leases proves the view fresh as
	// of the list's start (cluster.APIFreshAt). The mutant stamps its end:
	// a renewal written during the list, and missing from it, would be
	// counted as silence.
	LeaseListStart Name = "lease-list-start"
	// FreshBeforeView: a runner step reads the proof of the view's
	// freshness (APIFreshAt) before the node's view. The mutant reads it
	// when deciding, after the view: a list completing in between pairs an
	// old renewal with a newer proof.
	FreshBeforeView Name = "fresh-before-view"
	// LifePlacementBound: a power-off event is ordered after a Lease
	// renewal placed at the start of the list before the one that
	// brought it in only when it was received at most
	// fence.MaxLifePlacement before the renewal was taken in. The mutant
	// places it there whatever the times: after a stalled view, an event
	// from before a reboot that the renewal followed would start a fence
	// early.
	LifePlacementBound Name = "life-placement-bound"
	// KeepOffRenewal: after a keep-off ForceOff, our taint comes off only
	// on a renewal written after it (fence recoveredAfterTaint). The
	// mutant takes any renewal taken in after it: one a slow Lease list
	// brought in after our ForceOff, written before it, untaints a
	// machine we have just powered off. The simulation found it once in
	// 100 000 scenarios (seed 57092), too rarely for its mutation test.
	KeepOffRenewal Name = "keep-off-renewal"
	// UntaintServerReady: our taint is removed only if the node, read
	// from the API server for the write, is Ready. The mutant removes it
	// on the engine's view alone, which may lag behind a node that died
	// again.
	UntaintServerReady Name = "untaint-server-ready"
	// ElectorOwnClock: a standby takes a Lease held by another only after
	// its record stayed unchanged for its duration on the standby's clock.
	// The mutant counts from the record's renewTime, another machine's
	// clock.
	ElectorOwnClock Name = "elector-own-clock"
	// ElectorRenewDeadline: a leader whose renewals fail stops leading at
	// the renew deadline, before the Lease can expire for a standby. The
	// mutant keeps trying.
	ElectorRenewDeadline Name = "elector-renew-deadline"
	// ElectorKeepOnLoss: a leader that lost a renewal lets its Lease
	// expire, since its work is only then being cancelled. The mutant
	// releases it, as client-go does.
	ElectorKeepOnLoss Name = "elector-keep-on-loss"
	// ElectorGuardedWrite: the elector's writes carry the resourceVersion
	// last read, so one based on a stale read fails. The mutant writes
	// unconditionally.
	ElectorGuardedWrite Name = "elector-guarded-write"
)

// Mutant is one unit mutant and the packages whose tests must kill it.
type Mutant struct {
	Name     Name
	Packages []string
	// Run, when set, narrows the tests run (go test -run).
	Run string
}

// All lists every unit mutant.
func All() []Mutant {
	return []Mutant{
		{Name: RedactRawFirst, Packages: []string{"./bmc/redfish", "./bmc/ipmi", "./pdu/redfishpdu", "./pdu/snmppdu"}, Run: "Redact|Password|NeverCarry"},
		{Name: RedactEncodedForms, Packages: []string{"./bmc"}, Run: "Redact"},
		{Name: MergedPolicy, Packages: []string{"./internal/config", "./internal/inventory"}, Run: "MergedPolicy|SettleWindow"},
		{Name: RequestAuthorization, Packages: []string{"./cluster/requests"}, Run: "Admission|Vouch|Request"},
		{Name: MixedVersion, Packages: []string{"./fence", "./fence/runner"}, Run: "Decode|Version|PreviousRelease|Unreadable"},
		{Name: MetricsTokenHash, Packages: []string{"./internal/agent"}, Run: "MetricsAuth|TokenCache"},
		{Name: ChassisSetAside, Packages: []string{"./bmc/dial"}, Run: "Chassis|Sushy|OpenBMC"},
		{Name: SushyChassisByConfiguration, Packages: []string{"./bmc/dial"}, Run: "Chassis|Sushy|OpenBMC"},
		{Name: AMIIdentityBinding, Packages: []string{"./bmc/dial"}, Run: "AMIMulti"},
		{Name: VerifyOutletOneSupply, Packages: []string{"./pdu"}, Run: "VerifyOutlet"},
		{Name: OutletOffReadBack, Packages: []string{"./pdu"}, Run: "VerifyOutlet"},
		{Name: EvidenceTarget, Packages: []string{"./fence", "./fence/runner"}, Run: "HungNodeEvidence"},
		{Name: EvidenceAfterDiagnose, Packages: []string{"./fence"}, Run: "DiagnoseThenOnlyEvidence"},
		{Name: LeaseReadCurrent, Packages: []string{"./fence/runner"}, Run: "LiveLeaseRead"},
		{Name: QuietRenewalsOnly, Packages: []string{"./fence/runner"}, Run: "QuietNodesRenewals"},
		{Name: LeaseListStart, Packages: []string{"./cluster"}, Run: "LeaseList"},
		{Name: FreshBeforeView, Packages: []string{"./fence/runner"}, Run: "FreshnessProof"},
		{Name: LifePlacementBound, Packages: []string{"./fence"}, Run: "LifePlacement"},
		{Name: KeepOffRenewal, Packages: []string{"./fence"}, Run: "KeepOffForceOff"},
		{Name: UntaintServerReady, Packages: []string{"./cluster"}, Run: "RemoveTaint"},
		{Name: ElectorOwnClock, Packages: []string{"./cluster"}, Run: "Elector"},
		{Name: ElectorRenewDeadline, Packages: []string{"./cluster"}, Run: "Elector"},
		{Name: ElectorKeepOnLoss, Packages: []string{"./cluster"}, Run: "RunLeaderCampaignsAgainAfterLosing"},
		{Name: ElectorGuardedWrite, Packages: []string{"./cluster"}, Run: "Elector"},
	}
}
