package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Bad input is caught before anything touches a cluster or a BMC: exit 2,
// one line that says what to fix.
func TestUsageErrorsNeedNoCluster(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"drain"}, "usage: kubectl fence drain NODE"},
		{[]string{"drain", "n1", "n2"}, "accepts 1 arg(s), received 2"},
		{[]string{"drain", "n1", "--parallelism", "0"}, "--parallelism 0: at least 1"},
		{[]string{"drain", "n1", "--timeout", "0"}, "--timeout 0s: must be positive"},
		{[]string{"drain", "n1", "--settle-reads", "1"}, "--settle-reads 1: at least 2"},
		{[]string{"drain", "n1", "-o", "xml"}, `output "xml": want table, json or yaml`},
		{[]string{"undrain"}, "usage: kubectl fence undrain NODE"},
		{[]string{"undrain", "n1", "--timeout", "-1s"}, "--timeout -1s: must be positive"},
		{[]string{"drain", "n1", "--maintenance-for", "-1s"}, "--maintenance-for -1s: must be positive"},
		{[]string{"undrain", "n1", "--release", "--power-on"}, "--release and --power-on"},
		{[]string{"power", "status"}, "usage: kubectl fence power status NODE"},
		{[]string{"fence"}, "usage: kubectl fence fence NODE"},
		{[]string{"bmc", "status", "extra"}, "usage: kubectl fence bmc status"},
		{[]string{"sttus"}, `unknown command "sttus" for "kubectl fence"; did you mean "status"?`},
		{[]string{"power", "reboot", "x"}, `unknown command "reboot" for "kubectl fence power"; commands: cycle, off, on, status`},
		{[]string{"power"}, "kubectl fence power needs a command: cycle, off, on, status"},
		{[]string{"bmc", "cycle", "--address", "https://x"}, `unknown command "cycle" for "kubectl fence bmc": a power cycle can leave a machine on`},
		{[]string{"fence", "n1", "--reason", "r", "--timeout", "-1s"}, "--timeout -1s: must be positive"},
		{[]string{"bmc", "off", "--settle-window", "0s"}, "--settle-window 0s: must be positive"},
		// Issue 17, defect 7: a settle window as long as the unassisted
		// window would let an Off we did not cause settle inside a dwell.
		{[]string{"bmc", "off", "--address", "https://10.0.0.5", "--settle-window", "60s"}, "--settle-window 1m0s: not shorter than --unassisted-settle-window 1m0s"},
		{[]string{"drain", "n1", "--power-off", "--settle-window", "2m"}, "--settle-window 2m0s: not shorter than --unassisted-settle-window 1m0s"},
		{[]string{"status", "--request-timeout", "abc"}, ""},
		{[]string{"status", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"--bogus"}, "unknown flag: --bogus"},
		{[]string{"bmc", "--bogus"}, "kubectl fence bmc needs a command: off, on, status"},
		{[]string{"version", "extra"}, `unknown command "extra" for "kubectl fence version"`},
		{[]string{"history", "n1", "--timeline"}, "--timeline draws one fence: name its record (kubectl fence history n1 RECORD --timeline"},
		{[]string{"history", "n1", "-o", "svg"}, "-o svg draws one fence: name its record (kubectl fence history n1 RECORD -o svg"},
		{[]string{"history", "n1", "r1", "--timeline", "-o", "json"}, "--timeline draws in the terminal: drop -o json, or use -o svg"},
		{[]string{"history", "n1", "-o", "png"}, `output "png": want table, json, yaml or svg`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, errOut, code := cli(t, tt.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", code, exitUsage, errOut)
			}
			if !strings.Contains(errOut, tt.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("stderr %q: want one line containing %q", errOut, tt.want)
			}
		})
	}
}

// Every runnable command shows how it is used.
func TestEveryCommandHasAnExample(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Example == "" && !strings.HasPrefix(c.CommandPath(), "kubectl fence completion") && c.Name() != "help" {
			t.Errorf("%s has no Example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(streams{}))
}
