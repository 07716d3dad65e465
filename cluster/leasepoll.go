package cluster

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
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
// second. A renewal is taken in up to a period and a list after it was
// written; the power-event rule places it at the start of the list before
// (docs/safety.md, Power events, rule 2; NodeView.HeartbeatFrom).
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
// (leaseStore).
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
	// list returns a LeaseList message in protobuf (listLeases), in buf's
	// memory or its own.
	list  func(ctx context.Context, buf *bytes.Buffer) ([]byte, error)
	buf   bytes.Buffer
	store *leaseStore
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
	raw, err := p.list(ctx, &p.buf)
	if err != nil {
		return 0, err
	}
	n, err := p.store.Replace(raw)
	if err != nil {
		return 0, err
	}
	if mutant.On(mutant.LeaseListStart) {
		start = p.now() // the mutant: the list's end
	}
	p.onList(start)
	p.synced.Store(true)
	return n, nil
}

// HasSynced: a first list reached the handlers and proved the view fresh.
func (p *leasePoller) HasSynced() bool { return p.synced.Load() }

func (p *leasePoller) IsStopped() bool { return p.stopped.Load() }

func (p *leasePoller) GetIndexer() cache.Indexer { return p.store.items }

// leaseStore keeps the slimmed Leases of each list and calls the handler
// for each change, as a shared informer would on a relist: Add for a new
// Lease (initial during the first list), Update (old, new) for one whose
// resourceVersion changed, a tombstone Delete for one no longer listed. A
// Lease listed again unchanged calls nothing, and is known in its bytes
// (leaseIdentity) before anything is built: at rest, with every Lease
// renewed once in ten lists, a list builds the tenth that changed and
// allocates nothing for the rest.
type leaseStore struct {
	mu       sync.Mutex // one list at a time, each with its handler calls
	items    cache.Indexer
	handler  cache.ResourceEventHandler
	versions map[string]*leaseSeen // by key (namespace/name)
	lists    uint64                // lists taken in, complete or not
	listed   bool                  // a complete list reached the handler
	key      []byte                // a listed Lease's key, reused
}

// leaseSeen is a held Lease's resourceVersion and the last list that
// listed it.
type leaseSeen struct {
	resourceVersion string
	list            uint64
}

func newLeaseStore(h cache.ResourceEventHandler) *leaseStore {
	return &leaseStore{items: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), handler: h, versions: map[string]*leaseSeen{}}
}

// Replace takes in a complete list (a LeaseList message in protobuf) and
// returns how many Leases it listed.
func (s *leaseStore) Replace(raw []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	initial := !s.listed
	s.lists++
	n := 0
	err := eachLeaseItem(raw, func(item []byte) error {
		n++
		ns, name, rv, err := leaseIdentity(item)
		if err != nil {
			return fmt.Errorf("a Lease: %w", err)
		}
		s.key = append(append(append(s.key[:0], ns...), '/'), name...)
		seen := s.versions[string(s.key)] // no copy of the key: a lookup
		if seen != nil && len(rv) > 0 && seen.resourceVersion == string(rv) {
			seen.list = s.lists
			return nil
		}
		l, err := decodeLease(item)
		if err != nil {
			return fmt.Errorf("a Lease: %w", err)
		}
		key, err := cache.MetaNamespaceKeyFunc(&l)
		if err != nil {
			return err
		}
		old, exists, err := s.items.GetByKey(key)
		if err != nil {
			return err
		}
		if err := s.items.Update(&l); err != nil {
			return err
		}
		if seen == nil {
			seen = &leaseSeen{}
			s.versions[key] = seen
		}
		seen.resourceVersion, seen.list = l.ResourceVersion, s.lists
		if exists {
			s.handler.OnUpdate(old, &l)
		} else {
			s.handler.OnAdd(&l, initial)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for key, seen := range s.versions {
		if seen.list == s.lists {
			continue
		}
		delete(s.versions, key)
		old, exists, err := s.items.GetByKey(key)
		if err != nil || !exists {
			continue
		}
		if err := s.items.Delete(old); err != nil {
			return 0, err
		}
		// Deleted between two lists: what a shared informer hands its
		// handlers after a relist too.
		s.handler.OnDelete(cache.DeletedFinalStateUnknown{Key: key, Obj: old})
	}
	s.listed = true
	return n, nil
}
