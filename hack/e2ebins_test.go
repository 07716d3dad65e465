// Package hack holds the repository's build scripts; its tests check the
// scripts' exit status, which decides whether the README's two commands
// pass on a fresh clone.
package hack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeGo stands in for the Go toolchain on PATH so that hack/e2e-bins.sh
// runs its whole recipe in milliseconds: `go build -o OUT` and `go install`
// write a tiny executable that answers --version with the pinned versions.
// FAKE_GO_FAIL=NAME makes the build of NAME fail; FAKE_GO_SLOW=NAME makes
// the build of NAME take 2 s; FAKE_GO_BLOCK=NAME makes
// it write its pid to $FAKE_GO_STARTED (a FIFO the test reads) and hang.
const fakeGo = `#!/usr/bin/env bash
set -eu
case "$1" in
env)
	case "$2" in
	GOVERSION) echo go1.26.0 ;;
	GOOS) echo linux ;;
	GOARCH) echo amd64 ;;
	esac
	exit 0 ;;
list) echo 2026-01-01T00:00:00Z; exit 0 ;;
esac
out="" name=""
prev=""
for a in "$@"; do
	[ "$prev" = "-o" ] && out=$a
	prev=$a
done
case "$1" in
build) name=$(basename "$out") ;;
install) name=kwok; out="$GOBIN/kwok" ;;
*) echo "fake go: unexpected $*" >&2; exit 3 ;;
esac
if [ "${FAKE_GO_FAIL:-}" = "$name" ]; then
	echo "fake go: $name: compile error" >&2
	exit 1
fi
if [ "${FAKE_GO_SLOW:-}" = "$name" ]; then
	sleep 2
fi
if [ "${FAKE_GO_BLOCK:-}" = "$name" ]; then
	echo $$ >"$FAKE_GO_STARTED"
	exec sleep 300
fi
mkdir -p "$(dirname "$out")"
# The version first, more lines a moment later, as etcd prints them: a
# check that stops reading at the first match (grep -q) under pipefail
# kills the binary with SIGPIPE and fails a good build (a fresh make test
# once failed "etcd --version does not report v3.6.4: etcd Version: 3.6.4").
printf '#!/bin/sh\necho "%s fake Kubernetes v1.34.4 etcd 3.6.4"\nsleep 0.2\necho "Git SHA: fake"\necho "Go Version: fake"\n' "$name" >"$out"
chmod +x "$out"
`

var bins = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"}

// scriptRepo lays out the script and the wrapper modules it hashes in a
// temporary repository, and a PATH whose go is the fake.
func scriptRepo(t *testing.T) (root, path string) {
	t.Helper()
	root = t.TempDir()
	script, err := os.ReadFile("e2e-bins.sh")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"hack/e2e-bins.sh":               string(script),
		"test/k8sbins/etcd/go.mod":       "module etcdbin\n",
		"test/k8sbins/etcd/go.sum":       "",
		"test/k8sbins/kubernetes/go.mod": "module k8sbins\n",
		"test/k8sbins/kubernetes/go.sum": "",
		"fakebin/go":                     fakeGo,
	}
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root, filepath.Join(root, "fakebin") + ":" + os.Getenv("PATH")
}

type result struct {
	code   int
	output string
}

