package inventory_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
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

// The crash dump before the off on the agent's path, minus Kubernetes: the
// runner, the real inventory and Redfish adapter over HTTPS, and the mock's
// profile, whose system lists Nmi among its ResetTypes (or, for the
// supermicro row, a system configured without it). The node hangs (its
// kubelet stops, its machine reads On): at fenceAfter the mock receives
// ResetType Nmi, then diagnoseTimeout later our ForceOff, and the node is
// fenced. Without Nmi nothing is sent but the ForceOff, at once.
func TestDiagnoseBeforeOffThroughTheRedfishMock(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noNMI  bool
		wantNM int64
	}{{"nmi allowed", false, 1}, {"nmi not allowed", true, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
			p := fence.DefaultPolicy()
			p.FenceAfter = 60 * time.Second
			w := fencesim.NewWorld(t0, p, 1)
			for _, n := range []string{"n1", "n2", "n3"} {
				w.AddNode(n, "a", machine.Timing{})
			}
			const uuid = "4c4c4544-0042-4410-8030-b5c04f4d3132"
			sys := redfishmock.SystemConfig{ID: "1", UUID: uuid}
			if tc.noNMI {
				sys.ResetTypes = []redfishmock.ResetType{"On", "ForceOff", "GracefulShutdown", "ForceRestart"}
			}
			cfg := redfishmock.Config{Username: "admin", Password: "diag-Pa55word", Profile: redfishmock.ProfileOpenBMC,
				Systems: []redfishmock.SystemConfig{sys}}
			srv := redfishmocktest.Start(t, cfg, redfishmock.WithClock(w.Clock))
			client := fake.NewClientset(
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bmc", Namespace: "bmcfence-system"},
					Data: map[string][]byte{"username": []byte("admin"), "password": []byte("diag-Pa55word")}},
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ca", Namespace: "bmcfence-system"}, Data: map[string]string{"ca.crt": string(srv.CAPEM)}})
			on := true
			inv := inventory.New(inventory.Options{
				Config: config.Inventory{Defaults: config.BMCSettings{CredentialsSecret: "bmc", CAConfigMap: "ca", Auth: "basic", CipherSuite: 3,
					DiagnoseBeforeOff: &on, DiagnoseTimeout: 45 * time.Second},
					Nodes: []config.NodeBMC{{Name: "n1", Address: srv.URL, System: "1"}}},
				Namespace: "bmcfence-system", Timeout: 5 * time.Second, Client: clientgo.Wrap(client),
				Nodes: amiNodes{"n1": {ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{SystemUUID: uuid}}}},
			})
			inv.Refresh(context.Background())
			if p := inv.Problems(); len(p) > 0 {
				t.Fatal(p)
			}
			// The kubelet stops (the world's node); the mock's machine runs on.
			w.Node("n1").KubeletEnabled = false
			r, err := runner.New(runner.Options{Policy: w.Policy, Clock: w.Clock, Cluster: fencesim.Cluster{W: w}, Inventory: inv})
			if err != nil {
				t.Fatal(err)
			}
			var nmiAt, offAt time.Time
			for end := w.Clock.Now().Add(5 * time.Minute); w.Clock.Now().Before(end) && w.Node("n1").Taint() != fence.TaintOurs; {
				w.Clock.Step(time.Second)
				w.Advance()
				r.Sync(context.Background(), "n1")
				st, err := srv.Mock.Status("1")
				if err != nil {
					t.Fatal(err)
				}
				if nmiAt.IsZero() && st.Counters.Resets[redfishmock.ResetType("Nmi")] > 0 {
					nmiAt = w.Clock.Now()
				}
				if offAt.IsZero() && st.Counters.Resets[redfishmock.ResetType("ForceOff")] > 0 {
					offAt = w.Clock.Now()
				}
				if st.PowerState == redfishmock.PowerOff {
					// The world's model of the machine follows the
					// mock's, which our ForceOff reached: its oracle
					// judges the taint against it.
					w.Node("n1").BMC.SetPower(false)
				}
			}
			st, _ := srv.Mock.Status("1")
			if got := st.Counters.Resets[redfishmock.ResetType("Nmi")]; got != tc.wantNM {
				t.Fatalf("the mock received %d Nmi resets, want %d; events %v", got, tc.wantNM, nodeEvents(w, "n1"))
			}
			if w.Node("n1").Taint() != fence.TaintOurs || offAt.IsZero() {
				t.Fatalf("n1 not fenced (ForceOff at %v); events %v", offAt, nodeEvents(w, "n1"))
			}
			if tc.noNMI {
				if !strings.Contains(strings.Join(nodeEvents(w, "n1"), " "), "FenceDiagnoseSkipped") {
					t.Errorf("no FenceDiagnoseSkipped; events %v", nodeEvents(w, "n1"))
				}
			} else if d := offAt.Sub(nmiAt); d < 45*time.Second {
				t.Errorf("ForceOff %s after the NMI, want diagnoseTimeout (45s)", d)
			}
			if len(w.Violations) > 0 {
				t.Fatal(w.Violations)
			}
		})
	}
}

func nodeEvents(w *fencesim.World, node string) []string {
	var out []string
	for _, r := range w.Records {
		if r.Node == node && r.Kind == "event" {
			out = append(out, r.Detail)
		}
	}
	return out
}

// fence_redfish's diag action (Debian's fence-agents), an independent
// client, sends the mock the same ResetType Nmi; the power does not change.
func TestFenceRedfishDiagReachesTheMock(t *testing.T) {
	const agent = "/usr/sbin/fence_redfish"
	if _, err := os.Stat(agent); err != nil {
		t.Skip("fence_redfish not found; install the Debian package fence-agents")
	}
	srv := redfishmocktest.Start(t, redfishmock.Config{Username: "admin", Password: "diag-Pa55word", Profile: redfishmock.ProfileOpenBMC,
		Systems: []redfishmock.SystemConfig{{ID: "1", UUID: "4c4c4544-0042-4410-8030-b5c04f4d3132"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, agent)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}
	cmd.Stdin = strings.NewReader(strings.Join([]string{"ip=127.0.0.1", "ipport=" + srv.Port, "username=admin", "password=diag-Pa55word",
		"systems_uri=/redfish/v1/Systems/1", "ssl_insecure=1", "action=diag"}, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fence_redfish diag: %v\n%s", err, out)
	}
	st, err := srv.Mock.Status("1")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Counters.Resets[redfishmock.ResetType("Nmi")]; got != 1 || st.PowerState != redfishmock.PowerOn {
		t.Fatalf("after fence_redfish diag: %d Nmi resets, power %v; want 1, On (%s)", got, st.PowerState, out)
	}
}
