package machine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The machine is tested as timelines: each step happens at an offset from
// t0, in order, and readings are checked at exact instants, including the
// last nanosecond before a transition ends.

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// testTiming uses distinct, realistic durations so a wrong one shows.
var testTiming = Timing{
	PowerOn:          45 * time.Second,
	PowerOff:         1 * time.Second,
	GracefulShutdown: 10 * time.Second,
	RestartOff:       3 * time.Second,
}

type step struct {
	at   time.Duration
	desc string
	run  func(m *Machine, now time.Time) error
	// For a reading: the expected state. For an action: the expected error.
	want    *reading
	wantErr error
}

type reading struct {
	Power  PowerState
	Boot   string
	OSHung bool
}

func send(at time.Duration, rt ResetType) step {
	return step{at: at, desc: "send " + string(rt), run: func(m *Machine, now time.Time) error { return m.Reset(now, rt) }}
}

func sendRejected(at time.Duration, rt ResetType, want error) step {
	s := send(at, rt)
	s.wantErr = want
	return s
}

func happen(at time.Duration, ev Event) step {
	return step{at: at, desc: "event " + string(ev), run: func(m *Machine, now time.Time) error { return m.Event(now, ev) }}
}

func happenRejected(at time.Duration, ev Event, want error) step {
	s := happen(at, ev)
	s.wantErr = want
	return s
}

func withBehavior(at time.Duration, f Behavior) step {
	return step{at: at, desc: fmt.Sprintf("set faults %+v", f), run: func(m *Machine, now time.Time) error {
		m.SetBehavior(now, f)
		return nil
	}}
}

func reads(at time.Duration, power PowerState, boot string) step {
	return step{at: at, desc: "read", want: &reading{Power: power, Boot: boot}}
}

func readsHung(at time.Duration, power PowerState, boot string) step {
	return step{at: at, desc: "read", want: &reading{Power: power, Boot: boot, OSHung: true}}
}

const ns = time.Nanosecond

