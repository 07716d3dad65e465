// Package fencesim is a simulated cluster built to break the fence runner:
// machines behind fake BMCs (bmc/bmctest, on the shared machine model) with
// identities and vendor quirks, kubelets that renew their Lease every 10 s
// (or cannot: dead, hung, partitioned) and may report NotReady while alive,
// the node lifecycle controller, the taint manager, pod GC and a slow or
// quick attach-detach controller, an inventory that can point at the wrong
// machine, API views that freeze and writes that fail for minutes, human
// requests that go stale, and several agent replicas whose clocks disagree
// and whose leaders pause between a decision and its write. Everything runs
// on one fake clock and a seed reproduces a run exactly.
//
// The World implements runner.Cluster and runner.Inventory, so the real
// runner drives it. Every write is judged by an oracle against the world's
// truth only (the machine's real power and pending restarts, the kubelet's
// real life, what humans really asked and when), never against the engine's
// own predicates: see oracle.go for the rules.
//
// # Premises: what the model leaves out, and why
//
// Some faults, combined, cannot be detected by any agent. The world never
// generates them, and the oracle does not blame the engine for them:
//
//   - A BMC that answers success to a ForceOff during a restart's off-dwell
//     and ignores it (machine.Behavior IgnoreDuringTransition, or an
//     always-ignoring liar, IgnoreCommands) is indistinguishable, for as long
//     as the dwell lasts, from one that acted. The agent's defence is a
//     per-node settle window longer than that BMC's dwell, so every such
//     machine's inventory entry carries one (runner.PolicySource).
//
//   - A BMC whose reads lag (a caching BMC) never also ignores commands:
//     a ForceOff that does nothing plus a read that says Off is a settled
//     Off that nothing can tell from a real one. Its lag is bounded (at most
//     maxCacheLag), below UnassistedSettleWindow minus the longest dwell, so
//     an Off we did not cause is still outlasted. Nobody starts a caching
//     BMC's machine (power button, power restore) either: a machine that
//     boots while its BMC still answers Off is invisible for the lag, to
//     any agent (the keep-off reads catch it once the cache catches up).
//
//   - allowUnverifiedIdentity is the operator vouching for an entry: it is
//     generated only with correct entries, and such an entry never changes
//     to another machine. Wrong entries exist only where identity can be
//     checked (a Node systemUUID or an expectedUUID), and are caught by it.
//
//   - An explicit expectedUUID is the operator's word for the entry's
//     machine: internal/inventory checks the BMC against it alone, not
//     against the Node's systemUUID. A node re-created on another machine
//     under the same name, its entry and expectedUUID left as they were,
//     passes that check; such an entry never goes stale here (a node only
//     moves when its identity comes from its systemUUID).
//
//   - A confirm is generated truthful (the machine is off) or against a live
//     witness (the kubelet renewing, or a readable BMC reading On). A wrong
//     confirm with no contrary witness cannot be detected by anyone; while a
//     confirm stands, nobody powers the machine on, except after the request
//     has expired (the stale-request fault, which the engine must refuse).
//
//   - Nobody else power-cycles a machine while it is powering off or on:
//     a BMC busy with a transition refuses (iDRAC's SYS518, "not ready
//     after previous operation"). One that accepted right after our
//     accepted ForceOff would start an off-dwell that reads exactly like
//     the Off we caused; one that accepted during a boot would join two
//     dwells across a boot shorter than the agent's read interval, which
//     a run of Off reads cannot see.
//
//   - A request can be taken up to twice MaxRequestAge after it was
//     written (requestLife): the cluster drops one written more than
//     MaxRequestAge before a process first sees it (on the CLI's clock),
//     and the engine refuses one taken more than MaxRequestAge after that
//     (on its own), so a process started while a request waited sees it
//     new. The oracle judges a request's age from when the taking process
//     could first see it, and a confirm stands, for the rule above, as
//     long as it can still be taken.
//
//   - A BMC that accepts a ForceOff and drops it (the machine runs on) is
//     caught by ownOffWithin and by the machine seen running after the
//     acceptance. So nobody restarts such a machine (a power cycle, a
//     watchdog, a reboot) within ownOffWithin and a second of the drop:
//     that dwell would read exactly like the Off we caused (mayCycle). The
//     one exception is the calm scenario in which the machine visibly ran,
//     with no renewal, for longer than ownOffWithin and two power polls
//     after an earlier dropped acceptance of the same fence: its BMC's
//     acceptances are void by then (droppedTwice).
//
//   - A BMC that reads Off while its machine runs (a lie, a stuck cache) is
//     generated only where another witness can tell, and nothing takes
//     that witness away (calm scenarios: nothing else happens): a kubelet
//     that keeps renewing, under the NotReady opt-in (liesUnderTheOptIn);
//     or a storm that lasts longer than the lie, when the lie is not an Off
//     of ours (it comes after the machine ran past an acceptance:
//     liesInAStorm). Anywhere else it is the undetectable double fault
//     docs/safety.md names (maxConcurrentPowerLossFences: 1 limits it).
//
//   - The cluster adapter's calls are modelled one by one (Cluster), and a
//     leader may pause, or the world act, between any two (gap plans). Not
//     between its last re-check of the token and the taint and a pod's
//     delete, though, does anyone remove the out-of-service taint by hand:
//     the pod and the node are two objects, and no adapter can make that
//     check and that write one (a node that comes back touches its pods,
//     and the delete's preconditions stop it). A kubelet's status update
//     may arrive at a state persist (which takes it in), never between the
//     server recheck and the ForceOff it licenses: that one no agent can
//     see.
//
//   - In a split brain both leaders act, each between the other's persisted
//     decisions and their acts, never between the other's decision and its
//     persist: two leaders deciding at once on the same counts is what
//     leader election exists to prevent. Each counts the fences the other
//     persisted (the storm rule is judged in a split brain too).
//
//   - A watchdog petter evicted without disarming lets the BMC's watchdog
//     expire on a live machine (an SMS/OS expiry, in this boot). If that
//     machine is then cut off before any agent has seen the entry, the
//     entry is indistinguishable from a hang's (docs/safety.md, "Hung-node
//     evidence"): the world cuts such a machine off only after an agent
//     could have seen the entry and then the node's renewal, or when its
//     BMC hides the timer use.
//
// Frozen (stalled) views last up to two minutes, three times the node
// monitor grace period: the oracle does not need them shorter, since it
// reads Ready and renewals from the server, never from a view, and the
// agent refuses to act on a view older than MaxAPIStaleness.
package fencesim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// Cluster-side constants, from Kubernetes' defaults (seed timeline).
const (
	// LeaseRenewInterval: the kubelet renews its Lease every 10 s.
	LeaseRenewInterval = 10 * time.Second
	// NodeMonitorGracePeriod: the node lifecycle controller marks a silent
	// node Unknown after this long.
	NodeMonitorGracePeriod = 40 * time.Second
	// PodGCInterval: pod GC force-deletes terminating pods of a NotReady,
	// out-of-service node on this loop.
	PodGCInterval = 20 * time.Second
	// DetachDelay: the attach-detach controller detaches this long after the
	// pods are gone (force-detach with the out-of-service taint).
	DetachDelay = time.Second
	// RegisterDelay: a live kubelet whose Node object was deleted
	// re-registers it at its next status sync.
	RegisterDelay = 5 * time.Second
	// maxCacheLag bounds how stale a caching BMC's answers can be (its
	// refresh period plus any freeze): well below the default
	// UnassistedSettleWindow (60 s) minus the longest dwell (30 s) minus a
	// settle read interval, so an Off we did not cause is still outlasted.
	maxCacheLag = 24 * time.Second
)

