package power

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

var errAlready = fmt.Errorf("%w: HTTP 409 IDRAC.2.9.PSU501: Server is already powered OFF.", bmc.ErrAlreadyInState)

type outcome struct {
	r   Report
	err error
	at  time.Duration // on the fake clock
}

// drive runs OffConfirmed on a fake clock, stepping it whenever the
// operation waits, until it returns. during runs after every step, with
// the fake time elapsed.
func drive(t *testing.T, clk *clocktesting.FakeClock, ctrl bmc.Controller, during func(time.Duration)) outcome {
	t.Helper()
	done := make(chan outcome, 1)
	go func() {
		r, err := offConfirmed(context.Background(), clk, ctrl, OffOptions{Policy: fence.DefaultPolicy()})
		done <- outcome{r: r, err: err, at: clk.Since(t0)}
	}()
	const step = 500 * time.Millisecond
	for {
		select {
		case o := <-done:
			return o
		default:
		}
		if clk.HasWaiters() {
			clk.Step(step)
			if during != nil {
				during(clk.Since(t0))
			}
			continue
		}
		if clk.Since(t0) > 10*time.Minute {
			t.Fatal("OffConfirmed never returned")
		}
		runtime.Gosched()
	}
}

func TestOffConfirmed(t *testing.T) {
	p := fence.DefaultPolicy()
	t.Run("accepted: settles over the settle window", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(t0)
		f := bmctest.New(clk)
		o := drive(t, clk, f, nil)
		if o.err != nil || !o.r.Confirmed || o.r.Answer != "accepted" || o.r.Commands != 1 || o.r.Note != "" {
			t.Fatalf("report %+v, err %v", o.r, o.err)
		}
		if o.at < p.SettleWindow || o.at > p.SettleWindow+2*p.PowerPollInterval {
			t.Errorf("confirmed after %v, want just over the %v settle window", o.at, p.SettleWindow)
		}
	})
	t.Run("already off: an Off we did not cause waits out the unassisted window", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(t0)
		f := bmctest.New(clk, bmctest.WithPower(false))
		f.Fail(errAlready, bmc.OpPowerOff)
		o := drive(t, clk, f, nil)
		if o.err != nil || !o.r.Confirmed || o.r.Answer != "already in that state" {
			t.Fatalf("report %+v, err %v", o.r, o.err)
		}
		if o.at < p.UnassistedSettleWindow {
			t.Errorf("confirmed after %v, before the %v unassisted window", o.at, p.UnassistedSettleWindow)
		}
		if !strings.Contains(o.r.Note, "not caused by us") {
			t.Errorf("note %q does not say the Off was not ours", o.r.Note)
		}
	})
	t.Run("already off during a restart: ForceOff again once it has power", func(t *testing.T) {
		// The machine restarts with a 10 s off-dwell. The BMC answers the
		// first ForceOff "already off" and does nothing, so the machine
		// comes back: the CLI must send ForceOff again and confirm only the
		// Off that one caused. (The old rule took the dwell's Off.)
		clk := clocktesting.NewFakeClock(t0)
		f := bmctest.New(clk, bmctest.WithTiming(machine.Timing{RestartOff: 10 * time.Second, PowerOn: 2 * time.Second}))
		if err := f.Event(machine.EventOSReboot); err != nil {
			t.Fatal(err)
		}
		f.FailNext(1, errAlready, bmc.OpPowerOff)
		var confirmedEarly bool
		o := drive(t, clk, f, nil)
		confirmedEarly = o.at < 10*time.Second
		if o.err != nil || !o.r.Confirmed || confirmedEarly {
			t.Fatalf("report %+v at %v, err %v; want confirmed after the dwell", o.r, o.at, o.err)
		}
		if o.r.Commands != 2 || o.r.Answer != "accepted" || f.Count(bmc.OpPowerOff) != 2 {
			t.Errorf("commands %d, answer %q, ForceOffs %d: want a second, accepted ForceOff", o.r.Commands, o.r.Answer, f.Count(bmc.OpPowerOff))
		}
		if !f.StaysOff(time.Hour) {
			t.Error("the machine does not stay off")
		}
	})
	t.Run("a failed command is reported at once, without polling", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(t0)
		f := bmctest.New(clk)
		f.Fail(fmt.Errorf("%w: HTTP 401", bmc.ErrAuth), bmc.OpPowerOff)
		o := drive(t, clk, f, nil)
		if !errors.Is(o.err, bmc.ErrAuth) || o.at != 0 || f.Count(bmc.OpPowerStatus) != 0 {
			t.Errorf("err %v after %v with %d reads; want ErrAuth at once, no read", o.err, o.at, f.Count(bmc.OpPowerStatus))
		}
	})
	t.Run("a lying BMC: accepted, never Off", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(t0)
		f := bmctest.New(clk)
		f.SetBehavior(machine.Behavior{IgnoreCommands: true})
		o := drive(t, clk, f, nil)
		if !errors.Is(o.err, ErrNotOff) || o.r.Confirmed || !strings.Contains(o.err.Error(), "may ignore commands") {
			t.Errorf("report %+v, err %v; want ErrNotOff", o.r, o.err)
		}
	})
	t.Run("Off while BootProgress says the OS runs is never proof", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(t0)
		o := drive(t, clk, contradicting{}, nil)
		if !errors.Is(o.err, ErrNotOff) || !strings.Contains(o.err.Error(), "BootProgress says OSRunning") {
			t.Errorf("err %v; want ErrNotOff explaining the contradiction", o.err)
		}
	})
}

