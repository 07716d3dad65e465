package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// leaseInformer watches the node Leases with a bare reflector whose store
// calls our handlers itself.
//
// Every node renews its Lease every 10 s: at a thousand nodes, a hundred
// events a second, the agent's commonest work at rest. A shared informer
// passes each event through four goroutines after the watch's own (the
// reflector, its queue's processing loop, and two of the handler's
// listener), each a wake-up of a thread; the reflector alone, writing to
// this store, calls the handler on its own goroutine. The handlers, the
// store's contents and its transform are the shared informer's; what is
// lost is its resync (a Lease resync replays our own cache and proves
// nothing: the Cluster never asks for one) and its buffering (a handler
// that blocks holds the watch; ours take the cluster's lock briefly and
// never block).
type leaseInformer struct {
	reflector *cache.Reflector
	store     *handlingStore
	onErr     func(error)
	stopped   atomic.Bool
}

func newLeaseInformer(lw cache.ListerWatcher, example runtime.Object, s *handlingStore, onErr func(error)) *leaseInformer {
	r := cache.NewReflectorWithOptions(lw, example, s, cache.ReflectorOptions{Name: "leases", TypeDescription: "leases"})
	return &leaseInformer{reflector: r, store: s, onErr: onErr}
}

// RunWithContext lists and watches until ctx ends, as the reflector's own
// Run does (with its backoff between failed attempts), telling onErr of
// each failure first: a bare reflector takes no error handler.
func (l *leaseInformer) RunWithContext(ctx context.Context) {
	defer l.stopped.Store(true)
	//nolint:staticcheck // the reflector's own Run uses this backoff
	backoff := wait.NewExponentialBackoffManager(800*time.Millisecond, 30*time.Second, 2*time.Minute, 2.0, 1.0, clock.RealClock{})
	wait.BackoffUntil(func() {
		if err := l.reflector.ListAndWatchWithContext(ctx); err != nil {
			l.onErr(err)
			cache.DefaultWatchErrorHandler(ctx, l.reflector, err)
		}
	}, backoff, true, ctx.Done())
}

func (l *leaseInformer) HasSynced() bool { return l.store.synced.Load() }

func (l *leaseInformer) IsStopped() bool { return l.stopped.Load() }

func (l *leaseInformer) GetIndexer() cache.Indexer { return l.store.items }

// handlingStore is a reflector's store that keeps the transformed objects
// and calls the handler for each change, as a shared informer would: Add
// for a new object, Update (old, new) for a known one, Delete for one
// removed; a relist (Replace) updates what it lists and deletes, as
// tombstones, what it no longer lists. Only the reflector writes to it.
type handlingStore struct {
	mu        sync.Mutex // one change at a time, each with its handler call
	items     cache.Indexer
	handler   cache.ResourceEventHandler
	transform cache.TransformFunc
	synced    atomic.Bool // the first list reached the handler
}

var _ cache.TransformingStore = (*handlingStore)(nil)

func newHandlingStore(h cache.ResourceEventHandler, transform cache.TransformFunc) *handlingStore {
	return &handlingStore{items: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), handler: h, transform: transform}
}

// Transformer lets the reflector slim the objects it holds itself (while
// it streams a watch list) with the same transform.
func (s *handlingStore) Transformer() cache.TransformFunc { return s.transform }

func (s *handlingStore) Add(obj any) error { return s.Update(obj) }

func (s *handlingStore) Update(obj any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateLocked(obj, false)
}

func (s *handlingStore) updateLocked(obj any, initial bool) error {
	obj, err := s.transform(obj)
	if err != nil {
		return err
	}
	old, exists, err := s.items.Get(obj)
	if err != nil {
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
	return nil
}

func (s *handlingStore) Delete(obj any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, err := s.transform(obj)
	if err != nil {
		return err
	}
	if err := s.items.Delete(obj); err != nil {
		return err
	}
	s.handler.OnDelete(obj)
	return nil
}

func (s *handlingStore) Replace(list []any, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	initial := !s.synced.Load()
	listed := make(map[string]bool, len(list))
	for _, obj := range list {
		key, err := cache.MetaNamespaceKeyFunc(obj)
		if err != nil {
			return err
		}
		listed[key] = true
		if err := s.updateLocked(obj, initial); err != nil {
			return err
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
		// Deleted while we were not watching: what a shared informer
		// hands its handlers too.
		s.handler.OnDelete(cache.DeletedFinalStateUnknown{Key: key, Obj: old})
	}
	s.synced.Store(true)
	return nil
}

// Resync does nothing: see leaseInformer.
func (s *handlingStore) Resync() error { return nil }
