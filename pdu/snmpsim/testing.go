package snmpsim

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartT starts an agent for a test: it skips the test (with the install
// hint) when snmpd is missing, fails it when the agent does not start,
// and stops it in t.Cleanup.
func StartT(t testing.TB, bank Bank) *Agent {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Start(ctx, bank, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

// FenceAPCSNMP runs Debian's fence_apc_snmp (fence-agents) against the
// agent as an independent client, logging the command line (credentials
// redacted) and its output. It skips the test when fence_apc_snmp is
// missing and returns the trimmed output and the exit code.
func FenceAPCSNMP(t testing.TB, a *Agent, args ...string) (string, int) {
	t.Helper()
	bin, err := exec.LookPath("fence_apc_snmp")
	if err != nil {
		t.Skip("fence_apc_snmp not found (Debian: apt-get install fence-agents)")
	}
	argv := append([]string{"--ip=" + a.Host, "--ipport=" + strconv.Itoa(a.Port)}, args...)
	shown := make([]string, len(argv))
	for i, s := range argv {
		shown[i] = s
		for _, flag := range []string{"--community=", "--password=", "--snmp-priv-passwd="} {
			if strings.HasPrefix(s, flag) {
				shown[i] = flag + "[redacted]"
			}
		}
	}
	t.Logf("$ fence_apc_snmp %s", strings.Join(shown, " "))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, argv...).CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("  exit %d: %s", code, strings.TrimSpace(string(out)))
	return strings.TrimSpace(string(out)), code
}
