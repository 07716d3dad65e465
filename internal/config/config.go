// Package config holds the agent's configuration and the inventory format
// the agent and the CLI share: defaults, loading (YAML file, BMCFENCE_*
// environment, flags, in that order of precedence), and validation that names
// every bad field and says what to fix.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
)

// Agent is the fence-agent's configuration.
type Agent struct {
	// Namespace holds the agent's Secrets, ConfigMaps and leader Lease.
	Namespace string `mapstructure:"namespace"`
	// Kubeconfig: empty means in-cluster.
	Kubeconfig string `mapstructure:"kubeconfig"`
	// DryRun: read BMCs and decide, change nothing (shadow mode).
	DryRun bool `mapstructure:"dryRun"`
	// Detection says what may start a fence: builtin (the agent's own view
	// of a silent Lease), external (only a remediation CR of
	// NodeHealthCheck or a MachineHealthCheck) or both. The default,
	// builtin, is the behaviour before the remediation CRs existed.
	// Load copies it into Policy.Detection.
	Detection      string         `mapstructure:"detection"`
	Policy         fence.Policy   `mapstructure:"policy"`
	BMC            BMC            `mapstructure:"bmc"`
	Inventory      Inventory      `mapstructure:"inventory"`
	LeaderElection LeaderElection `mapstructure:"leaderElection"`
	History        History        `mapstructure:"history"`
	Requests       Requests       `mapstructure:"requests"`
	Server         Server         `mapstructure:"server"`
	Log            Log            `mapstructure:"log"`
	PlannedReboots PlannedReboots `mapstructure:"plannedReboots"`
}

// PlannedReboots says where the agent reads the planned-reboot signals of
// other tools (docs/safety.md, "Planned reboots"). NodeMaintenance and
// Cluster API Machines need no setting: they are watched where their CRDs
// are served.
type PlannedReboots struct {
	Kured Kured `mapstructure:"kured"`
}

// Kured is where kured keeps its reboot lock, as kured's own flags
// --ds-namespace, --ds-name and --lock-annotation say. An empty daemonSet
// turns the signal off. The manifests grant reading kube-system/kured
// only: another DaemonSet needs its own grant.
type Kured struct {
	Namespace      string `mapstructure:"namespace"`
	DaemonSet      string `mapstructure:"daemonSet"`
	LockAnnotation string `mapstructure:"lockAnnotation"`
}

// BMC tunes how the agent talks to BMCs.
type BMC struct {
	// Timeout bounds each BMC operation.
	Timeout time.Duration `mapstructure:"timeout"`
	// Concurrency bounds simultaneous BMC calls across all nodes; a
	// quarter of them (at least one) are kept from reads that only watch
	// (fence/runner/slots.go).
	Concurrency int `mapstructure:"concurrency"`
	// ProbeInterval is how often each node's BMC is probed for
	// fenceability (credentials, TLS, reachability, identity): one request
	// per node per interval.
	ProbeInterval time.Duration `mapstructure:"probeInterval"`
}

// Inventory sources: where the node → BMC entries come from.
const (
	// SourceConfigMap: the entries in this file (inventory.nodes, and
	// bmcfence.dev/bmc-* Node annotations with fromAnnotations).
	SourceConfigMap = "configmap"
	// SourceMetal3: Metal3 BareMetalHosts in inventory.metal3.namespaces.
	SourceMetal3 = "metal3"
	// SourceBoth: both; a node listed in this file takes its entry from the
	// file (the operator's word) rather than from its BareMetalHost.
	SourceBoth = "both"
)

// Inventory maps nodes to their BMCs.
type Inventory struct {
	// Source is configmap (default), metal3 or both.
	Source string `mapstructure:"source"`
	// Metal3 says where BareMetalHosts are read from (source metal3 or both).
	Metal3 Metal3 `mapstructure:"metal3"`
	// FromAnnotations also reads bmcfence.dev/bmc-* annotations on Nodes
	// for nodes the file does not list. Off by default: a node can write
	// its own annotations, and a compromised node could point the agent,
	// with its credentials, at a BMC of its choosing.
	FromAnnotations bool        `mapstructure:"fromAnnotations"`
	Defaults        BMCSettings `mapstructure:"defaults"`
	Nodes           []NodeBMC   `mapstructure:"nodes"`
}