func TestMachineTimelines(t *testing.T) {
	on, off, graceful, dwell := testTiming.PowerOn, testTiming.PowerOff, testTiming.GracefulShutdown, testTiming.RestartOff
	tests := []struct {
		name    string
		initial PowerState
		timing  Timing
		faults  Behavior
		steps   []step
	}{
		{
			name: "On from Off passes through PoweringOn", initial: PowerOff,
			steps: []step{
				reads(0, PowerOff, bootNone),
				send(0, ResetOn),
				reads(0, PowerPoweringOn, bootHardwareInitDone),
				reads(on-ns, PowerPoweringOn, bootHardwareInitDone),
				reads(on, PowerOn, bootOSRunning),
			},
		},
		{
			name: "On when On is a no-op", initial: PowerOn,
			steps: []step{send(0, ResetOn), reads(0, PowerOn, bootOSRunning)},
		},
		{
			name: "On while PoweringOn keeps the original deadline", initial: PowerOff,
			steps: []step{
				send(0, ResetOn),
				send(30*time.Second, ResetOn),
				reads(on-ns, PowerPoweringOn, bootHardwareInitDone),
				reads(on, PowerOn, bootOSRunning),
			},
		},
		{
			name: "On while PoweringOff is a conflict", initial: PowerOn,
			steps: []step{
				send(0, ResetGracefulShutdown),
				sendRejected(ns, ResetOn, ErrInTransition),
				reads(graceful, PowerOff, bootNone),
			},
		},
		{
			name: "On during a restart's Off dwell powers on at once", initial: PowerOn,
			steps: []step{
				send(0, ResetForceRestart),
				send(time.Second, ResetOn),
				reads(time.Second, PowerPoweringOn, bootHardwareInitDone),
				reads(time.Second+on, PowerOn, bootOSRunning),
			},
		},
		{
			name: "ForceOff passes through PoweringOff", initial: PowerOn,
			steps: []step{
				send(0, ResetForceOff),
				reads(0, PowerPoweringOff, bootOSRunning),
				reads(off-ns, PowerPoweringOff, bootOSRunning),
				reads(off, PowerOff, bootNone),
			},
		},
		{
			name: "ForceOff with zero power-off time is Off at once", initial: PowerOn,
			timing: Timing{PowerOn: on},
			steps:  []step{send(0, ResetForceOff), reads(0, PowerOff, bootNone)},
		},
		{
			name: "ForceOff when Off is accepted", initial: PowerOff,
			steps: []step{send(0, ResetForceOff), reads(0, PowerOff, bootNone)},
		},
		{
			name: "ForceOff when Off conflicts with conflictWhenOff", initial: PowerOff,
			faults: Behavior{ConflictWhenOff: true},
			steps:  []step{sendRejected(0, ResetForceOff, ErrAlreadyOff), reads(0, PowerOff, bootNone)},
		},
		{
			name: "ForceOff while PoweringOn powers off", initial: PowerOff,
			steps: []step{
				send(0, ResetOn),
				send(10*time.Second, ResetForceOff),
				reads(10*time.Second, PowerPoweringOff, bootHardwareInitDone),
				reads(10*time.Second+off, PowerOff, bootNone),
				reads(time.Hour, PowerOff, bootNone),
			},
		},
		{
			name: "ForceOff cuts a graceful shutdown short", initial: PowerOn,
			steps: []step{
				send(0, ResetGracefulShutdown),
				send(2*time.Second, ResetForceOff),
				reads(2*time.Second+off-ns, PowerPoweringOff, bootOSRunning),
				reads(2*time.Second+off, PowerOff, bootNone),
			},
		},
		{
			name: "ForceOff during a restart's Off dwell keeps it off", initial: PowerOn,
			steps: []step{
				send(0, ResetForceRestart),
				send(time.Second, ResetForceOff),
				reads(time.Hour, PowerOff, bootNone),
			},
		},
		{
			name: "GracefulShutdown takes the graceful time", initial: PowerOn,
			steps: []step{
				send(0, ResetGracefulShutdown),
				reads(graceful-ns, PowerPoweringOff, bootOSRunning),
				reads(graceful, PowerOff, bootNone),
			},
		},
		{
			name: "GracefulShutdown is ignored by a hung OS", initial: PowerOn,
			steps: []step{
				happen(0, EventOSHang),
				send(ns, ResetGracefulShutdown),
				readsHung(time.Hour, PowerOn, bootOSRunning),
			},
		},
		{
			name: "GracefulShutdown works again after os-recover", initial: PowerOn,
			steps: []step{
				happen(0, EventOSHang),
				happen(ns, EventOSRecover),
				send(2*ns, ResetGracefulShutdown),
				reads(2*ns+graceful, PowerOff, bootNone),
			},
		},
		{
			name: "GracefulShutdown while PoweringOn is ignored: no OS yet", initial: PowerOff,
			steps: []step{
				send(0, ResetOn),
				send(ns, ResetGracefulShutdown),
				reads(on, PowerOn, bootOSRunning),
			},
		},
		{
			name: "GracefulShutdown when Off conflicts with conflictWhenOff", initial: PowerOff,
			faults: Behavior{ConflictWhenOff: true},
			steps:  []step{sendRejected(0, ResetGracefulShutdown, ErrAlreadyOff)},
		},
		{
			name: "ForceRestart reads Off, then PoweringOn, then On", initial: PowerOn,
			steps: []step{
				send(0, ResetForceRestart),
				reads(0, PowerOff, bootNone),
				reads(dwell-ns, PowerOff, bootNone),
				reads(dwell, PowerPoweringOn, bootHardwareInitDone),
				reads(dwell+on-ns, PowerPoweringOn, bootHardwareInitDone),
				reads(dwell+on, PowerOn, bootOSRunning),
			},
		},
		{
			name: "PowerCycle behaves like ForceRestart", initial: PowerOn,
			steps: []step{
				send(0, ResetPowerCycle),
				reads(0, PowerOff, bootNone),
				reads(dwell, PowerPoweringOn, bootHardwareInitDone),
				reads(dwell+on, PowerOn, bootOSRunning),
			},
		},
		{
			name: "PowerCycle when Off conflicts", initial: PowerOff,
			steps: []step{sendRejected(0, ResetPowerCycle, ErrAlreadyOff), reads(time.Hour, PowerOff, bootNone)},
		},
		{
			name: "ForceRestart during its own Off dwell conflicts: it reads Off", initial: PowerOn,
			steps: []step{send(0, ResetForceRestart), sendRejected(ns, ResetForceRestart, ErrAlreadyOff)},
		},
		{
			name: "ForceRestart brings a hung OS back", initial: PowerOn,
			steps: []step{
				happen(0, EventOSHang),
				send(ns, ResetForceRestart),
				reads(ns+dwell+on, PowerOn, bootOSRunning),
				send(ns+dwell+on, ResetGracefulShutdown),
				reads(ns+dwell+on+graceful, PowerOff, bootNone),
			},
		},
		{
			name: "GracefulRestart restarts a running OS", initial: PowerOn,
			steps: []step{
				send(0, ResetGracefulRestart),
				reads(0, PowerOff, bootNone),
				reads(dwell+on, PowerOn, bootOSRunning),
			},
		},
		{
			name: "GracefulRestart is ignored by a hung OS", initial: PowerOn,
			steps: []step{
				happen(0, EventOSHang),
				send(0, ResetGracefulRestart),
				readsHung(time.Hour, PowerOn, bootOSRunning),
			},
		},
		{
			name: "GracefulRestart when Off conflicts", initial: PowerOff,
			steps: []step{sendRejected(0, ResetGracefulRestart, ErrAlreadyOff)},
		},
		{
			name: "Nmi changes nothing", initial: PowerOn,
			steps: []step{send(0, ResetNmi), reads(time.Hour, PowerOn, bootOSRunning)},
		},
		{
			name: "a lying BMC accepts ForceOff and changes nothing", initial: PowerOn,
			faults: Behavior{IgnoreCommands: true},
			steps: []step{
				send(0, ResetForceOff),
				send(0, ResetPowerCycle),
				reads(time.Hour, PowerOn, bootOSRunning),
			},
		},
		{
			name: "ignoreDuringTransition drops a ForceOff sent while PoweringOn", initial: PowerOff,
			faults: Behavior{IgnoreDuringTransition: true},
			steps: []step{
				send(0, ResetOn),
				send(ns, ResetForceOff),
				reads(on, PowerOn, bootOSRunning),
				send(on, ResetForceOff), // steady again: obeyed
				reads(on+off, PowerOff, bootNone),
			},
		},
		{
			name: "ignoreDuringTransition drops a command in a restart's Off dwell", initial: PowerOn,
			faults: Behavior{IgnoreDuringTransition: true},
			steps: []step{
				send(0, ResetForceRestart),
				send(ns, ResetForceOff),
				reads(dwell+on, PowerOn, bootOSRunning),
			},
		},
		{
			name: "powerOnFails falls back to Off at the end of the power-on time", initial: PowerOff,
			faults: Behavior{PowerOnFails: true},
			steps: []step{
				send(0, ResetOn),
				reads(on-ns, PowerPoweringOn, bootHardwareInitDone),
				reads(on, PowerOff, bootNone),
			},
		},
		{
			name: "powerOnFails makes a restart end Off", initial: PowerOn,
			faults: Behavior{PowerOnFails: true},
			steps: []step{
				send(0, ResetForceRestart),
				reads(dwell, PowerPoweringOn, bootHardwareInitDone),
				reads(dwell+on, PowerOff, bootNone),
			},
		},
		{
			name: "powerOnFails set mid-transition decides how it ends", initial: PowerOff,
			steps: []step{
				send(0, ResetOn),
				withBehavior(10*time.Second, Behavior{PowerOnFails: true}),
				reads(on, PowerOff, bootNone),
			},
		},
		{
			name: "a fault cleared after the transition ended does not rewrite history", initial: PowerOff,
			faults: Behavior{PowerOnFails: true},
			steps: []step{
				send(0, ResetOn),
				withBehavior(time.Hour, Behavior{}),
				reads(time.Hour, PowerOff, bootNone),
			},
		},
		{
			name: "a slow power-on of 45 s and more is possible", initial: PowerOff,
			timing: Timing{PowerOn: 10 * time.Minute},
			steps: []step{
				send(0, ResetOn),
				reads(10*time.Minute-ns, PowerPoweringOn, bootHardwareInitDone),
				reads(10*time.Minute, PowerOn, bootOSRunning),
			},
		},
		{
			name: "power-loss turns an On system Off at once", initial: PowerOn,
			steps: []step{happen(0, EventPowerLoss), reads(0, PowerOff, bootNone)},
		},
		{
			name: "power-loss abandons a restart", initial: PowerOn,
			steps: []step{
				send(0, ResetPowerCycle),
				happen(dwell+ns, EventPowerLoss),
				reads(time.Hour, PowerOff, bootNone),
			},
		},
		{
			name: "power-restore powers an Off system on", initial: PowerOn,
			steps: []step{
				happen(0, EventPowerLoss),
				happen(time.Minute, EventPowerRestore),
				reads(time.Minute, PowerPoweringOn, bootHardwareInitDone),
				reads(time.Minute+on, PowerOn, bootOSRunning),
			},
		},
		{
			name: "power-restore needs a system that is Off", initial: PowerOn,
			steps: []step{
				happenRejected(0, EventPowerRestore, ErrNotApplicable),
				send(0, ResetForceRestart),
				happenRejected(ns, EventPowerRestore, ErrNotApplicable),
			},
		},
		{
			name: "os-hang keeps reading On and OSRunning", initial: PowerOn,
			steps: []step{happen(0, EventOSHang), readsHung(time.Hour, PowerOn, bootOSRunning)},
		},
		{
			name: "os-hang needs a system that is On", initial: PowerOff,
			steps: []step{happenRejected(0, EventOSHang, ErrNotApplicable)},
		},
		{
			name: "ForceOff of a hung OS works", initial: PowerOn,
			steps: []step{
				happen(0, EventOSHang),
				send(ns, ResetForceOff),
				reads(ns+off, PowerOff, bootNone),
				send(time.Minute, ResetOn),
				reads(time.Minute+on, PowerOn, bootOSRunning), // a fresh boot: not hung
			},
		},
		{
			name: "os-reboot reads Off, PoweringOn, On", initial: PowerOn,
			steps: []step{
				happen(0, EventOSReboot),
				reads(0, PowerOff, bootNone),
				reads(dwell, PowerPoweringOn, bootHardwareInitDone),
				reads(dwell+on, PowerOn, bootOSRunning),
			},
		},
		{
			name: "os-reboot needs a system that is On", initial: PowerOff,
			steps: []step{happenRejected(0, EventOSReboot, ErrNotApplicable)},
		},
		{
			name: "an unknown event is invalid input", initial: PowerOn,
			steps: []step{happenRejected(0, Event("meteor-strike"), ErrInvalidInput)},
		},
		{
			name: "a first read long after a restart replays every transition", initial: PowerOn,
			steps: []step{send(0, ResetForceRestart), reads(24*time.Hour, PowerOn, bootOSRunning)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			timing := tt.timing
			if timing == (Timing{}) {
				timing = testTiming
			}
			m := New(t0, tt.initial, timing, tt.faults)
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				if s.run != nil {
					err := s.run(&m, now)
					if !errors.Is(err, s.wantErr) || (err == nil) != (s.wantErr == nil) {
						t.Fatalf("step %d (%s at +%v): error %v, want %v", i, s.desc, s.at, err, s.wantErr)
					}
				}
				if s.want != nil {
					snap := m.Read(now)
					got := reading{Power: snap.Power, Boot: snap.BootState, OSHung: snap.OSHung}
					if diff := cmp.Diff(*s.want, got); diff != "" {
						t.Fatalf("step %d (%s at +%v) (-want +got):\n%s", i, s.desc, s.at, diff)
					}
				}
			}
		})
	}
}

