package metal3

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ProviderIDPrefix starts the providerID CAPM3 sets on a Node:
// metal3://<namespace>/<bmh-name>/<m3m-name> (CAPM3's default since it
// moved away from BMH UIDs) or, in the legacy form, metal3://<bmh-uid>.
const ProviderIDPrefix = "metal3://"

// ErrNoMatch is wrapped when a Node's providerID or the BareMetalHosts
// that claim it do not give exactly one host: a node is fenced only
// through a host that is unambiguously its own.
var ErrNoMatch = errors.New("no single BareMetalHost for this node")

// Node is what matching needs of a Node.
type Node struct {
	Name       string
	ProviderID string
}

// Match is one node's host and how it was found.
type Match struct {
	Host Host
	// Via says which link tied them, for Events and `kubectl fence check`.
	Via string
}

// Objects are the listed BareMetalHosts, Metal3Machines and Machines.
type Objects struct {
	Hosts          []Host
	Metal3Machines []Metal3Machine
	Machines       []Machine
}

// MatchNodes ties Nodes to BareMetalHosts through either link:
//
//   - the host's spec.consumerRef (a Metal3Machine) → that Metal3Machine's
//     owner Machine → the Machine's status.nodeRef.name;
//   - the Node's spec.providerID: metal3://<namespace>/<bmh>/<m3m> names
//     the host, metal3://<uid> gives its UID.
//
// A node both links tie to different hosts, a node whose metal3://
// providerID names no listed host, and every node of a host two nodes
// claim, get an error (wrapping ErrNoMatch) instead of a match: an
// ambiguous link could make one node's fence power off another machine.
// Nodes neither link reaches are in neither map.
func MatchNodes(nodes []Node, objs Objects) (map[string]Match, map[string]error) {
	byKey := map[string]Host{}
	byUID := map[string]Host{}
	for _, h := range objs.Hosts {
		byKey[h.Key()] = h
		if h.UID != "" {
			byUID[h.UID] = h
		}
	}
	m3ms := map[string]Metal3Machine{}
	for _, m := range objs.Metal3Machines {
		m3ms[m.Namespace+"/"+m.Name] = m
	}
	machines := map[string]Machine{}
	for _, m := range objs.Machines {
		machines[m.Namespace+"/"+m.Name] = m
	}

	// Each node's candidates, by host key, with the link that named it.
	candidates := map[string]map[string]string{}
	add := func(node string, h Host, via string) {
		if candidates[node] == nil {
			candidates[node] = map[string]string{}
		}
		if prev, ok := candidates[node][h.Key()]; ok {
			via = prev + "; " + via
		}
		candidates[node][h.Key()] = via
	}
	for _, h := range objs.Hosts {
		ref := h.ConsumerRef
		if ref == nil || ref.Kind != "Metal3Machine" {
			continue
		}
		m3m, ok := m3ms[ref.Namespace+"/"+ref.Name]
		if !ok || m3m.Machine == "" {
			continue
		}
		machine, ok := machines[m3m.Namespace+"/"+m3m.Machine]
		if !ok || machine.NodeName == "" {
			continue
		}
		add(machine.NodeName, h, fmt.Sprintf("consumerRef Metal3Machine %s/%s, Machine %s/%s status.nodeRef", m3m.Namespace, m3m.Name, machine.Namespace, machine.Name))
	}
	problems := map[string]error{}
	for _, n := range nodes {
		rest, ok := strings.CutPrefix(n.ProviderID, ProviderIDPrefix)
		if !ok {
			continue
		}
		var h Host
		var found bool
		if parts := strings.Split(rest, "/"); len(parts) == 3 && parts[0] != "" && parts[1] != "" {
			h, found = byKey[parts[0]+"/"+parts[1]]
		} else if !strings.Contains(rest, "/") && rest != "" {
			h, found = byUID[rest]
		} else {
			problems[n.Name] = fmt.Errorf("%w: providerID %q is neither metal3://<namespace>/<host>/<metal3machine> nor metal3://<host-uid>", ErrNoMatch, n.ProviderID)
			continue
		}
		if !found {
			problems[n.Name] = fmt.Errorf("%w: providerID %q names no BareMetalHost in inventory.metal3.namespaces", ErrNoMatch, n.ProviderID)
			continue
		}
		add(n.Name, h, "providerID "+n.ProviderID)
	}

	claimedBy := map[string][]string{}
	for node, hosts := range candidates {
		for key := range hosts {
			claimedBy[key] = append(claimedBy[key], node)
		}
	}
	matches := map[string]Match{}
	for node, hosts := range candidates {
		if problems[node] != nil {
			continue
		}
		if len(hosts) > 1 {
			var names []string
			for key, via := range hosts {
				names = append(names, fmt.Sprintf("%s (%s)", key, via))
			}
			sort.Strings(names)
			problems[node] = fmt.Errorf("%w: BareMetalHosts %s all claim it; fix the providerID or the consumerRef", ErrNoMatch, strings.Join(names, " and "))
			continue
		}
		for key, via := range hosts {
			if others := claimedBy[key]; len(others) > 1 {
				sort.Strings(others)
				problems[node] = fmt.Errorf("%w: BareMetalHost %s is claimed by nodes %s: two nodes cannot share a machine", ErrNoMatch, key, strings.Join(others, ", "))
				continue
			}
			matches[node] = Match{Host: byKey[key], Via: via}
		}
	}
	return matches, problems
}
