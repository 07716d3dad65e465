package ipmisim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bmcfence/bmcfence/internal/childproc"
)

// ErrUnavailable is returned (wrapped) by Available and Start when ipmi_sim or ipmitool is missing.
var ErrUnavailable = errors.New("ipmisim: ipmi_sim and ipmitool are required (apt-get install openipmi ipmitool)")

// Defaults for Options.
const (
	DefaultUsername = "admin"
	DefaultPassword = "bmcfence-test"

	// defaultStartTimeout bounds Start when the context has no earlier deadline. ipmi_sim answers
	// in ~10 ms on an idle machine; a loaded CI runner with -race can be 100× slower.
	defaultStartTimeout = 10 * time.Second

	// portAttempts: a port picked by binding :0 can be taken by someone else before ipmi_sim binds
	// it. Each retry picks a new port; 5 lost races in a row means something else is wrong.
	portAttempts = 5

	// stopTimeout bounds the wait for the killed process. SIGKILL cannot be caught, so this is
	// only reached if the kernel is in trouble.
	stopTimeout = 10 * time.Second
)

// Options configure a Sim. The zero value is valid: admin/DefaultPassword, machine off, temp dir,
// free port.
type Options struct {
	// Username and Password of the BMC's only user (user 2, privilege admin). Defaults:
	// DefaultUsername, DefaultPassword. Printable ASCII without space, '"', '\' or '#'; at most
	// 16 and 20 bytes.
	Username, Password string
	// InitialPower is the machine's power at start: true is on.
	InitialPower bool
	// Dir receives the generated files and ipmi_sim's state. Empty: a new temp dir, removed by
	// Stop. A given Dir is created if missing and never removed; Start overwrites its own files
	// there (power, behaviour and the request log start afresh).
	Dir string
	// Port is the UDP port. 0 picks a free one (and retries if it is taken before ipmi_sim binds
	// it).
	Port int
	// Address is the IP address to bind: "127.0.0.1" (the default) or "::1".
	Address string
	// GUID is the system GUID the BMC answers Get System GUID with, in the canonical
	// SMBIOS-decoded form Linux shows in /sys/class/dmi/id/product_uuid. Default: DefaultGUID.
	GUID string
	// Host connects the machine's side of the BMC's system interface (Sim.InBand): in-band
	// requests of the host's OS (arming and petting the watchdog, the kernel's panic event) and
	// what the BMC does to the host (reset, power off, NMI).
	Host bool
}

// DefaultGUID is the system GUID of a Sim started without one.
const DefaultGUID = "674523a1-ab89-efcd-a123-456789abcdef"

// Behavior is how the BMC and the machine behind it misbehave. The zero value is a healthy BMC.
// Only chassis requests (power status, power control, boot device, identify) are affected;
// sessions and authentication always work.
type Behavior struct {
	// Stuck: chassis control requests are answered with success and ignored (a lying BMC).
	Stuck bool
	// Failing: chassis control requests are answered with completion code 0xFF
	// ("Unspecified error") and change nothing. Takes precedence over Stuck.
	Failing bool
	// StatusFails: power status reads are answered with completion code 0xFF, so nobody can
	// verify the power state.
	StatusFails bool
	// PowerOnFails: a power-on of an off machine is accepted, the next status read says on, and
	// then the machine falls back to off (a host that dies in POST).
	PowerOnFails bool
	// Delay: every chassis request (reads too) is answered this much later. ipmi_sim is
	// single-threaded, so the BMC is silent meanwhile. Past ~1 s ipmitool retransmits, and each
	// retransmission is executed again (duplicates in Commands).
	Delay time.Duration
	// CycleDwell makes `chassis power cycle` hold the machine off this long (ipmi_sim's own
	// cycle holds it off one second) before it comes back on by itself; a power off during the
	// dwell cancels the cycle, as on real BMCs. This is the misleading Off a fence must never
	// take for its own. Recognising the cycle's power-on (see the package documentation) needs
	// it to be at least 2 s.
	CycleDwell time.Duration
}

