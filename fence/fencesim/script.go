package fencesim

import (
	"bufio"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/fence"
)

// A scenario script is a timeline, one statement per line ('#' starts a
// comment). Times are offsets from the start ("90s", "5m10s").
//
//	nodes n1 n2 n3 [zone=a]       healthy nodes, each on a machine of its own (On, kubelet up,
//	                              2 pods, 1 volume) with a correct inventory entry
//	timing powerOn=30s ...        machine timing for nodes added afterwards (powerOn, powerOff,
//	                              graceful, restartOff: a restart's off-dwell)
//	policy fenceAfter=300s ...    policy overrides (field names as in fence.Policy, lowerCamel)
//	at 30s n1 power-loss          a change in the world (see below)
//	expect 60s n1 phase Suspect   at that instant, the node's persisted phase (alternatives with |)
//	expect 60s n1 tainted         at that instant: tainted | untainted | pods N | vas N | power STATE
//	expect by 90s n1 tainted      by then at the latest (first time it held); also "phase P"
//	expect never n1 taint         no such write ever: taint | untaint | power-off | power-on
//	expect n1 event Reason        at least one Event with that reason; "expect no n1 event R" for none
//	run 10m                       run the simulation this long (last statement)
//
// World changes ("at T NODE ..." or "at T ..." for the whole world). A node
// is looked up when the change happens (it may have been re-created):
//
//	power-loss | power-restore | os-hang | os-recover | os-reboot      machine events
//	shutdown                  the OS powers the machine off (GracefulShutdown)
//	power-on                  a human presses the power button
//	restart ForceRestart|PowerCycle   someone else restarts the machine through its BMC
//	kubelet-stop | kubelet-start
//	runtime-down | runtime-up        container runtime or CNI: the kubelet renews, NotReady
//	partition | partition-heal       the kubelet runs but cannot reach the API server
//	bmc unreachable | ok | lying | honest | ignores-during-transition | already-off
//	bmc power-on-fails | latency 2s | cache 10s | cache-freeze 20s
//	entry MACHINE | entry settle=25s  the inventory entry addresses MACHINE's BMC (a node's
//	                              name is its machine's); or overrides the settle window
//	system-uuid none|changed      what the kubelet reports as the Node's systemUUID
//	delete | recreate [on MACHINE]    kubectl delete node; an operator creates it again
//	detach-slow 3m                volumes take this much longer to detach
//	taint foreign | taint remove  a human's out-of-service taint; removing whatever is there
//	maintenance on | maintenance off | exclude | no-bmc
//	command fence|confirm|confirm-force|abort|unfence|unfence-power-on USER [REASON...]
//	command replay                the node's last taken request written back unchanged
//	api freeze | api thaw | api errors 0.3 | api writes-fail | api writes-ok   (no node)
//	machine NAME on|off           a spare machine that hosts no node (no node; at parse time)
//	agent crash | failover | failover-old | failover-standby [SKEW] | failover-fresh [SKEW]
//	agent split-brain
//	agent pause-before taint|power-off|persist FOR [standby|fresh|old] [SKEW]
//	        the leader stalls right before its next such write, for FOR, while another agent
//	        leads (its clock off by SKEW); then the old leader's write goes on

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
	case "maxAPIStaleness":
		return dur(&p.MaxAPIStaleness)
	case "unassistedSettleWindow":
		return dur(&p.UnassistedSettleWindow)
	case "maxRequestAge":
		return dur(&p.MaxRequestAge)
	case "powerOffNotReadyAfter":
		return dur(&p.PowerOffNotReadyAfter)
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

