package runner

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/mutant"
)

// A live Lease read (docs/safety.md, "Power events: a live Lease read").
// The early ForceOff of a power event needs the Lease silent eventSilence
// on a view proven fresh; other nodes' Lease events prove it in bunches, so
// the proof ages by seconds. For a node the engine asks for it
// (fence.LeaseReadWanted: a pending event that waits only for that proof),
// the runner reads the node's Lease and Node from the API server itself
// (Cluster.Recheck: plain GETs with no resourceVersion, quorum reads, not a
// cache) and, if the server holds no renewal and no Ready heartbeat our
// view has not taken in, stamps the read's start: the view decided on
// carries it as NodeView.LeaseReadAt while its signs of life are the ones
// the read compared with. The start counts, not the end: the server may
// have answered at the start, and a renewal after that answer is not in
// it.

// LeaseReadInterval bounds how often one node's Lease is read live: at most
// once per interval, only while the engine wants it (a handful of nodes
// with a pending power-off event, for the few seconds between eventSilence
// and the licence).
const LeaseReadInterval = time.Second

// leaseRead is a node's latest live Lease read: when the last one started
// (tried), and the proof of the last one that found our view's renewal
// still the latest: its start (at) and the view's HeartbeatAt it compared
// with (heartbeatAt).
type leaseRead struct {
	tried       time.Time
	at          time.Time
	heartbeatAt time.Time
}

// proves is the stamp for view v: the read's start, if it compared with
// v's signs of life; zero otherwise (a renewal taken in since makes it
// stale).
func (l leaseRead) proves(v fence.NodeView) time.Time {
	if l.at.IsZero() || !l.heartbeatAt.Equal(v.HeartbeatAt) {
		return time.Time{}
	}
	return l.at
}

// readLease reads the node's Lease live when the engine wants it, at most
// once per LeaseReadInterval. It holds the node's lock only to decide and
// to store, never during the read (the fleet view reads every record).
func (r *Runner) readLease(ctx context.Context, rec *record, info NodeInfo) {
	if r.opts.Events == nil {
		return // no events, no early start to prove
	}
	now := r.opts.Clock.Now()
	// The cheap test first: a node silent less than eventSilence (the
	// sync of every renewal) wants no read (LeaseReadWanted says the
	// same), and building its view again would cost two lookups per sync.
	if info.View.HeartbeatAt.IsZero() || fence.SilentFor(info.View, now) < r.policy(info.Name).EventSilence {
		return
	}
	rec.mu.Lock()
	v := r.view(info)
	v.LeaseReadAt = rec.leaseRead.proves(v)
	s := rec.state
	due := rec.hold == nil && (rec.leaseRead.tried.IsZero() || now.Sub(rec.leaseRead.tried) >= LeaseReadInterval) &&
		fence.LeaseReadWanted(r.policy(info.Name), s, v, now)
	if due {
		rec.leaseRead.tried = now
	}
	rec.mu.Unlock()
	if !due {
		return
	}
	c, err := r.opts.Cluster.Recheck(ctx, info.Name)
	switch {
	case err != nil:
		r.log.Debug("live Lease read failed; no proof", zap.String("node", info.Name), zap.Error(err))
		return
	case c.LeaseMissing:
		r.log.Debug("live Lease read found no renewal; no proof", zap.String("node", info.Name))
		return
	case c.LeaseRenewed && !mutant.On(mutant.LeaseReadCurrent):
		// The server holds a renewal (or a Ready heartbeat) our view
		// has not taken in: nothing proven; the view catches up
		// through the next list of the Leases.
		r.log.Debug("live Lease read found a newer renewal; no proof", zap.String("node", info.Name))
		return
	}
	rec.mu.Lock()
	rec.leaseRead.at, rec.leaseRead.heartbeatAt = now, c.HeartbeatAt
	rec.mu.Unlock()
	r.log.Debug("live Lease read proves the view fresh", zap.String("node", info.Name), zap.Time("startedAt", now))
}
