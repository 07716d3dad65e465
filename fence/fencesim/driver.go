package fencesim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// Agent is one simulated agent process: a runner with its own ID, clock
// skew and informers.
type Agent struct {
	ID string
	// Skew is how far its clock runs ahead of the world's.
	Skew time.Duration
	// Since is when its informers started: the world's start for a
	// standby that watched all along, its own start for a fresh process.
	Since time.Time
	R     *runner.Runner
	// paused: stalled between a decision and its write. stale is what its
	// informers held when it stalled, until the first Advance after it
	// resumes (the world reads it under its lock).
	paused  bool
	stale   map[string]time.Time
	started bool
	// absorbed: per Node object, when this process's own read of the node
	// (the state persist) took in a Ready heartbeat its informers had not
	// delivered (Cluster.absorb; under the world's lock).
	absorbed map[*Node]time.Time
	// NodeName is the node this replica runs on as its downward API says
	// (runner.Options.NodeName), "" for a replica on a machine outside the
	// simulated fleet; Host is that node's machine, the world's truth of
	// where the replica runs (ownnode.go). The replica dies with it.
	NodeName string
	Host     *Machine
}

// skewedClock is the world's clock as a replica whose clock is off by
// `by` sees it.
type skewedClock struct {
	*clocktesting.FakeClock
	by time.Duration
}

func (s skewedClock) Now() time.Time                  { return s.FakeClock.Now().Add(s.by) }
func (s skewedClock) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

// Sim drives a World and one or more agents on the world's fake clock, one
// simulated second at a time. Runners are called through Sync, never Run,
// so nothing runs concurrently and a seed reproduces a run exactly; the
// concurrency of real workers and replicas is modelled by running other
// Syncs inside a runner's BeforeAct, between its decision and its write.
type Sim struct {
	W     *World
	start time.Time
	// pinned: no leader change (crash, failover, split brain, a pause's
	// takeover) happens while it is set: the hung-node evidence episode
	// whose proof is the leader's memory of when it first saw an entry.
	pinned bool

	agents []*Agent
	// active lists the agents that believe they lead. Usually one; two
	// models a split brain that only the per-node lock may resolve.
	active []*Agent

	due    map[*Agent]map[string]time.Time
	events []scheduled
	DryRun bool

	// rng decides interleavings; Interleave is the chance, at each action,
	// that another worker runs in the gap.
	rng        *rand.Rand
	Interleave float64
	pauses     []*PausePlan
	gaps       []*GapPlan
	// partners: in a split brain, the node whose worker of the other
	// leader runs between this node's persisted decision and its act
	// (random when none).
	partners map[string]string
	triggers []*trigger
	depth    int

	// faults counts what this scenario's faults did (faults.go).
	faults map[string]int
}

type scheduled struct {
	at   time.Time
	desc string
	do   func()
}

// PausePlan makes the leader stall right before an action of one of Kinds
// (on Node, or any node), the first time it reaches one at or after After.
// While it stalls for For, leadership passes to another agent (To:
// "standby", "fresh" or "old", its clock skewed by Skew) and the world runs
// on; Perturb, if set, changes the world one second into the pause. Then
// the old leader resumes its write.
type PausePlan struct {
	After   time.Time
	Kinds   []fence.ActionKind
	Node    string
	For     time.Duration
	To      string
	Skew    time.Duration
	Perturb func(node string)
	fired   bool
}

// GapPlan acts at a gap between two API calls of one cluster write (Gap),
// the first time the leader reaches one (on Node, or any node) at or after
// After that When accepts: Act runs there (the world acts: a partition
// heals, the kubelet's status update arrives first), and the leader stalls
// for For (0: not at all) while another agent leads (To, Skew, Perturb as
// in PausePlan). Then the leader's next call goes on.
type GapPlan struct {
	After   time.Time
	At      string
	Node    string
	When    func(node string, g Gap) bool
	Act     func(node string)
	For     time.Duration
	To      string
	Skew    time.Duration
	Perturb func(node string)
	fired   bool
}

type trigger struct {
	node  string
	phase fence.Phase
	delay time.Duration
	desc  string
	do    func(node string)
	fired bool
}

