package dial

// Review (issue 20): the service root identifies sushy-tools, not the
// driver behind it. sushy-tools' nova and ironic drivers read every state
// but "running"/"power on" as Off (sushy_tools/emulator/resources/systems/
// novadriver.py get_power_state: PAUSED, SUSPENDED, CRASHED and NOSTATE
// are "Off"; ironicdriver.py: an Ironic power_state of None, Ironic's
// "unknown", is "Off"), and the nova driver's ForceOff does nothing unless
// the instance runs (answered 204 all the same). The mock below plays
// that: the system reads Off (a paused instance; a bare-metal node whose
// BMC Ironic cannot reach) and ignores the ForceOff it accepts. With the
// chassis set aside by the service root alone, the adapter reports an
// accepted ForceOff and a trusted Off: exactly the pair the fence engine
// taints on. The property asserted (an emulator identified only by its
// service root does not make such an Off trusted without the operator's
// chassisPower: ignore) fails on main at a446e5e.

import (
	"context"
	"testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

func TestReviewSushyOffIsNotTrustedOnTheServiceRootAlone(t *testing.T) {
	cfg := mockConfig()
	cfg.Profile = redfishmock.ProfileSushy
	srv := startMock(t, cfg)
	setPower(t, srv.Mock, "1", redfishmock.PowerOff)                      // nova: PAUSED; ironic: power_state None
	setFaults(t, srv.Mock, "1", redfishmock.Faults{IgnoreCommands: true}) // nova: ForceOff of a non-running instance is a no-op
	a := adapterFor(t, srv)
	_, offErr := a.PowerOff(context.Background())
	st := mustPowerStatus(t, a)
	if offErr == nil && st.State == bmc.PowerOff && st.Trusted.ChassisSetAside {
		t.Errorf("accepted ForceOff that changed nothing, then a trusted Off (%s): on sushy-tools' nova or ironic driver this Off may be a paused VM or a machine Ironic cannot read", st.Trusted)
	}
}
