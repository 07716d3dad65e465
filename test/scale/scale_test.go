//go:build scale

// Package scale is the scale harness (`make scale`, never `make test`): the
// real control plane, N nodes run by N/GroupSize kwok processes, one Redfish
// mock serving N systems (one per node, each with its own credentials, so
// each looks like its own BMC), a StatefulSet pod with a volume on each node
// of the power-loss group, and the fence-agent as in production: its own
// process, leader election, the RBAC of deploy/base (the admin kubeconfig
// impersonating its ServiceAccount).
//
// It runs the scenarios in order, each printed as one line starting with
// "scale:", and fails when a target does not hold:
//
//	steady     N healthy nodes for -steady: agent RSS, CPU, API requests/s,
//	           BMC requests per node per minute, the busiest second
//	storm      6/10 of the nodes (6 groups) stop renewing, BMCs On: no
//	           ForceOff, the refusal said
//	partition  one group stops renewing, BMCs On: ForceOffs only as the
//	           storm guard admits them (one in flight, one per cooldown)
//	powerloss  one group loses power (BMCs Off, kwok killed): time to all
//	           tainted and to all replacement pods Running
//	bmccut     one group's BMCs hang and its kubelets die: no ForceOff
//	           lands, the nodes are reported unfenceable
package scale

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/internal/memlimit"
	"github.com/bmcfence/bmcfence/test/controlplane"
	"github.com/bmcfence/bmcfence/test/testbed"
)

var (
	flagNodes       = flag.Int("nodes", 1000, "nodes in the cluster")
	flagGroups      = flag.Int("groups", 10, "kwok processes; the failure scenarios fail whole groups")
	flagPodsPerNode = flag.Int("pods-per-node", 30, "pods per node on average, from Deployments and StatefulSets")
	flagSteady      = flag.Duration("steady", 10*time.Minute, "how long the steady state is measured")
	flagOnly        = flag.String("scenarios", "steady,storm,partition,powerloss,bmccut", "which scenarios, in this order")
	flagAgent       = flag.String("agent", "", "fence-agent binaries to run instead of building cmd/fence-agent, comma-separated: each is measured in turn (start-up, steady state, profiles) on the same cluster, and the last runs the failure scenarios")
	flagOut         = flag.String("out", "", "directory for the figures (figures.json) and the agent's profiles (a relative path is under the repository; default bin/scale/nNODES); with several agents, one subdirectory each")
	flagProfile     = flag.Duration("profile", time.Minute, "CPU profile length, taken after the steady window (0: no profiles)")
	flagMemLimit    = flag.String("gomemlimit", "", "the agent's GOMEMLIMIT (e.g. 120MiB, or off) instead of deploy/base's DaemonSet's, to try another memory budget; the steady line prints the one used")
	flagBMCLatency  = flag.Duration("bmc-latency", 0, "added to every Redfish request of every node's BMC (real BMCs answer in 0.3 to 2 s; the mock at once)")
	flagPlot        = flag.String("plot", "", "TestPlot: the directory (a relative path is under the repository) whose */figures.json feed the growth table and plot (growth.svg, written there)")
)

// The agent's policy: the defaults, with the two knobs the README
// recommends for a cluster whose racks hold up to a group's nodes, and
// fenceAfter shortened so that the partition and storm scenarios reach the
// storm guard within a minute (the guard does not depend on fenceAfter).
func agentPolicy(group int) string {
	return fmt.Sprintf("policy:\n  fenceAfter: 60s\n  maxConcurrentPowerLossFences: %d\n", group)
}

// profiling turns on the agent's /debug/pprof/ (its metrics address is
// loopback and unauthenticated in the harness, which config.Validate allows).
const profiling = "server:\n  pprof: true\n"

const (
	suspectAfter = 20 * time.Second
	fenceAfter   = 60 * time.Second
	cooldown     = 30 * time.Second
)

// Targets (issues 14 and 22).
const (
	maxRSS         = 100 << 20
	maxIdleCPU     = 0.02 // of one core
	maxBMCPerMin   = 1.0  // requests per node per minute at rest
	powerLossSlack = 15 * time.Second
)

type harness struct {
	t     *testing.T
	tb    *testbed.Testbed
	c     kubernetes.Interface
	agent *testbed.Agent
	proxy *countingProxy
	group int // nodes per group
	pods  int // pods in the cluster (workload and the power-loss group's)
	fails []string
	figs  *Figures
	// budget is the agent's GOMEMLIMIT (deploy/base's); "" for none.
	budget string
}

// controlPlaneArgs let the controllers keep up with tens of thousands of
// pods: client-side rate limits 10 to 15 times the defaults (20/30 for the
// controller manager, 50/100 for the scheduler) and more workers for the
// workload controllers. Without them the set-up takes half an hour.
var controlPlaneArgs = map[string][]string{
	"kube-controller-manager": {"--kube-api-qps=300", "--kube-api-burst=600",
		"--concurrent-deployment-syncs=20", "--concurrent-replicaset-syncs=20", "--concurrent-statefulset-syncs=20"},
	"kube-scheduler": {"--kube-api-qps=300", "--kube-api-burst=600"},
}

