package fencesim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// Fencing levels in the world: switched PDU outlets feeding machines'
// supplies. The truth is which machine an outlet really feeds (Feeds), not
// what the inventory says; a machine with outlets is powered while any of
// them is on and its supplies work. Metering is truthful: an outlet on that
// feeds a running machine draws hundreds of watts, one feeding a machine
// whose host is off but whose BMC lives draws standby watts, one feeding a
// dead machine (its supplies failed, or every outlet off) nothing.

// Fault classes of fencing levels (issue 19).
const (
	faultDeadBMCLevel  = "19  BMC dead with its machine, a PDU level below it"
	faultWrongOutlet   = "19  outlet mapped to the wrong machine"
	faultPDUIgnores    = "19  PDU accepts an off and ignores it"
	faultOutletLeftOn  = "19  one of two outlets left on"
	faultOutletDrawing = "19  outlet drawing power behind a partition"
)

// Outlet is one switched PDU outlet.
type Outlet struct {
	Name string
	// Feeds is the machine one of whose supplies this outlet really feeds
	// (nil: nothing).
	Feeds *Machine
	// ProofFor is the machine a recorded outlet identity test
	// (pdu.VerifyOutlet) tied this outlet to: the machine it fed when the
	// test ran (nil: never tested).
	ProofFor *Machine
	on       bool
	// ignoreOffs: the PDU accepts that many more offs of this outlet and
	// does nothing.
	ignoreOffs int
}

// AddOutlet adds an outlet, on, feeding m.
func (w *World) AddOutlet(name string, m *Machine) *Outlet {
	w.mu.Lock()
	defer w.mu.Unlock()
	o := &Outlet{Name: name, Feeds: m, on: true}
	w.outlets = append(w.outlets, o)
	return o
}

// feeding lists the outlets that feed m.
func (w *World) feeding(m *Machine) []*Outlet {
	var out []*Outlet
	for _, o := range w.outlets {
		if o.Feeds == m {
			out = append(out, o)
		}
	}
	return out
}

// draws is what the outlet's meter reads: the truth.
func (w *World) draws(o *Outlet) float64 {
	m := o.Feeds
	if !o.on || m == nil || m.psuDead || m.unpowered {
		return 0
	}
	on := 0
	for _, f := range w.feeding(m) {
		if f.on {
			on++
		}
	}
	if running(m) {
		return 320 / float64(on)
	}
	return 6 / float64(on)
}

// supplyFails: the machine's supplies fail (a failed PSU, a pulled cord
// behind them): the host loses power and its BMC dies with it. Its outlets
// stay on and draw nothing.
func (w *World) supplyFails(m *Machine) {
	m.psuDead = true
	w.cutPower(m)
}

// cutPower takes the machine and its BMC down.
func (w *World) cutPower(m *Machine) {
	_ = m.BMC.Event(machine.EventPowerLoss)
	m.BMC.Fail(bmctest.ErrUnreachableFake)
	m.unreachable = true
}

// repower gives a machine whose outlets cut it its power back: its BMC
// answers again; the host stays off until someone powers it on.
func (w *World) repower(m *Machine) {
	if !m.unpowered || m.psuDead {
		return
	}
	m.unpowered = false
	if !m.netDown {
		m.BMC.Clear()
		m.unreachable = false
	}
}

// levelRead: one outlet as the PDU answers it.
func (o *Outlet) state() bmc.PowerState {
	if o.on {
		return bmc.PowerOn
	}
	return bmc.PowerOff
}

// level is a node's fencing level 2 as the agents use it: its outlets, as
// the entry names them.
type level struct {
	w       *World
	n       *Node
	outlets []*Outlet
	allow   bool
}

var (
	_ runner.PowerController = (*level)(nil)
	_ runner.Metered         = (*level)(nil)
	_ runner.Leveled         = leveled{}
)

// leveled is a node's level 1 (its BMC entry) with the levels below it.
type leveled struct{ *target }

func (l leveled) Levels() []runner.PowerController {
	if l.lv == nil {
		return nil
	}
	return []runner.PowerController{l.lv}
}

