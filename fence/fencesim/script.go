package fencesim

import (
	"bufio"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bmcfence/bmcfence/bmc/bmctest"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
)

// A scenario script is a timeline, one statement per line ('#' starts a
// comment). Times are offsets from the start ("90s", "5m10s").
//
//	nodes n1 n2 n3 [zone=a]       healthy nodes (machine On, kubelet up, 2 pods, 1 volume)
//	timing powerOn=30s ...        machine timing for nodes added afterwards
//	policy fenceAfter=300s ...    policy overrides (field names as in fence.Policy, lowerCamel)
//	at 30s n1 power-loss          a change in the world (see below)
//	expect 60s n1 phase Suspect   at that instant, the node's persisted phase (alternatives with |)
//	expect 60s n1 tainted         at that instant: tainted | untainted | pods N | vas N
//	expect by 90s n1 tainted      by then at the latest (first time it held); also "phase P"
//	expect never n1 taint         no such write ever: taint | untaint | power-off | power-on
//	expect n1 event Reason        at least one Event with that reason; "expect no n1 event R" for none
//	run 10m                       run the simulation this long (last statement)
//
// World changes ("at T NODE ..." or "at T ..." for the whole world):
//
//	power-loss | power-restore | os-hang | os-recover | os-reboot      machine events
//	shutdown                  the OS powers the machine off (GracefulShutdown)
//	power-on                  a human presses the power button
//	kubelet-stop | kubelet-start
//	bmc unreachable | bmc ok | bmc lying | bmc honest | bmc power-on-fails | bmc latency 2s
//	maintenance on | maintenance off | exclude | no-bmc
//	command fence|confirm|abort|unfence|unfence-power-on USER [REASON...]
//	api freeze | api thaw | api errors 0.3   (no node)
//	agent crash | agent failover | agent failover-old | agent split-brain   (no node)

// ScriptResult is what a script run found.
type ScriptResult struct {
	World    *World
	Failures []string
}

type expectation struct {
	line  int
	text  string
	check func(w *World) string // "" when satisfied
}

// RunScript parses and runs a scenario script.
func RunScript(src string, start time.Time, seed uint64) (ScriptResult, error) {
	p := fence.DefaultPolicy()
	var timing machine.Timing
	var w *World
	var sim *Sim
	var final []expectation
	var res ScriptResult
	ensure := func() {
		if w == nil {
			w = NewWorld(start, p, seed)
			sim = NewSim(w)
		}
	}
	sc := bufio.NewScanner(strings.NewReader(src))
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		bad := func(format string, args ...any) (ScriptResult, error) {
			return res, fmt.Errorf("line %d (%q): %s", lineNo, strings.TrimSpace(line), fmt.Sprintf(format, args...))
		}
		switch f[0] {
		case "policy":
			if w != nil {
				return bad("policy must come before nodes")
			}
			for _, kv := range f[1:] {
				if err := setPolicy(&p, kv); err != nil {
					return bad("%v", err)
				}
			}
			if err := p.Validate(); err != nil {
				return bad("%v", err)
			}
		case "timing":
			for _, kv := range f[1:] {
				if err := setTiming(&timing, kv); err != nil {
					return bad("%v", err)
				}
			}
		case "nodes":
			ensure()
			zone := "a"
			for _, name := range f[1:] {
				if z, ok := strings.CutPrefix(name, "zone="); ok {
					zone = z
					continue
				}
				w.AddNode(name, zone, timing)
			}
		case "at":
			ensure()
			if len(f) < 3 {
				return bad("want: at TIME [NODE] CHANGE")
			}
			at, err := time.ParseDuration(f[1])
			if err != nil {
				return bad("%v", err)
			}
			do, err := change(sim, f[2:])
			if err != nil {
				return bad("%v", err)
			}
			sim.At(at, strings.Join(f[2:], " "), do)
		case "expect":
			ensure()
			e, when, err := expect(sim, f[1:])
			if err != nil {
				return bad("%v", err)
			}
			e.line, e.text = lineNo, strings.Join(f, " ")
			if when < 0 {
				final = append(final, e)
				continue
			}
			sim.At(when, e.text, func() {
				if msg := e.check(w); msg != "" {
					res.Failures = append(res.Failures, fmt.Sprintf("line %d: %s: %s (world: %s)", e.line, e.text, msg, w.Summary()))
				}
			})
		case "run":
			ensure()
			if len(f) != 2 {
				return bad("want: run DURATION")
			}
			d, err := time.ParseDuration(f[1])
			if err != nil {
				return bad("%v", err)
			}
			sim.Run(d)
		default:
			return bad("unknown statement %q", f[0])
		}
	}
	if w == nil {
		return res, fmt.Errorf("empty script")
	}
	for _, e := range final {
		if msg := e.check(w); msg != "" {
			res.Failures = append(res.Failures, fmt.Sprintf("line %d: %s: %s", e.line, e.text, msg))
		}
	}
	for _, v := range w.Violations {
		res.Failures = append(res.Failures, "SAFETY: "+v)
	}
	res.World = w
	return res, nil
}