// Sim is a running ipmi_sim. Its methods are safe for concurrent use.
type Sim struct {
	dir      string
	ownDir   bool
	host     string
	port     int
	guid     string
	username string
	password string

	serialPort int   // the system channel's TCP port (Options.Host); 0 without
	hostSide   *Host // connected when Options.Host

	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd.Wait returns
	waitErr error         // cmd.Wait's result, readable once exited is closed

	stopOnce sync.Once
	stopErr  error

	mu      sync.Mutex
	stopped bool
	final   []string // requests at Stop, when Stop removed the directory
}

// Available reports whether ipmi_sim is installed. The error wraps ErrUnavailable and says what
// to install. ipmitool is needed only by [Sim.Ipmitool].
func Available() error {
	var missing []string
	for _, bin := range []string{"ipmi_sim"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: not on PATH: %s", ErrUnavailable, strings.Join(missing, ", "))
	}
	return nil
}

// Start writes the configuration, starts ipmi_sim and returns once it answers an RMCP ping, or an
// error (with the tail of ipmi_sim's log) when it does not within ctx or 10 s.
func Start(ctx context.Context, opts Options) (*Sim, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	s := &Sim{username: opts.Username, password: opts.Password, host: opts.Address, guid: opts.GUID}
	if s.host == "" {
		s.host = "127.0.0.1"
	}
	if ip := net.ParseIP(s.host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("ipmisim: options: address %q: want a loopback IP such as 127.0.0.1 or ::1", opts.Address)
	}
	if s.guid == "" {
		s.guid = DefaultGUID
	}
	if _, err := guidHex(s.guid); err != nil {
		return nil, fmt.Errorf("ipmisim: options: %w", err)
	}
	if s.username == "" {
		s.username = DefaultUsername
	}
	if s.password == "" {
		s.password = DefaultPassword
	}
	if err := errors.Join(
		checkCredential("username", s.username, maxUserLen),
		checkCredential("password", s.password, maxPasswdLen),
	); err != nil {
		return nil, fmt.Errorf("ipmisim: options: %w", err)
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("ipmisim: options: port %d out of range", opts.Port)
	}

	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "ipmisim-")
		if err != nil {
			return nil, fmt.Errorf("ipmisim: %w", err)
		}
		s.dir, s.ownDir = dir, true
	} else {
		dir, err := filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("ipmisim: %w", err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("ipmisim: %w", err)
		}
		s.dir = dir
	}
	if opts.Host {
		p, err := freeTCPPort(s.host)
		if err != nil {
			return nil, fmt.Errorf("ipmisim: picking the system channel's port: %w", err)
		}
		s.serialPort = p
	}
	if err := s.start(ctx, opts, freeUDPPort); err != nil {
		if s.ownDir {
			_ = os.RemoveAll(s.dir) // best effort: the start error matters more
		}
		return nil, err
	}
	if opts.Host {
		hctx, cancel := context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
		h, err := s.connectHost(hctx)
		if err != nil {
			_ = s.Stop()
			return nil, err
		}
		s.hostSide = h
	}
	return s, nil
}

// InBand is the machine's side of the system interface (nil unless Options.Host).
func (s *Sim) InBand() *Host { return s.hostSide }

