package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bmcfence/bmcfence/internal/childproc"
)

// process is one child of the control plane (etcd, an apiserver, a kwok...).
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited and been reaped
	err     error         // exit error, valid after done
}

// startProcess runs bin with args, appending stdout and stderr to logPath.
// The child gets its own process group (so stop can kill it with anything it
// forked) and SIGKILL when the test binary dies.
func startProcess(name, bin string, args []string, env []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "==== %s: %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := childproc.Start(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has already ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the process group and waits until the process is
// reaped. SIGKILL, not SIGTERM: tests want a dead component at once (a
// crashed kubelet, a torn-down control plane), not a graceful shutdown that
// takes the apiserver's shutdown delay.
func (p *process) kill() {
	if p == nil {
		return
	}
	if !p.exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.done
}

// errAddrInUse marks a start that lost the race for a port.
var errAddrInUse = errors.New("address already in use")

// exitError describes an early exit, with the log tail, and wraps
// errAddrInUse when the log shows a lost port race so the caller can retry.
func (p *process) exitError() error {
	tail := tailFile(p.logPath, 30)
	err := fmt.Errorf("%s exited early (%v); last log lines from %s:\n%s", p.name, p.err, p.logPath, tail)
	if strings.Contains(tail, "address already in use") {
		return errors.Join(errAddrInUse, err)
	}
	return err
}

// tailFile returns the last n lines of a file (or a note that it cannot).
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	// The last 64 KiB hold n lines of any component's log.
	const window = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > window {
		_, _ = f.Seek(st.Size()-window, io.SeekStart)
	}
	data, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// FreePort asks the kernel for an unused loopback port. The port is free only
// until someone else takes it; callers retry a start that loses that race.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func itoa(i int) string { return strconv.Itoa(i) }
