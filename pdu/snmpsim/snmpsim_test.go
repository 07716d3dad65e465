package snmpsim_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/bmcfence/bmcfence/pdu/snmpsim"
)

func snmp(t *testing.T, tool string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("%s not found (Debian: apt-get install snmp)", tool)
	}
	out, err := exec.Command(tool, append([]string{"-m", "", "-On"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestAgentServesThePowerNetMIBThroughSnmpd(t *testing.T) {
	bank := snmpsim.NewMemoryBank(4)
	a := snmpsim.StartT(t, bank)
	got := snmp(t, "snmpget", "-v2c", "-c", snmpsim.ReadCommunity, a.Address(), ".1.3.6.1.2.1.1.2.0", ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.2")
	if !strings.Contains(got, ".1.3.6.1.4.1.318.1.3.4.5") || !strings.Contains(got, "INTEGER: 1") {
		t.Fatalf("%s", got)
	}
	snmp(t, "snmpset", "-v2c", "-c", snmpsim.WriteCommunity, a.Address(), ".1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.2", "i", "2")
	if _, on, _, _ := bank.Outlet(2); on {
		t.Error("outlet 2 still on")
	}
	walk := snmp(t, "snmpwalk", "-v3", "-l", "authPriv", "-u", snmpsim.V3User, "-a", "SHA", "-A", snmpsim.V3AuthPass, "-x", "AES", "-X", snmpsim.V3PrivPass,
		a.Address(), ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.4")
	if strings.Count(walk, "\n") != 3 || !strings.Contains(walk, ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.2 = INTEGER: 2") {
		t.Errorf("walk:\n%s", walk)
	}
	if sets := a.Sets(); len(sets) != 1 || sets[0].Value != 2 {
		t.Errorf("sets %v", sets)
	}
}
