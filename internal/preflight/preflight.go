// Package preflight is what `kubectl fence check` runs: everything that can
// be known before a node fails about whether the agent will be able to fence
// it. Per node: an inventory entry that resolves, a BMC that accepts the
// credentials and TLS settings, a BMC that is this node's machine (system
// UUID), a power reading the agent accepts. For the cluster: a Kubernetes
// version whose controllers act on the out-of-service taint, the agent's
// namespace, ServiceAccount and RBAC, and pods that would never leave a
// fenced node.
//
// Each result is one line that says what was found and what to fix. The
// checks only read: the BMCs get one or two reads per node (never a power
// command), the API server gets GETs, LISTs and SubjectAccessReviews.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/bmcfence/bmcfence/internal/kube"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory"
)

// Status is a check's verdict.
type Status string

const (
	// StatusOK: nothing to do.
	StatusOK Status = "ok"
	// StatusWarn: fencing works, but something deserves a look (a check
	// that could not be made, a setting that weakens a guarantee).
	StatusWarn Status = "warn"
	// StatusFail: the agent cannot fence this node (or any node) until it
	// is fixed, or would fence the wrong machine.
	StatusFail Status = "fail"
)

// rank orders statuses by severity for Worst.
func (s Status) rank() int {
	switch s {
	case StatusOK:
		return 0
	case StatusWarn:
		return 1
	case StatusFail:
		return 2
	default:
		return 3 // an unknown status is never mistaken for a pass
	}
}

// Result is one check's outcome: one line of `kubectl fence check`.
type Result struct {
	// Scope is "cluster" or "node/NAME".
	Scope string `json:"scope"`
	// Check names what was checked ("rbac", "bmc", "identity", ...).
	Check  string `json:"check"`
	Status Status `json:"status"`
	// Message says what was found and, unless ok, what to fix.
	Message string `json:"message"`
	// otherMachine: an identity check found the BMC to be another
	// machine's; nothing more is read through it.
	otherMachine bool
}

// ScopeCluster is the scope of the cluster-wide checks.
const ScopeCluster = "cluster"

// NodeScope is the scope of a node's checks.
func NodeScope(node string) string { return "node/" + node }

// Worst returns the most severe status among results (ok for none): the
// CLI's exit code.
func Worst(results []Result) Status {
	w := StatusOK
	for _, r := range results {
		if r.Status.rank() > w.rank() {
			w = r.Status
		}
	}
	return w
}

// Options configure Run.
type Options struct {
	// Client reads the cluster. Its identity needs: get/list Nodes and Pods,
	// get the namespace and ServiceAccount, read the inventory's Secrets and
	// ConfigMaps, and create SubjectAccessReviews (else the RBAC check
	// warns that it could not be made).
	Client kube.Interface
	// Inventory is the agent's inventory (the same configuration the agent
	// runs with). Run refreshes it first, so the check sees the Secrets as
	// they are now.
	Inventory *inventory.Inventory
	// Namespace is the agent's (default bmcfence-system).
	Namespace string
	// ServiceAccount the agent runs as (default bmcfence-agent).
	ServiceAccount string
	// LeaseName is the agent's leader Lease (default: the configuration's
	// default, bmcfence-agent), granted by name.
	LeaseName string
	// ByName checks the Secret and ConfigMap grants for exactly
	// SecretNames and ConfigMapNames (what the inventory reads; RBAC may
	// grant them by resourceNames), instead of for any name.
	ByName                      bool
	SecretNames, ConfigMapNames []string
	// Metal3Namespaces are where the inventory reads BareMetalHosts
	// (inventory.source metal3 or both): the grants there are checked too.
	Metal3Namespaces []string
	// Timeout bounds each BMC request (default bmc.DefaultTimeout, 10 s).
	Timeout time.Duration
	// Kured is where kured keeps its reboot lock (the agent config's
	// plannedReboots.kured; an empty DaemonSet: off). Nil: kured's
	// defaults.
	Kured *cluster.KuredLock
	// Concurrency bounds the nodes checked at once (default 8, as the
	// agent's bmc.concurrency: BMCs on one management network are checked
	// no harder than the agent itself would load them).
	Concurrency int
}

// DefaultServiceAccount is the agent's ServiceAccount in deploy/base.
const DefaultServiceAccount = "bmcfence-agent"

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = config.Defaults().Namespace
	}
	if o.ServiceAccount == "" {
		o.ServiceAccount = DefaultServiceAccount
	}
	if o.LeaseName == "" {
		o.LeaseName = config.Defaults().LeaderElection.Name
	}
	if o.Kured == nil {
		k := cluster.DefaultKuredLock()
		o.Kured = &k
	}
	if o.Timeout <= 0 {
		o.Timeout = bmc.DefaultTimeout
	}
	if o.Concurrency <= 0 {
		o.Concurrency = config.Defaults().BMC.Concurrency
	}
	return o
}

// Run runs every check and returns the results, cluster first, then nodes by
// name. A check that cannot be made is a result (warn or fail), not an
// error: the error is for missing options and a cancelled ctx only, so a
// partial picture is never presented as a complete one.
func Run(ctx context.Context, o Options) ([]Result, error) {
	if o.Client == nil {
		return nil, errors.New("preflight: Options.Client is nil")
	}
	if o.Inventory == nil {
		return nil, errors.New("preflight: Options.Inventory is nil")
	}
	o = o.withDefaults()
	results := checkCluster(ctx, o)
	results = append(results, checkNodes(ctx, o)...)
	if err := ctx.Err(); err != nil {
		// BMC checks cut short by the caller would read as BMC timeouts.
		return nil, fmt.Errorf("preflight interrupted: %w", err)
	}
	sortResults(results)
	return results, nil
}

// sortResults orders cluster results first, then node results by node name;
// within a scope the checks keep the order they were made in (inventory
// before bmc before identity...), which reads as a story.
func sortResults(rs []Result) {
	sort.SliceStable(rs, func(i, j int) bool {
		ci, cj := rs[i].Scope == ScopeCluster, rs[j].Scope == ScopeCluster
		if ci != cj {
			return ci
		}
		return rs[i].Scope < rs[j].Scope
	})
}

// list joins up to max names, saying how many more there are.
func list(names []string, max int) string {
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}
