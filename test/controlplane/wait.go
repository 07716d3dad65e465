package controlplane

import (
	"context"
	"fmt"
	"time"
)

// PollInterval is how often WaitFor and Consistently evaluate their
// condition: fine enough to time controller reactions to a fraction of a
// second, coarse enough to cost nothing against a loopback apiserver.
const PollInterval = 200 * time.Millisecond

// progressEvery is how often a long wait says it is still waiting.
const progressEvery = 5 * time.Second

// WaitFor polls cond every PollInterval until it returns true, returns an
// error, or ctx ends. It logs progress every 5 s and the elapsed time on
// success. cond errors end the wait; conditions that can hit transient API
// errors should swallow them.
func WaitFor(ctx context.Context, logf func(string, ...any), desc string, cond func() (bool, error)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	start := time.Now()
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	nextReport := start.Add(progressEvery)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", desc, err)
		}
		if ok {
			if d := time.Since(start); d >= time.Second {
				logf("%s after %.1fs", desc, d.Seconds())
			}
			return nil
		}
		if now := time.Now(); now.After(nextReport) {
			logf("still waiting for %s (%.0fs)", desc, now.Sub(start).Seconds())
			nextReport = now.Add(progressEvery)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: gave up after %.1fs: %w", desc, time.Since(start).Seconds(), ctx.Err())
		case <-tick.C:
		}
	}
}

// WaitFor is the package-level WaitFor logging through Options.Logf.
func (cp *ControlPlane) WaitFor(ctx context.Context, desc string, cond func() (bool, error)) error {
	return WaitFor(ctx, cp.logf, desc, cond)
}

// Consistently checks that cond stays true, polling every PollInterval, for
// d. It fails at the first false or error. Use it for "X must not happen
// within d" (no detach without the taint); d bounds the test's cost.
func Consistently(ctx context.Context, d time.Duration, desc string, cond func() (bool, error)) error {
	start := time.Now()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w (after %.1fs)", desc, err, time.Since(start).Seconds())
		}
		if !ok {
			return fmt.Errorf("%s: stopped holding after %.1fs", desc, time.Since(start).Seconds())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", desc, ctx.Err())
		case <-deadline.C:
			return nil
		case <-tick.C:
		}
	}
}
