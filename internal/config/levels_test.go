package config

import (
	"slices"
	"strings"
	"testing"
)

const levelsYAML = `inventory:
  defaults:
    levels:
      - outlets:
          - {address: 10.0.0.9, protocol: snmp, outlet: "3", credentialsSecret: pdu-a, snmpVersion: "3", authProtocol: SHA, privProtocol: AES}
  nodes:
    - name: w1
      address: https://10.0.0.1
      levels:
        - outlets:
            - {address: "10.0.0.9:1161", protocol: snmp, outlet: "4", credentialsSecret: pdu-a, snmpVersion: 2c}
            - {address: https://10.0.0.8, protocol: redfish, outlet: OUTLET4, pdu: "1", credentialsSecret: pdu-b, allowUnverifiedOutlet: true}
    - {name: w2, address: https://10.0.0.2}
`

func TestLevelsLoadPerNodeAndFromTheDefaults(t *testing.T) {
	a, err := loadFile(t, levelsYAML, nil)
	if err != nil {
		t.Fatal(err)
	}
	w1 := a.Inventory.Nodes[0].ResolvedLevels(a.Inventory.Defaults)
	if len(w1) != 1 || len(w1[0].Outlets) != 2 || w1[0].Outlets[1].Protocol != OutletRedfish || !w1[0].Outlets[1].AllowUnverifiedOutlet {
		t.Fatalf("w1's levels = %+v, want its own: one level of two outlets", w1)
	}
	w2 := a.Inventory.Nodes[1].ResolvedLevels(a.Inventory.Defaults)
	if len(w2) != 1 || w2[0].Outlets[0].Outlet != "3" {
		t.Fatalf("w2's levels = %+v, want the defaults'", w2)
	}
	secrets, _ := a.Inventory.ReferencedNames()
	for _, s := range []string{"pdu-a", "pdu-b"} {
		if !slices.Contains(secrets, s) {
			t.Errorf("ReferencedNames() secrets = %v, want %s (RBAC must grant it)", secrets, s)
		}
	}
	var risks []string
	for _, r := range a.Risks() {
		risks = append(risks, r.Setting)
	}
	for _, want := range []string{RiskUnverifiedOutlet, RiskSNMPCommunity} {
		if !slices.Contains(risks, want) {
			t.Errorf("Risks() = %v, want %s", risks, want)
		}
	}
}

func TestLevelMistakesAreOneLineEach(t *testing.T) {
	tests := []struct {
		name, outlet string
		want         string
	}{
		{"no protocol", `{address: a, outlet: "1", credentialsSecret: s}`, `levels[0].outlets[0].protocol: empty: want redfish or snmp`},
		{"bad protocol", `{address: a, protocol: ipmi, outlet: "1", credentialsSecret: s}`, `levels[0].outlets[0].protocol: "ipmi": want redfish or snmp`},
		{"snmp outlet not a number", `{address: a, protocol: snmp, outlet: A3, credentialsSecret: s}`, `levels[0].outlets[0].outlet: "A3": want the 1-based outlet number`},
		{"snmp with scheme", `{address: "snmp://a", protocol: snmp, outlet: "1", credentialsSecret: s}`, `levels[0].outlets[0].address: "snmp://a": an SNMP PDU is host[:port], without a scheme`},
		{"snmp bad port", `{address: "a:0", protocol: snmp, outlet: "1", credentialsSecret: s}`, `port "0": want 1-65535`},
		{"snmp bad version", `{address: a, protocol: snmp, outlet: "1", credentialsSecret: s, snmpVersion: "4"}`, `snmpVersion: "4": want 1, 2c or 3`},
		{"priv without auth", `{address: a, protocol: snmp, outlet: "1", credentialsSecret: s, privProtocol: AES}`, `privProtocol: privacy needs authentication`},
		{"v2c with auth", `{address: a, protocol: snmp, outlet: "1", credentialsSecret: s, snmpVersion: 2c, authProtocol: SHA}`, `snmpVersion: "2c": authProtocol and privProtocol are SNMPv3's`},
		{"redfish without scheme", `{address: a, protocol: redfish, outlet: "1", credentialsSecret: s}`, `levels[0].outlets[0].address: "a"`},
		{"redfish without outlet", `{address: "https://a", protocol: redfish, credentialsSecret: s}`, `outlet: empty: give the outlet's Redfish Id`},
		{"no secret", `{address: a, protocol: snmp, outlet: "1"}`, `credentialsSecret: empty: name the Secret`},
		{"bad secret", `{address: a, protocol: snmp, outlet: "1", credentialsSecret: My_S}`, `credentialsSecret: "My_S"`},
		{"unknown key", `{address: a, protocol: snmp, outlet: "1", credentialsSecret: s, allowUnverified: true}`, `allowUnverified: no such setting`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := "inventory:\n  nodes:\n    - name: w1\n      address: https://10.0.0.1\n      levels:\n        - outlets:\n            - " + tt.outlet + "\n"
			_, err := loadFile(t, yaml, nil)
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.Contains(line, tt.want) && !strings.HasPrefix(strings.TrimSpace(line), "inventory.nodes[0]") && tt.name != "unknown key" {
					t.Errorf("line %q does not name the field from inventory.nodes[0]", line)
				}
			}
		})
	}
	t.Run("empty level and duplicate outlet", func(t *testing.T) {
		yaml := "inventory:\n  defaults:\n    levels:\n      - outlets: []\n      - outlets:\n          - {address: a, protocol: snmp, outlet: \"1\", credentialsSecret: s}\n          - {address: a, protocol: snmp, outlet: \"1\", credentialsSecret: s}\n"
		_, err := loadFile(t, yaml, nil)
		if err == nil {
			t.Fatal("Load succeeded, want an error")
		}
		for _, w := range []string{"inventory.defaults.levels[0].outlets: empty", "inventory.defaults.levels[1].outlets[1]: the same outlet as inventory.defaults.levels[1].outlets[0]"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not contain %q", err, w)
			}
		}
	})
}
