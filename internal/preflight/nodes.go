package preflight

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/internal/inventory"
)

// Per-node check names, in the order they are made.
const (
	CheckExcluded  = "excluded"
	CheckNode      = "node"
	CheckInventory = "inventory"
	CheckBMC       = "bmc"
	CheckIdentity  = "identity"
	CheckPower     = "power"
	// CheckNodes (scope cluster) reports a Node list that failed.
	CheckNodes = "nodes"
)

// checkNodes checks every Node (and every inventory entry without one), at
// most o.Concurrency at a time.
func checkNodes(ctx context.Context, o Options) []Result {
	o.Inventory.Refresh(ctx)
	// ResourceVersion "0" is served from the API server's cache: a check
	// needs no quorum read, and a large cluster's list stays cheap.
	nodes, err := o.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return []Result{{Scope: ScopeCluster, Check: CheckNodes, Status: StatusFail,
			Message: fmt.Sprintf("cannot list Nodes, so no node was checked: %v", err)}}
	}
	problems := o.Inventory.Problems()

	perNode := make([][]Result, len(nodes.Items))
	var g errgroup.Group
	g.SetLimit(o.Concurrency)
	for i := range nodes.Items {
		n := &nodes.Items[i]
		g.Go(func() error {
			perNode[i] = append(checkNode(ctx, o, n, problems), checkLevels(ctx, o, n)...)
			return nil // a node's failures are its results
		})
	}
	_ = g.Wait()

	var out []Result
	for _, rs := range perNode {
		out = append(out, rs...)
	}
	return append(out, orphanEntries(o.Inventory, nodes.Items, problems)...)
}

// orphanEntries warns about inventory entries for nodes the cluster does not
// have: usually a typo, and then the real node is the one without an entry
// (its own line says so; this one says where the typo is).
func orphanEntries(inv *inventory.Inventory, nodes []corev1.Node, problems map[string]error) []Result {
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		known[n.Name] = true
	}
	listed := inv.Names()
	for name := range problems {
		listed = append(listed, name)
	}
	sort.Strings(listed)
	var out []Result
	for _, name := range listed {
		if !known[name] {
			out = append(out, Result{Scope: NodeScope(name), Check: CheckNode, Status: StatusWarn,
				Message: fmt.Sprintf("listed in the inventory, but the cluster has no Node %q: fix the name if it is a typo, or remove the entry", name)})
		}
	}
	return out
}

// checkNode runs one node's checks. A failed step ends the node's checks:
// what follows depends on it, and a line per unreachable step would bury
// the one that matters.
func checkNode(ctx context.Context, o Options, n *corev1.Node, problems map[string]error) []Result {
	scope := NodeScope(n.Name)
	res := func(check string, st Status, format string, args ...any) Result {
		return Result{Scope: scope, Check: check, Status: st, Message: fmt.Sprintf(format, args...)}
	}
	if n.Labels[cluster.LabelExclude] == cluster.LabelExcludeValue {
		return []Result{res(CheckExcluded, StatusOK, "labelled %s=%s: never fenced, not checked", cluster.LabelExclude, cluster.LabelExcludeValue)}
	}

	c, err := o.Inventory.Lookup(n.Name)
	if err != nil {
		if p, ok := problems[n.Name]; ok {
			// The inventory prefixes its problems with the node's name,
			// which the scope already says.
			msg := strings.TrimPrefix(p.Error(), "node "+n.Name+": ")
			return []Result{res(CheckInventory, StatusFail, "entry unusable, the node cannot be fenced: %s", msg)}
		}
		if n.Annotations[cluster.AnnotationBMCAddress] != "" {
			// Annotations count only when the operator opted in (a node
			// can write its own annotations), which is easy to miss.
			return []Result{res(CheckInventory, StatusFail,
				"no BMC entry: the Node has a %s annotation, but annotations count only with inventory.fromAnnotations: true; set it, or add the node to inventory.nodes",
				cluster.AnnotationBMCAddress)}
		}
		return []Result{res(CheckInventory, StatusFail,
			"no BMC entry: add it to the agent's inventory (inventory.nodes), or label the node %s=%s if it must never be fenced",
			cluster.LabelExclude, cluster.LabelExcludeValue)}
	}
	t := c.Target
	out := []Result{inventoryResult(scope, t)}

	// The first request is the identity read the agent makes before every
	// ForceOff and taint (Redfish system UUID, IPMI system GUID). It proves
	// reachability, TLS and credentials too. A BMC that cannot report an
	// identity is then reached with a power read.
	call, cancel := context.WithTimeout(ctx, o.Timeout)
	var (
		power   bmc.PowerStatus
		callErr error
	)
	id, idErr := c.Identity(call)
	cancel()
	if errors.Is(idErr, bmc.ErrUnsupported) {
		call, cancel := context.WithTimeout(ctx, o.Timeout)
		power, callErr = c.PowerStatus(call)
		cancel()
		if callErr != nil {
			return append(out, res(CheckBMC, StatusFail, "%s", bmcFailure(t, callErr, o.Timeout)))
		}
	} else if idErr != nil {
		return append(out, res(CheckBMC, StatusFail, "%s", bmcFailure(t, idErr, o.Timeout)))
	}
	out = append(out, res(CheckBMC, StatusOK, "answered and accepted user %q%s", t.Credentials.Username, tlsNote(t)))

	identity, verified := identityResult(scope, c, n, id, idErr)
	out = append(out, identity)
	if identity.Status == StatusFail && identity.otherMachine {
		// A power reading from another machine says nothing about this one.
		return out
	}

	if idErr == nil {
		call, cancel := context.WithTimeout(ctx, o.Timeout)
		power, callErr = c.PowerStatus(call)
		cancel()
		if callErr != nil {
			return append(out, res(CheckPower, StatusFail, "cannot read the power state, so the agent could never confirm the node off: %s", bmcFailure(t, callErr, o.Timeout)))
		}
	}
	return append(out, powerResult(scope, power, cluster.NodeReady(n), verified))
}

