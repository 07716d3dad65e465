package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
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
func RunLeader(ctx context.Context, client kubernetes.Interface, opts LeaderOptions, run func(ctx context.Context)) error {
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

// campaign runs one leaderelection.LeaderElector until it stops leading (or
// gives up at the end of ctx), and returns once run has returned too.
func campaign(ctx context.Context, client kubernetes.Interface, opts LeaderOptions, run func(context.Context)) error {
	// The elector's context outlives ctx until run has returned: cancelling
	// it is what releases the Lease.
	electCtx, release := context.WithCancel(context.WithoutCancel(ctx))
	defer release()

	var mu sync.Mutex
	var runDone chan struct{} // set when leading; closed when run returns
	started := func(leadCtx context.Context) {
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
		opts.Log.Info("not leading", zap.String("identity", opts.Identity))
	}
	le, err := newElector(client, opts, started, stopped)
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
	le.Run(electCtx)
	// Run returns when leadership is lost (its context, and so run's, is
	// cancelled), but it starts run in its own goroutine and does not wait.
	// Wait here, so a new campaign never overlaps the old run.
	waitRun()
	return nil
}

func newElector(client kubernetes.Interface, opts LeaderOptions, started func(context.Context), stopped func()) (*leaderelection.LeaderElector, error) {
	return leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.Name},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: opts.Identity},
		},
		LeaseDuration:   opts.LeaseDuration,
		RenewDeadline:   opts.RenewDeadline,
		RetryPeriod:     opts.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            opts.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: started,
			OnStoppedLeading: stopped,
			OnNewLeader: func(identity string) {
				opts.Log.Info("leader observed", zap.String("leader", identity), zap.String("identity", opts.Identity))
			},
		},
	})
}
