package cluster

import (
	"context"
	goruntime "runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

var electorEpoch = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

const heldDuration = 2 * DefaultLeaseDuration

// testElector is candidate id on client, on clk, with the agent's default
// timings (15 s lease, 10 s deadline, 2 s retry).
func testElector(t *testing.T, client *fake.Clientset, clk *clocktesting.FakeClock, id string) *elector {
	t.Helper()
	e, err := newElector(clientgo.Wrap(client), LeaderOptions{Namespace: "kube-system", Name: "bmcfence", Identity: id,
		LeaseDuration: DefaultLeaseDuration, RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod,
		Log: zap.NewNop(), clock: clk}, func(context.Context) {}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// heldLease is the Lease as another candidate wrote it, renewTime by its
// own clock (here: a day off ours, which must not matter), with a lease
// duration of its own (heldDuration, twice ours: the record's counts).
func heldLease(holder string, transitions int32) *coordinationv1.Lease {
	old := metav1.NewMicroTime(electorEpoch.Add(-24 * time.Hour))
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bmcfence", ResourceVersion: "1"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(heldDuration / time.Second)),
			AcquireTime: &old, RenewTime: &old, LeaseTransitions: ptr.To(transitions)},
	}
}

func leaseNow(t *testing.T, client *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), "bmcfence", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A Lease held by another is taken only after its record has stayed
// unchanged for the record's duration (not ours) on our clock, from when we
// first saw it; its renewTime (another machine's clock, a day old here)
// proves nothing.
func TestElectorWaitsTheLeaseDurationOnItsOwnClock(t *testing.T) {
	client := fake.NewClientset(heldLease("b", 3))
	clk := clocktesting.NewFakeClock(electorEpoch)
	e := testElector(t, client, clk, "a")
	ctx := context.Background()
	if e.tryAcquireOrRenew(ctx) {
		t.Fatal("took a Lease another holds the first time it saw it")
	}
	clk.Step(DefaultLeaseDuration + time.Second)
	if e.tryAcquireOrRenew(ctx) {
		t.Fatal("took the Lease after our lease duration, before the record's")
	}
	clk.Step(heldDuration - DefaultLeaseDuration - 2*time.Second)
	if e.tryAcquireOrRenew(ctx) {
		t.Fatal("took the Lease before it lasted its duration on our clock")
	}
	clk.Step(2 * time.Second)
	if !e.tryAcquireOrRenew(ctx) {
		t.Fatal("did not take a Lease unchanged for its duration")
	}
	l := leaseNow(t, client)
	if *l.Spec.HolderIdentity != "a" || *l.Spec.LeaseTransitions != 4 {
		t.Fatalf("Lease after the take: holder %q, transitions %d; want a, 4", *l.Spec.HolderIdentity, *l.Spec.LeaseTransitions)
	}
}

// Every change of the record restarts the wait: a holder that renews is
// never overthrown.
func TestElectorWaitRestartsWhenTheHolderRenews(t *testing.T) {
	client := fake.NewClientset(heldLease("b", 0))
	clk := clocktesting.NewFakeClock(electorEpoch)
	e := testElector(t, client, clk, "a")
	ctx := context.Background()
	e.tryAcquireOrRenew(ctx)
	for i := 0; i < 10; i++ {
		clk.Step(10 * time.Second)
		l := leaseNow(t, client)
		l.Spec.RenewTime = &metav1.MicroTime{Time: clk.Now()}
		l.ResourceVersion = ""
		if _, err := client.CoordinationV1().Leases("kube-system").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		clk.Step(4 * time.Second)
		if e.tryAcquireOrRenew(ctx) {
			t.Fatalf("took the Lease from a holder that renewed %s ago", 4*time.Second)
		}
	}
}

// leaseVersions makes the fake's Lease writes behave as the API server's
// (client-go's fake tracker ignores resourceVersions): every write gets a
// new one, and an Update whose resourceVersion is not the stored one fails
// with Conflict (an empty one is unconditional).
type leaseVersions struct {
	client *fake.Clientset
	mu     sync.Mutex
	next   int
}

var leasesGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")

func guardLeaseVersions(client *fake.Clientset) *leaseVersions {
	v := &leaseVersions{client: client, next: 100}
	client.PrependReactor("create", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		l := a.(clienttesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		v.mu.Lock()
		defer v.mu.Unlock()
		v.next++
		l.ResourceVersion = strconv.Itoa(v.next)
		return true, l, client.Tracker().Create(leasesGVR, l, l.Namespace)
	})
	client.PrependReactor("update", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		l := a.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.write(l)
	})
	return v
}

