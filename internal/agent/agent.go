// Package agent wires the fence-agent together: the cluster view, the
// inventory, metrics and health endpoints, leader election, the runner and
// the fenceability probe. cmd/fence-agent is a thin main around it.
package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	fencingv1alpha1 "github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfish"
	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned/typed/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/cluster/history"
	"github.com/bmcfence/bmcfence/cluster/remediation"
	"github.com/bmcfence/bmcfence/cluster/requests"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory"
	"github.com/bmcfence/bmcfence/internal/kube"
	"github.com/bmcfence/bmcfence/internal/metrics"
	"github.com/bmcfence/bmcfence/internal/pagetrim"
	"github.com/bmcfence/bmcfence/internal/powerevents"
	"github.com/bmcfence/bmcfence/internal/version"
)

// inventoryRefresh is how often the inventory is rebuilt and its CA
// ConfigMaps re-read; secretMaxAge how long a credentials Secret is kept
// before it is read again (spread over its second half by name). A rotated
// BMC password is picked up sooner: a BMC that rejects the credentials has
// its Secret read at the next refresh (inventory.Controller.refused). With
// a Secret per node, re-reading every Secret every 30 s cost 33 GETs a
// second at 1000 nodes (the scale harness), a 5-minute age about 4, the
// most of the agent's API requests at rest; 30 minutes cost 0.7.
const (
	inventoryRefresh = 30 * time.Second
	secretMaxAge     = 30 * time.Minute
)

// probeConcurrency bounds the fenceability probe's BMC calls in flight.
// Probes are spread over the interval (probeAll), so normally one runs at a
// time; the bound matters when BMCs hang: each holds a slot for the BMC
// timeout (10 s), and 32 slots keep the schedule of a thousand nodes on
// time with a hundred of them hanging.
const probeConcurrency = 32

// The metrics count what the inventory observes, IPMI cipher fallbacks
// included.
var (
	_ inventory.Observer       = (*metrics.Metrics)(nil)
	_ inventory.CipherObserver = (*metrics.Metrics)(nil)
)

// Agent is one fence-agent process.
type Agent struct {
	cfg     config.Agent
	log     *zap.Logger
	client  kube.Interface
	clock   clock.WithTicker
	cluster *cluster.Cluster
	inv     *inventory.Inventory
	metrics *metrics.Metrics

	// fencing and dynamic serve the remediation CRs (WithRemediation);
	// nil: the agent runs without them (detection builtin only).
	fencing fencingclient.FencingV1alpha1Interface
	dynamic dynamic.Interface

	ready   atomic.Bool
	leading atomic.Bool
	// events holds the BMCs' event streams while this replica leads.
	events atomic.Pointer[powerevents.Manager]
	// leader learns of every renewal of the leader Lease; leaderHealth
	// (leader, or a test's) fails /healthz when this replica leads but has
	// stopped renewing.
	leader       *cluster.LeaderHealth
	leaderHealth interface{ Check() error }
	// guard vouches for humans' requests (started by Run when the
	// request CRD's client is there).
	guard *requests.Guard
	// nodeName is the node this replica runs on ("" unknown): as leader it
	// never powers that node off (docs/safety.md, "The leader's own node").
	nodeName string
}

// Option configures an Agent beyond its configuration.
type Option func(*options)

type options struct {
	dynamic  dynamic.Interface
	nodeName *string
}

// WithNodeName names the node this replica runs on, over the downward
// API's NODE_NAME (tests; "" says it is unknown).
func WithNodeName(name string) Option { return func(o *options) { o.nodeName = &name } }

// nodeName is the node this replica runs on: the downward API's
// spec.nodeName in env NODE_NAME (deploy/, the Helm chart), "" if unset.
func nodeName(o options) string {
	if o.nodeName != nil {
		return *o.nodeName
	}
	return os.Getenv("NODE_NAME")
}

// WithDynamic gives the agent a dynamic client: the inventory reads
// BareMetalHosts with it (inventory.source metal3 or both).
func WithDynamic(d dynamic.Interface) Option { return func(o *options) { o.dynamic = d } }

// WithRemediation gives the agent the clients of the remediation CRs
// (BMCFenceRemediation, for NodeHealthCheck and MachineHealthCheck) and of
// Cluster API Machines.
func (a *Agent) WithRemediation(fencing fencingclient.FencingV1alpha1Interface, dyn dynamic.Interface) *Agent {
	a.fencing, a.dynamic = fencing, dyn
	return a
}

