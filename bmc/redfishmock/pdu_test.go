package redfishmock_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

// twoPSUMachineOnOnePDU: system 1 has two supplies, fed by outlets A1 and
// A2 of PDU 1; outlet A3 feeds system 2's first supply (its second is
// not on this PDU); A4 is empty.
func twoPSUMachineOnOnePDU() redfishmock.Config {
	return redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(2),
		PDUs: []redfishmock.PDUConfig{{Outlets: []redfishmock.OutletConfig{
			{ID: "A1", Feeds: "1/1"}, {ID: "A2", Feeds: "1/2"}, {ID: "A3", Feeds: "2/1"}, {ID: "A4"},
		}}}}
}

func outletWatts(t testing.TB, h *harness, id string) float64 {
	t.Helper()
	st, err := h.mock.PDU("1")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range st.Outlets {
		if o.ID == id {
			return o.Watts
		}
	}
	t.Fatalf("no outlet %s", id)
	return 0
}

func psuInputs(t testing.TB, h *harness, sys string) []bool {
	t.Helper()
	ps, err := h.mock.PowerSupplies(sys)
	if err != nil {
		t.Fatal(err)
	}
	var out []bool
	for _, p := range ps {
		out = append(out, p.Input)
	}
	return out
}

func TestOneOutletOffShowsThatSuppliesInputLostAndTheMachineRuns(t *testing.T) {
	h := newHarness(t, twoPSUMachineOnOnePDU())
	if w := outletWatts(t, h, "A1"); w != redfishmock.OnWatts/2 {
		t.Errorf("A1 meters %v W while the machine runs on two supplies; want %v", w, redfishmock.OnWatts/2)
	}
	resp := h.do(http.MethodPost, "/redfish/v1/PowerEquipment/RackPDUs/1/Outlets/A1/Actions/Outlet.PowerControl", `{"PowerState":"Off"}`, asAdmin())
	if resp.Code != http.StatusNoContent {
		t.Fatalf("PowerControl Off: %d %s", resp.Code, resp.Body)
	}
	if got := psuInputs(t, h, "1"); got[0] || !got[1] {
		t.Errorf("inputs %v; want the first supply's lost, the second's kept", got)
	}
	if st := h.status("1"); st.PowerState != redfishmock.PowerOn {
		t.Errorf("the machine reads %s; one supply keeps it running", st.PowerState)
	}
	if w := outletWatts(t, h, "A2"); w != redfishmock.OnWatts {
		t.Errorf("A2 carries %v W, want all %v", w, redfishmock.OnWatts)
	}
	// What the BMC says: legacy Power and PowerSubsystem.
	power := h.do(http.MethodGet, "/redfish/v1/Chassis/1/Power", "", asAdmin()).JSON(t)
	ps0 := power["PowerSupplies"].([]any)[0].(map[string]any)
	if st := ps0["Status"].(map[string]any)["State"]; st != "UnavailableOffline" || ps0["LineInputVoltage"] != 0.0 {
		t.Errorf("Power.PowerSupplies[0] = %v; want UnavailableOffline, 0 V", ps0)
	}
	psu1 := h.do(http.MethodGet, "/redfish/v1/Chassis/1/PowerSubsystem/PowerSupplies/1", "", asAdmin()).JSON(t)
	psu2 := h.do(http.MethodGet, "/redfish/v1/Chassis/1/PowerSubsystem/PowerSupplies/2", "", asAdmin()).JSON(t)
	if psu1["LineInputStatus"] != "NoInput" || psu2["LineInputStatus"] != "Normal" {
		t.Errorf("LineInputStatus %v, %v; want NoInput, Normal", psu1["LineInputStatus"], psu2["LineInputStatus"])
	}
	h.do(http.MethodPost, "/redfish/v1/PowerEquipment/RackPDUs/1/Outlets/A1/Actions/Outlet.PowerControl", `{"PowerState":"On"}`, asAdmin())
	if got := psuInputs(t, h, "1"); !got[0] || !got[1] {
		t.Errorf("after On: inputs %v", got)
	}
}

