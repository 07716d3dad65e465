package pdu

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/internal/mutant"
)

// Machine is what the outlet identity test needs of the machine's BMC
// (bmc/redfish.Client has all three).
type Machine interface {
	PowerStatus(ctx context.Context) (bmc.PowerStatus, error)
	PowerSupplies(ctx context.Context) ([]bmc.PowerSupply, error)
	Identity(ctx context.Context) (bmc.Identity, error)
}

// Why VerifyOutlet refused or failed; each wrapped with the evidence.
var (
	// ErrSinglePSU: the machine has fewer than two supplies reporting: the
	// test would cut its only power. Refused before anything is switched.
	ErrSinglePSU = errors.New("the machine has fewer than two power supplies: switching its outlet would power it off")
	// ErrPrecondition: the machine is not On, a supply already lacks
	// input, or the outlet is not On: the test could not tell what it
	// proves. Refused before anything is switched.
	ErrPrecondition = errors.New("the outlet identity test cannot start")
	// ErrNotThisMachine: the outlet went off and none of the machine's
	// supplies lost input: the outlet feeds something else, possibly
	// another machine, which just lost one input for the test's duration.
	ErrNotThisMachine = errors.New("the outlet does not feed this machine")
	// ErrPDUIgnored: the PDU accepted the off, yet the outlet does not
	// read Off and no supply lost input: a PDU that accepts and ignores.
	ErrPDUIgnored = errors.New("the PDU accepted the off and did nothing")
	// ErrLostMachine: during the test the machine stopped reading On, or
	// its BMC stopped answering: the outlet may have fed its last input.
	// The outlet is switched back on at once.
	ErrLostMachine = errors.New("the machine lost power or its BMC went silent during the outlet test")
	// ErrNotRestored: the outlet is back on but the supply's input did not
	// come back in time: the machine runs on fewer supplies than it had.
	ErrNotRestored = errors.New("the supply's input did not come back after the outlet was switched on")
)

// VerifyOptions tune VerifyOutlet.
type VerifyOptions struct {
	// Clock times the waits (a fake one in tests).
	Clock clock.Clock
	// Poll is the wait between readings of the machine's supplies.
	// Default 2 s: BMCs refresh PSU sensors every few seconds.
	Poll time.Duration
	// Timeout bounds each wait (for the loss, then for the input's
	// return). Default 60 s: a BMC may take tens of seconds to notice.
	Timeout time.Duration
}

// OutletProof is the record of a passed test: switching Outlet off while
// the machine ran took the input of exactly one of its supplies (PSU),
// and switching it on gave it back, the machine On throughout. Times are
// on our clock.
type OutletProof struct {
	Outlet  Identity     `json:"outlet"`
	Machine bmc.Identity `json:"machine"`
	// PSU is the supply the outlet feeds (its Id as the BMC reports it).
	PSU        string            `json:"psu"`
	Before     []bmc.PowerSupply `json:"before"`
	During     []bmc.PowerSupply `json:"during"`
	After      []bmc.PowerSupply `json:"after"`
	OutletOff  bmc.PowerStatus   `json:"outletOff"`
	Off        bmc.Result        `json:"off"`
	On         bmc.Result        `json:"on"`
	OffAt      time.Time         `json:"offAt"`
	LostAt     time.Time         `json:"lostAt"`
	OnAt       time.Time         `json:"onAt"`
	RestoredAt time.Time         `json:"restoredAt"`
}