// New builds an agent from a validated configuration.
func New(cfg config.Agent, log *zap.Logger, client kube.Interface, opts ...Option) (*Agent, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	clk := clock.RealClock{}
	// The pods of a node only while it is being fenced: a cache of every
	// pod would grow with the cluster (cluster/podviews.go).
	cl, err := cluster.New(client, cluster.Options{Clock: clk, Log: log.Named("cluster"), Component: "bmcfence", PodsOfFencingNodesOnly: true})
	if err != nil {
		return nil, err
	}
	m := metrics.New()
	// A deleted node's series go with it.
	m.SetNodes(cl.HasNode)
	cl.OnNodeDeleted(m.Forget)
	inv := inventory.New(inventory.Options{
		Config: cfg.Inventory, Namespace: cfg.Namespace, Timeout: cfg.BMC.Timeout, Policy: cfg.Policy,
		Client: client, Dynamic: o.dynamic, Nodes: cl, Observer: m, Log: log.Named("inventory"),
		SecretMaxAge: secretMaxAge,
		HostEvent: func(host *corev1.ObjectReference, reason, message string) {
			cl.ObjectEvent(host, fence.Event{Warning: true, Reason: reason, Message: message})
		},
	})
	leader := cluster.NewLeaderHealth(clk, cluster.LeaderHealthTimeout)
	return &Agent{cfg: cfg, log: log, client: client, clock: clk, cluster: cl, inv: inv, metrics: m,
		leader: leader, leaderHealth: leader, nodeName: nodeName(o)}, nil
}

// Run serves until ctx ends: the endpoints at once, the fencing only while
// this replica leads.
func (a *Agent) Run(ctx context.Context) error {
	v := version.Get()
	a.log.Info("starting bmcfence fence-agent", zap.String("version", v.String()),
		zap.Bool("dryRun", a.cfg.DryRun), zap.String("namespace", a.cfg.Namespace))
	if a.nodeName == "" {
		a.log.Warn("the node this replica runs on is unknown (no NODE_NAME from the downward API's spec.nodeName): the rule that the leader never powers off its own node cannot apply")
	} else {
		a.log.Info("this replica runs on node "+a.nodeName+": while it leads it never powers that node off; another replica does once it leads", zap.String("nodeName", a.nodeName))
	}
	a.metrics.Build(v.Version, v.Commit, v.Go)
	// Before anything else: a setting that weakens a safety property is
	// said at start, in the log and as a metric an alert can watch.
	for _, r := range a.cfg.Risks() {
		a.log.Warn("risky setting: "+r.Message, zap.String("setting", r.Setting))
		a.metrics.Risky(r.Setting)
	}
	servers, err := a.serve()
	if err != nil {
		return err
	}
	defer func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range servers {
			_ = s.Shutdown(shutdown)
		}
	}()
	if err := a.cluster.Start(ctx); err != nil {
		return fmt.Errorf("starting the cluster view: %w", err)
	}
	a.inv.Refresh(ctx)
	go a.inv.Run(ctx, inventoryRefresh)
	// Every replica watches the planned-reboot signals, as it watches the
	// nodes: a new leader knows them from its own first sight.
	go a.watchPlanned(ctx)
	if a.cfg.Inventory.UsesMetal3() {
		go a.watchMetal3(ctx)
	}
	a.startGuard(ctx)
	a.ready.Store(true)
	// Off the path to the election: its list of every pod may take a
	// while in a large cluster.
	go a.warnRiskySettings(ctx)
	go a.trimBinaryPages(ctx)

	lead := func(ctx context.Context) {
		a.leading.Store(true)
		defer a.leading.Store(false)
		a.log.Info("leading: fencing is active")
		if err := a.lead(ctx); err != nil && !errors.Is(err, context.Canceled) {
			a.log.Error("runner stopped", zap.Error(err))
		}
		a.log.Info("no longer leading: fencing stopped")
	}
	if !a.cfg.LeaderElection.Enabled {
		lead(ctx)
		return ctx.Err()
	}
	id := podName()
	le := a.cfg.LeaderElection
	return cluster.RunLeader(ctx, a.client, cluster.LeaderOptions{
		Namespace: a.cfg.Namespace, Name: le.Name, Identity: id,
		LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
		Log: a.log.Named("leader"), Health: a.leader,
	}, lead)
}

