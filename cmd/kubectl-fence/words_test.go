//go:build !bmcfast

package main

import (
	"strings"
	"testing"
)

// Issue 23: `kubectl fence fence --help` said "power it off if it is on";
// the rule is our own ForceOff, always, also to a machine that reads Off (a
// restart's off-dwell reads Off too). The help, the listing and the prompt
// say so, and none says "if needed" or "if it is on".
func TestFenceHelpSaysTheForceOffIsAlwaysSent(t *testing.T) {
	help, _, code := cli(t, "fence", "--help")
	list, _, _ := cli(t, "--help")
	if code != exitOK {
		t.Fatalf("fence --help: exit %d", code)
	}
	for _, text := range []string{help, list, requests["fence"].prompt} {
		for _, wrong := range []string{"if it is on", "if needed", "if it has to"} {
			if strings.Contains(text, wrong) {
				t.Errorf("says %q:\n%s", wrong, text)
			}
		}
	}
	for _, want := range []string{
		"send our own ForceOff, always",
		"also when it reads Off",
	} {
		if !strings.Contains(oneLine(help), want) {
			t.Errorf("fence --help does not say %q:\n%s", want, help)
		}
	}
	if !strings.Contains(list, "Fence a node: our own ForceOff, confirm Off, taint, wait for detach") {
		t.Errorf("kubectl fence --help lists fence as:\n%s", list)
	}
}
