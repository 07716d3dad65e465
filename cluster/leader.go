package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/internal/kube"
)

// Leader election timing, kube-controller-manager's defaults and for the same
// reasons.
const (
	// DefaultLeaseDuration: a standby takes over at most this long after the
	// leader's last renewal. 15 s is small next to a fence's own timescale
	// (a node is suspected only after ~40 s of silence), and long enough
	// that an API server hiccup does not flap leadership.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultRenewDeadline: the leader gives up (and cancels its work) if it
	// cannot renew for this long, 5 s before a standby may take the Lease:
	// that margin is what keeps an old leader's in-flight work from
	// overlapping the new leader's, allowing for clock-rate differences and
	// for cancellation to reach in-flight calls.
	DefaultRenewDeadline = 10 * time.Second
	// DefaultRetryPeriod: how often candidates try to acquire and the
	// leader tries to renew; five attempts fit in one RenewDeadline.
	DefaultRetryPeriod = 2 * time.Second
)

// LeaderOptions configure RunLeader.
type LeaderOptions struct {
	// Namespace and Name of the coordination.k8s.io Lease.
	Namespace, Name string
	// Identity must be unique per candidate (the pod name).
	Identity string
	// Zero values take the defaults above.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Log                                       *zap.Logger
	// Health, when set, learns of every renewal, for /healthz.
	Health *LeaderHealth
	// clock is the elector's (tests); nil: the real one.
	clock clock.Clock
}

