package runner_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// The tests in this file are named for the defects the third safety review
// found in the runner (issue 17). Each failed before its fix.

// In a split brain (two agents that both believe they lead, until leader
// election sorts it out) each counted only the fences in its own memory:
// with maxConcurrentFences 1, each powered off a running machine. Fences in
// flight, and their admissions for the cooldown, are counted from the
// persisted states of all nodes.
func TestSplitBrainLeadersCountEachOthersFences(t *testing.T) {
	for _, tt := range []struct {
		name string
		tune func(*fence.Policy)
	}{
		{"another leader's fence in flight", func(p *fence.Policy) { p.Cooldown = 0 }},
		{"another leader's admission, within the cooldown", func(p *fence.Policy) { p.MaxConcurrentFences = 2 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := partitionPolicy()
			tt.tune(&p)
			w := fencesim.NewWorld(t0, p, 1)
			for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
				w.AddNode(n, "a", fencesimTiming)
			}
			// Running machines cut off from the API server: their BMCs
			// read On, so each ForceOff is one the storm guard bounds.
			for _, n := range []string{"n1", "n2"} {
				w.Node(n).Partitioned = true
			}
			for i := 0; i < 30; i++ {
				w.Clock.Step(time.Second)
				w.Advance()
			}
			a := newRunner(t, w, fencesim.Cluster{W: w}, func(o *runner.Options) { o.ID = "agent-a" })
			b := newRunner(t, w, fencesim.Cluster{W: w}, func(o *runner.Options) { o.ID = "agent-b" })
			a.Sync(context.Background(), "n1")
			w.Clock.Step(time.Second)
			w.Advance()
			b.Sync(context.Background(), "n2")
			var offs []string
			for _, rec := range w.Records {
				if rec.Kind == "power-off" {
					offs = append(offs, rec.Node)
				}
			}
			if len(offs) != 1 {
				t.Fatalf("ForceOffs to %v by two leaders (maxConcurrentFences %d, cooldown %s)", offs, p.MaxConcurrentFences, p.Cooldown)
			}
		})
	}
}

// Found by the simulation (seed 15295 of the issue-17 world): a fence that
// ended (its node renewed: the partition healed) forgot its admission, and
// the cooldown with it; another fence was admitted at once, and two
// running machines were powered off within seconds with
// maxConcurrentFences 1. The cooldown counts from the latest admission or
// ForceOff of every node, ended fences included.
func TestTheCooldownSurvivesAFenceThatEnded(t *testing.T) {
	w := fencesim.NewWorld(t0, partitionPolicy(), 1)
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
		w.AddNode(n, "a", fencesimTiming)
	}
	for _, n := range []string{"n1", "n2"} {
		w.Node(n).Partitioned = true
		// Their BMCs fail the ForceOff (a 500): both machines run on, so
		// the partition heals with their kubelets alive, and the fence
		// ends (nothing was accepted: no contradiction).
		w.Node(n).BMC.Fail(fmt.Errorf("%w: HTTP 500", bmc.ErrBMC), bmc.OpPowerOff)
	}
	for i := 0; i < 30; i++ {
		w.Clock.Step(time.Second)
		w.Advance()
	}
	ctx := context.Background()
	r := newRunner(t, w, fencesim.Cluster{W: w})
	r.Sync(ctx, "n1")
	offs := func(node string) int {
		k := 0
		for _, rec := range w.Records {
			if rec.Node == node && rec.Kind == "power-off" {
				k++
			}
		}
		return k
	}
	if offs("n1") == 0 {
		t.Fatal("n1 was not powered off")
	}
	w.Node("n1").Partitioned = false // n1 renews: its fence ends
	for i := 0; i < 5; i++ {
		w.Clock.Step(time.Second)
		w.Advance()
		r.Sync(ctx, "n1")
		r.Sync(ctx, "n2")
	}
	if offs("n2") != 0 {
		t.Fatalf("n2 powered off within 5s of n1's ForceOff (cooldown %s): the ended fence's admission was forgotten", w.Policy.Cooldown)
	}
}