// NewSim returns a driver with one leading agent that started with the
// world.
func NewSim(w *World) *Sim {
	return NewSimSeeded(w, 1, 0)
}

// NewSimSeeded returns a driver whose interleavings follow seed, with one
// leading agent whose clock is off by skew.
func NewSimSeeded(w *World, seed uint64, skew time.Duration) *Sim {
	s := &Sim{W: w, start: w.Clock.Now(), due: map[*Agent]map[string]time.Time{},
		rng: rand.New(rand.NewPCG(seed, 0x51ced)), faults: map[string]int{}}
	w.onPhase = s.phaseEntered
	w.between = s.between
	s.setActive(s.newAgent(w.Clock.Now(), skew))
	return s
}

// Faults returns what this scenario's faults did, the world's included.
func (s *Sim) Faults() map[string]int {
	out := s.W.Quirks()
	for k, v := range s.faults {
		out[k] += v
	}
	return out
}

func (s *Sim) fault(class string) { s.faults[class]++ }

func (s *Sim) newAgent(since time.Time, skew time.Duration) *Agent {
	return s.newAgentOn(since, skew, "", nil)
}

// newAgentOn is newAgent for a replica that runs on node (its machine
// host); "" and nil: on a machine outside the simulated fleet.
func (s *Sim) newAgentOn(since time.Time, skew time.Duration, node string, host *Machine) *Agent {
	a := &Agent{ID: fmt.Sprintf("agent-%d", len(s.agents)+1), Skew: skew, Since: since, NodeName: node, Host: host}
	var clk clock.WithTicker = s.W.Clock
	if skew != 0 {
		clk = skewedClock{FakeClock: s.W.Clock, by: skew}
		s.fault(faultReplicas)
	}
	r, err := runner.New(runner.Options{
		Policy:    s.W.Policy,
		Clock:     clk,
		Cluster:   Cluster{W: s.W, Since: since, Skew: skew, Agent: a},
		Inventory: Cluster{W: s.W},
		DryRun:    s.DryRun,
		ID:        a.ID,
		BeforeAct: func(node string, k fence.ActionKind, decided fence.State) { s.beforeAct(a, node, k, decided) },
		Events:    Cluster{W: s.W, Since: since, Skew: skew, Agent: a},
		NodeName:  node,
	})
	if err != nil {
		panic(err) // the policy was validated by the caller
	}
	a.R = r
	s.agents = append(s.agents, a)
	s.due[a] = map[string]time.Time{}
	s.W.mu.Lock()
	s.W.agents = append(s.W.agents, a)
	s.W.mu.Unlock()
	return a
}

func (s *Sim) setActive(as ...*Agent) {
	s.active = as
}

func (s *Sim) isActive(a *Agent) bool { return slices.Contains(s.active, a) }

// At schedules fn at offset d from the start.
func (s *Sim) At(d time.Duration, desc string, fn func()) { s.atAbs(s.start.Add(d), desc, fn) }

func (s *Sim) atAbs(t time.Time, desc string, fn func()) {
	i := sort.Search(len(s.events), func(i int) bool { return s.events[i].at.After(t) })
	s.events = slices.Insert(s.events, i, scheduled{at: t, desc: desc, do: fn})
}

// Arm adds a leader pause.
func (s *Sim) Arm(p *PausePlan) { s.pauses = append(s.pauses, p) }

// ArmGap adds an act (and maybe a pause) between two API calls.
func (s *Sim) ArmGap(p *GapPlan) { s.gaps = append(s.gaps, p) }

// between runs at a gap between two API calls of agent a's write on node
// (Cluster, outside the world's lock).
func (s *Sim) between(a *Agent, node string, g Gap) {
	if s.depth > 0 || !s.isActive(a) {
		return
	}
	for _, p := range s.gaps {
		if p.fired || s.W.Clock.Now().Before(p.After) || p.At != g.At || (p.Node != "" && p.Node != node) || (p.When != nil && !p.When(node, g)) {
			continue
		}
		p.fired = true
		if p.Act != nil {
			p.Act(node)
		}
		if p.For > 0 {
			s.fault(faultPauseInCall)
			s.fault(faultPauseInCall + "/at " + g.At)
			s.pause(a, node, &PausePlan{For: p.For, To: p.To, Skew: p.Skew, Perturb: p.Perturb})
		}
		return
	}
}

