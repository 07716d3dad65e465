package drain

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Action is what the drain does with one pod.
type Action string

const (
	// ActionRolloutRestart: the pod's Deployment is rollout-restarted (the
	// pod template's kubectl.kubernetes.io/restartedAt annotation, as
	// `kubectl rollout restart` sets it). The node is cordoned first, so the
	// surge lands elsewhere and the Deployment's own strategy keeps it
	// available; the drain waits for `kubectl rollout status` to say done.
	ActionRolloutRestart Action = "rollout-restart"
	// ActionEvict: an Eviction (policy/v1), which PodDisruptionBudgets can
	// refuse (429); refused evictions are retried with backoff.
	ActionEvict Action = "evict"
	// ActionEvictOneAtATime: a StatefulSet's pods are evicted one at a time,
	// each replacement (same name) Ready before the next eviction.
	ActionEvictOneAtATime Action = "evict-one-at-a-time"
	// ActionWait: the pod is already terminating; the drain waits for it to
	// go.
	ActionWait Action = "wait"
	// ActionSkip: the pod stays (DaemonSet, static, finished).
	ActionSkip Action = "skip"
	// ActionRefuse: the pod cannot be moved safely, and the drain refuses to
	// start (PodPlan.Would says what it would have done).
	ActionRefuse Action = "refuse"
)

// moves reports whether the action takes the pod off the node.
func (a Action) moves() bool {
	switch a {
	case ActionRolloutRestart, ActionEvict, ActionEvictOneAtATime:
		return true
	case ActionWait, ActionSkip, ActionRefuse:
		return false
	}
	return false
}

// UnfitCause says why a node cannot take a pod that must move.
type UnfitCause string

const (
	UnfitCordoned        UnfitCause = "cordoned"
	UnfitMaintenance     UnfitCause = "maintenance"
	UnfitNotReady        UnfitCause = "not-ready"
	UnfitNodeAffinity    UnfitCause = "node-affinity" // nodeSelector or required node affinity
	UnfitTaint           UnfitCause = "taint"         // an untolerated NoSchedule/NoExecute taint
	UnfitResources       UnfitCause = "insufficient-resources"
	UnfitVolumeAffinity  UnfitCause = "volume-node-affinity" // a bound PersistentVolume's node affinity
	UnfitPodAntiAffinity UnfitCause = "pod-anti-affinity"
	UnfitNoOtherNode     UnfitCause = "no-other-node"
)

// causeOrder sorts Unfit entries the way a human reads them: the node's
// state first, then the pod's constraints.
var causeOrder = map[UnfitCause]int{
	UnfitNoOtherNode: 0, UnfitCordoned: 1, UnfitMaintenance: 2, UnfitNotReady: 3, UnfitNodeAffinity: 4,
	UnfitTaint: 5, UnfitVolumeAffinity: 6, UnfitPodAntiAffinity: 7, UnfitResources: 8,
}

// Unfit groups the nodes that cannot take a pod for the same cause.
type Unfit struct {
	Cause UnfitCause `json:"cause"`
	// Detail: the taint (key=value:Effect), the missing resources (cpu,
	// memory), the conflicting pod or the volume.
	Detail string   `json:"detail,omitempty"`
	Nodes  []string `json:"nodes,omitempty"`
}

func (u Unfit) String() string {
	var b strings.Builder
	b.WriteString(nodeList(u.Nodes))
	if len(u.Nodes) > 0 {
		b.WriteString(": ")
	}
	switch u.Cause {
	case UnfitNoOtherNode:
		b.WriteString("no other node in the cluster")
	case UnfitCordoned:
		b.WriteString("cordoned")
	case UnfitMaintenance:
		b.WriteString("in maintenance")
	case UnfitNotReady:
		b.WriteString("not Ready")
	case UnfitNodeAffinity:
		b.WriteString("its nodeSelector/required node affinity does not match")
	case UnfitTaint:
		b.WriteString("untolerated taint " + u.Detail)
	case UnfitResources:
		b.WriteString("insufficient " + u.Detail)
	case UnfitVolumeAffinity:
		b.WriteString("its volume " + u.Detail + " cannot be used there (PersistentVolume node affinity)")
	case UnfitPodAntiAffinity:
		b.WriteString("pod anti-affinity with " + u.Detail)
	}
	return b.String()
}

