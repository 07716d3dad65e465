package fencesim

import (
	"context"
	"sort"
	"time"

	"github.com/bmcfence/bmcfence/fence/runner"
)

// Sim drives a World and one or more runners on the world's fake clock, one
// simulated second at a time. Runners are called through Sync, never Run, so
// nothing runs concurrently and a seed reproduces a run exactly.
type Sim struct {
	W     *World
	start time.Time

	runners []*runner.Runner
	// active lists the runners that believe they lead. Usually one; two
	// models a split brain that only the per-node lock may resolve.
	active []int

	due    map[string]time.Time
	events []scheduled
	DryRun bool
}

type scheduled struct {
	at   time.Time
	desc string
	do   func()
}

// NewSim returns a driver with one leading runner.
func NewSim(w *World) *Sim {
	s := &Sim{W: w, start: w.Clock.Now(), due: map[string]time.Time{}}
	s.active = []int{s.addRunner()}
	return s
}

func (s *Sim) addRunner() int {
	r, err := runner.New(runner.Options{
		Policy: s.W.Policy,
		Clock:  s.W.Clock,
		// A new process observes from now: first sightings, no renewals.
		Cluster:   Cluster{W: s.W, Since: s.W.Clock.Now()},
		Inventory: Cluster{W: s.W},
		DryRun:    s.DryRun,
	})
	if err != nil {
		panic(err) // the policy was validated by the caller
	}
	s.runners = append(s.runners, r)
	return len(s.runners) - 1
}

// At schedules fn at offset d from the start.
func (s *Sim) At(d time.Duration, desc string, fn func()) {
	s.events = append(s.events, scheduled{at: s.start.Add(d), desc: desc, do: fn})
	sort.SliceStable(s.events, func(i, j int) bool { return s.events[i].at.Before(s.events[j].at) })
}

// Crash replaces the leading runner by a fresh process: its memory is gone,
// only what it persisted remains.
func (s *Sim) Crash() {
	s.active = []int{s.addRunner()}
	clear(s.due)
}

// Failover hands leadership to another runner (a new one, or an old one that
// comes back with stale memory).
func (s *Sim) Failover(reuseOld bool) {
	if reuseOld && len(s.runners) > 1 {
		s.active = []int{(s.active[0] + 1) % len(s.runners)}
	} else {
		s.active = []int{s.addRunner()}
	}
	clear(s.due)
}

// SplitBrain makes two runners act at once until Failover or Crash.
func (s *Sim) SplitBrain() {
	if len(s.runners) < 2 {
		s.addRunner()
	}
	other := (s.active[0] + 1) % len(s.runners)
	s.active = []int{s.active[0], other}
}

// Run advances the simulation by d.
func (s *Sim) Run(d time.Duration) {
	ctx := context.Background()
	clk := s.W.Clock
	end := clk.Now().Add(d)
	for clk.Now().Before(end) {
		now := clk.Now()
		for len(s.events) > 0 && !s.events[0].at.After(now) {
			ev := s.events[0]
			s.events = s.events[1:]
			ev.do()
		}
		s.W.Advance()
		changed := s.drainChanged()
		for _, n := range s.W.Nodes {
			if !changed[n.Name] && clk.Now().Before(s.due[n.Name]) {
				continue
			}
			for _, i := range s.active {
				after, _ := s.runners[i].Sync(ctx, n.Name)
				s.due[n.Name] = clk.Now().Add(after)
			}
		}
		next := now.Add(time.Second)
		if clk.Now().Before(next) {
			clk.SetTime(next)
		}
	}
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