// Metal3 configures the BareMetalHost inventory source.
type Metal3 struct {
	// Namespaces holding the BareMetalHosts, their credentials Secrets and,
	// with Cluster API, the Metal3Machines and Machines that tie them to
	// Nodes. Listed explicitly: the agent is granted Secret reads in these
	// namespaces only, never cluster-wide.
	Namespaces []string `mapstructure:"namespaces"`
	// KubeconfigSecret, when set, names a Secret in the agent's namespace
	// whose key "kubeconfig" reaches the cluster that holds the
	// BareMetalHosts (Cluster API usually keeps them in a management
	// cluster, not in the workload cluster the agent fences). The hosts,
	// Metal3Machines, Machines and the hosts' credentials Secrets are then
	// read there, with that kubeconfig's identity; the Nodes stay the
	// agent's own cluster's. Empty: the agent's own cluster.
	KubeconfigSecret string `mapstructure:"kubeconfigSecret"`
}

// KubeconfigKey is the key of inventory.metal3.kubeconfigSecret that holds
// the management cluster's kubeconfig.
const KubeconfigKey = "kubeconfig"

// UsesConfigMap reports whether the file's entries (and annotations) feed
// the inventory.
func (inv Inventory) UsesConfigMap() bool { return inv.Source != SourceMetal3 }

// UsesMetal3 reports whether BareMetalHosts feed the inventory.
func (inv Inventory) UsesMetal3() bool {
	return inv.Source == SourceMetal3 || inv.Source == SourceBoth
}

// BMCSettings are the per-BMC settings a node entry may override.
type BMCSettings struct {
	// CredentialsSecret names a Secret in the agent's namespace with keys
	// "username" and "password".
	CredentialsSecret string `mapstructure:"credentialsSecret"`
	// CAConfigMap names a ConfigMap in the agent's namespace with key
	// "ca.crt" (PEM) that verifies the BMC's certificate.
	CAConfigMap string `mapstructure:"caConfigMap"`
	// InsecureSkipVerify disables TLS verification: only when asked.
	InsecureSkipVerify bool   `mapstructure:"insecureSkipVerify"`
	Auth               string `mapstructure:"auth"`
	CipherSuite        int    `mapstructure:"cipherSuite"`
	// CipherSuiteFallback is the one IPMI suite tried when the BMC refuses
	// CipherSuite (0: none: a BMC that does not offer the suite asked for
	// is refused, never silently downgraded).
	CipherSuiteFallback int `mapstructure:"cipherSuiteFallback"`
	// ChassisPower is the Redfish chassis rule (auto, check, ignore; see
	// bmc.ChassisPower): "ignore" trusts the system's PowerState on a BMC
	// whose chassis never follows the machine (sushy-tools with its
	// libvirt or fake driver, or an emulator the service root does not
	// identify). ignore is accepted on an entry only, never in
	// inventory.defaults, and is a risky setting.
	ChassisPower string `mapstructure:"chassisPower"`
	// SettleWindow and UnassistedSettleWindow override the policy's for
	// these BMCs (0: the policy's): a vendor whose power cycle holds the
	// machine off longer than the policy's unassisted window needs a longer
	// one; a BMC known to accept a ForceOff during a restart's off-dwell
	// and ignore it needs a settle window longer than that dwell.
	SettleWindow           time.Duration `mapstructure:"settleWindow"`
	UnassistedSettleWindow time.Duration `mapstructure:"unassistedSettleWindow"`
	// Levels are the fencing levels below the BMC (levels.go): a node's
	// own list replaces the defaults' whole.
	Levels []Level `mapstructure:"levels"`
	// DiagnoseBeforeOff and DiagnoseTimeout override the policy's for
	// these BMCs (nil and 0: the policy's; an entry's own, else
	// inventory.defaults'): a crash dump (an NMI) before the ForceOff of a
	// hung node, and how long kdump gets to write it (docs/safety.md,
	// "Crash dump before the off").
	DiagnoseBeforeOff *bool         `mapstructure:"diagnoseBeforeOff"`
	DiagnoseTimeout   time.Duration `mapstructure:"diagnoseTimeout"`
}