// nodeList names up to three nodes and counts the rest: a plan for a
// 500-node cluster stays readable.
func nodeList(nodes []string) string {
	const show = 3
	if len(nodes) <= show {
		return strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(nodes[:show], ", "), len(nodes)-show)
}

// PodPlan is the decision for one pod on the node.
type PodPlan struct {
	// Pod is namespace/name; UID tells the planned pod from a later one of
	// the same name (a StatefulSet's replacement).
	Pod string    `json:"pod"`
	UID types.UID `json:"uid"`
	// Owner is Kind/name of the workload that decides (the Deployment, not
	// its ReplicaSet); empty for a pod without a controller.
	Owner  string `json:"owner"`
	Action Action `json:"action"`
	Reason string `json:"reason"`
	// Would is the action a refused pod would have had.
	Would Action `json:"would,omitempty"`
	// Target is a node the placement check found room on. The scheduler
	// decides where the pod really goes; this only proves there is a place.
	Target string `json:"target,omitempty"`
	// Nowhere says, per cause, why no other node can run the pod.
	Nowhere []Unfit `json:"nowhere,omitempty"`
	// LocalStorage names the pod's node-local volumes ("emptyDir cache",
	// "hostPath data (/var/lib/x)", "local PersistentVolume pv-3").
	LocalStorage []string `json:"localStorage,omitempty"`
	// Bound is what the drain keeps of the pod's workload while it moves
	// (nil for pods that stay).
	Bound *Bound `json:"bound,omitempty"`
}

// Bound is the fewest available replicas a workload's own strategy allows;
// the drain never takes the workload below it. For a Deployment it is
// replicas − maxUnavailable, for a StatefulSet replicas − 1 (one pod at a
// time); other owners have no strategy of their own (MinAvailable nil), and
// only PodDisruptionBudgets pace their evictions.
type Bound struct {
	Replicas     int32  `json:"replicas,omitempty"`
	MinAvailable *int32 `json:"minAvailable,omitempty"`
	// Rule says where the bound comes from.
	Rule string `json:"rule"`
	// Budgets are the PodDisruptionBudgets (namespace/name) that pace the
	// pod's eviction as well.
	Budgets []string `json:"budgets,omitempty"`
}

func (b *Bound) String() string {
	if b == nil {
		return "-"
	}
	s := "no bound of its own"
	if b.MinAvailable != nil {
		s = fmt.Sprintf("≥%d of %d available", *b.MinAvailable, b.Replicas)
	}
	if len(b.Budgets) > 0 {
		s += " + PDB " + strings.Join(b.Budgets, ", ")
	}
	return s
}

// Namespace and Name split Pod.
func (p PodPlan) Namespace() string { ns, _, _ := strings.Cut(p.Pod, "/"); return ns }
func (p PodPlan) Name() string      { _, n, _ := strings.Cut(p.Pod, "/"); return n }

// ownerKind and ownerName split Owner.
func (p PodPlan) ownerKind() string { k, _, _ := strings.Cut(p.Owner, "/"); return k }
func (p PodPlan) ownerName() string { _, n, _ := strings.Cut(p.Owner, "/"); return n }

// Plan is what a drain of Node will do, computed without changing anything.
// It is JSON-serialisable (the CLI's `drain --dry-run -o json`).
type Plan struct {
	Node            string    `json:"node"`
	PlannedAt       time.Time `json:"plannedAt"`
	Force           bool      `json:"force,omitempty"`
	DeleteLocalData bool      `json:"deleteLocalData,omitempty"`
	// Pods lists every pod bound to the node, sorted by namespace/name.
	Pods []PodPlan `json:"pods"`
	// Warnings are risks the drain accepts (a rollout that dips below
	// desired, a PodDisruptionBudget that allows nothing now...).
	Warnings []string `json:"warnings,omitempty"`
}