func TestMachineBootProgressTimeIsWhenTheStateWasEntered(t *testing.T) {
	m := New(t0, PowerOn, testTiming, Behavior{})
	if err := m.Reset(t0, ResetForceRestart); err != nil {
		t.Fatal(err)
	}
	// Read only once, a day later: the recorded time is still exact.
	snap := m.Read(t0.Add(24 * time.Hour))
	want := t0.Add(testTiming.RestartOff + testTiming.PowerOn)
	if snap.BootState != bootOSRunning || !snap.BootSince.Equal(want) {
		t.Errorf("BootProgress = %s since %v, want %s since %v", snap.BootState, snap.BootSince, bootOSRunning, want)
	}
}

func TestMachineSetPower(t *testing.T) {
	tests := []struct {
		name    string
		state   PowerState
		want    PowerState
		wantErr error
	}{
		{name: "Off", state: PowerOff, want: PowerOff},
		{name: "On", state: PowerOn, want: PowerOn},
		{name: "a transition is refused", state: PowerPoweringOn, want: PowerOn, wantErr: ErrInvalidInput},
		{name: "garbage is refused", state: "Paused", want: PowerOn, wantErr: ErrInvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(t0, PowerOn, testTiming, Behavior{})
			err := m.SetPower(t0, tt.state)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("setPower(%q) = %v, want %v", tt.state, err, tt.wantErr)
			}
			if got := m.Read(t0).Power; got != tt.want {
				t.Errorf("power = %s, want %s", got, tt.want)
			}
		})
	}
}

