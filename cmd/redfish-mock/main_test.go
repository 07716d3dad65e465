package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

var addressLine = regexp.MustCompile(`^redfish-mock: serving (\d+) systems on (https?)://(127\.0\.0\.1:(\d+))$`)

func noEnv(string) string { return "" }

func TestRunRejectsBadInputWithOneLineAndExit2(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	unknownField := write("unknown.yaml", "password: x\nsystemz: []\n")
	twoSystems := write("two.yaml", "password: x\nsystems: [{}, {}]\n")
	pwFile := write("pw", "secret\n")

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--nope"}, "unknown flag: --nope"},
		{"stray argument", []string{"--password", "x", "serve"}, `unexpected argument "serve"`},
		{"no password", nil, "no password"},
		{"both password sources", []string{"--password", "x", "--password-file", pwFile}, "mutually exclusive"},
		{"unreadable password file", []string{"--password-file", filepath.Join(dir, "absent")}, "--password-file"},
		{"zero systems", []string{"--password", "x", "--systems", "0"}, "--systems: 0"},
		{"too many systems", []string{"--password", "x", "--systems", "100000000"}, "--systems 100000000: at most 10000"},
		{"cert without key", []string{"--password", "x", "--cert", pwFile}, "--cert and --key go together"},
		{"cert without TLS", []string{"--password", "x", "--tls=false", "--cert", pwFile}, "need --tls"},
		{"bad cert", []string{"--password", "x", "--cert", pwFile, "--key", pwFile}, "--cert/--key"},
		{"missing config", []string{"--config", filepath.Join(dir, "absent.yaml")}, "no such file"},
		{"unknown config field", []string{"--config", unknownField}, `unknown field "systemz"`},
		{"fewer systems than the file lists", []string{"--config", twoSystems, "--systems", "1"}, "--systems 1 but"},
		{"bad log level", []string{"--password", "x", "--log-level", "loud"}, "--log-level"},
		{"error rate out of range", []string{"--password", "x", "--error-rate", "2"}, "faults: errorRate"},
		{"negative power-on time", []string{"--password", "x", "--power-on-time", "-1s"}, "timing: powerOnTime"},
		{"write-ca without TLS", []string{"--password", "x", "--tls=false", "--listen", "127.0.0.1:0", "--write-ca", filepath.Join(dir, "ca.pem")}, "--write-ca needs --tls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr, noEnv)
			if code != exitUsage {
				t.Errorf("exit %d, want %d; stderr: %s", code, exitUsage, stderr.String())
			}
			msg := stderr.String()
			if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "redfish-mock: ") || !strings.Contains(msg, tt.want) {
				t.Errorf("stderr = %q, want one line containing %q", msg, tt.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
		})
	}
}

func TestRunVersionAndHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &stdout, &stderr, noEnv); code != exitOK {
		t.Fatalf("--version: exit %d", code)
	}
	if !strings.HasPrefix(stdout.String(), "redfish-mock ") || !strings.Contains(stdout.String(), "commit") {
		t.Errorf("--version printed %q", stdout.String())
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"--help"}, &stdout, &stderr, noEnv); code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	if !strings.Contains(stdout.String(), "--power-on-time") {
		t.Errorf("--help printed %q", stdout.String())
	}
}