// NodeBMC is one node's inventory entry.
type NodeBMC struct {
	Name    string `mapstructure:"name"`
	Address string `mapstructure:"address"`
	System  string `mapstructure:"system"`
	// ExpectedUUID is checked against the BMC's system UUID; empty means
	// the Node's status.nodeInfo.systemUUID is the reference.
	ExpectedUUID string `mapstructure:"expectedUUID"`
	// AllowUnverifiedIdentity lets the node be fenced although its BMC's
	// identity cannot be checked (the Node reports no systemUUID and no
	// expectedUUID is given, or the BMC reports no UUID). The operator
	// vouches that the entry is this node's machine: off by default.
	AllowUnverifiedIdentity bool `mapstructure:"allowUnverifiedIdentity"`
	BMCSettings             `mapstructure:",squash"`
}

// History is the retention of fence records (BMCFenceRecord, `kubectl
// fence history`): a node keeps its newest MaxPerNode finished records, none
// finished longer than MaxAge ago.
type History struct {
	MaxPerNode int           `mapstructure:"maxPerNode"`
	MaxAge     time.Duration `mapstructure:"maxAge"`
}

// Requests is the retention of humans' requests (BMCFenceRequest): one
// whose outcome is final (Taken, Refused, Expired) is deleted TTL after it
// got that outcome. Its evidence outlives it in the node's BMCFenceRecord.
type Requests struct {
	TTL time.Duration `mapstructure:"ttl"`
}

// LeaderElection configures the leader Lease.
type LeaderElection struct {
	Enabled       bool          `mapstructure:"enabled"`
	Name          string        `mapstructure:"name"`
	LeaseDuration time.Duration `mapstructure:"leaseDuration"`
	RenewDeadline time.Duration `mapstructure:"renewDeadline"`
	RetryPeriod   time.Duration `mapstructure:"retryPeriod"`
}

// Server addresses for /metrics and /healthz, /readyz.
type Server struct {
	MetricsAddress string `mapstructure:"metricsAddress"`
	HealthAddress  string `mapstructure:"healthAddress"`
	// MetricsAuth serves /metrics only to requests whose bearer token the
	// API server authenticates (TokenReview) and authorizes to get the
	// non-resource URL /metrics (SubjectAccessReview), as kube-rbac-proxy
	// does, in-process. Off by default for local runs; the manifests and
	// the chart turn it on.
	MetricsAuth bool `mapstructure:"metricsAuth"`
	// Pprof serves Go's profiles (net/http/pprof) under /debug/pprof/ on
	// the metrics address, for measuring the agent (make scale saves its
	// heap and CPU profiles). Off by default. Behind server.metricsAuth
	// each profile is its own non-resource URL, which the metrics reader's
	// grant does not cover; without metricsAuth, only on a loopback
	// address (Validate refuses anything else).
	Pprof bool `mapstructure:"pprof"`
	// MetricsCertDir holds tls.crt and tls.key (PEM) for /metrics, as a
	// kubernetes.io/tls Secret mounted there gives them (cert-manager's, or
	// yours); they are read again when they change, so a rotated
	// certificate is served without a restart. Empty, or no files there
	// yet: a self-signed certificate made at start (as controller-runtime's
	// metrics server and kube-rbac-proxy do), which a scraper cannot verify
	// but which still keeps its bearer token off the wire in clear.
	MetricsCertDir string `mapstructure:"metricsCertDir"`
	// MetricsPlainHTTP serves /metrics without TLS: the scraper's bearer
	// token then crosses the network in clear. A risky setting (announced
	// at start) unless /metrics listens on loopback.
	MetricsPlainHTTP bool `mapstructure:"metricsPlainHTTP"`
}

// Log configures zap.
type Log struct {
	// Format: json, console, or auto (console on a terminal, else json).
	Format string `mapstructure:"format"`
	Level  string `mapstructure:"level"`
}