// OnPhase runs do(node), delay after node (any node, if "") first
// persists phase p.
func (s *Sim) OnPhase(node string, p fence.Phase, delay time.Duration, desc string, do func(node string)) {
	s.triggers = append(s.triggers, &trigger{node: node, phase: p, delay: delay, desc: desc, do: do})
}

// phaseEntered runs under the world's lock: it only schedules.
func (s *Sim) phaseEntered(node string, p fence.Phase) {
	for _, t := range s.triggers {
		if t.fired || t.phase != p || (t.node != "" && t.node != node) {
			continue
		}
		t.fired = true
		do := t.do
		s.atAbs(s.W.Clock.Now().Add(t.delay), t.desc, func() { do(node) })
	}
}

// Crash replaces the leading agent by a fresh process: its memory is gone,
// only what it persisted remains.
func (s *Sim) Crash() {
	if s.pinned {
		return
	}
	s.fault(faultFailover)
	s.setActive(s.newAgent(s.W.Clock.Now(), 0))
}

// Failover hands leadership to another agent (a new one, or an old one that
// comes back with stale memory).
func (s *Sim) Failover(reuseOld bool) {
	to := "fresh"
	if reuseOld {
		to = "old"
	}
	s.FailoverTo(to, 0)
}

// FailoverTo hands leadership to a "standby" (a new runner whose informers
// watched since the start), a "fresh" process (informers from now) or the
// "old" leader before this one, its clock off by skew (the old keeps its).
func (s *Sim) FailoverTo(to string, skew time.Duration) {
	if s.pinned {
		return
	}
	s.fault(faultFailover)
	s.setActive(s.pick(to, skew, s.active[0]))
}

func (s *Sim) pick(to string, skew time.Duration, not *Agent) *Agent {
	switch to {
	case "old":
		for i := len(s.agents) - 1; i >= 0; i-- {
			if a := s.agents[i]; a != not && !s.isActive(a) && !a.paused {
				return a
			}
		}
		return s.newAgent(s.W.Clock.Now(), skew)
	case "standby":
		return s.newAgent(s.start, skew)
	default:
		return s.newAgent(s.W.Clock.Now(), skew)
	}
}

// SplitBrain makes two agents act at once until a failover or crash: the
// leader and the one before it (a new process if there was none).
func (s *Sim) SplitBrain() { s.SplitBrainWith("old") }

// SplitBrainWith makes the leader and another agent (picked as FailoverTo
// picks) act at once until a failover or crash.
func (s *Sim) SplitBrainWith(to string) {
	if s.pinned {
		return
	}
	s.fault(faultSplitBrain)
	other := s.pick(to, 0, s.active[0])
	s.setActive(s.active[0], other)
}

// Run advances the simulation by d.
func (s *Sim) Run(d time.Duration) {
	end := s.W.Clock.Now().Add(d)
	for s.W.Clock.Now().Before(end) {
		s.tick()
	}
}

// tick runs one simulated second: what is scheduled, the cluster's
// dynamics, then every agent's workers that are due or were told of a
// change.
func (s *Sim) tick() {
	clk := s.W.Clock
	now := clk.Now()
	for len(s.events) > 0 && !s.events[0].at.After(now) {
		ev := s.events[0]
		s.events = s.events[1:]
		ev.do()
	}
	s.W.Advance()
	s.hostsDied()
	changed := s.drainChanged()
	active := slices.Clone(s.active)
	for _, name := range s.order(active) {
		for _, a := range active {
			if !s.isActive(a) || (!changed[name] && clk.Now().Before(s.due[a][name])) {
				continue
			}
			s.sync(a, name)
		}
	}
	for _, a := range active {
		a.started = true
	}
	if next := now.Add(time.Second); clk.Now().Before(next) {
		clk.SetTime(next)
	}
}

