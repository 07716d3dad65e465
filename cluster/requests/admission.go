package requests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned/typed/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/internal/kube"
	"github.com/bmcfence/bmcfence/internal/mutant"
)

// Who asked is the API server's word only while the ValidatingAdmissionPolicy
// PolicyName and its binding (validationActions Deny) are in force: the API
// server ignores a binding whose policy is missing, and then nothing checks
// spec.requestedBy, so an operator without the attester grant could confirm
// in an attester's name. A review of requestedBy by the agent would not help:
// it checks the name the writer claimed, not who wrote it. So the agent acts
// on a request only if it observed the policy and its binding in force,
// continuously, from before the request's creation until it is taken:
//
//   - An epoch begins when the agent sees both in force (the policy present,
//     failurePolicy Fail; the binding naming it, Deny, all requests in its
//     scope). Both are identified by UID and generation: a deletion, a
//     re-creation or any change of either ends the epoch, even one undone
//     since (UIDs are never reused; generations only grow).
//   - Right after an epoch begins, a consistent list of the requests (the
//     barrier) names those that already exist: they were created before the
//     agent could vouch for them (it started, or the policy changed, after
//     them) and are refused.
//   - A request created within admissionSettle of the policy's or the
//     binding's last write (on the API server's clock, both times) is
//     refused: the API servers' own view of the policy may lag its write.
//   - A watch error is a gap: no request is vouched for until a consistent
//     read of both objects, made after the gap, shows them unchanged (same
//     UIDs and generations prove nothing happened in between).
//   - At the take (the state write that takes a request in) the epoch must
//     be the request's, and a consistent read no older than confirmMaxAge
//     must have shown both objects unchanged.
//
// A refusal says why, as an Event on the node, in the request's status and
// in the node's fence history. What remains assumed: that the API servers
// enforce a policy within admissionSettle of its write.

// ErrNotYet: the guard cannot vouch for a request now, but may later (an
// epoch's barrier not done, a confirmation too old, a gap not yet closed).
// The request waits; it is not refused.
var ErrNotYet = errors.New("cannot vouch for requests yet")

const (
	// admissionSettle: a request created this soon after the policy's or
	// the binding's last write (API server timestamps, whole seconds) may
	// have been admitted by an API server that had not seen it yet. The
	// API servers' policy informers act within milliseconds; two seconds
	// of timestamp resolution and a margin.
	admissionSettle = 3 * time.Second
	// confirmMaxAge bounds how old the last consistent read of the policy
	// and its binding may be when a request is taken: the controller
	// confirms every resync (2 s) while a request is pending, so a watch
	// that stalled silently is caught within this.
	confirmMaxAge = 10 * time.Second
)

// admissionKey identifies the policy and binding an epoch stands on.
type admissionKey struct {
	policyUID, bindingUID types.UID
	policyGen, bindingGen int64
}

// Guard vouches for requests (Vouch); Run keeps its view. It runs in
// every replica from the agent's start, not only while leading: a standby
// that becomes the leader can vouch for requests created after it started.
type Guard struct {
	client   kube.Interface
	requests fencingclient.BMCFenceRequestInterface
	clock    clock.WithTicker
	log      *zap.Logger

	policies, bindings cache.SharedIndexInformer
	kick               chan struct{}

	mu sync.Mutex
	// epoch counts the times the policy came into force; inForce says it
	// is now (epoch is then the current one), why says why not.
	epoch   uint64
	inForce bool
	why     string
	key     admissionKey
	// lastWrite is the later of the policy's and the binding's last
	// write, on the API server's clock.
	lastWrite time.Time
	// barrier: the requests that existed when the epoch began; nil until
	// listed.
	barrier map[types.UID]bool
	// since: when this epoch began (our clock). confirmedAt: when the last
	// consistent read that showed this epoch's key began (our clock);
	// gapAt: the last watch error.
	since, confirmedAt, gapAt time.Time
	subscribers               []func()
}