// Machine is one physical server: its power behind its BMC, its identity,
// and how its BMC misbehaves.
type Machine struct {
	Name string
	// UUID is the system UUID the BMC reports (Redfish UUID, IPMI system
	// GUID) and the kubelet reports as the Node's systemUUID.
	UUID string
	// NoUUID: the BMC reports no system UUID.
	NoUUID bool
	BMC    *bmctest.Fake

	// CacheFor, when positive, makes reads answer from a cache refreshed at
	// most every CacheFor (a BMC that polls its host lazily); freezeUntil
	// holds the cache a while longer (a Redfish service that stopped
	// updating). Commands still act honestly.
	CacheFor    time.Duration
	freezeUntil time.Time
	cache       bmc.PowerStatus
	cacheAt     time.Time
	cached      bool

	// dropForceOffs: the BMC accepts that many more ForceOffs sent to the
	// running machine and does nothing (a dropped command); onDrop, if
	// set, is told of each (the k-th, and when), under the world's lock
	// (it only schedules). liesOff: the BMC reads Off whatever the machine
	// does; liesOffOnDrop makes it start to at a dropped ForceOff. Both are
	// generated only where a witness other than the BMC can tell (see the
	// package doc): onDrop schedules a power cycle only as late as
	// ownOffWithin allows, and a lie only meets a kubelet that renews, or a
	// storm.
	dropForceOffs int
	dropped       []time.Time
	onDrop        func(k int, at time.Time)
	liesOff       bool
	liesOffOnDrop bool

	// unreachable, behavior and latency mirror the BMC's settings, for
	// the oracle.
	unreachable bool
	behavior    machine.Behavior
	latency     time.Duration
	alreadyOff  bool
	timing      machine.Timing

	// events is the BMC's power event stream (events.go).
	events machineEvents

	// Fencing levels (pdu.go): psuDead, the machine's supplies failed
	// (its BMC died with it); unpowered, every outlet feeding it is off;
	// netDown, its BMC is unreachable for a network reason (a shared
	// NC-SI port died with the host's network).
	psuDead   bool
	unpowered bool
	netDown   bool

	// The diagnostic interrupt (diagnose.go): kdump, when positive, is
	// how long the host's kernel, set up for kdump, takes to write its
	// dump after an NMI panics it, before it reboots (0: a kernel not set
	// up for it, which an NMI leaves running); kdumpAt is when an NMI
	// panicked it (zero: none pending). noNMI: the BMC has no diagnostic
	// interrupt (a Redfish system that does not list Nmi).
	kdump   time.Duration
	kdumpAt time.Time
	noNMI   bool
}

// SetBehavior changes how the BMC treats commands (machine.Behavior).
func (m *Machine) SetBehavior(b machine.Behavior) {
	m.behavior = b
	m.BMC.SetBehavior(b)
}

// SetAlreadyOff makes the BMC answer "already in that state" to a ForceOff
// whenever the machine reads Off, a restart's off-dwell included, and do
// nothing (iDRAC's 409, iLO's 400, IPMI's 0xD5).
func (m *Machine) SetAlreadyOff(on bool) {
	m.alreadyOff = on
	m.BMC.SetAlreadyOff(on)
}

