package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/ipmisim"
	"github.com/bmcfence/bmcfence/bmc/pyghmisim"
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

// holdsOff checks, until d has passed, that the machine stays off: a restart
// whose off-dwell our ForceOff did not end would bring it back on.
func holdsOff(t *testing.T, d time.Duration, on func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if on() {
			t.Fatal("the machine came back on: the Off confirmed was a restart's off-dwell, not ours")
		}
		<-tick.C
	}
}

// The reproduction from the safety work, on every vendor profile: a
// restart's off-dwell reads Off, and `bmc off` must send its own ForceOff
// rather than take that Off for proof. Most BMCs take the ForceOff (the
// restart is cancelled); iDRAC and iLO answer "already off" (iDRAC SYS518
// first), do nothing, and the machine comes back on: the CLI sends ForceOff
// again and confirms that Off.
func TestBMCOffDuringARestartIsOurOwnOff(t *testing.T) {
	for _, profile := range redfishmock.Profiles() {
		t.Run(string(profile), func(t *testing.T) {
			t.Parallel()
			const dwell = 2 * time.Second
			cfg := redfishmock.Config{Username: "admin", Password: testPassword, Systems: redfishmock.Systems(1), Profile: profile,
				Timing: redfishmock.Timing{RestartOff: dwell, PowerOn: 500 * time.Millisecond}}
			srv := redfishmocktest.Start(t, cfg)
			flags := caFlags(t, srv, testPassword)
			if err := srv.Mock.Event("1", redfishmock.EventOSReboot); err != nil {
				t.Fatal(err)
			}
			args := append(append([]string{"bmc", "off", "--yes", "-o", "json"}, flags...),
				"--settle-window", "600ms", "--settle-reads", "3", "--power-timeout", "5s")
			if profile == redfishmock.ProfileSushy {
				// sushy-tools' Off is the machine's only with its libvirt
				// or fake driver, as its users must say.
				args = append(args, "--chassis-power", "ignore")
			}
			out, errOut, code := cli(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s %s", code, out, errOut)
			}
			var r power.Report
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatal(err)
			}
			st, _ := srv.Mock.Status("1")
			if !r.Confirmed || r.Answer != "accepted" || st.Counters.Resets[redfishmock.ResetForceOff] < 1 {
				t.Fatalf("report %+v, resets %v: want a ForceOff of ours, accepted", r, st.Counters.Resets)
			}
			holdsOff(t, dwell+500*time.Millisecond, func() bool { st, _ := srv.Mock.Status("1"); return st.PowerState != redfishmock.PowerOff })
		})
	}
}

// The same over IPMI, during `chassis power cycle` whose off-dwell ipmi_sim
// is told to stretch, with ipmitool absent from PATH.
func TestBMCOffDuringAPowerCycleIsOurOwnOffOverIPMI(t *testing.T) {
	sim := ipmisim.StartT(t, ipmisim.Options{InitialPower: true})
	const dwell = 3 * time.Second
	if err := sim.SetBehavior(ipmisim.Behavior{CycleDwell: dwell}); err != nil {
		t.Fatal(err)
	}
	if out, err := sim.Ipmitool(context.Background(), "chassis", "power", "cycle"); err != nil || out.ExitCode != 0 {
		t.Skipf("ipmitool (the test peer that starts the cycle) is needed: %v %+v", err, out)
	}
	flags := ipmiFlags(t, sim.Address(), sim.Username(), sim.Password())
	t.Setenv("PATH", t.TempDir())
	out, errOut, code := cli(t, append(append([]string{"bmc", "off", "--yes", "-o", "json"}, flags...),
		"--settle-window", "600ms", "--settle-reads", "3", "--power-timeout", "5s")...)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	if n := count(sim.Commands(), "set power 0"); n < 2 {
		t.Fatalf("commands %q: want our own power off after the cycle's", sim.Commands())
	}
	if !strings.Contains(out, `"sent": "ipmi chassis power off"`) {
		t.Errorf("report %s does not name the IPMI command", out)
	}
	holdsOff(t, dwell+time.Second, func() bool { on, _ := sim.Power(); return on })
}

