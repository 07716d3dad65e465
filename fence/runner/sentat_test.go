package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// slowRecheck is an API server that takes 13 s to answer the first
// recheck (the ForceOff's), as the loaded one of the 1000-node scale run
// did (docs/scale/n1000/).
type slowRecheck struct {
	*cluster
	slow time.Duration
}

func (c *slowRecheck) Recheck(ctx context.Context, node string) (runner.Recheck, error) {
	if c.slow > 0 {
		c.cluster.W.Clock.Step(c.slow)
		c.cluster.W.Advance()
		c.slow = 0
	}
	return c.cluster.Recheck(ctx, node)
}

// The machine reads Off 13 s after the step that decided the ForceOff, but
// at once after the ForceOff went out: the Off is ours and settles over
// settleWindow, not the unassisted minute. Without the runner's send time
// (fence.Result.SentAt) the engine counted ownOffWithin from the decision,
// and six of 100 power losses at 1000 nodes waited the minute.
func TestAForceOffDelayedByTheRecheckStillMakesTheOffOurs(t *testing.T) {
	w, c := world(t)
	r := newRunner(t, w, &slowRecheck{cluster: c, slow: 13 * time.Second})
	syncFor(w, r, 25*time.Second)
	if w.Node("n1").Taint() != fence.TaintOurs {
		t.Fatalf("n1 not tainted 25 s after a ForceOff whose recheck took 13 s; events %v", events(w, "n1"))
	}
}