// runScript runs the script to its end, or fails the test after a minute
// (the fake recipe takes well under a second).
func runScript(t *testing.T, root, path string, env ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack/e2e-bins.sh"), filepath.Join(root, "bin/e2e"))
	cmd.Env = append([]string{"PATH=" + path, "HOME=" + root}, env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return result{0, string(out)}
	case errors.As(err, &exit) && ctx.Err() == nil:
		return result{exit.ExitCode(), string(out)}
	}
	t.Fatalf("e2e-bins.sh: %v\n%s", err, out)
	return result{}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// scratchDirs are the script's per-run build directories, which every exit
// must remove.
func scratchDirs(t *testing.T, binDir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(binDir, ".build.*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestE2EBinsExitStatus(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		// want: exit code, whether the stamp is written, text in the output.
		code      int
		stamp     bool
		wantInOut string
	}{
		// The bug a fresh clone met: success with no background job left
		// made the EXIT trap's bare kill exit 2.
		{name: "success", code: 0, stamp: true, wantInOut: "all 6 binaries built"},
		{name: "a Kubernetes binary fails", env: []string{"FAKE_GO_FAIL=kube-scheduler"}, code: 1, wantInOut: "kube-scheduler: 'go build"},
		// The build beside Kubernetes, still running when a Kubernetes
		// binary fails, is stopped before the scratch directory goes: an
		// orphaned build went on writing into it.
		{name: "a Kubernetes binary fails while etcd still builds", env: []string{"FAKE_GO_FAIL=kube-scheduler", "FAKE_GO_SLOW=etcd"}, code: 1, wantInOut: "kube-scheduler: 'go build"},
		{name: "etcd fails beside Kubernetes", env: []string{"FAKE_GO_FAIL=etcd"}, code: 1, wantInOut: "etcd or kwok failed"},
		{name: "kwok fails beside Kubernetes", env: []string{"FAKE_GO_FAIL=kwok"}, code: 1, wantInOut: "kwok: go install failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, path := scriptRepo(t)
			binDir := filepath.Join(root, "bin/e2e")
			r := runScript(t, root, path, tt.env...)
			if r.code != tt.code {
				t.Fatalf("exit %d, want %d; output:\n%s", r.code, tt.code, r.output)
			}
			if !strings.Contains(r.output, tt.wantInOut) {
				t.Errorf("output does not say %q:\n%s", tt.wantInOut, r.output)
			}
			if got := exists(filepath.Join(binDir, ".stamp")); got != tt.stamp {
				t.Errorf("stamp written: %v, want %v", got, tt.stamp)
			}
			if s := scratchDirs(t, binDir); len(s) != 0 {
				t.Errorf("scratch directories left behind: %v", s)
			}
			if !tt.stamp {
				return
			}
			for _, b := range bins {
				if !exists(filepath.Join(binDir, b)) {
					t.Errorf("%s not installed", b)
				}
			}
			// The second run finds the stamp and does nothing, successfully.
			again := runScript(t, root, path, "FAKE_GO_FAIL=kube-apiserver")
			if again.code != 0 || !strings.Contains(again.output, "up to date") {
				t.Errorf("second run: exit %d, output:\n%s", again.code, again.output)
			}
		})
	}
}

// An interruption (make test's cleanup sends SIGTERM to the script alone;
// Ctrl-C sends SIGINT) stops the build in progress at once, installs no
// stamp, removes the scratch directory and leaves no build running.
func TestE2EBinsInterrupted(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			root, path := scriptRepo(t)
			binDir := filepath.Join(root, "bin/e2e")
			fifo := filepath.Join(root, "started")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", filepath.Join(root, "hack/e2e-bins.sh"), binDir)
			cmd.Env = []string{"PATH=" + path, "HOME=" + root, "FAKE_GO_BLOCK=kube-controller-manager", "FAKE_GO_STARTED=" + fifo}
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() })

			// Blocks until the fake build of kube-controller-manager runs.
			f, err := os.Open(fifo)
			if err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(f).ReadString('\n')
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			buildPid, err := strconv.Atoi(strings.TrimSpace(line))
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			timer := time.NewTimer(30 * time.Second)
			defer timer.Stop()
			select {
			case err = <-done:
			case <-timer.C:
				t.Fatalf("the script did not stop within 30s of %s; output:\n%s", sig, out.String())
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 130 {
				t.Errorf("exit %v, want 130; output:\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "interrupted") {
				t.Errorf("output does not say it was interrupted:\n%s", out.String())
			}
			if exists(filepath.Join(binDir, ".stamp")) {
				t.Error("an interrupted build wrote the stamp")
			}
			if s := scratchDirs(t, binDir); len(s) != 0 {
				t.Errorf("scratch directories left behind: %v", s)
			}
			if alive(buildPid) {
				t.Errorf("the interrupted build (pid %d) is still running", buildPid)
			}
		})
	}
}

// alive reports whether pid is a live process (a zombie is not: it has
// exited and waits to be reaped by its parent).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+1:])
	return len(f) > 0 && f[0] != "Z"
}
