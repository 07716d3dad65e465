package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

// kubectl-fence as make builds it (-tags bmcfast) is a front holding the
// bmc commands and nothing of Kubernetes: Go initialises every linked
// package before main, and client-go's init alone costs several times what
// `bmc status` needs. These tests keep it that way and check that it hands
// every other command to the whole CLI.

func goTool(t *testing.T) string {
	t.Helper()
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		if p, err = exec.LookPath("go"); err != nil {
			t.Skip("no go tool to build with")
		}
	}
	return p
}

func TestBMCFrontLinksNothingOfKubernetes(t *testing.T) {
	out, err := exec.Command(goTool(t), "list", "-tags", "bmcfast", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -tags bmcfast: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(pkg, "k8s.io/client-go"), strings.HasPrefix(pkg, "k8s.io/api/"),
			strings.HasPrefix(pkg, "k8s.io/apimachinery"), strings.HasPrefix(pkg, "github.com/bmcfence/bmcfence/cluster"),
			strings.HasPrefix(pkg, "github.com/bmcfence/bmcfence/internal/inventory"), pkg == "go.uber.org/zap":
			t.Errorf("the bmc front links %s: give the file that imports it //go:build !bmcfast, or move what bmc needs out of it", pkg)
		}
	}
}

// buildFront builds the front into a temp dir.
func buildFront(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubectl-fence")
	cmd := exec.Command(goTool(t), "build", "-tags", "bmcfast", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags bmcfast: %v\n%s", err, out)
	}
	return bin
}

func TestBMCFrontHandsEveryOtherCommandToTheWholeCLI(t *testing.T) {
	bin := buildFront(t)
	runFront := func(args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errOut.String(), code
	}

	// Without the whole CLI beside it (or on PATH), a cluster command says
	// what is missing.
	t.Setenv("PATH", t.TempDir())
	_, errOut, code := runFront("status")
	if code != exitFailed || !strings.Contains(errOut, "bmcfence-cli") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("status without the whole CLI: exit %d, %q", code, errOut)
	}

	// A stand-in for the whole CLI shows what it was handed.
	stand := filepath.Join(filepath.Dir(bin), fullCLIName)
	if err := os.WriteFile(stand, []byte("#!/bin/sh\necho \"whole CLI: $*\"\nexit 42\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"status", "worker-1"},
		{"--kubeconfig", "/k", "fence", "n", "--reason", "r"},
		{"bmc", "status", "--kubeconfig", "/k", "--address", "https://10.0.0.5"}, // a flag only the whole CLI knows
		{},
	} {
		out, errOut, code := runFront(args...)
		if code != 42 || strings.TrimSpace(out) != strings.TrimSpace("whole CLI: "+strings.Join(args, " ")) {
			t.Errorf("%q: exit %d, %q %q; want it handed over as is", args, code, out, errOut)
		}
	}

	// The front itself serves bmc and --version.
	if out, _, code := runFront("--version"); code != 0 || !strings.HasPrefix(out, "kubectl-fence ") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	srv := redfishmocktest.Start(t, redfishmock.Config{Username: "admin", Password: testPassword, Systems: redfishmock.Systems(1)})
	out, errOut, code := runFront(append([]string{"bmc", "status", "-o", "json"}, caFlags(t, srv, testPassword)...)...)
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v["powerState"] != "On" {
		t.Errorf("bmc status from the front: exit %d, %s %s", code, out, errOut)
	}
}

// The front answers a mistyped bmc subcommand as the whole CLI does: a
// usage error (exit 2) with a suggestion, not bmc's help and exit 0.
func TestBMCFrontRefusesAnUnknownSubcommand(t *testing.T) {
	bin := buildFront(t)
	cmd := exec.Command(bin, "bmc", "stat", "--address", "https://10.0.0.5")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != exitUsage || !strings.Contains(errOut.String(), `did you mean "status"`) || out.Len() != 0 {
		t.Errorf("bmc stat: exit %d, stdout %q, stderr %q; want exit 2 and a suggestion", code, out.String(), errOut.String())
	}
}
