package fence

import (
	"errors"
	"fmt"
	"time"
)

// Policy holds every threshold the engine uses. DefaultPolicy derives each
// value; Validate names the first bad field and its allowed range.
type Policy struct {
	// SuspectAfter is how long a node's Lease must be silent (no renewal
	// observed by us, on our clock) before we read its BMC. NotReady alone
	// is not silence: a kubelet whose runtime or CNI is down still renews.
	SuspectAfter time.Duration
	// FenceAfter is how long a node's Lease must be silent before we may
	// power off a node whose BMC still reads On. A node that already reads
	// Off needs no wait beyond SuspectAfter: our own ForceOff costs nothing
	// there, and proves what the Off alone cannot.
	FenceAfter time.Duration
	// SettleWindow and SettleReads define "off and staying off": SettleReads
	// consecutive exact-Off reads whose first and last are at least
	// SettleWindow apart.
	SettleWindow time.Duration
	SettleReads  int
	// UnassistedSettleWindow is how long a machine must read Off, with
	// SettleReads reads spanning it, when no ForceOff of ours was accepted
	// (the BMC answered "already in that state", ErrAlreadyInState, or the
	// command failed): an Off we did not cause. It must outlast any
	// restart's or power cycle's off-dwell, because a BMC answers "already
	// off" during one too.
	UnassistedSettleWindow time.Duration
	// MaxReadGap: two Off reads further apart than this are not
	// consecutive, and the run starts over.
	MaxReadGap time.Duration
	// ReadInterval is the BMC read cadence while a node is Suspect and its
	// BMC reads anything but Off.
	ReadInterval time.Duration
	// ReadBackoffMax caps the exponential backoff after failed reads.
	ReadBackoffMax time.Duration
	// PowerPollInterval is the read-back cadence after a power command.
	PowerPollInterval time.Duration
	// PowerTimeout is how long one ForceOff may take to read back Off before
	// it is sent again; PowerOffAttempts bounds the sends before the BMC is
	// declared a liar and the node Stuck.
	PowerTimeout     time.Duration
	PowerOffAttempts int
	// OwnOffWithin is how soon after a ForceOff the BMC accepted the machine
	// must read Off for that Off to be ours. A BMC that accepts a command
	// and ignores it says "accepted" too: an Off that comes later (a
	// watchdog's power cycle, a restart) settles only over
	// UnassistedSettleWindow, as does any Off after the machine read On
	// again once ours had taken.
	OwnOffWithin time.Duration
	// PowerOnTimeout bounds a power-on's read-back.
	PowerOnTimeout time.Duration
	// DetachTimeout is how long after the taint we wait for pods and
	// VolumeAttachments before warning, by name, about what blocks.
	DetachTimeout time.Duration
	// DetachPoll is the cadence of force-deleting terminating pods and
	// re-checking blockers while detaching.
	DetachPoll time.Duration
	// ForceDeletePods force-deletes terminating pods of a confirmed-off,
	// tainted node instead of waiting for the pod GC loop.
	ForceDeletePods bool
	// PowerOnAfterDetach powers the node back on once it is fenced.
	PowerOnAfterDetach bool
	// Storm guard (Admit). MaxConcurrentFences, the fraction, the
	// minimum and the cooldown bound ForceOffs to machines that may run
	// (the BMC read anything but exactly Off): the act a partition can
	// fake.
	MaxConcurrentFences  int
	MaxUnhealthyFraction float64
	StormMinUnhealthy    int
	Cooldown             time.Duration
	MaxAPIStaleness      time.Duration
	// MaxConcurrentPowerLossFences bounds fences admitted on an exact-Off
	// reading (AdmitPowerLoss): a machine that already reads Off (a rack's
	// PDU tripped) gets our own ForceOff without waiting for fenceAfter,
	// the cooldown, the other fences or the storm fraction, which a rack
	// loss would trip at once. A partition cannot fake an Off reading; it
	// can only hide the BMC (no reading: nothing admitted) or leave it
	// reading On (the bounded path). The fresh-view check stays absolute,
	// and the taint still needs our accepted ForceOff, a settled Off run
	// and a silent Lease.
	MaxConcurrentPowerLossFences int
	// StuckReadInterval is the slow BMC read cadence of a Stuck node, so a
	// node that a human powers off by hand is still fenced.
	StuckReadInterval time.Duration
	// AttestationTTL bounds how long a human's confirm stands: a taint not
	// applied by then needs a new confirm.
	AttestationTTL time.Duration
	// MaxRequestAge bounds how long after we first saw it a fence or
	// confirm request may still be taken.
	MaxRequestAge time.Duration
	// PowerOffNotReadyAfter, when positive, lets the agent power off a node
	// that has been NotReady this long even though its kubelet still renews
	// its Lease (container runtime or CNI down, kubelet up). Zero (the
	// default) never does: a renewing node is alive.
	PowerOffNotReadyAfter time.Duration
	// Detection says what may start a fence: the agent's own view of a
	// silent Lease (DetectBuiltin, the zero value), a remediation CR of
	// NodeHealthCheck or MachineHealthCheck for the node (DetectExternal:
	// NodeView.Remediation), or either (DetectBoth). It only gates the
	// start: the witnesses, the identity check and the storm guard are the
	// same whoever asked. Set from the agent's top-level `detection`
	// setting (a name, not this number), hence no mapstructure key.
	Detection Detection `mapstructure:"-"`
	// RebootWindow is how long a planned-reboot signal (NodeView.
	// PlannedReboot) holds, from when the agent first saw it: meanwhile the
	// agent sends no ForceOff to the node's machine unless it reads exact
	// Off (a long POST reads On or PoweringOn with the Lease silent for
	// minutes). A machine that stays off is still fenced.
	RebootWindow time.Duration
	// ExternalEtcd: the cluster's etcd does not run on its control-plane
	// nodes, so fencing them costs no etcd quorum. Control-plane nodes are
	// still fenced one at a time.
	ExternalEtcd bool
	// EventSilence is how long the Lease must have been silent, on our
	// clock, plus our view's staleness, before a power-off event the node's
	// BMC pushed may start its fence early (docs/safety.md, "Power
	// events"): one full renewal interval of the kubelet with a margin, so
	// the silence is a missed renewal, not the gap between two. Zero turns
	// the early start off; events then change nothing, as they do when it
	// is not shorter than SuspectAfter.
	EventSilence time.Duration
	// DiagnoseBeforeOff: before the first ForceOff of a fence to a machine
	// that reads On (a hung node: hung-node evidence or FenceAfter), send
	// it a diagnostic interrupt (an NMI) under the same gate, so that a
	// kernel set up for kdump writes a crash dump; then wait
	// DiagnoseTimeout and decide again from scratch (diagnose.go). Off by
	// default; an inventory entry or inventory.defaults may set both.
	DiagnoseBeforeOff bool
	DiagnoseTimeout   time.Duration
}

