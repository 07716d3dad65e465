package fencesim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// The diagnostic interrupt before the off (docs/safety.md, "Crash dump
// before the off"). The world models what an NMI does to a machine: a
// kernel set up for kdump panics on it (its OS stops, the BMC logs an OS
// critical stop), writes its dump for Machine.kdump, then reboots (a
// restart's off-dwell, a boot, and its kubelet renews again if it can); a
// kernel not set up for it runs on. Either way an NMI to a machine that may
// be running is judged as a ForceOff to it would be (judgeDiagnostic): it
// needs the same licence.

const (
	faultNMI = "d   diagnostic interrupt (NMI) before the off"
	// faultKdump: an NMI panicked a kernel set up for kdump, which then
	// rebooted after its dump.
	faultKdump = "d   NMI panicked a kdump kernel, which rebooted after its dump"
)

func init() { Required = append(Required, faultNMI, faultKdump) }

var _ runner.Diagnoser = (*target)(nil)

// Diagnostic sends the entry's target machine a diagnostic interrupt,
// judged first (judgeDiagnostic), and committed if it reaches the BMC. A
// BMC without one refuses before anything is sent.
func (t *target) Diagnostic(ctx context.Context) (bmc.Result, error) {
	w := t.w
	m := t.e.Target
	w.mu.Lock()
	if m.noNMI {
		w.mu.Unlock()
		return bmc.Result{}, fmt.Errorf("%w: the system does not list Nmi among its ResetTypes; nothing was sent", bmc.ErrUnsupported)
	}
	v := w.judgeDiagnostic(t.n, m)
	w.record(t.n.Name, "nmi", "", m.Name)
	w.mu.Unlock()
	res, err := m.BMC.Diagnostic(ctx)
	if err == nil || errors.Is(err, bmc.ErrBMC) {
		w.mu.Lock()
		v.commit(w)
		w.quirk(faultNMI)
		if m.kdump > 0 && m.kdumpAt.IsZero() && m.BMC.Truth().OSHung {
			m.kdumpAt = w.now()
		}
		w.mu.Unlock()
	}
	return res, err
}

// judgeDiagnostic judges an NMI from node n's entry to machine m as the
// oracle judges a ForceOff (judgePowerOff: the wrong machine, maintenance,
// a planned reboot, a control-plane node, a kubelet that renews, a Lease
// silent less than fenceAfter on a machine whose OS truly runs, the storm
// rule), from the world's truth only. An NMI is no off: it never makes the
// machine's Off ours.
func (w *World) judgeDiagnostic(n *Node, m *Machine) verdict {
	v := w.judgePowerOff(n, m)
	v.ownHost = false
	for i, msg := range v.msgs {
		v.msgs[i] = "diagnostic interrupt (NMI) judged as a ForceOff: " + msg
	}
	return v
}

// kdumpReboot reboots a machine whose kdump kernel has written its dump
// (Machine.kdump after the NMI that panicked it). Called under the lock.
func (w *World) kdumpReboot(m *Machine, now time.Time) {
	if m.kdumpAt.IsZero() || now.Sub(m.kdumpAt) < m.kdump {
		return
	}
	if k := len(m.dropped); k > 0 && now.Sub(m.dropped[k-1]) <= w.Policy.OwnOffWithin {
		// A reboot this soon after a ForceOff the BMC accepted and
		// dropped reads exactly like the Off we caused (the package
		// doc's premise, as for droppedThenWatchdog's power cycle): the
		// world holds it until ownOffWithin has passed.
		return
	}
	m.kdumpAt = time.Time{}
	truth := m.BMC.Truth()
	if truth.Power != machine.PowerOn || !truth.OSHung {
		return // powered off (our ForceOff) or reset meanwhile
	}
	if m.BMC.Press(machine.ResetForceRestart) == nil {
		w.quirk(faultKdump)
	}
}

// SetKdump sets up the machine's kernel for kdump: an NMI panics it, and it
// reboots d later, its dump written (0: not set up, an NMI changes
// nothing).
func (m *Machine) SetKdump(d time.Duration) {
	m.kdump = d
	m.BMC.SetPanicOnNMI(d > 0)
}

// SetNoNMI makes the machine's BMC refuse diagnostic interrupts (a Redfish
// system that does not list Nmi).
func (m *Machine) SetNoNMI(on bool) { m.noNMI = on }

// diagnosePolicy turns the crash dump before the off on in a third of the
// random scenarios, with a diagnose timeout of 10-50 s, from a generator
// of its own (the other draws of a seed stay what they were). It returns
// what sets the machines up once the nodes exist (nil when off): half the
// kernels set up for kdump (5-40 s to write the dump), a fifth of the BMCs
// without a diagnostic interrupt.
func diagnosePolicy(seed uint64, p *fence.Policy) func(w *World) string {
	rng := rand.New(rand.NewPCG(seed, 0xd1a6e05e))
	if rng.IntN(3) != 0 {
		return nil
	}
	p.DiagnoseBeforeOff = true
	p.DiagnoseTimeout = time.Duration(10+rng.IntN(41)) * time.Second
	return func(w *World) string {
		var kdump, none []string
		for _, n := range w.Nodes {
			if rng.IntN(2) == 0 {
				n.Host.SetKdump(time.Duration(5+rng.IntN(36)) * time.Second)
				kdump = append(kdump, n.Name)
			}
			if rng.IntN(5) == 0 {
				n.Host.SetNoNMI(true)
				none = append(none, n.Name)
			}
		}
		return fmt.Sprintf("diagnoseBeforeOff, diagnoseTimeout %s; kdump on %v; no NMI on %v", p.DiagnoseTimeout, kdump, none)
	}
}
