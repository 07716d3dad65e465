package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
	"github.com/bmcfence/bmcfence/pdu"
	"github.com/bmcfence/bmcfence/pdu/snmppdu"
	"github.com/bmcfence/bmcfence/pdu/snmpsim"
)

// mixedInventory gives one node the real inventory's controller and the
// others the simulated world's.
type mixedInventory struct {
	real *Inventory
	node string
	sim  fencesim.Cluster
}

func (m mixedInventory) Controller(node string) (runner.PowerController, bool) {
	if node == m.node {
		return m.real.Controller(node)
	}
	return m.sim.Controller(node)
}

type levelCount struct {
	runner.NopRecorder
	levels []string
}

func (l *levelCount) LevelFence(level string) { l.levels = append(l.levels, level) }

// A machine whose supplies failed took its BMC with it: the BMC is
// unreachable, its two outlets on a real snmpd (APC PowerNet-MIB, SNMPv3
// authPriv) are on and meter 0 W. bmcfence fences it through them, each
// with its identity proof or the opt-in, and Debian's fence_apc_snmp, an
// independent client, reads and drives the same outlets.
func TestDeadBMCIsFencedThroughTheSNMPPDU(t *testing.T) {
	if err := snmpsim.Available(); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("fence_apc_snmp"); err != nil {
		t.Skip("fence_apc_snmp not found (Debian: apt-get install fence-agents)")
	}
	bank := snmpsim.NewMemoryBank(8)
	a := snmpsim.StartT(t, bank)
	v3 := []string{"--snmp-version=3", "--username=" + snmpsim.V3User, "--password=" + snmpsim.V3AuthPass, "--snmp-auth-prot=SHA",
		"--snmp-sec-level=authPriv", "--snmp-priv-prot=AES", "--snmp-priv-passwd=" + snmpsim.V3PrivPass}
	if out, code := snmpsim.FenceAPCSNMP(t, a, append(v3, "--plug=3", "--action=status")...); code != 0 || out != "Status: ON" {
		t.Fatalf("fence_apc_snmp status before: %d %q", code, out)
	}

	// The world: three nodes; w1's machine lost power (the cluster side:
	// its kubelet is silent).
	w := fencesim.NewWorld(time.Now().Truncate(time.Second), fence.DefaultPolicy(), 1)
	for _, n := range []string{"w1", "n2", "n3"} {
		w.AddNode(n, "a", machine.Timing{})
	}
	if err := w.Node("w1").BMC.Event(machine.EventPowerLoss); err != nil {
		t.Fatal(err)
	}
	uuid := w.Node("w1").SystemUUID
	lost := w.Clock.Now()

	// The outlet identity proof for outlet 3, as the identity test records
	// it; outlet 4 counts on the opt-in.
	t3 := snmppdu.Target{Host: a.Host, Port: a.Port, Outlet: 3, Version: snmppdu.V3, User: snmpsim.V3User, AuthProtocol: "SHA",
		AuthPassword: bmc.Secret(snmpsim.V3AuthPass), PrivProtocol: "AES", PrivPassword: bmc.Secret(snmpsim.V3PrivPass)}
	c3, err := snmppdu.New(t3)
	if err != nil {
		t.Fatal(err)
	}
	id3, err := c3.OutletIdentity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	proofs, _ := json.Marshal([]pdu.OutletProof{{Outlet: id3, Machine: bmc.Identity{UUID: uuid}, PSU: "PSU1"}})
	pduSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pdu-a", Namespace: ns},
		Data: map[string][]byte{"username": []byte(snmpsim.V3User), "password": []byte(snmpsim.V3AuthPass), "privPassword": []byte(snmpsim.V3PrivPass)}}
	proofCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: OutletProofsConfigMap, Namespace: ns}, Data: map[string]string{"w1": string(proofs)}}
	outlet := func(n string, allow bool) config.Outlet {
		return config.Outlet{Address: a.Address(), Protocol: config.OutletSNMP, Outlet: n, CredentialsSecret: "pdu-a",
			SNMPVersion: "3", AuthProtocol: "SHA", PrivProtocol: "AES", AllowUnverifiedOutlet: allow}
	}
	cfg := config.Inventory{
		Defaults: config.BMCSettings{CredentialsSecret: "bmc"},
		Nodes: []config.NodeBMC{{Name: "w1", Address: "https://10.0.0.1",
			BMCSettings: config.BMCSettings{Levels: []config.Level{{Outlets: []config.Outlet{outlet("3", false), outlet("4", true)}}}}}},
	}
	client := fake.NewClientset(secret("bmc", "admin", "pw"), pduSecret, proofCM)
	dead := func(bmc.Target) (bmc.Controller, error) {
		f := bmctest.New(clocktesting.NewFakeClock(time.Now()))
		f.Fail(bmctest.ErrUnreachableFake)
		return f, nil
	}
	inv := New(Options{Config: cfg, Namespace: ns, Timeout: 3 * time.Second, Client: clientgo.Wrap(client), NewController: dead,
		Nodes: nodes{"w1": node("w1", uuid, nil)}})
	inv.Refresh(context.Background())
	if c, err := inv.Lookup("w1"); err != nil || len(c.Levels()) != 1 {
		t.Fatalf("w1: %v, levels %v", err, c)
	}

	// Without a proof, and without the opt-in, an outlet does not count.
	noProof := New(Options{Config: config.Inventory{Defaults: cfg.Defaults, Nodes: []config.NodeBMC{{Name: "w1", Address: "https://10.0.0.1",
		BMCSettings: config.BMCSettings{Levels: []config.Level{{Outlets: []config.Outlet{outlet("3", false)}}}}}}},
		Namespace: ns, Timeout: 3 * time.Second, Client: clientgo.Wrap(fake.NewClientset(secret("bmc", "admin", "pw"), pduSecret)), NewController: dead,
		Nodes: nodes{"w1": node("w1", uuid, nil)}})
	noProof.Refresh(context.Background())
	if c, err := noProof.Lookup("w1"); err != nil || len(c.Levels()) != 1 {
		t.Fatalf("w1 without proofs: %v", err)
	} else if err := c.Levels()[0].Verify(context.Background()); !errors.Is(err, ErrNoOutletProof) {
		t.Errorf("Verify of an outlet without a proof = %v, want ErrNoOutletProof", err)
	}
	// One outlet listed for two nodes: neither uses its levels.
	twice := config.Inventory{Defaults: cfg.Defaults, Nodes: []config.NodeBMC{
		{Name: "w1", Address: "https://10.0.0.1", BMCSettings: config.BMCSettings{Levels: []config.Level{{Outlets: []config.Outlet{outlet("3", true)}}}}},
		{Name: "w2", Address: "https://10.0.0.2", BMCSettings: config.BMCSettings{Levels: []config.Level{{Outlets: []config.Outlet{outlet("3", true)}}}}},
	}}
	shared := New(Options{Config: twice, Namespace: ns, Timeout: 3 * time.Second, Client: clientgo.Wrap(fake.NewClientset(secret("bmc", "admin", "pw"), pduSecret)),
		NewController: dead, Nodes: nodes{"w1": node("w1", uuid, nil), "w2": node("w2", "uuid-2", nil)}})
	shared.Refresh(context.Background())
	for _, n := range []string{"w1", "w2"} {
		if c, err := shared.Lookup(n); err != nil || len(c.Levels()) != 0 {
			t.Errorf("%s: an outlet listed for two nodes is used (%v)", n, err)
		}
	}

	rec := &levelCount{}
	r, err := runner.New(runner.Options{Policy: w.Policy, Clock: w.Clock, Cluster: fencesim.Cluster{W: w}, Recorder: rec,
		Inventory: mixedInventory{real: inv, node: "w1", sim: fencesim.Cluster{W: w}}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < 90 && w.Node("w1").Taint() != fence.TaintOurs; i++ {
		w.Clock.Step(time.Second)
		w.Advance()
		r.Sync(context.Background(), "w1")
	}
	if w.Node("w1").Taint() != fence.TaintOurs {
		var evs []string
		for _, rec := range w.Records {
			if rec.Node == "w1" && rec.Kind == "event" {
				evs = append(evs, rec.Msg)
			}
		}
		t.Fatalf("w1 not tainted through its outlets; events:\n%s", strings.Join(evs, "\n"))
	}
	t.Logf("tainted through the PDU level after %s simulated since the power loss (%s wall)", w.Clock.Since(lost), time.Since(start).Round(time.Millisecond))
	for _, n := range []int{3, 4} {
		if _, on, _, _ := bank.Outlet(n); on {
			t.Errorf("outlet %d still on after the fence", n)
		}
	}
	if len(rec.levels) != 1 || rec.levels[0] != "2" {
		t.Errorf("fences by level = %v, want [2]", rec.levels)
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
	// The independent client reads what bmcfence did, and drives the same
	// PDU: on, then off, as an operator by hand.
	if out, code := snmpsim.FenceAPCSNMP(t, a, append(v3, "--plug=3", "--action=status")...); code != 2 || out != "Status: OFF" {
		t.Errorf("fence_apc_snmp status after the fence: %d %q (fence agents exit 2 for off)", code, out)
	}
	if _, code := snmpsim.FenceAPCSNMP(t, a, append(v3, "--plug=4", "--action=on")...); code != 0 {
		t.Errorf("fence_apc_snmp on: exit %d", code)
	}
	if out, code := snmpsim.FenceAPCSNMP(t, a, append(v3, "--plug=4", "--action=status")...); code != 0 || out != "Status: ON" {
		t.Errorf("fence_apc_snmp status after on: %d %q", code, out)
	}
	if _, code := snmpsim.FenceAPCSNMP(t, a, append(v3, "--plug=4", "--action=off")...); code != 0 {
		t.Errorf("fence_apc_snmp off: exit %d", code)
	}
	if _, on, _, _ := bank.Outlet(4); on {
		t.Error("outlet 4 on after fence_apc_snmp --action=off")
	}
}
