package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/bmcfence/bmcfence/internal/config"
)

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func runAgent(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, nil, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Every flag or configuration error is a line on stderr and exit 2, before
// anything starts: a typo in a DaemonSet's args must not be a silent
// CrashLoopBackOff.
func TestUsageErrorsAreOneLineEachAndExit2(t *testing.T) {
	bad := writeConfig(t, "policy:\n  settleReads: 1\n  cooldown: 30\ninventory:\n  nodes:\n    - {name: w1, address: 10.0.0.1}\n")
	// Issue 17, defect 7: the defaults' settle window, which every node from
	// a BareMetalHost would get, as long as the unassisted window.
	dwell := writeConfig(t, "inventory:\n  defaults: {settleWindow: 60s}\n")
	tests := []struct {
		name  string
		args  []string
		lines []string // each a substring of one stderr line, in order
	}{
		{"unknown flag", []string{"--bogus"}, []string{"fence-agent: unknown flag: --bogus (fence-agent --help lists the flags)"}},
		{"typo of a known flag", []string{"--dryrun"}, []string{"unknown flag: --dryrun; did you mean --dry-run?"}},
		{"flag without its value", []string{"--config"}, []string{"fence-agent: flag needs an argument: --config"}},
		{"bad flag value", []string{"--leader-elect=maybe"}, []string{`invalid argument "maybe" for "--leader-elect"`}},
		{"stray argument", []string{"run"}, []string{`unexpected argument "run"`}},
		{"every config error", []string{"--config", bad}, []string{
			"fence-agent: policy.cooldown: 30 has no unit",
			"fence-agent: policy.settleReads = 1",
			"fence-agent: inventory.nodes[0] (w1): address",
		}},
		{"a merged policy that settles inside a dwell", []string{"--config", dwell}, []string{
			"fence-agent: inventory.defaults.settleWindow = 1m0s: not shorter than policy.unassistedSettleWindow = 1m0s, so an Off we did not cause could settle inside an off-dwell that long",
		}},
		{"bad listen address flag", []string{"--metrics-address", "not an address"}, []string{`fence-agent: server.metricsAddress: "not an address"`}},
		{"missing config file", []string{"--config", "/nonexistent/agent.yaml"}, []string{"fence-agent: config file /nonexistent/agent.yaml"}},
		{"chassis rule set aside for every node", []string{"--config", writeConfig(t, "inventory:\n  defaults: {chassisPower: ignore}\n")},
			[]string{"fence-agent: inventory.defaults.chassisPower: ignore is accepted per entry only"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runAgent(t, tt.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if len(lines) != len(tt.lines) {
				t.Fatalf("stderr has %d lines, want %d:\n%s", len(lines), len(tt.lines), stderr)
			}
			for i, want := range tt.lines {
				if !strings.Contains(lines[i], want) {
					t.Errorf("line %d %q does not contain %q", i+1, lines[i], want)
				}
			}
		})
	}
}

func TestVersionAndHelp(t *testing.T) {
	code, stdout, _ := runAgent(t, "--version")
	if code != 0 || !strings.HasPrefix(stdout, "fence-agent ") {
		t.Errorf("--version: exit %d, output %q", code, stdout)
	}
	code, _, stderr := runAgent(t, "--help")
	if code != 0 || !strings.Contains(stderr, "fence-agent validate --config FILE") || !strings.Contains(stderr, "--dry-run") {
		t.Errorf("--help: exit %d, output %q", code, stderr)
	}
}

func TestNoClusterIsAnErrorNotACrash(t *testing.T) {
	code, _, _ := runAgent(t, "--kubeconfig", filepath.Join(t.TempDir(), "missing"), "--log-format", "json")
	if code != exitFailed {
		t.Errorf("exit %d, want %d", code, exitFailed)
	}
}

func TestValidateWithoutCluster(t *testing.T) {
	t.Setenv("HOME", t.TempDir()) // no ~/.kube/config
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	good := writeConfig(t, "dryRun: true\ninventory:\n  nodes:\n    - {name: w1, address: http://10.0.0.1}\n    - {name: lab-1, address: https://10.0.0.2, chassisPower: ignore}\n")
	bad := writeConfig(t, "policy:\n  suspectAfter: 20\ninventory:\n  nodes:\n    - {name: w1, address: https://a, expectedUUID: nope}\n")
	tests := []struct {
		name       string
		args       []string
		code       int
		wantOut    []string
		wantErrOut []string
	}{
		{"valid, with its risks", []string{"validate", "--config", good}, 0,
			[]string{"ok: " + good + ": 2 inventory nodes", "warning: dry-run", "warning: http:// BMC addresses (w1)", "warning: chassisPower: ignore (lab-1)", "skipped: Secrets and CA ConfigMaps not checked (no cluster configured"}, nil},
		{"every problem", []string{"validate", "--config", bad}, exitProblems, nil,
			[]string{"policy.suspectAfter: 20 has no unit", `inventory.nodes[0].expectedUUID: "nope" is not a UUID`}},
		{"no config", []string{"validate"}, exitUsage, nil, []string{"--config FILE is required"}},
		{"explicit kubeconfig that does not work", []string{"validate", "--config", good, "--kubeconfig", "/nonexistent"}, exitProblems, nil, []string{"--kubeconfig /nonexistent"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runAgent(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout does not contain %q:\n%s", w, stdout)
				}
			}
			for _, w := range tt.wantErrOut {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, stderr)
				}
			}
		})
	}
}

func TestCheckReferences(t *testing.T) {
	cfg := config.Defaults()
	cfg.Inventory.Nodes = []config.NodeBMC{
		{Name: "w1", Address: "https://a"},
		{Name: "w2", Address: "https://b", BMCSettings: config.BMCSettings{CredentialsSecret: "w2-creds", CAConfigMap: "w2-ca"}},
		{Name: "w3", Address: "https://c", BMCSettings: config.BMCSettings{CredentialsSecret: "w3-creds"}},
	}
	ns := cfg.Namespace
	client := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc-credentials"}, Data: map[string][]byte{"username": []byte("u"), "password": []byte("p")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w2-creds"}, Data: map[string][]byte{"username": []byte("u")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w2-ca"}, Data: map[string]string{"ca.crt": "not a certificate"}},
	)
	var got []string
	for _, p := range checkReferences(context.Background(), client, cfg) {
		got = append(got, p.Error())
	}
	want := []string{
		`Secret bmcfence-system/w2-creds (for w2): key "password" is missing or empty`,
		`Secret bmcfence-system/w3-creds (for w3): not found`,
		`ConfigMap bmcfence-system/w2-ca (for w2): key "ca.crt" holds no PEM certificate`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
