package machine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// PowerState is a ComputerSystem's Redfish PowerState as the machine reports it.
type PowerState string

// The power states a machine reports. Redfish also defines Paused, which no
// fencing-relevant machine reaches, so a machine never reports it.
const (
	PowerOn          PowerState = "On"
	PowerOff         PowerState = "Off"
	PowerPoweringOn  PowerState = "PoweringOn"
	PowerPoweringOff PowerState = "PoweringOff"
)

// ResetType is the ResetType parameter of the ComputerSystem.Reset action.
type ResetType string

// The reset types a machine understands. AllowedResetTypes are the ones a
// generic BMC advertises, in the order of ResetType@Redfish.AllowableValues;
// ForceOn and PushPowerButton are left out of that list on purpose (many
// real BMCs do not offer them, and clients must cope) but understood, for
// the vendor profiles that do offer them.
const (
	ResetOn               ResetType = "On"
	ResetForceOff         ResetType = "ForceOff"
	ResetGracefulShutdown ResetType = "GracefulShutdown"
	ResetForceRestart     ResetType = "ForceRestart"
	ResetGracefulRestart  ResetType = "GracefulRestart"
	ResetPowerCycle       ResetType = "PowerCycle"
	ResetNmi              ResetType = "Nmi"
	ResetForceOn          ResetType = "ForceOn"
	ResetPushPowerButton  ResetType = "PushPowerButton"
)

// AllowedResetTypes lists the ResetTypes a generic machine advertises.
func AllowedResetTypes() []ResetType {
	return []ResetType{
		ResetOn, ResetForceOff, ResetGracefulShutdown, ResetForceRestart,
		ResetGracefulRestart, ResetPowerCycle, ResetNmi,
	}
}

// KnownResetTypes lists every ResetType a machine understands.
func KnownResetTypes() []ResetType {
	return append(AllowedResetTypes(), ResetForceOn, ResetPushPowerButton)
}

// Valid reports whether rt is one the machine understands.
func (rt ResetType) Valid() bool {
	for _, allowed := range KnownResetTypes() {
		if rt == allowed {
			return true
		}
	}
	return false
}

// Event is something that happens to the machine itself rather than through
// its BMC: the kind of failure a fencing agent has to detect and survive.
type Event string

// Machine events. See Machine.Event for what each one does.
const (
	// EventPowerLoss cuts the power: the system reads Off at once, with no
	// PoweringOff in between, and any restart in progress is abandoned.
	EventPowerLoss Event = "power-loss"
	// EventPowerRestore brings power back to a system that is Off; it powers
	// on as if the BMC's "restore power" policy were "always on".
	EventPowerRestore Event = "power-restore"
	// EventOSHang freezes the OS of a system that is On. The system still
	// reads On and OSRunning (a hung kernel does), but graceful commands are
	// silently ignored because nothing is left to act on the ACPI request.
	EventOSHang Event = "os-hang"
	// EventOSRecover unfreezes a hung OS.
	EventOSRecover Event = "os-recover"
	// EventOSReboot makes the OS of a system that is On reboot by itself
	// (a panic with reboot-on-panic, a watchdog): it reads Off for the
	// restart off time, then PoweringOn, then On. A watchdog the OS's
	// petter armed is re-armed for 120 s first, as Linux's ipmi_watchdog
	// does on reboot.
	EventOSReboot Event = "os-reboot"
	// EventOSPanic: the kernel of a system that is On panics. It keeps
	// reading On and OSRunning, nothing answers on it, the BMC logs an OS
	// Critical Stop, and an armed watchdog is stretched to 255 s.
	EventOSPanic Event = "os-panic"
)

// Events lists every machine event.
func Events() []Event {
	return []Event{EventPowerLoss, EventPowerRestore, EventOSHang, EventOSRecover, EventOSReboot, EventOSPanic}
}

