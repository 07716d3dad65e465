// Package bmctest provides a scriptable in-memory BMC for tests of the runner,
// the CLI and the simulation. Behind it is the same machine model as the
// Redfish mock (bmc/machine), driven by the caller's clock, so a fake clock
// makes every transition exact. Failures are scripted per operation.
package bmctest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/machine"
)

// Call records one operation the fake served.
type Call struct {
	Op  bmc.Op
	At  time.Time
	Err error
}

// Fake is a bmc.Controller for one machine. It is safe for concurrent use.
type Fake struct {
	clock clock.PassiveClock
	// step advances the caller's fake clock by the latency in the middle
	// of each call (WithStepper), so a reading's send time precedes the
	// moment the BMC looks at the machine.
	step func(time.Duration)

	mu        sync.Mutex
	hw        machine.Machine
	identity  bmc.Identity
	key       string
	verifyErr error
	fail      map[bmc.Op]failure
	latency   time.Duration
	calls     []Call
	// alreadyOff: ForceOff to a machine that reads Off answers "already
	// in that state" and does nothing (SetAlreadyOff).
	alreadyOff bool
	// hideTimerUse: ReadEvidence reports no timer use (SetHideTimerUse).
	hideTimerUse bool
}

type failure struct {
	err       error
	remaining int // < 0: until cleared
}

var _ bmc.Controller = (*Fake)(nil)

// Option configures a Fake.
type Option func(*Fake)

// WithPower sets the initial steady power state (default On).
func WithPower(on bool) Option {
	return func(f *Fake) {
		p := machine.PowerOff
		if on {
			p = machine.PowerOn
		}
		f.hw = machine.New(f.clock.Now(), p, f.hw.Timing(), f.hw.Behavior())
	}
}

// WithTiming sets how long transitions take (default: instant).
func WithTiming(t machine.Timing) Option {
	return func(f *Fake) {
		f.hw = machine.New(f.clock.Now(), f.hw.Read(f.clock.Now()).Power, t, f.hw.Behavior())
	}
}

// WithIdentity sets what Identity reports.
func WithIdentity(id bmc.Identity) Option { return func(f *Fake) { f.identity = id } }

// WithKey sets the target key the fake reports (default "fake://bmc").
func WithKey(k string) Option { return func(f *Fake) { f.key = k } }

// WithStepper makes each call take Latency on the caller's fake clock:
// step is called with the latency in the middle of the call.
func WithStepper(step func(time.Duration)) Option { return func(f *Fake) { f.step = step } }

// New returns a Fake whose machine is On, with instant transitions.
func New(clk clock.PassiveClock, opts ...Option) *Fake {
	f := &Fake{clock: clk, fail: map[bmc.Op]failure{}, key: "fake://bmc"}
	f.hw = machine.New(clk.Now(), machine.PowerOn, machine.Timing{}, machine.Behavior{})
	for _, o := range opts {
		o(f)
	}
	return f
}

// ---- bmc.Controller ----

// PowerStatus reads the machine.
func (f *Fake) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	var st bmc.PowerStatus
	err := f.do(ctx, bmc.OpPowerStatus, func(now time.Time) error {
		snap := f.hw.Read(now)
		st.Raw = string(snap.Power)
		st.State = bmc.ParseRedfishPowerState(st.Raw)
		st.BootProgress = snap.BootState
		return nil
	})
	st.Result = bmc.Result{Provider: "fake", Attempts: 1, Latency: f.latency}
	return st, err
}

// PowerOff sends ForceOff.
func (f *Fake) PowerOff(ctx context.Context) (bmc.Result, error) {
	return f.reset(ctx, bmc.OpPowerOff, machine.ResetForceOff)
}

// PowerOn sends On.
func (f *Fake) PowerOn(ctx context.Context) (bmc.Result, error) {
	return f.reset(ctx, bmc.OpPowerOn, machine.ResetOn)
}

// Identity reports the configured identity.
func (f *Fake) Identity(ctx context.Context) (bmc.Identity, error) {
	var id bmc.Identity
	err := f.do(ctx, bmc.OpIdentity, func(time.Time) error {
		id = f.identity
		return nil
	})
	id.Result = bmc.Result{Provider: "fake", Attempts: 1, Latency: f.latency}
	return id, err
}

func (f *Fake) reset(ctx context.Context, op bmc.Op, rt machine.ResetType) (bmc.Result, error) {
	err := f.do(ctx, op, func(now time.Time) error {
		if f.alreadyOff && rt == machine.ResetForceOff && f.hw.Read(now).Power == machine.PowerOff {
			// iDRAC's 409, iLO's 400 InvalidOperationForSystemState,
			// IPMI's 0xD5: judged on what the BMC reads, so a restart's
			// off-dwell gets the same answer, and the restart goes on.
			return fmt.Errorf("%w: HTTP 409: the system is already off", bmc.ErrAlreadyInState)
		}
		if err := f.hw.Reset(now, rt); err != nil {
			// A real BMC answers 409: an error from the BMC, not a
			// transport failure. "Already off" means it did nothing.
			if errors.Is(err, machine.ErrAlreadyOff) {
				return fmt.Errorf("%w: HTTP 409: %v", bmc.ErrAlreadyInState, err)
			}
			return fmt.Errorf("%w: HTTP 409: %v", bmc.ErrBMC, err)
		}
		return nil
	})
	return bmc.Result{Provider: "fake", Attempts: 1, Latency: f.latency}, err
}

