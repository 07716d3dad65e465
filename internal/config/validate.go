package config

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
)

// decodeErrors flattens viper's and mapstructure's nested error lists into
// one error per bad field, each a single line naming the field. What the
// document check already reported (the same setting, or the same unknown
// key) is not said twice; get reads a setting's value (viper's Get) for
// the messages that would not show it.
func decodeErrors(err error, reported []docProblem, get func(string) any) []error {
	if err == nil {
		return nil
	}
	said := map[string]bool{}
	for _, p := range reported {
		said[strings.ToLower(p.path)] = true
	}
	var out []error
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, sub := range j.Unwrap() {
				walk(sub)
			}
			return
		}
		var de *mapstructure.DecodeError
		if errors.As(e, &de) {
			path, inner := fieldPath(de.Name()), de.Unwrap()
			if j, ok := inner.(interface{ Unwrap() []error }); ok {
				// A struct's own list, under the struct's name.
				for _, sub := range j.Unwrap() {
					walk(sub)
				}
				return
			}
			msg := oneLine(inner.Error())
			if keys, ok := strings.CutPrefix(msg, "has invalid keys: "); ok {
				for _, k := range strings.Split(keys, ", ") {
					sub := k
					if path != "" {
						sub = path + "." + k
					}
					if !said[strings.ToLower(sub)] {
						out = append(out, fmt.Errorf("%s: no such setting (configs/agent.example.yaml lists every setting)", sub))
					}
				}
				return
			}
			if said[strings.ToLower(path)] {
				return
			}
			out = append(out, fmt.Errorf("%s: %s", path, typeMessage(msg, path, get)))
			return
		}
		// viper wraps mapstructure's list in a message of its own; the list
		// is what names the fields.
		if u := errors.Unwrap(e); u != nil {
			walk(u)
			return
		}
		out = append(out, fmt.Errorf("config: %s", oneLine(e.Error())))
	}
	walk(err)
	return out
}

// typeMessage says mapstructure's "cannot parse value as 'int'" with the
// value (from the environment, where the document check does not look).
func typeMessage(msg, path string, get func(string) any) string {
	want := map[string]string{"'int'": "a whole number", "'uint'": "a whole number", "'bool'": "true or false", "'float": "a number"}
	for k, w := range want {
		if strings.HasPrefix(msg, "cannot parse value as "+k) && get != nil && !strings.Contains(path, "[") {
			return fmt.Sprintf("%q is not %s", fmt.Sprint(get(strings.ToLower(path))), w)
		}
	}
	return msg
}

