package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/pflag"

	"github.com/bmcfence/bmcfence/bmc"
)

func loadFile(t *testing.T, yaml string, env []string, args ...string) (Agent, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	RegisterFlags(fs)
	if yaml != "" {
		path := filepath.Join(t.TempDir(), "agent.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", path)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return Load(fs, env)
}

func TestDefaultsAreValid(t *testing.T) {
	a, err := loadFile(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Defaults(), a); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

func TestPrecedenceFileThenEnvThenFlags(t *testing.T) {
	yaml := `
namespace: from-file
dryRun: true
policy:
  fenceAfter: 2m
  settleReads: 4
bmc:
  timeout: 5s
log:
  level: debug
inventory:
  defaults:
    credentialsSecret: shared
  nodes:
    - name: w1
      address: https://10.0.0.11
      system: "1"
    - name: w2
      address: ipmi://10.0.0.12
      credentialsSecret: w2-creds
`
	env := []string{"BMCFENCE_POLICY_FENCEAFTER=3m", "BMCFENCE_NAMESPACE=from-env", "PATH=/bin"}
	a, err := loadFile(t, yaml, env, "--namespace", "from-flag")
	if err != nil {
		t.Fatal(err)
	}
	if a.Namespace != "from-flag" || a.Policy.FenceAfter != 3*time.Minute || a.Policy.SettleReads != 4 || !a.DryRun ||
		a.BMC.Timeout != 5*time.Second || a.Log.Level != "debug" {
		t.Errorf("got namespace %q fenceAfter %s settleReads %d dryRun %v timeout %s level %s",
			a.Namespace, a.Policy.FenceAfter, a.Policy.SettleReads, a.DryRun, a.BMC.Timeout, a.Log.Level)
	}
	if len(a.Inventory.Nodes) != 2 || a.Inventory.Nodes[1].CredentialsSecret != "w2-creds" {
		t.Errorf("nodes = %+v", a.Inventory.Nodes)
	}
	if s := a.Inventory.Nodes[0].Resolved(a.Inventory.Defaults); s.CredentialsSecret != "shared" {
		t.Errorf("w1 resolved = %+v, want the default Secret", s)
	}
}

func TestBadInputNamesTheField(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		want []string
	}{
		{"unknown key", "polcy:\n  fenceAfter: 1m\n", nil, []string{"polcy: no such setting; did you mean policy?"}},
		{"unknown key beside a type error", "policy:\n  settleReads: many\n  fenceAftr: 1m\n", nil, []string{`policy.settleReads: "many" is not a whole number`, "policy.fenceAftr: no such setting; did you mean fenceAfter?"}},
		{"type error in the environment shows the value", "", []string{"BMCFENCE_POLICY_SETTLEREADS=many"}, []string{`policy.settleReads: "many" is not a whole number`}},
		{"two unknown environment variables", "", []string{"BMCFENCE_A=1", "BMCFENCE_B=2"}, []string{"BMCFENCE_A matches no setting", "BMCFENCE_B matches no setting"}},
		{"keys in any case are settings", "Policy:\n  FenceAfter: 1m\n  settlereads: many\n", nil, []string{`Policy.settlereads: "many" is not a whole number`}},
		{"bad duration", "policy:\n  fenceAfter: soon\n", nil, []string{"policy.fenceAfter", `"soon" is not a duration`}},
		{"bare number duration", "policy:\n  suspectAfter: 20\n", nil, []string{"policy.suspectAfter: 20 has no unit: durations need one (20s, 20m"}},
		{"bare number cooldown", "policy:\n  cooldown: 30\n", nil, []string{"policy.cooldown: 30 has no unit"}},
		{"bare number in env", "", []string{"BMCFENCE_BMC_TIMEOUT=10"}, []string{"bmc.timeout: 10 has no unit"}},
		{"bad cipher suite", "inventory:\n  defaults: {cipherSuite: 99}\n", nil, []string{"inventory.defaults.cipherSuite: 99: want 3 or 17"}},
		{"bad cipher suite fallback", "inventory:\n  defaults: {cipherSuiteFallback: 99}\n", nil, []string{"inventory.defaults.cipherSuiteFallback: 99"}},
		// A suite ipmitool offers but bmc/ipmi.New refuses: validation
		// would pass and the node be unfenceable at run time.
		{"cipher suite the client does not speak", "inventory:\n  nodes:\n    - {name: w1, address: ipmi://10.0.0.1, cipherSuite: 1}\n", nil, []string{"inventory.nodes[0].cipherSuite: 1: want 3 or 17"}},
		{"cipher suite fallback the client does not speak", "inventory:\n  defaults: {cipherSuiteFallback: 1}\n  nodes:\n    - {name: w1, address: ipmi://10.0.0.1}\n", nil, []string{"inventory.defaults.cipherSuiteFallback: 1: want 3 or 17"}},
		{"chassis rule set aside by the defaults", "inventory:\n  defaults:\n    chassisPower: ignore\n  nodes:\n    - {name: openbmc-1, address: https://10.0.0.1}\n", nil, []string{"inventory.defaults.chassisPower: ignore is accepted per entry only"}},
		{"chassis rule set aside by the environment", "", []string{"BMCFENCE_INVENTORY_DEFAULTS_CHASSISPOWER=ignore"}, []string{"inventory.defaults.chassisPower: ignore is accepted per entry only"}},
		{"bad chassis power", "inventory:\n  nodes:\n    - {name: w1, address: https://a, chassisPower: never}\n", nil, []string{`chassisPower: "never": want auto, check or ignore`}},
		{"bad uuid", "inventory:\n  nodes:\n    - {name: w1, address: https://a, expectedUUID: not-a-uuid}\n", nil, []string{`inventory.nodes[0].expectedUUID: "not-a-uuid" is not a UUID`}},
		{"bad node name", "inventory:\n  nodes:\n    - {name: Worker_1, address: https://a}\n", nil, []string{`inventory.nodes[0].name: "Worker_1" is not a node name`}},
		{"bad namespace", "namespace: BMC.fence\n", nil, []string{`namespace: "BMC.fence"`}},
		{"bad secret name", "inventory:\n  defaults: {credentialsSecret: My_Secret}\n", nil, []string{`inventory.defaults.credentialsSecret: "My_Secret"`}},
		{"bad metrics address", "server:\n  metricsAddress: not an address\n", nil, []string{`server.metricsAddress: "not an address": want [HOST]:PORT`}},
		{"profiles unauthenticated", "server:\n  pprof: true\n", nil, []string{"server.pprof: the profiles would be served without authentication on :9500"}},
		{"bad health port", "server:\n  healthAddress: \":99999\"\n", nil, []string{`server.healthAddress: ":99999": port "99999"`}},
		{"out of range", "policy:\n  settleReads: 1\n", nil, []string{"policy.settleReads = 1: must be between 2 and 100"}},
		{"bad address", "inventory:\n  nodes:\n    - name: w1\n      address: 10.0.0.1\n", nil, []string{"inventory.nodes[0] (w1): address", "want https://HOST"}},
		{"duplicate node", "inventory:\n  nodes:\n    - {name: w1, address: https://a}\n    - {name: w1, address: https://b}\n", nil, []string{"inventory.nodes[1].name: \"w1\" is also inventory.nodes[0]"}},
		{"no credentials", "inventory:\n  defaults: {credentialsSecret: \"\"}\n  nodes:\n    - {name: w1, address: https://a}\n", nil, []string{"credentialsSecret: no Secret"}},
		{"ipmi with system", "inventory:\n  nodes:\n    - {name: w1, address: ipmi://a, system: \"1\"}\n", nil, []string{"IPMI has no system selection"}},
		{"contradiction", "inventory:\n  nodes:\n    - {name: w1, address: https://a, insecureSkipVerify: true, caConfigMap: ca}\n", nil, []string{"contradict"}},
		{"unknown env", "", []string{"BMCFENCE_FENCE_AFTER=1m"}, []string{"BMCFENCE_FENCE_AFTER matches no setting"}},
		{"bad log level", "log:\n  level: loud\n", nil, []string{"log.level: \"loud\""}},
		{"bad inventory source", "inventory:\n  source: ironic\n", nil, []string{`inventory.source: "ironic": want configmap, metal3 or both`}},
		{"metal3 without namespaces", "inventory:\n  source: metal3\n", nil, []string{"inventory.metal3.namespaces: must name at least one namespace with inventory.source metal3"}},
		{"both without namespaces", "inventory:\n  source: both\n", nil, []string{"inventory.metal3.namespaces: must name at least one namespace with inventory.source both"}},
		{"metal3 namespaces unused", "inventory:\n  metal3: {namespaces: [metal3]}\n", nil, []string{"inventory.metal3.namespaces: set, but inventory.source is configmap"}},
		{"metal3 ignores nodes", "inventory:\n  source: metal3\n  metal3: {namespaces: [metal3]}\n  nodes:\n    - {name: w1, address: https://a}\n", nil, []string{"inventory.nodes: 1 entries would be ignored with inventory.source metal3"}},
		{"metal3 ignores annotations", "inventory:\n  source: metal3\n  fromAnnotations: true\n  metal3: {namespaces: [metal3]}\n", nil, []string{"inventory.fromAnnotations: Node annotations are part of the configmap source"}},
		{"bad metal3 namespace", "inventory:\n  source: metal3\n  metal3: {namespaces: [Metal_3]}\n", nil, []string{`inventory.metal3.namespaces[0]: "Metal_3" is not a namespace name`}},
		{"duplicate metal3 namespace", "inventory:\n  source: metal3\n  metal3: {namespaces: [m3, m3]}\n", nil, []string{`inventory.metal3.namespaces[1]: "m3" is also inventory.metal3.namespaces[0]`}},
		{"leader timings", "leaderElection:\n  renewDeadline: 20s\n", nil, []string{"renewDeadline (20s) < leaseDuration (15s)"}},
		{"unknown detection", "detection: nhc\n", nil, []string{`detection: invalid policy: detection "nhc" (want builtin, external or both)`}},
		{"diagnose timeout too long", "policy:\n  diagnoseTimeout: 11m\n", nil, []string{"policy.diagnoseTimeout = 11m0s: must be more than 0 and at most 10m0s"}},
		{"diagnose without a timeout", "policy:\n  diagnoseBeforeOff: true\n  diagnoseTimeout: 0s\n", nil, []string{"policy.diagnoseTimeout = 0s: must be more than 0 and at most 10m0s"}},
		{"diagnose timeout of the defaults", "inventory:\n  defaults: {diagnoseTimeout: 20m}\n", nil, []string{"inventory.defaults.diagnoseTimeout = 20m0s: must be more than 0 and at most 10m0s (0: the policy's)"}},
		{"diagnose timeout of an entry", "inventory:\n  nodes:\n    - {name: w1, address: https://a, diagnoseTimeout: -1s}\n", nil, []string{"inventory.nodes[0].diagnoseTimeout = -1s: must be more than 0 and at most 10m0s"}},
		{"diagnose not a boolean", "inventory:\n  nodes:\n    - {name: w1, address: https://a, diagnoseBeforeOff: maybe}\n", nil, []string{"inventory.nodes[0].diagnoseBeforeOff"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadFile(t, tt.yaml, tt.env)
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// Every inventory source loads, from the file and from the environment.
func TestInventorySources(t *testing.T) {
	tests := []struct {
		name          string
		yaml          string
		env           []string
		wantSource    string
		wantNS        []string
		configMap, m3 bool
	}{
		{"default", "", nil, SourceConfigMap, nil, true, false},
		{"metal3", "inventory:\n  source: metal3\n  metal3: {namespaces: [metal3]}\n", nil, SourceMetal3, []string{"metal3"}, false, true},
		{"both", "inventory:\n  source: both\n  metal3: {namespaces: [a, b]}\n", nil, SourceBoth, []string{"a", "b"}, true, true},
		{"from the environment", "", []string{"BMCFENCE_INVENTORY_SOURCE=metal3", "BMCFENCE_INVENTORY_METAL3_NAMESPACES=x,y"}, SourceMetal3, []string{"x", "y"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := loadFile(t, tt.yaml, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			got := []any{a.Inventory.Source, a.Inventory.Metal3.Namespaces, a.Inventory.UsesConfigMap(), a.Inventory.UsesMetal3()}
			want := []any{tt.wantSource, tt.wantNS, tt.configMap, tt.m3}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("source, namespaces, uses configmap, uses metal3 (-want +got):\n%s", diff)
			}
		})
	}
}

// The documented example must load and say exactly what the defaults are.
func TestExampleConfigIsTheDefaults(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse([]string{"--config", "../../configs/agent.example.yaml"}); err != nil {
		t.Fatal(err)
	}
	a, err := Load(fs, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want.Inventory.Nodes = []NodeBMC{}
	if diff := cmp.Diff(want, a, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("configs/agent.example.yaml differs from Defaults() (-defaults +example):\n%s", diff)
	}
}

// One run names every problem: decode errors, every policy field out of
// range, and the rest.
func TestEveryErrorAtOnce(t *testing.T) {
	yaml := `
namespace: Not_A_Namespace
policy:
  suspectAfter: 1s
  settleReads: 1
  cooldown: 30
  maxUnhealthyFraction: 2
bmc:
  concurrency: 0
server:
  metricsAddress: nowhere
`
	_, err := loadFile(t, yaml, nil)
	if err == nil {
		t.Fatal("Load succeeded, want errors")
	}
	var got []string
	for _, line := range strings.Split(err.Error(), "\n") {
		got = append(got, strings.SplitN(line, ":", 2)[0])
	}
	want := []string{
		"policy.cooldown",
		"policy.suspectAfter = 1s",
		// Not maxAPIStaleness, whose bound is suspectAfter: issue 23's
		// "must be between 1s and 1ns".
		"policy.settleReads = 1",
		"policy.maxUnhealthyFraction = 2",
		"bmc.concurrency",
		"namespace",
		"server.metricsAddress",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("one line per error (-want +got):\n%s\nerror:\n%v", diff, err)
	}
}

// A cross-field policy rule is reported once; valid values together pass.
func TestPolicyErrorsFollowValidate(t *testing.T) {
	tests := []struct {
		name   string
		yaml   string
		nLines int
	}{
		{"valid together", "policy:\n  suspectAfter: 10m\n  fenceAfter: 20m\n  maxAPIStaleness: 15s\n", 0},
		{"fenceAfter below suspectAfter", "policy:\n  suspectAfter: 10m\n  fenceAfter: 5m\n", 1},
		{"two independent", "policy:\n  settleReads: 1\n  powerOffAttempts: 0\n", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadFile(t, tt.yaml, nil)
			n := 0
			if err != nil {
				n = len(strings.Split(err.Error(), "\n"))
			}
			if n != tt.nLines {
				t.Errorf("%d errors, want %d: %v", n, tt.nLines, err)
			}
		})
	}
}

func TestRisks(t *testing.T) {
	const one = "inventory:\n  nodes: [{name: w1, address: https://a}]\n"
	tests := []struct {
		name string
		yaml string
		args []string
		want []string
	}{
		{"defaults", "", nil, []string{RiskMetricsUnauthenticated, RiskEmptyInventory}},
		{"metrics on loopback", one, []string{"--metrics-address", "127.0.0.1:9500"}, nil},
		{"metrics authenticated", "server: {metricsAuth: true}\n" + one, nil, nil},
		{"dry run and no leader election", "server: {metricsAuth: true}\n" + one, []string{"--dry-run", "--leader-elect=false"}, []string{RiskDryRun, RiskLeaderElectionDisabled}},
		{"insecure default", "server: {metricsAuth: true}\ninventory:\n  defaults: {insecureSkipVerify: true}\n  nodes: [{name: w1, address: https://a}]\n", nil, []string{RiskInsecureSkipVerify}},
		{"insecure node and http node", "server: {metricsAuth: true}\ninventory:\n  nodes:\n    - {name: w1, address: https://a, insecureSkipVerify: true}\n    - {name: w2, address: http://b}\n", nil, []string{RiskInsecureSkipVerify, RiskPlainHTTP}},
		{"from annotations", "server: {metricsAuth: true}\ninventory:\n  fromAnnotations: true\n", nil, []string{RiskFromAnnotations}},
		// Issue 23: neither was said.
		{"power off NotReady nodes that renew", "server: {metricsAuth: true}\npolicy: {powerOffNotReadyAfter: 10m}\n" + one, nil, []string{RiskPowerOffNotReady}},
		{"nothing to fence", "server: {metricsAuth: true}\n", nil, []string{RiskEmptyInventory}},
		{"BareMetalHosts only", "server: {metricsAuth: true}\ninventory: {source: metal3, metal3: {namespaces: [m3]}}\n", nil, nil},
		{"chassis rule set aside", "server: {metricsAuth: true}\ninventory:\n  nodes:\n    - {name: lab-1, address: https://a, chassisPower: ignore}\n    - {name: w2, address: https://b, chassisPower: check}\n", nil, []string{RiskChassisPowerIgnored}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := loadFile(t, tt.yaml, nil, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range a.Risks() {
				got = append(got, r.Setting)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("risks (-want +got):\n%s", diff)
			}
		})
	}
}

// docs/safety.md says the chassis rule is set aside on an unidentified
// service only "when the entry says chassisPower: ignore": a default would
// silently cover every Redfish node, real OpenBMC machines and Metal3
// hosts included, so it is refused there, and an entry's settings never
// inherit it.
func TestChassisRuleIsSetAsideOnlyByTheEntry(t *testing.T) {
	a, err := Parse([]byte("inventory:\n  defaults:\n    chassisPower: ignore\n  nodes:\n    - {name: openbmc-1, address: https://10.0.0.1}\n"))
	if err == nil {
		t.Errorf("inventory.defaults.chassisPower: ignore is accepted (%+v)", a.Inventory.Defaults)
	}
	n := NodeBMC{Name: "openbmc-1", Address: "https://10.0.0.1"}
	d := Defaults().Inventory.Defaults
	d.ChassisPower = string(bmc.ChassisPowerIgnore)
	tg, err := n.Target(d)
	if err != nil {
		t.Fatal(err)
	}
	if tg.ChassisPower == bmc.ChassisPowerIgnore {
		t.Errorf("node %s, whose entry says nothing, takes chassisPower ignore from the defaults", n.Name)
	}
	n.ChassisPower = string(bmc.ChassisPowerIgnore)
	if tg, err := n.Target(Defaults().Inventory.Defaults); err != nil || tg.ChassisPower != bmc.ChassisPowerIgnore {
		t.Errorf("an entry's own chassisPower: ignore: %v, %v", tg.ChassisPower, err)
	}
}

// With BareMetalHosts, the agent's namespace holds no credentials Secret of
// theirs; the defaults' CA ConfigMap verifies their BMCs.
func TestReferencedNamesBySource(t *testing.T) {
	d := BMCSettings{CredentialsSecret: "bmc-credentials", CAConfigMap: "bmc-ca"}
	tests := []struct {
		name                string
		inv                 Inventory
		secrets, configMaps []string
	}{
		{"configmap, nothing listed yet", Inventory{Source: SourceConfigMap, Defaults: d}, []string{"bmc-credentials"}, []string{"bmc-ca"}},
		{"metal3", Inventory{Source: SourceMetal3, Defaults: d}, nil, []string{"bmc-ca"}},
		{"both, nothing listed", Inventory{Source: SourceBoth, Defaults: d}, []string{"bmc-credentials"}, []string{"bmc-ca"}},
		{"both, one node listed", Inventory{Source: SourceBoth, Defaults: d, Nodes: []NodeBMC{{Name: "w1", BMCSettings: BMCSettings{CredentialsSecret: "w1"}}}}, []string{"w1"}, []string{"bmc-ca"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := tt.inv.ReferencedNames()
			if diff := cmp.Diff([][]string{tt.secrets, tt.configMaps}, [][]string{s, c}, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ReferencedNames (-want +got):\n%s", diff)
			}
		})
	}
}

// Profiles are served with metricsAuth, or on a loopback address.
func TestPprofNeedsAuthOrLoopback(t *testing.T) {
	for _, yaml := range []string{
		"server:\n  pprof: true\n  metricsAuth: true\n",
		"server:\n  pprof: true\n  metricsAddress: 127.0.0.1:9500\n",
		"server:\n  pprof: true\n  metricsAddress: \"[::1]:9500\"\n",
	} {
		if _, err := loadFile(t, yaml, nil); err != nil {
			t.Errorf("%q: %v", yaml, err)
		}
	}
}

// The crash dump before the off: an entry's own setting, else
// inventory.defaults', else the policy's; an entry may turn off what the
// defaults turn on.
func TestDiagnoseSettingsMergeEntryThenDefaultsThenPolicy(t *testing.T) {
	a, err := loadFile(t, "policy:\n  diagnoseTimeout: 30s\ninventory:\n  defaults: {diagnoseBeforeOff: true, diagnoseTimeout: 2m}\n  nodes:\n"+
		"    - {name: w1, address: https://a}\n    - {name: w2, address: https://b, diagnoseBeforeOff: false, diagnoseTimeout: 3m}\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Policy.DiagnoseBeforeOff || a.Policy.DiagnoseTimeout != 30*time.Second {
		t.Fatalf("policy: %v %s", a.Policy.DiagnoseBeforeOff, a.Policy.DiagnoseTimeout)
	}
	for i, want := range []struct {
		on bool
		d  time.Duration
	}{{true, 2 * time.Minute}, {false, 3 * time.Minute}} {
		p := a.Inventory.Nodes[i].Resolved(a.Inventory.Defaults).Policy(a.Policy)
		if p.DiagnoseBeforeOff != want.on || p.DiagnoseTimeout != want.d {
			t.Errorf("%s: diagnoseBeforeOff %v, diagnoseTimeout %s; want %v, %s", a.Inventory.Nodes[i].Name, p.DiagnoseBeforeOff, p.DiagnoseTimeout, want.on, want.d)
		}
	}
}

func TestKuredSignalNeedsANamespaceAndAnAnnotation(t *testing.T) {
	_, err := loadFile(t, "plannedReboots:\n  kured:\n    namespace: \"\"\n", nil)
	if err == nil || !strings.Contains(err.Error(), "plannedReboots.kured") {
		t.Fatalf("Load: %v, want an error naming plannedReboots.kured", err)
	}
	a, err := loadFile(t, "plannedReboots:\n  kured:\n    daemonSet: \"\"\n    namespace: \"\"\n", nil)
	if err != nil || a.PlannedReboots.Kured.DaemonSet != "" {
		t.Fatalf("an empty daemonSet (kured off): %v, %+v", err, a.PlannedReboots.Kured)
	}
}