// contradicting accepts ForceOff and reads Off with BootProgress OSRunning.
type contradicting struct{}

func (contradicting) PowerStatus(context.Context) (bmc.PowerStatus, error) {
	return bmc.PowerStatus{State: bmc.PowerOff, Raw: "Off", BootProgress: "OSRunning"}, nil
}
func (contradicting) PowerOff(context.Context) (bmc.Result, error) {
	return bmc.Result{Provider: "redfish", Sent: "ComputerSystem.Reset ForceOff"}, nil
}
func (contradicting) PowerOn(context.Context) (bmc.Result, error)    { return bmc.Result{}, nil }
func (contradicting) Identity(context.Context) (bmc.Identity, error) { return bmc.Identity{}, nil }

// scripted accepts every ForceOff; its power follows script(time since the
// first ForceOff), whatever later commands say: a machine powered on
// behind our back, or a BMC that accepts and ignores.
type scripted struct {
	clk    *clocktesting.FakeClock
	offAt  time.Time
	script func(time.Duration) bmc.PowerState
}

func (s *scripted) PowerStatus(context.Context) (bmc.PowerStatus, error) {
	if s.offAt.IsZero() {
		return bmc.PowerStatus{State: bmc.PowerOn}, nil
	}
	return bmc.PowerStatus{State: s.script(s.clk.Since(s.offAt))}, nil
}

func (s *scripted) PowerOff(context.Context) (bmc.Result, error) {
	if s.offAt.IsZero() {
		s.offAt = s.clk.Now()
	}
	return bmc.Result{Sent: "ForceOff"}, nil
}
func (s *scripted) PowerOn(context.Context) (bmc.Result, error)    { return bmc.Result{}, nil }
func (s *scripted) Identity(context.Context) (bmc.Identity, error) { return bmc.Identity{}, nil }

// An accepted ForceOff explains an Off only if the machine reads Off soon
// after it and stays so; an Off after the machine read On again, or long
// after the command, may be a restart's off-dwell (found by review).
func TestOffNotOursAfterOnOrLate(t *testing.T) {
	type span struct {
		until time.Duration
		state bmc.PowerState
	}
	tests := []struct {
		name   string
		script []span // after the first ForceOff; On after the last
	}{
		{"off, powered on again, then a 30 s power cycle", []span{{3 * time.Second, bmc.PowerOff}, {15 * time.Second, bmc.PowerOn}, {45 * time.Second, bmc.PowerOff}}},
		{"accepted and ignored, then a watchdog's 30 s power cycle", []span{{20 * time.Second, bmc.PowerOn}, {50 * time.Second, bmc.PowerOff}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			c := &scripted{clk: clk, script: func(d time.Duration) bmc.PowerState {
				for _, s := range tt.script {
					if d < s.until {
						return s.state
					}
				}
				return bmc.PowerOn
			}}
			if o := drive(t, clk, c, nil); o.r.Confirmed {
				t.Fatalf("confirmed Off at +%s, inside a power cycle's off-dwell we did not cause (report %+v)", o.at, o.r)
			}
		})
	}
}