func TestScale(t *testing.T) {
	if err := controlplane.BinariesAvailable(""); err != nil {
		t.Fatal(err) // only run on purpose (make scale): missing binaries are an error
	}
	n, groups := *flagNodes, *flagGroups
	if n%groups != 0 || n/groups < 3 {
		t.Fatalf("-nodes %d must be a multiple of -groups %d, with at least 3 nodes a group", n, groups)
	}
	out := *flagOut
	if out == "" {
		out = filepath.Join("bin", "scale", fmt.Sprintf("n%d", n))
	}
	out = underRepo(t, out)
	ctx := context.Background()
	setupStart := time.Now()
	cp := controlplane.StartT(t, controlplane.Options{Logf: quiet(t), ExtraArgs: controlPlaneArgs})
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("n%04d", i)
	}
	timing := redfishmock.DefaultTiming()
	tb, err := testbed.Start(ctx, cp, testbed.Options{Nodes: names, GroupSize: n / groups, AgentAsServiceAccount: true, Timing: &timing, Logf: quiet(t)}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tb.Stop)
	if *flagBMCLatency > 0 {
		for _, name := range names {
			if err := tb.SetFaults(name, redfishmock.Faults{Latency: *flagBMCLatency}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The agent runs with the memory budget users get: deploy/base's,
	// read from the manifest.
	budget := manifestMemoryBudget(t)
	if *flagMemLimit != "" {
		budget = *flagMemLimit
	}
	if budget != "" {
		tb.AgentEnv = append(tb.AgentEnv, "GOMEMLIMIT="+budget)
	}
	h := &harness{t: t, tb: tb, c: cp.Client(), group: n / groups, budget: budget}
	nodesReady := time.Since(setupStart)
	fmt.Printf("scale: setup: %d nodes in %d kwok processes, 1 Redfish mock with %d systems (each request %s late), ready in %.0fs\n",
		n, groups, n, *flagBMCLatency, nodesReady.Seconds())

	// One StatefulSet pod with a volume on each node of the power-loss
	// group, then the workload: about -pods-per-node pods on every node.
	h.statefulSets(ctx, tb.Groups[powerLossGroup(groups)])
	workStart := time.Now()
	plan := h.workload(ctx, *flagPodsPerNode*n-h.group)
	h.pods = plan.pods + h.group
	setup := time.Since(setupStart)
	fmt.Printf("scale: setup: %d pods Running (%d Deployments of %d, %d StatefulSets of %d with Parallel pod management, in %d namespaces; %d with volumes) in %.0fs; whole set-up %.0fs\n",
		h.pods, plan.deployments, deploymentReplicas, plan.statefulSets, statefulSetReplicas, plan.namespaces, h.group,
		time.Since(workStart).Seconds(), setup.Seconds())

	apiHost := strings.TrimPrefix(cp.RESTConfig().Host, "https://")
	if h.proxy, err = startProxy(apiHost); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.proxy.Close)
	kubeconfig, err := tb.AgentKubeconfigVia("https://" + h.proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}

	bins := strings.Split(*flagAgent, ",")
	if *flagAgent == "" {
		bin, err := testbed.BuildAgent(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		bins = []string{bin}
	}
	scenarios := strings.Split(*flagOnly, ",")
	for i, bin := range bins {
		dir := out
		if len(bins) > 1 {
			dir = filepath.Join(out, fmt.Sprintf("%d-%s", i, filepath.Base(bin)))
		}
		h.figs = &Figures{Nodes: n, Pods: h.pods, Command: command(), Date: time.Now().UTC().Format(time.RFC3339),
			SetupSeconds: setup.Seconds(), WorkloadSeconds: (setup - nodesReady).Seconds()}
		last := i == len(bins)-1
		h.runAgent(ctx, bin, fmt.Sprintf("scale-agent-%d", i), kubeconfig, dir)
		for _, s := range scenarios {
			switch s {
			case "steady":
				h.steady(ctx, dir)
			case "storm", "partition", "powerloss", "bmccut":
				if !last {
					continue // the failure scenarios run once, with the last agent
				}
				switch s {
				case "storm":
					h.storm(ctx)
				case "partition":
					h.partition(ctx)
				case "powerloss":
					h.powerLoss(ctx, dir)
				case "bmccut":
					h.bmcCut(ctx)
				}
			default:
				t.Fatalf("unknown scenario %q", s)
			}
		}
		if err := h.figs.save(dir); err != nil {
			t.Error(err)
		}
		fmt.Printf("scale: figures: %s\n", filepath.Join(dir, "figures.json"))
		if !last {
			h.agent.Stop()
		}
	}
	for _, f := range h.fails {
		t.Error(f)
	}
}

// command is how this run was started, for the figures.
func command() string {
	args := []string{}
	flag.Visit(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, "test.") {
			return
		}
		args = append(args, fmt.Sprintf("-%s=%s", f.Name, f.Value))
	})
	return "make scale SCALE_ARGS='" + strings.Join(args, " ") + "'"
}