func count(lines []string, s string) int {
	n := 0
	for _, l := range lines {
		if l == s {
			n++
		}
	}
	return n
}

// caFlags reach srv with password, verifying its certificate. The password
// goes in a file, not the environment, so tests using it can run in
// parallel.
func caFlags(t *testing.T, srv *redfishmocktest.Server, password string) []string {
	t.Helper()
	dir := t.TempDir()
	ca, pw := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "pw")
	if err := os.WriteFile(ca, srv.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pw, []byte(password), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--address", srv.URL, "--username", "admin", "--password-file", pw, "--ca-file", ca}
}

func ipmiFlags(t *testing.T, addr, user, password string) []string {
	t.Helper()
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--address", "ipmi://" + addr, "--username", user, "--password-file", pw}
}

// A failed command is said at once, with its exit code, and JSON carries
// an error object; nothing is polled.
func TestBMCOffFailuresAreHonest(t *testing.T) {
	tests := []struct {
		name     string
		cfg      func(*redfishmock.Config)
		password string
		extra    []string
		code     int
		reason   string
		want     string
	}{
		{name: "wrong password", password: "wrong-Pa55word", code: exitAuth, reason: "auth", want: "rejected the credentials"},
		{name: "no hard off", cfg: func(c *redfishmock.Config) {
			c.Systems[0].ResetTypes = []redfishmock.ResetType{redfishmock.ResetOn, redfishmock.ResetGracefulShutdown}
		}, code: exitUnsupported, reason: "unsupported", want: "offers no hard off"},
		{name: "session auth without a SessionService", cfg: func(c *redfishmock.Config) { c.AuthMode = redfishmock.AuthBasicOnly },
			extra: []string{"--auth", "session"}, code: exitUnsupported, reason: "unsupported", want: "no Redfish SessionService"},
		{name: "basic auth against a session-only BMC", cfg: func(c *redfishmock.Config) { c.AuthMode = redfishmock.AuthSessionOnly },
			code: exitAuth, reason: "auth", want: "try --auth session"},
	}
	for _, tt := range tests {
		for _, format := range []string{"table", "json"} {
			t.Run(tt.name+"/"+format, func(t *testing.T) {
				t.Parallel()
				cfg := redfishmock.Config{Username: "admin", Password: testPassword, Systems: redfishmock.Systems(1)}
				if tt.cfg != nil {
					tt.cfg(&cfg)
				}
				srv := redfishmocktest.Start(t, cfg)
				password := testPassword
				if tt.password != "" {
					password = tt.password
				}
				flags := caFlags(t, srv, password)
				// With a 60 s power timeout, only a command that fails at once
				// ends in seconds: a polled one would take the whole minute.
				start := time.Now()
				out, errOut, code := cli(t, append(append(append([]string{"bmc", "off", "--yes", "-o", format}, flags...), tt.extra...),
					"--settle-window", "200ms", "--settle-reads", "2", "--power-timeout", "60s")...)
				if took := time.Since(start); took > 10*time.Second {
					t.Errorf("took %v: a failed command must be reported at once, not polled", took)
				}
				if code != tt.code || !strings.Contains(errOut, tt.want) || strings.Count(errOut, "\n") != 1 {
					t.Errorf("exit %d, stderr %q; want %d and one line saying %q", code, errOut, tt.code, tt.want)
				}
				if st, _ := srv.Mock.Status("1"); st.Counters.Requests > 4 {
					t.Errorf("%d requests: the CLI polled after a failed command", st.Counters.Requests)
				}
				if format == "json" {
					var r power.Report
					if err := json.Unmarshal([]byte(out), &r); err != nil {
						t.Fatalf("output is not JSON: %v\n%s", err, out)
					}
					if r.Error == nil || r.Error.Reason != tt.reason || r.Error.ExitCode != tt.code || r.Confirmed {
						t.Errorf("report %+v: want error reason %s, exit code %d", r, tt.reason, tt.code)
					}
				}
				for _, pw := range []string{testPassword, "wrong-Pa55word"} {
					if strings.Contains(out+errOut, pw) {
						t.Errorf("the password appears in the output")
					}
				}
			})
		}
	}
}