// SetLatency makes each BMC call take d on the world's clock.
func (m *Machine) SetLatency(d time.Duration) {
	m.latency = d
	m.BMC.SetLatency(d)
}

// Unreachable reports whether the BMC is failing every call.
func (m *Machine) Unreachable() bool { return m.unreachable }

// SetUnreachable makes every call to the BMC fail (or work again).
func (m *Machine) SetUnreachable(on bool) {
	m.unreachable = on
	if on {
		m.BMC.Fail(bmctest.ErrUnreachableFake)
	} else {
		m.BMC.Clear()
	}
}

// ignores reports whether the BMC may accept a ForceOff and do nothing.
func (m *Machine) ignores() bool {
	return m.behavior.IgnoreCommands || m.behavior.IgnoreDuringTransition
}

// deceives: the BMC drops ForceOffs or reads Off while the machine runs
// (no agent can keep such a machine off, nor take its word).
func (m *Machine) deceives() bool { return m.dropForceOffs > 0 || m.liesOff || m.liesOffOnDrop }

// Entry is a node's inventory entry: the BMC it addresses and how its
// identity is checked.
type Entry struct {
	// Target is the machine whose BMC the entry addresses: the node's own
	// host when the entry is right.
	Target *Machine
	// ExpectedUUID, when set, is what the target must report (instead of
	// the Node's systemUUID).
	ExpectedUUID string
	// AllowUnverified: the operator vouches for the entry (generated only
	// with correct entries).
	AllowUnverified bool
	// SettleWindow overrides the policy's for this BMC (0: the policy's).
	SettleWindow time.Duration
	// Outlets, when set, are the entry's fencing level 2 (pdu.go): the
	// outlets it names, which may not be the ones that feed its machine;
	// AllowUnverifiedOutlet counts them without an identity proof.
	Outlets               []*Outlet
	AllowUnverifiedOutlet bool
}

// Node is one Kubernetes Node: its API objects, its kubelet and the machine
// it runs on.
type Node struct {
	Name string
	Zone string
	// Host is the machine the node runs on; BMC is its BMC.
	Host *Machine
	BMC  *bmctest.Fake
	// SystemUUID is status.nodeInfo.systemUUID ("" when not reported).
	SystemUUID string
	// HasBMC: the node has an inventory entry (World.Entry).
	HasBMC      bool
	Excluded    bool
	Maintenance bool

	// The kubelet: it runs when the host is On with its OS up and not hung
	// and KubeletEnabled. RuntimeDown: the container runtime or CNI is down,
	// so it renews its Lease but reports Ready=False. Partitioned: it runs
	// but cannot reach the API server.
	KubeletEnabled bool
	RuntimeDown    bool
	Partitioned    bool
	renewing       bool

	// Petter, when positive, is the timeout of the node-side watchdog
	// petter (cmd/bmc-watchdog's DaemonSet): it arms the BMC's watchdog
	// (SMS/OS, no action) whenever the OS runs, and the watchdog expires
	// Petter after the OS stops. petterEvicted: the petter was killed
	// without disarming and is not restarted (the watchdog expires on a
	// live machine).
	Petter        time.Duration
	petterEvicted bool
	// liveExpiry: the BMC logged an SMS/OS expiry while the machine ran
	// (an evicted petter). Cut off before an agent saw it and then saw
	// the node renew, it is indistinguishable from a hang (package doc):
	// no fault cuts such a node off but its episode's own, which checks.
	liveExpiry bool

	// API objects (the server's truth). lastBeat is the node's last sign
	// of life on the server: its Lease renewal (leaseAt) or its status
	// update (statusAt: a new Ready heartbeat, on the Node object). A
	// kubelet that renews writes both at once; one coming back writes its
	// status first (faultStatusFirst). rv is the Node object's
	// resourceVersion, podGen the version of its pods as listed (a pod
	// scheduled, marked terminating, or touched by its kubelet changes it;
	// our deleting one of them does not change the others).
	created       time.Time
	lastBeat      time.Time
	leaseAt       time.Time
	statusAt      time.Time
	rv            int64
	podGen        int64
	ready         fence.Readiness
	notReadySince time.Time
	taint         fence.TaintState
	taintAt       time.Time
	pods          int
	terminating   bool
	terminatingAt time.Time
	vas           int
	podsGoneAt    time.Time
	detachAfter   time.Duration // extra time before volumes detach (a slow CSI driver)
	// stateless: its work has no volumes (EnablePodLists). podsListing:
	// the adapter lists its pods (its fence reached the taint); the list
	// completes at podsListedAt.
	stateless      bool
	podsListing    bool
	podsListedAt   time.Time
	state          string
	request        *pendingRequest
	stateWrites    int
	lastObservedHB time.Time // when our informers delivered the last heartbeat (a list's end)
	// viewBeat is the server's time of the heartbeat the view holds (the
	// kubelet's write): lastObservedHB or earlier, with Lease lists.
	viewBeat time.Time
	// observedFrom is the start of the last complete list before the one
	// that delivered it (NodeView.HeartbeatFrom); zero in a live view.
	observedFrom time.Time
	// listed is the heartbeat the list under way read.
	listed time.Time

	// The agents' view while the API view is frozen.
	frozen *runner.NodeInfo

	// Oracle bookkeeping.
	lastOffAnswer time.Time // a read of this node's entry answered Off
	keepOffSince  time.Time // running while tainted with volumes attached
	keepOffFlag   bool
	keepOffBlind  time.Time // the agent could not act on the machine then
	// held: a human took an abort or unfence while the node was tainted:
	// what happens to its machine is theirs.
	held bool
	// protect: a wrong confirm stands against this node's live witnesses
	// (its kubelet, its BMC reading On): nothing may take them away.
	protect bool
	// plannedAt: a planned-reboot signal names the node (planned.go),
	// since then on the world's clock; plannedBy names it.
	plannedAt time.Time
	plannedBy string
	// plannedSeenAt: when the agents' informers could first deliver the
	// signal (at once, or when a frozen API thaws): the oracle's Planned
	// rule counts from it, as Early counts silence from lastObservedHB.
	plannedSeenAt time.Time
	// ControlPlane: the node runs an etcd member (controlplane.go).
	ControlPlane bool
	// ourOffAt: when a ForceOff of ours last reached the machine;
	// ranAt: when the world last saw the machine running (controlplane.go).
	ourOffAt time.Time
	ranAt    time.Time
	// humanAt: when a human last ended or held a fence of the node (an
	// abort or unfence taken, the taint removed by hand).
	humanAt time.Time
	// renewals: the kubelet's recent signs of life on the server (its
	// status updates, which every Lease renewal comes with), for the
	// oracle's missed-renewal rule (events.go, judgeMissedRenewal).
	renewals []time.Time
}

