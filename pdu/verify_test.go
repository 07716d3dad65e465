package pdu_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfish"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
	"github.com/bmcfence/bmcfence/pdu"
	"github.com/bmcfence/bmcfence/pdu/redfishpdu"
)

var t0 = time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC)

const pass = "verify-Secret-1"

// rack: system 1 (node-a) has two supplies on outlets A1, A2; system 2
// has one supply on B1 and another elsewhere; system 3 has one supply,
// on C1. All on one PDU.
func rack(t *testing.T, clk *clocktesting.FakeClock) *redfishmocktest.Server {
	t.Helper()
	return redfishmocktest.Start(t, redfishmock.Config{Username: "admin", Password: pass,
		Systems: []redfishmock.SystemConfig{{}, {}, {PowerSupplies: 1}},
		PDUs: []redfishmock.PDUConfig{{Outlets: []redfishmock.OutletConfig{
			{ID: "A1", Feeds: "1/1"}, {ID: "A2", Feeds: "1/2"}, {ID: "B1", Feeds: "2/1"}, {ID: "C1", Feeds: "3/1"}, {ID: "D1"},
		}}}}, redfishmock.WithClock(clk))
}

func machine(t *testing.T, srv *redfishmocktest.Server, system string) *redfish.Client {
	t.Helper()
	ep, _ := bmc.ParseAddress(srv.URL)
	c, err := redfish.New(bmc.Target{Address: ep, System: system, CACertificates: srv.CAPEM,
		Credentials: bmc.Credentials{Username: "admin", Password: pass}, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func outlet(t *testing.T, srv *redfishmocktest.Server, id string) *redfishpdu.Client {
	t.Helper()
	ep, _ := bmc.ParseAddress(srv.URL)
	c, err := redfishpdu.New(redfishpdu.Target{Outlet: id, Device: bmc.Target{Address: ep, CACertificates: srv.CAPEM,
		Credentials: bmc.Credentials{Username: "admin", Password: pass}, Timeout: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// stepWhileWaiting advances the fake clock whenever VerifyOutlet waits,
// until done.
func stepWhileWaiting(clk *clocktesting.FakeClock, step time.Duration, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		default:
		}
		if clk.HasWaiters() {
			clk.Step(step)
		}
		time.Sleep(time.Millisecond)
	}
}

func outletOn(t *testing.T, srv *redfishmocktest.Server, id string) bool {
	t.Helper()
	st, err := srv.Mock.PDU("1")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range st.Outlets {
		if o.ID == id {
			return o.PowerState == redfishmock.PowerOn
		}
	}
	t.Fatalf("no outlet %s", id)
	return false
}

func TestVerifyOutletProvesWhichSupplyAnOutletFeeds(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	srv := rack(t, clk)
	proof, err := pdu.VerifyOutlet(context.Background(), machine(t, srv, "1"), outlet(t, srv, "A2"), pdu.VerifyOptions{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if proof.PSU != "2" || proof.Outlet.OutletID != "A2" || proof.Machine.UUID == "" || proof.OutletOff.State != bmc.PowerOff {
		t.Errorf("proof %+v", proof)
	}
	if proof.Off.Sent != "Outlet.PowerControl Off" || proof.On.Sent != "Outlet.PowerControl On" {
		t.Errorf("commands %q, %q", proof.Off.Sent, proof.On.Sent)
	}
	if !outletOn(t, srv, "A2") {
		t.Error("the outlet was left off")
	}
	if st, _ := srv.Mock.Status("1"); st.PowerState != redfishmock.PowerOn {
		t.Errorf("the machine reads %s: the test caused downtime", st.PowerState)
	}
}

func TestVerifyOutletRefusesASingleSupplyMachine(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	srv := rack(t, clk)
	_, err := pdu.VerifyOutlet(context.Background(), machine(t, srv, "3"), outlet(t, srv, "C1"), pdu.VerifyOptions{Clock: clk})
	if !errors.Is(err, pdu.ErrSinglePSU) {
		t.Fatalf("%v", err)
	}
	if st, _ := srv.Mock.Status("3"); st.PowerState != redfishmock.PowerOn || !outletOn(t, srv, "C1") {
		t.Error("something was switched")
	}
}

func TestVerifyOutletOfAnotherMachineFailsAndRestoresIt(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	srv := rack(t, clk)
	done := make(chan struct{})
	go stepWhileWaiting(clk, 2*time.Second, done)
	_, err := pdu.VerifyOutlet(context.Background(), machine(t, srv, "1"), outlet(t, srv, "B1"), pdu.VerifyOptions{Clock: clk, Timeout: 10 * time.Second})
	close(done)
	if !errors.Is(err, pdu.ErrNotThisMachine) {
		t.Fatalf("%v", err)
	}
	if !outletOn(t, srv, "B1") {
		t.Error("the other machine's outlet was left off")
	}
}

func TestVerifyOutletCatchesAPDUThatIgnoresTheOff(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	srv := rack(t, clk)
	_ = srv.Mock.SetPDUFaults("1", redfishmock.PDUFaults{IgnoreCommands: true})
	done := make(chan struct{})
	go stepWhileWaiting(clk, 2*time.Second, done)
	_, err := pdu.VerifyOutlet(context.Background(), machine(t, srv, "1"), outlet(t, srv, "A1"), pdu.VerifyOptions{Clock: clk, Timeout: 10 * time.Second})
	close(done)
	if !errors.Is(err, pdu.ErrPDUIgnored) {
		t.Fatalf("%v", err)
	}
}

func TestVerifyOutletRefusesWhatItCannotInterpret(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*redfishmocktest.Server)
	}{
		{"a supply already without input", func(s *redfishmocktest.Server) { _ = s.Mock.SetOutlet("1", "A2", redfishmock.PowerOff) }},
		{"a machine that is off", func(s *redfishmocktest.Server) { _ = s.Mock.SetPower("1", redfishmock.PowerOff) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			srv := rack(t, clk)
			tt.setup(srv)
			_, err := pdu.VerifyOutlet(context.Background(), machine(t, srv, "1"), outlet(t, srv, "A1"), pdu.VerifyOptions{Clock: clk})
			if !errors.Is(err, pdu.ErrPrecondition) {
				t.Fatalf("%v", err)
			}
			if !outletOn(t, srv, "A1") {
				t.Error("A1 was switched")
			}
		})
	}
}

// lyingMachine wraps a BMC whose supplies report nothing useful after the
// off: the machine reads Off, as if the outlet fed both supplies.
type lyingMachine struct {
	pdu.Machine
	off func() bool
}

func (l lyingMachine) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	if l.off() {
		return bmc.PowerStatus{State: bmc.PowerOff, Raw: "Off"}, nil
	}
	return l.Machine.PowerStatus(ctx)
}

func TestVerifyOutletThatCutsTheMachineStopsAtOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	srv := rack(t, clk)
	m := lyingMachine{Machine: machine(t, srv, "1"), off: func() bool { return !outletOn(t, srv, "A1") }}
	_, err := pdu.VerifyOutlet(context.Background(), m, outlet(t, srv, "A1"), pdu.VerifyOptions{Clock: clk})
	if !errors.Is(err, pdu.ErrLostMachine) {
		t.Fatalf("%v", err)
	}
	if !outletOn(t, srv, "A1") {
		t.Error("the outlet was left off after the machine went dark")
	}
}

// powerDevice is what a fencing level needs of any of its devices: a BMC
// and a PDU outlet answer the same three calls with the same types, so a
// level is a list of devices, not a new engine.
type powerDevice interface {
	PowerStatus(ctx context.Context) (bmc.PowerStatus, error)
	PowerOff(ctx context.Context) (bmc.Result, error)
	PowerOn(ctx context.Context) (bmc.Result, error)
}

var (
	_ powerDevice = bmc.Controller(nil)
	_ powerDevice = pdu.Outlet(nil)
	_ pdu.Machine = (*redfish.Client)(nil)
)

// losingMachine wraps a BMC and reports the named supplies' input lost
// while lost() holds: what a second cut input, or a loss that is not the
// outlet's doing, looks like from the BMC.
type losingMachine struct {
	pdu.Machine
	ids  []string
	lost func() bool
}

func (l losingMachine) PowerSupplies(ctx context.Context) ([]bmc.PowerSupply, error) {
	ps, err := l.Machine.PowerSupplies(ctx)
	if err != nil || !l.lost() {
		return ps, err
	}
	for i := range ps {
		if slices.Contains(l.ids, ps[i].ID) {
			ps[i].Input, ps[i].Raw = bmc.InputLost, "LineInputStatus=NoInput"
		}
	}
	return ps, nil
}

// An outlet whose off takes two supplies' input does not tell which one it
// feeds: refused, and switched back on.
func TestVerifyOutletRefusesALossOfSeveralSupplies(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	srv := rack(t, clk)
	m := losingMachine{Machine: machine(t, srv, "1"), ids: []string{"2"}, lost: func() bool { return !outletOn(t, srv, "A1") }}
	_, err := pdu.VerifyOutlet(context.Background(), m, outlet(t, srv, "A1"), pdu.VerifyOptions{Clock: clk})
	if !errors.Is(err, pdu.ErrNotThisMachine) || !strings.Contains(err.Error(), "2 supplies lost input at once") {
		t.Fatalf("%v; want ErrNotThisMachine for two supplies lost at once", err)
	}
	if !outletOn(t, srv, "A1") {
		t.Error("the outlet was left off")
	}
}

// switchWatch records the commands sent to an outlet.
type switchWatch struct {
	pdu.Outlet
	off, on *atomic.Bool
}

func (w switchWatch) PowerOff(ctx context.Context) (bmc.Result, error) {
	w.off.Store(true)
	return w.Outlet.PowerOff(ctx)
}

func (w switchWatch) PowerOn(ctx context.Context) (bmc.Result, error) {
	w.on.Store(true)
	return w.Outlet.PowerOn(ctx)
}

// A supply that loses its input after a PDU accepted an off it ignored
// (the outlet still reads On) lost it to something else: the PDU's
// acceptance is no Off, so the outlet is read back and the test refused.
func TestVerifyOutletReadsTheOutletBackAfterTheOff(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	srv := rack(t, clk)
	_ = srv.Mock.SetPDUFaults("1", redfishmock.PDUFaults{IgnoreCommands: true})
	var off, on atomic.Bool
	o := switchWatch{Outlet: outlet(t, srv, "A1"), off: &off, on: &on}
	m := losingMachine{Machine: machine(t, srv, "1"), ids: []string{"1"}, lost: func() bool { return off.Load() && !on.Load() }}
	proof, err := pdu.VerifyOutlet(context.Background(), m, o, pdu.VerifyOptions{Clock: clk})
	if !errors.Is(err, pdu.ErrPrecondition) || !strings.Contains(err.Error(), "not the outlet's doing") {
		t.Fatalf("%v; want the loss refused: the outlet does not read Off", err)
	}
	if proof.OutletOff.State != bmc.PowerOn || !on.Load() {
		t.Errorf("outlet read back %+v, switched back on: %v", proof.OutletOff, on.Load())
	}
}
