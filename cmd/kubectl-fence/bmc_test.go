package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/ipmisim"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
	"github.com/bmcfence/bmcfence/internal/power"
)

const testPassword = "s3cret-Pa55word"

// cli runs kubectl-fence in-process and returns stdout, stderr and the exit
// code.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	return out.String(), errOut.String(), code
}

// mockBMC starts a Redfish mock with two systems and returns the flags to
// reach system 1 with a verified certificate.
func mockBMC(t *testing.T) (*redfishmocktest.Server, []string) {
	t.Helper()
	srv := redfishmocktest.Start(t, redfishmock.Config{Username: "admin", Password: testPassword, Systems: redfishmock.Systems(2)})
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, srv.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BMC_PASSWORD", testPassword)
	return srv, []string{"--address", srv.URL, "--system", "1", "--username", "admin", "--password-env", "BMC_PASSWORD", "--ca-file", ca}
}

// fast settle parameters keep real-time waits short.
var fast = []string{"--settle-window", "200ms", "--settle-reads", "2", "--power-timeout", "3s"}

func TestBMCStatusJSON(t *testing.T) {
	_, flags := mockBMC(t)
	out, errOut, code := cli(t, append([]string{"bmc", "status", "-o", "json"}, flags...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if v["powerState"] != "On" || v["protocol"] != "redfish" || v["system"] != "1" {
		t.Errorf("status = %v", v)
	}
}

func TestBMCOffConfirmsASettledOff(t *testing.T) {
	srv, flags := mockBMC(t)
	out, errOut, code := cli(t, append(append([]string{"bmc", "off", "--yes", "-o", "json"}, flags...), fast...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r power.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Confirmed || r.PowerState != bmc.PowerOff || r.OffReads < 2 {
		t.Errorf("report = %+v", r)
	}
	st, _ := srv.Mock.Status("1")
	if st.Counters.Resets["ForceOff"] != 1 || len(st.Counters.Resets) != 1 {
		t.Errorf("resets = %v, want exactly one ForceOff", st.Counters.Resets)
	}
	if other, _ := srv.Mock.Status("2"); other.PowerState != "On" {
		t.Error("system 2 was touched")
	}
}

func TestBMCOffRefusesALyingBMC(t *testing.T) {
	srv, flags := mockBMC(t)
	if err := srv.Mock.SetFaults("1", redfishmock.Faults{IgnoreCommands: true}); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cli(t, append(append([]string{"bmc", "off", "--yes"}, flags...), "--settle-window", "200ms", "--settle-reads", "2", "--power-timeout", "1s")...)
	if code != exitNotOff || !strings.Contains(errOut, "did not power off") {
		t.Fatalf("exit %d, stderr %q; want %d and 'did not power off'", code, errOut, exitNotOff)
	}
}

func TestBMCOnWaits(t *testing.T) {
	srv, flags := mockBMC(t)
	if err := srv.Mock.SetPower("1", "Off"); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cli(t, append([]string{"bmc", "on", "--yes", "--wait"}, flags...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if st, _ := srv.Mock.Status("1"); st.PowerState != "On" {
		t.Errorf("power = %s", st.PowerState)
	}
}

func TestBMCErrorsAreOneClearLineWithDistinctCodes(t *testing.T) {
	srv, flags := mockBMC(t)
	noCA := []string{"--address", srv.URL, "--system", "1", "--username", "admin", "--password-env", "BMC_PASSWORD"}
	tests := []struct {
		name string
		env  string
		args []string
		code int
		want string
	}{
		{"wrong password", "wrong-Pa55word", append([]string{"bmc", "status"}, flags...), exitAuth, "rejected the credentials"},
		{"untrusted certificate", "", append([]string{"bmc", "status"}, noCA...), exitTLS, "certificate"},
		{"unreachable", "", []string{"bmc", "status", "--address", "https://127.0.0.1:1", "--username", "admin", "--password-env", "BMC_PASSWORD", "--insecure"}, exitUnreachable, "unreachable"},
		{"bad URL", "", []string{"bmc", "status", "--address", "10.0.0.5", "--username", "admin", "--password-env", "BMC_PASSWORD"}, exitUsage, "want https://HOST"},
		{"no password source", "", []string{"bmc", "status", "--address", srv.URL, "--username", "admin"}, exitUsage, "--password-env NAME or --password-file PATH"},
		{"no confirmation without a terminal", "", append([]string{"bmc", "off"}, flags...), exitUsage, "pass --yes"},
		{"unknown system", "", []string{"bmc", "status", "--address", srv.URL, "--system", "9", "--username", "admin", "--password-env", "BMC_PASSWORD", "--insecure"}, exitUnsupported, "no system"},
		{"unknown flag", "", []string{"bmc", "status", "--pasword", "x"}, exitUsage, "unknown flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("BMC_PASSWORD", tt.env)
			}
			out, errOut, code := cli(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errOut)
			}
			if !strings.Contains(errOut, tt.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("stderr %q: want one line containing %q", errOut, tt.want)
			}
			for _, pw := range []string{testPassword, "wrong-Pa55word"} {
				if strings.Contains(out+errOut, pw) {
					t.Errorf("the password appears in the output: %q", out+errOut)
				}
			}
		})
	}
}

func TestBMCOverIPMI(t *testing.T) {
	sim := ipmisim.StartT(t, ipmisim.Options{InitialPower: true})
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte(sim.Password()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--address", "ipmi://" + sim.Address(), "--username", sim.Username(), "--password-file", pw}
	out, errOut, code := cli(t, append([]string{"bmc", "status", "-o", "json"}, flags...)...)
	if code != 0 || !strings.Contains(out, `"powerState": "On"`) {
		t.Fatalf("status: exit %d, %s %s", code, out, errOut)
	}
	_, errOut, code = cli(t, append(append([]string{"bmc", "off", "--yes"}, flags...), fast...)...)
	if code != 0 {
		t.Fatalf("off: exit %d: %s", code, errOut)
	}
	if on, _ := sim.Power(); on {
		t.Fatal("machine still on")
	}
	if _, errOut, code = cli(t, append([]string{"bmc", "on", "--yes", "--wait"}, flags...)...); code != 0 {
		t.Fatalf("on: exit %d: %s", code, errOut)
	}
	if err := sim.SetBehavior(ipmisim.Behavior{Stuck: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, code = cli(t, append(append([]string{"bmc", "off", "--yes"}, flags...), "--settle-window", "200ms", "--settle-reads", "2", "--power-timeout", "1s")...); code != exitNotOff {
		t.Fatalf("stuck BMC: exit %d, want %d", code, exitNotOff)
	}
}
