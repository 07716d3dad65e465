// Package agent wires the fence-agent together: the cluster view, the
// inventory, metrics and health endpoints, leader election, the runner and
// the fenceability probe. cmd/fence-agent is a thin main around it.
package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory"
	"github.com/bmcfence/bmcfence/internal/metrics"
	"github.com/bmcfence/bmcfence/internal/version"
)

// inventoryRefresh is how often the inventory is rebuilt and its CA
// ConfigMaps re-read; secretMaxAge how long a credentials Secret is kept
// before it is read again (spread over its second half by name): a rotated
// BMC password is picked up within it. With a Secret per node, re-reading
// every Secret every 30 s cost 33 GETs a second at 1000 nodes (the scale
// harness); now 1000 Secrets cost about 4 a second, spread out.
const (
	inventoryRefresh = 30 * time.Second
	secretMaxAge     = 5 * time.Minute
)

// probeConcurrency bounds the fenceability probe's BMC calls in flight.
// Probes are spread over the interval (probeAll), so normally one runs at a
// time; the bound matters when BMCs hang: each holds a slot for the BMC
// timeout (10 s), and 32 slots keep the schedule of a thousand nodes on
// time with a hundred of them hanging.
const probeConcurrency = 32

// Agent is one fence-agent process.
type Agent struct {
	cfg     config.Agent
	log     *zap.Logger
	client  kubernetes.Interface
	clock   clock.WithTicker
	cluster *cluster.Cluster
	inv     *inventory.Inventory
	metrics *metrics.Metrics

	ready   atomic.Bool
	leading atomic.Bool
}

// New builds an agent from a validated configuration.
func New(cfg config.Agent, log *zap.Logger, client kubernetes.Interface) (*Agent, error) {
	clk := clock.RealClock{}
	cl, err := cluster.New(client, cluster.Options{Clock: clk, Log: log.Named("cluster"), Component: "bmcfence"})
	if err != nil {
		return nil, err
	}
	m := metrics.New()
	inv := inventory.New(inventory.Options{
		Config: cfg.Inventory, Namespace: cfg.Namespace, Timeout: cfg.BMC.Timeout,
		Client: client, Nodes: cl, Observer: m, Log: log.Named("inventory"),
		SecretMaxAge: secretMaxAge,
	})
	return &Agent{cfg: cfg, log: log, client: client, clock: clk, cluster: cl, inv: inv, metrics: m}, nil
}

// Run serves until ctx ends: the endpoints at once, the fencing only while
// this replica leads.
func (a *Agent) Run(ctx context.Context) error {
	v := version.Get()
	a.log.Info("starting bmcfence fence-agent", zap.String("version", v.String()),
		zap.Bool("dryRun", a.cfg.DryRun), zap.String("namespace", a.cfg.Namespace))
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
	a.ready.Store(true)
	a.warnRiskySettings(ctx)

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
	id, _ := os.Hostname()
	if pod := os.Getenv("POD_NAME"); pod != "" {
		id = pod
	}
	le := a.cfg.LeaderElection
	return cluster.RunLeader(ctx, a.client, cluster.LeaderOptions{
		Namespace: a.cfg.Namespace, Name: le.Name, Identity: id,
		LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
		Log: a.log.Named("leader"),
	}, lead)
}

// lead runs the runner and the probe until leadership ends.
func (a *Agent) lead(ctx context.Context) error {
	r, err := runner.New(runner.Options{
		Policy: a.cfg.Policy, Clock: a.clock, Cluster: a.cluster, Inventory: a.inv,
		Log: a.log.Named("runner"), Recorder: a.metrics, BMCConcurrency: a.cfg.BMC.Concurrency,
		DryRun: a.cfg.DryRun, VerifyInterval: a.cfg.BMC.ProbeInterval,
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.probeLoop(ctx)
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
	for ctx.Err() == nil {
		start := a.clock.Now()
		a.probeAll(ctx, start, interval)
		if !a.sleepUntil(ctx, start.Add(interval)) {
			return
		}
	}
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
func (a *Agent) probeAll(ctx context.Context, start time.Time, interval time.Duration) {
	nodes := a.cluster.Nodes()
	if len(nodes) == 0 {
		return
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	slot := interval / time.Duration(len(nodes))
	phase := time.Duration(rand.Int64N(int64(slot) + 1))
	sem := make(chan struct{}, probeConcurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, n := range nodes {
		if n.View.Excluded {
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
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a.fenceable(n.Name, c.Probe(ctx))
		}()
	}
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
	pods, err := a.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		a.log.Warn("cannot list pods to check their tolerations", zap.Error(err))
		return
	}
	taint := cluster.OutOfServiceTaint()
	for _, p := range pods.Items {
		for _, t := range p.Spec.Tolerations {
			if t.ToleratesTaint(&taint) {
				a.log.Warn("pod tolerates the out-of-service taint: it will never be moved off a fenced node",
					zap.String("pod", p.Namespace+"/"+p.Name), zap.String("node", p.Spec.NodeName))
				break
			}
		}
	}
}

// serve starts /metrics and /healthz, /readyz.
func (a *Agent) serve() ([]*http.Server, error) {
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
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
	if a.cfg.Server.MetricsAuth {
		metricsHandler = newKubeAuth(a.client, a.clock).wrap(metricsHandler)
	}
	if a.cfg.Server.MetricsAddress == a.cfg.Server.HealthAddress {
		health.Handle("/metrics", metricsHandler)
		s, err := listen(a.cfg.Server.HealthAddress, health, a.log)
		if err != nil {
			return nil, err
		}
		return []*http.Server{s}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler)
	ms, err := listen(a.cfg.Server.MetricsAddress, mux, a.log)
	if err != nil {
		return nil, err
	}
	hs, err := listen(a.cfg.Server.HealthAddress, health, a.log)
	if err != nil {
		_ = ms.Close()
		return nil, err
	}
	return []*http.Server{ms, hs}, nil
}

func listen(addr string, h http.Handler, log *zap.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Info("serving", zap.String("address", ln.Addr().String()))
	go func() { _ = s.Serve(ln) }()
	return s, nil
}
