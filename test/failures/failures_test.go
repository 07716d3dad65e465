//go:build failures

// Package failures is the failure matrix (`make failures`, never `make
// test`): every way a node dies, one scenario per class, on the real
// control plane with the agent as deployed (its own process, leader
// election, deploy/base's RBAC through its ServiceAccount, the default
// policy), a StatefulSet pod with a volume on the failing node. Each class
// prints exactly one line:
//
//	failure: CLASS: tainted +T s, replacement Running +R s [(median of N runs, worst +W s)]
//	failure: CLASS: not fenced, as intended (REASON): Event REASON "message"
//
// or, where today's agent does something else, a line that says so.
// Times are from the failure. Classes whose figure depends on where the
// failure falls in the kubelet's 10 s renewal cycle run at several phases
// (-runs); the fenceAfter-bound ones run once (-slow-runs).
//
// How each failure is modelled with what the testbed has:
//
//	power loss, BMC up       the mock's power-loss event: the BMC reads Off, the kubelet dies
//	power loss, BMC dead (no PDU)
//	                         both power supplies fail (the mock's FailSupplies): host and BMC
//	                         die at once (requests hang); the node has no fencing level
//	power loss, BMC dead (PDU level)
//	                         the same on a node whose two supplies are fed by two outlets of an
//	                         SNMP PDU (pdu/snmpsim: Debian's snmpd, APC PowerNet-MIB, SNMPv3):
//	                         the outlets stay on and meter 0 W; its config has that PDU as level
//	                         2, each outlet tied to the machine by the outlet identity test
//	                         (pdu.VerifyOutlet, recorded by inventory.RecordOutletProof)
//	hung kernel (evidence)   the OS hangs (BMC reads On, the kubelet stops) with the node-side
//	                         petter keeping the BMC watchdog (30 s, no action): the mock's BMC
//	                         logs its SMS/OS expiry, which the agent reads (docs/safety.md,
//	                         "Hung-node evidence"): the figure measures that model
//	hung kernel (no evidence) the OS hangs, no watchdog
//	kubelet dead             the kubelet stops, the OS runs (its kubelet port resets)
//	node cut off             the kubelet cannot reach the API server and nothing answers on its
//	                         port (timeout); the machine runs; its BMC answers
//	long restart             the OS reboots with a 40 s off-dwell
//	planned reboot           the kubelet's graceful shutdown (its exact writes), then a cold boot
//	                         with a 6-minute POST (the petter armed: the kernel re-arms it for 120 s)
//	control-plane node       a control-plane node's OS hangs (its pod tolerates the role's taint)
//	zone partition           all three nodes of zone-a are cut off
//
// The two "not fenced" observations (BMC dead without a PDU, zone partition) are watched
// in the background while the fast power-loss and restart runs go on other
// nodes: the power-loss path has no fraction or cooldown to share.
package failures

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/bmc/redfish"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/inventory"
	"github.com/bmcfence/bmcfence/internal/inventory/metal3"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
	"github.com/bmcfence/bmcfence/pdu"
	"github.com/bmcfence/bmcfence/pdu/snmppdu"
	"github.com/bmcfence/bmcfence/pdu/snmpsim"
	"github.com/bmcfence/bmcfence/test/controlplane"
	"github.com/bmcfence/bmcfence/test/testbed"
)

var (
	flagClasses  = flag.String("classes", "all", "classes to run, comma-separated keys: "+strings.Join(classKeys(), ","))
	flagRuns     = flag.Int("runs", 4, "runs (phases of the 10 s renewal cycle) of the fast classes: power loss, BMC up; long restart")
	flagSlowRuns = flag.Int("slow-runs", 1, "runs of the classes bound by fenceAfter")
	flagWatch    = flag.Duration("watch", 6*time.Minute, "how long a class expected not to be fenced is watched (past fenceAfter)")
	flagGrace    = flag.Duration("grace", controlplane.DefaultNodeMonitorGracePeriod, "kube-controller-manager --node-monitor-grace-period (Kubernetes' own default: 50s)")
	flagAgent    = flag.String("agent", "", "a fence-agent binary to run instead of building cmd/fence-agent")
	flagTrace    = flag.Bool("trace", false, "print each fast run's timeline (failures: trace lines): the renewal before the failure, the agent's steps from its log, the pod's deletion, the replacement scheduled and Running")
)

// The classes, in the order their lines are printed.
type class struct {
	key, name string
	lane      lane
}

type lane int

const (
	fast       lane = iota // phase-dependent and quick: several runs
	background             // watched for a while, expected not fenced
	slow                   // bound by fenceAfter: one run
)

var classes = []class{
	{"powerloss", "power loss, BMC up", fast},
	{"bmcdead", "power loss, BMC dead (no PDU)", background},
	{"bmcdead-pdu", "power loss, BMC dead (PDU level)", fast},
	{"hung-evidence", "hung kernel (evidence)", slow},
	{"hung", "hung kernel (no evidence)", slow},
	{"kubelet", "kubelet dead", slow},
	{"cutoff", "node cut off", slow},
	{"restart", "long restart", fast},
	{"planned", "planned reboot", slow},
	{"controlplane", "control-plane node", slow},
	{"zone", "zone partition", background},
}