// Refused lists the pods that keep the drain from starting.
func (p Plan) Refused() []PodPlan {
	var out []PodPlan
	for _, pp := range p.Pods {
		if pp.Action == ActionRefuse {
			out = append(out, pp)
		}
	}
	return out
}

// Err is nil when the plan can be executed; otherwise it wraps ErrRefused
// and names every refused pod with its reason.
func (p Plan) Err() error {
	refused := p.Refused()
	if len(refused) == 0 {
		return nil
	}
	lines := make([]string, 0, len(refused))
	for _, r := range refused {
		lines = append(lines, fmt.Sprintf("  %s: %s", r.Pod, r.Reason))
	}
	return fmt.Errorf("%w: %d pod(s) on %s cannot be moved safely:\n%s",
		ErrRefused, len(refused), p.Node, strings.Join(lines, "\n"))
}

// Count returns how many pods have action a.
func (p Plan) Count(a Action) int {
	n := 0
	for _, pp := range p.Pods {
		if pp.Action == a {
			n++
		}
	}
	return n
}

// ErrRefused: the plan has pods that cannot be moved safely (no controller,
// local storage, nowhere to go). Nothing was changed. Fix the cause or pass
// Force / DeleteLocalData.
var ErrRefused = errors.New("drain refused")

// ErrIncomplete: Execute stopped (timeout or failures) with work left; the
// Report says which pods and why. Running the drain again continues.
var ErrIncomplete = errors.New("drain incomplete")

// ErrNodeDown: the node was not Ready when the drain stopped with work
// left (it went down during the drain): its pods cannot leave by eviction.
// Wrapped with ErrIncomplete; Report.Released says whether the node was given
// back to fencing.
var ErrNodeDown = errors.New("the node is not Ready")

// errDrainTimeout is the cause of the Execute context when Options.Timeout
// passes.
var errDrainTimeout = errors.New("drain timeout")

// errNodeDown stops the drain's work when the node is seen going down.
var errNodeDown = errors.New("node went down")

// Options tune Plan, Execute, Undrain and WaitReady. The zero value works.
type Options struct {
	// Force moves pods without a controller (they are gone for good) and
	// pods with nowhere to go (they stay Pending).
	Force bool
	// DeleteLocalData accepts losing emptyDir data and moving pods off local
	// PersistentVolumes.
	DeleteLocalData bool
	// Timeout bounds Execute (default 10 m, DefaultTimeout) and WaitReady.
	Timeout time.Duration
	// Parallelism bounds the workloads moved at once (default 4). A
	// StatefulSet's pods always go one at a time.
	Parallelism int
	// Reason and User are recorded in the maintenance annotation and Events.
	Reason, User string
	// Clock: every wait, backoff and timestamp (default the real clock).
	Clock clock.Clock
	// Progress, if set, is called on each workload's state changes, one call
	// at a time (it needs no locking).
	Progress func(Progress)
	// PollInterval is how often rollouts, evictions and replacements are
	// checked (default 1 s, DefaultPollInterval).
	PollInterval time.Duration
	// MaintenanceFor bounds the maintenance of a drained node: the agent
	// honours the mark for this long after it sees it (on its own clock),
	// then may fence the node again. Zero: until undrain. While the drain
	// runs, the mark holds for Timeout plus a grace (markGrace) instead, so
	// that a drain that dies does not hold the node for ever.
	MaintenanceFor time.Duration
}

// DefaultTimeout bounds a drain: a rollout of a few replicas with image
// pulls and readiness probes takes a minute or two; ten minutes leaves room
// for several in sequence (StatefulSets go one pod at a time) while a drain
// stuck on a PodDisruptionBudget still ends, with a report, in a coffee
// break rather than never (kubectl drain's default is to wait forever).
const DefaultTimeout = 10 * time.Minute

