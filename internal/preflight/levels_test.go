package preflight

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/pdu/snmpsim"
)

// kubectl fence check shows each fencing level, whatever the BMC's checks
// found: an outlet that counts on allowUnverifiedOutlet is a warning that
// says so, one without an identity proof a failure that says the agent
// will not use it.
func TestCheckShowsFencingLevels(t *testing.T) {
	if err := snmpsim.Available(); err != nil {
		t.Skip(err)
	}
	a := snmpsim.StartT(t, snmpsim.NewMemoryBank(8))
	level := func(outlet string, allow bool) func(*config.NodeBMC) {
		return func(e *config.NodeBMC) {
			e.Levels = []config.Level{{Outlets: []config.Outlet{{Address: a.Address(), Protocol: config.OutletSNMP, Outlet: outlet,
				SNMPVersion: "2c", CredentialsSecret: "pdu", AllowUnverifiedOutlet: allow}}}}
		}
	}
	pduSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pdu", Namespace: ns}, Data: map[string][]byte{"community": []byte(snmpsim.WriteCommunity)}}
	o := setup(t, []*corev1.Node{node("w1", withUUID(uuidOf("w1"))), node("w2", withUUID(uuidOf("w2")))},
		[]config.NodeBMC{redfish("w1", level("3", true)), redfish("w2", level("4", false))},
		map[string]bmc.Controller{"w1": failing("w1", bmctest.ErrUnreachableFake), "w2": fakeBMC("w2")}, pduSecret)
	rs := checkNodes(context.Background(), o)
	var w1, w2 *Result
	for i := range rs {
		switch {
		case rs[i].Scope == NodeScope("w1") && rs[i].Check == "level-2":
			w1 = &rs[i]
		case rs[i].Scope == NodeScope("w2") && rs[i].Check == "level-2":
			w2 = &rs[i]
		}
	}
	if w1 == nil || w1.Status != StatusWarn || !strings.Contains(w1.Message, "allowUnverifiedOutlet") || !strings.Contains(w1.Message, "about 0 W") {
		t.Errorf("w1's level (BMC unreachable, outlet on the opt-in):\n%s", messages(rs))
	}
	if w2 == nil || w2.Status != StatusFail || !strings.Contains(w2.Message, "no recorded outlet identity proof") {
		t.Errorf("w2's level (no proof):\n%s", messages(rs))
	}
}