func TestBMCWrongPasswordOverIPMIExits3(t *testing.T) {
	sim := ipmisim.StartT(t, ipmisim.Options{InitialPower: true})
	// Well within the 10 s request timeout: a wrong password is refused at
	// once, not mistaken for a silent BMC.
	start := time.Now()
	out, errOut, code := cli(t, append([]string{"bmc", "off", "--yes", "-o", "json"}, ipmiFlags(t, sim.Address(), sim.Username(), "wrong-Pa55word")...)...)
	if took := time.Since(start); took > 5*time.Second || code != exitAuth || !strings.Contains(errOut, "rejected the credentials") {
		t.Errorf("exit %d after %v, stderr %q; want 3 at once", code, took, errOut)
	}
	if !strings.Contains(out, `"reason": "auth"`) || strings.Contains(out+errOut, "wrong-Pa55word") {
		t.Errorf("output %s", out)
	}
}

// A BMC whose error body echoes the login (the Authorization header, the
// session request) must not hand the password to our output.
func TestBMCErrorsNeverEchoThePassword(t *testing.T) {
	mock, err := redfishmock.New(redfishmock.Config{Username: "admin", Password: testPassword, Systems: redfishmock.Systems(1)})
	if err != nil {
		t.Fatal(err)
	}
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost || strings.HasSuffix(r.URL.Path, "/Systems/1") {
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			msg := fmt.Sprintf("bad request from %s with %s and body %s", r.RemoteAddr, r.Header.Get("Authorization"), body)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": "Base.1.8.GeneralError", "message": msg,
				"@Message.ExtendedInfo": []any{map[string]any{"MessageId": "Oem.1.0.Echo", "Message": msg + " password=" + testPassword}}}})
			return
		}
		mock.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(echo)
	t.Cleanup(srv.Close)
	t.Cleanup(mock.Close)
	t.Setenv("BMC_PASSWORD", testPassword)
	for _, auth := range []string{"basic", "session"} {
		for _, sub := range []string{"status", "off"} {
			out, errOut, code := cli(t, "bmc", sub, "--yes", "-o", "json", "--address", srv.URL, "--username", "admin", "--password-env", "BMC_PASSWORD", "--auth", auth)
			if sub == "status" {
				out, errOut, code = cli(t, "bmc", sub, "-o", "json", "--address", srv.URL, "--username", "admin", "--password-env", "BMC_PASSWORD", "--auth", auth)
			}
			basic := base64.StdEncoding.EncodeToString([]byte("admin:" + testPassword))
			if code == 0 || strings.Contains(out+errOut, testPassword) || strings.Contains(out+errOut, basic) {
				t.Errorf("%s/%s: exit %d, output leaks the login:\n%s%s", auth, sub, code, out, errOut)
			}
			if !strings.Contains(errOut, "[redacted]") && auth == "basic" {
				t.Errorf("%s/%s: stderr %q: want the BMC's echo, redacted", auth, sub, errOut)
			}
		}
	}
}

// Systems sharing a Name are commanded by Id.
func TestBMCSharedNamesBySystemID(t *testing.T) {
	cfg := redfishmock.Config{Username: "admin", Password: testPassword,
		Systems: []redfishmock.SystemConfig{{ID: "a", Name: "node"}, {ID: "b", Name: "node"}}}
	srv := redfishmocktest.Start(t, cfg)
	flags := append(caFlags(t, srv, testPassword), "--system", "b")
	if _, errOut, code := cli(t, append(append([]string{"bmc", "off", "--yes"}, flags...), fast...)...); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if a, _ := srv.Mock.Status("a"); a.PowerState != redfishmock.PowerOn {
		t.Error("system a was touched")
	}
	if b, _ := srv.Mock.Status("b"); b.PowerState != redfishmock.PowerOff {
		t.Error("system b is not off")
	}
}

