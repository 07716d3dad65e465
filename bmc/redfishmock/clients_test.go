package redfishmock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

// Independent Redfish clients from Debian, run against an in-process mock.
// fence_redfish runs against the built binary in cmd/redfish-mock.

// runTool runs an external client with a deadline, in its own process
// group, killed with the group if the test ends first. It returns stdout.
func runTool(t *testing.T, stdin string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		t.Logf("%s %s: %v\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), err
}

// toolEnv is a minimal environment. It leaves out REQUESTS_CA_BUNDLE and
// CURL_CA_BUNDLE on purpose: python-requests lets them override a
// session's verify= setting, so a client told to trust the mock's CA would
// check against the system bundle instead.
func toolEnv(extra ...string) []string {
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + os.TempDir(), "LANG=C.UTF-8"}
	return append(env, extra...)
}

func requireTool(t *testing.T, path, debianPackage string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s not found; install the Debian package %s", path, debianPackage)
	}
}

func TestRedfishtool(t *testing.T) {
	requireTool(t, "/usr/bin/redfishtool", "redfishtool")
	srv := redfishmocktest.Start(t, twoSystems())
	// Credentials go in a config file rather than argv.
	creds := filepath.Join(t.TempDir(), "redfishtool.json")
	if err := os.WriteFile(creds, []byte(`{"user":"admin","password":"secret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	host := srv.Host + ":" + srv.Port

	for _, auth := range []string{"Basic", "Session"} {
		t.Run(auth, func(t *testing.T) {
			if err := srv.Mock.SetPower("2", redfishmock.PowerOn); err != nil {
				t.Fatal(err)
			}
			common := []string{"-r", host, "-c", creds, "-S", "Always", "-A", auth}
			power := func() string {
				t.Helper()
				out, err := runTool(t, "", toolEnv(), "/usr/bin/redfishtool", append(common, "Systems", "-I", "2", "-P", "PowerState")...)
				if err != nil {
					t.Fatalf("redfishtool Systems -I 2 -P PowerState: %v", err)
				}
				var v struct{ PowerState string }
				if err := json.Unmarshal([]byte(out), &v); err != nil {
					t.Fatalf("redfishtool output is not JSON: %v\n%s", err, out)
				}
				return v.PowerState
			}
			reset := func(rt string) {
				t.Helper()
				if _, err := runTool(t, "", toolEnv(), "/usr/bin/redfishtool", append(common, "Systems", "-I", "2", "reset", rt)...); err != nil {
					t.Fatalf("redfishtool reset %s: %v", rt, err)
				}
			}
			got := []string{power()}
			reset("ForceOff")
			got = append(got, power())
			reset("On")
			got = append(got, power())
			if diff := cmp.Diff([]string{"On", "Off", "On"}, got); diff != "" {
				t.Errorf("power readings (-want +got):\n%s", diff)
			}
			// A reset type the service does not list is refused by the tool.
			if _, err := runTool(t, "", toolEnv(), "/usr/bin/redfishtool", append(common, "Systems", "-I", "2", "reset", "ForceOn")...); err == nil {
				t.Error("redfishtool sent ForceOn, which the system does not list")
			}
		})
	}
	list := serve(srv.Mock, "GET", "/redfish/v1/SessionService/Sessions", "", asAdmin()).JSON(t)
	if n := list["Members@odata.count"]; n != float64(0) {
		t.Errorf("redfishtool left %v sessions open", n)
	}
}

// sushyScript reads power state and resets system 1, with each of sushy's
// authentication modes, and prints what it saw as JSON.
const sushyScript = `
import json, os, sys
import sushy
from sushy import auth

url, ca = sys.argv[1], sys.argv[2]
user, password = os.environ["MOCK_USER"], os.environ["MOCK_PASSWORD"]
out = {}
for name, mode in (("session", auth.SessionAuth), ("basic", auth.BasicAuth), ("session-or-basic", auth.SessionOrBasicAuth)):
    with mode(username=user, password=password) as a:
        root = sushy.Sushy(url, auth=a, verify=ca)
        system = root.get_system("/redfish/v1/Systems/1")
        seen = [str(system.power_state.value), system.uuid]
        system.reset_system(sushy.ResetType.FORCE_OFF)
        system.refresh()
        seen.append(str(system.power_state.value))
        system.reset_system(sushy.ResetType.ON)
        system.refresh()
        seen.append(str(system.power_state.value))
        out[name] = seen
json.dump(out, sys.stdout)
`

func TestSushy(t *testing.T) {
	requireTool(t, "/usr/bin/python3", "python3")
	if _, err := runTool(t, "", toolEnv(), "/usr/bin/python3", "-c", "import sushy"); err != nil {
		t.Skip("sushy is not importable by /usr/bin/python3; install the Debian package python3-sushy")
	}
	srv := redfishmocktest.Start(t, twoSystems())
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, srv.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runTool(t, "", toolEnv("MOCK_USER="+adminUser, "MOCK_PASSWORD="+adminPass),
		"/usr/bin/python3", "-c", sushyScript, srv.URL+"/redfish/v1", ca)
	if err != nil {
		t.Fatalf("sushy script: %v", err)
	}
	var got map[string][]string
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("sushy output is not JSON: %v\n%s", err, out)
	}
	uuid := srv.Mock.Statuses()[0].UUID
	want := map[string][]string{}
	for _, mode := range []string{"session", "basic", "session-or-basic"} {
		want[mode] = []string{"On", uuid, "Off", "On"}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("what sushy saw (-want +got):\n%s", diff)
	}
	if n := srv.Mock.Statuses()[0].Counters.Resets[redfishmock.ResetForceOff]; n != 3 {
		t.Errorf("mock received %d ForceOff, want 3", n)
	}
	list := serve(srv.Mock, "GET", "/redfish/v1/SessionService/Sessions", "", asAdmin()).JSON(t)
	if n := list["Members@odata.count"]; n != float64(0) {
		t.Errorf("sushy left %v sessions open", n)
	}
}
