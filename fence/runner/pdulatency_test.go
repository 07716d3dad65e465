package runner_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// slowDeadBMC is a BMC that died with its machine, on the simulated
// clock: every call (power, identity, hung-node evidence) waits for the
// caller's bound, its own 10 s timeout or the runner's DeadLevelTimeout
// (any deadline on the call), then fails as timed out.
type slowDeadBMC struct {
	clock *clocktesting.FakeClock
	calls []string
}

func (d *slowDeadBMC) wait(ctx context.Context, op string) error {
	wait := 10 * time.Second
	if _, ok := ctx.Deadline(); ok {
		wait = runner.DeadLevelTimeout
	}
	d.calls = append(d.calls, fmt.Sprintf("%s %s", op, wait))
	d.clock.Step(wait)
	return fmt.Errorf("%w: no answer within %s", bmc.ErrTimeout, wait)
}

func (d *slowDeadBMC) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	return bmc.PowerStatus{}, d.wait(ctx, "power")
}
func (d *slowDeadBMC) PowerOff(ctx context.Context) (bmc.Result, error) {
	return bmc.Result{}, d.wait(ctx, "off")
}
func (d *slowDeadBMC) PowerOn(ctx context.Context) (bmc.Result, error) {
	return bmc.Result{}, d.wait(ctx, "on")
}
func (d *slowDeadBMC) ReadEvidence(ctx context.Context) (bmc.EvidenceReport, error) {
	return bmc.EvidenceReport{}, d.wait(ctx, "evidence")
}
func (d *slowDeadBMC) Key() string                      { return "redfish://dead-bmc" }
func (d *slowDeadBMC) Verify(ctx context.Context) error { return d.wait(ctx, "verify") }

// deadBMCWithLevels is a node's level 1, the dead BMC (hung-node evidence
// included), with the simulated world's outlets below it.
type deadBMCWithLevels struct {
	*slowDeadBMC
	levels []runner.PowerController
}

func (d deadBMCWithLevels) Levels() []runner.PowerController { return d.levels }

// fenceThroughDeadBMC fences n1 (machine and BMC dead, its two outlets on,
// metering 0 W) as the runner's scheduler would: n1 is synced when the
// wake its last sync asked for comes (the dead BMC's waits advance the
// clock inside a sync), the world and the other nodes every second. It
// returns when each of n1's Events was first said, relative to the start.
func fenceThroughDeadBMC(t *testing.T) (map[string]time.Duration, *slowDeadBMC, *fencesim.World) {
	t.Helper()
	w, c, _ := pduWorld(t, false)
	w.SupplyFails(w.Node("n1").Host)
	dead := &slowDeadBMC{clock: w.Clock}
	sim, _ := fencesim.Cluster{W: w}.Controller("n1")
	ctrl := deadBMCWithLevels{slowDeadBMC: dead, levels: sim.(runner.Leveled).Levels()}
	r := newRunner(t, w, c, func(o *runner.Options) {
		o.Inventory = levelInventory{Cluster: fencesim.Cluster{W: w}, node: "n1", ctrl: ctrl}
	})
	start := w.Clock.Now()
	due, nextWorld := start, start
	for w.Clock.Now().Sub(start) < 2*time.Minute && w.Node("n1").Taint() == fence.TaintAbsent {
		now := w.Clock.Now()
		if !now.Before(nextWorld) {
			w.Advance()
			for _, n := range []string{"n2", "n3"} {
				r.Sync(context.Background(), n)
			}
			nextWorld = now.Add(time.Second)
		}
		if !now.Before(due) {
			after, _ := r.Sync(context.Background(), "n1")
			due = w.Clock.Now().Add(after)
		}
		next := nextWorld
		if due.Before(next) {
			next = due
		}
		if d := next.Sub(w.Clock.Now()); d > 0 {
			w.Clock.Step(d)
		}
	}
	at := map[string]time.Duration{}
	for _, rec := range w.Records {
		if rec.Node != "n1" || rec.Kind != "event" {
			continue
		}
		if _, ok := at[rec.Detail]; !ok {
			at[rec.Detail] = rec.At.Sub(start)
		}
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
	t.Logf("n1's first Events, from the failure: %v; calls to the dead BMC: %v", at, dead.calls)
	return at, dead, w
}

// A node whose BMC died with its machine is fenced through its outlets
// (level 2): the dead BMC costs its full timeout once, on the first read
// that finds it silent, and never again. Its hung-node evidence is not
// read: the reading came from the outlets, and evidence counts only when
// read from the target the reading came from (docs/safety.md, "Hung-node
// evidence", rule d), so a read of the dead BMC could license nothing
// and would cost another full BMC timeout before the ForceOff.
func TestOutletFenceOfADeadBMCDoesNotWaitForItsEvidence(t *testing.T) {
	at, dead, w := fenceThroughDeadBMC(t)
	suspect, ok1 := at["FenceSuspect"]
	off, ok2 := at["FencePowerOff"]
	if !ok1 || !ok2 {
		t.Fatalf("no FenceSuspect or FencePowerOff; events %v", events(w, "n1"))
	}
	// One full BMC timeout (the first read that finds it silent), then
	// the outlets' read and the off.
	if want := suspect + 10*time.Second + 500*time.Millisecond; off > want {
		t.Errorf("an outlet fence of a node whose BMC is dead: ForceOff at +%s, want by +%s (FenceSuspect at +%s plus one BMC timeout); calls to the dead BMC: %v",
			off, want, suspect, dead.calls)
	}
	if slices.ContainsFunc(dead.calls, func(c string) bool { return len(c) >= 8 && c[:8] == "evidence" }) {
		t.Errorf("the dead BMC's hung-node evidence was read for a reading of its outlets: calls %v", dead.calls)
	}
}

// The settle reads through the outlets below a silent BMC are spaced from
// when each read began, not from when the silent BMC's DeadLevelTimeout
// let the outlets answer: the off is confirmed about SettleWindow plus one
// read's wait after our ForceOff, the waits do not add up.
func TestSettleThroughOutletsBelowASilentBMCIsNotStretchedByItsWaits(t *testing.T) {
	at, dead, w := fenceThroughDeadBMC(t)
	off, ok1 := at["FencePowerOff"]
	confirmed, ok2 := at["FenceConfirmedOff"]
	if !ok1 || !ok2 {
		t.Fatalf("no FencePowerOff or FenceConfirmedOff; events %v", events(w, "n1"))
	}
	p := fence.DefaultPolicy()
	if want := off + p.SettleWindow + runner.DeadLevelTimeout + 500*time.Millisecond; confirmed > want {
		t.Errorf("settle through the outlets below a silent BMC: FenceConfirmedOff at +%s, want by +%s (ForceOff at +%s, SettleWindow %s, one DeadLevelTimeout %s); calls to the dead BMC: %v",
			confirmed, want, off, p.SettleWindow, runner.DeadLevelTimeout, dead.calls)
	}
}