// change compiles a world change. A node is looked up when the change
// happens: it may have been deleted and re-created since.
func change(sim *Sim, f []string) (func(), error) {
	w := sim.W
	switch f[0] {
	case "api":
		if len(f) < 2 {
			return nil, fmt.Errorf("want api freeze|thaw|errors RATE|writes-fail|writes-ok")
		}
		switch f[1] {
		case "freeze":
			return w.FreezeAPI, nil
		case "thaw":
			return w.ThawAPI, nil
		case "writes-fail":
			return func() { w.SetWritesFail(true) }, nil
		case "writes-ok":
			return func() { w.SetWritesFail(false) }, nil
		case "errors":
			if len(f) != 3 {
				return nil, fmt.Errorf("want api errors RATE")
			}
			r, err := strconv.ParseFloat(f[2], 64)
			return func() { w.SetAPIErrorRate(r) }, err
		}
		return nil, fmt.Errorf("unknown api change %q", f[1])
	case "agent":
		return agentChange(sim, f[1:])
	case "machine":
		// machine NAME on|off: a spare machine that hosts no node.
		if len(f) != 3 {
			return nil, fmt.Errorf("want machine NAME on|off")
		}
		if machineNamed(w, f[1]) != nil {
			return nil, fmt.Errorf("machine %q exists", f[1])
		}
		m := w.AddMachine(f[1], machine.Timing{})
		m.BMC.SetPower(f[2] == "on")
		return func() {}, nil
	}
	name := f[0]
	n := w.Node(name)
	if n == nil {
		return nil, fmt.Errorf("unknown node %q (declare it with nodes first)", name)
	}
	if len(f) < 2 {
		return nil, fmt.Errorf("want: NODE CHANGE")
	}
	args := f[2:]
	// on runs fn on the node as it is when the change happens.
	on := func(fn func(n *Node)) func() {
		return func() {
			if n := w.Node(name); n != nil {
				fn(n)
			}
		}
	}
	switch f[1] {
	case "power-loss", "power-restore", "os-hang", "os-recover", "os-reboot":
		ev := machine.Event(f[1])
		return on(func(n *Node) { _ = n.Host.BMC.Event(ev) }), nil
	case "shutdown":
		return on(func(n *Node) { _ = n.Host.BMC.Press(machine.ResetGracefulShutdown) }), nil
	case "power-on":
		return on(func(n *Node) { _ = n.Host.BMC.Press(machine.ResetOn) }), nil
	case "restart":
		// Someone else restarts the machine through its BMC.
		if len(args) != 1 || (args[0] != "ForceRestart" && args[0] != "PowerCycle") {
			return nil, fmt.Errorf("want restart ForceRestart|PowerCycle")
		}
		rt := machine.ResetType(args[0])
		return on(func(n *Node) { _ = n.Host.BMC.Press(rt) }), nil
	case "kubelet-stop":
		return on(func(n *Node) { n.KubeletEnabled = false }), nil
	case "kubelet-start":
		return on(func(n *Node) { n.KubeletEnabled = true }), nil
	case "runtime-down", "runtime-up":
		down := f[1] == "runtime-down"
		return on(func(n *Node) { n.RuntimeDown = down }), nil
	case "partition", "partition-heal":
		p := f[1] == "partition"
		return on(func(n *Node) { n.Partitioned = p }), nil
	case "exclude":
		return on(func(n *Node) { n.Excluded = true }), nil
	case "no-bmc":
		return on(func(n *Node) { n.HasBMC = false }), nil
	case "delete":
		return func() { w.DeleteNode(name) }, nil
	case "recreate":
		// recreate [on MACHINE]: an operator creates the Node again.
		var host *Machine
		if len(args) == 2 && args[0] == "on" {
			if host = machineNamed(w, args[1]); host == nil {
				return nil, fmt.Errorf("unknown machine %q", args[1])
			}
		} else if len(args) != 0 {
			return nil, fmt.Errorf("want recreate [on MACHINE]")
		}
		return func() { w.RecreateNode(name, host) }, nil
	case "entry":
		// entry MACHINE | entry settle=D: the inventory entry now
		// addresses MACHINE's BMC (a node's name means its machine), or
		// overrides the settle window.
		if len(args) != 1 {
			return nil, fmt.Errorf("want entry MACHINE|settle=DURATION")
		}
		if v, ok := strings.CutPrefix(args[0], "settle="); ok {
			d, err := time.ParseDuration(v)
			return func() {
				if e := w.Entry(name); e != nil {
					x := *e
					x.SettleWindow = d
					w.SetEntry(name, &x)
				}
			}, err
		}
		m := machineNamed(w, args[0])
		if m == nil {
			return nil, fmt.Errorf("unknown machine %q", args[0])
		}
		return func() {
			if e := w.Entry(name); e != nil {
				x := *e
				x.Target = m
				w.SetEntry(name, &x)
			}
		}, nil
	case "system-uuid":
		// system-uuid none|changed: what the kubelet reports.
		if len(args) != 1 {
			return nil, fmt.Errorf("want system-uuid none|changed")
		}
		v := ""
		if args[0] == "changed" {
			v = "00000000-0000-4000-8000-00000000c0de"
		}
		return on(func(n *Node) { n.SystemUUID = v; w.Notify(n.Name) }), nil
	case "detach-slow":
		if len(args) != 1 {
			return nil, fmt.Errorf("want detach-slow DURATION")
		}
		d, err := time.ParseDuration(args[0])
		return on(func(n *Node) { n.detachAfter = d }), err
	case "taint":
		if len(args) != 1 || (args[0] != "foreign" && args[0] != "remove") {
			return nil, fmt.Errorf("want taint foreign|remove")
		}
		foreign := args[0] == "foreign"
		return func() { w.SetTaint(name, foreign) }, nil
	case "maintenance":
		if len(args) != 1 {
			return nil, fmt.Errorf("want maintenance on|off")
		}
		m := args[0] == "on"
		return on(func(n *Node) { n.Maintenance = m; w.Notify(n.Name) }), nil
	case "bmc":
		return bmcChange(w, name, args)
	case "command":
		if len(args) == 1 && args[0] == "replay" {
			return func() { w.Replay(name) }, nil
		}
		if len(args) < 2 {
			return nil, fmt.Errorf("want command fence|confirm|confirm-force|abort|unfence|unfence-power-on USER [REASON] | command replay")
		}
		c := fence.Command{User: args[1], Reason: strings.Join(args[2:], " ")}
		switch args[0] {
		case "fence":
			c.Kind = fence.CmdFence
		case "confirm":
			c.Kind = fence.CmdConfirm
		case "confirm-force":
			c.Kind, c.Force = fence.CmdConfirm, true
		case "abort":
			c.Kind = fence.CmdAbort
		case "unfence":
			c.Kind = fence.CmdUnfence
		case "unfence-power-on":
			c.Kind, c.PowerOn = fence.CmdUnfence, true
		default:
			return nil, fmt.Errorf("unknown command %q", args[0])
		}
		return func() { w.Request(name, c) }, nil
	}
	return nil, fmt.Errorf("unknown change %q", f[1])
}