// pendingRequest is a human's request on the node (the request annotation).
type pendingRequest struct {
	cmd fence.Command
	id  string
	// written is when the CLI wrote it; visible when an informer could
	// first deliver it (zero while the view is frozen); origVisible is the
	// first visibility of the original of a replay.
	written, visible, origVisible time.Time
}

// Record is something that happened, for scenario expectations.
type Record struct {
	At     time.Time
	Node   string
	Kind   string // "event", "taint", "untaint", "power-off", "power-on", "phase"
	Detail string // event reason, phase name
	Msg    string
}

// World is the simulated cluster. Its methods and its Cluster adapter are
// safe for concurrent use (the runner's own Run drives it from goroutines).
type World struct {
	mu sync.Mutex

	Clock    *clocktesting.FakeClock
	Policy   fence.Policy
	Nodes    []*Node
	Machines []*Machine
	byName   map[string]*Node
	entries  map[string]*Entry
	// targets counts the entries addressing each machine (two or more:
	// all refused); ctl caches each node's controller.
	targets map[*Machine]int
	ctl     map[string]*target
	// deleted holds Node objects deleted while their kubelet may still
	// run: it re-registers them.
	deleted map[string]*deletedNode
	rng     *rand.Rand
	// podListLag: how long the adapter's list of a node's pods takes (EnablePodLists).
	podListLag time.Duration
	start      time.Time

	// API faults: a fraction of every call fails; every write fails.
	apiErrorRate float64
	writesFail   bool
	frozenSince  time.Time // zero: the view is live
	lastFresh    time.Time

	// Lease lists (cluster/leasepoll.go: the agent lists the node Leases
	// every period instead of watching them). leaseListEvery is the time
	// from one list's end to the next one's start, zero for a live view
	// (every heartbeat delivered in the second it is written);
	// leaseListTook a list's duration. listStart is the list under way
	// (zero: none), listedStart the last complete list's start (the view's
	// freshness), listEnded its end.
	leaseListEvery, leaseListTook     time.Duration
	listStart, listedStart, listEnded time.Time

	// Licences from humans (oracle.go): a fence request taken fresh (its
	// power-off of a live node is allowed) and a confirm taken fresh
	// (its taint without a BMC's proof is allowed), until the node's next
	// renewal.
	manual   map[string]bool
	attested map[string]bool
	// taken remembers requests taken, for replays.
	taken map[string]*pendingRequest
	seq   int

	// stormOffs: recent power-offs of running machines (oracle.go).
	stormOffs []stormOff
	// agents are the simulated agent processes (for per-agent informers).
	agents []*Agent

	// onPhase, if set, is told of every persisted phase (the driver's
	// triggers). It runs under the world's lock and must only schedule.
	onPhase func(node string, p fence.Phase)
	// podDeletes counts, per node, our pod deletes in flight past their
	// last re-check of the token and the taint (SetTaint).
	podDeletes map[string]int
	// between, if set, runs between two API calls of one cluster write
	// (cluster.go), without the world's lock: where the real adapter may
	// be paused, or the world may act, between its calls (the driver's
	// gap plans).
	between func(a *Agent, node string, at Gap)
	// quirks counts what the world's BMCs and humans did, by fault class.
	quirks map[string]int

	Records    []Record
	Violations []string
	changed    chan string

	// events: the BMCs push power events (events.go), decided by evRng.
	events bool
	evRng  *rand.Rand

	// outlets are the world's PDU outlets (pdu.go).
	outlets []*Outlet

	// actor is the agent whose runner is syncing now (the driver sets it
	// around every Sync): the oracle judges a power-off against the
	// machine its replica runs on (ownnode.go).
	actor *Agent
}

type deletedNode struct {
	n  *Node
	at time.Time
}

