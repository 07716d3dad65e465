package machine

import (
	"fmt"
	"time"
)

// The BMC's host watchdog and the log it writes, as the machine's own
// behaviour: what a BMC records when the host's OS stops petting its
// watchdog, panics, or boots. The Redfish mock renders them per vendor
// (HostWatchdogTimer, LogServices); readers in bmc/redfish and bmc/ipmi turn
// them into typed evidence. Nothing here decides anything.
//
// The model follows the IPMI 2.0 watchdog (§27: Set/Reset/Get Watchdog
// Timer; timer use, timeout action, expiration flags; the "Watchdog 2"
// sensor, type 23h) and what Linux's ipmi_watchdog driver does around it
// (drivers/char/ipmi/ipmi_watchdog.c): the node-side petter arms it with
// timer use SMS/OS and keeps resetting it; a reboot notifier re-arms it for
// 120 s so that a hung reboot is caught, and disables it on power-off; a
// panic notifier stretches it to 255 s so that a dump can be written. A BMC
// stops the timer when the host loses power (OpenBMC's phosphor-watchdog
// disables it when the host state goes Off).

// TimerUse is the IPMI watchdog timer use (Set Watchdog Timer byte 1
// [2:0]): who armed the timer. Only an SMS/OS expiry says the running OS
// stopped petting; BIOS and OS-load uses expire on a machine that is
// booting.
type TimerUse uint8

const (
	TimerUseNone     TimerUse = 0
	TimerUseBIOSFRB2 TimerUse = 1
	TimerUseBIOSPOST TimerUse = 2
	TimerUseOSLoad   TimerUse = 3
	TimerUseSMSOS    TimerUse = 4
	TimerUseOEM      TimerUse = 5
)

var timerUseNames = [...]string{"none", "BIOS FRB2", "BIOS/POST", "OS Load", "SMS/OS", "OEM"}

func (u TimerUse) String() string {
	if int(u) < len(timerUseNames) {
		return timerUseNames[u]
	}
	return fmt.Sprintf("reserved(%d)", uint8(u))
}

// WatchdogAction is the IPMI timeout action (Set Watchdog Timer byte 2
// [2:0]), which is also the Watchdog 2 sensor's event offset.
type WatchdogAction uint8

const (
	WatchdogNoAction   WatchdogAction = 0
	WatchdogHardReset  WatchdogAction = 1
	WatchdogPowerDown  WatchdogAction = 2
	WatchdogPowerCycle WatchdogAction = 3
)

// Redfish is the action as ComputerSystem.HostWatchdogTimer.TimeoutAction
// names it (DSP0268 WatchdogTimeoutActions).
func (a WatchdogAction) Redfish() string {
	switch a {
	case WatchdogNoAction:
		return "None"
	case WatchdogHardReset:
		return "ResetSystem"
	case WatchdogPowerDown:
		return "PowerDown"
	case WatchdogPowerCycle:
		return "PowerCycle"
	}
	return "OEM"
}

func (a WatchdogAction) String() string {
	switch a {
	case WatchdogNoAction:
		return "timer expired (no action)"
	case WatchdogHardReset:
		return "hard reset"
	case WatchdogPowerDown:
		return "power down"
	case WatchdogPowerCycle:
		return "power cycle"
	}
	return fmt.Sprintf("reserved(%d)", uint8(a))
}

// Kernel constants of ipmi_watchdog that shape what a BMC sees.
const (
	// RebootWatchdogTimeout: on a reboot the driver re-arms a running
	// watchdog for 120 s, so a reboot that hangs is reset; with a POST
	// longer than that, the SMS/OS timer expires on a machine that is
	// booting normally.
	RebootWatchdogTimeout = 120 * time.Second
	// PanicWatchdogTimeout: on a panic the driver stretches a running
	// watchdog to 255 s, the most the timer holds, for a dump to be written.
	PanicWatchdogTimeout = 255 * time.Second
)

// LogKind is what a log entry records.
type LogKind uint8

const (
	// LogWatchdogExpired: the Watchdog 2 sensor (type 23h) asserted; the
	// offset is the action taken.
	LogWatchdogExpired LogKind = iota + 1
	// LogOSCriticalStop: an "OS Stop/Shutdown" event (sensor type 20h,
	// offset 01h, run-time critical stop): Linux sends it on a panic when
	// ipmi_msghandler's panic_op is "event".
	LogOSCriticalStop
	// LogSystemBoot: "System Boot/Restart Initiated" (sensor type 1Dh): the
	// machine started booting (power-up or restart). The boot marker.
	LogSystemBoot
)