func bmcChange(w *World, name string, args []string) (func(), error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("want bmc unreachable|ok|lying|honest|ignores-during-transition|already-off|power-on-fails|latency D|cache D|cache-freeze D")
	}
	on := func(fn func(m *Machine)) func() {
		return func() {
			if n := w.Node(name); n != nil {
				fn(n.Host)
			}
		}
	}
	behave := func(b machine.Behavior) (func(), error) {
		return on(func(m *Machine) { m.SetBehavior(b) }), nil
	}
	switch args[0] {
	case "unreachable":
		return on(func(m *Machine) { m.SetUnreachable(true) }), nil
	case "ok":
		return on(func(m *Machine) { m.SetUnreachable(false) }), nil
	case "lying":
		return behave(machine.Behavior{IgnoreCommands: true})
	case "ignores-during-transition":
		return behave(machine.Behavior{IgnoreDuringTransition: true})
	case "honest":
		return on(func(m *Machine) { m.SetBehavior(machine.Behavior{}); m.SetAlreadyOff(false) }), nil
	case "already-off":
		return on(func(m *Machine) { m.SetAlreadyOff(true) }), nil
	case "power-on-fails":
		return behave(machine.Behavior{PowerOnFails: true})
	case "latency", "cache", "cache-freeze":
		if len(args) != 2 {
			return nil, fmt.Errorf("want bmc %s DURATION", args[0])
		}
		d, err := time.ParseDuration(args[1])
		switch args[0] {
		case "latency":
			return on(func(m *Machine) { m.SetLatency(d) }), err
		case "cache":
			return on(func(m *Machine) { m.CacheFor = d }), err
		default:
			return on(func(m *Machine) {
				w.mu.Lock()
				m.freezeUntil = w.now().Add(d)
				w.mu.Unlock()
			}), err
		}
	}
	return nil, fmt.Errorf("unknown bmc change %q", args[0])
}