// write stores l if its resourceVersion is the stored one or empty; v.mu
// held.
func (v *leaseVersions) write(l *coordinationv1.Lease) (bool, runtime.Object, error) {
	cur, err := v.client.Tracker().Get(leasesGVR, l.Namespace, l.Name)
	if err != nil {
		return true, nil, err
	}
	if l.ResourceVersion != "" && l.ResourceVersion != cur.(*coordinationv1.Lease).ResourceVersion {
		return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), l.Name, nil)
	}
	v.next++
	l.ResourceVersion = strconv.Itoa(v.next)
	return true, l, v.client.Tracker().Update(leasesGVR, l, l.Namespace)
}

// A write based on a stale read fails, and the elector does not take the
// Lease: another candidate's claim between our read and our write wins.
func TestElectorDoesNotOverwriteAClaimMadeAfterItsRead(t *testing.T) {
	client := fake.NewClientset(heldLease("b", 0))
	versions := guardLeaseVersions(client)
	clk := clocktesting.NewFakeClock(electorEpoch)
	e := testElector(t, client, clk, "a")
	ctx := context.Background()
	e.tryAcquireOrRenew(ctx)
	clk.Step(heldDuration + time.Second)
	// c claims the Lease right after a's read.
	var once sync.Once
	client.PrependReactor("get", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		var read runtime.Object
		var err error
		once.Do(func() {
			versions.mu.Lock()
			defer versions.mu.Unlock()
			var cur runtime.Object
			if cur, err = client.Tracker().Get(leasesGVR, "kube-system", "bmcfence"); err != nil {
				return
			}
			read = cur.DeepCopyObject()
			claim := cur.(*coordinationv1.Lease).DeepCopy()
			claim.Spec.HolderIdentity = ptr.To("c")
			claim.Spec.RenewTime = &metav1.MicroTime{Time: clk.Now()}
			_, _, err = versions.write(claim)
		})
		if read == nil && err == nil {
			return false, nil, nil
		}
		return true, read, err
	})
	if e.tryAcquireOrRenew(ctx) {
		t.Fatal("took the Lease although another claimed it after our read")
	}
	if e.isLeader() {
		t.Fatal("believes it leads after a refused write")
	}
	if h := *leaseNow(t, client).Spec.HolderIdentity; h != "c" {
		t.Fatalf("holder %q, want c: our write overwrote a newer claim", h)
	}
}

// A leader whose renewals fail gives up within renewDeadline of the
// round's start on its clock, and not before. A round starts retryPeriod
// after the last renewal (renew), so the leader stops within retryPeriod +
// renewDeadline (12 s by default) of its last renewal, before a standby,
// which waits the lease duration (15 s) from when it saw that renewal, may
// take over. (The whole loop, on the real clock:
// TestRunLeaderCampaignsAgainAfterLosing.)
func TestElectorRenewRoundGivesUpAtTheRenewDeadline(t *testing.T) {
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(electorEpoch)
	e := testElector(t, client, clk, "a")
	ctx := context.Background()
	if !e.tryAcquireOrRenew(ctx) {
		t.Fatal("did not take a free Lease")
	}
	var attempts atomic.Int32
	client.PrependReactor("update", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		attempts.Add(1)
		return true, nil, apierrors.NewServiceUnavailable("etcd is sad")
	})
	start := clk.Now()
	result := make(chan bool, 1)
	go func() { result <- e.renewRound(ctx) }()
	for clk.Since(start) < DefaultRenewDeadline-100*time.Millisecond {
		select {
		case ok := <-result:
			t.Fatalf("round ended (%v) after %s, before the renew deadline", ok, clk.Since(start))
		default:
		}
		if clk.HasWaiters() {
			clk.Step(100 * time.Millisecond)
		} else {
			goruntime.Gosched()
		}
	}
	clk.Step(200 * time.Millisecond)
	select {
	case ok := <-result:
		if ok {
			t.Fatal("a round whose every attempt failed reported a renewal")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the round did not end at the renew deadline")
	}
	if attempts.Load() == 0 {
		t.Error("no attempt in the round")
	}
}

// Release clears the holder only if the Lease still names us.
func TestElectorReleasesOnlyItsOwnLease(t *testing.T) {
	for _, tt := range []struct {
		name, holder, want string
	}{
		{"still ours", "a", ""},
		{"taken by another meanwhile", "b", "b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			clk := clocktesting.NewFakeClock(electorEpoch)
			e := testElector(t, client, clk, "a")
			if !e.tryAcquireOrRenew(context.Background()) {
				t.Fatal("did not take a free Lease")
			}
			l := leaseNow(t, client)
			l.Spec.HolderIdentity = ptr.To(tt.holder)
			if _, err := client.CoordinationV1().Leases("kube-system").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			e.release()
			if got := *leaseNow(t, client).Spec.HolderIdentity; got != tt.want {
				t.Fatalf("holder after release = %q, want %q", got, tt.want)
			}
		})
	}
}
