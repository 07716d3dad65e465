package deploy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bmcfence/bmcfence/test/controlplane"
	"github.com/bmcfence/bmcfence/test/testbed"
)

const ns = "bmcfence-system"

// The chart installs on a real control plane (kwok nodes: one control-plane
// node as kubeadm labels it, one as k3s does, one worker) and the DaemonSet
// comes up Ready on exactly the control-plane nodes. Then the real agent
// runs with the chart's configuration and as the chart's ServiceAccount (so
// with exactly its RBAC), becomes Ready and leads, and serves /metrics only
// to a token bound to the chart's metrics reader.
func TestChartInstallsOnAControlPlane(t *testing.T) {
	helm, root := helmBin(t)
	cp := controlplane.StartT(t, controlplane.Options{Nodes: []controlplane.NodeSpec{
		{Name: "cp-kubeadm", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}},
		{Name: "cp-k3s", Labels: map[string]string{"node-role.kubernetes.io/control-plane": "true"}},
		{Name: "worker"},
	}})
	c := cp.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := c.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	run(t, helm, "install", "bmcfence", filepath.Join(root, "charts", "bmcfence"), "--kubeconfig", cp.Kubeconfig(),
		"--namespace", ns, "--create-namespace", "--wait", "--timeout", "3m",
		"--set", "metrics.readers[0].kind=ServiceAccount", "--set", "metrics.readers[0].name=prometheus", "--set", "metrics.readers[0].namespace=default")
	t.Logf("helm install --wait: %s", time.Since(start).Round(100*time.Millisecond))

	ds, err := c.AppsV1().DaemonSets(ns).Get(ctx, "bmcfence-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Status.DesiredNumberScheduled != 2 || ds.Status.NumberReady != 2 {
		t.Errorf("DaemonSet: %d desired, %d ready; want 2 and 2 (the two control-plane nodes)", ds.Status.DesiredNumberScheduled, ds.Status.NumberReady)
	}
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=bmcfence"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "worker" {
			t.Errorf("pod %s runs on the worker", p.Name)
		}
	}

	// The real agent, with the chart's config and the chart's grants.
	cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "bmcfence-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cm.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	kc := impersonating(t, cp.Kubeconfig(), filepath.Join(dir, "agent.kubeconfig"), "system:serviceaccount:"+ns+":bmcfence-agent")
	bin, err := testbed.BuildAgent(dir)
	if err != nil {
		t.Fatal(err)
	}
	mport, _ := controlplane.FreePort()
	hport, _ := controlplane.FreePort()
	metricsURL := fmt.Sprintf("https://127.0.0.1:%d/metrics", mport)
	health := fmt.Sprintf("http://127.0.0.1:%d/readyz", hport)
	logPath := filepath.Join(dir, "agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	agent := exec.Command(bin, "--config", cfgPath, "--kubeconfig", kc, "--log-format", "json",
		"--metrics-address", fmt.Sprintf("127.0.0.1:%d", mport), "--health-address", fmt.Sprintf("127.0.0.1:%d", hport))
	agent.Stdout, agent.Stderr = logf, logf
	agent.Env = []string{"PATH=" + os.Getenv("PATH"), "POD_NAME=chart-test"}
	agent.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = agent.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = agent.Process.Kill()
			<-done
		}
	})
	body := waitHTTP(t, done, logPath, health, "", func(code int, body string) bool { return code == 200 && strings.Contains(body, "leader") })
	t.Logf("agent: %s", strings.TrimSpace(body))

	// /metrics: no token, a token without the grant, a token with it.
	token := func(sa, namespace string) string {
		tr, err := c.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"the agent's own token, not a reader", token("bmcfence-agent", ns), http.StatusForbidden},
		{"prometheus, bound by metrics.readers", token("prometheus", "default"), http.StatusOK},
	} {
		code, body := httpGet(t, metricsURL, tc.token)
		if code != tc.want {
			t.Errorf("/metrics with %s: %d, want %d (%s)", tc.name, code, tc.want, firstLine(body))
		}
		if code == http.StatusOK && !strings.Contains(body, "bmcfence_build_info") {
			t.Errorf("/metrics: no bmcfence_build_info")
		}
	}
	// Over plain HTTP, even with the reader's token: a 400, no metrics
	// (the token would have crossed the network in clear).
	if code, body := httpGet(t, strings.Replace(metricsURL, "https://", "http://", 1), token("prometheus", "default")); code != http.StatusBadRequest || strings.Contains(body, "bmcfence_build_info") {
		t.Errorf("/metrics over plain HTTP: %d %q, want a 400 and no metrics", code, firstLine(body))
	}
	if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "forbidden") {
		t.Errorf("the agent was refused something the chart should grant:\n%s", b)
	}
}

