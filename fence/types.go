package fence

import "time"

// Power is a BMC power reading as the engine sees it. It mirrors
// bmc.PowerState (the runner maps one to the other) so that this package
// stays standard-library only. The zero value is PowerUnknown.
type Power uint8

const (
	PowerUnknown Power = iota
	PowerOn
	PowerOff
	PowerPoweringOn
	PowerPoweringOff
	numPowers
)

var powerNames = [numPowers]string{"Unknown", "On", "Off", "PoweringOn", "PoweringOff"}

func (p Power) String() string {
	if p < numPowers {
		return powerNames[p]
	}
	return "Unknown"
}

// Readiness is the node's Ready condition as the API shows it.
type Readiness uint8

const (
	ReadyUnknown Readiness = iota
	ReadyTrue
	ReadyFalse
)

func (r Readiness) String() string {
	switch r {
	case ReadyTrue:
		return "True"
	case ReadyFalse:
		return "False"
	default:
		return "Unknown"
	}
}

// TaintState says whether the node carries the out-of-service taint, and
// whose it is (the owner annotation).
type TaintState uint8

const (
	TaintAbsent TaintState = iota
	TaintOurs
	TaintForeign
)

// NodeView is the latest view of one node, every time stamped by the
// runner's clock when *we* observed it: a dead node's own timestamps prove
// nothing, and a node's clock may be skewed.
type NodeView struct {
	Ready Readiness
	// NotReadySince is when we observed Ready leave True (zero while Ready).
	NotReadySince time.Time
	// HeartbeatAt is when we last observed a sign of life: the node's Lease
	// renewTime or its Ready heartbeat changing. The observation builder
	// sets it to the first time it saw the node, so a restarted agent judges
	// silence only from its own start. Zero means "not observed yet" and is
	// never taken as silence.
	HeartbeatAt time.Time
	// HeartbeatFrom is the earliest moment, on our clock, that the sign of
	// life HeartbeatAt took in can have been written: for a Lease renewal
	// brought in by a list, the start of the last list before it (the
	// renewal was not in that one). Zero when not known (a Ready heartbeat
	// seen through the Node watch, the process's first list): HeartbeatAt
	// is used.
	// Only the power-event rule reads it (lifeFor).
	HeartbeatFrom time.Time
	// RenewedAt is when we observed the node actually renew (a renewTime or
	// heartbeat different from one we had already seen). Zero until then:
	// the first sighting of a node, which HeartbeatAt counts for silence,
	// is no sign of life. Every "the node is alive" decision uses it.
	RenewedAt time.Time
	// Maintenance: a planned drain's mark is in force. A mark may carry a
	// duration, counted by the observation builder on our clock from when
	// it saw the mark; once it has passed, Maintenance is false and
	// MaintenanceExpired true (the engine says so when it leaves
	// Maintenance).
	Maintenance        bool
	MaintenanceExpired bool
	Excluded           bool
	HasBMC             bool
	// Remediation: a remediation CR of NodeHealthCheck or a
	// MachineHealthCheck asks for this node, and its creator has not given
	// up on it (nhc-timed-out). Under Policy.Detection external, only such
	// a node may start a fence, and a fence whose ForceOff was not yet
	// accepted stops when it goes.
	Remediation bool
	Taint       TaintState
	// Pods bound to the node, and VolumeAttachments naming it: what still
	// ties workloads to it. Blockers names a few of them for Events.
	Pods              int
	VolumeAttachments int
	Blockers          []string
	// PodsUnknown: the cluster adapter has not listed the node's pods (it
	// lists them only for a node being fenced, and the list is under way):
	// Pods and Terminating say nothing then, and a fence never counts the
	// node detached.
	PodsUnknown bool
	// Terminating counts the node's pods already being deleted (the taint
	// manager evicts at once on NoExecute); on a confirmed-off, tainted node
	// they are force-deleted as soon as they appear.
	Terminating int
	// PlannedReboot: a planned-reboot signal names this node (the
	// kubelet's graceful node shutdown, kured's reboot lock, a medik8s
	// NodeMaintenance, a Cluster API Machine being deleted or remediated by
	// someone else). PlannedRebootAt is when we first saw the signal, on
	// our clock; PlannedRebootBy names it for Events ("kured lock"). The
	// engine honours it for Policy.RebootWindow from PlannedRebootAt:
	// meanwhile no ForceOff goes to a machine that reads anything but
	// exact Off (docs/safety.md, "Planned reboots").
	PlannedReboot   bool
	PlannedRebootAt time.Time
	PlannedRebootBy string
	// ControlPlane: the node carries the node-role.kubernetes.io/
	// control-plane label, so it runs an etcd member (unless the policy
	// says etcd is external): docs/safety.md, "Control-plane nodes".
	ControlPlane bool
	// OffEvent is the latest power-off event the stream of the node's BMC
	// delivered (zero when there is none, or no stream); BMCSystem the
	// system of the node's inventory entry, whose identity the runner
	// verifies before every ForceOff, as event streams name it.
	OffEvent  PowerEvent
	BMCSystem string
	// RunsThisAgent: the agent's own replica (the leader deciding) runs on
	// this node (the runner's Options.NodeName, from the downward API's
	// spec.nodeName). No power action that can cut the machine goes to it:
	// the leader would cut itself, and a leader that runs proves the
	// machine runs. Another replica fences it once it leads
	// (docs/safety.md, "The leader's own node").
	RunsThisAgent bool
	// KubeletPort is what a TCP connect to the node's kubelet port
	// answered, probed by the runner for suspect nodes only. It names the
	// failure's class in Events and never changes a decision
	// (docs/safety.md, "The kubelet port").
	KubeletPort KubeletPort
	// LeaseReadAt is when a live read of the node's Lease (and Node) from
	// the API server started that found the renewal this view holds still
	// the latest: the node did not renew between that renewal and then, so
	// for this node our view was fresh at LeaseReadAt whatever the last
	// list of the Leases says (APIFreshAt). The runner sets it only for the
	// view whose HeartbeatAt the read compared with, and only for a read
	// that found no newer renewal, no newer Ready heartbeat and a Lease
	// (docs/safety.md, "Power events: a live Lease read"). Zero: no such
	// read. Only the early ForceOff of a power event uses it
	// (eventSilenceNeeded); it is not persisted.
	LeaseReadAt time.Time
}

