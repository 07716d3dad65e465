package config

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bmcfence/bmcfence/bmc"
)

// Why 3 (issue "Safety…"): two nodes pointing at the same BMC loaded without
// complaint. The same BMC however its address is spelled is refused, naming
// both nodes.
func TestTwoNodesOnOneBMCAreRefused(t *testing.T) {
	for _, tt := range []struct {
		name   string
		a, b   string // address[#system]
		refuse bool
	}{
		{"same address", "https://10.0.0.5", "https://10.0.0.5", true},
		{"default port spelled out", "https://10.0.0.5", "https://10.0.0.5:443", true},
		{"scheme and host case", "HTTPS://BMC.example", "https://bmc.example", true},
		{"IPMI default port", "ipmi://10.0.0.6", "ipmi://10.0.0.6:623", true},
		{"one system named, one not", "https://10.0.0.5#1", "https://10.0.0.5", true},
		{"two systems of one BMC", "https://10.0.0.5#1", "https://10.0.0.5#2", false},
		{"other ports", "https://10.0.0.5:8443", "https://10.0.0.5", false},
		{"other hosts", "https://10.0.0.5", "https://10.0.0.6", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			entry := func(name, spec string) NodeBMC {
				addr, sys, _ := strings.Cut(spec, "#")
				return NodeBMC{Name: name, Address: addr, System: sys}
			}
			inv := Inventory{Defaults: BMCSettings{CredentialsSecret: "c"}, Nodes: []NodeBMC{entry("w1", tt.a), entry("w2", tt.b)}}
			errs := inv.duplicateTargets()
			if !tt.refuse {
				if len(errs) != 0 {
					t.Errorf("refused: %v", errs)
				}
				return
			}
			// Issue 23: said twice, once on each entry; now once, on the
			// later entry, naming the first.
			a, _, _ := strings.Cut(tt.a, "#")
			b, _, _ := strings.Cut(tt.b, "#")
			if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "inventory.nodes[1] (w2): address "+b) ||
				!strings.Contains(errs[0].Error(), "reaches the same BMC as inventory.nodes[0] (w1, "+a) {
				t.Errorf("errors %v: want one, on w2, naming w1", errs)
			}
			// The agent itself refuses both.
			names := []string{"w1", "w2"}
			var targets []bmc.Target
			for _, n := range inv.Nodes {
				tg, err := n.Target(inv.Defaults)
				if err != nil {
					t.Fatal(err)
				}
				targets = append(targets, tg)
			}
			if got := DuplicateTargets(names, targets); len(got) != 2 || strings.Contains(got["w1"].Error(), "redfish://") {
				t.Errorf("DuplicateTargets = %v: want both refused, addresses in the form the inventory takes", got)
			}
		})
	}
}

// A node's settle-window override must leave a valid policy.
func TestSettleWindowOverridesAreValidated(t *testing.T) {
	a := Defaults()
	a.Inventory.Nodes = []NodeBMC{{Name: "w1", Address: "https://10.0.0.5", BMCSettings: BMCSettings{UnassistedSettleWindow: 2e9}}}
	err := a.Validate()
	if err == nil || !strings.Contains(err.Error(), "inventory.nodes[0] (w1).unassistedSettleWindow = 2s: not longer than policy.settleWindow = 6s") {
		t.Errorf("Validate = %v", err)
	}
}

// DuplicateTargets indexes entries instead of comparing every pair (a
// chassis manager with a thousand systems at one address made the pairwise
// version the agent's largest CPU cost at 1000 nodes). It must still refuse
// exactly the entries bmc.SameBMC pairs, each naming the earliest other one.
func TestDuplicateTargetsAgreesWithSameBMCPairwise(t *testing.T) {
	addresses := []string{"https://10.0.0.5", "https://10.0.0.5:443", "HTTPS://10.0.0.5", "https://10.0.0.6", "ipmi://10.0.0.5"}
	systems := []string{"", "1", "2", "3"}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 500; round++ {
		n := 1 + rng.IntN(8)
		var names []string
		var targets []bmc.Target
		for i := 0; i < n; i++ {
			e := NodeBMC{Name: fmt.Sprintf("w%d", i), Address: addresses[rng.IntN(len(addresses))], System: systems[rng.IntN(len(systems))]}
			if strings.HasPrefix(e.Address, "ipmi:") {
				e.System = "" // IPMI selects no system
			}
			tg, err := e.Target(BMCSettings{CredentialsSecret: "c"})
			if err != nil {
				t.Fatal(err)
			}
			names, targets = append(names, e.Name), append(targets, tg)
		}
		want := map[string]string{} // node → the earliest other node on its BMC
		for i := range targets {
			for j := range targets {
				if i != j && bmc.SameBMC(targets[i], targets[j]) {
					want[names[i]] = names[j]
					break
				}
			}
		}
		got := DuplicateTargets(names, targets)
		if len(got) != len(want) {
			t.Fatalf("round %d: %v: refused %v, want %v", round, targets, got, want)
		}
		for name, other := range want {
			if err := got[name]; err == nil || !strings.Contains(err.Error(), "the BMC of node "+other+":") {
				t.Fatalf("round %d: %s refused with %v, want naming %s", round, name, err, other)
			}
		}
	}
}
