//go:build !bmcfast

package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets a test run this package's main as the CLI, in its own
// process (KUBECTL_FENCE_MAIN=1): what reaches the real stderr, klog
// included, is what a user sees.
func TestMain(m *testing.M) {
	if os.Getenv("KUBECTL_FENCE_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// asUser runs the CLI as a process with args and env (and no kubeconfig,
// no in-cluster service, unless env says), returning its stderr lines, exit
// code and how long it took.
func asUser(t *testing.T, env []string, args ...string) (stderr []string, code int, took time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append([]string{"KUBECTL_FENCE_MAIN=1", "HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, env...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	start := time.Now()
	err := cmd.Run()
	took = time.Since(start)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if s := strings.TrimSuffix(errOut.String(), "\n"); s != "" {
		stderr = strings.Split(s, "\n")
	}
	return stderr, cmd.ProcessState.ExitCode(), took
}

// kubeconfigFor writes a kubeconfig whose one context points at server.
func kubeconfigFor(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: ctx, context: {cluster: c, user: u}}]\ncurrent-context: ctx\n", server)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Issue 23: without a kubeconfig `kubectl fence status` fell back to
// localhost:8080 (kubectl's old default, a server nobody runs); with
// --config FILE it printed 24 klog lines and failed after 61 s. One line,
// its own exit code, at once.
func TestNoClusterConfiguredIsOneLine(t *testing.T) {
	agentConfig := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(agentConfig, []byte("inventory:\n  nodes: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const want = "kubectl fence: no cluster configured: no kubeconfig ($KUBECONFIG, ~/.kube/config or --kubeconfig) and not running in a cluster; point kubectl fence at one with --kubeconfig FILE, KUBECONFIG=FILE, --context NAME or --server URL (the bmc commands need none)"
	for _, args := range [][]string{{"status"}, {"status", "--config", agentConfig}, {"check"}, {"history", "w1"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			stderr, code, took := asUser(t, nil, args...)
			if len(stderr) != 1 || stderr[0] != want {
				t.Errorf("stderr:\n%s\nwant the one line:\n%s", strings.Join(stderr, "\n"), want)
			}
			if code != exitNoCluster || took > 10*time.Second {
				t.Errorf("exit %d after %s, want %d at once", code, took, exitNoCluster)
			}
		})
	}
}

// An API server that refuses the connection, or accepts it and never
// answers, is one line that names it, within --request-timeout (or the
// first contact's short default), and no klog noise.
func TestUnreachableAPIServerIsOneLineFast(t *testing.T) {
	agentConfig := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(agentConfig, []byte("inventory:\n  nodes: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "https://" + l.Addr().String()
	l.Close()
	// A server that accepts and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	hung := "https://" + silent.Addr().String()
	tests := []struct {
		name   string
		server string
		args   []string
		want   string
		within time.Duration
	}{
		{"refused, with --config", refused, []string{"status", "--config", agentConfig},
			"kubectl fence: cannot reach the API server " + refused + " (kubeconfig context ctx): connection refused; check --kubeconfig, --context or --server", 10 * time.Second},
		{"refused, reading the agent's ConfigMap", refused, []string{"status"},
			"kubectl fence: cannot reach the API server " + refused + " (kubeconfig context ctx): connection refused; check --kubeconfig, --context or --server", 10 * time.Second},
		{"silent, bounded by --request-timeout", hung, []string{"status", "--config", agentConfig, "--request-timeout", "1s"},
			"kubectl fence: cannot reach the API server " + hung + " (kubeconfig context ctx): no answer within 1s (--request-timeout); check --kubeconfig, --context or --server", 8 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stderr, code, took := asUser(t, []string{"KUBECONFIG=" + kubeconfigFor(t, tt.server)}, tt.args...)
			if len(stderr) != 1 || stderr[0] != tt.want {
				t.Errorf("stderr (%d lines):\n%s\nwant the one line:\n%s", len(stderr), strings.Join(stderr, "\n"), tt.want)
			}
			if code != exitNoAPIServer || took > tt.within {
				t.Errorf("exit %d after %s, want %d within %s", code, took, exitNoAPIServer, tt.within)
			}
		})
	}
}

// client-go's own log (klog) is silent by default and there when -v asks
// for it: -v=6 shows each request, before the one line.
func TestClientLogOnlyWithV(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := "https://" + l.Addr().String()
	l.Close()
	env := []string{"KUBECONFIG=" + kubeconfigFor(t, server)}
	quiet, _, _ := asUser(t, env, "status")
	loud, code, _ := asUser(t, env, "status", "-v=6")
	if len(quiet) != 1 {
		t.Errorf("without -v, stderr has %d lines:\n%s", len(quiet), strings.Join(quiet, "\n"))
	}
	if len(loud) < 2 || !strings.Contains(strings.Join(loud, "\n"), "selfsubjectreviews") || loud[len(loud)-1] != quiet[0] || code != exitNoAPIServer {
		t.Errorf("with -v=6 (exit %d), stderr:\n%s\nwant the client's request log, then:\n%s", code, strings.Join(loud, "\n"), quiet[0])
	}
}
