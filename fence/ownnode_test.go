package fence

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func runsThisAgent() nodeOpt { return func(n *NodeView) { n.RunsThisAgent = true } }

func countReason(outs []Output, reason string) int {
	k := 0
	for _, o := range outs {
		for _, a := range o.Actions {
			if a.Kind == ActEvent && a.Event.Reason == reason {
				k++
			}
		}
	}
	return k
}

// The leader never powers off the node it runs on, whatever the BMC reads
// (an exact Off, On past fenceAfter, a human's fence request): it says why
// once per episode, not at every retry.
func TestLeaderNeverPowersOffTheNodeItRunsOn(t *testing.T) {
	for _, pw := range []Power{PowerOff, PowerOn} {
		t.Run(pw.String(), func(t *testing.T) {
			d := newDriver(t)
			n := view(runsThisAgent())
			d.suspect(n)
			var outs []Output
			for s := 20.1; s < 900; s += 5 {
				out := d.step(reading(n, at(sec(s)), pw), at(sec(s)))
				if has(out, ActPowerOff) {
					t.Fatalf("ForceOff to the leader's own node at +%.1fs (BMC reads %s)", s, pw)
				}
				outs = append(outs, out)
			}
			if got := countReason(outs, ReasonRefusedOwnNode); got != 1 {
				t.Errorf("%s said %d times, want once per episode", ReasonRefusedOwnNode, got)
			}
			for _, o := range outs {
				for _, a := range o.Actions {
					if a.Event.Reason == ReasonRefusedOwnNode && !strings.Contains(a.Event.Message, "the leader runs on this node; another replica fences it once it leads") {
						t.Errorf("event = %q", a.Event.Message)
					}
				}
			}
			// Another replica leads: the same node, not its own, is fenced.
			d2 := newDriver(t)
			n2 := view()
			d2.suspect(n2)
			if out := d2.step(reading(n2, at(sec(900)), pw), at(sec(900))); !has(out, ActPowerOff) {
				t.Fatalf("another replica did not fence the node: %v", kinds(out))
			}
		})
	}
}

func TestLeaderRefusesAHumansFenceOfItsOwnNode(t *testing.T) {
	d := newDriver(t)
	n := view(runsThisAgent(), heartbeat(sec(100)))
	d.step(command(n, at(sec(101)), Command{Kind: CmdFence, User: "alice", Reason: "hung", SeenAt: at(sec(101))}), at(sec(101)))
	for s := 101.5; s < 200; s += 3 {
		if out := d.step(reading(n, at(sec(s)), PowerOn), at(sec(s))); has(out, ActPowerOff) {
			t.Fatalf("ForceOff to the leader's own node on a human's request at +%.1fs", s)
		}
	}
}

// Detaching keeps a tainted machine off, but not the leader's own: a
// machine that runs the leader is not forced off by it.
func TestKeepOffSparesTheLeadersOwnNode(t *testing.T) {
	d := newDriver(t)
	n := view()
	d.toTainting(n)
	d.step(result(view(withTaint(TaintOurs), pods(1, 1)), at(sec(28.3)), ActApplyTaint, ""), at(sec(28.3)))
	d.wantPhase(Detaching)
	own := view(runsThisAgent(), withTaint(TaintOurs), pods(1, 1))
	out := d.step(reading(own, at(sec(31)), PowerOn), at(sec(31)))
	if has(out, ActPowerOff) {
		t.Fatalf("keep-off forced the leader's own node off: %v", kinds(out))
	}
	if !slices.Contains(eventReasons(out), ReasonRefusedOwnNode) {
		t.Errorf("events = %v, want %s", eventReasons(out), ReasonRefusedOwnNode)
	}
}

// The kubelet port names the failure's class and changes no decision: the
// same inputs with each KubeletPort value give the same actions and phases
// at every step, only Event messages differ.
func TestKubeletPortChangesNoDecision(t *testing.T) {
	type stepIn struct {
		s  float64
		pw Power
	}
	script := []stepIn{{20, PowerUnknown}, {20.1, PowerOn}, {60, PowerOn}, {300.5, PowerOn}, {301, PowerOn}, {306, PowerOff}, {309, PowerOff}, {312, PowerOff}, {315, PowerOff}}
	for _, pw := range []Power{PowerOn, PowerOff} {
		var want []string
		for _, kp := range []KubeletPort{KubeletPortUnknown, KubeletPortAnswers, KubeletPortReset, KubeletPortTimeout} {
			d := newDriver(t)
			n := view()
			n.KubeletPort = kp
			var got []string
			for i, st := range script {
				now := at(sec(st.s))
				var in Input
				switch {
				case i == 0:
					in = tick(n, now)
				case i == 4 && d.s.Phase == PoweringOff:
					in = result(n, now, ActPowerOff, "")
				default:
					p := st.pw
					if pw == PowerOff {
						p = PowerOff
					}
					in = reading(n, now, p)
				}
				out := d.step(in, now)
				got = append(got, d.s.Phase.String()+":"+strings.Join(kindNames(out), ",")+"@"+out.RecheckAfter.String())
				if kp != KubeletPortUnknown {
					for _, a := range out.Actions {
						if a.Kind == ActEvent && (a.Event.Reason == "FencePowerOff" || a.Event.Reason == "FenceWaiting" || a.Event.Reason == "FenceSuspect") && (strings.Contains(a.Event.Message, "BMC reads On") || a.Event.Reason == "FenceSuspect") && !strings.Contains(a.Event.Message, kp.Class()) {
							t.Errorf("%s: event %s = %q, want the class %q", kp, a.Event.Reason, a.Event.Message, kp.Class())
						}
					}
				}
			}
			if want == nil {
				want = got
				continue
			}
			if !slices.Equal(got, want) {
				t.Errorf("reads %s, kubelet port %s: decisions\n  %v\nwant (not probed)\n  %v", pw, kp, got, want)
			}
		}
	}
}

func kindNames(o Output) []string {
	var s []string
	for _, k := range kinds(o) {
		s = append(s, k.String())
	}
	return s
}

var _ = time.Second