// inventoryResult describes the resolved entry, warning about settings that
// expose the BMC's credentials (docs/design.md §2.10: TLS is verified unless a BMC is
// explicitly marked insecure, and such a mark deserves a reminder).
func inventoryResult(scope string, t bmc.Target) Result {
	r := Result{Scope: scope, Check: CheckInventory, Status: StatusOK}
	where := t.Address.String()
	if t.System != "" {
		where += fmt.Sprintf(" system %q", t.System)
	}
	switch {
	case t.Address.Protocol == bmc.IPMI:
		r.Message = fmt.Sprintf("%s (IPMI lanplus, cipher suite %d)", where, t.IPMICipherSuite)
	case t.Address.Scheme == "http":
		r.Status = StatusWarn
		r.Message = fmt.Sprintf("%s: plain http sends the BMC password in clear text on every request; use https", where)
	case t.InsecureSkipVerify:
		r.Status = StatusWarn
		r.Message = fmt.Sprintf("%s: insecureSkipVerify is set, so anything answering at this address receives the BMC password; give the BMC's CA (caConfigMap) instead", where)
	default:
		r.Message = where
	}
	if t.ChassisPower == bmc.ChassisPowerIgnore {
		// A risky setting (config.RiskChassisPowerIgnored): say it here
		// too, per node.
		r.Status = StatusWarn
		r.Message += "; chassisPower: ignore is set, so the system's PowerState alone proves the machine off, never checked against its chassis: right only where the system follows the machine and the chassis does not (sushy-tools with its libvirt or fake driver), never for OpenBMC or sushy-tools' nova or ironic drivers"
	}
	return r
}

// tlsNote says how the BMC's certificate was trusted.
func tlsNote(t bmc.Target) string {
	switch {
	case t.Address.Scheme != "https":
		return ""
	case t.InsecureSkipVerify:
		return "; TLS not verified"
	case len(t.CACertificates) > 0:
		return "; TLS verified with the caConfigMap CA"
	default:
		return "; TLS verified with the system CAs"
	}
}

// bmcFailure turns a failed BMC request into one line: the fix first, then
// the error as evidence. The network caveat matters because this check may
// run from a laptop while the agent runs on control-plane nodes: neither
// success nor failure here proves the agent's own path.
func bmcFailure(t bmc.Target, err error, timeout time.Duration) string {
	var fix string
	switch bmc.Reason(err) {
	case "auth":
		fix = fmt.Sprintf("the BMC rejected user %q: check the credentials Secret this node's inventory entry names (keys username and password) against the BMC's accounts", t.Credentials.Username)
	case "tls":
		fix = "the BMC's certificate is not trusted: give the CA (caConfigMap, key ca.crt) or set insecureSkipVerify explicitly"
	case "timeout":
		fix = fmt.Sprintf("the BMC at %s did not answer within %s: check the address and the network path to the BMC network (from here and from the agent's nodes)", t.Address.HostPort(), timeout)
	case "unreachable":
		fix = fmt.Sprintf("cannot reach the BMC at %s: check the address and the network path to the BMC network (from here and from the agent's nodes)", t.Address.HostPort())
	case "system":
		fix = "the BMC has no such system, or several and none selected: set the entry's system to the Redfish system's Id or Name"
	case "invalid-target":
		fix = "the inventory entry is invalid: fix it in the agent's inventory"
	case "unsupported":
		fix = "the BMC does not support a read the agent needs: reach it through the other protocol (Redfish or IPMI) if it has one"
	default:
		fix = "the BMC answered with an error"
	}
	// Adapters already redact; this is the last line of defence, because
	// this line is printed to a terminal and pasted into tickets.
	return bmc.RedactCredentials(fmt.Sprintf("%s (%v)", fix, err), t.Credentials)
}