func (l *level) Key() string {
	names := make([]string, len(l.outlets))
	for i, o := range l.outlets {
		names[i] = o.Name
	}
	return "pdu://" + strings.Join(names, "+")
}

// PowerStatus reads every outlet: Off only when every one reads Off.
func (l *level) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	off := 0
	for _, o := range l.outlets {
		if !o.on {
			off++
		}
	}
	st := bmc.PowerStatus{State: bmc.PowerOn, Raw: fmt.Sprintf("%d of %d outlets off", off, len(l.outlets))}
	switch {
	case off == len(l.outlets):
		st.State = bmc.PowerOff
	case off > 0 && !fence.Enabled(fence.CheckOutletsAllOff):
		st.State = bmc.PowerOff // the mutant: one outlet off is the level off
	}
	return st, nil
}

// PowerOff switches every outlet off, judged first like a BMC's ForceOff,
// once per machine the outlets really feed.
func (l *level) PowerOff(ctx context.Context) (bmc.Result, error) {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	judged := map[*Machine]bool{}
	for _, o := range l.outlets {
		if o.Feeds != nil && !judged[o.Feeds] {
			judged[o.Feeds] = true
			w.judgePowerOff(l.n, o.Feeds).commit(w)
		}
		w.record(l.n.Name, "power-off", "", o.Name)
		if o.on && o.ignoreOffs > 0 {
			o.ignoreOffs--
			w.quirk(faultPDUIgnores + "/off accepted and ignored")
			continue
		}
		o.on = false
	}
	for m := range judged {
		w.outletsChanged(m)
	}
	return bmc.Result{Provider: "fake-pdu", Attempts: 1}, nil
}

// PowerOn switches every outlet on.
func (l *level) PowerOn(ctx context.Context) (bmc.Result, error) {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range l.outlets {
		w.record(l.n.Name, "power-on", "", o.Name)
		o.on = true
		if o.Feeds != nil {
			w.outletsChanged(o.Feeds)
		}
	}
	return bmc.Result{Provider: "fake-pdu", Attempts: 1}, nil
}

// outletsChanged cuts or restores m's power after its outlets switched.
func (w *World) outletsChanged(m *Machine) {
	any := false
	for _, o := range w.feeding(m) {
		any = any || o.on
	}
	switch {
	case !any && !m.unpowered:
		m.unpowered = true
		w.cutPower(m)
	case any && m.unpowered:
		w.repower(m)
	}
}

// Drawless: every outlet's meter reads about 0 W.
func (l *level) Drawless(ctx context.Context) (bool, error) {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	for _, o := range l.outlets {
		if l.w.draws(o) > 1 {
			return false, nil
		}
	}
	return true, nil
}

var errNoOutletProof = errors.New("no outlet identity proof for this machine")

// Verify passes when every outlet has a recorded identity proof naming the
// node's machine (its systemUUID), or the entry opts in.
func (l *level) Verify(ctx context.Context) error {
	w := l.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if l.allow || !fence.Enabled(fence.CheckOutletProof) {
		return nil
	}
	cur := w.byName[l.n.Name]
	if cur == nil || cur.SystemUUID == "" {
		return fmt.Errorf("%w: the node reports no systemUUID", errNoOutletProof)
	}
	for _, o := range l.outlets {
		if o.ProofFor == nil || !strings.EqualFold(o.ProofFor.UUID, cur.SystemUUID) {
			if o.Feeds != cur.Host {
				w.quirk(faultWrongOutlet + "/caught by the outlet proof")
			}
			return fmt.Errorf("%w: outlet %s", errNoOutletProof, o.Name)
		}
	}
	return nil
}

func init() {
	Required = append(Required, faultDeadBMCLevel, faultWrongOutlet, faultPDUIgnores, faultOutletLeftOn, faultOutletDrawing)
}

