package cluster

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

// quick timings for elections against the fake clientset: the elector
// runs on the real clock; tests wait on channels, never sleep.
func quickLeader(identity string) LeaderOptions {
	return LeaderOptions{Namespace: "kube-system", Name: "bmcfence", Identity: identity,
		LeaseDuration: 600 * time.Millisecond, RenewDeadline: 400 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}
}

func within(t *testing.T, d time.Duration, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %s", what, d)
	}
}

func TestRunLeaderRejectsBadOptions(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts LeaderOptions
	}{
		{"no identity", LeaderOptions{Namespace: "ns", Name: "n"}},
		{"no name", LeaderOptions{Namespace: "ns", Identity: "a"}},
		{"renew deadline not below the lease duration", LeaderOptions{Namespace: "ns", Name: "n", Identity: "a", LeaseDuration: time.Second, RenewDeadline: time.Second}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := RunLeader(context.Background(), clientgo.Wrap(fake.NewClientset()), tt.opts, func(context.Context) { t.Error("run called") })
			if err == nil {
				t.Fatal("RunLeader accepted invalid options")
			}
		})
	}
}

func TestRunLeaderRunsAndReleasesOnShutdown(t *testing.T) {
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	leading, runReturned, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var holderWhileWindingDown string
	go func() {
		defer close(done)
		if err := RunLeader(ctx, clientgo.Wrap(client), quickLeader("a"), func(runCtx context.Context) {
			close(leading)
			<-runCtx.Done()
			// Still winding down: no one else may lead yet.
			holderWhileWindingDown = holder(client)
			close(runReturned)
		}); err != nil {
			t.Error(err)
		}
	}()
	within(t, 5*time.Second, "leading", leading)
	cancel()
	within(t, 5*time.Second, "run's context cancelled", runReturned)
	within(t, 5*time.Second, "RunLeader returns", done)
	if holderWhileWindingDown != "a" {
		t.Errorf("Lease holder while run was winding down = %q, want a (released only after run returns)", holderWhileWindingDown)
	}
	if h := holder(client); h != "" {
		t.Errorf("Lease still held by %q after shutdown, want released", h)
	}
}

func holder(client *fake.Clientset) string {
	l, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), "bmcfence", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// TestRunLeaderCampaignsAgainAfterLosing: the API server refuses renewals;
// the leader's run is cancelled, and once renewals work again it leads
// again; the two runs never overlap.
func TestRunLeaderCampaignsAgainAfterLosing(t *testing.T) {
	client := fake.NewClientset()
	var refuse, shuttingDown, releasedBeforeShutdown atomic.Bool
	client.PrependReactor("update", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		// A release before our shutdown is the defect: the run that lost
		// may still be winding down. (It goes through, so that a leader
		// that tries one cannot hide it by failing.)
		if l, ok := a.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease); ok && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "" {
			if !shuttingDown.Load() {
				releasedBeforeShutdown.Store(true)
			}
			return false, nil, nil
		}
		if refuse.Load() {
			return true, nil, apierrors.NewServiceUnavailable("etcd is sad")
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var running, overlaps atomic.Int32
	terms := make(chan struct{}, 10)
	lost := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = RunLeader(ctx, clientgo.Wrap(client), quickLeader("a"), func(runCtx context.Context) {
			if running.Add(1) > 1 {
				overlaps.Add(1)
			}
			defer running.Add(-1)
			terms <- struct{}{}
			<-runCtx.Done()
			lost <- struct{}{}
		})
	}()
	within(t, 5*time.Second, "first term", terms)
	refuse.Store(true)
	within(t, 5*time.Second, "leadership lost when renewals fail", lost)
	refuse.Store(false)
	within(t, 5*time.Second, "second term", terms)
	shuttingDown.Store(true)
	cancel()
	within(t, 5*time.Second, "RunLeader returns", done)
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping runs", n)
	}
	if releasedBeforeShutdown.Load() {
		t.Error("the leader released the Lease when it lost a renewal, while its run was still winding down")
	}
}

// /healthz (issue 17): a leader that keeps renewing is healthy however long
// it leads; one whose renewals stop (a renewal stuck on a call that never
// returns) turns unhealthy once leaseDuration + LeaderHealthTimeout pass on
// the fake clock, so the kubelet restarts it. A standby is always healthy.
func TestLeaderHealthFailsWhenRenewalsStop(t *testing.T) {
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	health := NewLeaderHealth(clk, LeaderHealthTimeout)
	if err := health.Check(); err != nil {
		t.Fatalf("a standby: %v", err)
	}
	renewing := make(chan struct{}, 1)
	stall, stalled := make(chan struct{}), make(chan struct{}, 1)
	var stalling atomic.Bool
	client.PrependReactor("update", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		select {
		case renewing <- struct{}{}:
		default:
		}
		if stalling.Load() {
			select {
			case stalled <- struct{}{}:
			default:
			}
			<-stall // the renewal never returns
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	leading, done := make(chan struct{}), make(chan struct{})
	opts := quickLeader("a")
	opts.Health = health
	go func() {
		defer close(done)
		_ = RunLeader(ctx, clientgo.Wrap(client), opts, func(runCtx context.Context) { close(leading); <-runCtx.Done() })
	}()
	defer func() { close(stall); cancel(); <-done }()
	within(t, 5*time.Second, "leading", leading)

	// Renewing: an hour on the fake clock, a renewal after it, healthy.
	clk.Step(time.Hour)
	<-renewing // one that may have begun before the step
	within(t, 5*time.Second, "a renewal", renewing)
	within(t, 5*time.Second, "another renewal (the one before has returned)", renewing)
	if err := health.Check(); err != nil {
		t.Fatalf("a renewing leader: %v", err)
	}

	// The renewals stop.
	stalling.Store(true)
	within(t, 5*time.Second, "a renewal stuck", stalled)
	clk.Step(opts.LeaseDuration + LeaderHealthTimeout - time.Second)
	if err := health.Check(); err != nil {
		t.Fatalf("within leaseDuration + timeout of the last renewal: %v", err)
	}
	clk.Step(2 * time.Second)
	if err := health.Check(); err == nil || !strings.Contains(err.Error(), "stopped renewing") {
		t.Fatalf("a leader whose renewals stopped: Check = %v, want unhealthy", err)
	}
}
