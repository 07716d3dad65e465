package inventory_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/fencesim"
	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

// The agent's path end to end, minus Kubernetes: the runner, the real
// inventory and Redfish adapter, and the mock's ami-multi profile, whose
// System answers 503 while its host is off. The identity check before the
// taint then finds the UUID read from the system before our ForceOff,
// bound to this BMC and chassis: the fence completes. A BMC whose system
// reports another machine's UUID is still refused before any ForceOff.

type amiNodes map[string]*corev1.Node

func (n amiNodes) NodeObject(name string) (*corev1.Node, bool) { o, ok := n[name]; return o, ok }

func runAMI(t *testing.T, wrongUUID bool) (*fencesim.World, *redfishmocktest.Server) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	w := fencesim.NewWorld(t0, fence.DefaultPolicy(), 1)
	for _, n := range []string{"n1", "n2", "n3"} {
		w.AddNode(n, "a", machine.Timing{})
	}
	const uuid = "4c4c4544-0042-4410-8030-b5c04f4d3132"
	cfg := redfishmock.Config{Username: "admin", Password: "ami-Pa55word", Profile: redfishmock.ProfileAMIMulti,
		Systems: []redfishmock.SystemConfig{{ID: "HGX_Baseboard_0", UUID: "5c5c4544-0042-4410-8030-b5c04f4d3132"}, {ID: "DGX", UUID: uuid}}}
	if wrongUUID {
		cfg.Systems[1].Faults = &redfishmock.Faults{WrongUUID: true}
	}
	srv := redfishmocktest.Start(t, cfg, redfishmock.WithClock(w.Clock))
	client := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bmc", Namespace: "bmcfence-system"},
			Data: map[string][]byte{"username": []byte("admin"), "password": []byte("ami-Pa55word")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ca", Namespace: "bmcfence-system"}, Data: map[string]string{"ca.crt": string(srv.CAPEM)}})
	inv := inventory.New(inventory.Options{
		Config: config.Inventory{Defaults: config.BMCSettings{CredentialsSecret: "bmc", CAConfigMap: "ca", Auth: "basic", CipherSuite: 3},
			Nodes: []config.NodeBMC{{Name: "n1", Address: srv.URL, System: "DGX"}}},
		Namespace: "bmcfence-system", Timeout: 5 * time.Second, Client: clientgo.Wrap(client),
		Nodes: amiNodes{"n1": {ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{SystemUUID: uuid}}}},
	})
	inv.Refresh(context.Background())
	if p := inv.Problems(); len(p) > 0 {
		t.Fatal(p)
	}
	// The host hangs: its kubelet stops renewing; the machine stays on
	// until our ForceOff.
	if err := w.Node("n1").BMC.Event(machine.EventPowerLoss); err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(runner.Options{Policy: w.Policy, Clock: w.Clock, Cluster: fencesim.Cluster{W: w}, Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	for end := w.Clock.Now().Add(8 * time.Minute); w.Clock.Now().Before(end); {
		w.Clock.Step(time.Second)
		w.Advance()
		r.Sync(context.Background(), "n1")
		if w.Node("n1").Taint() == fence.TaintOurs {
			break
		}
	}
	return w, srv
}

func amiEvents(w *fencesim.World) []string {
	var out []string
	for _, r := range w.Records {
		if r.Node == "n1" && r.Kind == "event" {
			out = append(out, r.Detail)
		}
	}
	return out
}

func TestAMIMultiNodeIsFenced(t *testing.T) {
	w, srv := runAMI(t, false)
	st, _ := srv.Mock.Status("DGX")
	if w.Node("n1").Taint() != fence.TaintOurs {
		t.Fatalf("n1 not tainted (BMC reads %s, resets %v); events %v", st.PowerState, st.Counters.Resets, amiEvents(w))
	}
	if st.Counters.Resets[redfishmock.ResetForceOff] == 0 || st.PowerState != redfishmock.PowerOff {
		t.Errorf("resets %v, power %s: want our own ForceOff", st.Counters.Resets, st.PowerState)
	}
	// The Events say whose power the Off was: the chassis, the system
	// being unavailable while its host is off.
	var confirmed string
	for _, r := range w.Records {
		if r.Node == "n1" && r.Kind == "event" && r.Detail == "FenceConfirmedOff" {
			confirmed = r.Msg
		}
	}
	if !strings.Contains(confirmed, "power trusted: chassis: the system answers 503") {
		t.Errorf("FenceConfirmedOff %q does not say whose power it trusted", confirmed)
	}
	if other, _ := srv.Mock.Status("HGX_Baseboard_0"); len(other.Counters.Resets) != 0 {
		t.Errorf("the other system received %v", other.Counters.Resets)
	}
}

func TestAMIMultiWithAnotherMachinesUUIDIsRefused(t *testing.T) {
	w, srv := runAMI(t, true)
	st, _ := srv.Mock.Status("DGX")
	if w.Node("n1").Taint() != fence.TaintAbsent || len(st.Counters.Resets) != 0 {
		t.Fatalf("taint %v, resets %v: a BMC reporting another machine's UUID must get no ForceOff and no taint", w.Node("n1").Taint(), st.Counters.Resets)
	}
	if !slices.Contains(amiEvents(w), "FenceCannotVerify") {
		t.Errorf("events %v, want FenceCannotVerify", amiEvents(w))
	}
}