// watchMetal3 starts the BareMetalHost informers, retrying every
// inventoryRefresh until they start (the kubeconfig Secret of a management
// cluster created after the agent, a grant added later); meanwhile the
// inventory lists the hosts at each refresh.
func (a *Agent) watchMetal3(ctx context.Context) {
	for {
		err := a.inv.WatchMetal3(ctx, metal3SyncTimeout)
		if err == nil || ctx.Err() != nil {
			return
		}
		a.log.Warn("cannot watch BareMetalHosts; listing them every "+inventoryRefresh.String()+" until the watch starts", zap.Error(err))
		if !a.sleepUntil(ctx, a.clock.Now().Add(inventoryRefresh)) {
			return
		}
	}
}

// trimAgain is when the binary's pages are unmapped a second time after
// the agent is ready: by then a leader has started (its event streams'
// discovery and handshakes, the first reads of every BMC), and what only
// that start-up ran can go too.
const trimAgain = 3 * time.Minute

// trimBinaryPages unmaps the pages of the binary that the start-up touched
// (internal/pagetrim), once when the agent is ready and once trimAgain
// later: about a quarter of the agent's RSS at every fleet size, code and
// data read once and never again. What runs at rest is mapped back from
// the page cache on first use.
func (a *Agent) trimBinaryPages(ctx context.Context) {
	for i := 0; i < 2; i++ {
		if i > 0 && !a.sleepUntil(ctx, a.clock.Now().Add(trimAgain)) {
			return
		}
		r, err := pagetrim.Binary()
		if err != nil {
			a.log.Info("the binary's start-up pages stay mapped", zap.Error(err))
			return
		}
		a.log.Info("unmapped the binary's start-up pages", zap.String("result", r.String()))
	}
}

// metal3SyncTimeout bounds the first listing of the BareMetalHost
// informers: a few thousand slim objects list in seconds.
const metal3SyncTimeout = time.Minute