// Defaults returns the agent's defaults.
func Defaults() Agent {
	return Agent{
		Namespace: "bmcfence-system",
		Detection: fence.DetectBuiltin.String(),
		// The last 10 fences of a node, for 90 days: a node fenced more
		// often has a problem its recent history shows; a quarter covers
		// an incident review.
		History: History{MaxPerNode: 10, MaxAge: 90 * 24 * time.Hour},
		// A day: long enough to read what became of yesterday's request
		// (kubectl get bmcfencerequests), short enough that a cluster
		// fenced often does not pile them up; the fence's record keeps
		// the evidence for history.maxAge.
		Requests: Requests{TTL: 24 * time.Hour},
		Policy:   fence.DefaultPolicy(),
		BMC: BMC{
			Timeout:     bmc.DefaultTimeout,
			Concurrency: 8,
			// One request per node per minute finds a broken BMC within a
			// minute without loading BMCs that struggle.
			ProbeInterval: time.Minute,
		},
		Inventory: Inventory{Source: SourceConfigMap, Defaults: BMCSettings{CredentialsSecret: "bmc-credentials", Auth: string(bmc.AuthBasic), CipherSuite: bmc.DefaultIPMICipherSuite,
			ChassisPower: string(bmc.ChassisPowerAuto)}},
		// kube-controller-manager's own leader election timings.
		LeaderElection: LeaderElection{Enabled: true, Name: "bmcfence-agent", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second},
		Server:         Server{MetricsAddress: ":9500", HealthAddress: ":9501"},
		Log:            Log{Format: "auto", Level: "info"},
		// kured's own defaults.
		PlannedReboots: PlannedReboots{Kured: Kured{Namespace: "kube-system", DaemonSet: "kured", LockAnnotation: "weave.works/kured-node-lock"}},
	}
}

// EnvPrefix prefixes every environment variable the agent reads:
// BMCFENCE_DRYRUN, BMCFENCE_POLICY_FENCEAFTER, BMCFENCE_BMC_TIMEOUT, ...
const EnvPrefix = "BMCFENCE"

// flagKeys maps command-line flags to config keys.
var flagKeys = map[string]string{
	"namespace":          "namespace",
	"kubeconfig":         "kubeconfig",
	"dry-run":            "dryRun",
	"leader-elect":       "leaderElection.enabled",
	"metrics-address":    "server.metricsAddress",
	"metrics-cert-dir":   "server.metricsCertDir",
	"metrics-plain-http": "server.metricsPlainHTTP",
	"health-address":     "server.healthAddress",
	"log-format":         "log.format",
	"log-level":          "log.level",
}

// RegisterFlags adds the flags Load understands.
func RegisterFlags(fs *pflag.FlagSet) {
	d := Defaults()
	fs.String("config", "", "YAML config file (see configs/agent.example.yaml)")
	fs.String("namespace", d.Namespace, "namespace of the agent's Secrets, ConfigMaps and leader Lease")
	fs.String("kubeconfig", "", "kubeconfig file (default: in-cluster)")
	fs.Bool("dry-run", false, "shadow mode: read BMCs and decide, but change nothing")
	fs.Bool("leader-elect", d.LeaderElection.Enabled, "elect a leader on a Lease (disable only for a single replica)")
	fs.String("metrics-address", d.Server.MetricsAddress, "address for /metrics (HTTPS unless --metrics-plain-http)")
	fs.String("metrics-cert-dir", d.Server.MetricsCertDir, "directory with tls.crt and tls.key for /metrics, reloaded when they change (default: a self-signed certificate made at start)")
	fs.Bool("metrics-plain-http", d.Server.MetricsPlainHTTP, "serve /metrics over plain HTTP (risky: the scraper's token crosses the network in clear)")
	fs.String("health-address", d.Server.HealthAddress, "address for /healthz and /readyz")
	fs.String("log-format", d.Log.Format, "log format: json, console or auto")
	fs.String("log-level", d.Log.Level, "log level: debug, info, warn, error")
}