// order is the order in which nodes are synced this second. A process's
// first round syncs the nodes whose annotation shows a fence in flight
// first: runner.Run loads every node before any worker steps, so the
// first fleet view counts every fence already in flight.
func (s *Sim) order(active []*Agent) []string {
	names := make([]string, 0, len(s.W.Nodes))
	var first []string
	fresh := slices.ContainsFunc(active, func(a *Agent) bool { return !a.started })
	for _, n := range s.W.Nodes {
		if fresh {
			if p, ok := phaseOf(n.state); ok && p.InFlight() {
				first = append(first, n.Name)
				continue
			}
		}
		names = append(names, n.Name)
	}
	return append(first, names...)
}

func (s *Sim) sync(a *Agent, name string) {
	defer s.W.setActor(s.W.setActor(a))
	after, gone := a.R.Sync(context.Background(), name)
	if gone {
		delete(s.due[a], name)
		return
	}
	s.due[a][name] = s.W.Clock.Now().Add(after)
}

// beforeAct runs between a runner's decision and its action: where real
// workers of the same process run concurrently, and where a leader may
// stall while another takes over.
func (s *Sim) beforeAct(a *Agent, node string, k fence.ActionKind, _ fence.State) {
	if s.depth > 0 || !s.isActive(a) {
		return
	}
	for _, p := range s.pauses {
		if p.fired || s.W.Clock.Now().Before(p.After) || (p.Node != "" && p.Node != node) || !slices.Contains(p.Kinds, k) {
			continue
		}
		s.fault(faultPause)
		s.fault(faultPause + "/before " + k.String())
		s.pause(a, node, p)
		return
	}
	if s.Interleave > 0 && len(s.active) > 1 && len(s.W.Nodes) > 1 && (k == fence.ActPowerOff || k == fence.ActApplyTaint) && s.rng.Float64() < s.Interleave {
		// A split brain: the other leader's worker for another node runs
		// between this leader's persisted decision and its act, and must
		// count this fence from the persisted state (it is not in its
		// memory). Not between a decision and its persist: two leaders
		// deciding at once on the same counts is what leader election
		// exists to prevent (package doc).
		var b *Agent
		for _, x := range s.active {
			if x != a {
				b = x
				break
			}
		}
		other := s.partners[node]
		if s.W.Node(other) == nil {
			others := make([]string, 0, len(s.W.Nodes)-1)
			for _, n := range s.W.Nodes {
				if n.Name != node {
					others = append(others, n.Name)
				}
			}
			other = others[s.rng.IntN(len(others))]
		}
		s.fault(faultSplitBrain + "/the other leader acts between a persist and its act")
		s.depth++
		s.sync(b, other)
		s.depth--
		return
	}
	if s.Interleave > 0 && len(s.W.Nodes) > 1 && s.rng.Float64() < s.Interleave {
		others := make([]string, 0, len(s.W.Nodes)-1)
		for _, n := range s.W.Nodes {
			if n.Name != node {
				others = append(others, n.Name)
			}
		}
		other := others[s.rng.IntN(len(others))]
		s.fault(faultInterleave)
		s.depth++
		s.sync(a, other)
		s.depth--
	}
}

// pause stalls agent a (before an action on node, or between two of its
// calls) for p.For: another agent leads meanwhile, and the world runs on.
// Then a resumes, its informers still where they were when it stalled.
func (s *Sim) pause(a *Agent, node string, p *PausePlan) {
	if s.pinned {
		return
	}
	p.fired = true
	s.W.mu.Lock()
	a.paused = true
	a.stale = make(map[string]time.Time, len(s.W.Nodes))
	for _, n := range s.W.Nodes {
		a.stale[n.Name] = n.viewBeat
	}
	s.W.mu.Unlock()
	s.fault(faultFailover)
	s.setActive(s.pick(p.To, p.Skew, a))
	if p.Perturb != nil {
		perturb := p.Perturb
		s.atAbs(s.W.Clock.Now().Add(time.Second), "perturb "+node, func() { perturb(node) })
	}
	s.depth++
	for end := s.W.Clock.Now().Add(p.For); s.W.Clock.Now().Before(end); {
		s.tick()
	}
	s.depth--
	s.W.mu.Lock()
	a.paused = false
	s.W.mu.Unlock()
}

func (s *Sim) drainChanged() map[string]bool {
	var out map[string]bool
	for {
		select {
		case name := <-s.W.changed:
			if out == nil {
				out = map[string]bool{}
			}
			out[name] = true
		default:
			return out
		}
	}
}