// Every reset type from every phase must leave the machine in a state whose
// reading is one of the four Redfish values, and never panic.
func TestMachineEveryResetFromEveryPhase(t *testing.T) {
	setups := map[string]func(m *Machine){
		"Off":         func(m *Machine) { _ = m.SetPower(t0, PowerOff) },
		"On":          func(m *Machine) {},
		"PoweringOn":  func(m *Machine) { _ = m.SetPower(t0, PowerOff); _ = m.Reset(t0, ResetOn) },
		"PoweringOff": func(m *Machine) { _ = m.Reset(t0, ResetGracefulShutdown) },
		"RestartOff":  func(m *Machine) { _ = m.Reset(t0, ResetPowerCycle) },
		"Hung":        func(m *Machine) { _ = m.Event(t0, EventOSHang) },
	}
	valid := map[PowerState]bool{PowerOn: true, PowerOff: true, PowerPoweringOn: true, PowerPoweringOff: true}
	for name, setup := range setups {
		for _, rt := range AllowedResetTypes() {
			m := New(t0, PowerOn, testTiming, Behavior{})
			setup(&m)
			err := m.Reset(t0.Add(ns), rt)
			if err != nil && !errors.Is(err, ErrAlreadyOff) && !errors.Is(err, ErrInTransition) {
				t.Errorf("%s + %s: unexpected error %v", name, rt, err)
			}
			for _, at := range []time.Duration{ns, time.Second, time.Minute, time.Hour} {
				if p := m.Read(t0.Add(at)).Power; !valid[p] {
					t.Errorf("%s + %s at +%v: reads %q", name, rt, at, p)
				}
			}
			if p := m.Read(t0.Add(time.Hour)).Power; p != PowerOn && p != PowerOff {
				t.Errorf("%s + %s: still %s an hour later", name, rt, p)
			}
		}
	}
}