func setPolicy(p *fence.Policy, kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("want key=value, got %q", kv)
	}
	dur := func(dst *time.Duration) error {
		d, err := time.ParseDuration(v)
		*dst = d
		return err
	}
	switch k {
	case "suspectAfter":
		return dur(&p.SuspectAfter)
	case "fenceAfter":
		return dur(&p.FenceAfter)
	case "settleWindow":
		return dur(&p.SettleWindow)
	case "powerTimeout":
		return dur(&p.PowerTimeout)
	case "detachTimeout":
		return dur(&p.DetachTimeout)
	case "cooldown":
		return dur(&p.Cooldown)
	case "powerOnAfterDetach":
		b, err := strconv.ParseBool(v)
		p.PowerOnAfterDetach = b
		return err
	case "powerOffAttempts":
		n, err := strconv.Atoi(v)
		p.PowerOffAttempts = n
		return err
	case "maxConcurrentFences":
		n, err := strconv.Atoi(v)
		p.MaxConcurrentFences = n
		return err
	}
	return fmt.Errorf("unknown policy field %q", k)
}

func setTiming(t *machine.Timing, kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("want key=value, got %q", kv)
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	switch k {
	case "powerOn":
		t.PowerOn = d
	case "powerOff":
		t.PowerOff = d
	case "graceful":
		t.GracefulShutdown = d
	case "restartOff":
		t.RestartOff = d
	default:
		return fmt.Errorf("unknown timing field %q", k)
	}
	return nil
}

// change compiles a world change.
func change(sim *Sim, f []string) (func(), error) {
	w := sim.W
	switch f[0] {
	case "api":
		if len(f) < 2 {
			return nil, fmt.Errorf("want api freeze|thaw|errors RATE")
		}
		switch f[1] {
		case "freeze":
			return w.FreezeAPI, nil
		case "thaw":
			return w.ThawAPI, nil
		case "errors":
			if len(f) != 3 {
				return nil, fmt.Errorf("want api errors RATE")
			}
			r, err := strconv.ParseFloat(f[2], 64)
			return func() { w.SetAPIErrorRate(r) }, err
		}
		return nil, fmt.Errorf("unknown api change %q", f[1])
	case "agent":
		if len(f) != 2 {
			return nil, fmt.Errorf("want agent crash|failover|failover-old|split-brain")
		}
		switch f[1] {
		case "crash":
			return sim.Crash, nil
		case "failover":
			return func() { sim.Failover(false) }, nil
		case "failover-old":
			return func() { sim.Failover(true) }, nil
		case "split-brain":
			return sim.SplitBrain, nil
		}
		return nil, fmt.Errorf("unknown agent change %q", f[1])
	}
	n := w.Node(f[0])
	if n == nil {
		return nil, fmt.Errorf("unknown node %q (declare it with nodes first)", f[0])
	}
	if len(f) < 2 {
		return nil, fmt.Errorf("want: NODE CHANGE")
	}
	args := f[2:]
	switch f[1] {
	case "power-loss", "power-restore", "os-hang", "os-recover", "os-reboot":
		ev := machine.Event(f[1])
		return func() { _ = n.BMC.Event(ev) }, nil
	case "shutdown":
		return func() { _ = n.BMC.Press(machine.ResetGracefulShutdown) }, nil
	case "power-on":
		return func() { _ = n.BMC.Press(machine.ResetOn) }, nil
	case "kubelet-stop":
		return func() { n.KubeletEnabled = false }, nil
	case "kubelet-start":
		return func() { n.KubeletEnabled = true }, nil
	case "exclude":
		return func() { n.Excluded = true }, nil
	case "no-bmc":
		return func() { n.HasBMC = false }, nil
	case "maintenance":
		if len(args) != 1 {
			return nil, fmt.Errorf("want maintenance on|off")
		}
		on := args[0] == "on"
		return func() { n.Maintenance = on; w.notify(n.Name) }, nil
	case "bmc":
		if len(args) == 0 {
			return nil, fmt.Errorf("want bmc unreachable|ok|lying|honest|power-on-fails|latency D")
		}
		switch args[0] {
		case "unreachable":
			return func() { n.BMC.Fail(bmctest.ErrUnreachableFake) }, nil
		case "ok":
			return n.BMC.Clear, nil
		case "lying":
			return func() { n.BMC.SetBehavior(machine.Behavior{IgnoreCommands: true}) }, nil
		case "honest":
			return func() { n.BMC.SetBehavior(machine.Behavior{}) }, nil
		case "power-on-fails":
			return func() { n.BMC.SetBehavior(machine.Behavior{PowerOnFails: true}) }, nil
		case "latency":
			if len(args) != 2 {
				return nil, fmt.Errorf("want bmc latency DURATION")
			}
			d, err := time.ParseDuration(args[1])
			return func() { n.BMC.SetLatency(d) }, err
		}
		return nil, fmt.Errorf("unknown bmc change %q", args[0])
	case "command":
		if len(args) < 2 {
			return nil, fmt.Errorf("want command fence|confirm|abort|unfence|unfence-power-on USER [REASON]")
		}
		c := fence.Command{User: args[1], Reason: strings.Join(args[2:], " ")}
		switch args[0] {
		case "fence":
			c.Kind = fence.CmdFence
		case "confirm":
			c.Kind = fence.CmdConfirm
		case "abort":
			c.Kind = fence.CmdAbort
		case "unfence":
			c.Kind = fence.CmdUnfence
		case "unfence-power-on":
			c.Kind, c.PowerOn = fence.CmdUnfence, true
		default:
			return nil, fmt.Errorf("unknown command %q", args[0])
		}
		return func() { w.Request(n.Name, c) }, nil
	}
	return nil, fmt.Errorf("unknown change %q", f[1])
}

