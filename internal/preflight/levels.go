package preflight

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/inventory"
)

// checkLevels reports each of the node's fencing levels below its BMC
// (check "level-N"): whether its outlets count (a recorded identity proof
// for this machine, or allowUnverifiedOutlet, named), what they read, and
// whether they meter. It runs whatever the BMC's checks found: a level
// matters most when the BMC cannot answer.
func checkLevels(ctx context.Context, o Options, n *corev1.Node) []Result {
	c, err := o.Inventory.Lookup(n.Name)
	if err != nil {
		return nil
	}
	var out []Result
	for i, l := range c.Levels() {
		check := "level-" + strconv.Itoa(i+2)
		res := func(st Status, format string, args ...any) Result {
			return Result{Scope: NodeScope(n.Name), Check: check, Status: st, Message: l.Key() + ": " + fmt.Sprintf(format, args...)}
		}
		call, cancel := context.WithTimeout(ctx, o.Timeout)
		verr := l.Verify(call)
		cancel()
		if verr != nil {
			st := StatusFail
			if !errors.Is(verr, inventory.ErrNoOutletProof) {
				st = StatusWarn
			}
			out = append(out, res(st, "the agent will not fence through this level: %v", verr))
			continue
		}
		call, cancel = context.WithTimeout(ctx, o.Timeout)
		ps, perr := l.PowerStatus(call)
		cancel()
		if perr != nil {
			out = append(out, res(StatusWarn, "identity holds, but the outlets cannot be read now: %v", perr))
			continue
		}
		meter := "the outlets do not meter: never the power-loss fast path, always fenceAfter"
		if m, ok := l.(runner.Metered); ok {
			call, cancel = context.WithTimeout(ctx, o.Timeout)
			dl, merr := m.Drawless(call)
			cancel()
			switch {
			case merr == nil && dl && ps.State == bmc.PowerOn:
				meter = "on and drawing about 0 W: a dead machine"
			case merr == nil:
				meter = "metering works"
			}
		}
		how := "every outlet has a recorded identity proof for this machine"
		if lv, ok := l.(interface{ Unverified() []string }); ok && len(lv.Unverified()) > 0 {
			out = append(out, res(StatusWarn, "reads %s (%s); allowUnverifiedOutlet for %v: these count on your word, with no identity test", ps.State, meter, lv.Unverified()))
			continue
		}
		out = append(out, res(StatusOK, "reads %s (%s); %s", ps.State, meter, how))
	}
	return out
}