// ErrInvalidPolicy is wrapped by the errors about the detection setting.
var ErrInvalidPolicy = errors.New("invalid policy")

// Detection is what may start a fence (Policy.Detection).
type Detection uint8

const (
	DetectBuiltin Detection = iota
	DetectExternal
	DetectBoth
	numDetections
)

var detectionNames = [numDetections]string{"builtin", "external", "both"}

func (d Detection) String() string {
	if d < numDetections {
		return detectionNames[d]
	}
	return "detection?"
}

// ParseDetection reads "builtin", "external" or "both".
func ParseDetection(s string) (Detection, error) {
	for d := range numDetections {
		if s == detectionNames[d] {
			return d, nil
		}
	}
	return DetectBuiltin, fmt.Errorf("%w: detection %q (want builtin, external or both)", ErrInvalidPolicy, s)
}

// startsOnSilence: the agent's own detection may start a fence.
func (d Detection) startsOnSilence() bool { return d != DetectExternal }

// DefaultPolicy returns the defaults, each derived below.
func DefaultPolicy() Policy {
	return Policy{
		// The kubelet renews its Lease every 10 s (a quarter of the 40 s
		// lease). Two missed renewals rarely happen to a live node, and
		// suspicion only costs a BMC read.
		SuspectAfter: 20 * time.Second,
		// Until the pods' default not-ready/unreachable tolerations (300 s,
		// added by the DefaultTolerationSeconds admission plugin) run out,
		// Kubernetes itself keeps the pods, and a kubelet that comes back
		// loses nothing (seed timeline: kubelet stopped < 5 min → no
		// restarts). After that the pods are evicted anyway, so powering off
		// costs no more than Kubernetes already decided.
		FenceAfter: 300 * time.Second,
		// A BMC-driven restart (ForceRestart, IPMI power cycle) reads Off
		// for one to a few seconds before PoweringOn. Three Off reads 3 s
		// apart outlast that, and keep failover within 10 s of detection.
		// Raise both for BMCs with a longer off-dwell.
		SettleWindow: 6 * time.Second,
		SettleReads:  3,
		// An Off we did not cause may be a restart's off-dwell: BMCs hold
		// power off for 1-5 s in a power cycle by default, and the IPMI
		// power cycle interval and vendor settings stretch it to tens of
		// seconds. A minute outlasts every dwell we know of; a BMC that
		// answers "already off" costs one minute of failover, never a
		// rebooting node tainted.
		UnassistedSettleWindow: 60 * time.Second,
		// A hole this long (an agent restart, a stretch of slow reads)
		// means we did not watch the machine; it covers a BMC timing out
		// twice (2 × 10 s) plus the settle cadence.
		MaxReadGap: 30 * time.Second,
		// Half a lease renewal: a node that shuts down while Suspect is
		// seen within 5 s, at one cheap request per node.
		ReadInterval: 5 * time.Second,
		// One read a minute is enough to notice a BMC that comes back, and
		// little enough never to load one that struggles.
		ReadBackoffMax: 60 * time.Second,
		// ForceOff removes power within a second or two on real BMCs.
		PowerPollInterval: 2 * time.Second,
		// Thirty polls: a ForceOff that has not read back Off by then was
		// ignored (a lying BMC, or one busy with another command).
		PowerTimeout:     60 * time.Second,
		PowerOffAttempts: 3,
		// Real BMCs cut power within a second or two of an accepted
		// ForceOff: five power polls. Shorter is safer (less time for an
		// unrelated power cycle to pass for ours); a BMC slower than this
		// costs UnassistedSettleWindow of failover, never a wrong taint.
		OwnOffWithin: 10 * time.Second,
		// A power-on can take 45 s and more before the BMC reads On.
		PowerOnTimeout: 180 * time.Second,
		// The controllers act within seconds of the taint (podgc every
		// 20 s, force detach at once); five minutes means something
		// tolerates the taint or a volume will not detach.
		DetachTimeout: 5 * time.Minute,
		DetachPoll:    2 * time.Second,
		// Confirmed off and tainted: nothing can run there, so waiting for
		// the 20 s pod GC loop only delays failover.
		ForceDeletePods:    true,
		PowerOnAfterDetach: false,
		// One fence at a time: simultaneous failures usually share a cause
		// (switch, PDU, partition) that the fraction guard should see, and
		// serialising costs the second node one settle window.
		MaxConcurrentFences: 1,
		// The node lifecycle controller stops evicting from a zone at the
		// same point (--unhealthy-zone-threshold=0.55 with more than two
		// nodes not ready); we stop fencing there too, so the two agree.
		MaxUnhealthyFraction: 0.55,
		StormMinUnhealthy:    3,
		// Spacing fences lets one node's pods land before the next moves
		// and caps fencing at two a minute whatever marks nodes unhealthy.
		Cooldown: 30 * time.Second,
		// A view older than SuspectAfter could make a live node look dead;
		// other kubelets' lease renewals refresh it every few seconds.
		MaxAPIStaleness: 15 * time.Second,
		// A ForceOff to a machine that reads Off costs one BMC request and
		// the runner bounds BMC calls itself (bmc.concurrency); this bound
		// only keeps one correlated failure from filling the work queue.
		// Fifty covers a rack; raise it to the largest failure domain
		// (rack, PDU) you want failed over at once.
		MaxConcurrentPowerLossFences: 50,
		StuckReadInterval:            60 * time.Second,
		// A confirm is read against the BMC and applied within seconds;
		// five minutes covers an API server that refuses writes for a
		// while, and is short enough that "it is off" still holds.
		AttestationTTL: 5 * time.Minute,
		// Longer than the CLI waits for an agent, short enough that a
		// human's view of the machine is still current.
		MaxRequestAge: 15 * time.Minute,
		// A cold boot of a server with much memory spends minutes in its
		// POST (six, and more, are common); a window much longer keeps a
		// node that hung during its reboot from failing over for that long.
		RebootWindow: 15 * time.Minute,
		// The kubelet renews every 10 s (a quarter of the 40 s lease);
		// 2 s on top absorbs its jitter and our watch's latency.
		EventSilence: 12 * time.Second,
		// kdump boots its capture kernel and writes a dump of a small
		// server's kernel memory (makedumpfile, dump level 31) within a
		// minute to local disk; raise it for a dump over the network.
		DiagnoseTimeout: 60 * time.Second,
	}
}

