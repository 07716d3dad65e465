package ipmisim

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// ipmitool's exact words, which the bmclib adapter parses.
const (
	statusOn       = "Chassis Power is on\n"
	statusOff      = "Chassis Power is off\n"
	controlOff     = "Chassis Power Control: Down/Off\n"
	controlOn      = "Chassis Power Control: Up/On\n"
	controlReset   = "Chassis Power Control: Reset\n"
	controlSoft    = "Chassis Power Control: Soft\n"
	controlCycle   = "Chassis Power Control: Cycle\n"
	offFailed      = "Set Chassis Power Control to Down/Off failed: Unspecified error\n"
	onFailed       = "Set Chassis Power Control to Up/On failed: Unspecified error\n"
	statusFailed   = "Get Chassis Power Status failed: Unspecified error\n"
	noSession      = "Error: Unable to establish IPMI v2 / RMCP+ session\n"
	offTimedOut    = "Unable to set Chassis Power Control to Down/Off\n"
	statusTimedOut = "Unable to get Chassis Power Status\n"
)

var (
	powerStatus = []string{"chassis", "power", "status"}
	powerOff    = []string{"chassis", "power", "off"}
	powerOn     = []string{"chassis", "power", "on"}
)

// ok and failed build the Output of one ipmitool run.
func ok(stdout string) Output     { return Output{Stdout: stdout} }
func failed(stderr string) Output { return Output{Stderr: stderr, ExitCode: 1} }

type step struct {
	args []string
	want Output
}

func run(args []string, want Output) step { return step{args: args, want: want} }