// VerifyOutlet ties an outlet to a machine by an active test, without
// downtime: on a running machine with at least two supplies, all with
// input, it switches the outlet off, waits until exactly one supply
// reports its input lost (the machine still On), switches the outlet on
// and waits until that input is back. It refuses a machine with a single
// supply and any start it could not interpret; whatever happens after
// its off, it switches the outlet back on before it returns.
//
// A test that fails after the off has cut something's input for a while:
// an outlet that feeds another machine (ErrNotThisMachine) took one of
// that machine's supplies. Run it only on an operator's explicit request.
func VerifyOutlet(ctx context.Context, m Machine, o Outlet, opts VerifyOptions) (OutletProof, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Poll <= 0 {
		opts.Poll = 2 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Minute
	}
	var p OutletProof
	var err error
	if p.Machine, err = m.Identity(ctx); err != nil {
		return p, err
	}
	if p.Before, err = m.PowerSupplies(ctx); err != nil {
		return p, err
	}
	if len(p.Before) < 2 {
		return p, fmt.Errorf("%w (%d reported: %s)", ErrSinglePSU, len(p.Before), describe(p.Before))
	}
	for _, ps := range p.Before {
		if ps.Input != bmc.InputNormal {
			return p, fmt.Errorf("%w: supply %s already reports input %s (%s): restore it first", ErrPrecondition, ps.ID, ps.Input, ps.Raw)
		}
	}
	st, err := m.PowerStatus(ctx)
	if err != nil {
		return p, err
	}
	if st.State != bmc.PowerOn {
		return p, fmt.Errorf("%w: the machine reads %s, not On: only a running machine shows which supply an outlet feeds without harm", ErrPrecondition, st.State)
	}
	ost, err := o.PowerStatus(ctx)
	if err != nil {
		return p, err
	}
	if ost.State != bmc.PowerOn {
		return p, fmt.Errorf("%w: the outlet reads %s (%q), not On", ErrPrecondition, ost.State, ost.Raw)
	}
	if p.Outlet, err = o.OutletIdentity(ctx); err != nil {
		return p, err
	}

	// From here on the outlet may be off: it is switched back on whatever
	// happens, with a context of its own.
	p.OffAt = opts.Clock.Now()
	p.Off, err = o.PowerOff(ctx)
	restored := false
	defer func() {
		if !restored {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.Timeout)
			defer cancel()
			_, _ = o.PowerOn(rctx)
		}
	}()
	if err != nil {
		return p, err
	}

	lost, err := waitFor(ctx, opts, func() (bool, error) {
		if err := stillRunning(ctx, m); err != nil {
			return false, err
		}
		ps, err := m.PowerSupplies(ctx)
		if err != nil {
			return false, fmt.Errorf("%w: the BMC stopped answering (%w)", ErrLostMachine, err)
		}
		p.During = ps
		return countLost(ps) > 0, nil
	})
	if err != nil {
		return p, err
	}
	if p.OutletOff, err = o.PowerStatus(ctx); err != nil {
		return p, err
	}
	if mutant.On(mutant.OutletOffReadBack) {
		p.OutletOff.State = bmc.PowerOff
	}
	switch {
	case !lost && p.OutletOff.State != bmc.PowerOff:
		return p, fmt.Errorf("%w: the outlet reads %s %s after the off; supplies %s", ErrPDUIgnored, p.OutletOff.State, opts.Timeout, describe(p.During))
	case !lost:
		return p, fmt.Errorf("%w: the outlet read Off for %s and every supply kept its input (%s); it may feed another machine",
			ErrNotThisMachine, opts.Timeout, describe(p.During))
	case p.OutletOff.State != bmc.PowerOff:
		return p, fmt.Errorf("%w: a supply lost input but the outlet reads %s, not Off: the loss is not the outlet's doing", ErrPrecondition, p.OutletOff.State)
	}
	if n := countLost(p.During); n != 1 && !mutant.On(mutant.VerifyOutletOneSupply) {
		return p, fmt.Errorf("%w: %d supplies lost input at once (%s): the outlet feeds several, or something else failed", ErrNotThisMachine, n, describe(p.During))
	}
	for _, ps := range p.During {
		if ps.Input == bmc.InputLost {
			p.PSU = ps.ID
		} else if ps.Input != bmc.InputNormal {
			return p, fmt.Errorf("%w: supply %s reads %s while %s", ErrNotThisMachine, ps.ID, ps.Input, describe(p.During))
		}
	}
	p.LostAt = opts.Clock.Now()

	p.OnAt = opts.Clock.Now()
	if p.On, err = o.PowerOn(ctx); err != nil {
		return p, err
	}
	restored = true
	back, err := waitFor(ctx, opts, func() (bool, error) {
		ps, err := m.PowerSupplies(ctx)
		if err != nil {
			return false, err
		}
		p.After = ps
		return countLost(ps) == 0 && allNormal(ps), nil
	})
	if err != nil {
		return p, err
	}
	if !back {
		return p, fmt.Errorf("%w within %s: %s", ErrNotRestored, opts.Timeout, describe(p.After))
	}
	p.RestoredAt = opts.Clock.Now()
	return p, nil
}

// stillRunning fails when the machine no longer reads On.
func stillRunning(ctx context.Context, m Machine) error {
	st, err := m.PowerStatus(ctx)
	if err != nil {
		return fmt.Errorf("%w: the BMC stopped answering (%w)", ErrLostMachine, err)
	}
	if st.State != bmc.PowerOn {
		return fmt.Errorf("%w: it reads %s", ErrLostMachine, st.State)
	}
	return nil
}

// waitFor polls cond until it holds, fails, or opts.Timeout passes.
func waitFor(ctx context.Context, opts VerifyOptions, cond func() (bool, error)) (bool, error) {
	deadline := opts.Clock.Now().Add(opts.Timeout)
	for {
		ok, err := cond()
		if err != nil || ok {
			return ok, err
		}
		if !opts.Clock.Now().Before(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-opts.Clock.After(opts.Poll):
		}
	}
}

func countLost(ps []bmc.PowerSupply) int {
	n := 0
	for _, p := range ps {
		if p.Input == bmc.InputLost {
			n++
		}
	}
	return n
}

func allNormal(ps []bmc.PowerSupply) bool {
	for _, p := range ps {
		if p.Input != bmc.InputNormal {
			return false
		}
	}
	return true
}

func describe(ps []bmc.PowerSupply) string {
	if len(ps) == 0 {
		return "none"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.ID + "=" + p.Input.String()
	}
	return strings.Join(parts, ", ")
}