func TestBuildConfigLayers(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mock.yaml")
	doc := "username: root\npassword: from-file\ntiming: {powerOnTime: 20s, powerOffTime: 3s}\nsystems: [{name: a}, {name: b}]\n"
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		if k == passwordEnv {
			return "from-env"
		}
		return ""
	}
	tests := []struct {
		name   string
		args   []string
		env    func(string) string
		mutate func(want *redfishmock.Config)
	}{
		{
			name: "flag defaults without a file",
			args: []string{"--password", "p", "--systems", "3"},
			env:  noEnv,
			mutate: func(want *redfishmock.Config) {
				*want = redfishmock.Config{
					Username: "admin", Password: "p", Systems: redfishmock.Systems(3),
					Timing: redfishmock.DefaultTiming(), Seed: 1, Profile: redfishmock.ProfileGeneric,
					MaxSessions: redfishmock.DefaultMaxSessions, SessionTimeout: redfishmock.DefaultSessionTimeout,
				}
			},
		},
		{
			name: "a profile and an auth mode",
			args: []string{"--password", "p", "--profile", "idrac9", "--auth-mode", "session-only"},
			env:  noEnv,
			mutate: func(want *redfishmock.Config) {
				*want = redfishmock.Config{
					Username: "admin", Password: "p", Systems: redfishmock.Systems(1),
					Timing: redfishmock.DefaultTiming(), Seed: 1, Profile: redfishmock.ProfileIDRAC9,
					AuthMode:    redfishmock.AuthSessionOnly,
					MaxSessions: redfishmock.DefaultMaxSessions, SessionTimeout: redfishmock.DefaultSessionTimeout,
				}
			},
		},
		{
			name: "the file, untouched by flag defaults",
			args: []string{"--config", file},
			env:  noEnv,
			mutate: func(want *redfishmock.Config) {
				want.Password = "from-file"
			},
		},
		{
			name: "the environment beats the file",
			args: []string{"--config", file},
			env:  env,
			mutate: func(want *redfishmock.Config) {
				want.Password = "from-env"
			},
		},
		{
			name: "explicit flags beat both",
			args: []string{"--config", file, "--username", "admin", "--password", "p", "--power-on-time", "45s", "--systems", "3", "--latency", "1s"},
			env:  env,
			mutate: func(want *redfishmock.Config) {
				want.Username, want.Password = "admin", "p"
				want.Timing.PowerOn = 45 * time.Second
				want.Systems = append(want.Systems, redfishmock.SystemConfig{})
				want.Faults.Latency = time.Second
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o options
			fs := newFlagSet(&o)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			got, err := buildConfig(fs, &o, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			def := redfishmock.DefaultTiming()
			def.PowerOn, def.PowerOff = 20*time.Second, 3*time.Second
			want := redfishmock.Config{
				Username: "root", Timing: def,
				Systems: []redfishmock.SystemConfig{{Name: "a"}, {Name: "b"}},
			}
			tt.mutate(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

// startInProcess runs run() in the background and returns the address line.
func startInProcess(t *testing.T, args []string) (line string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdoutR, stdoutW := io.Pipe()
	var stderr lockedBuffer
	exit := make(chan int, 1)
	go func() {
		code := run(ctx, args, stdoutW, &stderr, noEnv)
		stdoutW.Close()
		exit <- code
	}()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("no address line (%v); exit %d; stderr: %s", err, <-exit, stderr.String())
	}
	stopped := false
	stop = func() int {
		if stopped {
			return exitOK
		}
		stopped = true
		cancel()
		select {
		case code := <-exit:
			return code
		case <-time.After(10 * time.Second):
			t.Fatal("run did not return after cancellation")
			return -1
		}
	}
	t.Cleanup(func() { stop() })
	return strings.TrimSuffix(line, "\n"), stop
}

func TestRunServesVerifiableTLSAndStops(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	line, stop := startInProcess(t, []string{"--listen", "127.0.0.1:0", "--systems", "2", "--password", "secret", "--write-ca", ca, "--power-on-time", "0s"})
	m := addressLine.FindStringSubmatch(line)
	if m == nil || m[1] != "2" || m[2] != "https" {
		t.Fatalf("address line %q", line)
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("--write-ca wrote no certificate")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()

	req, _ := http.NewRequest(http.MethodGet, "https://"+m[3]+"/redfish/v1/Systems/2", nil)
	req.SetBasicAuth("admin", "secret")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET over verified TLS: %v", err)
	}
	var sys struct{ PowerState string }
	_ = json.NewDecoder(resp.Body).Decode(&sys)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || sys.PowerState != "On" {
		t.Errorf("GET system 2 = %d, PowerState %q", resp.StatusCode, sys.PowerState)
	}

	// A hung request must not keep the server from stopping.
	put, _ := http.NewRequest(http.MethodPut, "https://"+m[3]+"/mock/systems/1/faults", strings.NewReader(`{"hang":true}`))
	if resp, err := client.Do(put); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT faults: %v %v", resp, err)
	}
	hung := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "https://"+m[3]+"/redfish/v1/Systems/1", nil)
		req.SetBasicAuth("admin", "secret")
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		hung <- err
	}()
	if code := stop(); code != exitOK {
		t.Errorf("exit %d after cancellation", code)
	}
	<-hung
}

func TestRunServesPlainHTTP(t *testing.T) {
	line, stop := startInProcess(t, []string{"--listen", "127.0.0.1:0", "--tls=false", "--password", "secret"})
	m := addressLine.FindStringSubmatch(line)
	if m == nil || m[1] != "1" || m[2] != "http" {
		t.Fatalf("address line %q", line)
	}
	resp, err := http.Get("http://" + m[3] + "/redfish/v1/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET service root = %d", resp.StatusCode)
	}
	if code := stop(); code != exitOK {
		t.Errorf("exit %d", code)
	}
}

type lockedBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func (b *lockedBuffer) lock() {
	if b.mu == nil {
		b.mu = make(chan struct{}, 1)
	}
	b.mu <- struct{}{}
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.lock()
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.lock()
	defer func() { <-b.mu }()
	return b.buf.String()
}

// TestMain removes the binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// buildBinary builds this command once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	// go test puts its own GOROOT/bin first on PATH.
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build the binary with: %v", err)
	}
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "redfish-mock-test-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "redfish-mock")
		out, err := exec.Command(goTool, "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// startBinary runs the built binary and returns its address line. The
// process is in its own group, dies with the test process, and is killed
// when the test ends.
func startBinary(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- strings.TrimSuffix(line, "\n")
	}()
	select {
	case line := <-lines:
		if !addressLine.MatchString(line) {
			t.Fatalf("address line %q; stderr: %s", line, stderr.String())
		}
		return line
	case <-time.After(30 * time.Second):
		t.Fatalf("no address line; stderr: %s", stderr.String())
		return ""
	}
}

func TestBinaryStopsOnSIGTERM(t *testing.T) {
	bin := buildBinary(t)
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--password", "x")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10 s after SIGTERM")
	}
}

// TestFenceRedfish checks the binary against the fence agent Pacemaker
// clusters use: status, off, on, through fence_redfish's own polling.
func TestFenceRedfish(t *testing.T) {
	const agent = "/usr/sbin/fence_redfish"
	if _, err := os.Stat(agent); err != nil {
		t.Skip("fence_redfish not found; install the Debian package fence-agents")
	}
	bin := buildBinary(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	// Short power times: fence_redfish polls status once a second.
	line := startBinary(t, bin, "--listen", "127.0.0.1:0", "--systems", "2", "--username", "admin", "--password", "secret",
		"--power-on-time", "1500ms", "--power-off-time", "1500ms", "--write-ca", ca)
	port := addressLine.FindStringSubmatch(line)[4]

	// Options go on stdin, as a fencing daemon passes them, so the password
	// stays out of argv.
	type result struct {
		Output string
		Exit   int
	}
	fence := func(action string, env []string, extra ...string) result {
		t.Helper()
		opts := append([]string{"ip=127.0.0.1", "ipport=" + port, "username=admin", "password=secret",
			"systems_uri=/redfish/v1/Systems/1", "action=" + action}, extra...)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, agent)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.Stdin = strings.NewReader(strings.Join(opts, "\n") + "\n")
		// A minimal environment: python-requests lets REQUESTS_CA_BUNDLE and
		// CURL_CA_BUNDLE decide what TLS is verified against.
		cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}, env...)
		out, err := cmd.CombinedOutput()
		var exitErr *exec.ExitError
		if err != nil && !errors.As(err, &exitErr) {
			t.Fatalf("fence_redfish %s: %v", action, err)
		}
		return result{strings.TrimSpace(string(out)), cmd.ProcessState.ExitCode()}
	}

	got := []result{
		fence("status", nil, "ssl_insecure=1"),
		fence("off", nil, "ssl_insecure=1"),
		fence("status", nil, "ssl_insecure=1"),
		fence("on", nil, "ssl_insecure=1"),
		// Verified TLS: fence_redfish has no CA option, but python-requests
		// takes the CA bundle from the environment.
		fence("status", []string{"REQUESTS_CA_BUNDLE=" + ca}, "ssl_secure=1"),
	}
	// Exit 2 is the fence-agent convention for "status: off".
	want := []result{
		{"Status: ON", 0},
		{"Success: Powered OFF", 0},
		{"Status: OFF", 2},
		{"Success: Powered ON", 0},
		{"Status: ON", 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fence_redfish (-want +got):\n%s", diff)
	}

	status := func(id string) redfishmock.SystemStatus {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1:"+port+"/mock/systems/"+id, nil)
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback test peer
		defer client.CloseIdleConnections()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st redfishmock.SystemStatus
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if diff := cmp.Diff(map[redfishmock.ResetType]int64{"ForceOff": 1, "On": 1}, status("1").Counters.Resets); diff != "" {
		t.Errorf("resets received by system 1 (-want +got):\n%s", diff)
	}
	if st := status("2"); st.Counters.Resets != nil || st.PowerState != redfishmock.PowerOn {
		t.Errorf("system 2 was touched: %s, %v", st.PowerState, st.Counters.Resets)
	}
}