// NewWorld creates an empty world at start.
func NewWorld(start time.Time, p fence.Policy, seed uint64) *World {
	return &World{
		Clock:    clocktesting.NewFakeClock(start),
		Policy:   p,
		byName:   map[string]*Node{},
		entries:  map[string]*Entry{},
		targets:  map[*Machine]int{},
		ctl:      map[string]*target{},
		deleted:  map[string]*deletedNode{},
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		start:    start,
		manual:   map[string]bool{},
		attested: map[string]bool{},
		taken:    map[string]*pendingRequest{},
		quirks:   map[string]int{},
		changed:  make(chan string, 1024),
	}
}

// AddMachine adds a machine, On, that hosts no node yet (a spare).
func (w *World) AddMachine(name string, timing machine.Timing) *Machine {
	uuid := fmt.Sprintf("4c4c4544-%04x-%04x-8000-%012x", len(w.Machines), w.rng.IntN(1<<16), w.rng.Uint64()&(1<<48-1))
	m := &Machine{Name: name, UUID: uuid, timing: timing}
	m.BMC = bmctest.New(w.Clock, bmctest.WithTiming(timing), bmctest.WithStepper(w.Clock.Step),
		bmctest.WithKey("redfish://bmc-"+name), bmctest.WithIdentity(bmc.Identity{UUID: uuid}))
	w.Machines = append(w.Machines, m)
	return m
}

// AddNode adds a healthy node on a new machine of its own: machine On,
// kubelet running, Ready, with pods and a volume attached, and a correct
// inventory entry.
func (w *World) AddNode(name, zone string, timing machine.Timing) *Node {
	return w.AddNodeOn(name, zone, w.AddMachine(name, timing))
}

// AddNodeOn adds a node running on m (a registered kubelet: Ready, its
// systemUUID m's), with an inventory entry pointing at m.
func (w *World) AddNodeOn(name, zone string, m *Machine) *Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.newNode(name, zone, m)
	w.setEntry(name, &Entry{Target: m})
	return n
}

func (w *World) newNode(name, zone string, m *Machine) *Node {
	now := w.now()
	n := &Node{
		Name: name, Zone: zone, Host: m, BMC: m.BMC, SystemUUID: m.UUID, HasBMC: true, KubeletEnabled: true,
		created: now, lastBeat: now, leaseAt: now, statusAt: now, renewing: true, ready: fence.ReadyTrue, pods: 2, vas: 1, lastObservedHB: now, viewBeat: now,
	}
	w.Nodes = append(w.Nodes, n)
	w.byName[name] = n
	if w.leaseListEvery <= 0 {
		w.lastFresh = now // (with lists only a list proves the view fresh)
	}
	return n
}

// Node returns a node by name (nil when it does not exist).
func (w *World) Node(name string) *Node { return w.byName[name] }

// Entry returns a node's inventory entry (nil when it has none).
func (w *World) Entry(name string) *Entry {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.entries[name]
}

// SetEntry replaces a node's inventory entry (nil removes it). The agents
// see it at their next call.
func (w *World) SetEntry(name string, e *Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.setEntry(name, e)
	w.notify(name)
}

func (w *World) setEntry(name string, e *Entry) {
	if old := w.entries[name]; old != nil {
		w.targets[old.Target]--
	}
	delete(w.entries, name)
	if e != nil {
		w.entries[name] = e
		w.targets[e.Target]++
	}
}

// DeleteNode removes a node's API objects (kubectl delete node); its
// machine stays as it is. A kubelet still running re-registers it after
// RegisterDelay.
func (w *World) DeleteNode(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.byName[name]
	if n == nil {
		return
	}
	delete(w.byName, name)
	w.Nodes = slices.DeleteFunc(w.Nodes, func(x *Node) bool { return x == n })
	w.deleted[name] = &deletedNode{n: n, at: w.now()}
	w.notify(name)
}

// RecreateNode creates a Node object named name again, as an operator
// would (kubectl apply): on host (nil: the old object's), without a
// heartbeat until its kubelet runs. Its systemUUID is host's.
func (w *World) RecreateNode(name string, host *Machine) *Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.deleted[name]
	if d == nil || w.byName[name] != nil {
		return nil
	}
	delete(w.deleted, name)
	if host == nil {
		host = d.n.Host
	}
	n := w.recreate(d.n, host)
	n.renewing, n.ready = false, fence.ReadyUnknown
	return n
}

// recreate makes a new Node object for the kubelet of old on host.
func (w *World) recreate(old *Node, host *Machine) *Node {
	n := w.newNode(old.Name, old.Zone, host)
	n.KubeletEnabled, n.RuntimeDown, n.Partitioned = old.KubeletEnabled, old.RuntimeDown, old.Partitioned
	n.Excluded, n.HasBMC = old.Excluded, old.HasBMC
	n.Petter, n.petterEvicted, n.liveExpiry = old.Petter, old.petterEvicted, old.liveExpiry && old.Host == host
	n.pods, n.vas = 0, 0
	n.stateless = old.stateless
	n.podGen++
	w.notify(n.Name)
	return n
}

// partitionedAlive: the node's kubelet runs but cannot reach the API
// server.
func (w *World) partitionedAlive(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.byName[name]
	return n != nil && n.Partitioned && n.alive()
}

// StatusFirst heals a partitioned node whose kubelet runs, and its first
// write reaches the server: its status update (a new Ready heartbeat), not
// yet its Lease renewal (at the next Advance). It reports whether it did.
func (w *World) StatusFirst(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.byName[name]
	if n == nil || !n.Partitioned || !n.alive() {
		return false
	}
	n.Partitioned = false
	w.statusUpdate(n, w.now())
	w.notify(name)
	return true
}

