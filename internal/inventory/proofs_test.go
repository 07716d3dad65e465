package inventory

import (
	"context"
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
	"github.com/bmcfence/bmcfence/pdu"
)

// A proof as the identity test records it (with the supplies it read)
// reads back: the agent would otherwise drop it as unreadable.
func TestRecordOutletProofCreatesTheConfigMapAndReplacesTheSameOutletsProof(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	proof := func(outlet, psu string) pdu.OutletProof {
		return pdu.OutletProof{Outlet: pdu.Identity{Device: "snmp://127.0.0.1:161", SerialNumber: "ZA1", OutletID: outlet},
			Machine: bmc.Identity{UUID: "uuid-1"}, PSU: psu,
			Before: []bmc.PowerSupply{{ID: "1", Input: bmc.InputNormal}, {ID: "2", Input: bmc.InputNormal}},
			During: []bmc.PowerSupply{{ID: "1", Input: bmc.InputLost}, {ID: "2", Input: bmc.InputNormal}}}
	}
	for _, p := range []pdu.OutletProof{proof("3", "1"), proof("4", "2"), proof("3", "PSU1")} {
		if err := RecordOutletProof(ctx, clientgo.Wrap(c), ns, "w1", p); err != nil {
			t.Fatal(err)
		}
	}
	cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, OutletProofsConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []pdu.OutletProof
	if err := json.Unmarshal([]byte(cm.Data["w1"]), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Outlet.OutletID != "4" || got[1].Outlet.OutletID != "3" || got[1].PSU != "PSU1" || got[1].During[0].Input != bmc.InputLost {
		t.Errorf("proofs = %+v; want outlet 4's, then outlet 3's newer one", got)
	}
}