func TestMachineChangesAreStampedWhenTheyHappenedNotWhenRead(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	timing := Timing{PowerOn: 10 * time.Second, PowerOff: time.Second, RestartOff: 2 * time.Second}
	m := New(t0, PowerOn, timing, Behavior{})
	if got := m.TakeChanges(t0); len(got) != 0 {
		t.Fatalf("a new machine reported changes %v; its initial state is not a change", got)
	}
	if err := m.Reset(t0, ResetForceOff); err != nil {
		t.Fatal(err)
	}
	if next, ok := m.NextChange(); !ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("NextChange() = %v, %v; want the end of PoweringOff at +1s", next, ok)
	}
	if err := m.Event(t0.Add(5*time.Second), EventPowerRestore); err != nil {
		t.Fatal(err)
	}
	if err := m.Event(t0.Add(20*time.Second), EventOSReboot); err != nil {
		t.Fatal(err)
	}
	// Nobody read the machine in between: the log still has every change,
	// each at the instant it happened.
	got := m.TakeChanges(t0.Add(time.Minute))
	want := []Change{
		{At: t0, From: PowerOn, To: PowerPoweringOff},
		{At: t0.Add(time.Second), From: PowerPoweringOff, To: PowerOff},
		{At: t0.Add(5 * time.Second), From: PowerOff, To: PowerPoweringOn},
		{At: t0.Add(15 * time.Second), From: PowerPoweringOn, To: PowerOn},
		{At: t0.Add(20 * time.Second), From: PowerOn, To: PowerOff, Restart: true},
		{At: t0.Add(22 * time.Second), From: PowerOff, To: PowerPoweringOn},
		{At: t0.Add(32 * time.Second), From: PowerPoweringOn, To: PowerOn},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TakeChanges (-want +got):\n%s", diff)
	}
	if got := m.TakeChanges(t0.Add(time.Minute)); len(got) != 0 {
		t.Errorf("a second TakeChanges returned %v; changes are handed out once", got)
	}
	if _, ok := m.NextChange(); ok {
		t.Errorf("NextChange reported a transition on a machine that is On")
	}
}

func TestMachineChangeLogIsBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := New(t0, PowerOn, Timing{}, Behavior{})
	for i := 0; i < 100; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		if i%2 == 0 {
			_ = m.SetPower(at, PowerOff)
		} else {
			_ = m.SetPower(at, PowerOn)
		}
	}
	got := m.TakeChanges(t0.Add(time.Hour))
	if len(got) != maxChanges {
		t.Fatalf("%d changes kept; want the last %d", len(got), maxChanges)
	}
	if last := got[len(got)-1]; !last.At.Equal(t0.Add(99 * time.Second)) {
		t.Errorf("the newest change kept is at %v; want the last one (+99s)", last.At)
	}
}