// Load builds the configuration: defaults, then the YAML file named by
// --config (if any), then BMCFENCE_* environment variables, then the flags
// that were set. Unknown keys in the file are errors.
func Load(fs *pflag.FlagSet, environ []string) (Agent, error) {
	v := viper.New()
	if err := setDefaults(v, Defaults()); err != nil {
		return Agent{}, err
	}
	var doc []byte
	if path, _ := fs.GetString("config"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Agent{}, fmt.Errorf("config file %s: %w", path, err)
		}
		v.SetConfigType("yaml")
		if err := v.ReadConfig(bytes.NewReader(b)); err != nil {
			return Agent{}, fmt.Errorf("config file %s: %s", path, oneLine(err.Error()))
		}
		doc = b
	}
	return load(v, doc, fs, environ)
}

// Parse reads a config document (the agent's ConfigMap, for the CLI) over
// the defaults, without environment or flags.
func Parse(yaml []byte) (Agent, error) {
	v := viper.New()
	if err := setDefaults(v, Defaults()); err != nil {
		return Agent{}, err
	}
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(yaml)); err != nil {
		return Agent{}, fmt.Errorf("config: %s", oneLine(err.Error()))
	}
	return load(v, yaml, nil, nil)
}

// load decodes v (doc is the file as written, checked first: see
// checkDocument) and validates the result, reporting every problem.
func load(v *viper.Viper, doc []byte, fs *pflag.FlagSet, environ []string) (Agent, error) {
	var errs []error
	docProblems := checkDocument(doc)
	for _, p := range docProblems {
		errs = append(errs, p)
	}
	for _, kv := range environ {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, EnvPrefix+"_") {
			continue
		}
		key, known := envKey(v, k)
		if !known {
			errs = append(errs, fmt.Errorf("environment variable %s matches no setting (known: %s_NAMESPACE, %s_DRYRUN, %s_POLICY_FENCEAFTER, ...)", k, EnvPrefix, EnvPrefix, EnvPrefix))
			continue
		}
		v.Set(key, val)
	}
	for flag, key := range flagKeys {
		if fs == nil {
			break
		}
		if f := fs.Lookup(flag); f != nil && f.Changed {
			v.Set(key, f.Value.String())
		}
	}
	// Decoding over the defaults: a field that fails to decode keeps its
	// default, so Validate below reports the other fields' errors too and
	// one run names every problem.
	a := Defaults()
	err := v.UnmarshalExact(&a, viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		durationHook,
		mapstructure.StringToSliceHookFunc(","),
	)))
	errs = append(errs, decodeErrors(err, docProblems, v.Get)...)
	if d, derr := fence.ParseDetection(a.Detection); derr != nil {
		errs = append(errs, fmt.Errorf("detection: %w", derr))
	} else {
		a.Policy.Detection = d
	}
	if verr := a.Validate(); verr != nil {
		errs = append(errs, verr)
	}
	if len(errs) > 0 {
		return Agent{}, errors.Join(errs...)
	}
	return a, nil
}

// durationHook decodes "30s"-style strings, saying what it wanted when the
// value is not one. A bare number is refused: YAML reads `cooldown: 30` as
// an integer, which would otherwise become 30 nanoseconds.
func durationHook(from, to reflect.Type, data any) (any, error) {
	durationType := reflect.TypeOf(time.Duration(0))
	if to != durationType || from == durationType {
		return data, nil
	}
	switch from.Kind() {
	case reflect.String:
		s := data.(string)
		d, err := time.ParseDuration(s)
		if err != nil {
			if _, numErr := strconv.ParseFloat(s, 64); numErr == nil {
				return nil, noUnit(s)
			}
			return nil, fmt.Errorf("%q is not a duration (want e.g. 30s, 5m, 1h30m)", s)
		}
		return d, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		if reflect.ValueOf(data).IsZero() {
			return time.Duration(0), nil
		}
		return nil, noUnit(fmt.Sprint(data))
	}
	return data, nil
}

// noUnit is the error for a duration written as a bare number.
func noUnit(n string) error {
	return fmt.Errorf("%s has no unit: durations need one (%ss, %sm; e.g. 30s, 5m, 1h30m)", n, n, n)
}