// impersonating writes a copy of the admin kubeconfig that acts as user.
func impersonating(t *testing.T, admin, path, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range cfg.AuthInfos {
		u.Impersonate = user
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func httpGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// The agent's /metrics certificate is self-signed here (the chart's
	// Secret is not mounted on a local process): encrypted, not verified.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a self-signed certificate
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitHTTP polls url until ok says so, the agent exits, or 60 s pass.
func waitHTTP(t *testing.T, exited <-chan struct{}, logPath, url, token string, ok func(int, string) bool) string {
	t.Helper()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		code, body := httpGet(t, url, token)
		if ok(code, body) {
			return body
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("the agent exited; log:\n%s", b)
		case <-deadline.C:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("%s: %d %q after 60s; log:\n%s", url, code, firstLine(body), b)
		case <-tick.C:
		}
	}
}

func firstLine(s string) string { return strings.SplitN(s, "\n", 2)[0] }

// gkeAdmission is what GKE configures in its API server (and what any
// cluster can, in an AdmissionConfiguration): pods of the system priority
// classes are admitted only in a namespace with a ResourceQuota covering
// their class.
const gkeAdmission = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: ResourceQuota
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: ResourceQuotaConfiguration
      limitedResources:
        - resource: pods
          matchScopes:
            - scopeName: PriorityClass
              operator: In
              values: [system-node-critical, system-cluster-critical]
`

// placement.mode workers installs where the system priority classes are
// limited as on GKE: the API server, configured so, admits the
// Deployment's system-cluster-critical pods in the release's namespace
// (under the chart's ResourceQuota), while it refuses the same pod in a
// namespace without one; the replicas land on two workers, never on the
// control-plane node, under the chart's PodDisruptionBudget.
func TestChartWorkersModeInstallsWhereSystemClassesNeedAQuota(t *testing.T) {
	helm, root := helmBin(t)
	dir := t.TempDir()
	admission := filepath.Join(dir, "admission.yaml")
	if err := os.WriteFile(admission, []byte(gkeAdmission), 0o600); err != nil {
		t.Fatal(err)
	}
	cp := controlplane.StartT(t, controlplane.Options{
		Nodes: []controlplane.NodeSpec{
			{Name: "cp", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}},
			{Name: "w1", Labels: map[string]string{"topology.kubernetes.io/zone": "a"}},
			{Name: "w2", Labels: map[string]string{"topology.kubernetes.io/zone": "b"}},
		},
		ExtraArgs: map[string][]string{"kube-apiserver": {"--admission-control-config-file=" + admission}},
	})
	c := cp.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The API server really limits the class: refused without a quota.
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "critical", Namespace: "default"},
		Spec: corev1.PodSpec{PriorityClassName: "system-cluster-critical",
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "insufficient quota to match these scopes") {
		t.Fatalf("a system-cluster-critical pod in a namespace without a quota: %v; want it refused (the admission configuration is not in effect)", err)
	}

	start := time.Now()
	run(t, helm, "install", "bmcfence", filepath.Join(root, "charts", "bmcfence"), "--kubeconfig", cp.Kubeconfig(),
		"--namespace", ns, "--create-namespace", "--wait", "--timeout", "3m", "--set", "placement.mode=workers")
	t.Logf("helm install --set placement.mode=workers --wait: %s", time.Since(start).Round(100*time.Millisecond))

	d, err := c.AppsV1().Deployments(ns).Get(ctx, "bmcfence-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Status.ReadyReplicas != 2 {
		t.Errorf("Deployment: %d ready replicas, want 2", d.Status.ReadyReplicas)
	}
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=bmcfence"})
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]bool{}
	for _, p := range pods.Items {
		on[p.Spec.NodeName] = true
		if p.Spec.PriorityClassName != "system-cluster-critical" {
			t.Errorf("pod %s has priority class %q", p.Name, p.Spec.PriorityClassName)
		}
	}
	if len(pods.Items) != 2 || !on["w1"] || !on["w2"] {
		t.Errorf("agent pods on %v; want one on each worker", on)
	}
	pdb, err := c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "bmcfence-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pdb.Status.ExpectedPods != 2 || pdb.Status.DisruptionsAllowed != 1 {
		t.Errorf("PodDisruptionBudget: %d expected pods, %d disruptions allowed; want 2 and 1", pdb.Status.ExpectedPods, pdb.Status.DisruptionsAllowed)
	}
}
