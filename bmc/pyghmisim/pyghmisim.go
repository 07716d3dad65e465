// Package pyghmisim runs a second, independent IPMI 2.0 BMC for tests:
// Debian's python3-pyghmi server class pyghmi.ipmi.bmc.Bmc, subclassed by a
// small script whose machine tests script from Go. Where ipmi_sim (package
// bmc/ipmisim) is OpenIPMI's C implementation, this one is Lenovo's Python
// one: a client that works against both does not lean on one server's
// quirks. Unlike ipmi_sim it can answer any completion code, so it models
// the refusing BMC (0xD5 "not supported in present state" to a power
// command the state rules out), and it binds IPv6 as readily as IPv4.
//
// It needs /usr/bin/python3 with pyghmi (`apt-get install python3-pyghmi`);
// [Available] says whether it is there and [StartT] skips the test when it
// is not. Debian's python3-* packages are only visible to Debian's own
// interpreter, hence /usr/bin/python3 rather than whatever python3 is first
// on PATH.
//
// The machine lives in files in the sim's directory, re-read on every
// request, so Go changes it between requests without talking to Python:
//
//	power         "1" or "0"
//	behavior      one line: MODE DELAY CYCLEDWELL, e.g. "refusing 0 0"
//	pending-on    while a power cycle holds the machine off: when it comes on
//	busy-left     how many more chassis control requests answer 0xC0 (node busy)
//	requests.log  one line per chassis request: "status", "control off|on|cycle|reset|soft", "guid"
//	password      the one user's password (never in argv)
//
// Modes: honest (obeys; a command for the state it is in is accepted and
// changes nothing), refusing (obeys, but answers 0xD5 to power off when off
// and power on when on, as many real BMCs do), lying (answers every control
// request with success and changes nothing). DELAY holds every answer back
// (the server is single-threaded: it is silent meanwhile). CYCLEDWELL makes
// a power cycle hold the machine off that many seconds before it comes back
// on; a power off in between cancels the cycle (a cycle of an off machine is
// refused with 0xD5, as on real BMCs).
package pyghmisim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/internal/childproc"
)

// Python is the interpreter that sees Debian's python3-pyghmi.
const Python = "/usr/bin/python3"

// ErrUnavailable is wrapped when pyghmi cannot be run.
var ErrUnavailable = errors.New("pyghmisim: /usr/bin/python3 with pyghmi is required (apt-get install python3-pyghmi)")

// Mode is how the BMC treats power commands.
type Mode string

const (
	Honest   Mode = "honest"
	Refusing Mode = "refusing"
	Lying    Mode = "lying"
)

// Behavior is how the BMC behaves; the zero value is an honest, prompt BMC.
type Behavior struct {
	Mode Mode
	// Delay holds back every answer.
	Delay time.Duration
	// CycleDwell is how long a power cycle holds the machine off.
	CycleDwell time.Duration
	// Busy answers the next Busy chassis control requests with completion
	// code 0xC0 (node busy), changing nothing.
	Busy int
}

// Options configure a Sim.
type Options struct {
	// Address to bind: "127.0.0.1" (default) or "::1".
	Address string
	// Username and Password of the only user; defaults "admin" and
	// "pyghmi-test-pw".
	Username, Password string
	// InitialPower: true is on.
	InitialPower bool
	// GUID is the system GUID Get System GUID answers, as the canonical
	// SMBIOS-decoded string (what Linux shows in product_uuid). Default: a
	// fixed one, DefaultGUID.
	GUID string
}

// DefaultGUID is the system GUID of a Sim started without one.
const DefaultGUID = "4c4c4544-0042-4410-8030-b5c04f4d3132"

// Sim is a running pyghmi BMC.
type Sim struct {
	dir      string
	addr     string
	username string
	password string
	cmd      *exec.Cmd
	exited   chan struct{}

	stopOnce sync.Once
}