// envKey maps BMCFENCE_POLICY_FENCEAFTER to the known key policy.fenceafter.
func envKey(v *viper.Viper, env string) (string, bool) {
	want := strings.ToLower(strings.TrimPrefix(env, EnvPrefix+"_"))
	for _, k := range v.AllKeys() {
		if strings.ReplaceAll(k, ".", "_") == want {
			return k, true
		}
	}
	return "", false
}

// setDefaults registers every leaf of d with viper, so that every key is
// known (for environment overrides) and has its default.
func setDefaults(v *viper.Viper, d Agent) error {
	var m map[string]any
	if err := mapstructure.Decode(d, &m); err != nil {
		return err
	}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, val := range m {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			if sub, ok := val.(map[string]any); ok {
				walk(key, sub)
				continue
			}
			v.SetDefault(key, val)
		}
	}
	walk("", m)
	return nil
}

// Validate reports every field that cannot work, each naming the field.
func (a Agent) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if a.Namespace == "" {
		bad("namespace", "must not be empty")
	}
	if a.History.MaxPerNode < 1 || a.History.MaxPerNode > 1000 {
		bad("history.maxPerNode", "%d: must be between 1 and 1000", a.History.MaxPerNode)
	}
	if a.History.MaxAge < time.Hour {
		bad("history.maxAge", "%s: must be at least 1h", a.History.MaxAge)
	}
	if k := a.PlannedReboots.Kured; k.DaemonSet != "" && (k.Namespace == "" || k.LockAnnotation == "") {
		bad("plannedReboots.kured", "namespace and lockAnnotation must be set with daemonSet %q (or set daemonSet to \"\" to turn the kured signal off)", k.DaemonSet)
	}
	if a.Requests.TTL < 10*time.Minute || a.Requests.TTL > 90*24*time.Hour {
		bad("requests.ttl", "%s: must be between 10m and 2160h (the CLI reads a request's outcome within minutes)", a.Requests.TTL)
	}
	errs = append(errs, policyErrors(a.Policy)...)
	if a.BMC.Timeout < time.Second || a.BMC.Timeout > 5*time.Minute {
		bad("bmc.timeout", "%s: must be between 1s and 5m", a.BMC.Timeout)
	}
	if a.BMC.Concurrency < 1 || a.BMC.Concurrency > 256 {
		bad("bmc.concurrency", "%d: must be between 1 and 256", a.BMC.Concurrency)
	}
	if a.BMC.ProbeInterval < 10*time.Second {
		bad("bmc.probeInterval", "%s: must be at least 10s (each probe costs every BMC a request)", a.BMC.ProbeInterval)
	}
	errs = append(errs, a.Inventory.validate()...)
	// Every merged per-node policy: the defaults' (nodes from BareMetalHosts,
	// annotations, entries without windows), then each entry's own.
	if err := DefaultsPolicyError(a.Policy, a.Inventory.Defaults); err != nil {
		errs = append(errs, err)
	}
	for i, n := range a.Inventory.Nodes {
		if n.SettleWindow == 0 && n.UnassistedSettleWindow == 0 {
			continue // the defaults' policy, checked above
		}
		field := fmt.Sprintf("inventory.nodes[%d]", i)
		if err := NodePolicyError(a.Policy, a.Inventory.Defaults, fmt.Sprintf("%s (%s)", field, n.Name), field, n.BMCSettings); err != nil {
			errs = append(errs, err)
		}
	}
	le := a.LeaderElection
	if le.Enabled {
		if le.Name == "" {
			bad("leaderElection.name", "must not be empty")
		}
		if !(le.RetryPeriod > 0 && le.RetryPeriod < le.RenewDeadline && le.RenewDeadline < le.LeaseDuration) {
			bad("leaderElection", "want 0 < retryPeriod (%s) < renewDeadline (%s) < leaseDuration (%s)", le.RetryPeriod, le.RenewDeadline, le.LeaseDuration)
		}
	}
	errs = append(errs, a.validateNamesAndAddresses()...)
	switch a.Log.Format {
	case "json", "console", "auto":
	default:
		bad("log.format", "%q: want json, console or auto", a.Log.Format)
	}
	switch a.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q: want debug, info, warn or error", a.Log.Level)
	}
	return errors.Join(errs...)
}