func classKeys() []string {
	var k []string
	for _, c := range classes {
		k = append(k, c.key)
	}
	return k
}

// The cluster: three zones, three control-plane nodes (one per zone is
// what kubeadm HA setups do; here zone-a holds none so the partitioned
// zone is workers only).
var (
	zoneA = []string{"n1", "n2", "n3"}
	zoneB = []string{"n4", "n5", "n6", "cp1"}
	zoneC = []string{"n7", "n8", "n9", "n10", "cp2", "cp3"}
)

const (
	restartNode = "n7" // a 40 s restart off-dwell
	plannedNode = "n8" // a 6-minute POST
	bmcDeadNode = "n9"
	pduNode     = "n10" // its two supplies on outlets 1 and 2 of the SNMP PDU
	cpNode      = "cp1"
	// Watchdog of the evidence rows: what cmd/bmc-watchdog arms by
	// default (30 s timeout, pet every 10 s), with no action: the BMC only
	// logs, the fence decides.
	petterTimeout = 30 * time.Second
	// The kubelet's shutdownGracePeriod in the planned reboot.
	shutdownGrace = 20 * time.Second
)

var powerLossNodes = []string{"n4", "n5", "n6"}

// defaults of the agent's policy the lines refer to.
var policy = fence.DefaultPolicy()

type harness struct {
	t     *testing.T
	tb    *testbed.Testbed
	c     kubernetes.Interface
	agent *testbed.Agent
	seq   int
	mu    sync.Mutex
	lines map[string]string
	reach map[string]testbed.Reach // per scenario namespace
}

