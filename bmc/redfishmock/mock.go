package redfishmock

import (
	"github.com/bmcfence/bmcfence/bmc/machine"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Sentinel errors of the Go API. The control API maps them to HTTP statuses:
// ErrUnknownSystem to 404, ErrInvalidInput to 400, ErrNotApplicable to 409.
var (
	ErrUnknownSystem = errors.New("unknown system")
	ErrInvalidInput  = machine.ErrInvalidInput
	// ErrNotApplicable: the machine's state rules the event out.
	ErrNotApplicable = machine.ErrNotApplicable
)

// Mock is a Redfish service with a simulated power state machine and fault
// injection behind every system. It is an http.Handler serving the Redfish
// API under /redfish and the control API under /mock/ (see the package
// documentation). All methods are safe for concurrent use.
type Mock struct {
	cfg      resolvedConfig
	clock    clock.PassiveClock
	waiter   clock.Clock // times Faults.Latency
	log      *slog.Logger
	systems  []*system          // in configured order
	byID     map[string]*system // immutable after New
	creds    credentials        // the administrator and system-scoped users
	sessions *sessionTable

	tasks *taskTable

	events *eventHub // events.go
	pdus   *pduTable // pdu.go

	closeOnce sync.Once
	closed    chan struct{}
}

// Option configures a Mock.
type Option func(*Mock)

// WithClock makes the mock read time from c. If c also implements
// clock.Clock (a *testing.FakeClock does), Faults.Latency waits on c too,
// so a test can step through latency instead of sleeping.
func WithClock(c clock.PassiveClock) Option {
	return func(m *Mock) {
		m.clock = c
		if waiter, ok := c.(clock.Clock); ok {
			m.waiter = waiter
		}
	}
}

// WithLogger logs one line per request at debug level (method, path,
// status, system, user; never credentials) and control actions at info.
func WithLogger(l *slog.Logger) Option {
	return func(m *Mock) { m.log = l }
}

// New validates cfg and builds a Mock. Errors wrap ErrInvalidConfig and name
// every offending field.
func New(cfg Config, opts ...Option) (*Mock, error) {
	rc, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	m := &Mock{
		cfg:    rc,
		clock:  clock.RealClock{},
		waiter: clock.RealClock{},
		byID:   make(map[string]*system, len(rc.systems)),
		creds:  credentials{},
		tasks:  newTaskTable(),
		closed: make(chan struct{}),
	}
	for _, opt := range opts {
		opt(m)
	}
	m.sessions = newSessionTable(rc.maxSessions, rc.sessionTimeout)
	m.creds.add(rc.username, rc.password, nil)
	now := m.clock.Now()
	for _, spec := range rc.systems {
		s := &system{spec: spec, reportedUUID: spec.uuid}
		s.restore(now, rc.seed)
		m.systems = append(m.systems, s)
		m.byID[spec.id] = s
		if spec.username != "" {
			m.creds.add(spec.username, spec.password, s)
		}
	}
	m.events = newEventHub(m, cfg.Events)
	pdus, problems := buildPDUs(cfg.PDUs, m.byID)
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	m.pdus = pdus
	m.settleAll()
	return m, nil
}

// settleAll derives every system's life from its supplies' inputs.
func (m *Mock) settleAll() {
	m.pdus.mu.Lock()
	defer m.pdus.mu.Unlock()
	now := m.clock.Now()
	for _, s := range m.systems {
		m.settleLocked(s, now)
	}
}

// Close releases requests blocked by Faults.Hang or waiting out
// Faults.Latency; later ones are answered 503 at once. Use it before
// shutting an http.Server down (http.Server.RegisterOnShutdown), or
// Shutdown waits for hung requests forever.
func (m *Mock) Close() {
	m.closeOnce.Do(func() { close(m.closed) })
	m.events.wg.Wait()
}

// system is one ComputerSystem with its chassis and manager.
type system struct {
	spec systemSpec // immutable

	mu           sync.Mutex
	hw           machine.Machine
	faults       Faults // the request-level faults; hw holds the Reset behaviour
	reportedUUID string
	rng          rand.PCG
	counters     Counters
	profile      Profile
	// busyLeft counts the Resets still to be refused as busy after the
	// last accepted one (profiles with busyAfterReset).
	busyLeft int
	// eventFaults: how its event service misbehaves (events.go).
	eventFaults EventFaults
	// dead: every power supply lost its input; the BMC died with the
	// host and answers nothing (pdu.go).
	dead bool
	// suppliesFailed: every power supply failed while its input stays
	// (FailSupplies): dead whatever the outlets do.
	suppliesFailed bool
}

// restore puts the system back in its configured state.
func (s *system) restore(now time.Time, seed int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hw = machine.New(now, s.spec.power, s.spec.timing, s.spec.faults.behavior())
	s.faults = s.spec.faults
	s.profile = s.spec.profile
	s.busyLeft = 0
	s.eventFaults = EventFaults{}
	s.dead = false
	s.suppliesFailed = false
	s.applyFaultIdentity()
	// Per-system stream: the same seed gives every system a different but
	// reproducible sequence.
	s.rng = *rand.NewPCG(uint64(seed), fnv64(s.spec.id))
	s.counters = Counters{}
}

// applyFaultIdentity updates what the system claims to be after a fault
// change. The caller holds s.mu.
func (s *system) applyFaultIdentity() {
	s.reportedUUID = s.spec.uuid
	if s.faults.WrongUUID {
		s.reportedUUID = nameUUID("wrong/" + s.spec.uuid)
	}
}

func fnv64(s string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime
	}
	return h
}