func ipmitool(t *testing.T, s *Sim, args ...string) Output {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := s.Ipmitool(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestChassisPower(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		power     bool
		behavior  Behavior
		steps     []step
		wantPower bool
		wantCmds  []string
	}{
		{
			name:      "status reads on",
			power:     true,
			steps:     []step{run(powerStatus, ok(statusOn))},
			wantPower: true,
		},
		{
			name:  "status reads off",
			steps: []step{run(powerStatus, ok(statusOff))},
		},
		{
			name:     "power off then read back off",
			power:    true,
			steps:    []step{run(powerOff, ok(controlOff)), run(powerStatus, ok(statusOff))},
			wantCmds: []string{"set power 0"},
		},
		{
			name:      "power on then read back on",
			steps:     []step{run(powerOn, ok(controlOn)), run(powerStatus, ok(statusOn))},
			wantPower: true,
			wantCmds:  []string{"set power 1"},
		},
		{
			name:     "power off when already off is sent and accepted",
			steps:    []step{run(powerOff, ok(controlOff)), run(powerStatus, ok(statusOff))},
			wantCmds: []string{"set power 0"},
		},
		{
			name:      "stuck BMC accepts power off and stays on",
			power:     true,
			behavior:  Behavior{Stuck: true},
			steps:     []step{run(powerOff, ok(controlOff)), run(powerStatus, ok(statusOn))},
			wantPower: true,
			wantCmds:  []string{"set power 0"},
		},
		{
			name:      "failing BMC answers power off with an error",
			power:     true,
			behavior:  Behavior{Failing: true},
			steps:     []step{run(powerOff, failed(offFailed)), run(powerStatus, ok(statusOn))},
			wantPower: true,
			wantCmds:  []string{"set power 0"},
		},
		{
			name:     "failing BMC answers power on with an error",
			behavior: Behavior{Failing: true},
			steps:    []step{run(powerOn, failed(onFailed)), run(powerStatus, ok(statusOff))},
			wantCmds: []string{"set power 1"},
		},
		{
			name:     "failing wins over stuck",
			behavior: Behavior{Failing: true, Stuck: true},
			steps:    []step{run(powerOn, failed(onFailed))},
			wantCmds: []string{"set power 1"},
		},
		{
			name:      "status fails, control still works",
			power:     true,
			behavior:  Behavior{StatusFails: true},
			steps:     []step{run(powerStatus, failed(statusFailed)), run(powerOff, ok(controlOff)), run(powerStatus, failed(statusFailed))},
			wantPower: false,
			wantCmds:  []string{"set power 0"},
		},
		{
			name:     "power on fails: reads on once, then off",
			behavior: Behavior{PowerOnFails: true},
			steps: []step{
				run(powerOn, ok(controlOn)),
				run(powerStatus, ok(statusOn)),
				run(powerStatus, ok(statusOff)),
				run(powerStatus, ok(statusOff)),
			},
			wantCmds: []string{"set power 1"},
		},
		{
			name:      "power on fails only affects an off machine",
			power:     true,
			behavior:  Behavior{PowerOnFails: true},
			steps:     []step{run(powerOn, ok(controlOn)), run(powerStatus, ok(statusOn)), run(powerStatus, ok(statusOn))},
			wantPower: true,
			wantCmds:  []string{"set power 1"},
		},
		{
			name:     "soft shutdown turns the machine off",
			power:    true,
			steps:    []step{run([]string{"chassis", "power", "soft"}, ok(controlSoft)), run(powerStatus, ok(statusOff))},
			wantCmds: []string{"set shutdown 1"},
		},
		{
			name:      "reset leaves the power as it is",
			power:     true,
			steps:     []step{run([]string{"chassis", "power", "reset"}, ok(controlReset)), run(powerStatus, ok(statusOn))},
			wantPower: true,
			wantCmds:  []string{"set reset 1"},
		},
		{
			name:     "reset of an off machine leaves it off",
			steps:    []step{run([]string{"chassis", "power", "reset"}, ok(controlReset)), run(powerStatus, ok(statusOff))},
			wantCmds: []string{"set reset 1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := StartT(t, Options{InitialPower: tc.power})
			if err := s.SetBehavior(tc.behavior); err != nil {
				t.Fatal(err)
			}
			for i, st := range tc.steps {
				got := ipmitool(t, s, st.args...)
				if diff := cmp.Diff(st.want, got); diff != "" {
					t.Errorf("step %d: ipmitool %s (-want +got):\n%s", i, strings.Join(st.args, " "), diff)
				}
			}
			if on, err := s.Power(); err != nil || on != tc.wantPower {
				t.Errorf("Power() = %v, %v; want %v", on, err, tc.wantPower)
			}
			if diff := cmp.Diff(tc.wantCmds, s.Commands()); diff != "" {
				t.Errorf("Commands() (-want +got):\n%s", diff)
			}
		})
	}
}

// A cycle is ipmi_sim's own: set power 0, and a second later set power 1 if the machine reads off.
func TestCycle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		power     bool
		behavior  Behavior
		want      Output
		wantPower bool
		wantCmds  []string
	}{
		{
			name:      "cycle of an on machine ends on",
			power:     true,
			want:      ok(controlCycle),
			wantPower: true,
			wantCmds:  []string{"set power 0", "set power 1"},
		},
		{
			// Real BMCs refuse (0xD5); never fence with cycle.
			name:      "cycle of an off machine turns it on",
			want:      ok(controlCycle),
			wantPower: true,
			wantCmds:  []string{"set power 0", "set power 1"},
		},
		{
			name:      "stuck BMC: the machine never read off, so no power on follows",
			power:     true,
			behavior:  Behavior{Stuck: true},
			want:      ok(controlCycle),
			wantPower: true,
			wantCmds:  []string{"set power 0"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := StartT(t, Options{InitialPower: tc.power})
			if err := s.SetBehavior(tc.behavior); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, ipmitool(t, s, "chassis", "power", "cycle")); diff != "" {
				t.Errorf("ipmitool chassis power cycle (-want +got):\n%s", diff)
			}
			// ipmi_sim's timer fires after 1 s and reads the power: wait for that read. The timer
			// sends its power on in the same turn of ipmi_sim's single-threaded loop, so one more
			// request, answered after it, is a barrier.
			waitFor(t, 10*time.Second, func() bool { return count(s.requests(), "get power") >= 1 })
			ipmitool(t, s, powerStatus...)
			if diff := cmp.Diff(tc.wantCmds, s.Commands()); diff != "" {
				t.Errorf("Commands() (-want +got):\n%s", diff)
			}
			if on, err := s.Power(); err != nil || on != tc.wantPower {
				t.Errorf("Power() = %v, %v; want %v", on, err, tc.wantPower)
			}
		})
	}
}

func TestDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		delay    time.Duration
		args     []string
		want     Output
		wantPow  bool
		wantReqs []string
	}{
		{
			name:     "a slow status read is answered",
			delay:    400 * time.Millisecond,
			args:     powerStatus,
			want:     ok(statusOn),
			wantPow:  true,
			wantReqs: []string{"get power"},
		},
		{
			name:     "a slow power off is answered and done",
			delay:    400 * time.Millisecond,
			args:     powerOff,
			want:     ok(controlOff),
			wantReqs: []string{"set power 0"},
		},
		{
			// ipmitool retransmits after 1 s; single-threaded ipmi_sim executes the
			// retransmission too, once the first is done, and ipmitool waits for its answer.
			name:     "a power off slower than a second is executed twice",
			delay:    1200 * time.Millisecond,
			args:     powerOff,
			want:     ok(controlOff),
			wantReqs: []string{"set power 0", "set power 0"},
		},
		{
			// ipmitool gives up after -N 1 -R 1 (2 s); the BMC still powers the machine off.
			name:     "a power off slower than ipmitool's timeout fails but happens",
			delay:    2500 * time.Millisecond,
			args:     []string{"-N", "1", "-R", "1", "chassis", "power", "off"},
			want:     failed(offTimedOut),
			wantReqs: []string{"set power 0"},
		},
		{
			name:     "a status read slower than ipmitool's timeout fails",
			delay:    2500 * time.Millisecond,
			args:     []string{"-N", "1", "-R", "1", "chassis", "power", "status"},
			want:     failed(statusTimedOut),
			wantPow:  true,
			wantReqs: []string{"get power"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := StartT(t, Options{InitialPower: true})
			if err := s.SetBehavior(Behavior{Delay: tc.delay}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			got := ipmitool(t, s, tc.args...)
			elapsed := time.Since(start)
			// ipmitool may also print "Close Session command failed" when it gave up mid-session.
			got.Stderr = strings.ReplaceAll(got.Stderr, "Close Session command failed\n", "")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ipmitool %s (-want +got):\n%s", strings.Join(tc.args, " "), diff)
			}
			if elapsed < min(tc.delay, 2*time.Second) {
				t.Errorf("ipmitool answered after %v, before the %v delay", elapsed, tc.delay)
			}
			// The request completes inside the sim even when ipmitool gave up.
			waitFor(t, 10*time.Second, func() bool {
				on, err := s.Power()
				return err == nil && on == tc.wantPow
			})
			if diff := cmp.Diff(tc.wantReqs, s.requests()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			t.Logf("delay %v: ipmitool took %v", tc.delay, elapsed.Round(time.Millisecond))
		})
	}
}

func TestPowerLoss(t *testing.T) {
	t.Parallel()
	s := StartT(t, Options{InitialPower: true})
	var got []Output
	got = append(got, ipmitool(t, s, powerStatus...))
	if err := s.SetPower(false); err != nil {
		t.Fatal(err)
	}
	got = append(got, ipmitool(t, s, powerStatus...))
	if err := s.SetPower(true); err != nil {
		t.Fatal(err)
	}
	got = append(got, ipmitool(t, s, powerStatus...))
	if diff := cmp.Diff([]Output{ok(statusOn), ok(statusOff), ok(statusOn)}, got); diff != "" {
		t.Errorf("status reads (-want +got):\n%s", diff)
	}
	if cmds := s.Commands(); len(cmds) != 0 {
		t.Errorf("Commands() = %q; SetPower must not look like an IPMI command", cmds)
	}
}