func (inv Inventory) validate() []error {
	var errs []error
	switch inv.Source {
	case SourceConfigMap, SourceMetal3, SourceBoth:
	default:
		errs = append(errs, fmt.Errorf("inventory.source: %q: want configmap, metal3 or both", inv.Source))
	}
	if inv.UsesMetal3() && len(inv.Metal3.Namespaces) == 0 {
		errs = append(errs, fmt.Errorf("inventory.metal3.namespaces: must name at least one namespace with inventory.source %s (where the BareMetalHosts and their credentials Secrets are)", inv.Source))
	}
	if !inv.UsesMetal3() && inv.Metal3.KubeconfigSecret != "" {
		errs = append(errs, fmt.Errorf("inventory.metal3.kubeconfigSecret: set, but inventory.source is %s: set inventory.source to metal3 or both, or remove it", inv.Source))
	}
	if !inv.UsesMetal3() && len(inv.Metal3.Namespaces) > 0 {
		errs = append(errs, fmt.Errorf("inventory.metal3.namespaces: set, but inventory.source is %s: set inventory.source to metal3 or both, or remove it", inv.Source))
	}
	if inv.Source == SourceMetal3 && len(inv.Nodes) > 0 {
		errs = append(errs, fmt.Errorf("inventory.nodes: %d entries would be ignored with inventory.source metal3: use source both, or remove them", len(inv.Nodes)))
	}
	if inv.Source == SourceMetal3 && inv.FromAnnotations {
		errs = append(errs, errors.New("inventory.fromAnnotations: Node annotations are part of the configmap source and would be ignored with inventory.source metal3: use source both, or turn it off"))
	}
	if err := inv.Defaults.validate("inventory.defaults"); err != nil {
		errs = append(errs, err)
	}
	if inv.Defaults.ChassisPower == string(bmc.ChassisPowerIgnore) {
		// One line would set the chassis rule aside for every Redfish
		// node, real OpenBMC machines and BareMetalHosts included.
		errs = append(errs, errors.New("inventory.defaults.chassisPower: ignore is accepted per entry only (it trusts a system's Off without its chassis, which is wrong for OpenBMC): set chassisPower: ignore on each inventory.nodes entry whose BMC needs it"))
	}
	seen := map[string]int{}
	for i, n := range inv.Nodes {
		field := fmt.Sprintf("inventory.nodes[%d]", i)
		if n.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name: must not be empty", field))
		} else if j, dup := seen[n.Name]; dup {
			errs = append(errs, fmt.Errorf("%s.name: %q is also inventory.nodes[%d]", field, n.Name, j))
		}
		seen[n.Name] = i
		if _, err := n.Target(inv.Defaults); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", field, n.Name, err))
		}
		if err := n.BMCSettings.validate(field); err != nil {
			errs = append(errs, err)
		}
	}
	return append(errs, inv.duplicateTargets()...)
}

func (s BMCSettings) validate(field string) error {
	switch s.Auth {
	case "", string(bmc.AuthBasic), string(bmc.AuthSession):
	default:
		return fmt.Errorf("%s.auth: %q: want basic or session", field, s.Auth)
	}
	if s.InsecureSkipVerify && s.CAConfigMap != "" {
		return fmt.Errorf("%s: insecureSkipVerify and caConfigMap contradict each other; pick one", field)
	}
	if _, err := bmc.ParseChassisPower(s.ChassisPower); err != nil {
		return fmt.Errorf("%s.chassisPower: %q: want auto, check or ignore", field, s.ChassisPower)
	}
	if s.DiagnoseTimeout != 0 {
		if err := fence.DiagnoseTimeoutError(s.DiagnoseTimeout); err != nil {
			return fmt.Errorf("%s.diagnoseTimeout = %s: %w (0: the policy's)", field, s.DiagnoseTimeout, err)
		}
	}
	return nil
}