// NoteMaintenanceExpired is the note of the transition out of Maintenance
// when the mark's duration passed (NodeView.MaintenanceExpired), as opposed
// to the mark being removed: `kubectl fence status` reads it.
const NoteMaintenanceExpired = "maintenance expired"

// ZoneHealth counts nodes of one topology zone.
type ZoneHealth struct {
	Zone      string
	Nodes     int
	Unhealthy int
}

// FleetView is what the storm guard needs about every other node. The runner
// computes it with CountsAsUnhealthy and Phase.InFlight; maintenance nodes are
// left out of every count.
type FleetView struct {
	Nodes     int
	Unhealthy int
	Zones     []ZoneHealth
	// InFlight counts *other* nodes in an in-flight phase whose fence
	// was admitted on a reading other than Off (State.PowerLoss false);
	// InFlightPowerLoss those admitted on an exact-Off reading.
	InFlight          int
	InFlightPowerLoss int
	// LastFenceAt is the latest admission of a fence on any other node, or
	// ForceOff of one since.
	LastFenceAt time.Time
	// APIFreshAt is when our view of the API server was last proven fresh:
	// the start of the last complete list of the Leases, read before the
	// node's view.
	APIFreshAt time.Time
	// ControlPlaneNodes counts every control-plane node, this one and
	// those in maintenance included: the etcd members. ControlPlaneInFlight
	// counts the *other* control-plane nodes in an in-flight phase or held
	// for a human (Stuck), and ControlPlaneMayRun the other control-plane
	// nodes whose machines may run (Healthy, Suspect, Maintenance,
	// Untainting): not those our fence confirmed off or may have powered
	// off (in flight, Detaching, Fenced, Stuck), nor those not yet proven
	// back (PoweringOn, Recovering). Counted like InFlight, from the
	// persisted states of all nodes.
	ControlPlaneNodes    int
	ControlPlaneInFlight int
	ControlPlaneMayRun   int
}