// runAgent starts the agent (through the counting proxy, with profiles on
// when the binary knows the setting), measures its start-up, and waits
// until every node was probed once.
func (h *harness) runAgent(ctx context.Context, bin, name, kubeconfig, dir string) {
	t := h.t
	cfg, err := h.tb.AgentConfig(agentPolicy(h.group) + profiling)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a, err := h.tb.StartAgent(ctx, bin, name, cfg, "--kubeconfig", kubeconfig)
	if err != nil && strings.Contains(err.Error(), "server.pprof: no such setting") {
		// An agent from before server.pprof: measured without profiles.
		// Only that error: any failed start whose log tail held "pprof"
		// (a start that failed for another reason) once cost a 1000-node
		// run its profiles.
		t.Logf("%s does not know server.pprof: no profiles", bin)
		if cfg, err = h.tb.AgentConfig(agentPolicy(h.group)); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		a, err = h.tb.StartAgent(ctx, bin, name, cfg, "--kubeconfig", kubeconfig)
	} else if err != nil {
		// Any other failed start is said, and tried once more as it was
		// (a loaded API server at 30 000 pods); the start-up figure is
		// the second start's.
		t.Logf("%s: the first start failed, starting it again: %v", bin, err)
		start = time.Now()
		a, err = h.tb.StartAgent(ctx, bin, name, cfg, "--kubeconfig", kubeconfig)
	}
	if err != nil {
		t.Fatal(err)
	}
	ready := time.Since(start)
	h.agent = a
	t.Cleanup(func() {
		a.Stop()
		if t.Failed() {
			t.Logf("agent log (tail):\n%s", tailLines(a.Logs(), 40))
		}
		// The whole log, kept with the figures: the testbed's directory
		// goes with the test, and a slow fence is read in the log ("fence
		// state saved ... took"), not guessed. A 1000-node run's power
		// loss once left three nodes 450 s in ConfirmingOff, and its log
		// was gone.
		if err := gzipFile(a.LogPath, filepath.Join(dir, "agent.log.gz")); err != nil {
			t.Logf("keeping the agent's log: %v", err)
		} else {
			fmt.Printf("scale: agent log: %s\n", filepath.Join(dir, "agent.log.gz"))
		}
	})
	for !a.Leading() {
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("the agent does not lead 3 minutes after its start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	leading := time.Since(start)
	hwm, _ := a.PeakRSS()
	h.figs.ReadySeconds, h.figs.LeadingSeconds, h.figs.StartupPeakRSSMiB = ready.Seconds(), leading.Seconds(), mib(hwm)
	h.figs.AgentVersion, h.figs.AgentCommit = h.buildInfo()
	fmt.Printf("scale: start-up: %d nodes, %d pods: caches synced +%.1fs, leading +%.1fs, peak RSS until then %.1f MiB (agent %s, commit %s)\n",
		len(h.tb.Nodes), h.pods, ready.Seconds(), leading.Seconds(), mib(hwm), h.figs.AgentVersion, short(h.figs.AgentCommit))
	// Every node probed once (a whole probe interval) before measuring.
	h.waitFor(3*time.Minute, "every node probed fenceable", func() (bool, error) {
		k, err := h.fenceableCount()
		return k == len(h.tb.Nodes), err
	})
}

// buildInfo reads the agent's version and commit from bmcfence_build_info.
func (h *harness) buildInfo() (version, commit string) {
	resp, err := testbed.MetricsClient(10 * time.Second).Get(h.agent.MetricsURL() + "/metrics")
	if err != nil {
		return "unknown", "unknown"
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "bmcfence_build_info{") {
			continue
		}
		return label(line, "version"), label(line, "commit")
	}
	return "unknown", "unknown"
}

func label(line, name string) string {
	for _, sep := range []string{"{", ","} {
		if _, rest, ok := strings.Cut(line, sep+name+`="`); ok {
			v, _, _ := strings.Cut(rest, `"`)
			return v
		}
	}
	return ""
}

// manifestMemoryBudget is the soft memory limit deploy/base's DaemonSet
// gives the agent, as GOMEMLIMIT's text: its GOMEMLIMIT if it sets one,
// else what the agent takes in that container (memlimit.Fraction of its
// limits.memory, in bytes); "" when it gives neither. The harness runs the
// agent as a process, outside any cgroup: it measures what users run only
// if it passes this.
func manifestMemoryBudget(t *testing.T) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "base", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := sigsyaml.Unmarshal(raw, &ds); err != nil {
		t.Fatalf("deploy/base/daemonset.yaml: %v", err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != "fence-agent" {
			continue
		}
		for _, e := range c.Env {
			if e.Name == "GOMEMLIMIT" {
				return e.Value
			}
		}
		if l, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			return strconv.FormatInt(int64(float64(l.Value())*memlimit.Fraction), 10)
		}
	}
	return ""
}