// lead runs the runner and the probe until leadership ends.
func (a *Agent) lead(ctx context.Context) error {
	// The BMCs' event streams are the leader's (iDRAC9 allows two SSE
	// connections in all): started here, stopped when the lead ends.
	var r *runner.Runner
	events := powerevents.New(powerevents.Options{
		Clock: a.clock, Log: a.log.Named("events"),
		Targets: a.eventTargets,
		Notify: func(node string) {
			if r != nil {
				r.Notify(node)
			}
		},
		OnState:  func() { a.metrics.EventStreams(streamCounts(a.events.Load())) },
		OnStream: a.announceStream,
	})
	a.events.Store(events)
	defer a.events.Store(nil)
	r, err := runner.New(runner.Options{
		Policy: a.cfg.Policy, Clock: a.clock, Cluster: a.cluster, Inventory: a.inv,
		Log: a.log.Named("runner"), Recorder: a.metrics, BMCConcurrency: a.cfg.BMC.Concurrency,
		DryRun: a.cfg.DryRun, VerifyInterval: a.cfg.BMC.ProbeInterval,
		Events:   events,
		NodeName: a.nodeName, KubeletProbe: runner.TCPKubeletProber{},
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		events.Run(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.probeLoop(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.serveRemediations(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.serveRequests(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.recordHistory(ctx)
	}()
	err = r.Run(ctx)
	wg.Wait()
	return err
}

// probeLoop checks every node's fenceability once per probe interval: one
// BMC request per node (its system's URI is cached and its connection kept
// alive by the adapter) that proves credentials, TLS, reachability and
// identity. The nodes are spread evenly over the interval, from a random
// phase, so a thousand BMCs see one request each a minute instead of a
// burst in the same second, and the agent's own CPU stays flat.
func (a *Agent) probeLoop(ctx context.Context) {
	interval := a.cfg.BMC.ProbeInterval
	for round := 0; ctx.Err() == nil; round++ {
		start := a.clock.Now()
		a.probeAll(ctx, round, start, interval)
		if !a.sleepUntil(ctx, start.Add(interval)) {
			return
		}
	}
}

// streamProbeEvery: a node whose BMC's event stream is connected is probed
// in one round of this many, staggered by node. The open stream is the BMC
// answering over TLS with the credentials it was opened with, all the
// time; what it does not show (a changed password, a moved system, the
// identity) waits at most this many intervals (10 minutes by default)
// instead of one. At 1000 nodes the probes' TLS handshakes and dials were
// 18 % of the agent's CPU (docs/scale/n1000). Issue 19: at rest with
// events on, polls fall to what the streams do not cover.
const streamProbeEvery = 10

// probeDue says whether node i of the sorted fleet is probed in this round:
// always in the first, when its BMC's stream is not connected, or when no
// probe has answered for it yet (a node joined) or its last one failed (so
// that its return is noticed); else in one round of streamProbeEvery.
func probeDue(round, i int, streamConnected, unproven bool) bool {
	return round == 0 || !streamConnected || unproven || i%streamProbeEvery == round%streamProbeEvery
}

// sleepUntil waits on the agent's clock until t; false when ctx ended.
func (a *Agent) sleepUntil(ctx context.Context, t time.Time) bool {
	d := t.Sub(a.clock.Now())
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := a.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C():
		return true
	}
}

// probeAll probes every node once, node i of n at start + (phase + i) ×
// interval/n, with at most probeConcurrency probes at once (a BMC that
// hangs holds one slot for the BMC timeout, not the schedule).
func (a *Agent) probeAll(ctx context.Context, round int, start time.Time, interval time.Duration) {
	nodes := a.cluster.Nodes()
	if len(nodes) == 0 {
		return
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	slot := interval / time.Duration(len(nodes))
	phase := time.Duration(rand.Int64N(int64(slot) + 1))
	var g errgroup.Group
	g.SetLimit(probeConcurrency)
	defer func() { _ = g.Wait() }() // every func returns nil
	events := a.events.Load()
	for i, n := range nodes {
		if n.View.Excluded {
			continue
		}
		probed, failed := a.metrics.Probed(n.Name)
		if !probeDue(round, i, streamConnected(events, n.Name), !probed || failed) {
			continue
		}
		if !a.sleepUntil(ctx, start.Add(phase+time.Duration(i)*slot)) {
			return
		}
		c, err := a.inv.Lookup(n.Name)
		if err != nil {
			a.fenceable(n.Name, err)
			continue
		}
		g.Go(func() error {
			// A probe cut short by shutdown says nothing about the BMC.
			if err := c.Probe(ctx); ctx.Err() == nil {
				a.fenceable(n.Name, err)
			}
			return nil
		})
	}
}

// streamConnected: the node's BMC has an event stream open (this replica
// leads and the BMC offers one).
func streamConnected(m *powerevents.Manager, node string) bool {
	if m == nil {
		return false
	}
	st, ok := m.NodeState(node)
	return ok && st.Mode == redfish.StreamConnected
}

// fenceable records a probe result and announces a change.
func (a *Agent) fenceable(node string, err error) {
	if !a.metrics.Fenceable(node, err == nil) {
		return
	}
	if err != nil {
		a.cluster.Event(node, fence.Event{Warning: true, Reason: "FenceUnfenceable",
			Message: fmt.Sprintf("this node cannot be fenced: %v", err)})
		a.log.Warn("node is not fenceable", zap.String("node", node), zap.Error(err))
		return
	}
	a.cluster.Event(node, fence.Event{Reason: "FenceFenceable", Message: "the node's BMC answers correctly again; it can be fenced"})
	a.log.Info("node is fenceable again", zap.String("node", node))
}

// podWarningListTimeout bounds the start-up warning's list of every pod
// (pages of 500; thirty thousand pods list in seconds).
const podWarningListTimeout = 2 * time.Minute

// warnRiskySettings logs what the agent can see that would defeat or slow a
// fence.
func (a *Agent) warnRiskySettings(ctx context.Context) {
	if !a.cfg.Policy.ForceDeletePods {
		a.log.Warn("policy.forceDeletePods is off: failover waits for the pod GC loop (20 s) after the taint")
	}
	for name, err := range a.inv.Problems() {
		a.log.Warn("inventory problem", zap.String("node", name), zap.Error(err))
	}
	for _, n := range a.cluster.Nodes() {
		if _, err := a.inv.Lookup(n.Name); err != nil && !n.View.Excluded {
			a.log.Warn("node has no usable BMC entry: it will never be fenced", zap.String("node", n.Name))
		}
	}
	// Listed in pages and summarized page by page (a list of every pod in
	// a large cluster, decoded at once, was the agent's peak of memory at
	// start).
	listCtx, cancel := context.WithTimeout(ctx, podWarningListTimeout)
	defer cancel()
	pods, err := a.cluster.PodsToleratingOutOfService(listCtx)
	if err != nil {
		a.log.Warn("could not list the pods that tolerate the out-of-service taint", zap.Error(err))
	}
	const shown = 20
	for i, p := range pods {
		if i == shown {
			a.log.Warn(fmt.Sprintf("%d more pods tolerate the out-of-service taint", len(pods)-shown))
			break
		}
		a.log.Warn("pod tolerates the out-of-service taint: it will never be moved off a fenced node", zap.String("pod", p))
	}
}

// serve starts /metrics (over TLS unless server.metricsPlainHTTP) and
// /healthz, /readyz (plain HTTP: the kubelet probes them, and they carry
// nothing secret).
func (a *Agent) serve() ([]*http.Server, error) {
	health := http.NewServeMux()
	health.HandleFunc("/healthz", a.healthz)
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.ready.Load() {
			http.Error(w, "not ready: the cluster view has not synced", http.StatusServiceUnavailable)
			return
		}
		role := "standby"
		if a.leading.Load() {
			role = "leader"
		}
		fmt.Fprintln(w, "ok:", role)
	})
	var metricsHandler http.Handler = promhttp.HandlerFor(a.metrics.Registry, promhttp.HandlerOpts{})
	auth := func(h http.Handler) http.Handler { return h }
	if a.cfg.Server.MetricsAuth {
		auth = newKubeAuth(a.client, a.clock).wrap
	}
	metricsHandler = auth(metricsHandler)
	var tlsCfg *tls.Config
	if !a.cfg.Server.MetricsPlainHTTP {
		certs, err := newCertSource(a.cfg.Server.MetricsCertDir, metricsNames(a.cfg.Namespace), a.clock, a.log.Named("metrics"))
		if err != nil {
			return nil, err
		}
		tlsCfg = certs.tlsConfig()
	}
	if a.cfg.Server.MetricsAddress == a.cfg.Server.HealthAddress {
		// One listener: the probes then speak HTTPS too (httpGet scheme
		// HTTPS; the kubelet does not verify the certificate).
		health.Handle("/metrics", metricsHandler)
		a.servePprof(health, auth)
		s, err := listen(a.cfg.Server.HealthAddress, health, tlsCfg, a.log)
		if err != nil {
			return nil, err
		}
		return []*http.Server{s}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler)
	a.servePprof(mux, auth)
	ms, err := listen(a.cfg.Server.MetricsAddress, mux, tlsCfg, a.log)
	if err != nil {
		return nil, err
	}
	hs, err := listen(a.cfg.Server.HealthAddress, health, nil, a.log)
	if err != nil {
		_ = ms.Close()
		return nil, err
	}
	return []*http.Server{ms, hs}, nil
}

// servePprof serves Go's profiles under /debug/pprof/ when server.pprof is
// on, behind the same auth as /metrics (config.Validate allows it without
// metricsAuth only on a loopback address).
func (a *Agent) servePprof(mux *http.ServeMux, auth func(http.Handler) http.Handler) {
	if !a.cfg.Server.Pprof {
		return
	}
	a.log.Info("serving Go profiles under /debug/pprof/ (server.pprof)", zap.String("address", a.cfg.Server.MetricsAddress),
		zap.Bool("metricsAuth", a.cfg.Server.MetricsAuth))
	mux.Handle("/debug/pprof/", auth(http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/cmdline", auth(http.HandlerFunc(pprof.Cmdline)))
	mux.Handle("/debug/pprof/profile", auth(http.HandlerFunc(pprof.Profile)))
	mux.Handle("/debug/pprof/symbol", auth(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("/debug/pprof/trace", auth(http.HandlerFunc(pprof.Trace)))
}

// healthz fails when this replica leads but has stopped renewing its Lease
// (cluster.LeaderHealth), so the kubelet's liveness probe restarts it: it
// would otherwise go on fencing as a leader after a standby took over.
func (a *Agent) healthz(w http.ResponseWriter, _ *http.Request) {
	if err := a.leaderHealth.Check(); err != nil {
		http.Error(w, "unhealthy: "+err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintln(w, "ok")
}

// listen serves h on addr, over TLS when tlsCfg is set.
func listen(addr string, h http.Handler, tlsCfg *tls.Config, log *zap.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	log.Info("serving", zap.String("address", ln.Addr().String()), zap.String("scheme", scheme))
	return start(ln, h, tlsCfg, log), nil
}

// start serves h on ln, over TLS when tlsCfg is set: a plain-HTTP request
// to it gets a 400 and nothing else.
func start(ln net.Listener, h http.Handler, tlsCfg *tls.Config, log *zap.Logger) *http.Server {
	// Handshake errors (a scraper that does not trust the certificate, a
	// plain-HTTP scrape) at debug: say them, without flooding the log.
	errLog, _ := zap.NewStdLogAt(log.Named("http"), zapcore.DebugLevel)
	s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, TLSConfig: tlsCfg, ErrorLog: errLog}
	go func() {
		if tlsCfg != nil {
			_ = s.ServeTLS(ln, "", "")
			return
		}
		_ = s.Serve(ln)
	}()
	return s
}

// serveRemediations runs the remediation CR controller while this replica
// leads, when the CRDs are installed. Without them the agent still fences
// by its own detection; under detection external it then fences nothing,
// and says so.
func (a *Agent) serveRemediations(ctx context.Context) {
	external := a.cfg.Policy.Detection != fence.DetectBuiltin
	if a.fencing == nil {
		if external {
			a.log.Error("detection is " + a.cfg.Policy.Detection.String() + " but the agent has no client for remediation CRs: no remediation CR will be served")
		}
		return
	}
	gv := fencingv1alpha1.SchemeGroupVersion.String()
	if _, err := a.client.Discovery().ServerResourcesForGroupVersion(gv); err != nil {
		log := a.log.Info
		if external {
			log = a.log.Error
		}
		log("the remediation CRDs ("+gv+") are not served: NodeHealthCheck and MachineHealthCheck remediation is off; install deploy/base/crds",
			zap.String("detection", a.cfg.Policy.Detection.String()), zap.Error(err))
		return
	}
	opts := remediation.Options{
		Client: a.fencing, Nodes: a.cluster, Clock: a.clock, Log: a.log.Named("remediation"),
		Unfenceable: func(node string) string {
			if _, ok := a.inv.Controller(node); !ok {
				return "it has no usable BMC entry in the inventory"
			}
			return ""
		},
	}
	if a.dynamic != nil {
		opts.Machines = remediation.DynamicMachines{Client: a.dynamic}
	}
	c, err := remediation.New(opts)
	if err != nil {
		a.log.Error("remediation controller", zap.Error(err))
		return
	}
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		a.log.Error("remediation controller stopped", zap.Error(err))
	}
}

// guardSyncTimeout bounds how long the agent waits at start for the
// request admission guard's first view: past it, the agent is ready anyway,
// and requests wait (or are refused) until the guard can vouch for them.
const guardSyncTimeout = 30 * time.Second

// startGuard starts watching the admission policy that authenticates
// requests, in every replica and from the start, so that a standby that
// becomes the leader can vouch for the requests created after it started
// (requests.Guard). Requests created before its first view are refused.
func (a *Agent) startGuard(ctx context.Context) {
	if a.fencing == nil {
		return
	}
	a.guard = requests.NewGuard(a.client, a.fencing.BMCFenceRequests(), a.clock, a.log.Named("admission"))
	synced := make(chan struct{})
	go a.guard.Run(ctx, synced)
	timer := a.clock.NewTimer(guardSyncTimeout)
	defer timer.Stop()
	select {
	case <-synced:
	case <-ctx.Done():
	case <-timer.C():
		a.log.Warn("the request admission policy could not be read within " + guardSyncTimeout.String() + ": requests wait until it is (check the agent's grants on validatingadmissionpolicies and their bindings)")
	}
}

// serveRequests runs the controller of humans' requests (BMCFenceRequest)
// while this replica leads, when the CRDs are installed.
func (a *Agent) serveRequests(ctx context.Context) {
	if a.fencing == nil {
		return
	}
	gv := fencingv1alpha1.SchemeGroupVersion.String()
	if _, err := a.client.Discovery().ServerResourcesForGroupVersion(gv); err != nil {
		a.log.Error("the request CRD ("+gv+") is not served: kubectl fence fence|confirm|abort|unfence cannot reach the agent; install deploy/base/crds", zap.Error(err))
		return
	}
	c, err := requests.New(requests.Options{
		Client: a.fencing, Cluster: a.cluster, Guard: a.guard,
		MaxRequestAge: a.cfg.Policy.MaxRequestAge, TTL: a.cfg.Requests.TTL, Clock: a.clock, Log: a.log.Named("requests"),
		Collected:         func(o fencingv1alpha1.RequestOutcome) { a.metrics.RequestCollected(string(o)) },
		HistoryMaxPerNode: a.cfg.History.MaxPerNode, HistoryMaxAge: a.cfg.History.MaxAge, Who: "agent " + podName(),
	})
	if err != nil {
		a.log.Error("request controller", zap.Error(err))
		return
	}
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		a.log.Error("request controller stopped", zap.Error(err))
	}
}

// podName names this replica: the pod's name, else the host's.
func podName() string {
	if pod := os.Getenv("POD_NAME"); pod != "" {
		return pod
	}
	host, _ := os.Hostname()
	return host
}

// recordHistory keeps the fence records (BMCFenceRecord) while this replica
// leads, when the CRDs are installed.
func (a *Agent) recordHistory(ctx context.Context) {
	if a.fencing == nil {
		return
	}
	if _, err := a.client.Discovery().ServerResourcesForGroupVersion(fencingv1alpha1.SchemeGroupVersion.String()); err != nil {
		a.log.Error("the record CRD is not served: fences leave no durable history; install deploy/base/crds", zap.Error(err))
		return
	}
	r, err := history.New(history.Options{
		Client: a.fencing, Nodes: a.cluster, MaxPerNode: a.cfg.History.MaxPerNode, MaxAge: a.cfg.History.MaxAge,
		Who: "agent " + podName(), Clock: a.clock, Log: a.log.Named("history"),
	})
	if err != nil {
		a.log.Error("history recorder", zap.Error(err))
		return
	}
	if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		a.log.Error("history recorder stopped", zap.Error(err))
	}
}

// eventTargets lists each node's BMC target for the event streams.
func (a *Agent) eventTargets() map[string]bmc.Target {
	out := map[string]bmc.Target{}
	for _, n := range a.cluster.Nodes() {
		if n.View.Excluded {
			continue
		}
		if c, err := a.inv.Lookup(n.Name); err == nil {
			out[n.Name] = c.Target
		}
	}
	return out
}

// streamCounts is the metric's view of the streams (none while not
// leading).
func streamCounts(m *powerevents.Manager) map[string]int {
	out := map[string]int{}
	if m == nil {
		return out
	}
	for mode, n := range m.Counts() {
		out[string(mode)] += n
	}
	return out
}

// ReasonEventStream is the Node Event that says whether the node's BMC's
// power events reach the agent; `kubectl fence status` reads the latest.
// Its message starts with the stream's mode ("connected: ", "polling: ").
const ReasonEventStream = "FenceEventStream"

// announceStream says on each node of a BMC that its stream is connected,
// or that the agent polls it only, and why.
func (a *Agent) announceStream(nodes []string, st redfish.StreamState) {
	msg := fmt.Sprintf("%s: the BMC's power events reach the agent (%s); a power-off event may start a fence after one missed Lease renewal", st.Mode, st.URI)
	if st.Mode != redfish.StreamConnected {
		msg = fmt.Sprintf("%s: the BMC's power events do not reach the agent (%s); it learns from polling only", st.Mode, st.Reason)
	}
	for _, n := range nodes {
		a.cluster.Event(n, fence.Event{Reason: ReasonEventStream, Message: msg})
	}
}

// watchPlanned watches the planned-reboot signals of kured, NodeMaintenance
// and Cluster API (docs/safety.md, "Planned reboots") until ctx ends.
func (a *Agent) watchPlanned(ctx context.Context) {
	k := a.cfg.PlannedReboots.Kured
	opts := cluster.PlannedOptions{Client: a.client,
		Kured: cluster.KuredLock{Namespace: k.Namespace, DaemonSet: k.DaemonSet, Annotation: k.LockAnnotation}}
	if a.dynamic != nil {
		opts.Dynamic = a.dynamic
	}
	if a.fencing != nil {
		// Its client speaks JSON, as discovery documents always do (the
		// agent's own clientset asks for protobuf).
		opts.Discovery = a.client.Discovery()
	}
	a.cluster.WatchPlanned(ctx, opts)
}
