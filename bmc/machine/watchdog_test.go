package machine

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// wdTiming: a 6-minute POST (a server with much memory) and a 5 s dwell.
var wdTiming = Timing{PowerOn: 6 * time.Minute, PowerOff: time.Second, GracefulShutdown: 10 * time.Second, RestartOff: 5 * time.Second}

// wdEntry is a log entry without its bookkeeping, for comparisons.
type wdEntry struct {
	At     time.Duration // after t0
	Kind   LogKind
	Use    TimerUse
	Action WatchdogAction
	Boot   int
}

func entries(log []LogEntry) []wdEntry {
	var out []wdEntry
	for _, e := range log {
		out = append(out, wdEntry{At: e.At.Sub(t0), Kind: e.Kind, Use: e.Use, Action: e.Action, Boot: e.Boot})
	}
	return out
}

func TestWatchdogTimelines(t *testing.T) {
	const timeout = 30 * time.Second
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name   string
		action WatchdogAction
		run    func(m *Machine) // after the petter started at t0
		readAt time.Duration
		want   []wdEntry
		// The machine at readAt.
		wantPower PowerState
		wantArmed bool
		wantFlags uint8
	}{
		{
			name: "a hang stops the petting: the timer expires one timeout later and the machine stays hung",
			run:  func(m *Machine) { _ = m.Event(at(10*time.Second), EventOSHang) },
			// One nanosecond before and at the expiry.
			readAt:    10*time.Second + timeout,
			want:      []wdEntry{{At: 40 * time.Second, Kind: LogWatchdogExpired, Use: TimerUseSMSOS, Action: WatchdogNoAction, Boot: 1}},
			wantPower: PowerOn, wantFlags: 1 << TimerUseSMSOS,
		},
		{
			name:      "a petter that stops on purpose disarms: nothing ever expires",
			run:       func(m *Machine) { m.StopPetter(at(10*time.Second), true) },
			readAt:    time.Hour,
			wantPower: PowerOn,
		},
		{
			name:      "an evicted petter (no magic close) lets the timer expire on a machine that runs",
			run:       func(m *Machine) { m.StopPetter(at(10*time.Second), false) },
			readAt:    time.Hour,
			want:      []wdEntry{{At: 40 * time.Second, Kind: LogWatchdogExpired, Use: TimerUseSMSOS, Boot: 1}},
			wantPower: PowerOn, wantFlags: 1 << TimerUseSMSOS,
		},
		{
			name: "an OS reboot re-arms for 120 s: with a 6-minute POST the SMS/OS timer expires while the machine boots",
			run:  func(m *Machine) { _ = m.Event(at(10*time.Second), EventOSReboot) },
			// The restart dwell (5 s), then PoweringOn: boot 2 from +15 s;
			// the expiry at +130 s lands in it.
			readAt: 3 * time.Minute,
			want: []wdEntry{
				{At: 15 * time.Second, Kind: LogSystemBoot, Boot: 2},
				{At: 130 * time.Second, Kind: LogWatchdogExpired, Use: TimerUseSMSOS, Boot: 2},
			},
			wantPower: PowerPoweringOn, wantFlags: 1 << TimerUseSMSOS,
		},
		{
			name:   "ResetSystem: the expiry resets the machine, and its entry is from the boot before",
			action: WatchdogHardReset,
			run:    func(m *Machine) { _ = m.Event(at(10*time.Second), EventOSHang) },
			readAt: 40*time.Second + 5*time.Second + 6*time.Minute,
			want: []wdEntry{
				{At: 40 * time.Second, Kind: LogWatchdogExpired, Use: TimerUseSMSOS, Action: WatchdogHardReset, Boot: 1},
				{At: 45 * time.Second, Kind: LogSystemBoot, Boot: 2},
			},
			wantPower: PowerOn, wantFlags: 1 << TimerUseSMSOS,
		},
		{
			name:      "PowerDown: the BMC powers the hung machine off itself",
			action:    WatchdogPowerDown,
			run:       func(m *Machine) { _ = m.Event(at(10*time.Second), EventOSHang) },
			readAt:    time.Minute,
			want:      []wdEntry{{At: 40 * time.Second, Kind: LogWatchdogExpired, Use: TimerUseSMSOS, Action: WatchdogPowerDown, Boot: 1}},
			wantPower: PowerOff, wantFlags: 1 << TimerUseSMSOS,
		},
		{
			name:      "a power loss stops the timer with the host",
			run:       func(m *Machine) { _ = m.Event(at(10*time.Second), EventPowerLoss) },
			readAt:    time.Hour,
			wantPower: PowerOff,
		},
		{
			name:   "a panic logs an OS Critical Stop at once and stretches the timer to 255 s",
			run:    func(m *Machine) { _ = m.Event(at(10*time.Second), EventOSPanic) },
			readAt: 10*time.Second + PanicWatchdogTimeout,
			want: []wdEntry{
				{At: 10 * time.Second, Kind: LogOSCriticalStop, Boot: 1},
				{At: 10*time.Second + PanicWatchdogTimeout, Kind: LogWatchdogExpired, Use: TimerUseSMSOS, Boot: 1},
			},
			wantPower: PowerOn, wantFlags: 1 << TimerUseSMSOS,
		},
		{
			name: "a hung OS that recovers is petted again: nothing expires",
			run: func(m *Machine) {
				_ = m.Event(at(10*time.Second), EventOSHang)
				_ = m.Event(at(20*time.Second), EventOSRecover)
			},
			readAt:    time.Hour,
			wantPower: PowerOn, wantArmed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(t0, PowerOn, wdTiming, Behavior{})
			if err := m.StartPetter(t0, timeout, tt.action); err != nil {
				t.Fatal(err)
			}
			tt.run(&m)
			if len(tt.want) > 0 {
				// One nanosecond before the last entry, it is not there yet.
				last := tt.want[len(tt.want)-1]
				if got := entries(m.Log(t0.Add(last.At - time.Nanosecond))); len(got) != len(tt.want)-1 {
					t.Errorf("a nanosecond before %v: %d entries, want %d: %+v", last.At, len(got), len(tt.want)-1, got)
				}
			}
			got := entries(m.Log(at(tt.readAt)))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("log (-want +got):\n%s", diff)
			}
			if p := m.Read(at(tt.readAt)).Power; p != tt.wantPower {
				t.Errorf("power %s, want %s", p, tt.wantPower)
			}
			st := m.Watchdog(at(tt.readAt))
			if st.Armed != tt.wantArmed || st.Expired != tt.wantFlags {
				t.Errorf("watchdog %+v, want armed %v flags %#x", st, tt.wantArmed, tt.wantFlags)
			}
		})
	}
}