// fieldPath writes a mapstructure field name (policy.SuspectAfter) the way
// the YAML spells it (policy.suspectAfter).
func fieldPath(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		if p != "" && !strings.Contains(p, "[") {
			parts[i] = strings.ToLower(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, ".")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// policyErrors reports every bad field of the policy: fence.Policy.Validate
// names each one (errors.Join), and follows the policy's own rules as fields
// are added.
func policyErrors(p fence.Policy) []error {
	if err := p.Validate(); err != nil {
		return []error{err}
	}
	return nil
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// validIPMICipherSuite reports whether bmc/ipmi speaks suite (0 here means
// "the default", suite 3, or no fallback).
func validIPMICipherSuite(suite int) bool { return slices.Contains(bmc.IPMICipherSuites, suite) }

// ipmiSuitesText says which suites those are, for an error.
const ipmiSuitesText = "3 or 17 (the IPMI 2.0 suites bmcfence speaks: 3 is HMAC-SHA1 with AES-CBC-128, 17 HMAC-SHA256 with AES-CBC-128)"

// validateNamesAndAddresses checks what the API server or the network would
// refuse later, at load: Kubernetes names, UUIDs, cipher suites and listen
// addresses.
func (a Agent) validateNamesAndAddresses() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if a.Namespace != "" {
		for _, m := range validation.IsDNS1123Label(a.Namespace) {
			bad("namespace", "%q: %s", a.Namespace, m)
		}
	}
	if a.LeaderElection.Name != "" {
		for _, m := range validation.IsDNS1123Subdomain(a.LeaderElection.Name) {
			bad("leaderElection.name", "%q: %s", a.LeaderElection.Name, m)
		}
	}
	for _, l := range []struct{ field, addr string }{
		{"server.metricsAddress", a.Server.MetricsAddress},
		{"server.healthAddress", a.Server.HealthAddress},
	} {
		if err := listenAddress(l.addr); err != nil {
			bad(l.field, "%q: %v", l.addr, err)
		}
	}
	if a.Server.Pprof && !a.Server.MetricsAuth && !loopback(a.Server.MetricsAddress) {
		// A profile names every function and goroutine; the heap profile's
		// sizes and the CPU profile's load say what the agent holds and
		// does. Never to anyone who reaches the port.
		bad("server.pprof", "the profiles would be served without authentication on %s: turn on server.metricsAuth, or listen on a loopback address (127.0.0.1:PORT) and reach it with kubectl port-forward", a.Server.MetricsAddress)
	}
	errs = append(errs, a.Inventory.Defaults.validateNames("inventory.defaults")...)
	errs = append(errs, validateLevels("inventory.defaults", a.Inventory.Defaults.Levels)...)
	seenNS := map[string]int{}
	for i, ns := range a.Inventory.Metal3.Namespaces {
		field := fmt.Sprintf("inventory.metal3.namespaces[%d]", i)
		for _, m := range validation.IsDNS1123Label(ns) {
			bad(field, "%q is not a namespace name: %s", ns, m)
		}
		if j, dup := seenNS[ns]; dup {
			bad(field, "%q is also inventory.metal3.namespaces[%d]", ns, j)
		}
		seenNS[ns] = i
	}
	if s := a.Inventory.Metal3.KubeconfigSecret; s != "" {
		for _, m := range validation.IsDNS1123Subdomain(s) {
			bad("inventory.metal3.kubeconfigSecret", "%q: %s", s, m)
		}
	}
	for i, n := range a.Inventory.Nodes {
		field := fmt.Sprintf("inventory.nodes[%d]", i)
		if n.Name != "" {
			for _, m := range validation.IsDNS1123Subdomain(n.Name) {
				bad(field+".name", "%q is not a node name: %s", n.Name, m)
			}
		}
		if n.ExpectedUUID != "" && !uuidRE.MatchString(n.ExpectedUUID) {
			bad(field+".expectedUUID", "%q is not a UUID (want 8-4-4-4-12 hex digits, as in the Node's status.nodeInfo.systemUUID)", n.ExpectedUUID)
		}
		errs = append(errs, n.BMCSettings.validateNames(field)...)
		errs = append(errs, validateLevels(field, n.Levels)...)
	}
	return errs
}

func (s BMCSettings) validateNames(field string) []error {
	var errs []error
	for _, r := range []struct{ key, name string }{
		{"credentialsSecret", s.CredentialsSecret},
		{"caConfigMap", s.CAConfigMap},
	} {
		if r.name == "" {
			continue
		}
		for _, m := range validation.IsDNS1123Subdomain(r.name) {
			errs = append(errs, fmt.Errorf("%s.%s: %q: %s", field, r.key, r.name, m))
		}
	}
	if s.CipherSuite != 0 && !validIPMICipherSuite(s.CipherSuite) {
		errs = append(errs, fmt.Errorf("%s.cipherSuite: %d: want %s", field, s.CipherSuite, ipmiSuitesText))
	}
	if s.CipherSuiteFallback != 0 && !validIPMICipherSuite(s.CipherSuiteFallback) {
		errs = append(errs, fmt.Errorf("%s.cipherSuiteFallback: %d: want %s, or 0 for none", field, s.CipherSuiteFallback, ipmiSuitesText))
	}
	return errs
}

// listenAddress checks a Go listen address: [HOST]:PORT, HOST an IP or a
// DNS name, PORT 0-65535.
func listenAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want [HOST]:PORT, e.g. :9500 or 127.0.0.1:9500")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q: want a number 0-65535", port)
	}
	if host != "" && net.ParseIP(host) == nil && len(validation.IsDNS1123Subdomain(host)) > 0 {
		return fmt.Errorf("host %q: want an IP address or a DNS name", host)
	}
	return nil
}

// Risk is a setting that weakens a safety property or an operator's view:
// allowed, but announced at start and exported as a metric.
type Risk struct {
	// Setting is the metric's label value.
	Setting string
	Message string
}

// Risk settings, the values of bmcfence_risky_setting{setting=…}.
const (
	RiskDryRun                 = "dryRun"
	RiskInsecureSkipVerify     = "insecureSkipVerify"
	RiskPlainHTTP              = "plainHTTP"
	RiskFromAnnotations        = "fromAnnotations"
	RiskLeaderElectionDisabled = "leaderElectionDisabled"
	RiskMetricsUnauthenticated = "metricsUnauthenticated"
	RiskPowerOffNotReady       = "powerOffNotReadyAfter"
	RiskEmptyInventory         = "emptyInventory"
	RiskMetricsPlainHTTP       = "metricsPlainHTTP"
	RiskChassisPowerIgnored    = "chassisPowerIgnored"
)

