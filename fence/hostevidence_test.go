package fence

import (
	"strings"
	"testing"
)

// suspectWithEvidence steps a node silent since t0 into Suspect at +30 s and
// hands Step one On reading from target "bmc-a" with h, at +31 s.
func suspectWithEvidence(t *testing.T, n NodeView, h HostEvidence) Output {
	return suspectWithEvidenceReading(t, n, h, PowerOn)
}

func suspectWithEvidenceReading(t *testing.T, n NodeView, h HostEvidence, pw Power) Output {
	t.Helper()
	p := DefaultPolicy()
	out := Step(p, State{}, tick(n, at(sec(30))), at(sec(30)))
	if out.State.Phase != Suspect || !has(out, ActReadPower) {
		t.Fatalf("setup: want Suspect and a read, got %s %v", out.State.Phase, kinds(out))
	}
	in := readingFrom(n, at(sec(31)), pw, "bmc-a")
	in.Host = h
	return Step(p, out.State, in, at(sec(31)))
}

func goodSign() Sign {
	return Sign{Kind: SignWatchdogExpired, TimerUse: TimerUseSMSOS, Boot: SignBootCurrent, FirstSeen: at(sec(31)), Key: "bmc-a|SEL/7", Source: "SEL"}
}

func evidenceOf(signs ...Sign) HostEvidence {
	return HostEvidence{At: at(sec(31)), Target: "bmc-a", Verified: true, WatchdogReported: true, WatchdogArmed: true, Signs: signs}
}

// TestHungNodeEvidenceLicensesForceOffBeforeFenceAfterOnlyWhenEachRuleHolds:
// one entry that counts makes the ForceOff due at once (the Lease silent
// SuspectAfter); every lie the rules refuse leaves the node waiting for
// FenceAfter. Each row is the test of its check's mutant.
func TestHungNodeEvidenceLicensesForceOffBeforeFenceAfterOnlyWhenEachRuleHolds(t *testing.T) {
	n := view(heartbeat(0), notReady(sec(5)))
	with := func(f func(*Sign)) HostEvidence {
		sg := goodSign()
		f(&sg)
		return evidenceOf(sg)
	}
	cases := []struct {
		name  string
		check Check
		host  HostEvidence
		want  bool
		power Power
	}{
		{"an SMS/OS watchdog expiry of this boot, first seen after the last renewal", "", evidenceOf(goodSign()), true, 0},
		{"an OS critical stop", "", with(func(s *Sign) { s.Kind, s.TimerUse = SignOSCriticalStop, TimerUseUnknown }), true, 0},
		{"a BIOS/POST expiry (a booting machine)", CheckEvidenceKind, with(func(s *Sign) { s.TimerUse = TimerUseBIOSPOST }), false, 0},
		{"an OS Load expiry (a booting machine)", CheckEvidenceKind, with(func(s *Sign) { s.TimerUse = TimerUseOSLoad }), false, 0},
		{"an expiry whose timer use the BMC hides", CheckEvidenceKind, with(func(s *Sign) { s.TimerUse = TimerUseUnknown }), false, 0},
		{"a stale entry from before the current boot", CheckEvidenceBoot, with(func(s *Sign) { s.Boot = SignBootPrevious }), false, 0},
		{"an entry the BMC places in no boot", CheckEvidenceBoot, with(func(s *Sign) { s.Boot = SignBootUnknown }), false, 0},
		{"another system's entry in a shared log", CheckEvidenceSystem, with(func(s *Sign) { s.OtherSystem = true }), false, 0},
		{"read from a target whose identity was not verified", "", func() HostEvidence { h := evidenceOf(goodSign()); h.Verified = false; return h }(), false, 0},
		{"read from another target than the fence's", "", func() HostEvidence { h := evidenceOf(goodSign()); h.Target = "bmc-b"; return h }(), false, 0},
		{"first seen before the node's last renewal", CheckEvidenceAfterRenewal, with(func(s *Sign) { s.FirstSeen = at(-sec(1)) }), false, 0},
		{"no evidence read", "", HostEvidence{}, false, 0},
		{"a machine that reads PoweringOn (its boot not over)", CheckEvidenceBoot, evidenceOf(goodSign()), false, PowerPoweringOn},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pw := c.power
			if pw == 0 {
				pw = PowerOn
			}
			out := suspectWithEvidenceReading(t, n, c.host, pw)
			if got := has(out, ActPowerOff); got != c.want {
				t.Fatalf("ForceOff at +31 s = %v, want %v (actions %v, events %v)", got, c.want, kinds(out), eventReasons(out))
			}
			if c.want {
				msg := out.Actions[len(out.Actions)-2].Event.Message
				if !strings.Contains(msg, "the BMC logged") {
					t.Errorf("the ForceOff's Event does not say which evidence licensed it: %q", msg)
				}
			}
		})
	}
}

