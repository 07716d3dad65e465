package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/internal/inventory"
	"github.com/bmcfence/bmcfence/pdu"
	"github.com/bmcfence/bmcfence/pdu/snmpsim"
	"github.com/bmcfence/bmcfence/test/testbed"
)

// kubectl fence verify-outlets ties a node's PDU outlets to its machine
// on the running machine and records the proofs the agent reads; status
// then shows the level usable. It asks first, and refuses a machine with a
// single supply before switching anything.
func TestCLIVerifyOutletsRecordsTheProofsAndRefusesASingleSupplyMachine(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	bank, err := e.tb.Mock.Mock.PDUBank("pdu-e2e")
	if err != nil {
		t.Fatal(err)
	}
	a := snmpsim.StartT(t, bank)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pdu-e2e", Namespace: testbed.Namespace},
		StringData: map[string]string{"username": snmpsim.V3User, "password": snmpsim.V3AuthPass, "privPassword": snmpsim.V3PrivPass}}
	if _, err := e.c.CoreV1().Secrets(testbed.Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	outlets := func(ns ...int) string {
		s := "      levels:\n        - outlets:\n"
		for _, n := range ns {
			s += fmt.Sprintf("            - address: %q\n              protocol: snmp\n              outlet: \"%d\"\n              credentialsSecret: pdu-e2e\n"+
				"              snmpVersion: \"3\"\n              authProtocol: SHA\n              privProtocol: AES\n", a.Address(), n)
		}
		return s
	}
	e.tb.NodeConfig = map[string]string{"n1": outlets(1, 2), "n4": outlets(3)}
	t.Cleanup(func() {
		e.tb.NodeConfig = nil
		_ = e.c.CoreV1().Secrets(testbed.Namespace).Delete(context.Background(), "pdu-e2e", metav1.DeleteOptions{})
		_ = e.c.CoreV1().ConfigMaps(testbed.Namespace).Delete(context.Background(), inventory.OutletProofsConfigMap, metav1.DeleteOptions{})
	})

	// Before any proof, status shows the level without one.
	out, _, code := e.kf("status", "n1", "-o", "json")
	if code != 0 || !strings.Contains(out, `"level": 2`) || !strings.Contains(out, `"usable": false`) {
		t.Fatalf("status before the test: exit %d: %s", code, out)
	}
	// No terminal, no --yes: nothing is switched.
	if _, stderr, code := e.kf("verify-outlets", "n1"); code != 2 || !strings.Contains(stderr, "--yes") || len(a.Sets()) != 0 {
		t.Fatalf("without --yes: exit %d, %d SETs: %s", code, len(a.Sets()), stderr)
	}
	out, _, code = e.kf("verify-outlets", "n1", "--yes", "-o", "json")
	var results []struct{ Outlet, PSU, Result string }
	if err := json.Unmarshal([]byte(out), &results); err != nil || code != 0 || len(results) != 2 {
		t.Fatalf("verify-outlets n1: exit %d, %v: %s", code, err, out)
	}
	for i, r := range results {
		if r.Result != "proof recorded" || r.PSU != fmt.Sprint(i+1) {
			t.Errorf("outlet %s: %+v; want its proof recorded, PSU %d", r.Outlet, r, i+1)
		}
	}
	cm, err := e.c.CoreV1().ConfigMaps(testbed.Namespace).Get(ctx, inventory.OutletProofsConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var proofs []pdu.OutletProof
	if err := json.Unmarshal([]byte(cm.Data["n1"]), &proofs); err != nil || len(proofs) != 2 || proofs[0].Machine.UUID != e.tb.Node("n1").UUID {
		t.Errorf("proofs of n1: %v %+v", err, proofs)
	}
	if on, _ := e.tb.MachineOn("n1"); !on {
		t.Error("n1 is not running after the test: it must run on through it")
	}
	out, _, code = e.kf("status", "n1", "-o", "json")
	if code != 0 || !strings.Contains(out, `"usable": true`) {
		t.Errorf("status after the proofs: exit %d: %s", code, out)
	}

	sets := len(a.Sets())
	_, stderr, code := e.kf("verify-outlets", "n4", "--yes")
	if code != 13 || !strings.Contains(stderr, "n4 has 1 power supply reporting") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Errorf("a single-supply machine: exit %d, want 13 and one line: %q", code, stderr)
	}
	if len(a.Sets()) != sets {
		t.Errorf("the single-supply machine's outlet was switched: %v", a.Sets()[sets:])
	}
}
