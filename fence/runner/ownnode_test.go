package runner_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

type refusals struct {
	runner.NopRecorder
	mu  sync.Mutex
	got []string
}

func (r *refusals) Refused(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, reason)
}

// The leader never powers off the node it runs on (Options.NodeName): n1
// lost power, yet the runner on n1 sends no ForceOff there; it says why
// once (Event FenceRefusedOwnNode, metric reason OwnNode). Another replica,
// on n2, fences n1 once it leads.
func TestRunnerNeverPowersOffTheNodeItRunsOn(t *testing.T) {
	w, c := world(t)
	rec := &refusals{}
	r := newRunner(t, w, c, func(o *runner.Options) { o.NodeName, o.Recorder = "n1", rec })
	syncFor(w, r, w.Policy.FenceAfter+time.Minute)
	for _, x := range w.Records {
		if x.Node == "n1" && x.Kind == "power-off" {
			t.Fatalf("ForceOff to the leader's own node n1 at +%s; events %v", x.At.Sub(t0), events(w, "n1"))
		}
	}
	said := 0
	for _, x := range w.Records {
		if x.Node == "n1" && x.Kind == "event" && x.Detail == fence.ReasonRefusedOwnNode {
			said++
			if !strings.Contains(x.Msg, "the leader runs on this node; another replica fences it once it leads") {
				t.Errorf("event message %q", x.Msg)
			}
		}
	}
	if said != 1 {
		t.Errorf("%s said %d times, want once; events %v", fence.ReasonRefusedOwnNode, said, events(w, "n1"))
	}
	if !slices.Contains(rec.got, "OwnNode") {
		t.Errorf("metric refusals %v, want OwnNode", rec.got)
	}
	// Leadership passes to the replica on n2: it fences n1.
	r2 := newRunner(t, w, c, func(o *runner.Options) { o.NodeName = "n2" })
	syncFor(w, r2, 30*time.Second)
	if w.Node("n1").Taint() != fence.TaintOurs {
		t.Fatalf("the replica on n2 did not fence n1; events %v", events(w, "n1"))
	}
	if len(w.Violations) > 0 {
		t.Fatal(w.Violations)
	}
}

// withKubelet gives every node a kubelet address, as the cluster adapter
// reads it from the Node (InternalIP, daemonEndpoints).
type withKubelet struct{ *cluster }

func (c withKubelet) Node(name string) (runner.NodeInfo, bool) {
	info, ok := c.cluster.Node(name)
	info.KubeletAddr = "10.0.0.1:" + name
	return info, ok
}

type fakeProber struct {
	mu    sync.Mutex
	calls map[string][]time.Time
	now   func() time.Time
	port  fence.KubeletPort
}

func (p *fakeProber) ProbeKubelet(_ context.Context, addr string) fence.KubeletPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[addr] = append(p.calls[addr], p.now())
	return p.port
}

// The kubelet port is probed for suspect nodes only, at most once per
// probe interval, and its answer names the class in the ForceOff's Event.
func TestKubeletPortProbedForSuspectNodesOnly(t *testing.T) {
	w, c := world(t)
	p := &fakeProber{calls: map[string][]time.Time{}, now: w.Clock.Now, port: fence.KubeletPortTimeout}
	r := newRunner(t, w, withKubelet{c}, func(o *runner.Options) { o.KubeletProbe = p })
	w.Node("n2").KubeletEnabled = false // n2: a dead kubelet on a running machine, fenced at fenceAfter
	syncFor(w, r, 2*time.Minute)
	if got := p.calls["10.0.0.1:n3"]; len(got) != 0 {
		t.Errorf("healthy n3 probed %d times", len(got))
	}
	if got := p.calls["10.0.0.1:n1"]; len(got) == 0 {
		t.Errorf("suspect n1 never probed")
	}
	n2 := p.calls["10.0.0.1:n2"]
	if len(n2) == 0 {
		t.Fatalf("suspect n2 never probed")
	}
	for i := 1; i < len(n2); i++ {
		if d := n2[i].Sub(n2[i-1]); d < runner.DefaultKubeletProbeInterval {
			t.Errorf("n2 probed again after %s (interval %s)", d, runner.DefaultKubeletProbeInterval)
		}
	}
	found := false
	for _, x := range w.Records {
		if x.Node == "n1" && x.Kind == "event" && x.Detail == "FencePowerOff" {
			found = true
			if !strings.Contains(x.Msg, fence.KubeletPortTimeout.Class()) {
				t.Errorf("FencePowerOff %q does not name the kubelet port's class", x.Msg)
			}
		}
	}
	if !found {
		t.Errorf("no FencePowerOff for n1: %v", events(w, "n1"))
	}
}

// The agent's prober: a listening port answers; a closed one resets, and
// so does one that accepts and resets at once.
func TestTCPKubeletProberAnswersAndReset(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("ok\n"))
			_ = c.Close()
		}
	}()
	addr := ln.Addr().String()
	p := runner.TCPKubeletProber{Timeout: 10 * time.Second, ResetWait: 5 * time.Second}
	if got := p.ProbeKubelet(context.Background(), addr); got != fence.KubeletPortAnswers {
		t.Errorf("listening port: %s, want answers", got)
	}
	_ = ln.Close()
	if got := p.ProbeKubelet(context.Background(), addr); got != fence.KubeletPortReset {
		t.Errorf("closed port: %s, want reset", got)
	}
	// Accepted, then reset at once (a proxy; the testbed's stand-in).
	rst, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rst.Close()
	go func() {
		for {
			c, err := rst.Accept()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
		}
	}()
	if got := p.ProbeKubelet(context.Background(), rst.Addr().String()); got != fence.KubeletPortReset {
		t.Errorf("accepted and reset: %s, want reset", got)
	}
}
