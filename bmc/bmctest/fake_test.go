package bmctest

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/machine"
)

func TestFakeFollowsTheMachine(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := New(clk, WithTiming(machine.Timing{PowerOff: time.Second, RestartOff: 2 * time.Second, PowerOn: 10 * time.Second}))
	ctx := context.Background()
	read := func() bmc.PowerState {
		t.Helper()
		st, err := f.PowerStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.State
	}
	if got := read(); got != bmc.PowerOn {
		t.Fatalf("initial = %v", got)
	}
	if _, err := f.PowerOff(ctx); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != bmc.PoweringOff {
		t.Fatalf("right after ForceOff = %v, want PoweringOff", got)
	}
	clk.Step(time.Second)
	if got := read(); got != bmc.PowerOff || !f.StaysOff(time.Hour) {
		t.Fatalf("after 1s = %v (stays off %v), want Off for good", got, f.StaysOff(time.Hour))
	}
	if _, err := f.PowerOff(ctx); err != nil {
		t.Fatalf("ForceOff when off: %v (no 409 unless ConflictWhenOff)", err)
	}
	if f.Count(bmc.OpPowerOff) != 2 || f.Count(bmc.OpPowerStatus) != 3 {
		t.Errorf("calls = %+v", f.Calls())
	}
}

func TestFakeRestartDwellIsNotStayingOff(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := New(clk, WithTiming(machine.Timing{RestartOff: 2 * time.Second, PowerOn: 10 * time.Second}))
	if err := f.Event(machine.EventOSReboot); err != nil {
		t.Fatal(err)
	}
	if f.Truth().Power != machine.PowerOff {
		t.Fatal("a restart's dwell reads Off")
	}
	if f.StaysOff(time.Hour) {
		t.Fatal("StaysOff during a restart's Off dwell")
	}
	if f.Truth().Power != machine.PowerOff {
		t.Fatal("StaysOff advanced the real machine")
	}
}

func TestFakeScriptedFailures(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := New(clk)
	ctx := context.Background()
	f.FailNext(2, ErrUnreachableFake, bmc.OpPowerStatus)
	for i := 0; i < 2; i++ {
		if _, err := f.PowerStatus(ctx); !errors.Is(err, bmc.ErrUnreachable) {
			t.Fatalf("call %d: %v, want ErrUnreachable", i, err)
		}
	}
	if _, err := f.PowerStatus(ctx); err != nil {
		t.Fatalf("third call: %v, want success", err)
	}
	f.SetBehavior(machine.Behavior{IgnoreCommands: true})
	if _, err := f.PowerOff(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.PowerStatus(ctx); st.State != bmc.PowerOn {
		t.Fatalf("a lying BMC's machine = %v, want On", st.State)
	}
	f.Fail(ErrUnreachableFake)
	if _, err := f.Identity(ctx); !errors.Is(err, bmc.ErrUnreachable) {
		t.Fatalf("Identity = %v", err)
	}
	f.Clear()
	if _, err := f.Identity(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestFakeLatencyStepsTheClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := New(clk, WithStepper(clk.Step))
	f.SetLatency(300 * time.Millisecond)
	start := clk.Now()
	if _, err := f.PowerStatus(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := clk.Since(start); got != 300*time.Millisecond {
		t.Errorf("call took %s on the clock, want 300ms", got)
	}
}

func TestFakeAlreadyOffDuringARestartDwellDoesNothing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := New(clk, WithTiming(machine.Timing{RestartOff: 5 * time.Second, PowerOn: 10 * time.Second}))
	f.SetAlreadyOff(true)
	if err := f.Event(machine.EventOSReboot); err != nil {
		t.Fatal(err)
	}
	_, err := f.PowerOff(context.Background())
	if !errors.Is(err, bmc.ErrAlreadyInState) {
		t.Fatalf("ForceOff during the dwell = %v, want ErrAlreadyInState", err)
	}
	clk.Step(6 * time.Second)
	if got := f.Truth().Power; got != machine.PowerPoweringOn {
		t.Fatalf("after the dwell = %v, want PoweringOn: the restart goes on", got)
	}
	if _, err := f.PowerOff(context.Background()); err != nil {
		t.Fatalf("ForceOff while PoweringOn = %v, want accepted", err)
	}
}
