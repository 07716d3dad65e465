package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/internal/mutant"
)

// How often the agent lists the node Leases: the period grows with the
// fleet, leaseListCost per Lease in the last list, between
// minLeaseListPeriod and maxLeaseListPeriod. The agent then reads about
// 1000 Leases a second up to 4000 nodes (a watch decodes one a node every
// 10 s: 100 a second at 1000 nodes), a small fleet's renewals
// are taken in within half a second, and 1000 nodes are listed every
// second. The period is also the window in which a power-off event cannot
// be placed after the node's last renewal (docs/safety.md, Power events,
// rule 2): at 2 s, 13, 10 and 13 of 100 nodes of make scale's power loss
// lost their event's early start in three runs; at 1 s, 1.
const (
	leaseListCost      = time.Millisecond
	minLeaseListPeriod = 500 * time.Millisecond
	maxLeaseListPeriod = 4 * time.Second
)

// leaseListPeriod is the period after a list of n Leases.
func leaseListPeriod(n int) time.Duration {
	return min(max(time.Duration(n)*leaseListCost, minLeaseListPeriod), maxLeaseListPeriod)
}

// After a failed list the next waits longer, doubling from
// minLeaseListRetry up to maxLeaseListRetry, and the failure is reported
// once, then at most once per leaseListReport while lists keep failing.
const (
	minLeaseListRetry = time.Second
	maxLeaseListRetry = 8 * time.Second
	leaseListReport   = time.Minute
)

// leasePoller keeps our view of the node Leases by listing them all,
// instead of watching them.
//
// Every kubelet renews its Lease every 10 s: at a thousand nodes a watch
// delivers a hundred events a second, each a wake-up of several goroutines
// (the HTTP/2 reader, the watch decoder, the informer's queue and
// listeners) and most of the agent's CPU at rest (make scale's profiles).
// A list every second reads each Lease ten times as often but in one
// response: one wake-up, a millisecond or two of reading
// (decodeLeaseList).
//
// What it changes in what we know: a renewal is taken in up to a period
// (plus the list's time) after the kubelet wrote it, and stamped when we
// take it in, on our clock. Silence is judged from that stamp, so it can
// only look shorter than it is (a fence may start up to a period later,
// never sooner). The view is fresh as of each list's start (onLeaseList),
// a consistent read (no resourceVersion: every write committed before the
// request is in the answer), whichever node renewed; a list that fails
// stamps nothing, and the view ages until one succeeds.
type leasePoller struct {
	list  func(ctx context.Context) (*coordinationv1.LeaseList, error)
	store *handlingStore
	// period, when set, is the fixed time between lists (tests);
	// otherwise leaseListPeriod of the last list.
	period time.Duration
	// now stamps a list's start (the Cluster's clock); timer waits
	// between lists.
	now    func() time.Time
	timer  clock.Clock
	onList func(start time.Time)
	// onErr records and reports a failed list (its first failure, then
	// once per leaseListReport); log says the lists work again.
	onErr   func(error)
	log     *zap.Logger
	synced  atomic.Bool // a first list was taken in and stamped
	stopped atomic.Bool
}

// leaseListTimeout bounds one list: one that takes longer is abandoned and
// the view ages, as the storm guard expects of a slow API server.
const leaseListTimeout = 30 * time.Second

// RunWithContext lists until ctx ends.
func (p *leasePoller) RunWithContext(ctx context.Context) {
	defer p.stopped.Store(true)
	var wait time.Duration
	var failing int
	var reported time.Time
	for {
		n, err := p.poll(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failing++
			if failing == 1 || p.now().Sub(reported) >= leaseListReport {
				p.onErr(err)
				reported = p.now()
			}
			wait = min(minLeaseListRetry<<min(failing-1, 8), maxLeaseListRetry)
		default:
			if failing > 0 && p.log != nil {
				p.log.Info("listing the node Leases again", zap.Int("failed lists", failing))
			}
			failing = 0
			wait = p.period
			if wait <= 0 {
				wait = leaseListPeriod(n)
			}
		}
		t := p.timer.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// poll lists the Leases once, hands the changes to the handlers, and then
// stamps the list's start. It returns how many Leases it listed.
func (p *leasePoller) poll(ctx context.Context) (int, error) {
	start := p.now()
	ctx, cancel := context.WithTimeout(ctx, leaseListTimeout)
	defer cancel()
	l, err := p.list(ctx)
	if err != nil {
		return 0, err
	}
	if l.Continue != "" {
		return 0, errLeaseListPaged
	}
	items := make([]any, len(l.Items))
	for i := range l.Items {
		items[i] = &l.Items[i]
	}
	if err := p.store.Replace(items); err != nil {
		return 0, err
	}
	if mutant.On(mutant.LeaseListStart) {
		start = p.now() // the mutant: the list's end
	}
	p.onList(start)
	p.synced.Store(true)
	return len(items), nil
}

// HasSynced: a first list reached the handlers and proved the view fresh.
func (p *leasePoller) HasSynced() bool { return p.synced.Load() }

func (p *leasePoller) IsStopped() bool { return p.stopped.Load() }

func (p *leasePoller) GetIndexer() cache.Indexer { return p.store.items }

// handlingStore keeps the transformed objects of each list and calls the
// handler for each change, as a shared informer would on a relist: Add for
// a new object (initial during the first list), Update (old, new) for one
// whose resourceVersion changed, a tombstone Delete for one no longer
// listed. An object listed again unchanged calls nothing.
type handlingStore struct {
	mu        sync.Mutex // one list at a time, each with its handler calls
	items     cache.Indexer
	handler   cache.ResourceEventHandler
	transform cache.TransformFunc
	listed    bool // a first list reached the handler
}

func newHandlingStore(h cache.ResourceEventHandler, transform cache.TransformFunc) *handlingStore {
	return &handlingStore{items: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), handler: h, transform: transform}
}

// Replace takes in a complete list.
func (s *handlingStore) Replace(list []any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	initial := !s.listed
	listed := make(map[string]bool, len(list))
	for _, obj := range list {
		key, err := cache.MetaNamespaceKeyFunc(obj)
		if err != nil {
			return err
		}
		listed[key] = true
		old, exists, err := s.items.GetByKey(key)
		if err != nil {
			return err
		}
		if exists && sameVersion(old, obj) {
			continue
		}
		if obj, err = s.transform(obj); err != nil {
			return err
		}
		if err := s.items.Update(obj); err != nil {
			return err
		}
		if exists {
			s.handler.OnUpdate(old, obj)
		} else {
			s.handler.OnAdd(obj, initial)
		}
	}
	for _, key := range s.items.ListKeys() {
		if listed[key] {
			continue
		}
		old, exists, err := s.items.GetByKey(key)
		if err != nil || !exists {
			continue
		}
		if err := s.items.Delete(old); err != nil {
			return err
		}
		// Deleted between two lists: what a shared informer hands its
		// handlers after a relist too.
		s.handler.OnDelete(cache.DeletedFinalStateUnknown{Key: key, Obj: old})
	}
	s.listed = true
	return nil
}

func sameVersion(a, b any) bool {
	x, ok1 := a.(interface{ GetResourceVersion() string })
	y, ok2 := b.(interface{ GetResourceVersion() string })
	return ok1 && ok2 && x.GetResourceVersion() != "" && x.GetResourceVersion() == y.GetResourceVersion()
}
