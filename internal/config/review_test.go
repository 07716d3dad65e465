package config

// Review (issue 20): docs/safety.md says the chassis rule is set aside on an
// unidentified service only "when the entry says chassisPower: ignore". The
// configuration also takes it from inventory.defaults (and so from one
// environment variable), where it silently covers every Redfish node, the
// real OpenBMC machines and the Metal3 hosts included. This test states the
// documented property and fails on main at a446e5e.

import (
	"testing"

	"github.com/bmcfence/bmcfence/bmc"
)

func TestReviewChassisRuleIsSetAsideOnlyByTheEntry(t *testing.T) {
	yaml := `
inventory:
  defaults:
    chassisPower: ignore
  nodes:
    - {name: openbmc-1, address: https://10.0.0.1}
`
	a, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	verr := a.Validate()
	tg, err := a.Inventory.Nodes[0].Target(a.Inventory.Defaults)
	if err != nil {
		t.Fatal(err)
	}
	if verr == nil && tg.ChassisPower == bmc.ChassisPowerIgnore {
		t.Errorf("inventory.defaults.chassisPower: ignore is accepted without a word and sets the chassis rule aside for node %s, whose entry says nothing", a.Inventory.Nodes[0].Name)
	}
}

// Review (issue 20): validation accepts a cipherSuiteFallback the IPMI
// client refuses to speak (it speaks 3 and 17 only: bmc/ipmi.New), so
// `fence-agent validate` passes and the node is unfenceable at run time.
func TestReviewCipherSuiteFallbackValidationMatchesTheClient(t *testing.T) {
	a, err := Parse([]byte("inventory:\n  defaults: {cipherSuiteFallback: 1}\n  nodes:\n    - {name: w1, address: ipmi://10.0.0.1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Validate(); err == nil {
		t.Errorf("cipherSuiteFallback 1 (RAKP-HMAC-SHA1, no integrity, no confidentiality) passes validation; bmc/ipmi.New refuses every suite but 3 and 17")
	}
}