func TestBMCStatusRawIsExact(t *testing.T) {
	sim := ipmisim.StartT(t, ipmisim.Options{InitialPower: true})
	out, errOut, code := cli(t, append([]string{"bmc", "status", "-o", "json"}, ipmiFlags(t, sim.Address(), sim.Username(), sim.Password())...)...)
	if code != 0 || !strings.Contains(out, `"raw": "Chassis Power is on"`) {
		t.Errorf("exit %d: %s %s", code, out, errOut)
	}
}

// ipmi://[::1]:PORT reaches a BMC bound to the IPv6 loopback.
func TestBMCOverIPv6(t *testing.T) {
	if pc, err := net.ListenPacket("udp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	} else {
		_ = pc.Close()
	}
	for _, peer := range []string{"ipmi_sim", "pyghmi"} {
		t.Run(peer, func(t *testing.T) {
			var addr, user, pw string
			var on func() (bool, error)
			if peer == "ipmi_sim" {
				s := ipmisim.StartT(t, ipmisim.Options{InitialPower: true, Address: "::1"})
				addr, user, pw, on = s.Address(), s.Username(), s.Password(), s.Power
			} else {
				s := pyghmisim.StartT(t, pyghmisim.Options{InitialPower: true, Address: "::1"})
				addr, user, pw, on = s.Address(), s.Username(), s.Password(), s.Power
			}
			flags := ipmiFlags(t, addr, user, pw)
			t.Setenv("PATH", t.TempDir())
			for _, args := range [][]string{
				{"bmc", "status"},
				append([]string{"bmc", "off", "--yes"}, fast...),
				{"bmc", "on", "--yes", "--wait"},
			} {
				if out, errOut, code := cli(t, append(args, flags...)...); code != 0 {
					t.Fatalf("%v: exit %d: %s %s", args, code, out, errOut)
				}
			}
			if ok, _ := on(); !ok {
				t.Error("machine not on at the end")
			}
		})
	}
}