func (k LogKind) String() string {
	switch k {
	case LogWatchdogExpired:
		return "watchdog-expired"
	case LogOSCriticalStop:
		return "os-critical-stop"
	case LogSystemBoot:
		return "system-boot"
	}
	return "unknown"
}

// LogEntry is one record the BMC logged about the machine.
type LogEntry struct {
	// ID increases by one per entry, per machine (IPMI SEL record IDs and
	// Redfish LogEntry Ids both increase on the BMCs we model).
	ID   int
	At   time.Time
	Kind LogKind
	// Use and Action: for LogWatchdogExpired.
	Use    TimerUse
	Action WatchdogAction
	// Boot is the machine's boot count when the entry was logged (see
	// Snapshot.Boots).
	Boot int
	// Origin names the system the entry concerns when a log shared by
	// several systems holds another's ("" = this machine).
	Origin string
}

// maxLogEntries bounds the log: BMC SELs hold a few hundred to a few
// thousand entries; tests need a few.
const maxLogEntries = 256

// WatchdogStatus is the watchdog as a BMC reports it (IPMI Get Watchdog
// Timer; Redfish HostWatchdogTimer).
type WatchdogStatus struct {
	// Armed: the timer is counting down (IPMI "timer is running").
	Armed bool
	// Configured: someone set the timer up (Set Watchdog Timer) since the
	// BMC started or the host was last powered down: Redfish
	// HostWatchdogTimer.FunctionEnabled.
	Configured bool
	Use        TimerUse
	Action     WatchdogAction
	Timeout    time.Duration
	// Remaining is the present countdown (the full timeout while it is
	// petted; 0 when not armed).
	Remaining time.Duration
	// Expired is the IPMI timer use expiration flags: bit (1 << use) is set
	// when a timer of that use expired, until cleared.
	Expired uint8
	// Petted: a petter on a running OS keeps resetting it.
	Petted bool
}

type watchdog struct {
	configured bool
	armed      bool
	petter     bool // the node-side petter process runs
	petted     bool // ... and its OS runs, so the deadline keeps moving
	use        TimerUse
	action     WatchdogAction
	timeout    time.Duration
	deadline   time.Time // when armed and not petted
	expired    uint8
}

// StartPetter is the node-side component starting on the machine's OS: it
// arms the watchdog (timer use SMS/OS, the given timeout and action) and
// keeps resetting it while the OS runs. The OS must be running.
func (m *Machine) StartPetter(now time.Time, timeout time.Duration, action WatchdogAction) error {
	m.advance(now)
	if m.phase != phaseOn || m.osHung {
		return fmt.Errorf("%w: a petter needs a running OS; the machine reads %s (hung %v)", ErrNotApplicable, m.phase.powerState(), m.osHung)
	}
	if timeout <= 0 || timeout > 6553500*time.Millisecond {
		return fmt.Errorf("%w: watchdog timeout %v: want 100ms..6553.5s (IPMI counts tenths of a second in 16 bits)", ErrInvalidInput, timeout)
	}
	if action > WatchdogPowerCycle {
		return fmt.Errorf("%w: watchdog action %d", ErrInvalidInput, action)
	}
	m.wd = watchdog{configured: true, armed: true, petter: true, petted: true,
		use: TimerUseSMSOS, action: action, timeout: timeout, expired: m.wd.expired}
	return nil
}

// StopPetter stops the petter. With disarm (it stopped on purpose and
// wrote the magic close 'V' to /dev/watchdog) the driver disables the
// timer; without (SIGKILL, an evicted pod, the OOM killer) the timer runs
// on and expires one timeout later on a machine that is alive.
func (m *Machine) StopPetter(now time.Time, disarm bool) {
	m.advance(now)
	m.wd.petter = false
	if disarm {
		m.wd.armed, m.wd.petted = false, false
		return
	}
	m.unpet(now, 0)
}