// driveWith is drive with options.
func driveWith(t *testing.T, clk *clocktesting.FakeClock, ctrl bmc.Controller, o OffOptions) outcome {
	t.Helper()
	done := make(chan outcome, 1)
	go func() {
		r, err := offConfirmed(context.Background(), clk, ctrl, o)
		done <- outcome{r: r, err: err, at: clk.Since(t0)}
	}()
	for {
		select {
		case out := <-done:
			return out
		default:
		}
		if clk.HasWaiters() {
			clk.Step(100 * time.Millisecond)
			continue
		}
		if clk.Since(t0) > 10*time.Minute {
			t.Fatal("OffConfirmed never returned")
		}
		runtime.Gosched()
	}
}

// --power-timeout 8s means the operation ends within 8 s, whatever the BMC
// answers; an Off we did not cause cannot settle in that time, and the
// error says which setting to raise.
func TestOffConfirmedHonoursItsLimit(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	f := bmctest.New(clk, bmctest.WithPower(false))
	f.Fail(errAlready, bmc.OpPowerOff)
	o := driveWith(t, clk, f, OffOptions{Policy: fence.DefaultPolicy(), Limit: 8 * time.Second,
		Names: Names{UnassistedSettleWindow: "--unassisted-settle-window", PowerTimeout: "--power-timeout"}})
	if !errors.Is(o.err, ErrNotOff) || o.at > 8*time.Second {
		t.Fatalf("err %v after %v; want ErrNotOff within the 8s limit", o.err, o.at)
	}
	for _, want := range []string{"--unassisted-settle-window", "--power-timeout 8s is shorter"} {
		if !strings.Contains(o.err.Error(), want) {
			t.Errorf("error %q does not say %q", o.err, want)
		}
	}
}

// A BMC that answers "already in that state" while the machine reads On
// will never power it off: the ForceOffs stop at PowerOffAttempts.
func TestOffConfirmedStopsResendingToARefusingBMC(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	f := bmctest.New(clk)
	f.Fail(errAlready, bmc.OpPowerOff)
	o := driveWith(t, clk, f, OffOptions{Policy: fence.DefaultPolicy()})
	p := fence.DefaultPolicy()
	if !errors.Is(o.err, ErrNotOff) || f.Count(bmc.OpPowerOff) != p.PowerOffAttempts || !strings.Contains(o.err.Error(), "refuses") {
		t.Fatalf("err %v with %d ForceOffs after %v; want ErrNotOff after %d", o.err, f.Count(bmc.OpPowerOff), o.at, p.PowerOffAttempts)
	}
	if o.at > 4*p.PowerPollInterval {
		t.Errorf("gave up after %v; a refusing BMC is known after %d polls", o.at, p.PowerOffAttempts)
	}
}

// Progress counts reads against the window, in the reader's words; the
// note never names a Go identifier.
func TestOffConfirmedSaysItInTheReadersWords(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	f := bmctest.New(clk, bmctest.WithPower(false))
	f.Fail(errAlready, bmc.OpPowerOff)
	var lines []string
	o := driveWith(t, clk, f, OffOptions{Policy: fence.DefaultPolicy(), Names: Names{UnassistedSettleWindow: "--unassisted-settle-window"},
		Say: func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }})
	if o.err != nil || !o.r.Confirmed {
		t.Fatalf("%v %+v", o.err, o.r)
	}
	all := strings.Join(lines, "\n") + "\n" + o.r.Note
	for _, bad := range []string{"Policy.", "did nothing (BMC did nothing", " of 3)"} {
		if strings.Contains(all, bad) {
			t.Errorf("progress says %q:\n%s", bad, all)
		}
	}
	if !strings.Contains(o.r.Note, "--unassisted-settle-window") {
		t.Errorf("note %q does not name the flag", o.r.Note)
	}
}
