package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned"
	"github.com/bmcfence/bmcfence/cluster"
)

// kf runs kubectl-fence against the shared cluster with the agent's
// configuration, and returns stdout, stderr and the exit code.
func (e *env) kf(args ...string) (string, string, int) {
	e.t.Helper()
	return e.kfWith("", args...)
}

// kfWith is kf with policy overrides in the configuration it reads.
func (e *env) kfWith(extra string, args ...string) (string, string, int) {
	e.t.Helper()
	cfg, err := e.tb.AgentConfig(extra)
	if err != nil {
		e.t.Fatal(err)
	}
	args = append(args, "--kubeconfig", sharedCP.Kubeconfig(), "--config", cfg)
	cmd := exec.Command(cliBin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("$ kubectl-fence %s → exit %d\n%s%s", strings.Join(args[:len(args)-4], " "), code, out.String(), errOut.String())
	return out.String(), errOut.String(), code
}

// ourWrites describes every field bmcfence's managers (the CLI, the agent)
// own on the node, with when they last wrote it.
func (e *env) ourWrites(node string) string {
	var out []string
	for _, m := range e.node(node).ManagedFields {
		if strings.HasPrefix(m.Manager, "kubectl-fence") || strings.HasPrefix(m.Manager, "bmcfence") {
			out = append(out, fmt.Sprintf("%s %s %s", m.Manager, m.Time, m.FieldsV1.String()))
		}
	}
	return strings.Join(out, "; ")
}

// notReady waits until the node controller marks the node not Ready (a
// fresh CLI has no history: it judges a node by what the API says now).
func (e *env) notReady(node string) {
	e.t.Helper()
	e.waitFor(60*time.Second, node+" not Ready", func() (bool, error) {
		return !cluster.NodeReady(e.node(node)), nil
	})
}

func TestCLIStatusJSON(t *testing.T) {
	e := newEnv(t)
	out, _, code := e.kf("status", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if len(rows) != len(e.tb.Nodes) {
		t.Fatalf("%d rows, want one per node (%d)", len(rows), len(e.tb.Nodes))
	}
	for _, r := range rows {
		for _, k := range []string{"name", "ready", "powerState", "phase", "fenceable"} {
			if _, ok := r[k]; !ok {
				t.Errorf("row %v lacks %q", r["name"], k)
			}
		}
		if r["powerState"] != "On" || r["fenceable"] != true || r["phase"] != "Healthy" {
			t.Errorf("row %v", r)
		}
	}
	// Named nodes: exactly those, whatever their place in the list.
	out, _, _ = e.kf("status", "n2", "n4", "-o", "json")
	rows = nil
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if len(rows) != 2 || rows[0]["name"] != "n2" || rows[1]["name"] != "n4" {
		t.Errorf("status n2 n4 gave %d rows: %v", len(rows), rows)
	}
	if _, _, code := e.kf("status", "n2", "nosuch"); code != 2 {
		t.Errorf("status of a missing node: exit %d, want 2", code)
	}
}

// With no agent running, `fence` drives the engine itself: a node whose
// kubelet died but whose machine runs is powered off, confirmed, tainted.
// Then history shows the evidence, and unfence brings it back.
func TestCLIFenceHistoryUnfenceWithoutAnAgent(t *testing.T) {
	e := newEnv(t)
	if err := e.tb.KubeletStop("n1"); err != nil {
		t.Fatal(err)
	}
	e.notReady("n1")
	// The node's resourceVersion moves with every status write of the
	// controllers; what --dry-run must not change is anything of ours.
	before := e.ourWrites("n1")
	for _, args := range [][]string{
		{"fence", "n1", "--reason", "e2e", "--dry-run"},
		{"confirm", "n1", "--reason", "e2e", "--dry-run"},
		{"abort", "n1", "--dry-run"},
		{"unfence", "n1", "--power-on", "--dry-run"},
	} {
		if _, _, code := e.kf(args...); code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
	}
	if after := e.ourWrites("n1"); after != before {
		t.Fatalf("--dry-run wrote to the node:\nbefore %s\nafter  %s", before, after)
	}
	if e.forceOffsSince("n1") != 0 {
		t.Fatal("--dry-run powered the node off")
	}
	out, _, code := e.kf("fence", "n1", "--reason", "e2e: kubelet dead", "--yes", "-o", "json")
	if code != 0 {
		t.Fatalf("fence: exit %d", code)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r["phase"] != "Fenced" || r["tainted"] != true || !strings.Contains(r["handledBy"].(string), "kubectl-fence") {
		t.Errorf("report = %v", r)
	}
	if on, _ := e.tb.MachineOn("n1"); on || e.forceOffsSince("n1") != 1 {
		t.Errorf("machine on %v after %d ForceOffs; want off after one", on, e.forceOffsSince("n1"))
	}
	out, _, _ = e.kf("history", "n1", "-o", "json")
	var h struct {
		Phase    string           `json:"phase"`
		By       string           `json:"by"`
		Evidence []map[string]any `json:"evidence"`
		Events   []map[string]any `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatal(err)
	}
	if h.Phase != "Fenced" || h.By == "" || len(h.Evidence) < 5 || len(h.Events) == 0 {
		t.Errorf("history = %+v", h)
	}
	e.tb.KubeletStart("n1")
	if _, _, code := e.kf("unfence", "n1", "--power-on", "--yes", "--timeout", "2m"); code != 0 {
		t.Fatalf("unfence: exit %d", code)
	}
	if cluster.HasOutOfServiceTaint(e.node("n1")) {
		t.Error("still tainted after unfence")
	}
}

func TestCLIRefusals(t *testing.T) {
	e := newEnv(t)
	t.Run("a Ready node", func(t *testing.T) {
		if _, errOut, code := e.kf("fence", "n2", "--reason", "test", "--yes", "--timeout", "30s"); code != 8 || !strings.Contains(errOut, "it is alive") {
			t.Errorf("exit %d, stderr %q; want 8 and a refusal saying it is alive", code, errOut)
		}
	})
	// n3 (a lying BMC, kubelet dead) and n4 (a hung BMC, power lost) fail
	// together, so the controller-manager's grace period is waited out once.
	if err := e.tb.SetFaults("n3", redfishmock.Faults{IgnoreCommands: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.tb.KubeletStop("n3"); err != nil {
		t.Fatal(err)
	}
	if err := e.tb.SetFaults("n4", redfishmock.Faults{Hang: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.tb.PowerLoss("n4"); err != nil {
		t.Fatal(err)
	}
	t.Run("a lying BMC", func(t *testing.T) {
		e.notReady("n3")
		short := "policy:\n  powerTimeout: 10s\n  powerOffAttempts: 2\n"
		_, errOut, code := e.kfWith(short, "fence", "n3", "--reason", "test", "--yes", "--timeout", "2m")
		if code != 7 || !strings.Contains(errOut, "never read Off") {
			t.Errorf("exit %d, stderr %q; want 7", code, errOut)
		}
		if cluster.HasOutOfServiceTaint(e.node("n3")) {
			t.Error("tainted through a lying BMC")
		}
	})
	t.Run("an unreachable BMC", func(t *testing.T) {
		e.notReady("n4")
		_, errOut, code := e.kf("fence", "n4", "--reason", "test", "--yes", "--timeout", "40s")
		if code != 4 || !strings.Contains(errOut, "cannot be read") {
			t.Errorf("exit %d, stderr %q; want 4", code, errOut)
		}
		// A human who checked attests it is off instead.
		if _, _, code := e.kf("confirm", "n4", "--reason", "checked the rack", "--yes", "--timeout", "1m"); code != 0 {
			t.Errorf("confirm: exit %d", code)
		}
		if !cluster.HasOutOfServiceTaint(e.node("n4")) || !e.hasEvent("n4", "FenceConfirmedByHuman") {
			t.Error("confirm did not taint with the human's attestation")
		}
	})
	t.Run("not our taint", func(t *testing.T) {
		e.addForeignTaint("n5")
		if _, _, code := e.kf("unfence", "n5", "--yes", "--timeout", "30s"); code != 8 {
			t.Errorf("unfence of a foreign taint: exit %d, want 8", code)
		}
		if !cluster.HasOutOfServiceTaint(e.node("n5")) {
			t.Error("someone else's taint was removed")
		}
	})
}

// With the agent running, the CLI hands the request to it instead of racing
// it, and reports what the agent did.
func TestCLIHandsTheRequestToARunningAgent(t *testing.T) {
	e := newEnv(t)
	a := e.agent("a1", "")
	e.waitFor(30*time.Second, "the agent leading", func() (bool, error) { return a.Leading(), nil })
	if err := e.tb.PowerLoss("n2"); err != nil {
		t.Fatal(err)
	}
	e.notReady("n2")
	out, _, code := e.kf("fence", "n2", "--reason", "handoff", "--yes", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out, `"handledBy": "the bmcfence agent a1"`) {
		t.Errorf("report: %s", out)
	}
	reqs, err := e.fencing().FencingV1alpha1().BMCFenceRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var taken bool
	for _, r := range reqs.Items {
		if r.Spec.NodeName == "n2" && r.Spec.Action == v1alpha1.ActionFence && r.Spec.Reason == "handoff" {
			taken = r.Status.Outcome == v1alpha1.OutcomeTaken && r.Spec.RequestedBy != ""
			t.Logf("request %s by %s: %s (%s)", r.Name, r.Spec.RequestedBy, r.Status.Outcome, r.Status.Message)
		}
	}
	if !taken {
		t.Error("no BMCFenceRequest for n2 taken by the agent")
	}
}

// Requests are authenticated by the API server: a user who can only patch
// Nodes writes the old request annotation and nothing happens; an operator
// (bmcfence-operator) cannot confirm, and is told which grant is missing;
// nobody can write a request in someone else's name.
func TestCLIRequestsAreAuthenticated(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// The agent fences nothing by its own detection here: only an
	// authenticated request or a remediation CR could start a fence.
	e.agent("a1", "detection: external\n")
	rbac := e.c.RbacV1()
	nodePatcher := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-node-patcher"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "patch"}}}}
	if _, err := rbac.ClusterRoles().Create(ctx, nodePatcher, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for user, role := range map[string]string{"eve": "e2e-node-patcher", "olga": "bmcfence-operator"} {
		b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + user},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
		if _, err := rbac.ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if err := e.tb.PowerLoss("n3"); err != nil {
		t.Fatal(err)
	}
	// 1. Node-patch rights alone: eve writes a fence the old way.
	old := `{"id":"x1","kind":"fence","user":"admin","reason":"trust me","at":"` + time.Now().UTC().Format(time.RFC3339) + `"}`
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, cluster.AnnotationRequest, old)
	if _, err := e.clientAs("eve").CoreV1().Nodes().Patch(ctx, "n3", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("eve patches the node: %v", err)
	}
	if !e.hasEvent("n3", "FenceRequestInvalid") {
		t.Errorf("no FenceRequestInvalid Event for the annotation; events: %v", e.events("n3"))
	}
	// 2. olga may fence but not confirm: the API server names the grant.
	_, errOut, code := e.kf("confirm", "n3", "--reason", "I pulled it", "--yes", "--as", "olga")
	if code == 0 || !strings.Contains(errOut, "bmcfence-attester") {
		t.Errorf("confirm by an operator: exit %d, stderr %q; want a refusal naming bmcfence-attester", code, errOut)
	}
	// 3. Nobody writes a request in someone else's name.
	forged := &v1alpha1.BMCFenceRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "n3-fence-"},
		Spec: v1alpha1.BMCFenceRequestSpec{NodeName: "n3", Action: v1alpha1.ActionFence, RequestedBy: "alice"}}
	_, err := e.fencingAs("olga").FencingV1alpha1().BMCFenceRequests().Create(ctx, forged, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "requestedBy must be your own user name, olga") {
		t.Errorf("a request by olga in alice's name: %v; want refused", err)
	}
	// eve's annotation asked for a fence of a node whose machine is off:
	// nothing may come of it.
	e.neverTainted("n3", 40*time.Second)
}

func TestCLIPowerThroughTheInventory(t *testing.T) {
	e := newEnv(t)
	out, _, code := e.kf("power", "status", "n6", "-o", "json")
	if code != 0 || !strings.Contains(out, `"powerState": "On"`) {
		t.Fatalf("power status (IPMI): exit %d: %s", code, out)
	}
	if _, _, code := e.kf("power", "off", "n5", "--yes", "--dry-run"); code != 0 || e.forceOffsSince("n5") != 0 {
		t.Fatalf("power off --dry-run: exit %d, %d ForceOffs sent", code, e.forceOffsSince("n5"))
	}
	if _, _, code := e.kf("power", "cycle", "n5", "--yes"); code != 0 {
		t.Fatalf("power cycle: exit %d", code)
	}
	if e.forceOffsSince("n5") != 1 {
		t.Errorf("%d ForceOffs, want 1", e.forceOffsSince("n5"))
	}
	if on, _ := e.tb.MachineOn("n5"); !on {
		t.Error("n5 is not back on after a cycle")
	}
}

// check passes on the e2e cluster once the agent's manifests are applied:
// every BMC answers with its credentials, TLS is verified, identities match.
func TestCLICheck(t *testing.T) {
	e := newEnv(t)
	kubectl := sharedCP.BinDir() + "/kubectl"
	rendered, err := exec.Command(kubectl, "kustomize", "../../deploy/base").Output()
	if err != nil {
		t.Fatal(err)
	}
	apply := exec.Command(kubectl, "--kubeconfig", sharedCP.Kubeconfig(), "apply", "--server-side", "-f", "-")
	apply.Stdin = bytes.NewReader(rendered)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("applying deploy/base: %v\n%s", err, out)
	}
	var results []struct{ Scope, Check, Status, Message string }
	// RBAC takes a moment to apply in the API server's authorizer.
	e.waitFor(30*time.Second, "check to pass", func() (bool, error) {
		out, _, code := e.kf("check", "-o", "json")
		results = nil
		if err := json.Unmarshal([]byte(out), &results); err != nil {
			return false, err
		}
		return code == 0, nil
	})
	seen := map[string]bool{}
	for _, r := range results {
		if r.Status == "fail" {
			t.Errorf("%s %s: %s", r.Scope, r.Check, r.Message)
		}
		if r.Check == "identity" && r.Scope != "node/n6" && r.Status != "ok" {
			t.Errorf("%s identity: %s %s", r.Scope, r.Status, r.Message)
		}
		seen[r.Scope] = true
	}
	for _, n := range e.tb.Nodes {
		if !seen["node/"+n.Name] {
			t.Errorf("no result for %s", n.Name)
		}
	}
}

// TestCLIDrainPowerOffIsNeverFenced is planned maintenance end to end, with
// the agent running: the plan names every pod, the drain moves a StatefulSet
// pod with its volume, the node is powered off and confirmed Off, and the
// agent, which sees a NotReady node whose BMC reads Off (exactly what it
// fences), leaves it alone because it is in maintenance. Undrain brings it
// back without a taint ever being applied.
func TestCLIDrainPowerOffIsNeverFenced(t *testing.T) {
	e := newEnv(t)
	a := e.agent("a1", "")
	e.waitFor(30*time.Second, "the agent leading", func() (bool, error) { return a.Leading(), nil })
	node := e.statefulSet("maint", "web")

	out, _, code := e.kf("drain", node, "--dry-run", "-o", "json")
	if code != 0 {
		t.Fatalf("drain --dry-run: exit %d", code)
	}
	var plan struct {
		Pods []struct {
			Pod, Owner, Action, Reason string
			Bound                      *struct {
				Replicas     int32
				MinAvailable *int32
				Rule         string
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range plan.Pods {
		if p.Pod == "" || p.Action == "" || p.Reason == "" {
			t.Errorf("plan entry missing a field: %+v", p)
		}
		if p.Pod == "maint/web-0" {
			found = true
			if p.Owner != "StatefulSet/web" || p.Action != "evict-one-at-a-time" {
				t.Errorf("web-0 planned as %+v", p)
			}
			// The bound the drain keeps: one pod at a time.
			if b := p.Bound; b == nil || b.MinAvailable == nil || *b.MinAvailable != b.Replicas-1 || b.Rule == "" {
				t.Errorf("web-0's bound: %+v, want replicas − 1", b)
			}
		}
	}
	if !found {
		t.Fatalf("maint/web-0 not in the plan: %s", out)
	}
	out, _, _ = e.kf("drain", node, "--dry-run")
	if !regexp.MustCompile(`maint/web-0 +StatefulSet/web +evict-one-at-a-time +≥\d+ of \d+ available +n\d`).MatchString(out) {
		t.Errorf("the plan table lacks web-0's row:\n%s", out)
	}
	if n := e.node(node); n.Spec.Unschedulable || n.Annotations[cluster.AnnotationMaintenance] != "" {
		t.Fatal("--dry-run cordoned the node or marked it in maintenance")
	}

	out, _, code = e.kf("drain", node, "--reason", "e2e: DIMM swap", "--power-off", "--yes", "--timeout", "2m", "-o", "json")
	if code != 0 {
		t.Fatalf("drain --power-off: exit %d", code)
	}
	var res struct {
		Report   struct{ Complete bool }
		PowerOff struct {
			Confirmed  bool
			PowerState string
		}
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if !res.Report.Complete || !res.PowerOff.Confirmed || res.PowerOff.PowerState != "Off" {
		t.Fatalf("drain result: %s", out)
	}
	e.podMovedOff("maint", "web-0", node, time.Minute)
	if on, _ := e.tb.MachineOn(node); on {
		t.Fatal("the machine is still on after drain --power-off")
	}

	// Now the node looks exactly like a dead one: NotReady, BMC Off. The
	// agent fences that in ~25 s; in maintenance it must not.
	e.notReady(node)
	e.neverTainted(node, 30*time.Second)
	if got := e.forceOffsSince(node); got != 1 {
		t.Errorf("%d ForceOffs, want 1 (the drain's)", got)
	}
	if p := e.phase(node); p != "Maintenance" {
		t.Errorf("agent phase = %s, want Maintenance", p)
	}
	out, _, _ = e.kf("status", node, "-o", "json")
	if !strings.Contains(out, `"maintenance": true`) || !strings.Contains(out, `"phase": "Maintenance"`) {
		t.Errorf("status does not show the maintenance: %s", out)
	}

	if _, _, code := e.kf("undrain", node, "--power-on", "--yes", "--timeout", "2m"); code != 0 {
		t.Fatalf("undrain: exit %d", code)
	}
	n := e.node(node)
	if n.Spec.Unschedulable || n.Annotations[cluster.AnnotationMaintenance] != "" || cluster.HasOutOfServiceTaint(n) {
		t.Errorf("after undrain: unschedulable=%v maintenance=%q tainted=%v", n.Spec.Unschedulable, n.Annotations[cluster.AnnotationMaintenance], cluster.HasOutOfServiceTaint(n))
	}
	for _, r := range []string{"DrainStarted", "DrainCompleted", "Undrained"} {
		if !e.hasEvent(node, r) {
			t.Errorf("no %s Event on %s (have %v)", r, node, e.events(node))
		}
	}
}

// TestCLIAbortStopsTheAgentBeforePowerOff: the agent suspects a node whose
// kubelet died (its machine runs) and waits out fenceAfter; an abort handed
// to it ends the fence with no power-off and no taint, and the node, once
// back, is Healthy again.
func TestCLIAbortStopsTheAgentBeforePowerOff(t *testing.T) {
	e := newEnv(t)
	// fenceAfter 60 s: the suspicion (its machine reading On) is written
	// once it lasted suspectAfter, at 40 s of silence (docs/safety.md,
	// "Unsaved suspicions"); the abort comes before the ForceOff at 60 s.
	a := e.agent("a1", "policy:\n  fenceAfter: 60s\n")
	e.waitFor(30*time.Second, "the agent leading", func() (bool, error) { return a.Leading(), nil })
	if err := e.tb.KubeletStop("n5"); err != nil {
		t.Fatal(err)
	}
	e.waitFor(75*time.Second, "the agent suspecting n5", func() (bool, error) { return e.phase("n5") != "Healthy", nil })
	out, _, code := e.kf("abort", "n5", "--reason", "e2e: kernel debugging, leave it", "-o", "json")
	if code != 0 {
		t.Fatalf("abort: exit %d", code)
	}
	if !strings.Contains(out, `"phase": "Stuck"`) || !strings.Contains(out, `"handledBy": "the bmcfence agent a1"`) {
		t.Errorf("abort report: %s", out)
	}
	// Past fenceAfter and a settle window: nothing happens to the machine.
	e.neverTainted("n5", 25*time.Second)
	if got := e.forceOffsSince("n5"); got != 0 {
		t.Errorf("%d ForceOffs after the abort", got)
	}
	e.tb.KubeletStart("n5")
	e.waitFor(60*time.Second, "n5 Healthy again", func() (bool, error) { return e.phase("n5") == "Healthy", nil })
}

// clientAs is the admin's client impersonating user.
func (e *env) clientAs(user string) kubernetes.Interface {
	e.t.Helper()
	rc := e.tb.CP.RESTConfig()
	rc.Impersonate.UserName = user
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) fencingAs(user string) fencingclient.Interface {
	e.t.Helper()
	rc := e.tb.CP.RESTConfig()
	rc.Impersonate.UserName = user
	c, err := fencingclient.NewForConfig(rc)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// Issue 17, defect 4, on the real control plane: with the admission policy
// deleted and its binding kept, the API server checks nothing (it ignores a
// binding whose policy is missing) and admits a confirm written by an
// operator in an attester's name. The agent refuses it: the request's status
// says why, the node gets a FenceRequestRefused Event and a Refused fence
// record, and nothing is offered to the engine.
func TestForgedRequestIsRefusedWhenOnlyTheBindingExists(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.agent("a1", "detection: external\n")
	b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-olga"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "bmcfence-operator"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "olga"}}}
	if _, err := e.c.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	forged := func() *v1alpha1.BMCFenceRequest {
		return &v1alpha1.BMCFenceRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "n4-confirm-"},
			Spec: v1alpha1.BMCFenceRequestSpec{NodeName: "n4", Action: v1alpha1.ActionConfirm, RequestedBy: "alice", Reason: "trust me"}}
	}
	olga := e.fencingAs("olga").FencingV1alpha1().BMCFenceRequests()
	admitted := func() bool {
		_, err := olga.Create(ctx, forged(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil
	}
	if admitted() {
		t.Fatal("with the policy in force, olga's request in alice's name is admitted")
	}

	// The policy goes; its binding stays.
	if err := e.c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, "bmcfence-request-identity", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Restore it, and wait until the API server enforces it again:
		// the other tests rely on it.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.tb.ApplyAPI(ctx); err != nil {
			t.Errorf("restoring the admission policy: %v", err)
			return
		}
		if err := e.tb.CP.WaitFor(ctx, "the admission policy enforced again", func() (bool, error) { return !admitted(), nil }); err != nil {
			t.Error(err)
		}
	})
	if _, err := e.c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, "bmcfence-request-identity", metav1.GetOptions{}); err != nil {
		t.Fatalf("the binding: %v", err)
	}
	e.waitFor(30*time.Second, "the API server no longer checking requestedBy", func() (bool, error) { return admitted(), nil })

	r, err := olga.Create(ctx, forged(), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the forged request: %v", err)
	}
	var got *v1alpha1.BMCFenceRequest
	e.waitFor(30*time.Second, "the forged request refused", func() (bool, error) {
		got, err = e.fencing().FencingV1alpha1().BMCFenceRequests().Get(ctx, r.Name, metav1.GetOptions{})
		return err == nil && got.Status.Outcome != "" && got.Status.Outcome != v1alpha1.OutcomePending, nil
	})
	t.Logf("request %s: %s: %s (record %s)", got.Name, got.Status.Outcome, got.Status.Message, got.Status.Record)
	if got.Status.Outcome != v1alpha1.OutcomeRefused || !strings.Contains(got.Status.Message, "its binding alone checks nothing") {
		t.Errorf("outcome %s (%s), want Refused saying the policy is missing", got.Status.Outcome, got.Status.Message)
	}
	if !e.hasEvent("n4", "FenceRequestRefused") {
		t.Errorf("no FenceRequestRefused Event on n4; events: %v", e.events("n4"))
	}
	rec, err := e.fencing().FencingV1alpha1().BMCFenceRecords().Get(ctx, got.Status.Record, metav1.GetOptions{})
	if err != nil || rec.Status.Outcome != "Refused" || rec.Spec.NodeName != "n4" {
		t.Errorf("the fence record %q: %v %+v, want a Refused record of n4", got.Status.Record, err, rec)
	}
	if n := e.node("n4"); cluster.HasOutOfServiceTaint(n) || n.Annotations[cluster.AnnotationState] != "" {
		t.Errorf("n4 was acted on: taint %v, state %q", cluster.HasOutOfServiceTaint(n), n.Annotations[cluster.AnnotationState])
	}
}