// expect compiles an expectation. when < 0 means "check at the end".
func expect(sim *Sim, f []string) (expectation, time.Duration, error) {
	w := sim.W
	var e expectation
	if len(f) == 0 {
		return e, 0, fmt.Errorf("empty expectation")
	}
	// expect [no] NODE event REASON
	if f[0] == "no" || (len(f) == 3 && f[1] == "event") {
		want := f[0] != "no"
		if !want {
			f = f[1:]
		}
		if len(f) != 3 || f[1] != "event" {
			return e, 0, fmt.Errorf("want: expect [no] NODE event REASON")
		}
		node, reason := f[0], f[2]
		e.check = func(w *World) string {
			got := slices.ContainsFunc(w.Records, func(r Record) bool { return r.Node == node && r.Kind == "event" && r.Detail == reason })
			if got != want {
				return fmt.Sprintf("events %v", eventReasons(w, node))
			}
			return ""
		}
		return e, -1, nil
	}
	// expect never NODE WRITE
	if f[0] == "never" {
		if len(f) != 3 {
			return e, 0, fmt.Errorf("want: expect never NODE taint|untaint|power-off|power-on")
		}
		node, kind := f[1], f[2]
		e.check = func(w *World) string {
			for _, r := range w.Records {
				if r.Node == node && r.Kind == kind {
					return fmt.Sprintf("%s at +%s", kind, r.At.Sub(sim.start))
				}
			}
			return ""
		}
		return e, -1, nil
	}
	by := false
	if f[0] == "by" {
		by = true
		f = f[1:]
	}
	if len(f) < 3 {
		return e, 0, fmt.Errorf("want: expect [by] TIME NODE CONDITION")
	}
	at, err := time.ParseDuration(f[0])
	if err != nil {
		return e, 0, err
	}
	if w.Node(f[1]) == nil {
		return e, 0, fmt.Errorf("unknown node %q", f[1])
	}
	cond, err := condition(w.Node(f[1]), f[2:])
	if err != nil {
		return e, 0, err
	}
	if !by {
		e.check = func(*World) string { return cond() }
		return e, at, nil
	}
	// "by": poll every second from the start until it first holds.
	held := false
	for t := time.Duration(0); t <= at; t += time.Second {
		sim.At(t, "poll", func() {
			if !held && cond() == "" {
				held = true
			}
		})
	}
	e.check = func(*World) string {
		if held {
			return ""
		}
		return "never held: " + cond()
	}
	return e, at, nil
}

func condition(n *Node, f []string) (func() string, error) {
	switch f[0] {
	case "phase":
		if len(f) != 2 {
			return nil, fmt.Errorf("want phase P[|P2...]")
		}
		want := strings.Split(f[1], "|")
		for _, p := range want {
			if _, err := fence.ParsePhase(p); err != nil {
				return nil, err
			}
		}
		return func() string {
			if slices.Contains(want, n.Phase()) {
				return ""
			}
			return "phase is " + n.Phase()
		}, nil
	case "tainted", "untainted":
		want := f[0] == "tainted"
		return func() string {
			if (n.taint != fence.TaintAbsent) == want {
				return ""
			}
			return fmt.Sprintf("taint is %v", n.taint)
		}, nil
	case "pods", "vas":
		if len(f) != 2 {
			return nil, fmt.Errorf("want %s N", f[0])
		}
		want, err := strconv.Atoi(f[1])
		if err != nil {
			return nil, err
		}
		return func() string {
			got := n.pods
			if f[0] == "vas" {
				got = n.vas
			}
			if got == want {
				return ""
			}
			return fmt.Sprintf("%s = %d", f[0], got)
		}, nil
	}
	return nil, fmt.Errorf("unknown condition %q", f[0])
}

func eventReasons(w *World, node string) []string {
	var out []string
	for _, r := range w.Records {
		if r.Node == node && r.Kind == "event" {
			out = append(out, r.Detail)
		}
	}
	return out
}
