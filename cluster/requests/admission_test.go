package requests

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	fencingfake "github.com/bmcfence/bmcfence/client/clientset/versioned/fake"
	"github.com/bmcfence/bmcfence/cluster/history"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

// The API server's objects, as deploy/base/admission.yaml makes them, written
// at t0 (API server time).
func policy(uid string, gen int64) *admissionregistrationv1.ValidatingAdmissionPolicy {
	fail := admissionregistrationv1.Fail
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName, UID: types.UID(uid), Generation: gen, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail},
	}
}

func binding(uid string, gen int64) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName, UID: types.UID(uid), Generation: gen, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: PolicyName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
}

// guardWorld is a Guard over fake clients, driven step by step: take is
// what its informers would deliver, the API server holds what Confirm and
// the barrier read.
type guardWorld struct {
	g       *Guard
	kube    *fake.Clientset
	fencing *fencingfake.Clientset
	clock   *clocktesting.FakeClock
}

func newGuardWorld(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, existing ...*v1alpha1.BMCFenceRequest) *guardWorld {
	t.Helper()
	// The simple clientset writes no managed fields: their times would be
	// the real clock's, and this test runs on a fake one.
	kube := fake.NewSimpleClientset()
	if p != nil {
		_, _ = kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(context.Background(), p, metav1.CreateOptions{})
	}
	if b != nil {
		_, _ = kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(context.Background(), b, metav1.CreateOptions{})
	}
	fencing := fencingfake.NewSimpleClientset()
	for _, r := range existing {
		if _, err := fencing.FencingV1alpha1().BMCFenceRequests().Create(context.Background(), r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	clk := clocktesting.NewFakeClock(t0)
	w := &guardWorld{g: NewGuard(clientgo.Wrap(kube), fencing.FencingV1alpha1().BMCFenceRequests(), clk, nil), kube: kube, fencing: fencing, clock: clk}
	w.sync(t)
	return w
}

// sync is one pass of the guard's loop over what the API server holds now.
func (w *guardWorld) sync(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	p, _ := w.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, PolicyName, metav1.GetOptions{})
	b, _ := w.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, PolicyName, metav1.GetOptions{})
	if p != nil && p.Name == "" {
		p = nil
	}
	if b != nil && b.Name == "" {
		b = nil
	}
	w.g.take(p, b)
	if w.g.needsBarrier() {
		w.g.listBarrier(ctx)
	}
}

// newRequest is a request created now (our clock and the API server's
// agree in this test), seen by the agent now.
func (w *guardWorld) newRequest(t *testing.T, name string) (*v1alpha1.BMCFenceRequest, time.Time) {
	t.Helper()
	r := request(name, v1alpha1.ActionConfirm)
	r.UID = types.UID("uid-" + name)
	r.CreationTimestamp = metav1.NewTime(w.clock.Now())
	if _, err := w.fencing.FencingV1alpha1().BMCFenceRequests().Create(context.Background(), r, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return r, w.clock.Now()
}

func (w *guardWorld) deletePolicy(t *testing.T) {
	t.Helper()
	if err := w.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), PolicyName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func wantRefused(t *testing.T, err error, says string) {
	t.Helper()
	if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), says) {
		t.Errorf("Vouch = %v; want it refused (%v), saying %q", err, ErrUnauthenticated, says)
	}
}