// Notify tells the agents a node's view changed.
func (w *World) Notify(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notify(name)
}

func (w *World) now() time.Time { return w.Clock.Now() }

func (w *World) record(node, kind, detail, msg string) {
	w.Records = append(w.Records, Record{At: w.now(), Node: node, Kind: kind, Detail: detail, Msg: msg})
}

func (w *World) violate(format string, args ...any) {
	w.Violations = append(w.Violations, fmt.Sprintf("+%s: ", w.now().Sub(w.start).Round(time.Millisecond))+fmt.Sprintf(format, args...))
}

// Quirk counts something a fault did (see faults.go).
func (w *World) quirk(class string) { w.quirks[class]++ }

// Quirks returns what the world's faults did, by class.
func (w *World) Quirks() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return copyCounts(w.quirks)
}

func copyCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// running: the machine is up or booting: not off, not in a restart's dwell.
func running(m *Machine) bool {
	switch m.BMC.Truth().Power {
	case machine.PowerOn, machine.PowerPoweringOn:
		return true
	case machine.PowerOff, machine.PowerPoweringOff:
		return false
	}
	return false
}

// alive: the kubelet process runs: the host is On, its OS up and not hung,
// and the kubelet enabled. A partitioned kubelet is alive.
func (n *Node) alive() bool {
	s := n.Host.BMC.Truth()
	return s.Power == machine.PowerOn && s.BootState == "OSRunning" && !s.OSHung && n.KubeletEnabled
}

// renews: the kubelet is alive and reaches the API server.
func (n *Node) renews() bool { return n.alive() && !n.Partitioned }

// Advance runs the cluster's own dynamics up to the clock's now. The driver
// calls it every simulated second.
func (w *World) Advance() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	w.reregister(now)
	for _, n := range w.Nodes {
		w.kdumpReboot(n.Host, now)
		if running(n.Host) {
			n.ranAt = now
		}
		renews := n.renews()
		if renews && (!n.renewing || now.Sub(n.leaseAt) >= LeaseRenewInterval) {
			w.statusUpdate(n, now)
			n.leaseAt = now
			if !n.renewing && n.pods > 0 && (n.terminating || n.taint != fence.TaintAbsent) {
				// A kubelet coming back deletes the pods it no longer
				// owns (seed timeline: "Terminating pods are GC'd").
				n.pods, n.terminating, n.podsGoneAt = 0, false, now
				n.podGen++
			}
			w.notify(n.Name)
		}
		n.renewing = renews
		w.pet(n)
		// Node lifecycle controller.
		if n.ready != fence.ReadyUnknown && now.Sub(n.lastBeat) >= NodeMonitorGracePeriod {
			if n.ready == fence.ReadyTrue {
				n.notReadySince = now
			}
			n.ready = fence.ReadyUnknown
			n.rv++
			w.notify(n.Name)
		}
		// Taint manager: NoExecute evicts at once.
		if n.taint != fence.TaintAbsent && n.pods > 0 && !n.terminating {
			n.terminating, n.terminatingAt = true, now
			n.podGen++
			if renews {
				// A live kubelet honours the eviction itself.
				n.pods, n.terminating, n.podsGoneAt = 0, false, now
			}
		}
		// Pod GC: terminating pods of a NotReady out-of-service node.
		if n.terminating && n.ready != fence.ReadyTrue && n.taint != fence.TaintAbsent && now.Sub(n.terminatingAt) >= PodGCInterval {
			n.pods, n.terminating, n.podsGoneAt = 0, false, now
			n.podGen++
			w.notify(n.Name)
		}
		// Attach-detach: volumes go once the pods are gone, if the node is
		// out of service or back (not in use any more); a slow driver
		// takes detachAfter longer.
		if n.pods == 0 && n.vas > 0 && (n.taint != fence.TaintAbsent || renews) && now.Sub(n.podsGoneAt) >= DetachDelay+n.detachAfter {
			n.vas = 0
			w.notify(n.Name)
		}
		// The scheduler places new work on a healthy, untainted node.
		if renews && n.taint == fence.TaintAbsent && n.pods == 0 && n.ready == fence.ReadyTrue && !n.Maintenance {
			n.pods, n.vas = 2, 1
			if n.stateless {
				n.vas = 0
			}
			n.podGen++
		}
	}
	if w.frozenSince.IsZero() {
		w.listLeases(now)
	}
	for _, a := range w.agents {
		if !a.paused {
			a.stale = nil // its informers caught up
		}
	}
	w.advanceEvents(now)
	w.checkKeepOff(now)
}

// SetLeaseLists makes the agents' view of the heartbeats a list every
// `every` (after the last one ended) taking `took`, as the real agent's
// Lease poller; every 0 keeps the view live.
func (w *World) SetLeaseLists(every, took time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.leaseListEvery, w.leaseListTook = every, took
}

// EnableLeaseLists makes the agents' view Lease lists in three scenarios
// of four a seed makes (a list every 1, 2 or 4 s, taking 0, 1 or 6 s: up
// to fence.MaxLifePlacement between a renewal's placement and its delivery,
// or more),
// with its own random source so that the rest of the scenario is the one
// the seed made before; the others keep a live view. It returns the plan's
// line, "" for a live view.
func (w *World) EnableLeaseLists(seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 0x1ea5e1157))
	if rng.IntN(4) == 0 {
		return ""
	}
	every := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}[rng.IntN(3)]
	// A list of 6 s is a loaded API server's (1000 nodes × 30 pods in a
	// power loss): its window is wider than fence.MaxLifePlacement, and an
	// event is then placed only when received near the list's end.
	took := []time.Duration{0, time.Second, 6 * time.Second}[rng.IntN(3)]
	w.SetLeaseLists(every, took)
	return fmt.Sprintf("Lease lists every %s, taking %s", every, took)
}

