package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/bmcfence/bmcfence/internal/inventory/metal3"
)

// metal3Watch holds the informers of the hosts' cluster: BareMetalHosts,
// Metal3Machines and Machines in each configured namespace (one informer
// per namespace and resource: the grants are per namespace), each object
// slimmed to what the inventory reads. A change to any of them refreshes
// the inventory within kickDelay instead of at the next 30 s refresh.
type metal3Watch struct {
	src                   *metal3Source
	hosts, m3ms, machines []cache.SharedIndexInformer
}

// kickDelay gathers a burst of changes (a rollout annotating every host)
// into one refresh.
const kickDelay = time.Second

// WatchMetal3 starts the informers over the hosts' cluster and waits (up
// to syncTimeout) until they have listed everything; from then on Refresh
// reads the hosts from them, and a change refreshes the inventory (Run).
// Metal3Machines and Machines that are not served (no Cluster API) or not
// granted are not watched: nodes are matched by providerID, as when
// listing. On an error nothing is watched and Refresh keeps listing the
// hosts itself, as it does when WatchMetal3 is not called (the CLI). The
// informers stop with ctx.
func (i *Inventory) WatchMetal3(ctx context.Context, syncTimeout time.Duration) error {
	src, err := i.metal3Source(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &metal3Watch{src: src}
	var all []cache.SharedIndexInformer
	watch := func(gvr schema.GroupVersionResource, ns string, slim cache.TransformFunc) (cache.SharedIndexInformer, error) {
		// dynamicinformer's informer, built here: that package links
		// client-go's informers for every API group (package kube).
		res := src.dynamic.Resource(gvr).Namespace(ns)
		inf := cache.NewSharedIndexInformerWithOptions(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return res.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return res.Watch(ctx, o)
			},
		}, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{Indexers: cache.Indexers{}, ObjectDescription: gvr.String()})
		if err := inf.SetTransform(slim); err != nil {
			return nil, err
		}
		kick := func(any) { i.kickRefresh() }
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: kick, UpdateFunc: func(_, o any) { kick(o) }, DeleteFunc: kick,
		}); err != nil {
			return nil, err
		}
		all = append(all, inf)
		return inf, nil
	}
	fail := func(err error) error {
		cancel()
		return err
	}
	for _, ns := range i.opts.Config.Metal3.Namespaces {
		// The hosts are required: a listing that fails says why now,
		// rather than as a reflector's retries in the log.
		if _, err := src.dynamic.Resource(metal3.BareMetalHosts).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return fail(fmt.Errorf("listing BareMetalHosts in %s (%s): %w", ns, src.where, err))
		}
		inf, err := watch(metal3.BareMetalHosts, ns, metal3.SlimHost)
		if err != nil {
			return fail(err)
		}
		w.hosts = append(w.hosts, inf)
		for _, r := range []struct {
			gvr  schema.GroupVersionResource
			slim cache.TransformFunc
			into *[]cache.SharedIndexInformer
		}{{metal3.Metal3Machines, metal3.SlimMetal3Machine, &w.m3ms}, {metal3.Machines, metal3.SlimMachine, &w.machines}} {
			_, err := src.dynamic.Resource(r.gvr).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1})
			switch {
			case err == nil:
				inf, err := watch(r.gvr, ns, r.slim)
				if err != nil {
					return fail(err)
				}
				*r.into = append(*r.into, inf)
			case apierrors.IsNotFound(err):
				// No Cluster API here: providerIDs only.
			default:
				i.opts.Log.Warn("cannot list "+r.gvr.Resource+"; matching nodes by providerID only", zap.String("namespace", ns), zap.String("cluster", src.where), zap.Error(err))
			}
		}
	}
	for _, inf := range all {
		go inf.Run(wctx.Done())
	}
	sctx, scancel := context.WithTimeout(wctx, syncTimeout)
	defer scancel()
	synced := make([]cache.InformerSynced, 0, len(all))
	for _, inf := range all {
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(sctx.Done(), synced...) {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		return fail(fmt.Errorf("the BareMetalHost informers of %s did not sync within %s", src.where, syncTimeout))
	}
	i.mu.Lock()
	i.watch = w
	i.mu.Unlock()
	i.opts.Log.Info("watching BareMetalHosts", zap.Strings("namespaces", i.opts.Config.Metal3.Namespaces), zap.String("cluster", src.where),
		zap.Bool("metal3Machines", len(w.m3ms) > 0), zap.Bool("machines", len(w.machines) > 0))
	return nil
}

// kickRefresh asks Run for a refresh soon (it never blocks).
func (i *Inventory) kickRefresh() {
	select {
	case i.kick <- struct{}{}:
	default:
	}
}

// listing reads the informers' caches.
func (w *metal3Watch) listing() *metal3Listing {
	l := &metal3Listing{hostErrs: map[string]error{}}
	for _, inf := range w.hosts {
		for _, o := range inf.GetStore().List() {
			u, ok := o.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			h, err := metal3.HostFrom(u)
			if err != nil {
				l.hostErrs[h.Key()] = err
				continue
			}
			l.objs.Hosts = append(l.objs.Hosts, h)
		}
	}
	for _, inf := range w.m3ms {
		for _, o := range inf.GetStore().List() {
			if u, ok := o.(*unstructured.Unstructured); ok {
				l.objs.Metal3Machines = append(l.objs.Metal3Machines, metal3.Metal3MachineFrom(u))
			}
		}
	}
	for _, inf := range w.machines {
		for _, o := range inf.GetStore().List() {
			if u, ok := o.(*unstructured.Unstructured); ok {
				l.objs.Machines = append(l.objs.Machines, metal3.MachineFrom(u))
			}
		}
	}
	return l
}

// errNotWatching: Refresh lists the hosts itself.
var errNotWatching = errors.New("not watching BareMetalHosts")

func (i *Inventory) watched() (*metal3Listing, error) {
	i.mu.RLock()
	w := i.watch
	i.mu.RUnlock()
	if w == nil {
		return nil, errNotWatching
	}
	return w.listing(), nil
}
