package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/bmcfence/bmcfence/internal/watchdog"
)

func TestBadInputSaysWhatToFixAndOpensNothing(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--interval=30s"}, "--interval 30s: want more than 0 and less than --timeout 30s"},
		{[]string{"--timeout=2.5s", "--interval=1s"}, "--timeout 2.5s: want whole seconds"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			opened := false
			open := func(string) (watchdog.Device, error) { opened = true; return nil, errors.New("no") }
			if code := run(context.Background(), tt.args, &stderr, open); code != exitUsage {
				t.Errorf("exit %d, want %d; stderr %q", code, exitUsage, stderr.String())
			}
			if lines := strings.Count(strings.TrimSpace(stderr.String()), "\n") + 1; !strings.Contains(stderr.String(), tt.want) || lines != 1 || opened {
				t.Errorf("stderr %q (%d lines), opened %v; want one line with %q and nothing opened", stderr.String(), lines, opened, tt.want)
			}
		})
	}
}

func TestMissingDeviceExitsThree(t *testing.T) {
	var stderr bytes.Buffer
	open := func(string) (watchdog.Device, error) { return nil, errors.New("no such file or directory") }
	if code := run(context.Background(), nil, &stderr, open); code != exitDevice || !strings.Contains(stderr.String(), "is ipmi_watchdog loaded?") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}