// bmc status names the system's UUID, so an inventory's expectedUUID can
// be checked before there is a cluster, and says whose power it trusted.
func TestBMCStatusJSONHasTheSystemUUID(t *testing.T) {
	srv, flags := mockBMC(t)
	out, errOut, code := cli(t, append([]string{"bmc", "status", "-o", "json"}, flags...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var v struct {
		UUID    string `json:"uuid"`
		Trusted struct {
			Resource, Why string
		} `json:"trusted"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	st, _ := srv.Mock.Status("1")
	if v.UUID != st.UUID || v.Trusted.Resource == "" || v.Trusted.Why == "" {
		t.Errorf("status %s; want uuid %s and the trusted resource", out, st.UUID)
	}
	out, _, _ = cli(t, append([]string{"bmc", "status", "--uuid"}, flags...)...)
	if !strings.Contains(out, st.UUID) || !strings.Contains(out, "Power trusted: system") {
		t.Errorf("table %q: want the UUID and the trusted resource", out)
	}
}

// --dry-run talks to the BMC (reachable, credentials, system, its power)
// and sends nothing; its JSON action is a token, the plan a sentence.
func TestBMCOffDryRunChecksTheBMCAndSendsNothing(t *testing.T) {
	srv, flags := mockBMC(t)
	out, errOut, code := cli(t, append([]string{"bmc", "off", "--dry-run", "-o", "json"}, flags...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r power.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	st, _ := srv.Mock.Status("1")
	if r.Action != "off" || !r.DryRun || r.PowerState != bmc.PowerOn || r.UUID != st.UUID || !strings.Contains(r.Plan, "ForceOff") || !strings.Contains(r.Plan, "nothing was sent") {
		t.Errorf("dry run report %+v", r)
	}
	if st.Counters.Requests == 0 || len(st.Counters.Resets) != 0 {
		t.Errorf("counters %+v: want the BMC read and nothing sent", st.Counters)
	}
	t.Setenv("BMC_PASSWORD", "wrong-Pa55word")
	if _, errOut, code := cli(t, append([]string{"bmc", "off", "--dry-run"}, flags...)...); code != exitAuth {
		t.Errorf("dry run with a wrong password: exit %d (%s), want %d", code, errOut, exitAuth)
	}
}

// The CLI's errors name its flags, not the agent's settings.
func TestBMCErrorsNameTheFlags(t *testing.T) {
	srv, _ := mockBMC(t)
	base := []string{"--address", srv.URL, "--username", "admin", "--password-env", "BMC_PASSWORD"}
	_, errOut, code := cli(t, append([]string{"bmc", "status"}, base...)...)
	if code != exitTLS || !strings.Contains(errOut, "--ca-file") || !strings.Contains(errOut, "--insecure") {
		t.Errorf("untrusted certificate: exit %d, %q; want the flags --ca-file and --insecure", code, errOut)
	}
	_, errOut, code = cli(t, append([]string{"bmc", "status", "--insecure"}, base...)...)
	if code != exitUnsupported || !strings.Contains(errOut, "--system") {
		t.Errorf("two systems, none chosen: exit %d, %q; want --system named", code, errOut)
	}
}

// The mock's sushy profile (sushy-tools: a chassis that always reads On)
// is fenced: our own ForceOff, the chassis set aside, the report says so.
// OpenBMC, whose chassis is the real power, is still refused while its
// chassis reads power.
func TestBMCOffSushyFencedOpenBMCRefusedWhileItsChassisIsOn(t *testing.T) {
	t.Run("sushy", func(t *testing.T) {
		cfg := redfishmock.Config{Username: "admin", Password: testPassword, Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileSushy}
		srv := redfishmocktest.Start(t, cfg)
		out, errOut, code := cli(t, append(append([]string{"bmc", "off", "--yes", "--chassis-power", "ignore"}, caFlags(t, srv, testPassword)...), fast...)...)
		st, _ := srv.Mock.Status("1")
		if code != 0 || st.Counters.Resets[redfishmock.ResetForceOff] != 1 || st.PowerState != redfishmock.PowerOff {
			t.Fatalf("exit %d, resets %v, power %s: %s %s", code, st.Counters.Resets, st.PowerState, out, errOut)
		}
		if !strings.Contains(out, "Power trusted: system") || !strings.Contains(out, "--chassis-power ignore") {
			t.Errorf("report %q does not say the chassis was set aside by --chassis-power ignore", out)
		}
	})
	// Without it, sushy-tools' Off is not confirmed (its nova and ironic
	// drivers read a paused or unknown machine as Off), and the error says
	// what to set and which drivers never to fence through.
	t.Run("sushy without --chassis-power ignore", func(t *testing.T) {
		cfg := redfishmock.Config{Username: "admin", Password: testPassword, Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileSushy}
		srv := redfishmocktest.Start(t, cfg)
		out, errOut, code := cli(t, append(append([]string{"bmc", "off", "--yes"}, caFlags(t, srv, testPassword)...),
			"--settle-window", "200ms", "--settle-reads", "2", "--power-timeout", "2s")...)
		if code != exitNotOff || !strings.Contains(errOut, "--chassis-power ignore") || !strings.Contains(errOut, "nova or ironic") {
			t.Errorf("exit %d, %q %q; want exit %d saying --chassis-power ignore is needed with sushy-tools' libvirt or fake driver", code, out, errOut, exitNotOff)
		}
	})
	t.Run("openbmc", func(t *testing.T) {
		cfg := redfishmock.Config{Username: "admin", Password: testPassword, Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileOpenBMC,
			Timing: redfishmock.Timing{PowerOn: time.Hour}}
		srv := redfishmocktest.Start(t, cfg)
		// The host is down, the chassis powering on (and staying so): the
		// system reads Off, the chassis has power; the BMC ignores our off.
		if err := srv.Mock.SetPower("1", redfishmock.PowerOff); err != nil {
			t.Fatal(err)
		}
		if err := srv.Mock.Event("1", redfishmock.EventPowerRestore); err != nil {
			t.Fatal(err)
		}
		if err := srv.Mock.SetFaults("1", redfishmock.Faults{IgnoreCommands: true}); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := cli(t, append(append([]string{"bmc", "off", "--yes", "-o", "json"}, caFlags(t, srv, testPassword)...),
			"--settle-window", "200ms", "--settle-reads", "2", "--power-timeout", "2s")...)
		if code != exitNotOff || !strings.Contains(out, `"resource": "chassis"`) {
			t.Errorf("exit %d, %s %s; want exit %d trusting the chassis", code, out, errOut, exitNotOff)
		}
	})
}

// A BMC that answers 0xD5 to our power-off: the report shows its own
// completion code, progress goes to stderr also without a terminal, in
// the flags' words, and --power-timeout bounds the whole run.
func TestBMCOffRefusedByTheBMCHonoursItsTimeout(t *testing.T) {
	sim := pyghmisim.StartT(t, pyghmisim.Options{InitialPower: false})
	if err := sim.SetBehavior(pyghmisim.Behavior{Mode: pyghmisim.Refusing}); err != nil {
		t.Fatal(err)
	}
	flags := ipmiFlags(t, sim.Address(), sim.Username(), sim.Password())
	start := time.Now()
	out, errOut, code := cli(t, append(append([]string{"bmc", "off", "--yes", "-o", "json"}, flags...), "--power-timeout", "3s")...)
	took := time.Since(start)
	// What the command controls, not the loaded machine's wall clock:
	// it stopped on its 3 s limit (without it, the "already off" answer
	// would keep it reading for the 60 s unassisted window and confirm
	// the Off: exit 0), with one ForceOff, and read at most as often as
	// fits in the limit (the poll interval is a fifth of it: 600 ms, so
	// at most 6 reads). The wall-clock bound only catches a hang.
	if code != exitNotOff || took > 45*time.Second {
		t.Fatalf("exit %d after %v: %s %s; want %d, ended by the 3s --power-timeout", code, took, out, errOut, exitNotOff)
	}
	var r power.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Reply, "completion code 0xd5") || r.Error == nil || !strings.Contains(r.Error.Message, "--power-timeout 3s is shorter") {
		t.Errorf("report %+v; want the BMC's 0xd5 and the timeout's advice", r)
	}
	if r.Commands != 1 || r.OffReads > 6 {
		t.Errorf("report %+v: %d commands and %d Off reads; want one ForceOff and at most the 6 reads a 3 s limit holds", r, r.Commands, r.OffReads)
	}
	if !strings.Contains(errOut, "progress: ") || strings.Contains(errOut, "did nothing (BMC did nothing") || strings.Contains(errOut, "Policy.") {
		t.Errorf("stderr %q: want progress lines in the flags' words", errOut)
	}
	// Confirmed after the unassisted window, the note names the flag.
	out, errOut, code = cli(t, append(append([]string{"bmc", "off", "--yes"}, flags...),
		"--settle-window", "200ms", "--settle-reads", "2", "--unassisted-settle-window", "1s", "--power-timeout", "10s")...)
	if code != 0 || !strings.Contains(out, "--unassisted-settle-window") || !strings.Contains(out, "BMC replied: completion code 0xd5") {
		t.Errorf("exit %d, %q %q; want a confirmed Off whose note names --unassisted-settle-window", code, out, errOut)
	}
	if regexp.MustCompile(`\(([3-9]|\d\d+) of 2\)`).MatchString(errOut) {
		t.Errorf("progress counts past the reads needed: %q", errOut)
	}
}