// Groups: g0 the partition, g1 the BMC cut, g2..g7 the storm (6 of 10),
// the last the power loss.
func powerLossGroup(groups int) int { return groups - 1 }

// underRepo resolves a relative -out or -plot against the repository's
// root, as the command is typed there (go test runs in test/scale).
func underRepo(t *testing.T, path string) string {
	t.Helper()
	if filepath.IsAbs(path) {
		return path
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, path)
}

const (
	partitionGroup = 0
	bmcCutGroup    = 1
	stormFirst     = 2
)

func quiet(t *testing.T) func(string, ...any) {
	if os.Getenv("SCALE_VERBOSE") != "" {
		return t.Logf
	}
	return func(string, ...any) {}
}

func (h *harness) fail(format string, args ...any) {
	h.fails = append(h.fails, fmt.Sprintf(format, args...))
}

func (h *harness) waitFor(d time.Duration, desc string, cond func() (bool, error)) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := controlplane.WaitFor(ctx, nil, desc, cond); err != nil {
		h.t.Fatal(err)
	}
}

// fenceableCount is how many nodes the agent reports fenceable.
func (h *harness) fenceableCount() (int, error) {
	total, err := h.agent.Metric("bmcfence_node_fenceable")
	return int(total), err
}

// ---- the steady state -------------------------------------------------------

func (h *harness) steady(ctx context.Context, dir string) {
	n := len(h.tb.Nodes)
	h.heapAtStart(dir)
	ops0 := h.bmcOps()
	cpu0, _ := h.agent.CPUTime()
	api0 := h.apiRequests(ctx)
	in0, out0 := h.proxy.Bytes()
	bmc0 := h.bmcRequests()
	start := time.Now()
	var peakSec, peakRSS int64
	var loadSum float64
	loads := 0
	last := bmc0
	tick := time.NewTicker(time.Second)
	for time.Since(start) < *flagSteady {
		<-tick.C
		cur := h.bmcRequests()
		peakSec = max(peakSec, cur-last)
		last = cur
		if rss, err := h.agent.RSS(); err == nil {
			peakRSS = max(peakRSS, rss)
		}
		if l, err := loadAverage(); err == nil {
			loadSum += l
			loads++
		}
	}
	tick.Stop()
	el := time.Since(start)
	cpu1, _ := h.agent.CPUTime()
	api1 := h.apiRequests(ctx)
	in1, out1 := h.proxy.Bytes()
	bmc1 := h.bmcRequests()
	ops1 := h.bmcOps()
	rss, _ := h.agent.RSS()
	anon, file, _ := h.agent.RSSParts()
	// The peak counts the last reading too: sampled once a second, a
	// 1000-node run's peak (233.3 MiB) came out below its final RSS (233.9).
	peakRSS = max(peakRSS, rss)
	gor, _ := h.agent.Metric("go_goroutines")
	fds, _ := h.agent.Metric("process_open_fds")
	heap, _ := h.agent.Metric("go_memstats_heap_inuse_bytes")
	cpu := (cpu1 - cpu0).Seconds() / el.Seconds()
	perNodeMin := float64(bmc1-bmc0) / float64(n) / el.Minutes()
	mean := float64(bmc1-bmc0) / el.Seconds()
	load := loadSum / float64(max(loads, 1))
	f := h.figs
	f.SteadySeconds, f.RSSMiB, f.PeakRSSMiB, f.HeapInUseMiB = el.Seconds(), mib(rss), mib(peakRSS), heap/(1<<20)
	f.GoMemLimit = h.budget
	f.RSSAnonMiB, f.RSSFileMiB = mib(anon), mib(file)
	// The Go runtime's settings the agent chose (internal/goruntime), from
	// its metrics.
	procs, _ := h.agent.Metric("go_sched_gomaxprocs_threads")
	gogc, _ := h.agent.Metric("go_gc_gogc_percent")
	f.GoRuntime = fmt.Sprintf("GOMAXPROCS %.0f, GOGC %.0f", procs, gogc)
	budget := h.budget
	if budget == "" {
		budget = "none"
	}
	budget += ", " + f.GoRuntime
	f.CPUPercent, f.LoadAverage = cpu*100, load
	f.APIRequestsSec = float64(api1-api0) / el.Seconds()
	f.APIBytesInSec, f.APIBytesOutSec = float64(in1-in0)/el.Seconds(), float64(out1-out0)/el.Seconds()
	f.BMCPerNodeMin, f.Goroutines, f.OpenFDs = perNodeMin, int(gor), int(fds)
	fmt.Printf("scale: steady: %d nodes, %d pods, %s: agent RSS %.1f MiB (anonymous %.1f, binary %.1f; peak %.1f, heap in use %.1f, GOMEMLIMIT %s), CPU %.2f%% of a core (utime+stime; load average %.1f), API %.2f req/s, %.1f KiB/s in, %.1f KiB/s out, BMC %.2f req/node/min (mean %.1f/s, busiest second %d), goroutines %.0f, open fds %.0f\n",
		n, h.pods, el.Round(time.Second), mib(rss), f.RSSAnonMiB, f.RSSFileMiB, mib(peakRSS), heap/(1<<20), budget, cpu*100, load, f.APIRequestsSec,
		f.APIBytesInSec/1024, f.APIBytesOutSec/1024, perNodeMin, mean, peakSec, gor, fds)
	// Where the BMC requests come from: the agent's own count of its BMC
	// operations by kind (its metrics), per node per minute; the rest of
	// the mock's count is requests no operation accounts for (a
	// connection's set-up, an event stream's subscription).
	var by []string
	var agentOps float64
	for i, op := range bmcOpNames {
		d := ops1[i] - ops0[i]
		agentOps += d
		if d > 0 {
			by = append(by, fmt.Sprintf("%s %.3f", op, d/float64(n)/el.Minutes()))
		}
	}
	fmt.Printf("scale: steady: BMC operations per node per minute (the agent's metrics): %s; the mock's requests not counted there %.3f\n",
		strings.Join(by, ", "), (float64(bmc1-bmc0)-agentOps)/float64(n)/el.Minutes())
	if peakRSS > maxRSS {
		h.fail("steady: peak RSS %.1f MiB > %d MiB", mib(peakRSS), maxRSS>>20)
	}
	if cpu > maxIdleCPU {
		h.fail("steady: CPU %.2f%% of a core > %.0f%% (load average %.1f)", cpu*100, maxIdleCPU*100, load)
	}
	if perNodeMin > maxBMCPerMin*1.05 { // one interval's phase jitter
		h.fail("steady: %.2f BMC requests per node per minute > %.0f", perNodeMin, maxBMCPerMin)
	}
	// Spread: the busiest second carries at most a few times the mean.
	if float64(peakSec) > 4*mean+5 {
		h.fail("steady: the busiest second carried %d BMC requests, mean %.1f/s: probes not spread", peakSec, mean)
	}
	h.profiles(dir)
}