func TestFailures(t *testing.T) {
	if err := controlplane.BinariesAvailable(""); err != nil {
		t.Fatal(err) // only run on purpose (make failures): missing binaries are an error
	}
	want := map[string]bool{}
	for _, k := range strings.Split(*flagClasses, ",") {
		if k == "all" {
			for _, c := range classes {
				want[c.key] = true
			}
			continue
		}
		if !slices.Contains(classKeys(), k) {
			t.Fatalf("-classes: unknown class %q; want %s or all", k, strings.Join(classKeys(), ","))
		}
		want[k] = true
	}
	if *flagRuns < 1 || *flagSlowRuns < 1 {
		t.Fatal("-runs and -slow-runs must be at least 1")
	}
	start := time.Now()
	load0 := loadAverage()
	ctx := context.Background()
	cp := controlplane.StartT(t, controlplane.Options{NodeMonitorGracePeriod: *flagGrace, Logf: quiet(t)})
	nodes := append(append(append([]string{}, zoneA...), zoneB...), zoneC...)
	labels := map[string]map[string]string{}
	taints := map[string][]corev1.Taint{}
	for _, zone := range []struct {
		name  string
		nodes []string
	}{{"zone-a", zoneA}, {"zone-b", zoneB}, {"zone-c", zoneC}} {
		for _, n := range zone.nodes {
			labels[n] = map[string]string{"topology.kubernetes.io/zone": zone.name}
			if strings.HasPrefix(n, "cp") {
				labels[n]["node-role.kubernetes.io/control-plane"] = ""
				taints[n] = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
			}
		}
	}
	timing := machine.Timing{PowerOn: 10 * time.Second, PowerOff: time.Second, GracefulShutdown: 3 * time.Second, RestartOff: 2 * time.Second}
	tb, err := testbed.Start(ctx, cp, testbed.Options{
		Nodes: nodes, NodeLabels: labels, NodeTaints: taints, Timing: &timing,
		NodeTiming: map[string]machine.Timing{
			restartNode: {PowerOn: 10 * time.Second, PowerOff: time.Second, GracefulShutdown: 3 * time.Second, RestartOff: 40 * time.Second},
			// A server with much memory: a 6-minute POST; the cold boot's
			// power cycle holds it off 5 s.
			plannedNode: {PowerOn: 6 * time.Minute, PowerOff: time.Second, GracefulShutdown: 3 * time.Second, RestartOff: 5 * time.Second},
		},
		AgentAsServiceAccount: true, Logf: quiet(t),
		PDUs: []redfishmock.PDUConfig{{ID: "pdu-a", Outlets: []redfishmock.OutletConfig{{Feeds: pduNode + "/1"}, {Feeds: pduNode + "/2"}}}},
	}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tb.Stop)
	h := &harness{t: t, tb: tb, c: cp.Client(), lines: map[string]string{}, reach: map[string]testbed.Reach{}}
	h.checkSignals(ctx)
	h.setUpPDULevel(ctx)

	bin := *flagAgent
	if bin == "" {
		if bin, err = testbed.BuildAgent(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := tb.AgentConfig("")
	if err != nil {
		t.Fatal(err)
	}
	a, err := tb.StartAgent(ctx, bin, "failures-agent", cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.agent = a
	t.Cleanup(func() {
		a.Stop()
		if t.Failed() {
			t.Logf("agent log (tail):\n%s", tail(a.Logs(), 60))
		}
	})
	h.waitFor(time.Minute, "the agent leads", func() (bool, error) { return a.Leading(), nil })
	h.waitFor(3*time.Minute, "every node probed fenceable", func() (bool, error) {
		k, err := a.Metric("bmcfence_node_fenceable")
		return int(k) == len(nodes), err
	})
	fmt.Printf("failures: setup: %d nodes (zones a, b, c; %d control-plane), default policy (suspectAfter %s, fenceAfter %s), node-monitor-grace-period %s, ready in %.0fs, load average %s\n",
		len(nodes), 3, policy.SuspectAfter, policy.FenceAfter, *flagGrace, time.Since(start).Seconds(), load0)

	// Background lane: started first, watched while the fast lane runs.
	var bg sync.WaitGroup
	for _, c := range classes {
		if c.lane == background && want[c.key] {
			ready := make(chan struct{})
			bg.Add(1)
			go func() {
				defer bg.Done()
				h.runBackground(ctx, c, ready)
			}()
			<-ready // its StatefulSet placed before the next class cordons nodes
		}
	}
	for _, c := range classes {
		if c.lane == fast && want[c.key] {
			h.runFast(ctx, c)
		}
	}
	bg.Wait()
	for _, c := range classes {
		if c.lane == slow && want[c.key] {
			h.runSlow(ctx, c)
		}
	}
	for _, c := range classes {
		if l, ok := h.lines[c.key]; ok {
			fmt.Println(l)
		}
	}
	fmt.Printf("failures: %d classes in %s, load average %s at the end\n", len(h.lines), time.Since(start).Round(time.Second), loadAverage())
}

// ---- lanes ------------------------------------------------------------------

func (h *harness) runFast(ctx context.Context, c class) {
	var rs []outcome
	n := *flagRuns
	var recovering sync.WaitGroup
	for i := range n {
		phase := time.Duration(i) * 10 * time.Second / time.Duration(n)
		node := restartNode
		switch c.key {
		case "powerloss":
			node = powerLossNodes[i%len(powerLossNodes)]
		case "bmcdead-pdu":
			node = pduNode
		}
		level0, _ := h.agent.Metric("bmcfence_fencing_level_fences_total", "level", "2")
		recovering.Wait() // the node of the run before may be this one
		o := h.scenario(ctx, c, []string{node}, phase)
		if level1, err := h.agent.Metric("bmcfence_fencing_level_fences_total", "level", "2"); err == nil && level1 > level0 {
			o.byLevel2 = true
		}
		h.report(c, "run", o)
		if *flagTrace {
			h.trace(c, i+1, node, o)
		}
		rs = append(rs, o)
		recovering.Add(1)
		go func() {
			defer recovering.Done()
			h.recover(ctx, []string{node})
		}()
		if c.key == "restart" {
			recovering.Wait()
		}
	}
	recovering.Wait()
	h.setLine(c, rs)
}

func (h *harness) runBackground(ctx context.Context, c class, ready chan struct{}) {
	nodes := []string{bmcDeadNode}
	if c.key == "zone" {
		nodes = zoneA
	}
	o := h.scenarioWith(ctx, c, nodes, 0, ready)
	h.report(c, "run", o)
	h.recover(ctx, nodes)
	h.setLine(c, []outcome{o})
}

func (h *harness) runSlow(ctx context.Context, c class) {
	node := map[string]string{"hung-evidence": "n4", "hung": "n5", "kubelet": "n6", "cutoff": "n9",
		"planned": plannedNode, "controlplane": cpNode}[c.key]
	var rs []outcome
	for i := range *flagSlowRuns {
		phase := time.Duration(i) * 10 * time.Second / time.Duration(*flagSlowRuns)
		o := h.scenario(ctx, c, []string{node}, phase)
		h.report(c, "run", o)
		rs = append(rs, o)
		h.recover(ctx, []string{node})
	}
	h.setLine(c, rs)
}

// ---- one scenario -----------------------------------------------------------

// outcome is what happened in one run, times from the failure.
type outcome struct {
	tainted, running time.Duration // 0: never
	forceOff         time.Duration // the first ForceOff after the failure; 0: none
	movedEarly       bool          // the replacement ran before any taint (a graceful shutdown)
	evidence         time.Duration // the BMC logged a watchdog expiry or critical stop
	powerOffEvent    *corev1.Event // the first FencePowerOff Event since the failure
	evidenceWhat     string
	event            *corev1.Event // the agent's telling Event, for lines that need one
	reach            testbed.Reach // the node's kubelet port, probed 3 s after the failure
	watched          time.Duration
	byLevel2         bool // bmcfence_fencing_level_fences_total{level="2"} went up
	err              error
	// For -trace: the last renewal of the node's Lease before the failure
	// (its renewTime), when the old pod was seen deleting or gone, and when
	// its replacement was seen bound to a node.
	renewedAt    time.Time
	oldDeleted   time.Duration
	newScheduled time.Duration
	t0           time.Time
	// renewals: every node's Lease renewals seen during the run (their
	// renewTime): what proves the agent's view of the API fresh.
	renewals map[time.Time]string
}

func (h *harness) scenario(ctx context.Context, c class, nodes []string, phase time.Duration) outcome {
	return h.scenarioWith(ctx, c, nodes, phase, nil)
}

// scenarioWith places a StatefulSet pod with a volume on nodes[0], waits for
// a renewal of its Lease plus phase, fails the nodes the class's way, and
// watches until the replacement runs elsewhere (or the watch ends).
func (h *harness) scenarioWith(ctx context.Context, c class, nodes []string, phase time.Duration, ready chan struct{}) outcome {
	h.mu.Lock()
	h.seq++
	ns := fmt.Sprintf("f%02d-%s", h.seq, c.key)
	h.mu.Unlock()
	node := nodes[0]
	var o outcome
	if err := h.placeStatefulSet(ctx, ns, node); err != nil {
		o.err = err
		if ready != nil {
			close(ready)
		}
		return o
	}
	if ready != nil {
		close(ready)
	}
	defer func() {
		_ = h.c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	}()
	switch c.key {
	case "hung-evidence", "planned":
		if err := h.tb.StartPetter(node, petterTimeout, machine.WatchdogNoAction); err != nil {
			o.err = err
			return o
		}
	}
	o.renewedAt = h.afterRenewal(ctx, node, phase)
	offs0 := h.tb.ForceOffs(node)
	log0, _ := h.tb.MachineLog(node)
	t0 := time.Now()
	o.t0 = t0
	if err := h.inject(ctx, c, nodes); err != nil {
		o.err = err
		return o
	}
	go func() {
		// What a prober of the kubelet port meets once the failure has set
		// in (the bridge stops a dead machine's kubelet within 200 ms).
		time.Sleep(3 * time.Second)
		r := h.tb.ProbeKubelet(ctx, node, 2*time.Second)
		h.mu.Lock()
		h.reach[ns] = r
		h.mu.Unlock()
	}()
	oldUID := ""
	// Which pod is the old one: its UID at the failure.
	if p, err := h.c.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{}); err == nil && p.Spec.NodeName == node {
		oldUID = string(p.UID)
	}
	limit := policy.FenceAfter + 3*time.Minute
	switch c.lane {
	case fast:
		limit = 2 * time.Minute
	case background:
		limit = *flagWatch
	}
	if c.key == "planned" {
		limit = 8 * time.Minute
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		el := time.Since(t0)
		if o.forceOff == 0 && h.tb.ForceOffs(node) > offs0 {
			o.forceOff = el
		}
		n, err := h.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil && o.tainted == 0 && cluster.HasOutOfServiceTaint(n) {
			o.tainted = el
		}
		if *flagTrace && o.tainted == 0 {
			if ls, err := h.c.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{}); err == nil {
				if o.renewals == nil {
					o.renewals = map[time.Time]string{}
				}
				for _, l := range ls.Items {
					if l.Spec.RenewTime != nil && l.Spec.RenewTime.After(t0) {
						o.renewals[l.Spec.RenewTime.Time] = l.Name
					}
				}
			}
		}
		if *flagTrace && (o.oldDeleted == 0 || o.newScheduled == 0) {
			p, err := h.c.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
			if o.oldDeleted == 0 && (err != nil || string(p.UID) != oldUID || p.DeletionTimestamp != nil) {
				o.oldDeleted = el
			}
			if o.newScheduled == 0 && err == nil && string(p.UID) != oldUID && p.Spec.NodeName != "" {
				o.newScheduled = el
			}
		}
		if o.running == 0 && h.replacementRunning(ctx, ns, node, oldUID) {
			o.running = el
			o.movedEarly = o.tainted == 0
		}
		done := o.running != 0 && o.tainted != 0
		if c.lane == background {
			done = false // watched to the end
		}
		if c.key == "planned" {
			// Watched until the agent acts or the machine is back.
			done = o.running != 0 && (o.tainted != 0 || h.nodeBack(ctx, node, t0))
		}
		if done || el >= limit {
			o.watched = el
			break
		}
		<-tick.C
	}
	if log1, err := h.tb.MachineLog(node); err == nil {
		for _, e := range log1[len(log0):] {
			if (e.Kind == machine.LogWatchdogExpired || e.Kind == machine.LogOSCriticalStop) && o.evidence == 0 {
				o.evidence = e.At.Sub(t0)
				o.evidenceWhat = fmt.Sprintf("%s (timer use %s)", e.Kind, e.Use)
			}
		}
	}
	o.event = h.tellingEvent(ctx, c, nodes, t0)
	o.powerOffEvent = h.eventNamed(ctx, nodes, "FencePowerOff", t0)
	h.mu.Lock()
	o.reach = h.reach[ns]
	h.mu.Unlock()
	return o
}

// inject fails the nodes the class's way.
func (h *harness) inject(ctx context.Context, c class, nodes []string) error {
	tb := h.tb
	node := nodes[0]
	switch c.key {
	case "powerloss":
		return tb.PowerLoss(node)
	case "bmcdead", "bmcdead-pdu":
		return tb.Mock.Mock.FailSupplies(tb.Node(node).System, true)
	case "hung-evidence", "hung", "controlplane":
		return tb.OSHang(node)
	case "kubelet":
		return tb.KubeletStop(node)
	case "cutoff":
		return tb.CutOff(node)
	case "restart":
		return tb.Reboot(node)
	case "planned":
		if err := tb.GracefulShutdown(ctx, node, shutdownGrace); err != nil {
			return err
		}
		if err := tb.Reboot(node); err != nil {
			return err
		}
		tb.KubeletStart(node) // back when the machine runs again
		return nil
	case "zone":
		for _, n := range nodes {
			if err := tb.CutOff(n); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("no failure for class %q", c.key)
}

// placeStatefulSet runs a one-replica StatefulSet with a volume whose pod
// lands on node: every other node is cordoned while it is scheduled.
func (h *harness) placeStatefulSet(ctx context.Context, ns, node string) error {
	if err := h.tb.CP.CreateNamespace(ctx, ns); err != nil {
		return err
	}
	h.mu.Lock() // one placement at a time: cordons are shared
	defer h.mu.Unlock()
	var others []string
	for _, n := range h.tb.Nodes {
		if n.Name != node {
			others = append(others, n.Name)
		}
	}
	if err := h.setUnschedulable(ctx, others, true); err != nil {
		return err
	}
	defer func() { _ = h.setUnschedulable(context.Background(), others, false) }()
	sts := controlplane.StatefulSet(ns, "db", 1)
	sts.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	if _, err := h.c.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return h.tb.CP.WaitFor(wctx, ns+"/db-0 Running on "+node+" with its volume", func() (bool, error) {
		p, err := h.c.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			return false, nil
		}
		if p.Spec.NodeName != node {
			return false, fmt.Errorf("db-0 landed on %s, not %s", p.Spec.NodeName, node)
		}
		return h.tb.CP.AttachedNode(ctx, ns, "data-db-0") == node, nil
	})
}

func (h *harness) setUnschedulable(ctx context.Context, nodes []string, v bool) error {
	for _, name := range nodes {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := h.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || n.Spec.Unschedulable == v {
				return err
			}
			n.Spec.Unschedulable = v
			_, err = h.c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// afterRenewal returns phase after an observed renewal of the node's Lease,
// and that renewal's renewTime (zero when none was seen).
func (h *harness) afterRenewal(ctx context.Context, node string, phase time.Duration) time.Time {
	l, err := h.tb.CP.Lease(ctx, node)
	if err != nil || l.Spec.RenewTime == nil {
		return time.Time{}
	}
	last := l.Spec.RenewTime.Time
	var renewed time.Time
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		l, err := h.tb.CP.Lease(ctx, node)
		if err == nil && l.Spec.RenewTime != nil && !l.Spec.RenewTime.Time.Equal(last) {
			renewed = l.Spec.RenewTime.Time
			break
		}
	}
	time.Sleep(phase)
	return renewed
}

// replacementRunning: db-0, a new pod, Running on another node with the
// volume attached there.
func (h *harness) replacementRunning(ctx context.Context, ns, node, oldUID string) bool {
	p, err := h.c.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
	if err != nil || string(p.UID) == oldUID || p.Spec.NodeName == node || p.Status.Phase != corev1.PodRunning {
		return false
	}
	on := h.tb.CP.AttachedNode(ctx, ns, "data-db-0")
	return on != "" && on == p.Spec.NodeName
}

// nodeBack: the node is Ready again with its kubelet running, after t0.
func (h *harness) nodeBack(ctx context.Context, node string, t0 time.Time) bool {
	n, err := h.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	return err == nil && cluster.NodeReady(n) && h.tb.CP.NodeAlive(node) && time.Since(t0) > time.Minute
}

// tellingEvent is the agent's Event on the class's nodes that says best why
// it did what it did: for a partition, the storm; for a BMC that does not
// answer, that the Off cannot be verified; else what it did.
func (h *harness) tellingEvent(ctx context.Context, c class, nodes []string, since time.Time) *corev1.Event {
	prefer := []string{"FenceTainted", "FencePowerOff", "FenceRefused", "FenceWaiting"}
	switch c.key {
	case "zone":
		prefer = []string{"FenceStorm", "FenceRefused", "FenceTainted", "FencePowerOff", "FenceWaiting"}
	case "bmcdead":
		prefer = []string{"FenceCannotVerify", "FenceUnfenceable", "FenceTainted", "FencePowerOff", "FenceWaiting"}
	}
	var best *corev1.Event
	bestRank := len(prefer)
	list, err := h.c.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	for i := range list.Items {
		ev := &list.Items[i]
		if ev.InvolvedObject.Kind != "Node" || !slices.Contains(nodes, ev.InvolvedObject.Name) {
			continue
		}
		last := ev.LastTimestamp.Time
		if last.IsZero() {
			last = ev.EventTime.Time
		}
		if last.Before(since.Add(-time.Second)) {
			continue
		}
		if rank := slices.Index(prefer, ev.Reason); rank >= 0 && rank < bestRank {
			best, bestRank = ev, rank
		}
	}
	return best
}

// eventNamed is the first Event with reason on one of the nodes since
// since.
func (h *harness) eventNamed(ctx context.Context, nodes []string, reason string, since time.Time) *corev1.Event {
	list, err := h.c.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var first *corev1.Event
	for i := range list.Items {
		ev := &list.Items[i]
		if ev.Reason != reason || ev.InvolvedObject.Kind != "Node" || !slices.Contains(nodes, ev.InvolvedObject.Name) {
			continue
		}
		at := ev.FirstTimestamp.Time
		if at.IsZero() {
			at = ev.EventTime.Time
		}
		if at.Before(since.Add(-time.Second)) || (first != nil && !at.Before(first.FirstTimestamp.Time)) {
			continue
		}
		first = ev
	}
	return first
}

// recover undoes a failure and waits until the agent has the nodes
// Healthy again (untainted by itself, after the machine came back).
func (h *harness) recover(ctx context.Context, nodes []string) {
	tb := h.tb
	for _, n := range nodes {
		_ = tb.SetFaults(n, redfishmock.Faults{})
		// Repaired supplies, and the outlets a PDU fence left off back on.
		_ = tb.Mock.Mock.FailSupplies(tb.Node(n).System, false)
		for _, p := range tb.Mock.Mock.PDUs() {
			for _, o := range p.Outlets {
				if o.Feeds != "" && strings.HasPrefix(o.Feeds, tb.Node(n).System+"/") && o.PowerState != redfishmock.PowerOn {
					_ = tb.Mock.Mock.SetOutlet(p.ID, o.ID, redfishmock.PowerOn)
				}
			}
		}
		_ = tb.StopPetter(n, true)
		tb.Reconnect(n)
		st, err := tb.Mock.Mock.Status(tb.Node(n).System)
		if err != nil {
			continue
		}
		switch {
		case st.OSHung:
			_ = tb.OSRecover(n)
		case st.PowerState != redfishmock.PowerOn:
			// Straight On: a POST's worth of waiting tells nothing here.
			_ = tb.Mock.Mock.SetPower(tb.Node(n).System, redfishmock.PowerOn)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err := tb.CP.WaitFor(wctx, strings.Join(nodes, ",")+" back, untainted by the agent, Healthy", func() (bool, error) {
		for _, name := range nodes {
			n, err := h.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !cluster.NodeReady(n) || !tb.CP.NodeAlive(name) || cluster.HasOutOfServiceTaint(n) {
				return false, nil
			}
			if raw := n.Annotations[cluster.AnnotationState]; raw != "" {
				if s, err := fence.Decode(raw); err != nil || s.Phase != fence.Healthy {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		h.t.Logf("recovering %v: %v; resetting the testbed", nodes, err)
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Minute)
		defer rcancel()
		if err := tb.Reset(rctx); err != nil {
			h.t.Fatalf("resetting the testbed: %v", err)
		}
	}
}

// ---- lines ------------------------------------------------------------------

func (h *harness) report(c class, what string, o outcome) {
	// Progress on stderr ("progress:"), filtered out by make failures.
	fmt.Fprintf(os.Stderr, "progress: %s %s: tainted %v, running %v (early %v), forceOff %v, evidence %v %s, kubelet port %s, watched %v, err %v, event %s\n",
		c.name, what, o.tainted, o.running, o.movedEarly, o.forceOff, o.evidence, o.evidenceWhat, o.reach, o.watched, o.err, eventText(o.event))
}

func (h *harness) setLine(c class, rs []outcome) {
	line := lineFor(c, rs)
	h.mu.Lock()
	h.lines[c.key] = line
	h.mu.Unlock()
}

func secs(d time.Duration) string { return fmt.Sprintf("+%.1f s", d.Seconds()) }

func eventText(ev *corev1.Event) string {
	if ev == nil {
		return "none"
	}
	return fmt.Sprintf("%s %q", ev.Reason, ev.Message)
}

// lineFor is the class's one line.
func lineFor(c class, rs []outcome) string {
	prefix := "failure: " + c.name + ": "
	for _, o := range rs {
		if o.err != nil {
			return prefix + "did not run: " + o.err.Error()
		}
	}
	o := rs[0]
	switch c.key {
	case "bmcdead", "zone":
		if o.tainted == 0 && o.forceOff == 0 {
			intended := map[string][]string{"bmcdead": {"FenceCannotVerify", "FenceUnfenceable"}, "zone": {"FenceStorm"}}[c.key]
			if o.event == nil || !slices.Contains(intended, o.event.Reason) {
				return fmt.Sprintf("%snot fenced within %.0f s: Event %s", prefix, o.watched.Seconds(), eventText(o.event))
			}
			reason := "no BMC answers and the node has no fencing level, so nothing proves the machine off; its pod stays where it was"
			if c.key == "zone" {
				reason = "all of zone-a went silent at once with its BMCs reading On: a partition, not failures; its pod stays where it was"
			}
			return fmt.Sprintf("%snot fenced, as intended (%s; watched %.0f s): Event %s", prefix, reason, o.watched.Seconds(), eventText(o.event))
		}
		return fmt.Sprintf("%s%s (not expected: watched %.0f s; Event %s)", prefix, fencedPart(rs), o.watched.Seconds(), eventText(o.event))
	case "planned":
		switch {
		case o.tainted != 0 || o.forceOff != 0:
			s := prefix
			if o.forceOff != 0 {
				s += fmt.Sprintf("powered off by today's agent at %s, during its 6-minute POST, and ", secs(o.forceOff))
			}
			if o.tainted != 0 {
				s += fmt.Sprintf("tainted %s", secs(o.tainted))
			} else {
				s += "not tainted"
			}
			s += " (the planned reboot is not recognised)"
			if o.running != 0 {
				how := ""
				if o.movedEarly {
					how = ", moved by the kubelet's graceful shutdown before any fence"
				}
				s += fmt.Sprintf("; replacement Running %s%s", secs(o.running), how)
			}
			if o.evidence != 0 {
				s += fmt.Sprintf("; the BMC logged a %s at %s, during the POST", o.evidenceWhat, secs(o.evidence))
			}
			return s
		default:
			return fmt.Sprintf("%snot fenced (watched %.0f s): replacement Running %s, moved by the kubelet's graceful shutdown", prefix, o.watched.Seconds(), secs(o.running))
		}
	}
	s := prefix + fencedPart(rs)
	switch {
	case c.key == "hung-evidence" && o.evidence != 0 && o.forceOff != 0 && o.forceOff < policy.FenceAfter:
		s += fmt.Sprintf(" (the BMC logged a %s at %s; the agent's ForceOff at %s rests on it)", o.evidenceWhat, secs(o.evidence), secs(o.forceOff))
	case c.key == "hung-evidence" && o.evidence != 0:
		s += fmt.Sprintf(" (the BMC logged a %s at %s; the agent did not count it, and waited fenceAfter: Event %s)", o.evidenceWhat, secs(o.evidence), eventText(o.event))
	case c.key == "hung" && o.tainted != 0 && o.powerOffEvent != nil:
		s += fmt.Sprintf(" (its kubelet port: %s; the ForceOff's Event says what evidence was missing: %q)", o.reach, o.powerOffEvent.Message)
	case c.key == "bmcdead-pdu" && o.tainted != 0:
		by := 0
		for _, r := range rs {
			if r.byLevel2 {
				by++
			}
		}
		s += fmt.Sprintf(" (host and BMC dead, its two outlets on and metering 0 W; fenced through the SNMP PDU, level 2, in %d of %d runs)", by, len(rs))
	case c.key == "restart" && o.tainted != 0:
		s += " (our ForceOff lands in the 40 s off-dwell; the machine stays off)"
	case c.key == "controlplane" && o.tainted != 0:
		s += fmt.Sprintf(" (its OS hung; the control-plane rules admitted it: no other control-plane node in a fence, and the other two machines, which may run, are etcd's quorum of 2 of 3; %s)", ownNodeSaid(o))
	case (c.key == "kubelet" || c.key == "cutoff" || c.key == "hung") && o.tainted != 0:
		s += fmt.Sprintf(" (its kubelet port: %s; the agent's ForceOff Event: %s)", o.reach, kubeletClassSaid(o.powerOffEvent))
	}
	return s
}

// kubeletClassSaid is the kubelet port's class as the agent's FencePowerOff
// Event named it (the runner probes suspect nodes' kubelet ports; the
// answer names the class and decides nothing).
func kubeletClassSaid(ev *corev1.Event) string {
	if ev == nil {
		return "none seen"
	}
	if i := strings.Index(ev.Message, "; the kubelet port "); i >= 0 {
		return strconv.Quote(ev.Message[i+2:])
	}
	return "names no kubelet port class (not probed)"
}

// ownNodeSaid says whether the leader's own-node rule applied: the agent
// here runs beside the cluster, on no node, so it never does.
func ownNodeSaid(o outcome) string {
	if o.event != nil && o.event.Reason == "FenceRefusedOwnNode" {
		return "the leader ran on it and refused: " + eventText(o.event)
	}
	return "the leader runs on no node of this cluster, so the own-node rule did not apply"
}

// fencedPart is "tainted +T s, replacement Running +R s" with the median of
// several runs and the worst.
func fencedPart(rs []outcome) string {
	var ts, rr []time.Duration
	for _, o := range rs {
		if o.tainted == 0 || o.running == 0 {
			what := "not tainted"
			if o.tainted != 0 {
				what = fmt.Sprintf("tainted %s, but no replacement Running within %.0f s", secs(o.tainted), o.watched.Seconds())
			}
			return fmt.Sprintf("%s (watched %.0f s)", what, o.watched.Seconds())
		}
		ts, rr = append(ts, o.tainted), append(rr, o.running)
	}
	if len(rs) == 1 {
		return fmt.Sprintf("tainted %s, replacement Running %s", secs(ts[0]), secs(rr[0]))
	}
	return fmt.Sprintf("tainted %s, replacement Running %s (median of %d runs, worst %s)", secs(median(ts)), secs(median(rr)), len(rs), secs(slices.Max(rr)))
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ---- the planned-reboot signals ----------------------------------------------

// checkSignals applies each planned-reboot signal helper to a spare node
// and checks what it wrote, then undoes it: the helpers are what phase B's
// recognisers will be tested against.
func (h *harness) checkSignals(ctx context.Context) {
	tb := h.tb
	const node = "cp3"
	if err := tb.KuredLock(ctx, node); err != nil {
		h.t.Fatalf("kured lock: %v", err)
	}
	ds, err := h.c.AppsV1().DaemonSets(testbed.KuredNamespace).Get(ctx, testbed.KuredDaemonSet, metav1.GetOptions{})
	if err != nil || !strings.Contains(ds.Annotations[testbed.KuredLockAnnotation], `"nodeID":"`+node+`"`) {
		h.t.Fatalf("kured lock not on its DaemonSet: %v %v", err, ds.Annotations)
	}
	if err := tb.KuredUnlock(ctx); err != nil {
		h.t.Fatal(err)
	}
	if err := tb.NodeMaintenance(ctx, node, "firmware upgrade"); err != nil {
		h.t.Fatalf("NodeMaintenance: %v", err)
	}
	if err := tb.DeleteMachine(ctx, node); err != nil {
		h.t.Fatalf("Machine deletion: %v", err)
	}
	if err := tb.RemediateMachine(ctx, "cp2"); err != nil {
		h.t.Fatalf("Machine remediation: %v", err)
	}
	n, err := h.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil || !n.Spec.Unschedulable || n.Annotations["cluster.x-k8s.io/machine"] != "machine-"+node ||
		n.Labels["remediation.medik8s.io/exclude-from-remediation"] != "true" {
		h.t.Fatalf("signals on %s: unschedulable %v, annotations %v, labels %v (%v)", node, n.Spec.Unschedulable, n.Annotations, n.Labels, err)
	}
	// Undo it all, as the tools do when they are done: the agent reads
	// these signals (docs/safety.md, "Planned reboots"), and cp2 and cp3
	// must not stay planned reboots through the classes that follow. The
	// NodeMaintenance deleted; the Machines gone (their finalizer removed,
	// as the Machine controller does once the infrastructure is deleted).
	dyn, err := tb.Dynamic()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := dyn.Resource(testbed.NodeMaintenances).Delete(ctx, "nm-"+node, metav1.DeleteOptions{}); err != nil {
		h.t.Fatal(err)
	}
	machines := dyn.Resource(metal3.Machines).Namespace(testbed.CAPINamespace)
	for _, m := range []string{"machine-" + node, "machine-cp2"} {
		if err := machines.Delete(ctx, m, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			h.t.Fatal(err)
		}
		if _, err := machines.Patch(ctx, m, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			h.t.Fatal(err)
		}
	}
	// And what a finished maintenance leaves behind on the node: uncordon,
	// the taints, the exclusion label.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := h.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Unschedulable = false
		delete(n.Labels, "remediation.medik8s.io/exclude-from-remediation")
		var keep []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != "medik8s.io/drain" && t.Key != "node.kubernetes.io/unschedulable" {
				keep = append(keep, t)
			}
		}
		n.Spec.Taints = keep
		_, err = h.c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	// The kubelet's graceful shutdown and the reachability stand-in are
	// checked by the planned-reboot and kubelet-dead rows themselves.
	if r := tb.ProbeKubelet(ctx, node, 2*time.Second); r != testbed.ReachAnswers {
		h.t.Fatalf("kubelet port of a healthy %s: %s", node, r)
	}
}

// ---- the PDU level -------------------------------------------------------------

// setUpPDULevel serves the mock's PDU over SNMP (a real snmpd), records
// each outlet's identity proof the way an operator's test does (on the
// running machine, one outlet off at a time), and gives pduNode the PDU
// as its level 2 in the agent's config.
func (h *harness) setUpPDULevel(ctx context.Context) {
	t, tb := h.t, h.tb
	bank, err := tb.Mock.Mock.PDUBank("pdu-a")
	if err != nil {
		t.Fatal(err)
	}
	a := snmpsim.StartT(t, bank)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pdu-a", Namespace: testbed.Namespace},
		StringData: map[string]string{"username": snmpsim.V3User, "password": snmpsim.V3AuthPass, "privPassword": snmpsim.V3PrivPass}}
	if _, err := h.c.CoreV1().Secrets(testbed.Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	target, err := tb.Target(pduNode)
	if err != nil {
		t.Fatal(err)
	}
	machine, err := redfish.New(target)
	if err != nil {
		t.Fatal(err)
	}
	var cfg strings.Builder
	cfg.WriteString("      levels:\n        - outlets:\n")
	for _, n := range []int{1, 2} {
		outlet, err := snmppdu.New(snmppdu.Target{Host: a.Host, Port: a.Port, Outlet: n, Version: snmppdu.V3, User: snmpsim.V3User,
			AuthProtocol: "SHA", AuthPassword: bmc.Secret(snmpsim.V3AuthPass), PrivProtocol: "AES", PrivPassword: bmc.Secret(snmpsim.V3PrivPass)})
		if err != nil {
			t.Fatal(err)
		}
		proof, err := pdu.VerifyOutlet(ctx, machine, outlet, pdu.VerifyOptions{Poll: 200 * time.Millisecond, Timeout: 20 * time.Second})
		if err != nil {
			t.Fatalf("outlet identity test of outlet %d: %v", n, err)
		}
		if err := inventory.RecordOutletProof(ctx, clientgo.Wrap(h.c), testbed.Namespace, pduNode, proof); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&cfg, "            - address: %q\n              protocol: snmp\n              outlet: \"%d\"\n              credentialsSecret: pdu-a\n"+
			"              snmpVersion: \"3\"\n              authProtocol: SHA\n              privProtocol: AES\n", a.Address(), n)
	}
	tb.NodeConfig = map[string]string{pduNode: cfg.String()}
}

// ---- helpers ----------------------------------------------------------------

func (h *harness) waitFor(d time.Duration, desc string, cond func() (bool, error)) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := controlplane.WaitFor(ctx, nil, desc, cond); err != nil {
		h.t.Fatal(err)
	}
}

func quiet(t *testing.T) func(string, ...any) {
	if os.Getenv("FAILURES_VERBOSE") != "" {
		return t.Logf
	}
	return func(string, ...any) {}
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