func freeTCPPort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// start starts ipmi_sim on opts.Port or, if that is 0, on ports from pickPort.
func (s *Sim) start(ctx context.Context, opts Options, pickPort func(host string) (int, error)) error {
	if err := checkPath(s.dir); err != nil {
		return fmt.Errorf("ipmisim: %w", err)
	}
	if err := s.writeFiles(opts.InitialPower); err != nil {
		return fmt.Errorf("ipmisim: writing files: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}
	for attempt := 1; ; attempt++ {
		port := opts.Port
		if port == 0 {
			p, err := pickPort(s.host)
			if err != nil {
				return fmt.Errorf("ipmisim: picking a port: %w", err)
			}
			port = p
		}
		err := s.startOnce(ctx, port)
		if err == nil {
			return nil
		}
		if errors.Is(err, errSerialPortTaken) && attempt < portAttempts {
			p, perr := freeTCPPort(s.host)
			if perr != nil {
				return errors.Join(err, fmt.Errorf("ipmisim: picking the system channel's port: %w", perr))
			}
			s.serialPort = p
			continue
		}
		if opts.Port != 0 || attempt == portAttempts || !errors.Is(err, errPortTaken) {
			return err
		}
	}
}

var (
	errPortTaken       = errors.New("port taken")
	errSerialPortTaken = errors.New("system channel port taken")
)

// startOnce starts ipmi_sim on port and waits for it to answer.
func (s *Sim) startOnce(ctx context.Context, port int) error {
	s.port = port
	control := filepath.Join(s.dir, controlFile)
	guid, _ := guidHex(s.guid) // checked by Start
	if err := writeFileAtomic(s.dir, lanConfFile, lanConf(s.host, port, s.username, s.password, control, guid, s.serialPort), 0o600); err != nil {
		return fmt.Errorf("ipmisim: writing %s: %w", lanConfFile, err)
	}
	logf, err := os.Create(filepath.Join(s.dir, logFile))
	if err != nil {
		return fmt.Errorf("ipmisim: %w", err)
	}
	cmd := exec.Command("ipmi_sim",
		"-c", filepath.Join(s.dir, lanConfFile),
		"-f", filepath.Join(s.dir, emuFile),
		"-s", filepath.Join(s.dir, stateDir),
		"-n")
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true, // Stop kills the group: ipmi_sim and a control program it is waiting for
		// If the test binary dies without Stop. (Linux sends it when the thread that forked
		// exits; Go only ends threads that a goroutine locked and did not unlock.)
		Pdeathsig: syscall.SIGKILL,
	}
	err = childproc.Start(cmd)
	_ = logf.Close() // the child holds its own descriptor; nothing was written through ours
	if err != nil {
		return fmt.Errorf("ipmisim: starting ipmi_sim: %w", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()

	err = s.waitReady(ctx)
	if err == nil {
		return nil
	}
	if kerr := s.kill(); kerr != nil {
		err = errors.Join(err, kerr)
	}
	tail := s.logTail()
	switch {
	case strings.Contains(tail, "Unable to bind to LAN port"):
		err = fmt.Errorf("%w: %w", errPortTaken, err)
	case strings.Contains(tail, "Unable to bind to serial TCP port"):
		err = fmt.Errorf("%w: %w", errSerialPortTaken, err)
	}
	where := "" // Start removes a temp dir after a failure
	if !s.ownDir {
		where = " " + filepath.Join(s.dir, logFile)
	}
	return fmt.Errorf("ipmisim: ipmi_sim on %s did not come up: %w; log%s: %s", net.JoinHostPort(s.host, strconv.Itoa(port)), err, where, tail)
}

// waitReady polls with RMCP presence pings until a pong, the process exits, or ctx ends.
func (s *Sim) waitReady(ctx context.Context) error {
	conn, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.ParseIP(s.host), Port: s.port})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()

	const (
		// pongWait bounds the wait for one pong; a busy machine may take a while to schedule
		// ipmi_sim, and a ping lost to that just costs another round.
		pongWait = 50 * time.Millisecond
		// refusedWait paces the pings while the port is not bound yet (ICMP port unreachable
		// makes the read fail at once). ipmi_sim binds within ~10 ms of starting.
		refusedWait = 5 * time.Millisecond
	)
	buf := make([]byte, 512)
	for tag := byte(0); ; tag = (tag + 1) % 255 { // tag 255 is reserved
		select {
		case <-s.exited:
			return fmt.Errorf("ipmi_sim exited: %v", s.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if _, err := conn.Write(rmcpPing(tag)); err != nil {
			// ICMP port unreachable from the previous round can surface here: not bound yet.
			waitUntil(ctx, s.exited, time.Now().Add(refusedWait))
			continue
		}
		if err := conn.SetReadDeadline(time.Now().Add(pongWait)); err != nil {
			return err
		}
		for {
			n, err := conn.Read(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break // ping again
			}
			if err != nil { // ECONNREFUSED: not bound yet
				waitUntil(ctx, s.exited, time.Now().Add(refusedWait))
				break
			}
			if isRMCPPong(buf[:n], tag) {
				return nil
			}
		}
	}
}

// waitUntil blocks until t, ctx's end or exited, whichever comes first.
func waitUntil(ctx context.Context, exited <-chan struct{}, t time.Time) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	case <-exited:
	}
}

// rmcpPing is an RMCP/ASF presence ping (DSP0136): RMCP header (version 6, seq 0xff = no ack,
// class 6 = ASF), ASF IANA 4542, type 0x80 ping, tag, reserved, data length 0.
func rmcpPing(tag byte) []byte {
	return []byte{0x06, 0x00, 0xff, 0x06, 0x00, 0x00, 0x11, 0xbe, 0x80, tag, 0x00, 0x00}
}

// isRMCPPong reports whether b is the presence pong (type 0x40) for tag.
func isRMCPPong(b []byte, tag byte) bool {
	return len(b) >= 12 && b[0] == 0x06 && b[3] == 0x06 &&
		bytes.Equal(b[4:8], []byte{0x00, 0x00, 0x11, 0xbe}) && b[8] == 0x40 && b[9] == tag
}

func freeUDPPort(host string) (int, error) {
	pc, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	if err := pc.Close(); err != nil {
		return 0, err
	}
	return port, nil
}

func (s *Sim) writeFiles(power bool) error {
	state := filepath.Join(s.dir, stateDir)
	// A fresh state dir: ipmi_sim persists users changed over IPMI there, and would prefer
	// them to lan.conf's on the next start.
	if err := os.RemoveAll(state); err != nil {
		return err
	}
	if err := os.Mkdir(state, 0o700); err != nil {
		return err
	}
	// Clear a pending PowerOnFails fallback or power cycle from an earlier run in the same Dir.
	for _, f := range cycleFiles {
		if err := os.Remove(filepath.Join(s.dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	script := strings.Replace(controlScript, "@DIR@", shellQuote(s.dir), 1)
	for _, f := range []struct {
		name, content string
		perm          os.FileMode
	}{
		{emuFile, emu, 0o600},
		{controlFile, script, 0o700},
		{powerFile, powerString(power), 0o600},
		{behaviorFile, behaviorVars(Behavior{}), 0o600},
		{bootFile, "default\n", 0o600},
		{requestsFile, "", 0o600},
	} {
		if err := writeFileAtomic(s.dir, f.name, f.content, f.perm); err != nil {
			return err
		}
	}
	return nil
}

// Address is the BMC's "HOST:PORT" ("[::1]:PORT" for IPv6).
func (s *Sim) Address() string {
	return net.JoinHostPort(s.host, strconv.Itoa(s.port))
}

// Host is the BMC's IP address, "127.0.0.1" unless Options.Address said otherwise.
func (s *Sim) Host() string { return s.host }

// GUID is the system GUID the BMC reports, SMBIOS-decoded.
func (s *Sim) GUID() string { return s.guid }

// Port is the BMC's UDP port.
func (s *Sim) Port() int { return s.port }

// Username is the BMC user's name.
func (s *Sim) Username() string { return s.username }

// Password is the BMC user's password.
func (s *Sim) Password() string { return s.password }

// Dir is the directory holding the sim's files.
func (s *Sim) Dir() string { return s.dir }

// Power reads the machine's power directly (not through IPMI). During a pending PowerOnFails
// fallback it says on; a power cycle whose off-dwell (Behavior.CycleDwell) has ended says on.
func (s *Sim) Power() (on bool, err error) {
	if b, err := os.ReadFile(filepath.Join(s.dir, pendingOnFile)); err == nil {
		due, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if perr == nil && time.Now().UnixMilli() >= due {
			return true, nil
		}
	}
	b, err := os.ReadFile(filepath.Join(s.dir, powerFile))
	if err != nil {
		return false, fmt.Errorf("ipmisim: reading power: %w", err)
	}
	switch v := strings.TrimSpace(string(b)); v {
	case "1":
		return true, nil
	case "0":
		return false, nil
	default:
		return false, fmt.Errorf("ipmisim: power file holds %q", v)
	}
}

// SetPower changes the machine's power behind the BMC's back: a power loss, a human at the
// power button. It is not logged in Commands.
func (s *Sim) SetPower(on bool) error {
	for _, f := range cycleFiles {
		if err := os.Remove(filepath.Join(s.dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("ipmisim: %w", err)
		}
	}
	if err := writeFileAtomic(s.dir, powerFile, powerString(on), 0o600); err != nil {
		return fmt.Errorf("ipmisim: setting power: %w", err)
	}
	return nil
}

// SetBehavior replaces the BMC's behaviour; requests that arrive afterwards see it.
func (s *Sim) SetBehavior(b Behavior) error {
	if b.Delay < 0 {
		return fmt.Errorf("ipmisim: negative delay %v", b.Delay)
	}
	if err := writeFileAtomic(s.dir, behaviorFile, behaviorVars(b), 0o600); err != nil {
		return fmt.Errorf("ipmisim: setting behaviour: %w", err)
	}
	return nil
}

// Commands lists the chassis control requests the BMC received, oldest first, whether it obeyed
// them or not: "set power 0", "set power 1", "set reset 1", "set shutdown 1", "set boot pxe",
// "set identify 15 0". Status reads are not listed. A power cycle shows as "set power 0" and, a
// second later, "set power 1" (see the package documentation). Valid after Stop too.
func (s *Sim) Commands() []string {
	var cmds []string
	for _, r := range s.requests() {
		if strings.HasPrefix(r, "set ") {
			cmds = append(cmds, r)
		}
	}
	return cmds
}

// requests lists every request the control program received, reads included.
func (s *Sim) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped && s.ownDir {
		return s.final
	}
	return readRequests(s.dir)
}

func readRequests(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, requestsFile))
	if err != nil {
		return nil
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	// A line without its newline is still being written: leave it for the next call.
	if len(b) > 0 && b[len(b)-1] != '\n' && len(lines) > 0 {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// Stop kills ipmi_sim's process group and waits for ipmi_sim. It removes the directory only if
// Start created it. It is idempotent. It reports an error if ipmi_sim had died before Stop.
func (s *Sim) Stop() error {
	s.stopOnce.Do(func() {
		if s.hostSide != nil {
			s.hostSide.close()
		}
		select {
		case <-s.exited:
			s.stopErr = fmt.Errorf("ipmisim: ipmi_sim had exited before Stop: %v; log: %s", s.waitErr, s.logTail())
		default:
		}
		// Also when ipmi_sim is gone: a control program it started may still be sleeping.
		s.stopErr = errors.Join(s.stopErr, s.kill())
		s.mu.Lock()
		defer s.mu.Unlock()
		s.stopped = true
		if s.ownDir {
			s.final = readRequests(s.dir)
			s.stopErr = errors.Join(s.stopErr, os.RemoveAll(s.dir))
		}
	})
	return s.stopErr
}

// kill sends SIGKILL to the process group and waits for ipmi_sim to be reaped.
func (s *Sim) kill() error {
	var err error
	if kerr := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
		err = fmt.Errorf("ipmisim: killing process group %d: %w", s.cmd.Process.Pid, kerr)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-s.exited:
	case <-timer.C:
		err = errors.Join(err, fmt.Errorf("ipmisim: ipmi_sim (pid %d) still running %v after SIGKILL", s.cmd.Process.Pid, stopTimeout))
	}
	return err
}

// logTail returns the end of ipmi_sim's log, for error messages.
func (s *Sim) logTail() string {
	const max = 2048
	f, err := os.Open(filepath.Join(s.dir, logFile))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer func() { _ = f.Close() }()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		if _, err := f.Seek(-max, io.SeekEnd); err != nil {
			return fmt.Sprintf("(log unreadable: %v)", err)
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	if t := strings.TrimSpace(string(b)); t != "" {
		return t
	}
	return "(empty)"
}