// Reading is one BMC power reading. At is when the request was *sent*, so a
// reading is "later than" an event only if the whole exchange was.
type Reading struct {
	At    time.Time
	Power Power
	// OSRunning: Redfish BootProgress says an OS is running or starting.
	OSRunning bool
	// Failure is a short reason ("unreachable", "auth", ...) when the read
	// failed; Power is then PowerUnknown.
	Failure string
	// Target identifies the BMC target that answered (the runner's key of
	// the node's inventory entry: address and system). Readings from
	// another target than the fence's prove nothing about the fence.
	Target string
	// Source says which resource's power the BMC adapter trusted and why
	// (a Redfish system's PowerState, its chassis's, both: the chassis
	// rule). It is said in the Events that rest on the reading; it decides
	// nothing and is not persisted.
	Source string
	// Drawless: the reading is a fencing level's below the BMC (PDU
	// outlets, Target naming the level), every outlet reads On, and every
	// outlet's own metering read about 0 W right then: no power reaches the
	// machine, it is dead (a failed PSU, a pulled cord took its BMC too).
	// Such a reading is a power loss, as an exact Off is: the engine takes
	// the power-loss admission and sends our off without waiting for
	// FenceAfter. An outlet that draws power may feed a running machine
	// behind a partition: that reading is plain On. The runner sets it
	// (CheckOutletDrawless); it is not persisted.
	Drawless bool
	// Level is the fencing level that gave the reading when it is one
	// below the BMC (2, 3, ...: PDU outlets); 0 for the BMC. It decides
	// nothing: the Events say who read what (readerOf).
	Level int
	// Begun is when the runner began the read that gave this reading,
	// before the levels above the one that answered (a BMC that could not,
	// waited for up to the runner's DeadLevelTimeout); zero: At. The
	// settle reads are spaced from it, so that wait does not stretch the
	// settle (scheduleSettleRead). It proves nothing (the off run is
	// measured by At) and is not persisted.
	Begun time.Time
}

// ActionKind is a side effect the runner performs.
type ActionKind uint8

const (
	ActPersist ActionKind = iota
	ActReadPower
	ActPowerOff
	ActPowerOn
	ActApplyTaint
	ActDeletePods
	ActRemoveTaint
	ActEvent
	// ActForgetTaint clears our owner mark when our taint was found gone.
	// It never removes a taint: if the taint is on the node after all (our
	// view lagged), it does nothing.
	ActForgetTaint
	// ActDiagnose sends the machine a diagnostic interrupt (an NMI: a
	// kernel set up for kdump writes a crash dump), before the first
	// ForceOff of a fence, under Policy.DiagnoseBeforeOff (diagnose.go).
	ActDiagnose
	numActionKinds
)

var actionNames = [numActionKinds]string{"Persist", "ReadPower", "PowerOff", "PowerOn", "ApplyTaint", "DeletePods", "RemoveTaint", "Event", "ForgetTaint", "Diagnose"}

func (k ActionKind) String() string {
	if k < numActionKinds {
		return actionNames[k]
	}
	return "Action?"
}

// Event is a Kubernetes Event to record on the Node.
type Event struct {
	Warning bool
	Reason  string
	Message string
	// ManualFence: nothing the agent can reach proves the machine off; the
	// runner appends the command that fences the node by hand
	// (ManualFenceCommand).
	ManualFence bool
}

// ManualFenceCommand is the command an operator runs to fence node by hand
// once they made sure it has no power: the CLI's confirm verb.
func ManualFenceCommand(node string) string {
	return `kubectl fence confirm ` + node + ` --reason "<how you made sure it is off>"`
}

// Action is one side effect. Event is set for ActEvent only.
type Action struct {
	Kind  ActionKind
	Event Event
}

// Result reports how an action went. Err is empty on success.
type Result struct {
	Action ActionKind
	Err    string
	// AlreadyInState: a power command was answered "already in that state"
	// (bmc.ErrAlreadyInState): the BMC did nothing. Err is set too.
	AlreadyInState bool
	// NotSent: the command never reached the BMC (the runner's server
	// recheck, token or identity check stopped it first). Err is set too.
	NotSent bool
	// Target is the BMC target a power command went to.
	Target string
	// SentAt is when the runner sent a power command, on its clock, right
	// before the call: never later than the BMC received it. Zero when
	// nothing was sent (and in shadow mode).
	SentAt time.Time
}

// CommandKind is a human's request (from the CLI, through an annotation).
type CommandKind uint8

const (
	CmdNone CommandKind = iota
	// CmdFence: fence now, without waiting for SuspectAfter/FenceAfter and
	// past the storm guard. The settled-Off proof is still required.
	CmdFence
	// CmdConfirm: the human attests the node is off when no BMC can say so.
	CmdConfirm
	// CmdAbort: stop an in-flight fence; hold the node until a human acts.
	CmdAbort
	// CmdUnfence: optionally power on, wait Ready, remove our taint.
	CmdUnfence
	numCommandKinds
)

var commandNames = [numCommandKinds]string{"none", "fence", "confirm", "abort", "unfence"}