// Counters record what a system's BMC was asked to do.
type Counters struct {
	// Requests counts Redfish requests attributed to the system, including
	// those a fault failed.
	Requests int64 `json:"requests"`
	// Resets counts Reset actions received by ResetType, whatever became of
	// them (ignored, rejected with 409, applied). A type never received is
	// absent, so "no ForceOff was ever sent" is Resets[ResetForceOff] == 0.
	Resets map[ResetType]int64 `json:"resets,omitempty"`
	// LastResetType and LastResetTime describe the latest Reset received.
	LastResetType ResetType  `json:"lastResetType,omitempty"`
	LastResetTime *time.Time `json:"lastResetTime,omitempty"`
}

func (c Counters) clone() Counters {
	out := c
	if c.Resets != nil {
		out.Resets = make(map[ResetType]int64, len(c.Resets))
		for k, v := range c.Resets {
			out.Resets[k] = v
		}
	}
	if c.LastResetTime != nil {
		t := *c.LastResetTime
		out.LastResetTime = &t
	}
	return out
}

// SystemStatus is a system as the control API reports it.
type SystemStatus struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// UUID is the configured UUID; ReportedUUID is what Redfish shows,
	// which differs while Faults.WrongUUID is set.
	UUID         string     `json:"uuid"`
	ReportedUUID string     `json:"reportedUUID"`
	Profile      Profile    `json:"profile"`
	PowerState   PowerState `json:"powerState"`
	BootProgress string     `json:"bootProgress"`
	OSHung       bool       `json:"osHung"`
	Faults       Faults     `json:"faults"`
	Timing       Timing     `json:"timing"`
	Counters     Counters   `json:"counters"`
}

func (s *system) status(now time.Time) SystemStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := s.hw.Read(now)
	return SystemStatus{
		ID:           s.spec.id,
		Name:         s.spec.name,
		UUID:         s.spec.uuid,
		ReportedUUID: s.reportedUUID,
		Profile:      s.profile,
		PowerState:   snap.Power,
		BootProgress: snap.BootState,
		OSHung:       snap.OSHung,
		Faults:       s.faults,
		Timing:       s.hw.Timing(),
		Counters:     s.counters.clone(),
	}
}

