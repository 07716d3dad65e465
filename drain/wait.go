package drain

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// sleep waits d on clk, or until ctx ends (its error). Every wait in the
// package goes through the injected clock, so tests step a fake one.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// withClockTimeout is context.WithTimeout on clk: the context ends with
// cause when d has passed on clk.
func withClockTimeout(parent context.Context, clk clock.Clock, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	t := clk.NewTimer(d)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer t.Stop()
		select {
		case <-t.C():
			cancel(cause)
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel(context.Canceled)
		<-done
	}
}

// timedOut reports whether ctx ended because the drain's timeout passed.
func timedOut(ctx context.Context) bool {
	return context.Cause(ctx) == errDrainTimeout //nolint:errorlint // our own sentinel, never wrapped
}