// Timing holds how long a system's power transitions take. The zero Timing
// makes every transition instant, which is what most unit tests want;
// DefaultTiming gives values that let a poller see the intermediate states.
type Timing struct {
	// PowerOn is how long a system reads PoweringOn before it reads On.
	// Real servers take 45 s or more (POST, memory training); a fencing
	// agent must wait that out, so values this large must work.
	PowerOn time.Duration
	// PowerOff is how long a ForceOff reads PoweringOff. BMCs cut power at
	// once and usually report Off within a second; zero is realistic.
	PowerOff time.Duration
	// GracefulShutdown is how long the OS takes to shut down after a
	// GracefulShutdown, reading PoweringOff meanwhile.
	GracefulShutdown time.Duration
	// RestartOff is how long a restart (ForceRestart, PowerCycle,
	// GracefulRestart, an OS reboot) reads Off before PoweringOn. This is the
	// misleading Off reading that must never be taken as proof of a fence.
	RestartOff time.Duration
}

// DefaultTiming returns the timing the redfish-mock binary uses unless told
// otherwise: short enough for demos and end-to-end tests, long enough that a
// client polling every second or two sees each intermediate state.
func DefaultTiming() Timing {
	return Timing{
		// Several 1-2 s polls see PoweringOn; a real server would take 45 s+,
		// which --power-on-time reproduces when a test needs it.
		PowerOn: 10 * time.Second,
		// BMCs report Off about a second after ForceOff.
		PowerOff: 1 * time.Second,
		// An idle Linux host shuts down in a few seconds.
		GracefulShutdown: 5 * time.Second,
		// BMCs hold power off for 1-5 s during a power cycle; 2 s lets a
		// 1 s poller observe the misleading Off.
		RestartOff: 2 * time.Second,
	}
}

// Validate reports every negative duration, naming its field.
func (t Timing) Validate() error {
	var errs []error
	for _, field := range []struct {
		name  string
		value time.Duration
	}{
		{"powerOnTime", t.PowerOn},
		{"powerOffTime", t.PowerOff},
		{"gracefulShutdownTime", t.GracefulShutdown},
		{"restartOffTime", t.RestartOff},
	} {
		if field.value < 0 {
			errs = append(errs, fmt.Errorf("%s: %v is negative; use 0 for an instant transition", field.name, field.value))
		}
	}
	return errors.Join(errs...)
}

// timingJSON is Timing on the wire: durations as strings like "45s".
type timingJSON struct {
	PowerOnTime          Duration `json:"powerOnTime"`
	PowerOffTime         Duration `json:"powerOffTime"`
	GracefulShutdownTime Duration `json:"gracefulShutdownTime"`
	RestartOffTime       Duration `json:"restartOffTime"`
}

// MarshalJSON writes durations as Go duration strings ("45s").
func (t Timing) MarshalJSON() ([]byte, error) {
	return json.Marshal(timingJSON{
		PowerOnTime:          Duration(t.PowerOn),
		PowerOffTime:         Duration(t.PowerOff),
		GracefulShutdownTime: Duration(t.GracefulShutdown),
		RestartOffTime:       Duration(t.RestartOff),
	})
}

// UnmarshalJSON merges the fields present in data into t, so decoding onto
// the defaults overrides only what the document names. Unknown fields are
// errors.
func (t *Timing) UnmarshalJSON(data []byte) error {
	wire := timingJSON{
		PowerOnTime:          Duration(t.PowerOn),
		PowerOffTime:         Duration(t.PowerOff),
		GracefulShutdownTime: Duration(t.GracefulShutdown),
		RestartOffTime:       Duration(t.RestartOff),
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&wire); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON value")
	}
	*t = Timing{
		PowerOn:          time.Duration(wire.PowerOnTime),
		PowerOff:         time.Duration(wire.PowerOffTime),
		GracefulShutdown: time.Duration(wire.GracefulShutdownTime),
		RestartOff:       time.Duration(wire.RestartOffTime),
	}
	return nil
}

// Duration is a time.Duration written as a Go duration string ("1m30s").
// Bare numbers are rejected: nobody can tell whether 30 means seconds or
// nanoseconds.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("want a duration string like \"250ms\" or \"45s\", got %s", shorten(string(data), 40))
	}
	parsed, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration string like \"250ms\" or \"45s\": %w", err)
	}
	*d = Duration(parsed)
	return nil
}

