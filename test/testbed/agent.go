package testbed

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bmcfence/bmcfence/internal/childproc"
	"github.com/bmcfence/bmcfence/test/controlplane"
)

// Agent is a fence-agent process.
type Agent struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	health  string
	metrics string
	done    chan struct{}
}

// StartAgent runs the fence-agent binary with the control plane's admin
// kubeconfig (impersonating the agent's ServiceAccount when the testbed was
// started with AgentAsServiceAccount), the given config file and extra flags, on free local ports, and
// waits until it reports ready.
func (b *Testbed) StartAgent(ctx context.Context, bin, name, configPath string, extra ...string) (*Agent, error) {
	mport, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	hport, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	a := &Agent{
		Name:    name,
		LogPath: filepath.Join(b.dir, "agent-"+name+".log"),
		health:  fmt.Sprintf("127.0.0.1:%d", hport),
		metrics: fmt.Sprintf("127.0.0.1:%d", mport),
		done:    make(chan struct{}),
	}
	logf, err := os.Create(a.LogPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig", b.agentKubeconfig, "--config", configPath, "--namespace", Namespace,
		"--metrics-address", a.metrics, "--health-address", a.health, "--log-format", "json",
	}, extra...)
	a.cmd = exec.Command(bin, args...)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	a.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "POD_NAME=" + name}, b.AgentEnv...)
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := childproc.Start(a.cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting fence-agent: %w", err)
	}
	go func() {
		_ = a.cmd.Wait()
		logf.Close()
		close(a.done)
	}()
	// Seconds normally; a scale run's initial lists (tens of thousands of
	// pods) on a loaded machine take longer.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if resp, err := http.Get("http://" + a.health + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return a, nil
			}
		}
		select {
		case <-a.done:
			return nil, fmt.Errorf("fence-agent %s exited at start; log:\n%s", name, tail(a.LogPath, 20))
		case <-ctx.Done():
			a.Kill()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			a.Kill()
			return nil, fmt.Errorf("fence-agent %s not ready after 3m; log:\n%s", name, tail(a.LogPath, 20))
		}
	}
}

// metricsTransport speaks to an agent's metrics address: HTTPS, with the
// self-signed certificate the agent made at start (nothing to verify it
// against).
var metricsTransport = &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the agent's self-signed certificate
}

// metricsClient scrapes an agent's /metrics.
var metricsClient = MetricsClient(10 * time.Second)

// MetricsClient is a client for MetricsURL (HTTPS, the agent's self-signed
// certificate not verified), with the given timeout.
func MetricsClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: metricsTransport}
}

// Kill sends SIGKILL (a crash mid-fence) and waits for the process.
func (a *Agent) Kill() {
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
	<-a.done
}

// Stop sends SIGTERM and waits up to 10 s, then kills.
func (a *Agent) Stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		a.Kill()
	}
}

// Leading reports whether the agent says it is the leader.
func (a *Agent) Leading() bool {
	resp, err := http.Get("http://" + a.health + "/readyz")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(body), "leader")
}

// Metric returns the sum of the samples of a metric whose labels contain
// every given "name=\"value\"" pair (0 when absent).
func (a *Agent) Metric(name string, labels ...string) (float64, error) {
	// /metrics is HTTPS, with the certificate the agent made at start.
	resp, err := metricsClient.Get("https://" + a.metrics + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(name):]
		if rest != "" && rest[0] != '{' && rest[0] != ' ' {
			continue // a longer metric name
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// RSS returns the process's resident memory in bytes.
func (a *Agent) RSS() (int64, error) { return a.status("VmRSS:") }

// PeakRSS returns the most resident memory the process has had so far
// (the kernel's high-water mark), in bytes.
func (a *Agent) PeakRSS() (int64, error) { return a.status("VmHWM:") }

// RSSParts returns the anonymous and the file-backed part of the
// process's resident memory (RssAnon, RssFile), in bytes: the file part is
// the binary's pages the process touched, which the kernel can drop and
// read again under pressure.
func (a *Agent) RSSParts() (anon, file int64, err error) {
	if anon, err = a.status("RssAnon:"); err != nil {
		return 0, 0, err
	}
	file, err = a.status("RssFile:")
	return anon, file, err
}

// Pid is the agent's process ID.
func (a *Agent) Pid() int { return a.cmd.Process.Pid }

// MetricsURL is the agent's metrics endpoint (https://HOST:PORT; read it
// with MetricsClient).
func (a *Agent) MetricsURL() string { return "https://" + a.metrics }

// status reads a size field (kB) of /proc/PID/status, in bytes.
func (a *Agent) status(field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s for pid %d", field, a.cmd.Process.Pid)
}

// CPUTime returns the process's user+system CPU time so far.
func (a *Agent) CPUTime() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", a.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 (1-based), in clock ticks (100 Hz on Linux).
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", a.cmd.Process.Pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// Logs returns the agent's log.
func (a *Agent) Logs() string {
	b, _ := os.ReadFile(a.LogPath)
	return string(b)
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
