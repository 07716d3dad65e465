package config

import (
	"fmt"

	"github.com/bmcfence/bmcfence/bmc"
)

// DuplicateTargets names every pair of entries that reach the same BMC
// (bmc.SameBMC: scheme and host case and default ports normalised, the same
// system or none named). Two nodes sharing a BMC would let a fence of one
// power off the other, and let the other's Off prove the first off: both
// are refused (invariant 3). The inventory runs it on every entry it
// resolves, annotations and other sources included.
func DuplicateTargets(names []string, targets []bmc.Target) map[string]error {
	// Group by BMC (the key without the system): only entries of one BMC
	// can collide, so a large inventory costs one pass.
	byBMC := map[string][]int{}
	for i, t := range targets {
		t.System = ""
		byBMC[t.Key()] = append(byBMC[t.Key()], i)
	}
	out := map[string]error{}
	for _, group := range byBMC {
		for x, i := range group {
			for _, j := range group[x+1:] {
				if !bmc.SameBMC(targets[i], targets[j]) {
					continue
				}
				for _, p := range [][2]int{{i, j}, {j, i}} {
					a, b := p[0], p[1]
					if out[names[a]] == nil {
						out[names[a]] = fmt.Errorf("BMC %s is also the BMC of node %s: two nodes cannot share a machine's BMC; fix the inventory (both are refused until then)", shownTarget(targets[a]), names[b])
					}
				}
			}
		}
	}
	return out
}

// shownTarget is a target as an address the inventory takes
// (https://10.0.0.5:443, system 1), not its identity key (redfish://…).
func shownTarget(t bmc.Target) string {
	if t.System != "" {
		return fmt.Sprintf("%s (system %s)", t.Address, t.System)
	}
	return t.Address.String()
}

// duplicateTargets reports each entry that reaches the BMC of an earlier
// one, once, on the later entry (the earlier one is where the reader
// looks first), naming the earlier one, both addresses as written. The
// agent refuses both nodes (DuplicateTargets); the file has one mistake.
func (inv Inventory) duplicateTargets() []error {
	type entry struct {
		i      int
		target bmc.Target
	}
	byBMC := map[string][]entry{}
	var errs []error
	for i, n := range inv.Nodes {
		t, err := n.Target(inv.Defaults)
		if err != nil || n.Name == "" {
			continue
		}
		bare := t
		bare.System = ""
		key := bare.Key()
		for _, e := range byBMC[key] {
			if !bmc.SameBMC(e.target, t) {
				continue
			}
			first := inv.Nodes[e.i]
			address := n.Address
			if n.System != "" {
				address += " (system " + n.System + ")"
			}
			firstAddress := first.Address
			if first.System != "" {
				firstAddress += ", system " + first.System
			}
			errs = append(errs, fmt.Errorf("inventory.nodes[%d] (%s): address %s reaches the same BMC as inventory.nodes[%d] (%s, %s): two nodes cannot share a machine's BMC (the agent refuses both until one is fixed)",
				i, n.Name, address, e.i, first.Name, firstAddress))
			break
		}
		byBMC[key] = append(byBMC[key], entry{i, t})
	}
	return errs
}