// Issue 17, defect 4: the API server ignores a binding whose policy is
// missing, so nothing checks requestedBy. A binding alone vouches for
// nothing: a request written in an attester's name is refused, with an Event
// on the node, a fence record in its history, and the request's status
// saying so.
func TestRequestsAreNotTrustedWhenOnlyTheBindingExists(t *testing.T) {
	gw := newGuardWorld(t, nil, binding("b1", 1))
	forged, seen := gw.newRequest(t, "w1-confirm-forged")
	gw.clock.Step(time.Second)
	gw.g.Confirm(context.Background())
	wantRefused(t, gw.g.Vouch(forged, seen), "does not exist (its binding alone checks nothing")

	// Through the controller: refused, said on the node and in history.
	w := newWorld(t, gw.g, forged)
	w.clock.Step(time.Second)
	got := w.reconcile(t, forged.Name)
	if got.Status.Outcome != v1alpha1.OutcomeRefused || !strings.Contains(got.Status.Message, "its binding alone checks nothing") {
		t.Errorf("status %+v, want Refused saying the policy is missing", got.Status)
	}
	if len(w.cluster.offered) != 0 {
		t.Errorf("offered to the engine: %v", w.cluster.offered)
	}
	if len(w.cluster.events) != 1 || w.cluster.events[0].Reason != "FenceRequestRefused" || !strings.Contains(w.cluster.events[0].Message, "in the name of alice") {
		t.Errorf("events %+v, want one FenceRequestRefused naming whose name it was written in", w.cluster.events)
	}
	recs, err := w.client.FencingV1alpha1().BMCFenceRecords().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs.Items) != 1 || recs.Items[0].Status.Outcome != history.OutcomeRefused || recs.Items[0].Spec.NodeName != "w1" || got.Status.Record != recs.Items[0].Name {
		t.Errorf("history %+v (status.record %q): want one Refused record of w1, named in the request's status", recs.Items, got.Status.Record)
	}
}

// What the guard vouches for: only a request created while it watched the
// policy and its binding in force, both unchanged until the request is
// taken, and confirmed by a read after the request was seen.
func TestGuardVouchesOnlyWhileThePolicyIsObservedInForce(t *testing.T) {
	t.Run("created while in force, confirmed after it was seen", func(t *testing.T) {
		w := newGuardWorld(t, policy("p1", 1), binding("b1", 1))
		r, seen := w.newRequest(t, "r1")
		if err := w.g.Vouch(r, seen); !errors.Is(err, ErrNotYet) {
			t.Errorf("before a read that began after it was seen: %v, want %v", err, ErrNotYet)
		}
		w.g.Confirm(context.Background())
		if err := w.g.Vouch(r, seen); err != nil {
			t.Errorf("Vouch = %v, want nil", err)
		}
		w.clock.Step(confirmMaxAge + time.Second)
		if err := w.g.Vouch(r, seen); !errors.Is(err, ErrNotYet) {
			t.Errorf("with the last read %s old: %v, want %v", confirmMaxAge+time.Second, err, ErrNotYet)
		}
	})
	t.Run("created before the agent started", func(t *testing.T) {
		old := request("r0", v1alpha1.ActionConfirm)
		old.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute))
		w := newGuardWorld(t, policy("p1", 1), binding("b1", 1), old)
		w.clock.Step(time.Second)
		w.g.Confirm(context.Background())
		wantRefused(t, w.g.Vouch(old, w.clock.Now()), "created before this agent observed the admission policy")
	})
	t.Run("the policy deleted before it is taken", func(t *testing.T) {
		w := newGuardWorld(t, policy("p1", 1), binding("b1", 1))
		r, seen := w.newRequest(t, "r1")
		w.clock.Step(time.Second)
		w.g.Confirm(context.Background())
		w.deletePolicy(t)
		w.sync(t) // the watch delivers the deletion
		wantRefused(t, w.g.Vouch(r, seen), "does not exist")
	})
	t.Run("the policy deleted, a request forged, the policy re-created", func(t *testing.T) {
		w := newGuardWorld(t, policy("p1", 1), binding("b1", 1))
		w.deletePolicy(t)
		w.sync(t)
		w.clock.Step(time.Second)
		forged, seen := w.newRequest(t, "forged")
		w.clock.Step(time.Second)
		if _, err := w.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(context.Background(), policy("p2", 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		w.sync(t) // a new epoch: its barrier holds the forged request
		w.clock.Step(time.Second)
		w.g.Confirm(context.Background())
		wantRefused(t, w.g.Vouch(forged, seen), "created before this agent observed")
	})
	t.Run("the policy changed (a new generation) before it is taken", func(t *testing.T) {
		w := newGuardWorld(t, policy("p1", 1), binding("b1", 1))
		r, seen := w.newRequest(t, "r1")
		w.clock.Step(time.Second)
		if _, err := w.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Update(context.Background(), policy("p1", 2), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Not yet seen by the watch: the read at Confirm finds it.
		w.g.Confirm(context.Background())
		wantRefused(t, w.g.Vouch(r, seen), "created before this agent observed")
	})
	t.Run("a watch error: nothing vouched for until a read after it", func(t *testing.T) {
		w := newGuardWorld(t, policy("p1", 1), binding("b1", 1))
		r, seen := w.newRequest(t, "r1")
		w.clock.Step(time.Second)
		w.g.Confirm(context.Background())
		w.clock.Step(time.Second)
		w.g.gap(errors.New("watch closed: connection reset"))
		if err := w.g.Vouch(r, seen); !errors.Is(err, ErrNotYet) {
			t.Errorf("after a gap: %v, want %v", err, ErrNotYet)
		}
		w.clock.Step(time.Second)
		w.g.Confirm(context.Background()) // the same objects: nothing happened in between
		if err := w.g.Vouch(r, seen); err != nil {
			t.Errorf("after a read that found the same objects: %v, want nil", err)
		}
	})
	t.Run("created right after the policy's last write", func(t *testing.T) {
		p := policy("p1", 1)
		p.CreationTimestamp = metav1.NewTime(t0.Add(-time.Second))
		w := newGuardWorld(t, p, binding("b1", 1))
		r, seen := w.newRequest(t, "r1")
		w.clock.Step(time.Second)
		w.g.Confirm(context.Background())
		wantRefused(t, w.g.Vouch(r, seen), "the API servers may not have enforced it yet")
	})
	for name, tt := range map[string]struct {
		p    *admissionregistrationv1.ValidatingAdmissionPolicy
		b    *admissionregistrationv1.ValidatingAdmissionPolicyBinding
		says string
	}{
		"failurePolicy Ignore": {p: func() *admissionregistrationv1.ValidatingAdmissionPolicy {
			p, ignore := policy("p1", 1), admissionregistrationv1.Ignore
			p.Spec.FailurePolicy = &ignore
			return p
		}(), b: binding("b1", 1), says: "failurePolicy Ignore"},
		"a binding that only warns": {p: policy("p1", 1), b: func() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
			b := binding("b1", 1)
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
			return b
		}(), says: "does not deny"},
		"a binding that narrows the policy": {p: policy("p1", 1), b: func() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
			b := binding("b1", 1)
			b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"checked": "yes"}}}
			return b
		}(), says: "narrows what the policy applies to"},
		"no binding": {p: policy("p1", 1), says: "ValidatingAdmissionPolicyBinding " + PolicyName + " does not exist"},
	} {
		t.Run(name, func(t *testing.T) {
			w := newGuardWorld(t, tt.p, tt.b)
			r, seen := w.newRequest(t, "r1")
			w.clock.Step(time.Second)
			w.g.Confirm(context.Background())
			wantRefused(t, w.g.Vouch(r, seen), tt.says)
		})
	}
}