// DefaultParallelism: a few workloads at once finish a typical node in the
// time of its slowest workload, without a burst of evictions and rollouts
// that would crowd the scheduler and the remaining nodes. Four is also
// kubectl-safe-drain's practical ceiling for a node of ~30 pods.
const DefaultParallelism = 4

// DefaultPollInterval: each check is one GET per workload; a second is
// fine-grained against rollouts that take seconds to minutes.
const DefaultPollInterval = time.Second

// maxBackoffFactor caps the eviction retry backoff at this many poll
// intervals (10 s by default): a PodDisruptionBudget frees up when a
// replacement turns Ready, seconds to minutes away; retrying at least every
// 10 s notices that soon without hammering the API.
const maxBackoffFactor = 10

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Parallelism <= 0 {
		o.Parallelism = DefaultParallelism
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	return o
}

// State is a workload's progress state.
type State string

const (
	StateStarted State = "started"
	StateWaiting State = "waiting"
	StateDone    State = "done"
	StateFailed  State = "failed"
)

// Progress is one state change of one workload during Execute.
type Progress struct {
	At time.Time `json:"at"`
	// Workload: "Deployment shop/web", "StatefulSet db/pg", "Pod ns/name"
	// (pods moved on their own).
	Workload string `json:"workload"`
	Action   Action `json:"action"`
	State    State  `json:"state"`
	Message  string `json:"message"`
}

// Report is what Execute did and what is left.
type Report struct {
	Node      string    `json:"node"`
	StartedAt time.Time `json:"startedAt"`
	Elapsed   string    `json:"elapsed"`
	// Complete: every workload done and no pod left that must move.
	Complete  bool             `json:"complete"`
	TimedOut  bool             `json:"timedOut,omitempty"`
	Workloads []WorkloadReport `json:"workloads"`
	// Left lists the pods still on the node that should have moved.
	Left []LeftPod `json:"left,omitempty"`
	// NodeDown: the drain stopped with work left on a node that is not
	// Ready (it went down during the drain).
	NodeDown bool `json:"nodeDown,omitempty"`
	// Released: the drain removed its maintenance mark (NodeDown), so that
	// bmcfence may fence the node; the cordon stays.
	Released bool `json:"released,omitempty"`
	// MaintenanceFor is how long the mark left on the node holds, counted
	// by the agent from when it saw it (a Go duration); empty when the mark
	// holds until undrain, or was released.
	MaintenanceFor string   `json:"maintenanceFor,omitempty"`
	Warnings       []string `json:"warnings,omitempty"`
}

// WorkloadReport is one workload's outcome.
type WorkloadReport struct {
	Workload string   `json:"workload"`
	Action   Action   `json:"action"`
	Pods     []string `json:"pods"`
	State    State    `json:"state"`
	// Message is the last word on it: "successfully rolled out", "eviction
	// refused by PodDisruptionBudget shop/web (...)".
	Message string `json:"message"`
	Elapsed string `json:"elapsed,omitempty"`
}

// LeftPod is a pod still on the node and why.
type LeftPod struct {
	Pod    string `json:"pod"`
	Owner  string `json:"owner"`
	Reason string `json:"reason"`
	// BlockedBy names the PodDisruptionBudgets (namespace/name) that refused
	// its eviction.
	BlockedBy []string `json:"blockedBy,omitempty"`
}

// UndrainResult is what Undrain undid.
type UndrainResult struct {
	// InMaintenance: the node carried the maintenance mark, which Undrain
	// removed. False: nothing was done.
	InMaintenance bool `json:"inMaintenance"`
	// Uncordoned: the drain had cordoned the node, and Undrain uncordoned
	// it.
	Uncordoned bool `json:"uncordoned"`
	// KeptCordon says why a cordon stays: it is not the drain's.
	KeptCordon string `json:"keptCordon,omitempty"`
}