// TestHungNodeEvidenceNeedsTheLeaseSilentForSuspectAfter: evidence never
// shortens the Lease witness: a node that renewed 10 s ago is not powered
// off whatever its BMC logged.
func TestHungNodeEvidenceNeedsTheLeaseSilentForSuspectAfter(t *testing.T) {
	p := DefaultPolicy()
	s := State{Phase: Suspect, Since: at(0), FailureStart: at(0), Target: "bmc-a"}
	in := readingFrom(view(firstSeen(sec(25))), at(sec(31)), PowerOn, "bmc-a")
	in.Host = evidenceOf(goodSign())
	out := Step(p, s, in, at(sec(31)))
	if has(out, ActPowerOff) {
		t.Fatalf("ForceOff to a node seen 6 s ago: %v", eventReasons(out))
	}
}

// TestNodeAtFenceAfterWithoutEvidenceSaysWhichEvidenceWasMissing: the
// fallback ForceOff's Event names what was missing and why entries were
// refused.
func TestNodeAtFenceAfterWithoutEvidenceSaysWhichEvidenceWasMissing(t *testing.T) {
	p := DefaultPolicy()
	n := view(heartbeat(0))
	s := State{Phase: Suspect, Since: at(sec(30)), FailureStart: at(0), Target: "bmc-a"}
	now := at(p.FenceAfter + sec(1))
	in := readingFrom(n, now, PowerOn, "bmc-a")
	sg := goodSign()
	sg.TimerUse = TimerUseBIOSPOST
	in.Host = HostEvidence{At: now, Target: "bmc-a", Verified: true, WatchdogReported: true, Unsupported: []string{"LogServices"}, Signs: []Sign{sg}}
	out := Step(p, s, in, now)
	if !has(out, ActPowerOff) {
		t.Fatalf("no ForceOff at FenceAfter: %v", kinds(out))
	}
	var msg string
	for _, a := range out.Actions {
		if a.Kind == ActEvent && a.Event.Reason == "FencePowerOff" {
			msg = a.Event.Message
		}
	}
	for _, want := range []string{"no BMC evidence of a hang counted", "LogServices", "no host watchdog armed", "BIOS/POST watchdog expiry", "timer use BIOS/POST"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the Event %q does not say %q", msg, want)
		}
	}
}

// TestHungNodeEvidenceIsVoidOnceTheMachineBootedDuringTheFence: a machine
// read booting (or off) during this fence has begun a new boot while its
// node was silent: an expiry of that boot may be its POST's (Linux re-arms
// the SMS/OS timer for 120 s on reboot), and the OS that came up has not
// renewed yet. Its evidence does not count.
func TestHungNodeEvidenceIsVoidOnceTheMachineBootedDuringTheFence(t *testing.T) {
	p := DefaultPolicy()
	n := view(heartbeat(0), notReady(sec(5)))
	out := Step(p, State{}, tick(n, at(sec(30))), at(sec(30)))
	out = Step(p, out.State, readingFrom(n, at(sec(31)), PowerPoweringOn, "bmc-a"), at(sec(31)))
	in := readingFrom(n, at(sec(36)), PowerOn, "bmc-a")
	in.Host = evidenceOf(goodSign())
	out = Step(p, out.State, in, at(sec(36)))
	if has(out, ActPowerOff) {
		t.Fatalf("ForceOff on the evidence of a boot that began during the fence: %v", eventReasons(out))
	}
}