// listLeases runs the agents' view of the heartbeats for this second: a
// live view takes in every heartbeat now; lists read the server when they
// start and deliver at their end, a renewal stamped then and placed after
// the start of the list before (observedFrom), the view fresh as of the
// list's start. Under the world's lock, while the view is not frozen.
func (w *World) listLeases(now time.Time) {
	if w.leaseListEvery <= 0 {
		w.lastFresh = now
		for _, n := range w.Nodes {
			n.lastObservedHB, n.viewBeat, n.observedFrom = n.lastBeat, n.lastBeat, time.Time{}
		}
		return
	}
	if w.listStart.IsZero() && (w.listEnded.IsZero() || now.Sub(w.listEnded) >= w.leaseListEvery) {
		w.listStart = now
		for _, n := range w.Nodes {
			n.listed = n.lastBeat
		}
	}
	if w.listStart.IsZero() || now.Before(w.listStart.Add(w.leaseListTook)) {
		return
	}
	for _, n := range w.Nodes {
		if n.listed.After(n.viewBeat) {
			n.lastObservedHB, n.viewBeat, n.observedFrom = now, n.listed, w.listedStart
		}
	}
	w.lastFresh, w.listedStart, w.listEnded, w.listStart = w.listStart, w.listStart, now, time.Time{}
}

// statusUpdate is the kubelet's node status update on the server: a new
// Ready heartbeat, and its Ready condition. Its Lease renewal is separate
// (leaseAt): a kubelet that renews writes both; one that comes back may
// write its status first.
func (w *World) statusUpdate(n *Node, now time.Time) {
	n.lastBeat, n.statusAt = now, now
	w.noteRenewal(n, now)
	n.rv++
	// A human's request or attestation was about the failure that just
	// ended.
	delete(w.manual, n.Name)
	delete(w.attested, n.Name)
	want := fence.ReadyTrue
	if n.RuntimeDown {
		want = fence.ReadyFalse
	}
	if n.ready != want {
		n.ready = want
		n.notReadySince = time.Time{}
		if want != fence.ReadyTrue {
			n.notReadySince = now
		}
	}
}

// reregister: a live kubelet whose Node object was deleted registers it
// again, on its own machine, after RegisterDelay.
func (w *World) reregister(now time.Time) {
	if len(w.deleted) == 0 {
		return
	}
	names := make([]string, 0, len(w.deleted))
	for name := range w.deleted {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		d := w.deleted[name]
		if w.byName[name] != nil || !d.n.renews() || now.Sub(d.at) < RegisterDelay {
			continue
		}
		delete(w.deleted, name)
		w.recreate(d.n, d.n.Host)
		w.quirk(faultRecreate + "/re-registered by its live kubelet")
	}
}

func (w *World) notify(name string) {
	select {
	case w.changed <- name:
	default:
	}
}

// FreezeAPI makes the agents' view stop updating (a stalled informer) until
// ThawAPI. Their own writes (state annotation, taint) still show.
func (w *World) FreezeAPI() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.frozenSince.IsZero() {
		return
	}
	w.frozenSince = w.now()
	w.listStart = time.Time{} // a list under way never returns
	for _, n := range w.Nodes {
		info := w.info(n)
		n.frozen = &info
	}
}

// ThawAPI makes the view live again; heartbeats and requests that happened
// meanwhile are observed now.
func (w *World) ThawAPI() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.frozenSince.IsZero() {
		return
	}
	now := w.now()
	for _, n := range w.Nodes {
		// With lists, a renewal written after the last list's read and
		// before the freeze is taken in now too: the view is fresh as of
		// now only with everything the server holds.
		if n.lastBeat.After(w.frozenSince) || (w.leaseListEvery > 0 && n.lastBeat.After(n.viewBeat)) {
			// Taken in now; with lists, placed after the last list
			// before the stall, as the real poller places it.
			n.lastObservedHB, n.viewBeat, n.observedFrom = now, n.lastBeat, w.listedStart
			if w.leaseListEvery <= 0 {
				n.observedFrom = time.Time{}
			}
		}
		if !n.plannedAt.IsZero() && n.plannedSeenAt.IsZero() {
			n.plannedSeenAt = now
		}
		if r := n.request; r != nil && r.visible.IsZero() {
			r.visible = now
			if r.origVisible.IsZero() {
				r.origVisible = now
			}
		}
		n.frozen = nil
	}
	w.frozenSince = time.Time{}
	w.lastFresh = now
	if w.leaseListEvery > 0 {
		w.listedStart, w.listEnded = now, now // a list at once, as the poller's first after a stall
	}
}

// SetAPIErrorRate makes that fraction of API calls fail.
func (w *World) SetAPIErrorRate(r float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.apiErrorRate = r
}

// SetWritesFail makes every write fail (or work again): an API server that
// answers reads but refuses writes (etcd out of space, an admission webhook
// down).
func (w *World) SetWritesFail(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writesFail = on
}