// NewGuard builds a Guard; Run starts it.
func NewGuard(client kube.Interface, reqs fencingclient.BMCFenceRequestInterface, clk clock.WithTicker, log *zap.Logger) *Guard {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	g := &Guard{client: client, requests: reqs, clock: clk, log: log, kick: make(chan struct{}, 1), why: "the agent has not read the admission policy yet"}
	byName := fields.OneTermEqualSelector("metadata.name", PolicyName).String()
	api := client.AdmissionregistrationV1()
	g.policies = cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return api.ValidatingAdmissionPolicies().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return api.ValidatingAdmissionPolicies().Watch(ctx, o)
		},
	}, &admissionregistrationv1.ValidatingAdmissionPolicy{}, 0, cache.Indexers{})
	g.bindings = cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return api.ValidatingAdmissionPolicyBindings().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return api.ValidatingAdmissionPolicyBindings().Watch(ctx, o)
		},
	}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, 0, cache.Indexers{})
	for _, inf := range []cache.SharedIndexInformer{g.policies, g.bindings} {
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { g.poke() }, UpdateFunc: func(any, any) { g.poke() }, DeleteFunc: func(any) { g.poke() },
		})
		_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			g.gap(err)
			cache.DefaultWatchErrorHandler(ctx, r, err)
		})
	}
	return g
}

// Subscribe calls f (outside the guard's lock) whenever what the guard can
// vouch for may have changed.
func (g *Guard) Subscribe(f func()) {
	g.mu.Lock()
	g.subscribers = append(g.subscribers, f)
	g.mu.Unlock()
}

func (g *Guard) poke() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// Run watches the policy and its binding until ctx ends. synced is closed
// once both watches have listed and the first epoch (if the policy is in
// force) has its barrier, or ctx ended.
func (g *Guard) Run(ctx context.Context, synced chan<- struct{}) {
	go g.policies.RunWithContext(ctx)
	go g.bindings.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), g.policies.HasSynced, g.bindings.HasSynced) {
		close(synced)
		return
	}
	retry := g.clock.NewTicker(time.Second)
	defer retry.Stop()
	once := false
	for {
		g.observe(ctx)
		if !once && g.settled() {
			close(synced)
			once = true
		}
		select {
		case <-ctx.Done():
			if !once {
				close(synced)
			}
			return
		case <-g.kick:
		case <-retry.C():
		}
	}
}

// settled reports whether the guard knows what it can vouch for: not in
// force, or in force with the barrier listed.
func (g *Guard) settled() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.inForce || g.barrier != nil
}

// gap records a watch error: until a consistent read made after it shows
// the policy and binding unchanged, nothing is vouched for.
func (g *Guard) gap(err error) {
	g.mu.Lock()
	g.gapAt = g.clock.Now()
	g.mu.Unlock()
	g.log.Info("lost the watch on the request admission policy; requests wait until it is read again", zap.Error(err))
	g.notify()
}

func (g *Guard) notify() {
	g.mu.Lock()
	subs := slices.Clone(g.subscribers)
	g.mu.Unlock()
	for _, f := range subs {
		f()
	}
}

// observe takes in the informers' view and, when an epoch needs its
// barrier, lists the requests.
func (g *Guard) observe(ctx context.Context) {
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	var binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	if o, ok, _ := g.policies.GetStore().GetByKey(PolicyName); ok {
		policy, _ = o.(*admissionregistrationv1.ValidatingAdmissionPolicy)
	}
	if o, ok, _ := g.bindings.GetStore().GetByKey(PolicyName); ok {
		binding, _ = o.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
	}
	changed := g.take(policy, binding)
	if g.needsBarrier() {
		g.listBarrier(ctx)
		changed = true
	}
	if changed {
		g.notify()
	}
}