func TestEveryOutletOffKillsTheMachineAndItsBMC(t *testing.T) {
	h := newHarness(t, twoPSUMachineOnOnePDU())
	for _, id := range []string{"A1", "A2"} {
		if err := h.mock.SetOutlet("1", id, redfishmock.PowerOff); err != nil {
			t.Fatal(err)
		}
	}
	if w := outletWatts(t, h, "A1") + outletWatts(t, h, "A2"); w != 0 {
		t.Errorf("a dead machine draws %v W", w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	resp := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin(), withContext(ctx))
	if resp.Code != http.StatusServiceUnavailable || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("the dead BMC answered %d before the client gave up", resp.Code)
	}
	if err := h.mock.SetOutlet("1", "A2", redfishmock.PowerOn); err != nil {
		t.Fatal(err)
	}
	if st := h.status("1"); st.PowerState != redfishmock.PowerOff {
		t.Errorf("power back: the host reads %s, want Off", st.PowerState)
	}
	if w := outletWatts(t, h, "A2"); w != redfishmock.StandbyWatts {
		t.Errorf("an off machine with a live BMC draws %v W, want the standby %v", w, redfishmock.StandbyWatts)
	}
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin()); resp.Code != http.StatusOK {
		t.Errorf("the BMC is back: %d", resp.Code)
	}
}

func TestASystemListsTheOutletsThatPowerIt(t *testing.T) {
	h := newHarness(t, twoPSUMachineOnOnePDU())
	sys := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin()).JSON(t)
	var got []string
	for _, l := range sys["Links"].(map[string]any)["PoweredBy"].([]any) {
		got = append(got, l.(map[string]any)["@odata.id"].(string))
	}
	want := "/redfish/v1/PowerEquipment/RackPDUs/1/Outlets/A1 /redfish/v1/PowerEquipment/RackPDUs/1/Outlets/A2"
	if strings.Join(got, " ") != want {
		t.Errorf("PoweredBy %v", got)
	}
}

func TestRackPDUServesPowerDistributionAndOutlets(t *testing.T) {
	h := newHarness(t, twoPSUMachineOnOnePDU())
	root := h.do(http.MethodGet, "/redfish/v1/", "").JSON(t)
	if root["PowerEquipment"] == nil {
		t.Fatal("the service root has no PowerEquipment")
	}
	pdu := h.do(http.MethodGet, "/redfish/v1/PowerEquipment/RackPDUs/1", "", asAdmin()).JSON(t)
	if pdu["EquipmentType"] != "RackPDU" {
		t.Errorf("EquipmentType %v", pdu["EquipmentType"])
	}
	outlets := h.do(http.MethodGet, "/redfish/v1/PowerEquipment/RackPDUs/1/Outlets", "", asAdmin()).JSON(t)
	if n := outlets["Members@odata.count"]; n != 4.0 {
		t.Errorf("%v outlets", n)
	}
	o := h.do(http.MethodGet, "/redfish/v1/PowerEquipment/RackPDUs/1/Outlets/A4", "", asAdmin()).JSON(t)
	if o["PowerState"] != "On" || o["PowerWatts"].(map[string]any)["Reading"] != 0.0 {
		t.Errorf("an empty outlet: %v", o)
	}
	// A system-scoped user stands for one BMC: it has no PDU.
	cfg := twoPSUMachineOnOnePDU()
	cfg.Systems[0].Username, cfg.Systems[0].Password = "bmc1", "p1"
	h2 := newHarness(t, cfg)
	if resp := h2.do(http.MethodGet, "/redfish/v1/PowerEquipment/RackPDUs/1", "", basic("bmc1", "p1")); resp.Code != http.StatusNotFound {
		t.Errorf("a BMC user sees the PDU: %d", resp.Code)
	}
}

func TestPDUFaults(t *testing.T) {
	tests := []struct {
		name     string
		faults   redfishmock.PDUFaults
		outlet   string
		body     string
		wantCode int
		wantOn   bool
	}{
		{"an accepted off", redfishmock.PDUFaults{}, "A1", `{"PowerState":"Off"}`, http.StatusNoContent, false},
		{"off of an off outlet answers already off", redfishmock.PDUFaults{ConflictWhenOff: true}, "A4", `{"PowerState":"Off"}`, http.StatusConflict, false},
		{"a PDU that accepts and ignores", redfishmock.PDUFaults{IgnoreCommands: true}, "A1", `{"PowerState":"Off"}`, http.StatusNoContent, true},
		{"an unknown PowerState", redfishmock.PDUFaults{}, "A1", `{"PowerState":"Sideways"}`, http.StatusBadRequest, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, twoPSUMachineOnOnePDU())
			if tt.outlet == "A4" {
				_ = h.mock.SetOutlet("1", "A4", redfishmock.PowerOff)
			}
			if err := h.mock.SetPDUFaults("1", tt.faults); err != nil {
				t.Fatal(err)
			}
			resp := h.do(http.MethodPost, "/redfish/v1/PowerEquipment/RackPDUs/1/Outlets/"+tt.outlet+"/Actions/Outlet.PowerControl", tt.body, asAdmin())
			if resp.Code != tt.wantCode {
				t.Errorf("%d %s, want %d", resp.Code, resp.Body, tt.wantCode)
			}
			st, _ := h.mock.PDU("1")
			for _, o := range st.Outlets {
				if o.ID == tt.outlet && (o.PowerState == redfishmock.PowerOn) != tt.wantOn {
					t.Errorf("outlet reads %s", o.PowerState)
				}
			}
		})
	}
}

