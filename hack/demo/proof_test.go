package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// polls feeds the printer one view per poll, 200ms apart, as the demo's
// WaitFor does, and returns what it printed.
func polls[V any](t *testing.T, show func(*proof, V) bool, views ...V) (string, bool) {
	t.Helper()
	var out bytes.Buffer
	start := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	now := start
	p := newProof(&out, start, func() time.Time { return now }, false)
	done := false
	for _, v := range views {
		now = now.Add(200 * time.Millisecond)
		done = show(p, v)
	}
	return out.String(), done
}

var (
	suspect    = nodeEvent{"FenceSuspect", "no Lease renewal observed for 20s (Ready=Unknown); reading the BMC"}
	waiting    = nodeEvent{"FenceWaiting", "BMC reads Off, but not after the failure began; reading again"}
	powerOff   = nodeEvent{"FencePowerOff", "sending ForceOff (attempt 1 of 3): the BMC reads Off; our own ForceOff anyway"}
	confirming = nodeEvent{"FenceConfirmingOff", "BMC reads Off (power trusted: system and chassis) after our accepted ForceOff; confirming it stays off (3 reads over 6s)"}
	confirmed  = nodeEvent{"FenceConfirmedOff", "BMC read Off 3 times over 6s (from 10:00:18 to 10:00:24), after our accepted ForceOff at 10:00:17, the Lease has been silent since 09:59:57"}
	tainted    = nodeEvent{"FenceTainted", "applied node.kubernetes.io/out-of-service=nodeshutdown:NoExecute (accepted)"}
)

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		_, text, _ := strings.Cut(strings.TrimSpace(l), "s  ")
		out = append(out, text)
	}
	return out
}

// The failover prints every step of the proof once, in order: the Lease
// silence, our ForceOff sent, its acceptance, the settled Off, the taint,
// the pods, the volume, the replacement; however often a poll sees each.
func TestFailoverPrintsEveryStepOfTheProofOnce(t *testing.T) {
	base := failoverView{Node: "n2", PodNode: "n2", PodRunning: true, VolumeOn: "n2"}
	with := func(f func(*failoverView)) failoverView { v := base; f(&v); return v }
	out, done := polls(t, (*proof).failover,
		base,
		with(func(v *failoverView) { v.Events = []nodeEvent{suspect} }),
		with(func(v *failoverView) { v.Events = []nodeEvent{suspect, waiting} }),
		with(func(v *failoverView) { v.Events = []nodeEvent{suspect, waiting, powerOff} }),
		with(func(v *failoverView) { v.Events = []nodeEvent{suspect, waiting, powerOff, confirming} }),
		with(func(v *failoverView) { v.Events = []nodeEvent{suspect, waiting, powerOff, confirming} }),
		// The taint lands before the Event that says why.
		with(func(v *failoverView) { v.Events = []nodeEvent{suspect, powerOff, confirming}; v.Tainted = true }),
		with(func(v *failoverView) {
			v.Events = []nodeEvent{suspect, powerOff, confirming, confirmed, tainted}
			v.Tainted = true
		}),
		with(func(v *failoverView) {
			v.Events = []nodeEvent{suspect, powerOff, confirming, confirmed, tainted}
			v.Tainted, v.PodNode = true, ""
		}),
		with(func(v *failoverView) {
			v.Events = []nodeEvent{suspect, powerOff, confirming, confirmed, tainted}
			v.Tainted, v.PodNode, v.PodRunning, v.VolumeOn = true, "n3", false, ""
		}),
		with(func(v *failoverView) {
			v.Events = []nodeEvent{suspect, powerOff, confirming, confirmed, tainted}
			v.Tainted, v.PodNode, v.PodRunning, v.VolumeOn = true, "n3", true, "n3"
		}),
	)
	want := []string{
		"Lease silent, the first witness: " + suspect.Message,
		"our ForceOff sent: " + powerOff.Message,
		"our ForceOff accepted by the BMC: " + withoutTrusted(confirming.Message),
		"Off settled, the second witness: " + confirmed.Message,
		"tainted: node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
		"pods moved: the old db-0 is deleted",
		"volume detached from n2",
		"replacement db-0 Running on n3 with its volume",
	}
	if diff := cmp.Diff(want, lines(out)); diff != "" {
		t.Errorf("printed (-want +got):\n%s\n%s", diff, out)
	}
	if !done {
		t.Error("the failover is not over with the replacement Running")
	}
}

// A ForceOff the BMC answered "already off" is not acceptance: the demo
// says so instead of claiming it.
func TestFailoverSaysWhenTheForceOffWasNotAccepted(t *testing.T) {
	notOurs := nodeEvent{"FenceConfirmingOff", "BMC reads Off, but the BMC did not act on our ForceOff: the Off may be a restart's off-dwell, so it must stay off for 1m0s"}
	out, _ := polls(t, (*proof).failover, failoverView{Node: "n2", PodNode: "n2", VolumeOn: "n2", Events: []nodeEvent{suspect, powerOff, notOurs}})
	want := []string{
		"Lease silent, the first witness: " + suspect.Message,
		"our ForceOff sent: " + powerOff.Message,
		"our ForceOff not accepted: " + notOurs.Message,
	}
	if diff := cmp.Diff(want, lines(out)); diff != "" {
		t.Errorf("printed (-want +got):\n%s", diff)
	}
}

// A taint whose settled Event never comes is printed after a bounded wait:
// a lost Event does not stop the demo.
func TestFailoverPrintsTheTaintWithoutItsEventAfterAWhile(t *testing.T) {
	v := failoverView{Node: "n2", PodNode: "n2", VolumeOn: "n2", Tainted: true}
	views := make([]failoverView, holdTaintPolls+1)
	for i := range views {
		views[i] = v
	}
	out, _ := polls(t, (*proof).failover, views...)
	if diff := cmp.Diff([]string{"tainted: node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"}, lines(out)); diff != "" {
		t.Errorf("printed (-want +got):\n%s", diff)
	}
}

// The node seen Ready on several polls before the taint goes is one line
// (the demo printed "n3 Ready again" on every such poll).
func TestRecoveryPrintsReadyOnce(t *testing.T) {
	out, done := polls(t, (*proof).recovery,
		recoveryView{Node: "n3", Tainted: true},
		recoveryView{Node: "n3", Ready: true, Tainted: true},
		recoveryView{Node: "n3", Ready: true, Tainted: true},
		recoveryView{Node: "n3", Ready: true, Tainted: false},
	)
	want := []string{"n3 Ready again, its kubelet renewing its lease", "our taint removed: n3 takes work again"}
	if diff := cmp.Diff(want, lines(out)); diff != "" {
		t.Errorf("printed (-want +got):\n%s", diff)
	}
	if !done {
		t.Error("recovery not over with the taint removed")
	}
}

func TestWithoutTrustedDropsTheNestedClause(t *testing.T) {
	in := "BMC read Off 3 times over 6.012s (from 20:43:27.772 to 20:43:33.784) (power trusted: system and chassis: the system reads Off and its chassis, which carries the real power (OpenBMC derives the system's PowerState from the host's firmware state), agrees), after our accepted ForceOff at 20:43:25.770"
	want := "BMC read Off 3 times over 6.012s (from 20:43:27.772 to 20:43:33.784), after our accepted ForceOff at 20:43:25.770"
	if got := withoutTrusted(in); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := withoutTrusted("BMC reads Off (power trusted: system"); got != "BMC reads Off (power trusted: system" {
		t.Errorf("an unclosed clause is kept as it is, got %q", got)
	}
}