// The engine takes a request only while the guard vouches for it: the
// controller offers it with the guard's check, which the cluster view asks
// when the runner reads the node and again right before the state write
// that takes it in (cluster.TestOfferedRequestIsTakenOnlyWhileVouchedFor).
func TestOfferCarriesTheGuardsCheck(t *testing.T) {
	gw := newGuardWorld(t, policy("p1", 1), binding("b1", 1))
	gw.clock.Step(time.Second)
	r, _ := gw.newRequest(t, "w1-fence-1")
	fc := &fakeCluster{nodes: map[string]bool{"w1": true}, offered: map[string]fence.Command{}, vouch: map[string]func() error{}}
	c, err := New(Options{Client: gw.fencing.FencingV1alpha1(), Cluster: fc, Guard: gw.g, MaxRequestAge: 15 * time.Minute, Clock: gw.clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.informer.GetStore().Add(r); err != nil { // as its informer would
		t.Fatal(err)
	}
	c.ReconcileAll(context.Background()) // seen, then confirmed: offered at once
	if _, ok := fc.offered["w1/w1-fence-1"]; !ok {
		t.Fatalf("not offered: %v", fc.offered)
	}
	check := fc.vouch["w1/w1-fence-1"]
	if check == nil {
		t.Fatal("offered without the guard's check")
	}
	if err := check(); err != nil {
		t.Fatalf("the offer's check: %v", err)
	}
	gw.deletePolicy(t)
	gw.sync(t)
	if err := check(); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("the offer's check after the policy was deleted: %v, want %v", err, ErrUnauthenticated)
	}
}