// Validate returns an error naming every field outside its range, one per
// line (errors.Join).
func (p Policy) Validate() error {
	var errs []error
	// A bound may be another setting (fenceAfter is at least suspectAfter):
	// minOf/maxOf name it, the message says so, and a relation to a
	// setting that is itself out of its range is not checked (its own line
	// says what to fix; "between 1s and 1ns" would not).
	type bound struct {
		name         string
		v            time.Duration
		min, max     time.Duration
		minOf, maxOf string
	}
	durations := []bound{
		{"suspectAfter", p.SuspectAfter, 5 * time.Second, time.Hour, "", ""},
		{"fenceAfter", p.FenceAfter, p.SuspectAfter, 24 * time.Hour, "suspectAfter", ""},
		{"settleWindow", p.SettleWindow, time.Second, 10 * time.Minute, "", ""},
		{"unassistedSettleWindow", p.UnassistedSettleWindow, time.Second, time.Hour, "", ""},
		{"maxReadGap", p.MaxReadGap, p.SettleWindow / time.Duration(max(p.SettleReads-1, 1)), time.Hour, "settleWindow/(settleReads-1)", ""},
		{"readInterval", p.ReadInterval, 100 * time.Millisecond, 10 * time.Minute, "", ""},
		{"readBackoffMax", p.ReadBackoffMax, p.ReadInterval, time.Hour, "readInterval", ""},
		{"powerPollInterval", p.PowerPollInterval, 100 * time.Millisecond, time.Minute, "", ""},
		{"powerTimeout", p.PowerTimeout, p.PowerPollInterval, time.Hour, "powerPollInterval", ""},
		{"ownOffWithin", p.OwnOffWithin, p.PowerPollInterval, p.PowerTimeout, "powerPollInterval", "powerTimeout"},
		{"powerOnTimeout", p.PowerOnTimeout, p.PowerPollInterval, time.Hour, "powerPollInterval", ""},
		{"detachTimeout", p.DetachTimeout, time.Second, 24 * time.Hour, "", ""},
		{"detachPoll", p.DetachPoll, 100 * time.Millisecond, time.Minute, "", ""},
		{"cooldown", p.Cooldown, 0, time.Hour, "", ""},
		{"maxAPIStaleness", p.MaxAPIStaleness, time.Second, p.SuspectAfter, "", "suspectAfter"},
		{"stuckReadInterval", p.StuckReadInterval, time.Second, time.Hour, "", ""},
		{"attestationTTL", p.AttestationTTL, 10 * time.Second, time.Hour, "", ""},
		{"maxRequestAge", p.MaxRequestAge, time.Minute, 24 * time.Hour, "", ""},
		{"rebootWindow", p.RebootWindow, time.Minute, 24 * time.Hour, "", ""},
	}
	ints := []struct {
		name     string
		v        int
		min, max int
	}{
		{"settleReads", p.SettleReads, 2, 100},
		{"powerOffAttempts", p.PowerOffAttempts, 1, 20},
		{"maxConcurrentFences", p.MaxConcurrentFences, 1, 1000},
		{"maxConcurrentPowerLossFences", p.MaxConcurrentPowerLossFences, 1, 100000},
		{"stormMinUnhealthy", p.StormMinUnhealthy, 1, 100000},
	}
	invalid := map[string]bool{}
	for _, b := range ints {
		if b.v < b.min || b.v > b.max {
			invalid[b.name] = true
		}
	}
	for _, b := range durations {
		// Bounds are listed after the settings they refer to.
		if invalid[b.minOf] || invalid[b.maxOf] ||
			(b.minOf == "settleWindow/(settleReads-1)" && (invalid["settleWindow"] || invalid["settleReads"])) {
			continue
		}
		if b.v < b.min || b.v > b.max {
			invalid[b.name] = true
			lo, hi := b.min.String(), b.max.String()
			if b.minOf != "" {
				lo += " (policy." + b.minOf + ")"
			}
			if b.maxOf != "" {
				hi += " (policy." + b.maxOf + ")"
			}
			errs = append(errs, fmt.Errorf("policy.%s = %s: must be between %s and %s", b.name, b.v, lo, hi))
		}
	}
	// The unassisted window must outlast the settle window (a relation
	// between two settings: the line names both and what to fix, and is
	// not said when either is out of its own range).
	if !invalid["settleWindow"] && !invalid["unassistedSettleWindow"] && p.UnassistedSettleWindow <= p.SettleWindow {
		errs = append(errs, fmt.Errorf("policy.settleWindow = %s: not shorter than policy.unassistedSettleWindow = %s, so %w that long: set policy.unassistedSettleWindow longer than %s, or shorten policy.settleWindow",
			p.SettleWindow, p.UnassistedSettleWindow, ErrSettleInsideDwell, p.SettleWindow))
	}
	for _, b := range ints {
		if b.v < b.min || b.v > b.max {
			errs = append(errs, fmt.Errorf("policy.%s = %d: must be between %d and %d", b.name, b.v, b.min, b.max))
		}
	}
	if p.PowerOffNotReadyAfter != 0 && !invalid["suspectAfter"] && (p.PowerOffNotReadyAfter < p.SuspectAfter || p.PowerOffNotReadyAfter > 24*time.Hour) {
		errs = append(errs, fmt.Errorf("policy.powerOffNotReadyAfter = %s: must be 0 (off) or between %s (policy.suspectAfter) and %s", p.PowerOffNotReadyAfter, p.SuspectAfter, 24*time.Hour))
	}
	if p.EventSilence != 0 && (p.EventSilence < time.Second || p.EventSilence > time.Hour) {
		errs = append(errs, fmt.Errorf("policy.eventSilence = %s: must be 0 (off) or between 1s and 1h0m0s", p.EventSilence))
	}
	if p.DiagnoseBeforeOff || p.DiagnoseTimeout != 0 {
		if err := DiagnoseTimeoutError(p.DiagnoseTimeout); err != nil {
			errs = append(errs, fmt.Errorf("policy.diagnoseTimeout = %s: %w", p.DiagnoseTimeout, err))
		}
	}
	if p.Detection >= numDetections {
		errs = append(errs, fmt.Errorf("%w: policy.detection = %d: must be builtin, external or both", ErrInvalidPolicy, p.Detection))
	}
	if !(p.MaxUnhealthyFraction > 0 && p.MaxUnhealthyFraction <= 1) {
		errs = append(errs, fmt.Errorf("policy.maxUnhealthyFraction = %g: must be greater than 0 and at most 1", p.MaxUnhealthyFraction))
	}
	return errors.Join(errs...)
}

// ErrSettleInsideDwell: a settle window at least as long as the unassisted
// window. The unassisted window must outlast every off-dwell (an Off we did
// not cause may be one), and a settle window is set to a BMC's known dwell
// (docs/safety.md, "Premise"): with the two the wrong way round, an Off we
// did not cause could settle inside a dwell that long.
var ErrSettleInsideDwell = errors.New("an Off we did not cause could settle inside an off-dwell")

// SettleInterval spaces the settle reads across the window, at most
// ReadInterval apart: a long window (a vendor's override) is watched with
// more reads, not sparser ones, so a machine that comes up inside it is
// seen within a read interval.
func (p Policy) SettleInterval() time.Duration {
	return min(p.SettleWindow/time.Duration(p.SettleReads-1), p.ReadInterval)
}