// loadAverage is the machine's one-minute load average.
func loadAverage() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("empty /proc/loadavg")
	}
	return strconv.ParseFloat(f[0], 64)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// bmcOpNames are the BMC operations the agent's metrics count (bmc.Op).
var bmcOpNames = []string{"power-status", "identity", "read-evidence", "power-off", "power-on", "diagnostic-interrupt"}

// bmcOps is the agent's count of its BMC operations, by bmcOpNames.
func (h *harness) bmcOps() []float64 {
	out := make([]float64, len(bmcOpNames))
	for i, op := range bmcOpNames {
		out[i], _ = h.agent.Metric("bmcfence_bmc_request_duration_seconds_count", `op="`+op+`"`)
	}
	return out
}

// bmcRequests is the mock's count of Redfish requests over all systems.
func (h *harness) bmcRequests() int64 {
	var k int64
	for _, s := range h.tb.Mock.Mock.Statuses() {
		k += s.Counters.Requests
	}
	return k
}

// apiRequests counts the requests the API server dispatched for service
// accounts outside kube-system: the agent's (APF flow schema
// "service-accounts"; the controllers and kwok fall under others).
func (h *harness) apiRequests(ctx context.Context) int64 {
	body, err := h.c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		h.t.Logf("apiserver metrics: %v", err)
		return 0
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "apiserver_flowcontrol_dispatched_requests_total{") && strings.Contains(line, `flow_schema="service-accounts"`) {
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				sum += v
			}
		}
	}
	return int64(sum)
}

// apfAgent sums, for the agent's requests (APF flow schema
// "service-accounts", as apiRequests), the seconds they waited in the API
// server's queues and the seconds they executed, with their counts: a
// power loss's slow state writes are either queueing (a FlowSchema of our
// own would help) or a busy server (it would not).
type apfSums struct{ waitSum, waitN, execSum, execN float64 }

