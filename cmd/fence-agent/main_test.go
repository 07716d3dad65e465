package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBadConfigIsOneClearErrorAndExit2(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(cfg, []byte("policy:\n  settleReads: 1\ninventory:\n  nodes:\n    - {name: w1, address: 10.0.0.1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--config", cfg}, nil, &stderr)
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	for _, want := range []string{"policy.settleReads = 1", "inventory.nodes[0] (w1): address"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q does not name %q", stderr.String(), want)
		}
	}
}

func TestVersion(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, nil, &stderr); code != 0 || !strings.HasPrefix(stderr.String(), "fence-agent ") {
		t.Errorf("exit %d, output %q", code, stderr.String())
	}
}

func TestNoClusterIsAnErrorNotACrash(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--kubeconfig", filepath.Join(t.TempDir(), "missing"), "--log-format", "json"}, nil, &stderr)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
}