// take moves the guard to what policy and binding say; it reports whether
// that changed anything a request's fate depends on.
func (g *Guard) take(policy *admissionregistrationv1.ValidatingAdmissionPolicy, binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding) bool {
	why, key, lastWrite := inForce(policy, binding)
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case why != "" && g.inForce:
		g.inForce, g.why, g.barrier = false, why, nil
		g.log.Warn("the request admission policy is not in force: requests are refused until it is, and only those created afterwards are taken", zap.String("why", why))
		return true
	case why != "":
		changed := g.why != why
		g.why = why
		return changed
	case g.inForce && key == g.key:
		return false
	}
	if g.inForce {
		g.log.Warn("the request admission policy or its binding changed: pending requests are refused, and only those created afterwards are taken",
			zap.Int64("policyGeneration", key.policyGen), zap.Int64("bindingGeneration", key.bindingGen))
	} else {
		g.log.Info("the request admission policy and its binding are in force: requests created from now on can be taken")
	}
	g.epoch++
	g.inForce, g.why, g.key, g.lastWrite, g.barrier = true, "", key, lastWrite, nil
	g.since, g.confirmedAt = now, time.Time{}
	return true
}

func (g *Guard) needsBarrier() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inForce && g.barrier == nil
}

// listBarrier lists the requests that exist now (a consistent read: no
// resourceVersion), for the current epoch.
func (g *Guard) listBarrier(ctx context.Context) {
	g.mu.Lock()
	epoch := g.epoch
	g.mu.Unlock()
	list, err := g.requests.List(ctx, metav1.ListOptions{})
	if err != nil {
		g.log.Warn("cannot list the requests that predate the admission policy; requests wait", zap.Error(err))
		return
	}
	barrier := make(map[types.UID]bool, len(list.Items))
	for _, r := range list.Items {
		barrier[r.UID] = true
	}
	g.mu.Lock()
	if g.epoch == epoch && g.inForce {
		g.barrier = barrier
	}
	g.mu.Unlock()
}

// Confirm reads the policy and its binding from the API server (a
// consistent read) and takes in what it finds: the same objects refresh
// the epoch's confirmation, anything else ends it. Call it while requests
// are pending, more often than confirmMaxAge.
func (g *Guard) Confirm(ctx context.Context) {
	start := g.clock.Now()
	api := g.client.AdmissionregistrationV1()
	policy, err := api.ValidatingAdmissionPolicies().Get(ctx, PolicyName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		policy, err = nil, nil
	}
	if err != nil {
		return // no news: the confirmation ages
	}
	binding, err := api.ValidatingAdmissionPolicyBindings().Get(ctx, PolicyName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		binding, err = nil, nil
	}
	if err != nil {
		return
	}
	changed := g.take(policy, binding)
	_, key, _ := inForce(policy, binding)
	g.mu.Lock()
	if g.inForce && key == g.key && start.After(g.confirmedAt) {
		g.confirmedAt = start // the read began after this: as old as its start
	}
	g.mu.Unlock()
	if changed {
		g.poke()
		g.notify()
	}
}

// Vouch says whether request r, first seen by this process at seenAt (our
// clock), may be acted on now: nil; an error wrapping ErrUnauthenticated
// (refuse it, saying why); or ErrNotYet (wait, and Confirm).
//
// Vouched means: the epoch's barrier does not hold r (it was created after
// the agent saw the policy and its binding in force), it was created at
// least admissionSettle after their last write, and a consistent read that
// began after seenAt (so after r's creation) found the same objects, no
// longer than confirmMaxAge ago. The same UIDs and generations at the
// epoch's start and at that read prove both were in force throughout.
func (g *Guard) Vouch(r *v1alpha1.BMCFenceRequest, seenAt time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if mutant.On(mutant.RequestAuthorization) {
		// The mutant: any request while the binding exists, as before
		// issue 17 (the binding's Deny without its policy checks nothing).
		if g.why == whyNoPolicy || g.inForce {
			return nil
		}
	}
	now := g.clock.Now()
	switch {
	case !g.inForce:
		return fmt.Errorf("%w: %s: the API server did not check who wrote this request; run kubectl fence again once deploy/base/admission.yaml is installed", ErrUnauthenticated, g.why)
	case seenAt.Before(g.since):
		return fmt.Errorf("%w: created before this agent observed the admission policy %s and its binding in force (the agent started, or the policy or binding changed, after it): it cannot vouch for who wrote it; run kubectl fence again", ErrUnauthenticated, PolicyName)
	case g.barrier == nil:
		return fmt.Errorf("%w: the agent is listing the requests that predate the admission policy", ErrNotYet)
	case g.barrier[r.UID]:
		return fmt.Errorf("%w: created before this agent observed the admission policy %s and its binding in force (the agent started, or the policy or binding changed, after it): it cannot vouch for who wrote it; run kubectl fence again", ErrUnauthenticated, PolicyName)
	case !r.CreationTimestamp.IsZero() && r.CreationTimestamp.Time.Before(g.lastWrite.Add(admissionSettle)):
		return fmt.Errorf("%w: created within %s of the last change of the admission policy %s or its binding (%s, API server time): the API servers may not have enforced it yet; run kubectl fence again", ErrUnauthenticated, admissionSettle, PolicyName, g.lastWrite.UTC().Format(time.RFC3339))
	case g.confirmedAt.IsZero() || g.confirmedAt.Before(seenAt) || !g.confirmedAt.After(g.gapAt):
		return fmt.Errorf("%w: the admission policy has not been read again since the request was seen", ErrNotYet)
	case now.Sub(g.confirmedAt) > confirmMaxAge:
		return fmt.Errorf("%w: the admission policy was last confirmed %s ago", ErrNotYet, now.Sub(g.confirmedAt).Round(time.Second))
	}
	return nil
}