// ClearWatchdogFlags clears the expiration flags, as Set Watchdog Timer's
// byte 4 does.
func (m *Machine) ClearWatchdogFlags(now time.Time, mask uint8) {
	m.advance(now)
	m.wd.expired &^= mask
}

// Watchdog reports the watchdog at now.
func (m *Machine) Watchdog(now time.Time) WatchdogStatus {
	m.advance(now)
	st := WatchdogStatus{Armed: m.wd.armed, Configured: m.wd.configured, Use: m.wd.use, Action: m.wd.action,
		Timeout: m.wd.timeout, Expired: m.wd.expired, Petted: m.wd.armed && m.wd.petted}
	switch {
	case m.wd.armed && m.wd.petted:
		st.Remaining = m.wd.timeout
	case m.wd.armed:
		st.Remaining = m.wd.deadline.Sub(now)
	}
	return st
}

// Log returns the BMC's log about the machine, oldest first.
func (m *Machine) Log(now time.Time) []LogEntry {
	m.advance(now)
	return append([]LogEntry(nil), m.log...)
}

// AppendLog adds an entry as the BMC would, stamped at e.At (a test's
// stale entry, a POST expiry) and numbered next. It returns the entry.
func (m *Machine) AppendLog(now time.Time, e LogEntry) LogEntry {
	m.advance(now)
	return m.record(e)
}

func (m *Machine) record(e LogEntry) LogEntry {
	m.logSeq++
	e.ID = m.logSeq
	if e.Boot == 0 {
		e.Boot = m.boots
	}
	m.log = append(m.log, e)
	if len(m.log) > maxLogEntries {
		m.log = append(m.log[:0], m.log[len(m.log)-maxLogEntries:]...)
	}
	return e
}

// unpet: the OS stopped petting at `at` (a hang, a dead petter, a reboot
// or panic notifier that set a new timeout). timeout 0 keeps the armed one.
func (m *Machine) unpet(at time.Time, timeout time.Duration) {
	if !m.wd.armed {
		return
	}
	if timeout > 0 {
		m.wd.timeout = timeout
	}
	if m.wd.petted || timeout > 0 {
		m.wd.deadline = at.Add(m.wd.timeout)
	}
	m.wd.petted = false
}

// repet: the OS runs again with its petter: the next reset restarts the
// timer (Reset Watchdog Timer also restarts an expired one).
func (m *Machine) repet() {
	if m.wd.petter && m.wd.configured {
		m.wd.armed, m.wd.petted = true, true
	}
}

// stopWatchdog: the host lost power (or the BMC reset it): the BMC stops
// the timer; the petter died with the OS.
func (m *Machine) stopWatchdog() {
	m.wd.armed, m.wd.petted, m.wd.petter = false, false, false
}

// watchdogDue reports whether an armed, unpetted timer expires by now.
func (m *Machine) watchdogDue(now time.Time) (time.Time, bool) {
	if m.wd.armed && !m.wd.petted && !now.Before(m.wd.deadline) {
		return m.wd.deadline, true
	}
	return time.Time{}, false
}

// expireWatchdog logs the expiry at `at` and takes the action.
func (m *Machine) expireWatchdog(at time.Time) {
	m.wd.armed = false
	m.wd.expired |= 1 << m.wd.use
	m.record(LogEntry{At: at, Kind: LogWatchdogExpired, Use: m.wd.use, Action: m.wd.action})
	switch m.wd.action {
	case WatchdogNoAction:
	case WatchdogHardReset, WatchdogPowerCycle:
		if m.phase != phaseOff {
			m.enter(phaseRestartOff, at, m.timing.RestartOff)
		}
	case WatchdogPowerDown:
		m.enter(phaseOff, at, 0)
	}
}

// bootStarted is called when the machine starts booting (PoweringOn).
func (m *Machine) bootStarted(at time.Time) {
	m.boots++
	m.lastBoot = at
	m.record(LogEntry{At: at, Kind: LogSystemBoot})
}

// osPanic: a kernel panic. The OS stops (it reads On and OSRunning, and
// nothing answers), the kernel logs an OS Critical Stop through the BMC's
// system interface, and a running watchdog is stretched to 255 s.
func (m *Machine) osPanic(at time.Time) {
	m.osHung = true
	m.record(LogEntry{At: at, Kind: LogOSCriticalStop})
	m.unpet(at, PanicWatchdogTimeout)
}