// Risks lists the risky settings in a (valid) configuration.
func (a Agent) Risks() []Risk {
	var out []Risk
	if a.DryRun {
		out = append(out, Risk{RiskDryRun, "dry-run: decisions are logged and recorded as Events; nothing is powered off or tainted, so no node is ever fenced"})
	}
	var insecure, plain []string
	if a.Inventory.Defaults.InsecureSkipVerify {
		insecure = append(insecure, "inventory.defaults")
	}
	for _, n := range a.Inventory.Nodes {
		ep, err := bmc.ParseAddress(n.Address)
		if err != nil {
			continue
		}
		if ep.Scheme == "http" {
			plain = append(plain, n.Name)
		}
		if ep.Scheme == "https" && n.BMCSettings.InsecureSkipVerify {
			insecure = append(insecure, n.Name)
		}
	}
	if len(insecure) > 0 {
		out = append(out, Risk{RiskInsecureSkipVerify, fmt.Sprintf("insecureSkipVerify (%s): the BMC's TLS certificate is not verified, so whoever answers on its address gets its credentials and can answer \"Off\" for it", strings.Join(insecure, ", "))})
	}
	var ignored []string
	for _, n := range a.Inventory.Nodes {
		if n.ChassisPower == string(bmc.ChassisPowerIgnore) {
			ignored = append(ignored, n.Name)
		}
	}
	if len(ignored) > 0 {
		out = append(out, Risk{RiskChassisPowerIgnored, fmt.Sprintf("chassisPower: ignore (%s): the system's PowerState alone proves these machines off, never checked against their chassis; right only where the system follows the machine and the chassis does not (sushy-tools with its libvirt or fake driver), never for OpenBMC or sushy-tools' nova or ironic drivers", strings.Join(ignored, ", "))})
	}
	if len(plain) > 0 {
		out = append(out, Risk{RiskPlainHTTP, fmt.Sprintf("http:// BMC addresses (%s): credentials and power readings cross the network in clear text", strings.Join(plain, ", "))})
	}
	if a.Inventory.FromAnnotations {
		out = append(out, Risk{RiskFromAnnotations, "inventory.fromAnnotations: nodes can write their own bmcfence.dev/bmc-* annotations, so a compromised node can point the agent, with its credentials, at a BMC of its choosing"})
	}
	if !a.Server.MetricsAuth && !loopback(a.Server.MetricsAddress) {
		out = append(out, Risk{RiskMetricsUnauthenticated, fmt.Sprintf("server.metricsAuth is off and /metrics listens on %s: anyone who reaches it reads node names, BMC error rates and fence history (turn on server.metricsAuth, or restrict it with a NetworkPolicy)", a.Server.MetricsAddress)})
	}
	if a.Server.MetricsPlainHTTP && !loopback(a.Server.MetricsAddress) {
		out = append(out, Risk{RiskMetricsPlainHTTP, fmt.Sprintf("server.metricsPlainHTTP is on and /metrics listens on %s: the scraper's bearer token and the metrics cross the network in clear (turn it off: /metrics is served over TLS, with server.metricsCertDir's certificate or a self-signed one)", a.Server.MetricsAddress)})
	}
	if !a.LeaderElection.Enabled {
		out = append(out, Risk{RiskLeaderElectionDisabled, "leader election is disabled: safe only with exactly one replica; two agents would fence the same nodes at once"})
	}
	if p := a.Policy.PowerOffNotReadyAfter; p > 0 {
		out = append(out, Risk{RiskPowerOffNotReady, fmt.Sprintf("policy.powerOffNotReadyAfter = %s: a node NotReady this long is powered off although its kubelet still renews its Lease: the machine, and whatever still runs on it, is cut off", p)})
	}
	out = append(out, a.Inventory.levelRisks()...)
	if inv := a.Inventory; inv.Source == SourceConfigMap && len(inv.Nodes) == 0 && !inv.FromAnnotations {
		out = append(out, Risk{RiskEmptyInventory, "inventory: no node is listed (inventory.nodes is empty, inventory.source is configmap, fromAnnotations is off): this agent will never fence anything; list each node with its BMC address"})
	}
	return out
}

// loopback reports whether a listen address is reachable only from this
// host.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ReferencedNames lists the Secrets and CA ConfigMaps the inventory reads
// in the agent's namespace, each once, sorted: what RBAC must grant by
// name. The defaults count when a node may come from annotations (which
// name no Secret of their own) or when no node is listed yet; with
// BareMetalHosts, the defaults' CA ConfigMap verifies their BMCs, and
// their Secrets are in the hosts' namespaces (not listed here).
func (inv Inventory) ReferencedNames() (secrets, configMaps []string) {
	s, c := map[string]bool{}, map[string]bool{}
	if inv.UsesConfigMap() && (inv.FromAnnotations || len(inv.Nodes) == 0) {
		s[inv.Defaults.CredentialsSecret] = true
	}
	if inv.FromAnnotations || len(inv.Nodes) == 0 || inv.UsesMetal3() {
		c[inv.Defaults.CAConfigMap] = true
	}
	for _, n := range inv.Nodes {
		r := n.Resolved(inv.Defaults)
		s[r.CredentialsSecret] = true
		c[r.CAConfigMap] = true
	}
	if inv.UsesMetal3() {
		s[inv.Metal3.KubeconfigSecret] = true
	}
	for _, name := range inv.outletSecrets() {
		s[name] = true
		c[OutletProofsConfigMap] = true
	}
	set := func(m map[string]bool) []string {
		var out []string
		for k := range m {
			if k != "" {
				out = append(out, k)
			}
		}
		sort.Strings(out)
		return out
	}
	return set(s), set(c)
}