// whyNoPolicy is why a binding alone vouches for nothing.
const whyNoPolicy = "the ValidatingAdmissionPolicy " + PolicyName + " does not exist (its binding alone checks nothing: the API server ignores a binding whose policy is missing)"

// inForce says why policy and binding do not authenticate requests ("" when
// they do), the key that identifies them, and their last write (API server
// time).
func inForce(policy *admissionregistrationv1.ValidatingAdmissionPolicy, binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding) (string, admissionKey, time.Time) {
	switch {
	case policy == nil:
		if binding == nil {
			return "neither the ValidatingAdmissionPolicy " + PolicyName + " nor its binding exists", admissionKey{}, time.Time{}
		}
		return whyNoPolicy, admissionKey{}, time.Time{}
	case policy.DeletionTimestamp != nil:
		return "the ValidatingAdmissionPolicy " + PolicyName + " is being deleted", admissionKey{}, time.Time{}
	case policy.Spec.FailurePolicy != nil && *policy.Spec.FailurePolicy != admissionregistrationv1.Fail:
		return "the ValidatingAdmissionPolicy " + PolicyName + " has failurePolicy " + string(*policy.Spec.FailurePolicy) + " (a request it fails to evaluate is admitted unchecked; want Fail)", admissionKey{}, time.Time{}
	case binding == nil:
		return "the ValidatingAdmissionPolicyBinding " + PolicyName + " does not exist", admissionKey{}, time.Time{}
	case binding.DeletionTimestamp != nil:
		return "the ValidatingAdmissionPolicyBinding " + PolicyName + " is being deleted", admissionKey{}, time.Time{}
	case binding.Spec.PolicyName != PolicyName:
		return "the ValidatingAdmissionPolicyBinding " + PolicyName + " binds " + binding.Spec.PolicyName + ", not " + PolicyName, admissionKey{}, time.Time{}
	case !slices.Contains(binding.Spec.ValidationActions, admissionregistrationv1.Deny):
		return "the ValidatingAdmissionPolicyBinding " + PolicyName + " does not deny (validationActions has no Deny)", admissionKey{}, time.Time{}
	case binding.Spec.MatchResources != nil || binding.Spec.ParamRef != nil:
		return "the ValidatingAdmissionPolicyBinding " + PolicyName + " narrows what the policy applies to (matchResources or paramRef): it may not cover every request", admissionKey{}, time.Time{}
	}
	key := admissionKey{policyUID: policy.UID, bindingUID: binding.UID, policyGen: policy.Generation, bindingGen: binding.Generation}
	return "", key, later(lastWrite(&policy.ObjectMeta), lastWrite(&binding.ObjectMeta))
}

// lastWrite is an object's last write the API server recorded: its
// creation, or a later managed-fields time.
func lastWrite(m *metav1.ObjectMeta) time.Time {
	t := m.CreationTimestamp.Time
	for _, f := range m.ManagedFields {
		if f.Time != nil && f.Time.After(t) {
			t = f.Time.Time
		}
	}
	return t
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