// shorten cuts untrusted input quoted in an error message.
func shorten(s string, max int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Behavior is how a machine's BMC misbehaves in ways that change what a
// Reset does. The zero Behavior is an honest BMC.
type Behavior struct {
	// ConflictWhenOff: ForceOff and GracefulShutdown on a system that is
	// already Off fail with ErrAlreadyOff (a 409), as some BMCs do.
	ConflictWhenOff bool
	// IgnoreCommands: every Reset succeeds and nothing changes (a lying BMC).
	IgnoreCommands bool
	// IgnoreDuringTransition: a Reset sent while PoweringOn, PoweringOff or
	// in a restart's Off dwell succeeds and is ignored.
	IgnoreDuringTransition bool
	// PowerOnFails: PoweringOn falls back to Off at the end of the power-on
	// time (a failed POST).
	PowerOnFails bool
}

// The power state machine of one computer system.
//
// It owns no goroutine and no timer. A transitional phase records when it
// ends; advance(now) replays every phase change due up to now, each one
// starting exactly when the previous one ended. So a thousand idle systems
// cost only their structs, and a fake clock makes every test exact.
//
//	              On              ForceOff / GracefulShutdown
//	  Off ──────────────▶ PoweringOn ──────▶ On ──────────────▶ PoweringOff ──▶ Off
//	   ▲                    │   ▲   (powerOn)     (powerOff / graceful)
//	   └── powerOnFails ────┘   │
//	                            └──── restartOff ◀── ForceRestart / PowerCycle /
//	                                 (reads Off)     GracefulRestart / os-reboot
//
// Every method that reads or changes the machine takes now and advances to
// it first, so a change (a command, an event, a new fault) applies from the
// instant it is made.

// phase is the machine's internal state. It is finer than PowerState: a
// restart's Off dwell reads Off but, unlike Off, ends by itself.
type phase int

const (
	phaseOff         phase = iota // reads Off; stays until told otherwise
	phaseOn                       // reads On; stays until told otherwise
	phasePoweringOn               // reads PoweringOn; ends in On, or Off with powerOnFails
	phasePoweringOff              // reads PoweringOff; ends in Off
	phaseRestartOff               // reads Off; ends in PoweringOn
)

func (p phase) transitional() bool {
	switch p {
	case phasePoweringOn, phasePoweringOff, phaseRestartOff:
		return true
	case phaseOff, phaseOn:
		return false
	}
	return false
}

func (p phase) powerState() PowerState {
	switch p {
	case phaseOn:
		return PowerOn
	case phasePoweringOn:
		return PowerPoweringOn
	case phasePoweringOff:
		return PowerPoweringOff
	case phaseOff, phaseRestartOff:
		return PowerOff
	}
	return PowerOff
}

// Redfish BootProgress.LastState values a machine reports.
const (
	bootNone             = "None"
	bootHardwareInitDone = "SystemHardwareInitializationComplete"
	bootOSRunning        = "OSRunning"
)

// Machine is one system's power and OS state. It is not safe for concurrent
// use; its owner's mutex guards it.
type Machine struct {
	phase phase
	until time.Time // when a transitional phase ends; unused otherwise

	osHung bool

	bootState string    // BootProgress.LastState
	bootSince time.Time // BootProgress.LastStateTime

	timing   Timing
	behavior Behavior

	// changes records the power changes (what a reader would see) for a
	// BMC's event service; bounded, oldest dropped. New leaves it empty:
	// the initial state is not a change.
	changes []Change
	started bool

	// The BMC's host watchdog and log (watchdog.go).
	wd       watchdog
	log      []LogEntry
	logSeq   int
	boots    int       // boots started (PoweringOn, or set On)
	lastBoot time.Time // when the latest boot started
	// panicOnNMI: the host's kernel panics on an NMI (kdump set-up:
	// kernel.unknown_nmi_panic=1); otherwise an NMI changes nothing.
	panicOnNMI bool
	nmis       int
}

// Change is one change of what the machine reads, at the instant it
// happened (a transition that ended while nobody looked is stamped with
// its end, not with the read that found it).
type Change struct {
	At       time.Time
	From, To PowerState
	// Restart: the machine went Off for a restart's off-dwell (a reset,
	// a power cycle, an OS reboot), not for good.
	Restart bool
}

// maxChanges bounds the change log of a machine nobody drains: a BMC's
// event buffer is bounded too (bmcweb keeps 200 events for all systems).
const maxChanges = 64

// New returns a machine in steady state initial (On, or anything else: Off)
// at now.
func New(now time.Time, initial PowerState, timing Timing, behavior Behavior) Machine {
	m := Machine{timing: timing, behavior: behavior}
	if initial == PowerOn {
		m.enter(phaseOn, now, 0)
		// It booted before anyone watched: no boot entry in the log.
		m.log, m.logSeq, m.boots, m.lastBoot = nil, 0, 1, now
	} else {
		m.enter(phaseOff, now, 0)
	}
	m.started = true
	return m
}

// enter switches to phase p at time at. A transitional phase lasts d.
func (m *Machine) enter(p phase, at time.Time, d time.Duration) {
	prev := m.phase
	if from := m.phase.powerState(); m.started && from != p.powerState() {
		if len(m.changes) == maxChanges {
			m.changes = append(m.changes[:0], m.changes[1:]...)
		}
		m.changes = append(m.changes, Change{At: at, From: from, To: p.powerState(), Restart: p == phaseRestartOff})
	}
	m.phase = p
	if p.transitional() {
		m.until = at.Add(d)
	}
	boot := m.bootState
	switch p {
	case phaseOff, phaseRestartOff:
		boot = bootNone
		m.osHung = false // power was removed: whatever hung is gone
	case phasePoweringOn:
		boot = bootHardwareInitDone
		m.osHung = false
	case phaseOn:
		boot = bootOSRunning
	case phasePoweringOff:
		// The OS, if any, is still shutting down: BootProgress stays.
	}
	if boot != m.bootState {
		m.bootState, m.bootSince = boot, at
	}
	// The watchdog follows the host (watchdog.go): power removed or a
	// shutdown stops it; a restart leaves it to whoever restarted.
	switch p {
	case phaseOff, phasePoweringOff:
		m.stopWatchdog()
	case phaseRestartOff:
		m.wd.petter = false
		m.unpet(at, 0)
	case phasePoweringOn:
		m.bootStarted(at)
	case phaseOn:
		if prev == phaseOff || prev == phaseRestartOff {
			m.bootStarted(at) // set On directly, skipping PoweringOn
		}
	}
}

// advance replays every phase change and watchdog expiry due at or before
// now, in time order.
func (m *Machine) advance(now time.Time) {
	for {
		phaseDue := m.phase.transitional() && !now.Before(m.until)
		wdAt, wdDue := m.watchdogDue(now)
		switch {
		case wdDue && (!phaseDue || wdAt.Before(m.until)):
			m.expireWatchdog(wdAt)
		case phaseDue:
			m.endPhase()
		default:
			return
		}
	}
}

// endPhase ends the transitional phase at m.until.
func (m *Machine) endPhase() {
	end := m.until
	switch m.phase {
	case phasePoweringOn:
		if m.behavior.PowerOnFails {
			m.enter(phaseOff, end, 0)
		} else {
			m.enter(phaseOn, end, 0)
		}
	case phasePoweringOff:
		m.enter(phaseOff, end, 0)
	case phaseRestartOff:
		m.enter(phasePoweringOn, end, m.timing.PowerOn)
	case phaseOff, phaseOn:
	}
}

// Errors a Reset can answer with 409 Conflict.
var (
	ErrAlreadyOff   = errors.New("system is Off")
	ErrInTransition = errors.New("system is PoweringOff")
)

// ErrInvalidInput is wrapped by errors about a request that cannot be
// understood (an unknown event, a transitional state to set).
var ErrInvalidInput = errors.New("invalid input")

// Reset applies a ComputerSystem.Reset at now. It returns ErrAlreadyOff or
// ErrInTransition (wrapped) when a real BMC would answer 409 Conflict.
func (m *Machine) Reset(now time.Time, rt ResetType) error {
	m.advance(now)
	if m.behavior.IgnoreCommands {
		return nil // the lying BMC: 204, nothing happens
	}
	if m.behavior.IgnoreDuringTransition && m.phase.transitional() {
		return nil
	}
	readsOff := m.phase.powerState() == PowerOff
	// Graceful requests reach the OS through ACPI; only a running OS that is
	// not hung acts on them. Anyone else accepts them and does nothing.
	osListening := m.phase == phaseOn && !m.osHung

	if rt == ResetPushPowerButton {
		// A short press: ACPI asks a running OS to shut down; an off
		// machine powers on. Either way it is the button, not a hard off.
		rt = ResetOn
		if !readsOff {
			rt = ResetGracefulShutdown
		}
	}
	switch rt {
	case ResetOn, ResetForceOn:
		switch m.phase {
		case phaseOff, phaseRestartOff:
			m.enter(phasePoweringOn, now, m.timing.PowerOn)
		case phasePoweringOff:
			return fmt.Errorf("%w; On must wait until it reads Off", ErrInTransition)
		case phaseOn, phasePoweringOn:
			// Already on or on its way: nothing to do, as on real BMCs.
		}
	case ResetForceOff:
		switch m.phase {
		case phaseOff:
			if m.behavior.ConflictWhenOff {
				return fmt.Errorf("%w; ForceOff needs a system that is on", ErrAlreadyOff)
			}
		case phaseRestartOff:
			m.enter(phaseOff, now, 0) // the restart is cancelled; it stays off
		case phasePoweringOff:
			// A graceful shutdown in progress is cut short.
			if end := now.Add(m.timing.PowerOff); end.Before(m.until) {
				m.until = end
			}
		case phaseOn, phasePoweringOn:
			m.enter(phasePoweringOff, now, m.timing.PowerOff)
		}
	case ResetGracefulShutdown:
		switch {
		case m.phase == phaseOff && m.behavior.ConflictWhenOff:
			return fmt.Errorf("%w; GracefulShutdown needs a system that is on", ErrAlreadyOff)
		case osListening:
			m.enter(phasePoweringOff, now, m.timing.GracefulShutdown)
		}
	case ResetForceRestart, ResetPowerCycle:
		if readsOff {
			// bmclib expects this of real BMCs: a cycle does not turn an
			// off machine on.
			return fmt.Errorf("%w; %s needs a system that is on", ErrAlreadyOff, rt)
		}
		m.stopWatchdog() // the BMC resets the host: no OS notifier runs
		m.enter(phaseRestartOff, now, m.timing.RestartOff)
	case ResetGracefulRestart:
		switch {
		case readsOff:
			return fmt.Errorf("%w; GracefulRestart needs a system that is on", ErrAlreadyOff)
		case osListening:
			m.osReboot(now)
		}
	case ResetNmi:
		// A diagnostic interrupt: the power state does not change. A
		// kernel set up for kdump panics on it (SetPanicOnNMI).
		m.nmis++
		if m.panicOnNMI && m.phase == phaseOn {
			m.osPanic(now)
		}
	}
	return nil
}

// ErrNotApplicable is wrapped by Machine.Event when the event cannot happen to
// the system in its current state (an OS cannot hang on a machine that is
// off). The control API answers it with 409.
var ErrNotApplicable = errors.New("event does not apply to the system's current state")

// Event applies a machine event at now.
func (m *Machine) Event(now time.Time, ev Event) error {
	m.advance(now)
	switch ev {
	case EventPowerLoss:
		m.enter(phaseOff, now, 0)
	case EventPowerRestore:
		if m.phase != phaseOff {
			return fmt.Errorf("%w: %s needs a system that is Off (not restarting); it reads %s", ErrNotApplicable, ev, m.phase.powerState())
		}
		m.enter(phasePoweringOn, now, m.timing.PowerOn)
	case EventOSHang:
		if m.phase != phaseOn {
			return fmt.Errorf("%w: %s needs a system that is On; it reads %s", ErrNotApplicable, ev, m.phase.powerState())
		}
		m.osHung = true
		m.unpet(now, 0)
	case EventOSRecover:
		m.osHung = false
		if m.phase == phaseOn {
			m.repet()
		}
	case EventOSReboot:
		if m.phase != phaseOn {
			return fmt.Errorf("%w: %s needs a system that is On; it reads %s", ErrNotApplicable, ev, m.phase.powerState())
		}
		m.osReboot(now)
	case EventOSPanic:
		if m.phase != phaseOn {
			return fmt.Errorf("%w: %s needs a system that is On; it reads %s", ErrNotApplicable, ev, m.phase.powerState())
		}
		m.osPanic(now)
	default:
		return fmt.Errorf("%w: unknown event %q (want one of %v)", ErrInvalidInput, ev, Events())
	}
	return nil
}

// SetPower forces a steady state at now, skipping transitions, as a test's
// setup would.
func (m *Machine) SetPower(now time.Time, state PowerState) error {
	m.advance(now)
	switch state {
	case PowerOn:
		m.enter(phaseOn, now, 0)
	case PowerOff:
		m.enter(phaseOff, now, 0)
	case PowerPoweringOn, PowerPoweringOff:
		return fmt.Errorf("%w: state %q is a transition; set On or Off (send a Reset to start a transition)", ErrInvalidInput, state)
	default:
		return fmt.Errorf("%w: state %q is not On or Off", ErrInvalidInput, state)
	}
	return nil
}

// SetBehavior replaces the behavior at now; it applies from now on.
func (m *Machine) SetBehavior(now time.Time, b Behavior) {
	m.advance(now)
	m.behavior = b
}

// TakeChanges advances to now and returns the power changes since the
// last call, oldest first (at most the last 64), and forgets them.
func (m *Machine) TakeChanges(now time.Time) []Change {
	m.advance(now)
	out := m.changes
	m.changes = nil
	return out
}

// NextChange is when the transition in progress ends by itself; false
// when the machine is in a steady state (On, Off), which only a command
// or an event ends.
func (m *Machine) NextChange() (time.Time, bool) {
	if m.phase.transitional() {
		return m.until, true
	}
	return time.Time{}, false
}

// Timing returns the machine's transition durations.
func (m *Machine) Timing() Timing { return m.timing }

// Behavior returns how the machine's BMC currently misbehaves.
func (m *Machine) Behavior() Behavior { return m.behavior }

// Snapshot is what a reader sees at one instant.
type Snapshot struct {
	Power     PowerState
	BootState string // Redfish BootProgress.LastState
	BootSince time.Time
	OSHung    bool
	// Boots counts boots started (1 for a machine created On); LastBoot
	// is when the latest started: Redfish ComputerSystem.LastResetTime.
	Boots    int
	LastBoot time.Time
	// NMIs counts diagnostic interrupts received.
	NMIs int
}

// Read returns the machine's state at now.
func (m *Machine) Read(now time.Time) Snapshot {
	m.advance(now)
	return Snapshot{Power: m.phase.powerState(), BootState: m.bootState, BootSince: m.bootSince, OSHung: m.osHung,
		Boots: m.boots, LastBoot: m.lastBoot, NMIs: m.nmis}
}

// SetPanicOnNMI says whether the host's kernel panics on an NMI, as one set
// up for kdump does (kernel.unknown_nmi_panic=1 or panic_on_unrecovered_nmi).
func (m *Machine) SetPanicOnNMI(now time.Time, panics bool) {
	m.advance(now)
	m.panicOnNMI = panics
}

// osReboot: the OS reboots itself. The kernel's reboot notifier re-arms a
// watchdog its petter kept for 120 s; then the machine restarts.
func (m *Machine) osReboot(now time.Time) {
	if m.wd.petter {
		m.unpet(now, RebootWatchdogTimeout)
	}
	m.enter(phaseRestartOff, now, m.timing.RestartOff)
}