// Resolved returns the entry's settings with the defaults filled in.
func (n NodeBMC) Resolved(d BMCSettings) BMCSettings {
	s := n.BMCSettings
	if s.CredentialsSecret == "" {
		s.CredentialsSecret = d.CredentialsSecret
	}
	if s.CAConfigMap == "" && !s.InsecureSkipVerify {
		s.CAConfigMap = d.CAConfigMap
	}
	if !s.InsecureSkipVerify && s.CAConfigMap == "" {
		s.InsecureSkipVerify = d.InsecureSkipVerify
	}
	if s.Auth == "" {
		s.Auth = d.Auth
	}
	if s.CipherSuite == 0 {
		s.CipherSuite = d.CipherSuite
	}
	if s.CipherSuiteFallback == 0 {
		s.CipherSuiteFallback = d.CipherSuiteFallback
	}
	if s.ChassisPower == "" && d.ChassisPower != string(bmc.ChassisPowerIgnore) {
		// ignore is an entry's own word, never a default's (Validate
		// refuses it there).
		s.ChassisPower = d.ChassisPower
	}
	if s.SettleWindow == 0 {
		s.SettleWindow = d.SettleWindow
	}
	if s.UnassistedSettleWindow == 0 {
		s.UnassistedSettleWindow = d.UnassistedSettleWindow
	}
	if s.DiagnoseBeforeOff == nil {
		s.DiagnoseBeforeOff = d.DiagnoseBeforeOff
	}
	if s.DiagnoseTimeout == 0 {
		s.DiagnoseTimeout = d.DiagnoseTimeout
	}
	return s
}

// Policy returns p with the entry's settle windows, if set, in place of the
// policy's.
func (s BMCSettings) Policy(p fence.Policy) fence.Policy {
	if s.SettleWindow > 0 {
		p.SettleWindow = s.SettleWindow
	}
	if s.UnassistedSettleWindow > 0 {
		p.UnassistedSettleWindow = s.UnassistedSettleWindow
	}
	if s.DiagnoseBeforeOff != nil {
		p.DiagnoseBeforeOff = *s.DiagnoseBeforeOff
	}
	if s.DiagnoseTimeout > 0 {
		p.DiagnoseTimeout = s.DiagnoseTimeout
	}
	return p
}

// Target builds the entry's BMC target, without credentials or CA (the
// caller reads those from the Secret and ConfigMap).
func (n NodeBMC) Target(d BMCSettings) (bmc.Target, error) {
	if n.Address == "" {
		return bmc.Target{}, errors.New("address: must not be empty (https://HOST[:PORT], http://HOST[:PORT] or ipmi://HOST[:PORT])")
	}
	ep, err := bmc.ParseAddress(n.Address)
	if err != nil {
		return bmc.Target{}, fmt.Errorf("address: %w", err)
	}
	s := n.Resolved(d)
	if s.CredentialsSecret == "" {
		return bmc.Target{}, errors.New("credentialsSecret: no Secret named here or in inventory.defaults")
	}
	if ep.Protocol == bmc.IPMI && n.System != "" {
		return bmc.Target{}, fmt.Errorf("system: %q: IPMI has no system selection; remove it", n.System)
	}
	chassis, err := bmc.ParseChassisPower(s.ChassisPower)
	if err != nil {
		return bmc.Target{}, fmt.Errorf("chassisPower: %q: want auto, check or ignore", s.ChassisPower)
	}
	t := bmc.Target{
		Address:            ep,
		System:             n.System,
		Auth:               bmc.AuthMode(s.Auth),
		InsecureSkipVerify: s.InsecureSkipVerify && ep.Scheme == "https",
		IPMICipherSuite:    s.CipherSuite,
		ChassisPower:       chassis,
	}
	// A default in inventory.defaults may name a setting of the other
	// protocol: each takes only its own.
	if ep.Protocol == bmc.IPMI {
		t.IPMICipherSuiteFallback = s.CipherSuiteFallback
		t.ChassisPower = bmc.ChassisPowerAuto
	}
	return t, nil
}
