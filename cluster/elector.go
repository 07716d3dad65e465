package cluster

import (
	"context"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/internal/kube"
	"github.com/bmcfence/bmcfence/internal/mutant"
)

// elector campaigns for a coordination.k8s.io Lease and holds it: client-go's
// LeaderElector (tools/leaderelection, non-coordinated, its Lease lock),
// rebuilt on package kube's Lease client. client-go's package links every
// API group's client (it imports the whole Clientset for coordinated
// election), which is most of the agent's binary pages (package kube); the
// algorithm is small enough to keep here, on an injected clock, with a test
// for each of its rules (elector_test.go).
//
// Its rules, as client-go's:
//   - every write is an Update with the resourceVersion last read, so a
//     write based on a stale read fails and nothing is overwritten;
//   - a Lease held by another is taken only once its record has stayed
//     unchanged for the record's lease duration on our clock, counted from
//     when we first saw that record (not from its renewTime, written by
//     another clock);
//   - the leader renews every retryPeriod, and when a round of attempts
//     has not succeeded within renewDeadline (shorter than the lease
//     duration) it stops leading: its work is cancelled before a standby
//     may take over;
//   - on shutdown the Lease is released (holder cleared, duration 1 s),
//     only if it still names us; a leader that lost a renewal lets it
//     expire instead (run).
type elector struct {
	leases                    kube.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
	namespace, name, identity string

	leaseDuration, renewDeadline, retryPeriod time.Duration

	clock clock.Clock
	log   *zap.Logger
	// onStarted runs in its own goroutine when we lead, with a context
	// cancelled when we stop; onStopped runs when run returns;
	// onNewLeader when the holder we observe changes; onRenewed after
	// every write that holds the Lease for us (nil: none).
	onStarted   func(context.Context)
	onStopped   func()
	onNewLeader func(identity string)
	onRenewed   func()

	// Only run's goroutine touches these.
	lease      *coordinationv1.Lease // as last read or written: the next Update's base
	observed   leaderRecord
	observedAt time.Time // when observed last changed, on our clock
	reported   string
}

// leaderRecord is what a Lease says about its holder.
type leaderRecord struct {
	holder            string
	duration          time.Duration
	acquired, renewed time.Time
	transitions       int32
}

func recordOf(s coordinationv1.LeaseSpec) leaderRecord {
	var r leaderRecord
	if s.HolderIdentity != nil {
		r.holder = *s.HolderIdentity
	}
	if s.LeaseDurationSeconds != nil {
		r.duration = time.Duration(*s.LeaseDurationSeconds) * time.Second
	}
	if s.AcquireTime != nil {
		r.acquired = s.AcquireTime.Time
	}
	if s.RenewTime != nil {
		r.renewed = s.RenewTime.Time
	}
	if s.LeaseTransitions != nil {
		r.transitions = *s.LeaseTransitions
	}
	return r
}

func (r leaderRecord) spec() coordinationv1.LeaseSpec {
	return coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To(r.holder),
		// Whole seconds, rounded up: a reader waits at least as long.
		LeaseDurationSeconds: ptr.To(int32((r.duration + time.Second - 1) / time.Second)),
		AcquireTime:          &metav1.MicroTime{Time: r.acquired},
		RenewTime:            &metav1.MicroTime{Time: r.renewed},
		LeaseTransitions:     ptr.To(r.transitions),
	}
}

// jitterFactor spreads the candidates' attempts, as client-go's.
const jitterFactor = 1.2

// run campaigns until it leads (or ctx ends), then leads until a renewal
// round fails or ctx ends; on shutdown it releases the Lease.
func (e *elector) run(ctx context.Context) {
	defer e.onStopped()
	if !e.acquire(ctx) {
		return
	}
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go e.onStarted(leadCtx)
	e.renew(leadCtx)
	cancel()
	// On shutdown (ctx ended), RunLeader has waited for our work to
	// return before ending ctx, so the Lease may go at once. On a lost
	// renewal our work is only now being cancelled: the Lease expires
	// instead, which gives it the lease duration to stop. (client-go
	// releases in both cases.)
	if ctx.Err() != nil || mutant.On(mutant.ElectorKeepOnLoss) {
		e.release()
	}
}

func (e *elector) acquire(ctx context.Context) bool {
	for {
		ok := e.tryAcquireOrRenew(ctx)
		e.report()
		if ok {
			e.log.Info("acquired the leader Lease", zap.String("lease", e.name))
			return true
		}
		wait := e.retryPeriod + time.Duration(rand.Float64()*jitterFactor*float64(e.retryPeriod))
		if !e.sleep(ctx, wait) {
			return false
		}
	}
}

// renew renews every retryPeriod until a round fails or ctx ends.
func (e *elector) renew(ctx context.Context) {
	for ctx.Err() == nil {
		ok := e.renewRound(ctx)
		e.report()
		if !ok {
			if ctx.Err() == nil {
				e.log.Info("failed to renew the leader Lease within the renew deadline", zap.String("lease", e.name), zap.Duration("renewDeadline", e.renewDeadline))
			}
			return
		}
		if !e.sleep(ctx, e.retryPeriod) {
			return
		}
	}
}