func (h *harness) apfAgent(ctx context.Context) apfSums {
	var a apfSums
	body, err := h.c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return a
	}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `flow_schema="service-accounts"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, "apiserver_flowcontrol_request_wait_duration_seconds_sum{"):
			a.waitSum += v
		case strings.HasPrefix(line, "apiserver_flowcontrol_request_wait_duration_seconds_count{"):
			a.waitN += v
		case strings.HasPrefix(line, "apiserver_flowcontrol_request_execution_seconds_sum{"):
			a.execSum += v
		case strings.HasPrefix(line, "apiserver_flowcontrol_request_execution_seconds_count{"):
			a.execN += v
		}
	}
	return a
}

func (a apfSums) since(b apfSums) string {
	avg := func(s, n float64) float64 {
		if n <= 0 {
			return 0
		}
		return s / n
	}
	return fmt.Sprintf("%.0f requests, queued %.3fs and executed %.3fs on average",
		a.execN-b.execN, avg(a.waitSum-b.waitSum, a.waitN-b.waitN), avg(a.execSum-b.execSum, a.execN-b.execN))
}

// ---- failures ---------------------------------------------------------------

// forceOffs counts the ForceOffs each node of nodes received.
func (h *harness) forceOffs(nodes []string) map[string]int {
	out := map[string]int{}
	for _, n := range nodes {
		out[n] = h.tb.ForceOffs(n)
	}
	return out
}

// offTimes records when each node of nodes first got a ForceOff after
// since, sampled every 200 ms until stop closes.
func (h *harness) watchForceOffs(nodes []string, stop <-chan struct{}) func() map[string]time.Time {
	base := h.forceOffs(nodes)
	seen := map[string]time.Time{}
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			for _, n := range nodes {
				mu.Lock()
				_, ok := seen[n]
				mu.Unlock()
				if !ok && h.tb.ForceOffs(n) > base[n] {
					mu.Lock()
					seen[n] = time.Now()
					mu.Unlock()
				}
			}
		}
	}()
	return func() map[string]time.Time {
		<-done
		return seen
	}
}

// events counts the Events with reason on nodes (by involved object name).
func (h *harness) events(ctx context.Context, reason string, since time.Time) (int, string) {
	list, err := h.c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
	if err != nil {
		return 0, ""
	}
	k, msg := 0, ""
	for _, e := range list.Items {
		if e.LastTimestamp.Time.Before(since.Truncate(time.Second)) && e.EventTime.Time.Before(since) {
			continue
		}
		k++
		msg = e.Message
	}
	return k, msg
}

// storm: 6 of 10 groups stop renewing at once, their machines running (BMCs
// On). Past fenceAfter, every power-off is refused: zero ForceOffs.
func (h *harness) storm(ctx context.Context) {
	var groups []*controlplane.KwokGroup
	var nodes []string
	for i := stormFirst; i < stormFirst+6*len(h.tb.Groups)/10; i++ {
		groups = append(groups, h.tb.Groups[i])
		nodes = append(nodes, h.tb.Groups[i].Nodes...)
	}
	stop := make(chan struct{})
	offs := h.watchForceOffs(nodes, stop)
	start := time.Now()
	for _, g := range groups {
		if err := g.Kill(); err != nil {
			h.t.Fatal(err)
		}
	}
	watch := fenceAfter + 45*time.Second
	time.Sleep(watch)
	close(stop)
	got := offs()
	storms, msg := h.events(ctx, "FenceStorm", start)
	refused, _ := h.events(ctx, "FenceRefused", start)
	fmt.Printf("scale: storm: %d of %d nodes stop renewing at once (BMCs On), watched %s: %d ForceOffs, %d FenceStorm Event (%q), %d per-node FenceRefused\n",
		len(nodes), len(h.tb.Nodes), watch, len(got), storms, msg, refused)
	if len(got) != 0 {
		h.fail("storm: %d ForceOffs, want 0", len(got))
	}
	if storms != 1 {
		h.fail("storm: %d FenceStorm Events, want one", storms)
	}
	// Heal: the kubelets come back.
	healStart := time.Now()
	for _, g := range groups {
		if err := g.Restart(ctx); err != nil {
			h.t.Fatal(err)
		}
	}
	h.waitFor(3*time.Minute, "every node Healthy again", func() (bool, error) {
		return h.allNodesReady(ctx)
	})
	fmt.Printf("scale: storm: healed, %d nodes Ready again in %.0fs\n", len(nodes), time.Since(healStart).Seconds())
}

func (h *harness) allNodesReady(ctx context.Context) (bool, error) {
	list, err := h.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, nil
	}
	for i := range list.Items {
		if !cluster.NodeReady(&list.Items[i]) {
			return false, nil
		}
	}
	return true, nil
}

// partition: one group stops renewing, machines running. Not a storm, so
// past fenceAfter they are powered off, but only as the guard admits: one in
// flight, one per cooldown. Left partitioned (and fenced) for the rest.
func (h *harness) partition(ctx context.Context) {
	g := h.tb.Groups[partitionGroup]
	stop := make(chan struct{})
	offs := h.watchForceOffs(g.Nodes, stop)
	start := time.Now()
	if err := g.Kill(); err != nil {
		h.t.Fatal(err)
	}
	watch := fenceAfter + 2*cooldown + 30*time.Second
	time.Sleep(watch)
	close(stop)
	got := offs()
	var times []time.Time
	for _, at := range got {
		times = append(times, at)
	}
	// The closest two ForceOffs.
	minGap := time.Duration(0)
	for i := range times {
		for j := range times {
			if i != j {
				if d := times[i].Sub(times[j]); d > 0 && (minGap == 0 || d < minGap) {
					minGap = d
				}
			}
		}
	}
	allowed := 1 + int((watch-fenceAfter)/cooldown)
	refused, msg := h.events(ctx, "FenceRefused", start)
	fmt.Printf("scale: partition: %d nodes stop renewing (BMCs On), watched %s: %d ForceOffs (the guard admits at most %d: one in flight, one per %s), closest two %s apart, %d FenceRefused Events (%q)\n",
		len(g.Nodes), watch, len(got), allowed, cooldown, minGap.Round(100*time.Millisecond), refused, msg)
	if len(got) > allowed {
		h.fail("partition: %d ForceOffs > %d admitted", len(got), allowed)
	}
	if len(got) > 1 && minGap < cooldown/2 {
		h.fail("partition: two ForceOffs %s apart, cooldown %s", minGap, cooldown)
	}
	if refused == 0 {
		h.fail("partition: no FenceRefused Event")
	}
}

// statefulSets puts one single-replica StatefulSet with a volume on each
// node of g, and waits until all run. Each is created pinned to its node
// (required node affinity) with the OnDelete update strategy, and unpinned
// once Running: the running pod stays, and the replacement the StatefulSet
// controller creates after the failover may go anywhere.
func (h *harness) statefulSets(ctx context.Context, g *controlplane.KwokGroup) {
	const ns = "scale"
	if err := h.tb.CP.CreateNamespace(ctx, ns); err != nil {
		h.t.Fatal(err)
	}
	for i, node := range g.Nodes {
		ss := controlplane.StatefulSet(ns, fmt.Sprintf("db%d", i), 1)
		ss.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
		ss.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
				}},
			}}},
		}}
		if _, err := h.c.AppsV1().StatefulSets(ns).Create(ctx, ss, metav1.CreateOptions{}); err != nil {
			h.t.Fatal(err)
		}
	}
	h.waitFor(5*time.Minute, "every StatefulSet pod Running on its node", func() (bool, error) {
		pods, err := h.c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		k := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				k++
			}
		}
		return k == len(g.Nodes), nil
	})
	for i := range g.Nodes {
		patch := []byte(`{"spec":{"template":{"spec":{"affinity":null}}}}`)
		if _, err := h.c.AppsV1().StatefulSets(ns).Patch(ctx, fmt.Sprintf("db%d", i), types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			h.t.Fatal(err)
		}
	}
	pods, _ := h.c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	on := map[string]bool{}
	for _, n := range g.Nodes {
		on[n] = true
	}
	k := 0
	for _, p := range pods.Items {
		if on[p.Spec.NodeName] {
			k++
		}
	}
	fmt.Printf("scale: setup: %d StatefulSet pods with volumes Running, %d on the power-loss group's nodes\n", len(pods.Items), k)
}

// watchTaints watches g's nodes and returns when each was first seen with
// the out-of-service taint, from the moment begin returns; stop ends the
// watch.
// A watch stamps a taint within milliseconds of its write; a list every
// 200 ms, on an API server busy with a power loss's evictions, took up to
// 3 s to see one (n0984 at 1000 × 30: tainted +57.5 s by the agent's log,
// +60.4 s by the list), and loaded that server besides.
func (h *harness) watchTaints(ctx context.Context, g *controlplane.KwokGroup) (begin func() time.Time, taints func() map[string]time.Duration, stop func()) {
	var mu sync.Mutex
	var start time.Time
	seen := map[string]time.Duration{}
	note := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok || !cluster.HasOutOfServiceTaint(n) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, ok := seen[n.Name]; !ok && !start.IsZero() {
			seen[n.Name] = time.Since(start)
		}
	}
	f := informers.NewSharedInformerFactoryWithOptions(h.c, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = controlplane.GroupLabel + "=" + g.Name
	}))
	inf := f.Core().V1().Nodes().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    note,
		UpdateFunc: func(_, obj any) { note(obj) },
	}); err != nil {
		h.t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	stop = func() { cancel(); f.Shutdown() }
	f.Start(wctx.Done())
	if !cache.WaitForCacheSync(wctx.Done(), inf.HasSynced) {
		stop()
		h.t.Fatal("the watch of the power-loss group's nodes did not sync")
	}
	begin = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		start = time.Now()
		return start
	}
	return begin, func() map[string]time.Duration {
		// A node tainted before begin (no update since) is stamped
		// when first asked about, as a list would.
		for _, obj := range inf.GetStore().List() {
			note(obj)
		}
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]time.Duration, len(seen))
		for k, v := range seen {
			out[k] = v
		}
		return out
	}, stop
}

// powerLoss: a group loses power at once: BMCs read Off, kwok killed.
func (h *harness) powerLoss(ctx context.Context, dir string) {
	g := h.tb.Groups[powerLossGroup(len(h.tb.Groups))]
	begin, taints, stop := h.watchTaints(ctx, g)
	defer stop()
	start := begin()
	apf0 := h.apfAgent(ctx)
	var apfTainted string
	for _, n := range g.Nodes {
		if err := h.tb.PowerLoss(n); err != nil {
			h.t.Fatal(err)
		}
	}
	if err := g.Kill(); err != nil {
		h.t.Fatal(err)
	}
	on := map[string]bool{}
	for _, n := range g.Nodes {
		on[n] = true
	}
	tainted := map[string]time.Duration{}
	var allTainted, allRunning time.Duration
	running := 0
	// Not h.waitFor: a run that does not finish still prints how far it
	// got (at 1000 nodes × 30 pods on two cores, the controllers need
	// minutes to place the replacements; the taints are the target).
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Minute)
	defer wcancel()
	waitErr := controlplane.WaitFor(wctx, nil, "every node of the group tainted and every replacement pod Running elsewhere", func() (bool, error) {
		el := time.Since(start)
		if allTainted == 0 {
			tainted = taints()
			if len(tainted) == len(g.Nodes) {
				for _, d := range tainted {
					allTainted = max(allTainted, d)
				}
				apfTainted = h.apfAgent(ctx).since(apf0)
			}
		}
		pods, err := h.c.CoreV1().Pods("scale").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running = 0
		for _, p := range pods.Items {
			if !on[p.Spec.NodeName] && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		if running == len(g.Nodes) && allRunning == 0 {
			allRunning = el
		}
		return allTainted != 0 && allRunning != 0, nil
	})
	var first time.Duration
	for _, d := range tainted {
		if first == 0 || d < first {
			first = d
		}
	}
	if waitErr != nil {
		var last time.Duration
		for _, d := range tainted {
			last = max(last, d)
		}
		fmt.Printf("scale: powerloss: %d nodes lose power at once (BMCs Off), %d pods in the cluster: NOT DONE after %.0fs: %d of %d tainted (first +%.1fs, last +%.1fs; target all within %s), %d of %d replacement StatefulSet pods with volumes Running elsewhere\n",
			len(g.Nodes), h.pods, time.Since(start).Seconds(), len(tainted), len(g.Nodes), first.Seconds(), last.Seconds(), suspectAfter+powerLossSlack, running, len(g.Nodes))
		if allTainted != 0 {
			// Every node was tainted, the replacements were not all
			// Running: the taints are the target, so the growth table
			// shows them (a 1000 × 30 run's showed "—").
			h.figs.PowerLossNodes, h.figs.PowerLossTaintedSeconds = len(g.Nodes), allTainted.Seconds()
		}
		h.printTimeline("powerloss", dir, g.Nodes, start)
		h.fail("powerloss: %v", waitErr)
		return
	}
	fmt.Printf("scale: powerloss: %d nodes lose power at once (BMCs Off), %d pods in the cluster: first tainted +%.1fs, all tainted +%.1fs (target %s), all %d replacement StatefulSet pods with volumes Running +%.1fs\n",
		len(g.Nodes), h.pods, first.Seconds(), allTainted.Seconds(), suspectAfter+powerLossSlack, len(g.Nodes), allRunning.Seconds())
	fmt.Printf("scale: powerloss: the agent's API requests until all were tainted (APF flow schema service-accounts): %s\n", apfTainted)
	h.figs.PowerLossNodes, h.figs.PowerLossTaintedSeconds, h.figs.PowerLossRunningSeconds = len(g.Nodes), allTainted.Seconds(), allRunning.Seconds()
	h.printTimeline("powerloss", dir, g.Nodes, start)
	if allTainted > suspectAfter+powerLossSlack {
		h.fail("powerloss: all tainted after %s > suspectAfter + %s", allTainted, powerLossSlack)
	}
}

// bmcCut: one group's BMC network is cut (every request hangs until the
// agent's timeout) and its kubelets stop. No ForceOff lands, no taint; the
// nodes are reported unfenceable within a probe interval.
func (h *harness) bmcCut(ctx context.Context) {
	g := h.tb.Groups[bmcCutGroup]
	before, _ := h.fenceableCount()
	stop := make(chan struct{})
	offs := h.watchForceOffs(g.Nodes, stop)
	start := time.Now()
	for _, n := range g.Nodes {
		if err := h.tb.SetFaults(n, redfishmock.Faults{Hang: true}); err != nil {
			h.t.Fatal(err)
		}
	}
	if err := g.Kill(); err != nil {
		h.t.Fatal(err)
	}
	var reported time.Duration
	unfenceable := 0.0
	deadline := time.Now().Add(fenceAfter + 60*time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		unfenceable, _ = h.agent.Metric("bmcfence_unfenceable_nodes")
		if reported == 0 && int(unfenceable) >= len(g.Nodes) {
			reported = time.Since(start)
		}
	}
	close(stop)
	got := offs()
	taints := 0
	list, _ := h.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: controlplane.GroupLabel + "=" + g.Name})
	for i := range list.Items {
		if cluster.HasOutOfServiceTaint(&list.Items[i]) {
			taints++
		}
	}
	after, _ := h.fenceableCount()
	fmt.Printf("scale: bmccut: %d nodes' BMCs unreachable and kubelets dead, watched %s: %d ForceOffs landed, %d taints, unfenceable %d (all reported +%.0fs), fenceable %d → %d\n",
		len(g.Nodes), time.Since(start).Round(time.Second), len(got), taints, int(unfenceable), reported.Seconds(), before, after)
	if len(got) != 0 || taints != 0 {
		h.fail("bmccut: %d ForceOffs, %d taints; want none", len(got), taints)
	}
	if reported == 0 {
		h.fail("bmccut: the %d nodes were never all reported unfenceable", len(g.Nodes))
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
