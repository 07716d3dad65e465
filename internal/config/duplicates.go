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
						out[names[a]] = fmt.Errorf("BMC %s is also the BMC of node %s: two nodes cannot share a machine's BMC; fix the inventory (both are refused until then)", targets[a].Key(), names[b])
					}
				}
			}
		}
	}
	return out
}

func (inv Inventory) duplicateTargets() []error {
	var names []string
	var targets []bmc.Target
	field := map[string]string{}
	for i, n := range inv.Nodes {
		t, err := n.Target(inv.Defaults)
		if err != nil || n.Name == "" {
			continue
		}
		names, targets = append(names, n.Name), append(targets, t)
		field[n.Name] = fmt.Sprintf("inventory.nodes[%d]", i)
	}
	var errs []error
	dups := DuplicateTargets(names, targets)
	for _, name := range names {
		if err := dups[name]; err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", field[name], name, err))
		}
	}
	return errs
}