// renewRound tries at once, then every retryPeriod, until one attempt
// succeeds or renewDeadline passes on our clock (which also cancels the
// attempt in flight).
func (e *elector) renewRound(ctx context.Context) bool {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := e.clock.NewTimer(e.renewDeadline)
	defer deadline.Stop()
	go func() {
		select {
		case <-deadline.C():
			if mutant.On(mutant.ElectorRenewDeadline) {
				<-rctx.Done()
				return
			}
			cancel()
		case <-rctx.Done():
		}
	}()
	for {
		if e.tryAcquireOrRenew(rctx) {
			return true
		}
		if !e.sleep(rctx, e.retryPeriod) {
			return false
		}
	}
}

// sleep waits d on the clock; false if ctx ended first.
func (e *elector) sleep(ctx context.Context, d time.Duration) bool {
	t := e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return ctx.Err() == nil
	}
}

func (e *elector) isLeader() bool { return e.observed.holder == e.identity }

// leaseValid: the record we observe has not yet lasted its duration on our
// clock.
func (e *elector) leaseValid(now time.Time) bool {
	return e.observedAt.Add(e.observed.duration).After(now)
}

func (e *elector) setObserved(r leaderRecord) {
	e.observed, e.observedAt = r, e.clock.Now()
}

// same: the records say the same (client-go compares them serialized).
func (r leaderRecord) same(o leaderRecord) bool {
	return r.holder == o.holder && r.duration == o.duration && r.acquired.Equal(o.acquired) &&
		r.renewed.Equal(o.renewed) && r.transitions == o.transitions
}

// tryAcquireOrRenew is one attempt, client-go's tryAcquireOrRenew.
func (e *elector) tryAcquireOrRenew(ctx context.Context) bool {
	now := e.clock.Now()
	rec := leaderRecord{holder: e.identity, duration: e.leaseDuration, acquired: now, renewed: now}

	// Leading, within our lease: renew from the object we last wrote. A
	// conflict (someone wrote since) falls through to a read.
	if e.isLeader() && e.leaseValid(now) && e.lease != nil {
		rec.acquired, rec.transitions = e.observed.acquired, e.observed.transitions
		if e.update(ctx, rec) == nil {
			return true
		}
	}

	lease, err := e.leases.Get(ctx, e.name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			e.log.Debug("reading the leader Lease", zap.String("lease", e.name), zap.Error(err))
			return false
		}
		created, err := e.leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.namespace, Name: e.name},
			Spec:       rec.spec(),
		}, metav1.CreateOptions{})
		if err != nil {
			e.log.Debug("creating the leader Lease", zap.String("lease", e.name), zap.Error(err))
			return false
		}
		e.wrote(created, rec)
		return true
	}
	e.lease = lease
	if cur := recordOf(lease.Spec); !cur.same(e.observed) {
		e.setObserved(cur)
		if mutant.On(mutant.ElectorOwnClock) {
			e.observedAt = cur.renewed
		}
	}
	if e.observed.holder != "" && e.leaseValid(now) && !e.isLeader() {
		return false // held by another, and not yet expired on our clock
	}
	if e.isLeader() {
		rec.acquired, rec.transitions = e.observed.acquired, e.observed.transitions
	} else {
		rec.transitions = e.observed.transitions + 1
	}
	return e.update(ctx, rec) == nil
}

// update writes rec over the Lease last read or written, with its
// resourceVersion.
func (e *elector) update(ctx context.Context, rec leaderRecord) error {
	next := e.lease.DeepCopy()
	next.Spec = rec.spec()
	if mutant.On(mutant.ElectorGuardedWrite) {
		next.ResourceVersion = "" // an unconditional write
	}
	updated, err := e.leases.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		e.log.Debug("updating the leader Lease", zap.String("lease", e.name), zap.Error(err))
		return err
	}
	e.wrote(updated, rec)
	return nil
}

func (e *elector) wrote(l *coordinationv1.Lease, rec leaderRecord) {
	e.lease = l
	e.setObserved(recordOf(l.Spec))
	if rec.holder == e.identity && e.onRenewed != nil {
		e.onRenewed()
	}
}

// release clears the holder (duration 1 s, so a standby takes over at
// once) if the Lease, read now, still names us: a write based on what we
// observed before could clear another's fresh claim.
func (e *elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.renewDeadline)
	defer cancel()
	lease, err := e.leases.Get(ctx, e.name, metav1.GetOptions{})
	if err != nil {
		e.log.Info("cannot release the leader Lease", zap.String("lease", e.name), zap.Error(err))
		return
	}
	cur := recordOf(lease.Spec)
	if cur.holder != e.identity {
		return
	}
	e.lease = lease
	now := e.clock.Now()
	if err := e.update(ctx, leaderRecord{duration: time.Second, acquired: now, renewed: now, transitions: cur.transitions}); err != nil {
		e.log.Info("cannot release the leader Lease", zap.String("lease", e.name), zap.Error(err))
	}
}

// report calls onNewLeader when the observed holder changed.
func (e *elector) report() {
	if e.observed.holder == e.reported {
		return
	}
	e.reported = e.observed.holder
	if e.onNewLeader != nil {
		e.onNewLeader(e.reported)
	}
}