func (m *Mock) system(id string) (*system, error) {
	s, ok := m.byID[id]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownSystem, id)
	}
	return s, nil
}

// Status reports one system.
func (m *Mock) Status(id string) (SystemStatus, error) {
	s, err := m.system(id)
	if err != nil {
		return SystemStatus{}, err
	}
	return s.status(m.clock.Now()), nil
}

// Statuses reports every system in configured order.
func (m *Mock) Statuses() []SystemStatus {
	now := m.clock.Now()
	out := make([]SystemStatus, 0, len(m.systems))
	for _, s := range m.systems {
		out = append(out, s.status(now))
	}
	return out
}

// Event makes something happen to the machine itself:
//
//   - power-loss: any state → Off at once (no PoweringOff).
//   - power-restore: Off → PoweringOn → On.
//   - os-hang: the OS of a system that is On freezes; it keeps reading On
//     and OSRunning, and graceful commands are ignored.
//   - os-recover: the OS unfreezes.
//   - os-reboot: a system that is On reboots by itself: Off for the restart
//     off time, PoweringOn, On.
//
// It returns ErrNotApplicable when the system's state rules the event out,
// ErrInvalidInput for an unknown event.
func (m *Mock) Event(id string, ev Event) error {
	s, err := m.system(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer m.events.kick()
	return s.hw.Event(m.clock.Now(), ev)
}

// SetFaults replaces a system's faults. Faults{} clears them.
func (m *Mock) SetFaults(id string, f Faults) error {
	return m.editFaults(id, func(cur *Faults) error {
		*cur = f
		return nil
	})
}

// UpdateFaults changes some of a system's faults atomically, the Go form of
// PATCH /mock/systems/{id}/faults:
//
//	m.UpdateFaults("1", func(f *Faults) { f.Hang = true })
func (m *Mock) UpdateFaults(id string, change func(*Faults)) error {
	return m.editFaults(id, func(f *Faults) error {
		change(f)
		return nil
	})
}

// editFaults changes a system's faults atomically: edit works on a copy,
// which is installed only if edit succeeds and the result is valid.
func (m *Mock) editFaults(id string, edit func(*Faults) error) error {
	s, err := m.system(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	if err := edit(&f); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if err := f.validate(); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidInput, oneLine(err))
	}
	s.faults = f
	s.hw.SetBehavior(m.clock.Now(), f.behavior())
	s.applyFaultIdentity()
	return nil
}

// SetProfile changes a system's vendor profile from now on.
func (m *Mock) SetProfile(id string, p Profile) error {
	s, err := m.system(id)
	if err != nil {
		return err
	}
	if !p.Valid() {
		return fmt.Errorf("%w: profile %q: want one of %v", ErrInvalidInput, p, Profiles())
	}
	if p == "" {
		p = ProfileGeneric
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.profile = p
	s.busyLeft = 0
	return nil
}

// SetPower puts a system straight into On or Off, skipping transitions, as
// test setup does. Counters are untouched: no Reset was received.
func (m *Mock) SetPower(id string, state PowerState) error {
	s, err := m.system(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer m.events.kick()
	return s.hw.SetPower(m.clock.Now(), state)
}

// Reset puts every system back in its configured state (power, faults,
// counters) and ends every session.
func (m *Mock) Reset() {
	now := m.clock.Now()
	for _, s := range m.systems {
		s.restore(now, m.cfg.seed)
	}
	m.sessions.clear()
	m.tasks.clear()
	m.events.reset()
	m.pdus.reset()
	m.settleAll()
}

// wait blocks for d on the mock's clock. It returns early with an error when
// ctx ends or the mock is closed.
func (m *Mock) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	timer := m.waiter.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-m.closed:
		return errClosed
	}
}

// block waits until ctx ends or the mock is closed: a hung BMC.
func (m *Mock) block(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-m.closed:
		return errClosed
	}
}

var errClosed = errors.New("mock closed")