// The adapter classifies these; with -v ipmitool says why before the common last line.
func TestAuthFailures(t *testing.T) {
	t.Parallel()
	s := StartT(t, Options{Username: "fencer", Password: "right-password"})
	tests := []struct {
		name       string
		user, pass string
		verbose    bool
		want       Output
	}{
		{name: "right credentials", user: "fencer", pass: "right-password", want: ok(statusOff)},
		{name: "wrong password", user: "fencer", pass: "wrong-password", want: failed(noSession)},
		{name: "unknown user", user: "nobody", pass: "right-password", want: failed(noSession)},
		{name: "wrong password verbose", user: "fencer", pass: "wrong", verbose: true,
			want: failed("Loading IANA PEN Registry...\n> RAKP 2 HMAC is invalid\n" + noSession)},
		{name: "unknown user verbose", user: "nobody", pass: "right-password", verbose: true,
			want: failed("Loading IANA PEN Registry...\nRAKP 2 message indicates an error : unauthorized name\n" + noSession)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := powerStatus
			if tc.verbose {
				args = append([]string{"-v"}, args...)
			}
			got, err := runIpmitool(t.Context(), s.Host(), s.Port(), tc.user, tc.pass, args...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if cmds := s.Commands(); len(cmds) != 0 {
		t.Errorf("Commands() = %q after failed logins", cmds)
	}
}

func TestUnreachable(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	t.Parallel()
	port, err := freeUDPPort("127.0.0.1") // nothing listens there any more
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := runIpmitool(t.Context(), "127.0.0.1", port, DefaultUsername, DefaultPassword, "-N", "1", "-R", "1", "chassis", "power", "status")
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(failed(noSession), got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// -N 1 -R 1: two one-second attempts.
	if elapsed < time.Second || elapsed > 10*time.Second {
		t.Errorf("unreachable BMC took %v with -N 1 -R 1; want about 2 s", elapsed)
	}
	t.Logf("unreachable with -N 1 -R 1: %v", elapsed.Round(time.Millisecond))
}

func TestCommandsLog(t *testing.T) {
	t.Parallel()
	s := StartT(t, Options{InitialPower: true})
	for _, args := range [][]string{
		powerStatus, powerOff, powerStatus, powerOn,
		{"chassis", "power", "reset"},
		{"chassis", "bootdev", "pxe"},
		{"chassis", "identify"},
	} {
		ipmitool(t, s, args...)
	}
	want := []string{"set power 0", "set power 1", "set reset 1", "set boot pxe", "set identify 15 0"}
	if diff := cmp.Diff(want, s.Commands()); diff != "" {
		t.Errorf("Commands() (-want +got):\n%s", diff)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, s.Commands()); diff != "" {
		t.Errorf("Commands() after Stop (-want +got):\n%s", diff)
	}
}

func TestTwoSimsInParallel(t *testing.T) {
	t.Parallel()
	a := StartT(t, Options{InitialPower: true})
	b := StartT(t, Options{InitialPower: true, Username: "other", Password: "other-pass"})
	if a.Address() == b.Address() {
		t.Fatalf("both sims on %s", a.Address())
	}
	ipmitool(t, a, powerOff...)
	got := map[string]Output{
		"a": ipmitool(t, a, powerStatus...),
		"b": ipmitool(t, b, powerStatus...),
	}
	want := map[string]Output{"a": ok(statusOff), "b": ok(statusOn)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string(nil), b.Commands()); diff != "" {
		t.Errorf("b.Commands() (-want +got):\n%s", diff)
	}
}

func TestStop(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	t.Parallel()
	tests := []struct {
		name        string
		callerDir   bool
		wantDirGone bool
	}{
		{name: "own temp dir is removed", wantDirGone: true},
		{name: "caller's dir is kept", callerDir: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var opts Options
			if tc.callerDir {
				opts.Dir = filepath.Join(t.TempDir(), "bmc")
			}
			s, err := Start(t.Context(), opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Stop() }) // in case the test fails before Stop
			// A request the control program is sleeping on when the group is killed.
			if err := s.SetBehavior(Behavior{Delay: time.Minute}); err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = s.Ipmitool(t.Context(), "-N", "1", "-R", "1", "chassis", "power", "status") }()
			waitFor(t, 10*time.Second, func() bool { return len(s.requests()) > 0 })

			start := time.Now()
			if err := s.Stop(); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if err := s.Stop(); err != nil {
				t.Fatalf("second Stop: %v", err)
			}
			t.Logf("Stop took %v", time.Since(start).Round(time.Millisecond))
			if _, err := os.Stat(s.Dir()); errors.Is(err, os.ErrNotExist) != tc.wantDirGone {
				t.Errorf("after Stop, Stat(%s) = %v; want gone: %v", s.Dir(), err, tc.wantDirGone)
			}
			if pingable(t, s.Port()) {
				t.Errorf("%s still answers pings after Stop", s.Address())
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	t.Parallel()
	busy, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Close() })
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "port in use: the error carries ipmi_sim's log", opts: Options{Port: busy.LocalAddr().(*net.UDPAddr).Port}, wantErr: "Unable to bind to LAN port"},
		{name: "password with a quote", opts: Options{Password: `pa"ss`}, wantErr: "password may only hold"},
		{name: "password too long", opts: Options{Password: strings.Repeat("x", 21)}, wantErr: "longer than 20"},
		{name: "username with a space", opts: Options{Username: "a b"}, wantErr: "username may only hold"},
		{name: "directory with a quote", opts: Options{Dir: filepath.Join(t.TempDir(), "it's")}, wantErr: "cannot be quoted"},
		{name: "port out of range", opts: Options{Port: 70000}, wantErr: "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := Start(t.Context(), tc.opts)
			if err == nil {
				_ = s.Stop()
				t.Fatalf("Start succeeded; want an error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Start error = %v; want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// The port picked for ipmi_sim can be taken before ipmi_sim binds it: Start tries another.
func TestStartRetriesATakenPort(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	t.Parallel()
	busy, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Close() })
	busyPort := busy.LocalAddr().(*net.UDPAddr).Port
	var picked []int
	pick := func(string) (int, error) {
		if len(picked) == 0 { // the race lost: someone took the port
			picked = append(picked, busyPort)
			return busyPort, nil
		}
		p, err := freeUDPPort("127.0.0.1")
		picked = append(picked, p)
		return p, err
	}
	s := &Sim{dir: t.TempDir(), username: DefaultUsername, password: DefaultPassword, host: "127.0.0.1", guid: DefaultGUID}
	if err := s.start(t.Context(), Options{InitialPower: true}, pick); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	if len(picked) != 2 || s.Port() != picked[1] {
		t.Fatalf("picked ports %v, sim on %d; want a second port after %d", picked, s.Port(), busyPort)
	}
	if diff := cmp.Diff(ok(statusOn), ipmitool(t, s, powerStatus...)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// The system channel's TCP port (Options.Host) can be taken too before
// ipmi_sim binds it (make test's first run lost that race): Start picks
// another and tries again.
func TestStartRetriesATakenSystemChannelPort(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	t.Parallel()
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Close() })
	busyPort := busy.Addr().(*net.TCPAddr).Port
	s := &Sim{dir: t.TempDir(), username: DefaultUsername, password: DefaultPassword, host: "127.0.0.1", guid: DefaultGUID, serialPort: busyPort}
	if err := s.start(t.Context(), Options{InitialPower: true, Host: true}, freeUDPPort); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	if s.serialPort == busyPort || s.serialPort == 0 {
		t.Fatalf("system channel on port %d; want another than the taken %d", s.serialPort, busyPort)
	}
}

// A directory name with characters the shell would otherwise interpret still works.
func TestAwkwardDir(t *testing.T) {
	t.Parallel()
	s := StartT(t, Options{Dir: filepath.Join(t.TempDir(), "a b$c&(d) ;e"), InitialPower: true})
	ipmitool(t, s, powerOff...)
	if diff := cmp.Diff(ok(statusOff), ipmitool(t, s, powerStatus...)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestSetBehaviorRejectsNegativeDelay(t *testing.T) {
	t.Parallel()
	s := StartT(t, Options{})
	if err := s.SetBehavior(Behavior{Delay: -time.Second}); err == nil {
		t.Error("SetBehavior accepted a negative delay")
	}
}

func TestBehaviorVars(t *testing.T) {
	tests := []struct {
		name string
		b    Behavior
		want string
	}{
		{name: "healthy", want: "stuck=0\nfailing=0\nstatus_fails=0\npoweron_fails=0\ndelay=0\ncycle_dwell_ms=0\n"},
		{name: "everything", b: Behavior{Stuck: true, Failing: true, StatusFails: true, PowerOnFails: true, Delay: 1500 * time.Millisecond, CycleDwell: 10 * time.Second},
			want: "stuck=1\nfailing=1\nstatus_fails=1\npoweron_fails=1\ndelay=1.500\ncycle_dwell_ms=10000\n"},
		{name: "sub-millisecond delay rounds", b: Behavior{Delay: 1234567 * time.Nanosecond},
			want: "stuck=0\nfailing=0\nstatus_fails=0\npoweron_fails=0\ndelay=0.001\ncycle_dwell_ms=0\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, behaviorVars(tc.b)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestIsRMCPPong(t *testing.T) {
	pong := []byte{0x06, 0x00, 0xff, 0x06, 0x00, 0x00, 0x11, 0xbe, 0x40, 0x07, 0x00, 0x10,
		0x00, 0x00, 0x11, 0xbe, 0x00, 0x00, 0x00, 0x00, 0x81, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}
	tests := []struct {
		name string
		b    []byte
		tag  byte
		want bool
	}{
		{name: "pong from ipmi_sim", b: pong, tag: 7, want: true},
		{name: "other tag", b: pong, tag: 8},
		{name: "our own ping", b: rmcpPing(7), tag: 7},
		{name: "short", b: pong[:11], tag: 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := isRMCPPong(tc.b, tc.tag); got != tc.want {
				t.Errorf("isRMCPPong = %v; want %v", got, tc.want)
			}
		})
	}
}

func BenchmarkStart(b *testing.B) {
	if err := Available(); err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		s, err := Start(b.Context(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := s.Stop(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func BenchmarkPowerStatus(b *testing.B) {
	s := StartT(b, Options{InitialPower: true})
	for b.Loop() {
		out, err := s.Ipmitool(b.Context(), powerStatus...)
		if err != nil || out != ok(statusOn) {
			b.Fatalf("%+v, %v", out, err)
		}
	}
}

// waitFor polls cond until it holds or the deadline passes: the sim is another process.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		<-tick.C
	}
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

// pingable reports whether something answers an RMCP ping on 127.0.0.1:port within 200 ms.
func pingable(t *testing.T, port int) bool {
	t.Helper()
	conn, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.Write(rmcpPing(1)); err != nil {
		return false
	}
	if err := conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	return err == nil && isRMCPPong(buf[:n], 1)
}

// With CycleDwell, a power cycle holds the machine off for the dwell and then it comes on by
// itself, unless a power off arrives during the dwell: then it stays off. This is the
// misleading Off of a restart that a fence must never take for its own.
func TestCycleDwell(t *testing.T) {
	t.Parallel()
	const dwell = 3 * time.Second
	for _, offDuringDwell := range []bool{false, true} {
		name := "the machine comes back on after the dwell"
		if offDuringDwell {
			name = "a power off during the dwell cancels the cycle"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := StartT(t, Options{InitialPower: true})
			if err := s.SetBehavior(Behavior{CycleDwell: dwell}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if diff := cmp.Diff(ok(controlCycle), ipmitool(t, s, "chassis", "power", "cycle")); diff != "" {
				t.Fatalf("cycle (-want +got):\n%s", diff)
			}
			// ipmi_sim's own power-on arrives ~1 s after the cycle's power-off; the machine must
			// still read off then. (A power off within that first second cancels ipmi_sim's own
			// timer; the dwell beyond it is the script's.)
			waitFor(t, 10*time.Second, func() bool { return count(s.Commands(), "set power 1") >= 1 })
			if diff := cmp.Diff(ok(statusOff), ipmitool(t, s, powerStatus...)); diff != "" && time.Since(start) < dwell {
				t.Errorf("status within the dwell (-want +got):\n%s", diff)
			}
			if offDuringDwell {
				if diff := cmp.Diff(ok(controlOff), ipmitool(t, s, powerOff...)); diff != "" {
					t.Fatalf("power off during the dwell (-want +got):\n%s", diff)
				}
			}
			if !offDuringDwell {
				// It comes on by itself once the dwell (counted from the cycle's power-off) ends.
				waitFor(t, 3*dwell, func() bool { on, _ := s.Power(); return on })
				if diff := cmp.Diff(ok(statusOn), ipmitool(t, s, powerStatus...)); diff != "" {
					t.Errorf("status after the dwell (-want +got):\n%s", diff)
				}
				return
			}
			cancelled := time.Now()
			waitFor(t, 3*dwell, func() bool { return time.Since(cancelled) > dwell+500*time.Millisecond })
			if diff := cmp.Diff(ok(statusOff), ipmitool(t, s, powerStatus...)); diff != "" {
				t.Errorf("status after the dwell (-want +got):\n%s", diff)
			}
			if on, err := s.Power(); err != nil || on {
				t.Errorf("Power() = %v, %v; want off", on, err)
			}
		})
	}
}

func TestIPv6(t *testing.T) {
	t.Parallel()
	if pc, err := net.ListenPacket("udp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	} else {
		_ = pc.Close()
	}
	s := StartT(t, Options{Address: "::1", InitialPower: true})
	if !strings.HasPrefix(s.Address(), "[::1]:") {
		t.Errorf("Address() = %q, want [::1]:PORT", s.Address())
	}
	if diff := cmp.Diff(ok(statusOn), ipmitool(t, s, powerStatus...)); diff != "" {
		t.Errorf("status over IPv6 (-want +got):\n%s", diff)
	}
}

func TestGUIDHex(t *testing.T) {
	got, err := guidHex(DefaultGUID)
	if err != nil || got != "a123456789abcdefa123456789abcdef" {
		t.Errorf("guidHex(%s) = %q, %v; want the SMBIOS byte order a1234567…", DefaultGUID, got, err)
	}
	if _, err := guidHex("not-a-guid"); err == nil {
		t.Error("guidHex accepted a malformed GUID")
	}
}
