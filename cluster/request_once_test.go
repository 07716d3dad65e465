package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

// noBMCs is an inventory without a single BMC: the request below needs
// none.
type noBMCs struct{}

func (noBMCs) Controller(string) (runner.PowerController, bool) { return nil, false }

// TestARequestIsTakenInOnce: with no agent running, kubectl-fence drives
// the engine itself and offers the request to it (runRequest); an agent
// that comes back meanwhile sees the same BMCFenceRequest (its status
// never written: that is the agent's grant) and offers it to its own
// engine. Whatever the order, and however stale either view, exactly one
// engine takes the request in: one command in the node's fence state.
func TestARequestIsTakenInOnce(t *testing.T) {
	const id = "w1-abort-x7k2p"
	type actor int
	const (
		cliOffers actor = iota
		agentOffers
		cliSyncs
		agentSyncs
		cliSees   // the CLI's informer delivers the server's node
		agentSees // the agent's
	)
	tests := []struct {
		name  string
		steps []actor
	}{
		{"the CLI takes it, then the agent comes back", []actor{cliOffers, cliSyncs, agentSees, agentOffers, agentSyncs}},
		{"the agent comes back before its informer shows the CLI's take", []actor{cliOffers, cliSyncs, agentOffers, agentSyncs, agentSyncs, agentSees, agentSyncs}},
		{"both offered, the CLI first", []actor{cliOffers, agentOffers, cliSyncs, agentSyncs, agentSees, agentSyncs}},
		{"both offered, the agent first", []actor{cliOffers, agentOffers, agentSyncs, cliSyncs, cliSees, cliSyncs}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, node("w1", ready(at(0))), lease("w1", at(0)))
			agentCluster, err := New(clientgo.Wrap(h.client), Options{Clock: h.clock})
			if err != nil {
				t.Fatal(err)
			}
			agent := &harness{t: t, c: agentCluster, client: h.client, clock: h.clock}
			for _, x := range []*harness{h, agent} {
				x.deliver(node("w1", ready(at(0))), lease("w1", at(0)))
			}
			takenBy := map[string]int{}
			h.c.OnRequestTaken(func(_, taken string) { takenBy["cli/"+taken]++ })
			agent.c.OnRequestTaken(func(_, taken string) { takenBy["agent/"+taken]++ })
			newRunner := func(c *Cluster, name string) *runner.Runner {
				r, err := runner.New(runner.Options{Policy: fence.DefaultPolicy(), Clock: h.clock, Cluster: c, Inventory: noBMCs{}, ID: name})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			cli, agentRunner := newRunner(h.c, "cli"), newRunner(agent.c, "agent")
			cmd := fence.Command{Kind: fence.CmdAbort, User: "alice", Reason: "changed my mind", SeenAt: h.clock.Now()}
			ctx := context.Background()
			for _, s := range tt.steps {
				h.clock.Step(time.Second)
				switch s {
				case cliOffers:
					h.c.SetRequest("w1", id, cmd)
				case agentOffers:
					agent.c.SetRequest("w1", id, cmd)
				case cliSyncs:
					cli.Sync(ctx, "w1")
				case agentSyncs:
					agentRunner.Sync(ctx, "w1")
				case cliSees:
					h.deliver(serverNode(t, h, "w1"))
				case agentSees:
					agent.deliver(serverNode(t, h, "w1"))
				}
			}
			st, err := fence.Decode(serverNode(t, h, "w1").Annotations[AnnotationState])
			if err != nil {
				t.Fatal(err)
			}
			commands := 0
			for _, r := range st.Evidence.Records() {
				if r.Kind == fence.RecCommand {
					commands++
				}
			}
			if commands != 1 {
				t.Errorf("the request was taken in %d times (taken hooks %v); want exactly once", commands, takenBy)
			}
		})
	}
}