// Request records a human's command on a node, as the CLI would, and
// returns its ID ("" when the node does not exist).
func (w *World) Request(name string, c fence.Command) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.byName[name]
	if n == nil {
		return ""
	}
	now := w.now()
	w.seq++
	r := &pendingRequest{cmd: c, id: fmt.Sprintf("req-%d", w.seq), written: now}
	if w.frozenSince.IsZero() {
		r.visible, r.origVisible = now, now
	}
	n.request = r
	w.notify(name)
	return r.id
}

// Replay writes a request taken earlier on the node back, unchanged (same
// ID, same time written): a GitOps tool or a backup restoring an old
// annotation. It reports whether there was one to replay.
func (w *World) Replay(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, old := w.byName[name], w.taken[name]
	if n == nil || old == nil || n.request != nil {
		return false
	}
	r := *old
	r.visible = time.Time{}
	if w.frozenSince.IsZero() {
		r.visible = w.now()
	}
	n.request = &r
	w.notify(name)
	return true
}

// requestLife bounds how long after it was written a request can still be
// taken: a process first sees it at most MaxRequestAge after it was
// written (the cluster's check, on the CLI's clock), and takes it at most
// MaxRequestAge after that (the engine's, on its own): a process that
// starts while the request waits sees it new. Plus a leader's pause.
func requestLife(p fence.Policy) time.Duration { return 2*p.MaxRequestAge + requestSlack }

// mayStart reports whether someone may start node n's machine now without
// making an undetectable double fault (package doc): never a caching BMC's
// machine, nor one a confirm stands for (a request not yet expired, or one
// taken fresh). A machine no power reaches cannot be started at all.
func (w *World) mayStart(n *Node) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n.Host.CacheFor > 0 || w.attested[n.Name] {
		return false
	}
	if n.Host.unpowered || n.Host.psuDead {
		// No power reaches the machine (its outlets are off, its
		// supplies failed): neither its button nor its dead BMC can
		// start it. Someone must switch an outlet on first.
		return false
	}
	if r := n.request; r != nil && r.cmd.Kind == fence.CmdConfirm && w.now().Sub(r.written) <= requestLife(w.Policy) {
		return false
	}
	return true
}

// mayCycle reports whether someone may restart machine m now (a power
// cycle, a reboot: an off-dwell, then On) without making an undetectable
// double fault (package doc): not within ownOffWithin (and a second) of a
// ForceOff its BMC accepted and dropped, where the dwell would read exactly
// like the Off we caused.
func (w *World) mayCycle(m *Machine) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := len(m.dropped)
	return k == 0 || w.now().Sub(m.dropped[k-1]) > w.Policy.OwnOffWithin+time.Second
}

// Phase decodes the node's persisted phase ("" when none).
func (n *Node) Phase() string {
	if n.state == "" {
		return fence.Healthy.String()
	}
	s, err := fence.Decode(n.state)
	if err != nil {
		return "undecodable"
	}
	return s.Phase.String()
}

// DetachSlowly makes the node's volumes detach d later than the pods go
// (a slow CSI driver): a fenced node stays Detaching, its machine read for
// keep-off, that long.
func (n *Node) DetachSlowly(d time.Duration) { n.detachAfter = d }

// Taint reports the node's out-of-service taint.
func (n *Node) Taint() fence.TaintState { return n.taint }

// SetTaint puts a human's out-of-service taint on the node, or removes
// whatever taint is there (foreign=false).
func (w *World) SetTaint(name string, foreign bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.byName[name]
	if n == nil {
		return
	}
	switch {
	case foreign && n.taint == fence.TaintAbsent:
		n.taint, n.taintAt = fence.TaintForeign, w.now()
	case !foreign && w.podDeletes[name] > 0:
		// Premise: not between our last re-check of the taint and a
		// pod's delete, a window no adapter can close (the pod and the
		// node are two objects). A node that comes back touches its pods,
		// and the delete's preconditions stop it.
		w.quirk(faultForeignTaint + "/its removal waited for a pod delete in flight")
		return
	case !foreign:
		n.taint = fence.TaintAbsent
		n.humanAt = w.now()
	}
	n.rv++
	w.notify(name)
}

// Summary is a one-line description of every node, for failure messages.
func (w *World) Summary() string {
	var b strings.Builder
	names := make([]string, 0, len(w.Nodes))
	for _, n := range w.Nodes {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	for _, name := range names {
		n := w.byName[name]
		e := w.entries[name]
		target := "-"
		if e != nil && n.HasBMC {
			target = e.Target.Name
		}
		fmt.Fprintf(&b, "%s[%s host=%s bmc=%s power=%s alive=%v ready=%v taint=%v pods=%d vas=%d] ",
			name, n.Phase(), n.Host.Name, target, n.Host.BMC.Truth().Power, n.alive(), n.ready, n.taint, n.pods, n.vas)
	}
	return b.String()
}

// pet runs the node's watchdog petter: its DaemonSet starts it whenever the
// node's OS runs without one (after a boot, after an eviction is over).
func (w *World) pet(n *Node) {
	if n.Petter <= 0 || n.petterEvicted {
		return
	}
	s := n.Host.BMC.Truth()
	if s.Power != machine.PowerOn || s.BootState != "OSRunning" || s.OSHung || n.Host.BMC.Watchdog().Petted {
		return
	}
	_ = n.Host.BMC.StartPetter(n.Petter, machine.WatchdogNoAction)
}