// identityResult compares the BMC's system UUID with the node's, as the
// agent's Verify does before every ForceOff and every taint (exact,
// case-insensitive), and reports whether the BMC was proven to be this
// node's. Where nothing can be compared the node is not fenceable (a
// failure), unless its entry vouches for it with allowUnverifiedIdentity (a
// warning).
func identityResult(scope string, c *inventory.Controller, n *corev1.Node, id bmc.Identity, idErr error) (Result, bool) {
	r := Result{Scope: scope, Check: CheckIdentity}
	unverified := func(why string) (Result, bool) {
		if c.AllowUnverified() {
			r.Status = StatusWarn
			r.Message = why + "; the entry sets allowUnverifiedIdentity, so the agent fences it on your word that the entry is this machine's"
		} else {
			r.Status = StatusFail
			r.Message = why + ": the agent will not fence this node; set expectedUUID in the entry, or allowUnverifiedIdentity if you vouch for it"
		}
		return r, false
	}
	if idErr != nil {
		return unverified(fmt.Sprintf("the BMC cannot report a system identity (%v), so nothing proves it is this node's", idErr))
	}
	// The inventory's expectedUUID wins, else the Node's systemUUID. The
	// caller's inventory may have no NodeSource; the Node listed here is the
	// same object the agent's would read.
	want, source := c.ExpectedUUID()
	if want == "" && n.Status.NodeInfo.SystemUUID != "" {
		want, source = n.Status.NodeInfo.SystemUUID, "Node's status.nodeInfo.systemUUID"
	}
	got := strings.TrimSpace(id.UUID)
	switch {
	case want == "" && got == "":
		return unverified("nothing to compare: neither the BMC nor the Node reports a system UUID, so nothing proves this BMC is this node's")
	case want == "":
		return unverified(fmt.Sprintf("nothing to compare: the Node reports no status.nodeInfo.systemUUID and the entry has no expectedUUID (the BMC's system UUID is %q: if that is this machine, set expectedUUID to it)", got))
	case strings.EqualFold(got, strings.TrimSpace(want)):
		r.Status = StatusOK
		r.Message = fmt.Sprintf("system UUID %s matches the %s", got, source)
		return r, true
	case got == "":
		return unverified(fmt.Sprintf("the BMC reports no system UUID (the %s is %q)", source, want))
	case bmc.SMBIOSSwapped(got, want):
		r.Status, r.otherMachine = StatusFail, true
		r.Message = fmt.Sprintf("the BMC's system UUID %s is the %s %s with its first three fields byte-swapped (SMBIOS encoding): likely the same machine, but the agent compares exactly and will refuse to fence; set expectedUUID: %s in the entry", got, source, want, got)
		return r, false
	default:
		r.Status, r.otherMachine = StatusFail, true
		r.Message = fmt.Sprintf("the BMC's system UUID is %q but the %s is %q: the entry points at another machine, and fencing through it would power off the wrong one; fix the address or system", got, source, want)
		return r, false
	}
}

// powerResult reports the reading. On and Off are fine in themselves, but
// Off on a node that reports Ready contradicts the cluster: the BMC may
// belong to another machine. Where identity was proven that is most likely
// a node that just went down (a warning); where nothing proved identity it
// is the only evidence there is that the entry is wrong, and fencing
// through a wrong entry powers off a healthy machine (a failure).
func powerResult(scope string, st bmc.PowerStatus, ready, identityVerified bool) Result {
	r := Result{Scope: scope, Check: CheckPower, Status: StatusOK}
	switch st.State {
	case bmc.PowerOn:
		r.Message = "On"
	case bmc.PowerOff:
		switch {
		case !ready:
			r.Message = "Off"
		case identityVerified:
			r.Status = StatusWarn
			r.Message = "Off, yet the Node reports Ready: if the node did not just go down, the BMC's answer is wrong; re-run to check"
		default:
			r.Status = StatusFail
			r.Message = "Off, yet the Node reports Ready, and nothing proves this BMC is this node's: the entry likely points at another machine; fix it (re-run if the node just went down)"
		}
		if st.OSRunning() && r.Status == StatusOK {
			// The agent never takes such a reading as Off.
			r.Status = StatusWarn
			r.Message = fmt.Sprintf("Off, but the BMC also reports BootProgress %s: it contradicts itself, and the agent will not accept its Off as proof", st.BootProgress)
		}
	case bmc.PoweringOn, bmc.PoweringOff:
		r.Status = StatusWarn
		r.Message = fmt.Sprintf("%s: the machine is changing state; re-run the check once it settles", st.State)
	case bmc.PowerUnknown:
		r.Status = StatusWarn
		r.Message = fmt.Sprintf("the BMC answered %q, which is not a power state the agent accepts (exactly On or Off): while it answers so, the agent can never confirm this node off", st.Raw)
	default:
		r.Status = StatusWarn
		r.Message = fmt.Sprintf("unexpected power state %s (raw %q)", st.State, st.Raw)
	}
	return r
}
