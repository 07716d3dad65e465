package cluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// ReconcileLoop runs informer until ctx ends and, once its cache has
// synced, calls reconcile at once, on every kick and every resync. It
// serves the controllers of the project's CRs (remediation, requests).
func ReconcileLoop(ctx context.Context, what string, informer cache.SharedIndexInformer, clk clock.WithTicker, resync time.Duration, kick <-chan struct{}, reconcile func(context.Context)) error {
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("%s: cache not synced: %w", what, ctx.Err())
	}
	t := clk.NewTicker(resync)
	defer t.Stop()
	for {
		reconcile(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-t.C():
		}
	}
}