func (o *LeaderOptions) defaults() error {
	if o.Namespace == "" || o.Name == "" || o.Identity == "" {
		return errors.New("leader election: Namespace, Name and Identity are required")
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = DefaultRenewDeadline
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = DefaultRetryPeriod
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	return nil
}

// RunLeader campaigns for the Lease and calls run while this process leads,
// with a context cancelled the moment leadership is lost or ctx ends. After
// losing, it waits for run to return and campaigns again, until ctx ends;
// run is never called twice at once. When ctx ends, the Lease is released
// (ReleaseOnCancel) only after run has returned, so a standby never starts
// while our work is still winding down. RunLeader returns nil when ctx ends,
// or an error at once for invalid options.
func RunLeader(ctx context.Context, client kube.Interface, opts LeaderOptions, run func(ctx context.Context)) error {
	if err := opts.defaults(); err != nil {
		return err
	}
	if _, err := newElector(client, opts, func(context.Context) {}, func() {}); err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	for ctx.Err() == nil {
		if err := campaign(ctx, client, opts, run); err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		if ctx.Err() == nil {
			opts.Log.Warn("lost leadership; campaigning again", zap.String("identity", opts.Identity))
		}
	}
	return nil
}

// campaign runs one elector until it stops leading (or
// gives up at the end of ctx), and returns once run has returned too.
func campaign(ctx context.Context, client kube.Interface, opts LeaderOptions, run func(context.Context)) error {
	// The elector's context outlives ctx until run has returned: cancelling
	// it is what releases the Lease.
	electCtx, release := context.WithCancel(context.WithoutCancel(ctx))
	defer release()

	var mu sync.Mutex
	var runDone chan struct{} // set when leading; closed when run returns
	started := func(leadCtx context.Context) {
		opts.Health.leading(true, opts.LeaseDuration)
		runCtx, cancel := context.WithCancel(leadCtx)
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		done := make(chan struct{})
		defer close(done)
		mu.Lock()
		runDone = done
		mu.Unlock()
		// runDone is set before this check, so a shutdown that begins
		// after it waits for run.
		if ctx.Err() != nil || runCtx.Err() != nil {
			return // lost or shut down before we began: do nothing
		}
		opts.Log.Info("leading", zap.String("identity", opts.Identity), zap.String("lease", opts.Namespace+"/"+opts.Name))
		run(runCtx)
	}
	stopped := func() {
		opts.Health.leading(false, opts.LeaseDuration)
		opts.Log.Info("not leading", zap.String("identity", opts.Identity))
	}
	e, err := newElector(client, opts, started, stopped)
	if err != nil {
		return err
	}
	waitRun := func() {
		mu.Lock()
		d := runDone
		mu.Unlock()
		if d != nil {
			<-d
		}
	}
	// On shutdown: stop run (its context follows ctx), wait for it, then
	// let the elector release the Lease.
	shutdown := context.AfterFunc(ctx, func() {
		waitRun()
		release()
	})
	defer shutdown()
	e.run(electCtx)
	// e.run returns when leadership is lost (its context, and so run's, is
	// cancelled), but it starts run in its own goroutine and does not wait.
	// Wait here, so a new campaign never overlaps the old run.
	waitRun()
	return nil
}

func newElector(client kube.Interface, opts LeaderOptions, started func(context.Context), stopped func()) (*elector, error) {
	// client-go's checks of the same timings.
	switch {
	case opts.LeaseDuration <= opts.RenewDeadline:
		return nil, errors.New("the lease duration must be greater than the renew deadline")
	case float64(opts.RenewDeadline) <= jitterFactor*float64(opts.RetryPeriod):
		return nil, fmt.Errorf("the renew deadline must be greater than %v times the retry period", jitterFactor)
	case opts.RetryPeriod <= 0:
		return nil, errors.New("the retry period must be positive")
	}
	clk := opts.clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	e := &elector{
		leases:    client.CoordinationV1().Leases(opts.Namespace),
		namespace: opts.Namespace, name: opts.Name, identity: opts.Identity,
		leaseDuration: opts.LeaseDuration, renewDeadline: opts.RenewDeadline, retryPeriod: opts.RetryPeriod,
		clock: clk, log: opts.Log,
		onStarted: started, onStopped: stopped,
		onNewLeader: func(identity string) {
			opts.Log.Info("leader observed", zap.String("leader", identity), zap.String("identity", opts.Identity))
		},
	}
	if opts.Health != nil {
		e.onRenewed = opts.Health.renewed
	}
	return e, nil
}

// LeaderHealthTimeout is how long past its lease a leader may go without a
// renewal before /healthz fails, as kube-controller-manager allows (20 s):
// by then a standby has taken the Lease, and this replica, still running
// the fencing as if it led, must be restarted by the kubelet.
const LeaderHealthTimeout = 20 * time.Second

// LeaderHealth tells /healthz whether this replica leads but has stopped
// renewing its Lease: a renewal goroutine stuck on a call that never
// returns (no timeout on a half-open connection), or a runner that does not
// stop when leadership ends. Either way the process believes it leads
// while a standby may have taken over; only a restart ends it.
//
// It applies client-go's rule (leaderelection.HealthzAdaptor: leading, and
// no renewal for leaseDuration + timeout) to the renewals the elector
// reports, on an injected clock, so a test can stop the renewals and step a
// fake clock.
type LeaderHealth struct {
	clock   clock.PassiveClock
	timeout time.Duration

	mu        sync.Mutex
	isLeading bool
	duration  time.Duration
	lastRenew time.Time
}

// NewLeaderHealth returns a LeaderHealth on clk, failing timeout past the
// lease (LeaderHealthTimeout).
func NewLeaderHealth(clk clock.PassiveClock, timeout time.Duration) *LeaderHealth {
	return &LeaderHealth{clock: clk, timeout: timeout}
}

// Check returns an error when this replica leads and has not renewed its
// Lease for leaseDuration + timeout; nil otherwise (standby, or renewing).
func (h *LeaderHealth) Check() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	leading, since, limit := h.isLeading, h.clock.Since(h.lastRenew), h.duration+h.timeout
	h.mu.Unlock()
	if leading && since > limit {
		return fmt.Errorf("leading, but the Lease was last renewed %s ago (limit %s): this replica stopped renewing and must be restarted", since.Round(time.Second), limit)
	}
	return nil
}

// leading records that this replica started (true) or stopped leading;
// starting counts as a renewal (the acquire was one).
func (h *LeaderHealth) leading(on bool, leaseDuration time.Duration) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.isLeading, h.duration = on, leaseDuration
	if on {
		h.lastRenew = h.clock.Now()
	}
}

func (h *LeaderHealth) renewed() {
	h.mu.Lock()
	h.lastRenew = h.clock.Now()
	h.mu.Unlock()
}
