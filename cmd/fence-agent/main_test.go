package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
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
		{"every problem", []string{"validate", "--config", bad}, exitUsage, nil,
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
	for _, p := range checkReferences(context.Background(), clientgo.Wrap(client), cfg) {
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

// transcript runs fence-agent with args (no cluster configured) and returns
// its exit code, its stdout lines and its stderr lines.
func transcript(t *testing.T, args ...string) (code int, stdout, stderr []string) {
	t.Helper()
	t.Setenv("HOME", t.TempDir()) // no ~/.kube/config
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	c, out, errOut := runAgent(t, args...)
	lines := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	}
	return c, lines(out), lines(errOut)
}

// Issue 23: a file with six mistakes took six runs (a type error hid the
// unknown keys, which were shown lower-cased and with no suggestion; a
// duplicate BMC was blamed on both entries; an unbracketed IPv6 address was
// taken as host "fd00:" port 7). One run names all six, one line each, the
// keys as written, and exits 2 as the agent itself would.
func TestValidateReportsEverySixMistakesOfAFileInOneRun(t *testing.T) {
	six := writeConfig(t, `polcy:
  fenceAfter: 1m
policy:
  suspectAftr: 20s
  settleReads: many
inventory:
  nodes:
    - name: w1
      address: https://10.0.0.1
    - name: w2
      address: https://10.0.0.1:443
      credentialSecret: w2-creds
    - name: w3
      address: ipmi://fd00::7
`)
	code, stdout, stderr := transcript(t, "validate", "--config", six)
	want := []string{
		"fence-agent validate: polcy: no such setting; did you mean policy?",
		"fence-agent validate: policy.suspectAftr: no such setting; did you mean suspectAfter?",
		`fence-agent validate: policy.settleReads: "many" is not a whole number`,
		"fence-agent validate: inventory.nodes[1].credentialSecret: no such setting; did you mean credentialsSecret?",
		`fence-agent validate: inventory.nodes[2] (w3): address: invalid BMC target: address "ipmi://fd00::7": an IPv6 address needs brackets: ipmi://[fd00::7] (with a port: ipmi://[fd00::7]:623)`,
		"fence-agent validate: inventory.nodes[1] (w2): address https://10.0.0.1:443 reaches the same BMC as inventory.nodes[0] (w1, https://10.0.0.1): two nodes cannot share a machine's BMC (the agent refuses both until one is fixed)",
	}
	if diff := cmp.Diff(want, stderr); diff != "" {
		t.Errorf("stderr (-want +got):\n%s", diff)
	}
	if code != exitUsage || len(stdout) != 0 {
		t.Errorf("exit %d, stdout %q; want exit %d and nothing on stdout", code, stdout, exitUsage)
	}
}

// Issue 23's other validate transcripts: each message as the user sees it.
func TestValidateTranscripts(t *testing.T) {
	tests := []struct {
		name   string
		config string
		code   int
		stdout []string // exact lines; {{file}} is the config's path
		stderr []string
	}{
		{"a top-level typo names the key, not an empty path", "polcy:\n  fenceAfter: 1m\n", exitUsage, nil,
			[]string{"fence-agent validate: polcy: no such setting; did you mean policy?"}},
		{"an unknown key far from any setting", "inventory:\n  nodes:\n    - {name: w1, address: https://a, colour: blue}\n", exitUsage, nil,
			[]string{"fence-agent validate: inventory.nodes[0].colour: no such setting (configs/agent.example.yaml lists every setting)"}},
		{"a relation to a bad value is not reported as a range that cannot be met", "policy:\n  suspectAfter: 1ns\n", exitUsage, nil,
			[]string{"fence-agent validate: policy.suspectAfter = 1ns: must be between 5s and 1h0m0s"}},
		{"a relation names the setting it depends on", "policy:\n  suspectAfter: 10s\n  maxAPIStaleness: 15s\n", exitUsage, nil,
			[]string{"fence-agent validate: policy.maxAPIStaleness = 15s: must be between 1s and 10s (policy.suspectAfter)"}},
		{"a whole number written as a fraction", "policy:\n  settleReads: 2.5\n", exitUsage, nil,
			[]string{"fence-agent validate: policy.settleReads: 2.5 is not a whole number"}},
		{"a yes for a boolean", "dryRun: yes\n", exitUsage, nil,
			[]string{`fence-agent validate: dryRun: "yes" is not true or false`}},
		{"a list where a mapping belongs", "policy: [1, 2]\n", exitUsage, nil,
			[]string{"fence-agent validate: policy: want a mapping of settings, not a list"}},
		{"three nodes on one BMC: each later entry once, naming the first", "inventory:\n  nodes:\n    - {name: w1, address: HTTPS://BMC.example}\n    - {name: w2, address: https://bmc.example}\n    - {name: w3, address: https://bmc.example:443}\n", exitUsage, nil,
			[]string{
				"fence-agent validate: inventory.nodes[1] (w2): address https://bmc.example reaches the same BMC as inventory.nodes[0] (w1, HTTPS://BMC.example): two nodes cannot share a machine's BMC (the agent refuses both until one is fixed)",
				"fence-agent validate: inventory.nodes[2] (w3): address https://bmc.example:443 reaches the same BMC as inventory.nodes[0] (w1, HTTPS://BMC.example): two nodes cannot share a machine's BMC (the agent refuses both until one is fixed)",
			}},
		{"an empty inventory is valid but warned", "server: {metricsAuth: true}\n", exitOK,
			[]string{
				"ok: {{file}}: 0 inventory nodes, policy and settings valid",
				"warning: inventory: no node is listed (inventory.nodes is empty, inventory.source is configmap, fromAnnotations is off): this agent will never fence anything; list each node with its BMC address",
				"skipped: Secrets and CA ConfigMaps not checked (no cluster configured: no --kubeconfig, not in a cluster, no usable $KUBECONFIG or ~/.kube/config)",
			}, nil},
		{"powerOffNotReadyAfter is a risky setting", "server: {metricsAuth: true}\npolicy: {powerOffNotReadyAfter: 10m}\ninventory:\n  nodes: [{name: w1, address: https://a}]\n", exitOK,
			[]string{
				"ok: {{file}}: 1 inventory nodes, policy and settings valid",
				"warning: policy.powerOffNotReadyAfter = 10m0s: a node NotReady this long is powered off although its kubelet still renews its Lease: the machine, and whatever still runs on it, is cut off",
				"skipped: Secrets and CA ConfigMaps not checked (no cluster configured: no --kubeconfig, not in a cluster, no usable $KUBECONFIG or ~/.kube/config)",
			}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.config)
			code, stdout, stderr := transcript(t, "validate", "--config", path)
			for i := range tt.stdout {
				tt.stdout[i] = strings.ReplaceAll(tt.stdout[i], "{{file}}", path)
			}
			if diff := cmp.Diff(tt.stdout, stdout); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.stderr, stderr); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
			if code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
		})
	}
}

// deploy/base ships an empty inventory: validate says so instead of "ok"
// alone.
func TestValidateWarnsOnDeployBasesOwnConfig(t *testing.T) {
	b, err := os.ReadFile("../../deploy/base/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := sigsyaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, cm.Data["config.yaml"])
	code, stdout, stderr := transcript(t, "validate", "--config", path)
	if code != exitOK || len(stderr) != 0 || len(stdout) < 2 || !strings.HasPrefix(stdout[1], "warning: inventory: no node is listed") {
		t.Errorf("exit %d\nstdout %q\nstderr %q\nwant exit 0 and the empty inventory warned", code, stdout, stderr)
	}
}

// Issue 23: --help printed its usage twice.
func TestHelpPrintsItsUsageOnce(t *testing.T) {
	code, stdout, stderr := runAgent(t, "--help")
	if n := strings.Count(stdout+stderr, "Usage:"); code != exitOK || n != 1 {
		t.Errorf("exit %d, %d usages:\n%s%s", code, n, stdout, stderr)
	}
}
