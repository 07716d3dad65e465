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
// resolves, annotations and other sources included, at every refresh.
//
// Each entry is refused naming the earliest other entry it collides with.
// It costs one pass: entries are indexed by BMC and system instead of
// compared pairwise (a chassis manager serving a thousand systems at one
// address made the pairwise version the agent's largest CPU cost).
func DuplicateTargets(names []string, targets []bmc.Target) map[string]error {
	idx := newBMCIndex()
	for i, t := range targets {
		idx.add(i, t)
	}
	out := map[string]error{}
	for i, t := range targets {
		j := idx.firstOther(i, t)
		if j < 0 {
			continue
		}
		out[names[i]] = fmt.Errorf("BMC %s is also the BMC of node %s: two nodes cannot share a machine's BMC; fix the inventory (both are refused until then)", shownTarget(t), names[j])
	}
	return out
}

// bmcIndex finds, among the entries added, those on one BMC (the target's
// key without its system) that bmc.SameBMC would match: the same system, or
// either names none.
type bmcIndex map[string]*bmcGroup

type bmcGroup struct {
	all      []int            // every entry on this BMC, in the order added
	bySystem map[string][]int // the entries naming each system ("" for none)
}

func newBMCIndex() bmcIndex { return bmcIndex{} }

func bareKey(t bmc.Target) string {
	t.System = ""
	return t.Key()
}

func (x bmcIndex) add(i int, t bmc.Target) {
	k := bareKey(t)
	g := x[k]
	if g == nil {
		g = &bmcGroup{bySystem: map[string][]int{}}
		x[k] = g
	}
	g.all = append(g.all, i)
	g.bySystem[t.System] = append(g.bySystem[t.System], i)
}

// firstOther is the smallest entry other than i that reaches t's BMC and
// system (bmc.SameBMC), -1 if none. Entries are added in increasing order.
func (x bmcIndex) firstOther(i int, t bmc.Target) int {
	g := x[bareKey(t)]
	if g == nil {
		return -1
	}
	first := func(list []int) int {
		for _, j := range list {
			if j != i {
				return j // the list is sorted and i appears once
			}
		}
		return -1
	}
	if t.System == "" {
		return first(g.all) // no system named: every entry of the BMC
	}
	a, b := first(g.bySystem[t.System]), first(g.bySystem[""])
	switch {
	case a < 0:
		return b
	case b < 0 || a < b:
		return a
	default:
		return b
	}
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
	idx := newBMCIndex()
	var errs []error
	for i, n := range inv.Nodes {
		t, err := n.Target(inv.Defaults)
		if err != nil || n.Name == "" {
			continue
		}
		// Only earlier entries are indexed yet: the first match is the
		// earliest earlier entry on the same BMC.
		if e := idx.firstOther(i, t); e >= 0 {
			first := inv.Nodes[e]
			address := n.Address
			if n.System != "" {
				address += " (system " + n.System + ")"
			}
			firstAddress := first.Address
			if first.System != "" {
				firstAddress += ", system " + first.System
			}
			errs = append(errs, fmt.Errorf("inventory.nodes[%d] (%s): address %s reaches the same BMC as inventory.nodes[%d] (%s, %s): two nodes cannot share a machine's BMC (the agent refuses both until one is fixed)",
				i, n.Name, address, e, first.Name, firstAddress))
		}
		idx.add(i, t)
	}
	return errs
}