func TestPDUConfigProblemsAreNamed(t *testing.T) {
	tests := []struct {
		feeds string
		want  string
	}{
		{"1", "want SYSTEM/N"},
		{"9/1", `no system "9"`},
		{"1/3", "power supplies 1..2, not 3"},
	}
	for _, tt := range tests {
		cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1),
			PDUs: []redfishmock.PDUConfig{{Outlets: []redfishmock.OutletConfig{{Feeds: tt.feeds}}}}}
		_, err := redfishmock.New(cfg)
		if !errors.Is(err, redfishmock.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "pdus[0].outlets[0].feeds") {
			t.Errorf("feeds %q: %v; want it named with %q", tt.feeds, err, tt.want)
		}
	}
}

func TestASingleSupplyMachineDiesWithItsOutlet(t *testing.T) {
	cfg := redfishmock.Config{Username: adminUser, Password: adminPass,
		Systems: []redfishmock.SystemConfig{{PowerSupplies: 1}},
		PDUs:    []redfishmock.PDUConfig{{Outlets: []redfishmock.OutletConfig{{Feeds: "1/1"}}}}}
	h := newHarness(t, cfg)
	bank, err := h.mock.PDUBank("1")
	if err != nil {
		t.Fatal(err)
	}
	if err := bank.SetOutlet(1, false); err != nil {
		t.Fatal(err)
	}
	if st := h.status("1"); st.PowerState != redfishmock.PowerOff {
		t.Errorf("reads %s", st.PowerState)
	}
	if _, on, w, _ := bank.Outlet(1); on || w != 0 {
		t.Errorf("outlet on=%v %d W", on, w)
	}
}

func TestFailedSuppliesKillTheMachineAndItsBMCWithTheOutletsOnAndDrawless(t *testing.T) {
	h := newHarness(t, twoPSUMachineOnOnePDU())
	if err := h.mock.FailSupplies("1", true); err != nil {
		t.Fatal(err)
	}
	if st := h.status("1"); st.PowerState != redfishmock.PowerOff {
		t.Errorf("failed supplies: the host reads %s, want Off", st.PowerState)
	}
	st, err := h.mock.PDU("1")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range st.Outlets[:2] {
		if o.PowerState != redfishmock.PowerOn || o.Watts != 0 {
			t.Errorf("outlet %s: %s, %v W; want On and 0 W (nothing draws)", o.ID, o.PowerState, o.Watts)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin(), withContext(ctx)); resp.Code != http.StatusServiceUnavailable {
		t.Errorf("the BMC of a machine whose supplies failed answered %d", resp.Code)
	}
	// Switching the outlets does not revive it; a repair does.
	if err := h.mock.SetOutlet("1", "A1", redfishmock.PowerOff); err != nil {
		t.Fatal(err)
	}
	if err := h.mock.SetOutlet("1", "A1", redfishmock.PowerOn); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin(), withContext(ctx2)); resp.Code != http.StatusServiceUnavailable {
		t.Errorf("an outlet cycled revived a machine whose supplies failed: %d", resp.Code)
	}
	if err := h.mock.FailSupplies("1", false); err != nil {
		t.Fatal(err)
	}
	if resp := h.do(http.MethodGet, "/redfish/v1/Systems/1", "", asAdmin()); resp.Code != http.StatusOK {
		t.Errorf("repaired: the BMC answers %d", resp.Code)
	}
	if w := outletWatts(t, h, "A1"); w != redfishmock.StandbyWatts/2 {
		t.Errorf("repaired, off: A1 meters %v W, want %v", w, redfishmock.StandbyWatts/2)
	}
}