// Available reports whether /usr/bin/python3 can import pyghmi's BMC class.
func Available() error {
	out, err := exec.Command(Python, "-c", "import pyghmi.ipmi.bmc").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %v %s", ErrUnavailable, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Start starts the BMC on a free UDP port and returns once it is bound.
func Start(ctx context.Context, dir string, opts Options) (*Sim, error) {
	if opts.Address == "" {
		opts.Address = "127.0.0.1"
	}
	if opts.Username == "" {
		opts.Username = "admin"
	}
	if opts.Password == "" {
		opts.Password = "pyghmi-test-pw"
	}
	if opts.GUID == "" {
		opts.GUID = DefaultGUID
	}
	guid, err := smbiosBytes(opts.GUID)
	if err != nil {
		return nil, err
	}
	s := &Sim{dir: dir, username: opts.Username, password: opts.Password, exited: make(chan struct{})}
	for name, content := range map[string]string{
		"bmc.py":       script,
		"power":        powerString(opts.InitialPower),
		"behavior":     behaviorLine(Behavior{}),
		"requests.log": "",
		"password":     opts.Password,
	} {
		if err := writeAtomic(dir, name, content); err != nil {
			return nil, err
		}
	}
	_ = os.Remove(filepath.Join(dir, "pending-on"))
	cmd := exec.Command(Python, filepath.Join(dir, "bmc.py"), dir, opts.Address, opts.Username, fmt.Sprintf("%x", guid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "bmc.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	if err := childproc.Start(cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("pyghmisim: %w", err)
	}
	logf.Close()
	s.cmd = cmd
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- strings.TrimSpace(line)
	}()
	select {
	case line := <-ready:
		port, ok := strings.CutPrefix(line, "listening ")
		if !ok {
			s.Stop()
			return nil, fmt.Errorf("pyghmisim: did not start (%q); log: %s", line, s.log())
		}
		s.addr = net.JoinHostPort(opts.Address, port)
		return s, nil
	case <-ctx.Done():
		s.Stop()
		return nil, fmt.Errorf("pyghmisim: not ready: %w; log: %s", ctx.Err(), s.log())
	}
}

// StartT starts a Sim for a test in t.TempDir(), skipping the test when
// pyghmi is missing, and stops it when the test ends.
func StartT(t testing.TB, opts Options) *Sim {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Address is "host:port", IPv6 bracketed.
func (s *Sim) Address() string { return s.addr }

// Username and Password of the BMC's user.
func (s *Sim) Username() string { return s.username }
func (s *Sim) Password() string { return s.password }

// Power reads the machine's power behind the BMC (a pending cycle's
// power-on that is due counts as on).
func (s *Sim) Power() (bool, error) {
	if b, err := os.ReadFile(filepath.Join(s.dir, "pending-on")); err == nil {
		at, _ := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		if float64(time.Now().UnixNano())/1e9 >= at {
			return true, nil
		}
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "power"))
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(b)) == "1", nil
}

// SetPower changes the power behind the BMC's back (and cancels a cycle).
func (s *Sim) SetPower(on bool) error {
	_ = os.Remove(filepath.Join(s.dir, "pending-on"))
	return writeAtomic(s.dir, "power", powerString(on))
}

// SetBehavior replaces the behaviour; later requests see it.
func (s *Sim) SetBehavior(b Behavior) error {
	switch b.Mode {
	case "", Honest, Refusing, Lying:
	default:
		return fmt.Errorf("pyghmisim: unknown mode %q", b.Mode)
	}
	if err := writeAtomic(s.dir, "busy-left", strconv.Itoa(b.Busy)); err != nil {
		return err
	}
	return writeAtomic(s.dir, "behavior", behaviorLine(b))
}

// Requests lists the requests the BMC handled, oldest first.
func (s *Sim) Requests() []string {
	b, err := os.ReadFile(filepath.Join(s.dir, "requests.log"))
	if err != nil {
		return nil
	}
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}

// Commands lists the chassis control requests ("control_off", ...).
func (s *Sim) Commands() []string {
	var out []string
	for _, r := range s.Requests() {
		if strings.HasPrefix(r, "control_") {
			out = append(out, r)
		}
	}
	return out
}

// Stop kills the BMC's process group and waits for it.
func (s *Sim) Stop() {
	s.stopOnce.Do(func() {
		if s.cmd == nil || s.cmd.Process == nil {
			return
		}
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
		}
	})
}

func (s *Sim) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "bmc.log"))
	t := strings.TrimSpace(string(b))
	if len(t) > 2000 {
		t = t[len(t)-2000:]
	}
	return t
}

func powerString(on bool) string {
	if on {
		return "1\n"
	}
	return "0\n"
}

func behaviorLine(b Behavior) string {
	mode := b.Mode
	if mode == "" {
		mode = Honest
	}
	return fmt.Sprintf("%s %.3f %.3f\n", mode, b.Delay.Seconds(), b.CycleDwell.Seconds())
}

// smbiosBytes turns the canonical SMBIOS-decoded string back into the 16
// bytes Get System GUID answers with: the first three fields little-endian.
func smbiosBytes(u string) ([16]byte, error) {
	var g [16]byte
	h := strings.ReplaceAll(u, "-", "")
	if len(h) != 32 {
		return g, fmt.Errorf("pyghmisim: GUID %q is not 8-4-4-4-12 hex digits", u)
	}
	var raw [16]byte
	for i := range raw {
		v, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return g, fmt.Errorf("pyghmisim: GUID %q: %v", u, err)
		}
		raw[i] = byte(v)
	}
	g = raw
	g[0], g[1], g[2], g[3] = raw[3], raw[2], raw[1], raw[0]
	g[4], g[5] = raw[5], raw[4]
	g[6], g[7] = raw[7], raw[6]
	return g, nil
}

func writeAtomic(dir, name, content string) error {
	f, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return err
	}
	_, werr := f.WriteString(content)
	cerr := f.Close()
	if werr != nil || cerr != nil {
		_ = os.Remove(f.Name())
		return errors.Join(werr, cerr)
	}
	return os.Rename(f.Name(), filepath.Join(dir, name))
}