// agentChange compiles a change to the agents.
//
//	agent crash | failover | failover-old | split-brain
//	agent failover-standby|failover-fresh [SKEW]   a new leader whose clock is off by SKEW
//	agent pause-before taint|power-off|persist FOR [standby|fresh|old] [SKEW]
//	        the leader stalls right before its next such write, for FOR,
//	        while another agent leads; then its write goes on
func agentChange(sim *Sim, f []string) (func(), error) {
	if len(f) == 0 {
		return nil, fmt.Errorf("want agent crash|failover|failover-old|failover-standby|failover-fresh|split-brain|pause-before")
	}
	skewArg := func(args []string) (time.Duration, error) {
		if len(args) == 0 {
			return 0, nil
		}
		return time.ParseDuration(args[0])
	}
	switch f[0] {
	case "crash":
		return sim.Crash, nil
	case "failover":
		return func() { sim.Failover(false) }, nil
	case "failover-old":
		return func() { sim.Failover(true) }, nil
	case "failover-standby", "failover-fresh":
		skew, err := skewArg(f[1:])
		to := strings.TrimPrefix(f[0], "failover-")
		return func() { sim.FailoverTo(to, skew) }, err
	case "split-brain":
		return sim.SplitBrain, nil
	case "pause-before":
		if len(f) < 3 {
			return nil, fmt.Errorf("want agent pause-before taint|power-off|persist FOR [standby|fresh|old] [SKEW]")
		}
		kinds := map[string]fence.ActionKind{"taint": fence.ActApplyTaint, "power-off": fence.ActPowerOff, "persist": fence.ActPersist}
		k, ok := kinds[f[1]]
		if !ok {
			return nil, fmt.Errorf("unknown write %q", f[1])
		}
		d, err := time.ParseDuration(f[2])
		if err != nil {
			return nil, err
		}
		to := "standby"
		rest := f[3:]
		if len(rest) > 0 && (rest[0] == "standby" || rest[0] == "fresh" || rest[0] == "old") {
			to, rest = rest[0], rest[1:]
		}
		skew, err := skewArg(rest)
		return func() {
			sim.Arm(&PausePlan{After: sim.W.Clock.Now(), Kinds: []fence.ActionKind{k}, For: d, To: to, Skew: skew})
		}, err
	}
	return nil, fmt.Errorf("unknown agent change %q", f[0])
}

func machineNamed(w *World, name string) *Machine {
	for _, m := range w.Machines {
		if m.Name == name {
			return m
		}
	}
	return nil
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
	cond, err := condition(w, f[1], f[2:])
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

func condition(w *World, name string, f []string) (func() string, error) {
	// The node as it is when checked: it may have been re-created.
	node := func() *Node {
		if n := w.Node(name); n != nil {
			return n
		}
		return &Node{Name: name}
	}
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
			if got := node().Phase(); !slices.Contains(want, got) {
				return "phase is " + got
			}
			return ""
		}, nil
	case "tainted", "untainted":
		want := f[0] == "tainted"
		return func() string {
			if t := node().taint; (t != fence.TaintAbsent) != want {
				return fmt.Sprintf("taint is %v", t)
			}
			return ""
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
			n := node()
			got := n.pods
			if f[0] == "vas" {
				got = n.vas
			}
			if got == want {
				return ""
			}
			return fmt.Sprintf("%s = %d", f[0], got)
		}, nil
	case "power":
		// power On|Off|...: the machine's true power state.
		if len(f) != 2 {
			return nil, fmt.Errorf("want power STATE")
		}
		return func() string {
			n := w.Node(name)
			if n == nil {
				return "no such node"
			}
			if got := string(n.Host.BMC.Truth().Power); got != f[1] {
				return "power is " + got
			}
			return ""
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