// do runs one operation: the latency, then a scripted failure if any, then
// fn against the machine at the moment the BMC handles the request.
func (f *Fake) do(ctx context.Context, op bmc.Op, fn func(now time.Time) error) error {
	if err := ctx.Err(); err != nil {
		return f.opError(op, fmt.Errorf("%w: %v", bmc.ErrTimeout, err))
	}
	f.mu.Lock()
	lat := f.latency
	f.mu.Unlock()
	if lat > 0 && f.step != nil {
		f.step(lat)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	var err error
	if fl, ok := f.fail[op]; ok {
		err = fl.err
		if fl.remaining > 0 {
			fl.remaining--
			if fl.remaining == 0 {
				delete(f.fail, op)
			} else {
				f.fail[op] = fl
			}
		}
	} else {
		err = fn(now)
	}
	if err != nil {
		err = f.opError(op, err)
	}
	f.calls = append(f.calls, Call{Op: op, At: now, Err: err})
	return err
}

func (f *Fake) opError(op bmc.Op, err error) error {
	return &bmc.OpError{Op: op, Protocol: bmc.Redfish, Address: "fake://bmc", Err: err}
}

// Key is the fake's target key (runner.PowerController).
func (f *Fake) Key() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.key
}

// Verify passes unless SetVerifyError made it fail (runner.PowerController).
func (f *Fake) Verify(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.verifyErr
}

// SetVerifyError makes Verify fail with err (nil: pass).
func (f *Fake) SetVerifyError(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verifyErr = err
}

// ---- scripting ----

// Fail makes every call of op fail with err (wrap a bmc sentinel) until
// Clear. Pass the ops to fail; none means all.
func (f *Fake) Fail(err error, ops ...bmc.Op) { f.failN(err, -1, ops) }

// FailNext makes the next n calls of each op fail with err.
func (f *Fake) FailNext(n int, err error, ops ...bmc.Op) { f.failN(err, n, ops) }

func (f *Fake) failN(err error, n int, ops []bmc.Op) {
	if len(ops) == 0 {
		ops = []bmc.Op{bmc.OpPowerStatus, bmc.OpPowerOff, bmc.OpPowerOn, bmc.OpIdentity, bmc.OpReadEvidence}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, op := range ops {
		f.fail[op] = failure{err: err, remaining: n}
	}
}

// Clear removes every scripted failure.
func (f *Fake) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.fail)
}

// ErrUnreachableFake is a ready-made failure for Fail.
var ErrUnreachableFake = fmt.Errorf("%w: connection refused (fake)", bmc.ErrUnreachable)

// SetLatency makes each call take d (on the clock, through WithStepper).
func (f *Fake) SetLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = d
}

// SetAlreadyOff makes ForceOff answer "already in that state"
// (bmc.ErrAlreadyInState) and do nothing whenever the machine reads Off, a
// restart's off-dwell included, as iDRAC (409), iLO (400) and IPMI (0xD5)
// do. The machine model's ConflictWhenOff only refuses a machine that is
// off for good; this is the vendor behaviour that lets a restart go on.
func (f *Fake) SetAlreadyOff(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.alreadyOff = on
}

// SetTiming changes how long the machine's transitions take, from now; the
// machine keeps its power state (steady states only, as WithTiming).
func (f *Fake) SetTiming(t machine.Timing) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	f.hw = machine.New(now, f.hw.Read(now).Power, t, f.hw.Behavior())
}

// SetBehavior changes how the machine's BMC treats commands (lying,
// power-on failing...).
func (f *Fake) SetBehavior(b machine.Behavior) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hw.SetBehavior(f.clock.Now(), b)
}

// Event makes something happen to the machine itself (power loss, OS
// reboot, ...).
func (f *Fake) Event(ev machine.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hw.Event(f.clock.Now(), ev)
}

// Press acts on the machine directly, as its OS or a human at the console
// would (a shutdown from the OS is a GracefulShutdown), bypassing the BMC's
// faults and call log.
func (f *Fake) Press(rt machine.ResetType) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.hw.Behavior()
	f.hw.SetBehavior(f.clock.Now(), machine.Behavior{})
	err := f.hw.Reset(f.clock.Now(), rt)
	f.hw.SetBehavior(f.clock.Now(), b)
	return err
}

// SetPower puts the machine straight into On or Off.
func (f *Fake) SetPower(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := machine.PowerOff
	if on {
		p = machine.PowerOn
	}
	_ = f.hw.SetPower(f.clock.Now(), p) // On and Off are always valid
}

// Truth is the machine's state now, bypassing the BMC's faults: what a test
// oracle compares decisions against.
func (f *Fake) Truth() machine.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hw.Read(f.clock.Now())
}

// StaysOff reports whether the machine reads Off now and, left alone, still
// will after horizon: off, not merely in a restart's Off dwell. It reads a
// copy, so the machine itself is not advanced.
func (f *Fake) StaysOff(horizon time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	if f.hw.Read(now).Power != machine.PowerOff {
		return false
	}
	future := f.hw
	return future.Read(now.Add(horizon)).Power == machine.PowerOff
}

// Calls returns every operation served, in order.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Count returns how many calls of op were served (failed ones included).
func (f *Fake) Count(op bmc.Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.Op == op {
			n++
		}
	}
	return n
}

// Diagnostic sends the machine a diagnostic interrupt (ResetType Nmi:
// bmc.Diagnoser): the power does not change; a kernel set up for kdump
// panics (SetPanicOnNMI).
func (f *Fake) Diagnostic(ctx context.Context) (bmc.Result, error) {
	return f.reset(ctx, bmc.OpDiagnostic, machine.ResetNmi)
}

// SetPanicOnNMI says whether the host's kernel panics on an NMI, as one set
// up for kdump does.
func (f *Fake) SetPanicOnNMI(panics bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hw.SetPanicOnNMI(f.clock.Now(), panics)
}