// pduLevel, in one scenario in four, adds a node whose entry has a PDU
// level (one or two outlets, each with a recorded identity proof, or the
// opt-in) and gives it one hazard of fencing levels. It is added after
// every other episode and background fault was planned, so none of them
// picks it: what happens to it is this hazard alone.
func (g *gen) pduLevel() {
	if g.rng.IntN(4) != 0 {
		return
	}
	rng, w := g.rng, g.w
	const name = "p1"
	m := w.AddMachine(name, machine.Timing{
		PowerOn:          g.dur(5*time.Second, 60*time.Second),
		PowerOff:         time.Duration(rng.IntN(3)) * time.Second,
		GracefulShutdown: g.dur(1*time.Second, 10*time.Second),
		RestartOff:       g.dur(1*time.Second, 5*time.Second),
	})
	m.SetLatency(time.Duration(rng.IntN(400)) * time.Millisecond)
	n := w.AddNodeOn(name, "z0", m)
	e := w.Entry(name)
	hazard := rng.IntN(5)
	k := 1 + rng.IntN(2)
	if hazard == 3 {
		k = 2
	}
	for i := range k {
		o := w.AddOutlet(fmt.Sprintf("pdu-%c/%d", 'a'+i, 1+rng.IntN(24)), m)
		o.ProofFor = m
		e.Outlets = append(e.Outlets, o)
	}
	if rng.IntN(6) == 0 {
		for _, o := range e.Outlets {
			o.ProofFor = nil
		}
		e.AllowUnverifiedOutlet = true
	}
	d := g.dur(0, 3*time.Minute)
	g.plan = append(g.plan, fmt.Sprintf("%s: PDU level of %d outlets (opt-in %v), hazard %d", name, k, e.AllowUnverifiedOutlet, hazard))
	// cut: the host's network and its BMC's (a shared NC-SI port) die
	// together while the machine runs: a partition the Lease cannot tell
	// from a dead machine; only the outlets' metering can.
	cut := func(class string) {
		g.at(d, name+" network and BMC lost together (NC-SI), machine running", func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			if !running(m) || m.unpowered {
				return false
			}
			n.Partitioned, m.netDown = true, true
			m.BMC.Fail(bmctest.ErrUnreachableFake)
			m.unreachable = true
			return true
		}, class, faultPartition)
		if rng.IntN(2) == 0 {
			g.at(d+g.dur(90*time.Second, 5*time.Minute), name+" network back", func() bool {
				w.mu.Lock()
				defer w.mu.Unlock()
				if !m.netDown {
					return false
				}
				n.Partitioned, m.netDown = false, false
				if !m.unpowered && !m.psuDead {
					m.BMC.Clear()
					m.unreachable = false
				}
				return true
			})
		}
	}
	switch hazard {
	case 0:
		if rng.IntN(3) == 0 {
			e.Outlets[0].ignoreOffs = 1 + rng.IntN(2)
		}
		g.at(d, name+" supplies fail (its BMC dies with it)", func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			if m.psuDead {
				return false
			}
			w.supplyFails(m)
			return true
		}, faultDeadBMCLevel, faultPowerLoss)
	case 1:
		// The entry's last outlet feeds another node's machine; the
		// identity test, if one ran, named that machine.
		other := w.Nodes[rng.IntN(len(w.Nodes)-1)].Host
		o := e.Outlets[len(e.Outlets)-1]
		o.Feeds = other
		e.AllowUnverifiedOutlet = false
		o.ProofFor = nil
		if rng.IntN(2) == 0 {
			o.ProofFor = other
		}
		for _, x := range e.Outlets[:len(e.Outlets)-1] {
			x.ProofFor = m
		}
		cut(faultWrongOutlet)
	case 2:
		for _, o := range e.Outlets {
			o.ignoreOffs = 1 + rng.IntN(2)
		}
		cut(faultPDUIgnores)
	case 3:
		e.Outlets[1].ignoreOffs = 1 << 20
		cut(faultOutletLeftOn)
	default:
		cut(faultOutletDrawing)
	}
}

// SupplyFails makes m's supplies fail: the host and its BMC die; its
// outlets stay on and draw nothing.
func (w *World) SupplyFails(m *Machine) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.supplyFails(m)
}

// On reports whether the outlet is switched on.
func (o *Outlet) On() bool { return o.on }

// SetIgnoreOffs makes the PDU accept the next k offs of o and do nothing.
func (o *Outlet) SetIgnoreOffs(k int) { o.ignoreOffs = k }