func TestWatchdogIDsIncreaseAndLogIsBounded(t *testing.T) {
	m := New(t0, PowerOn, Timing{}, Behavior{})
	for i := range maxLogEntries + 10 {
		m.AppendLog(t0, LogEntry{At: t0.Add(time.Duration(i) * time.Second), Kind: LogWatchdogExpired, Use: TimerUseBIOSPOST})
	}
	log := m.Log(t0)
	if len(log) != maxLogEntries || log[0].ID != 11 || log[len(log)-1].ID != maxLogEntries+10 {
		t.Errorf("log of %d entries from ID %d to %d; want %d from 11", len(log), log[0].ID, log[len(log)-1].ID, maxLogEntries)
	}
}

func TestPetterNeedsARunningOS(t *testing.T) {
	m := New(t0, PowerOff, Timing{}, Behavior{})
	if err := m.StartPetter(t0, time.Minute, WatchdogNoAction); !errors.Is(err, ErrNotApplicable) {
		t.Errorf("petter on an off machine: %v, want ErrNotApplicable", err)
	}
	m = New(t0, PowerOn, Timing{}, Behavior{})
	if err := m.StartPetter(t0, 0, WatchdogNoAction); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("zero timeout: %v, want ErrInvalidInput", err)
	}
}

func TestNMIPanicsOnlyAKernelSetUpForIt(t *testing.T) {
	m := New(t0, PowerOn, Timing{}, Behavior{})
	if err := m.Reset(t0, ResetNmi); err != nil {
		t.Fatal(err)
	}
	if s := m.Read(t0); s.OSHung || s.NMIs != 1 || len(m.Log(t0)) != 0 {
		t.Errorf("default kernel after an NMI: %+v, log %v; want running, 1 NMI, nothing logged", s, m.Log(t0))
	}
	m.SetPanicOnNMI(t0, true)
	if err := m.Reset(t0.Add(time.Second), ResetNmi); err != nil {
		t.Fatal(err)
	}
	s := m.Read(t0.Add(time.Second))
	if !s.OSHung || s.Power != PowerOn || s.NMIs != 2 {
		t.Errorf("kdump kernel after an NMI: %+v; want hung (panicked), On, 2 NMIs", s)
	}
	if got := entries(m.Log(t0.Add(time.Second))); len(got) != 1 || got[0].Kind != LogOSCriticalStop {
		t.Errorf("log %+v, want one OS Critical Stop", got)
	}
}

func TestBootsCountPowerOns(t *testing.T) {
	m := New(t0, PowerOff, Timing{PowerOn: 10 * time.Second}, Behavior{})
	if err := m.Event(t0, EventPowerRestore); err != nil {
		t.Fatal(err)
	}
	s := m.Read(t0.Add(time.Minute))
	if s.Boots != 1 || !s.LastBoot.Equal(t0) {
		t.Errorf("after a power-on: boots %d since %v; want 1 since t0", s.Boots, s.LastBoot)
	}
	if err := m.SetPower(t0.Add(2*time.Minute), PowerOff); err != nil {
		t.Fatal(err)
	}
	if err := m.SetPower(t0.Add(3*time.Minute), PowerOn); err != nil {
		t.Fatal(err)
	}
	if s := m.Read(t0.Add(3 * time.Minute)); s.Boots != 2 || !s.LastBoot.Equal(t0.Add(3*time.Minute)) {
		t.Errorf("set On: boots %d since %v; want 2", s.Boots, s.LastBoot)
	}
}