func (k CommandKind) String() string {
	if k < numCommandKinds {
		return commandNames[k]
	}
	return "command?"
}

// Command is a human's request with who asked and why.
type Command struct {
	Kind    CommandKind
	User    string
	Reason  string
	PowerOn bool // unfence: power the node on first
	// Force: a confirm that overrides a contrary live witness (a renewal
	// since the failure began, a BMC reading On). Needs a Reason.
	Force bool
	// SeenAt is when we first observed the request, on our clock. A fence
	// or confirm request is refused when taken more than MaxRequestAge
	// after it: whatever the human saw is older than that.
	SeenAt time.Time
}

// InputKind says what happened.
type InputKind uint8

const (
	InputTick InputKind = iota // a timer fired or the node/fleet view changed
	InputReading
	InputResult
	InputCommand
	numInputKinds
)

// Input is what Step reacts to: always the current node and fleet views, plus
// the one thing that happened.
type Input struct {
	Kind    InputKind
	Node    NodeView
	Fleet   FleetView
	Reading Reading // InputReading
	Result  Result  // InputResult
	Command Command // InputCommand
	// Host is the node's latest hung-node evidence, handed with a reading
	// (InputReading) of a node in a pre-taint phase whose BMC read On;
	// zero otherwise. See hostevidence.go.
	Host HostEvidence
	// Write: the runner writes this step's state whatever Step decides
	// (it takes over a state another process wrote). Step then treats
	// the step as one worth writing: an unsaved suspicion is written,
	// and announced, rather than left in memory.
	Write bool
}

// Output is Step's answer. The runner executes Actions in order; if Persist
// is present it comes first, so intent is recorded before any side effect.
// RecheckAfter is when to call Step again with a Tick if nothing else
// happens; it is always positive.
type Output struct {
	State        State
	Actions      []Action
	RecheckAfter time.Duration
}

// PowerEvent is the latest power-off event a node's BMC pushed (Redfish
// ResourcePoweredOff; on iDRAC its alert for a system powering off), as the
// runner's event stream for the node's BMC delivered it. Every time is on
// our clock. The zero value is "no event". An event is never proof of Off:
// it may only start a fence early (docs/safety.md, "Power events").
type PowerEvent struct {
	// System names the system the event is about, as the stream reports
	// it ("" when the event names none).
	System string
	// Received is when the stream delivered the event; ConnectedAt when
	// the stream that carried it connected.
	Received    time.Time
	ConnectedAt time.Time
	// Replay: the event was replayed on a reconnect (Last-Event-ID), or
	// predates ConnectedAt; AfterGap: the stream reported events lost
	// (a gap, missed heartbeats) between ConnectedAt and this event.
	Replay   bool
	AfterGap bool
}

// KubeletPort is what a bounded TCP connect to a suspect node's kubelet
// port (its InternalIP, status.daemonEndpoints.kubeletEndpoint.Port)
// answered. It is reachability, which a partition fakes: it names the
// failure's class in Events and never licenses or holds back anything.
// The zero value is "not probed" (KubeletPortUnknown).
type KubeletPort uint8

const (
	KubeletPortUnknown KubeletPort = iota
	// KubeletPortAnswers: the connection was accepted: the OS and its
	// network run, the kubelet (or its port) answers, yet the Lease is
	// not renewed.
	KubeletPortAnswers
	// KubeletPortReset: the connection was refused (a TCP reset): the OS
	// runs and answers, only the kubelet is dead.
	KubeletPortReset
	// KubeletPortTimeout: no answer within the probe's timeout: the node
	// is off, hung, or cut off from us.
	KubeletPortTimeout
	numKubeletPorts
)

var kubeletPortNames = [numKubeletPorts]string{"unknown", "answers", "reset", "timeout"}

func (k KubeletPort) String() string {
	if k < numKubeletPorts {
		return kubeletPortNames[k]
	}
	return "unknown"
}

// Class says what the answer suggests, for Events; "" when not probed.
func (k KubeletPort) Class() string {
	switch k {
	case KubeletPortAnswers:
		return "the kubelet port answers: the OS and network run, the kubelet does not renew"
	case KubeletPortReset:
		return "the kubelet port answers with a reset: the OS runs and only the kubelet is dead"
	case KubeletPortTimeout:
		return "the kubelet port times out: the node is off, hung or cut off"
	case KubeletPortUnknown, numKubeletPorts:
		return ""
	}
	return ""
}
