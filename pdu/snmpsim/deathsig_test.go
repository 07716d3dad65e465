package snmpsim_test

// snmpd runs in its own process group, in the foreground: a test binary
// that dies without running its cleanups (a -timeout panic, a SIGKILL from
// CI) must not leave it running for ever, holding its UDP port. The child
// below starts an agent and exits at once without cleanups; the test
// fails if its snmpd outlives it (and then stops that snmpd by the pid it
// wrote).

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/pdu/snmpsim"
)

func TestSnmpdDiesWithItsTestProcess(t *testing.T) {
	if dir := os.Getenv("SNMPSIM_TEST_CHILD_DIR"); dir != "" {
		a, err := snmpsim.Start(t.Context(), snmpsim.NewMemoryBank(2), dir)
		if err != nil {
			t.Fatal(err)
		}
		_ = a
		os.Exit(0) // no cleanups: as a -timeout panic or a SIGKILL
	}
	if err := snmpsim.Available(); err != nil {
		t.Skip(err.Error())
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSnmpdDiesWithItsTestProcess$")
	cmd.Env = append(os.Environ(), "SNMPSIM_TEST_CHILD_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "snmpd.pid"))
	if err != nil {
		t.Fatalf("no pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// running: the process exists and is no zombie
	running := func() (string, bool) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return "", false
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		return f[0], len(f) > 0 && f[0] != "Z" && f[0] != "X"
	}
	deadline := time.Now().Add(3 * time.Second)
	for _, ok := running(); ok && time.Now().Before(deadline); _, ok = running() {
		time.Sleep(50 * time.Millisecond)
	}
	if state, ok := running(); ok {
		t.Errorf("snmpd (pid %d, state %s) outlived the test process that started it by 3 s", pid, state)
		_ = syscall.Kill(-pid, syscall.SIGKILL) // its group: snmpd and its relay
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
