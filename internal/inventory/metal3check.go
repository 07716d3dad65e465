package inventory

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/inventory/metal3"
)

// HostFinding is one thing `fence-agent validate` found about the
// BareMetalHosts: a Problem the agent cannot fence through (a wrong
// address, a missing Secret, an ambiguous node), or a warning (a host tied
// to no node, one the baremetal-operator is provisioning).
type HostFinding struct {
	// Subject is "BareMetalHost NS/NAME" or "node NAME".
	Subject string
	Problem bool
	Message string
}

func (f HostFinding) String() string { return f.Subject + ": " + f.Message }

// staticNodes is a NodeSource over a listing of Nodes.
type staticNodes map[string]*corev1.Node

func (s staticNodes) NodeObject(name string) (*corev1.Node, bool) { n, ok := s[name]; return n, ok }

func (s staticNodes) Nodes() []runner.NodeInfo {
	out := make([]runner.NodeInfo, 0, len(s))
	for name := range s {
		out = append(out, runner.NodeInfo{Name: name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// CheckMetal3 reads the BareMetalHosts as the agent would (in this
// cluster, or in the management cluster of inventory.metal3.kubeconfigSecret)
// and checks each: its address parses to a driver bmcfence speaks, its
// credentials Secret exists with non-empty username and password, and a
// Node is tied to it. It contacts no BMC. opts are the agent's inventory
// options (Config, Namespace, Client, Dynamic); nodes are the cluster's.
// The summary says what was read where; err is for a listing that failed
// (the hosts cannot be read at all).
func CheckMetal3(ctx context.Context, opts Options, nodes []corev1.Node) (summary string, findings []HostFinding, err error) {
	byName := staticNodes{}
	var mnodes []metal3.Node
	for i := range nodes {
		n := &nodes[i]
		byName[n.Name] = n
		mnodes = append(mnodes, metal3.Node{Name: n.Name, ProviderID: n.Spec.ProviderID})
	}
	opts.Nodes = byName
	inv := New(opts)
	l, src, err := inv.listMetal3(ctx)
	if err != nil {
		return "", nil, err
	}
	matches, matchProblems := metal3.MatchNodes(mnodes, l.objs)
	tied := map[string]string{} // host key → node (via)
	for node, m := range matches {
		tied[m.Host.Key()] = fmt.Sprintf("%s (%s)", node, m.Via)
	}
	problem := func(subject, format string, args ...any) {
		findings = append(findings, HostFinding{Subject: subject, Problem: true, Message: fmt.Sprintf(format, args...)})
	}
	warn := func(subject, format string, args ...any) {
		findings = append(findings, HostFinding{Subject: subject, Message: fmt.Sprintf(format, args...)})
	}
	for key, err := range l.hostErrs {
		problem("BareMetalHost "+key, "cannot be read: %v", err)
	}
	hosts := l.objs.Hosts
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].Key() < hosts[j].Key() })
	for _, h := range hosts {
		subject := "BareMetalHost " + h.Key()
		if _, err := metal3.ParseAddress(h.Address); err != nil {
			problem(subject, "spec.bmc.address %q: %v", h.Address, err)
		}
		switch {
		case h.CredentialsName == "":
			problem(subject, "no spec.bmc.credentialsName: name a Secret in %s with keys username and password", h.Namespace)
		default:
			sec, err := src.core.CoreV1().Secrets(h.Namespace).Get(ctx, h.CredentialsName, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				problem(subject, "credentials Secret %s/%s not found (in %s; keys: username, password)", h.Namespace, h.CredentialsName, src.where)
			case err != nil:
				problem(subject, "cannot read credentials Secret %s/%s (in %s): %v", h.Namespace, h.CredentialsName, src.where, err)
			default:
				var missing []string
				for _, k := range []string{"username", "password"} {
					if len(strings.TrimSpace(string(sec.Data[k]))) == 0 {
						missing = append(missing, k)
					}
				}
				if len(missing) > 0 {
					problem(subject, "credentials Secret %s/%s: key %s missing or empty", h.Namespace, h.CredentialsName, strings.Join(missing, " and "))
				}
			}
		}
		if node, ok := tied[h.Key()]; !ok {
			warn(subject, "no Node is tied to it (no Node's spec.providerID is metal3://%s/%s/… or metal3://%s, and no spec.consumerRef → Metal3Machine → Machine with status.nodeRef): it fences nothing until one is", h.Namespace, h.Name, h.UID)
		} else if err := h.Fenceable(); err != nil {
			warn(subject, "tied to node %s, but %v", node, err)
		}
	}
	nodeNames := make([]string, 0, len(matchProblems))
	for n := range matchProblems {
		nodeNames = append(nodeNames, n)
	}
	sort.Strings(nodeNames)
	for _, n := range nodeNames {
		problem("node "+n, "%v", matchProblems[n])
	}
	sort.SliceStable(findings, func(i, j int) bool { return findings[i].Subject < findings[j].Subject })
	summary = fmt.Sprintf("%d BareMetalHosts in %s (%s), %d tied to nodes", len(hosts)+len(l.hostErrs), strings.Join(opts.Config.Metal3.Namespaces, ", "), src.where, len(matches))
	return summary, findings, nil
}
