package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
)

// execute performs out.Actions in order. Step puts Persist first and at most
// one action with a result last; execute returns that result as the next
// input. A failed or conflicting persist stops everything after it: no side
// effect runs unless the intent is on the Node first. retry > 0 means "stop
// this sync and come back then". decided is the node view the Step decided
// on: the server recheck before a ForceOff or a taint compares with it.
func (r *Runner) execute(ctx context.Context, name string, rec *record, out fence.Output, ackID string, decided fence.NodeView) (next *fence.Input, retry time.Duration) {
	prev := rec.state
	for _, a := range out.Actions {
		if r.opts.BeforeAct != nil && a.Kind != fence.ActEvent {
			r.opts.BeforeAct(name, a.Kind, out.State)
		}
		if ctx.Err() != nil {
			return nil, retryAfterError
		}
		switch a.Kind {
		case fence.ActPersist:
			if err := r.persist(ctx, name, rec, out.State, ackID); err != nil {
				if errors.Is(err, ErrConflict) {
					// Another writer won the node's lock. Reload what it
					// wrote, from the server, and decide again.
					r.log.Info("fence state changed under us; reloading", zap.String("node", name))
					if cur, err := r.opts.Cluster.CurrentState(ctx, name); err == nil {
						rec.load(cur)
					}
					return nil, minRetry
				}
				r.log.Warn("cannot persist fence state; no side effect taken", zap.String("node", name), zap.Error(err))
				return nil, retryAfterError
			}
		case fence.ActEvent:
			if a.Event.Reason == fence.ReasonRefusedOwnNode {
				r.opts.Recorder.Refused("OwnNode")
			}
			if a.Event.Reason == "FenceRefused" && (out.State.Refusal == fence.RefuseClusterUnhealthy || out.State.Refusal == fence.RefuseZoneUnhealthy) {
				r.stormEvent(name, a.Event)
			} else {
				r.event(name, a.Event)
			}
		case fence.ActReadPower:
			r.commit(rec, out.State)
			start := r.opts.Clock.Now()
			rd, ok := r.readPower(ctx, name, rec, out.State)
			if ok && out.State.Phase.PreTaint() && !out.State.Unsaved {
				r.log.Info("fence power read", zap.String("node", name), zap.Stringer("phase", out.State.Phase), zap.Stringer("power", rd.Power), zap.String("failure", rd.Failure), zap.Duration("took", r.opts.Clock.Since(start)))
			}
			if !ok {
				// A read that does not wait found no BMC slot: it did
				// not happen, so it is due again at once (readNow put
				// NextReadAt a readInterval ahead), and the node is
				// synced again when a slot frees, or after this.
				rec.state.NextReadAt = time.Time{}
				retry := slotRetry
				if out.RecheckAfter > 0 && out.RecheckAfter < retry {
					retry = out.RecheckAfter
				}
				return nil, retry
			}
			return &fence.Input{Kind: fence.InputReading, Reading: rd, Host: r.hostEvidence(ctx, name, rec, rd)}, 0
		case fence.ActPowerOff, fence.ActPowerOn, fence.ActApplyTaint, fence.ActRemoveTaint, fence.ActForgetTaint:
			r.commit(rec, out.State)
			if r.opts.DryRun {
				r.would(name, rec, a.Kind, out.State)
				if a.Kind == fence.ActPowerOff {
					// Shadow mode decides as if the BMC had accepted it,
					// so it shows when it would taint after a ForceOff.
					return &fence.Input{Kind: fence.InputResult, Result: fence.Result{Action: a.Kind}}, 0
				}
				return nil, 0
			}
			res, err := r.sideEffect(ctx, name, rec, out.State, a.Kind, decided)
			if errors.Is(err, ErrConflict) {
				// The fencing token is no longer ours: another agent
				// wrote the state since. Nothing was done; reload and
				// decide again on what it wrote.
				r.log.Info("fencing token lost; reloading", zap.String("node", name), zap.Stringer("action", a.Kind), zap.Error(err))
				if cur, err := r.opts.Cluster.CurrentState(ctx, name); err == nil {
					rec.load(cur)
				}
				return nil, minRetry
			}
			r.noteOutcome(name, prev, out.State, a.Kind, err)
			res.Action, res.Err = a.Kind, errString(err)
			res.AlreadyInState = errors.Is(err, bmc.ErrAlreadyInState)
			res.NotSent = res.NotSent && err != nil && a.Kind == fence.ActPowerOff
			return &fence.Input{Kind: fence.InputResult, Result: res}, 0
		case fence.ActDiagnose:
			r.commit(rec, out.State)
			if r.opts.DryRun {
				r.would(name, rec, a.Kind, out.State)
				return &fence.Input{Kind: fence.InputResult, Result: fence.Result{Action: a.Kind}}, 0
			}
			res, err := r.diagnose(ctx, name, rec, decided)
			if errors.Is(err, ErrConflict) {
				r.log.Info("fencing token lost; reloading", zap.String("node", name), zap.Stringer("action", a.Kind), zap.Error(err))
				if cur, err := r.opts.Cluster.CurrentState(ctx, name); err == nil {
					rec.load(cur)
				}
				return nil, minRetry
			}
			r.noteOutcome(name, prev, out.State, a.Kind, err)
			res.Err = errString(err)
			res.NotSent = res.NotSent && err != nil
			return &fence.Input{Kind: fence.InputResult, Result: res}, 0
		case fence.ActDeletePods:
			if r.opts.DryRun {
				r.would(name, rec, a.Kind, out.State)
				continue
			}
			select {
			case r.deleteSem <- struct{}{}:
			default:
				// Every force-delete permit is taken: skip this
				// pass, and give the worker back (forceDeleteShare).
				// detachPoll brings the node back for the next.
				r.log.Debug("force-delete skipped: the other passes hold the permits", zap.String("node", name))
				continue
			}
			n, err := r.opts.Cluster.DeleteTerminatingPods(ctx, name, r.token(rec))
			<-r.deleteSem
			if err != nil {
				r.log.Warn("force-deleting terminating pods failed", zap.String("node", name), zap.Error(err))
			} else if n > 0 {
				r.log.Info("force-deleted terminating pods of a confirmed-off, tainted node", zap.String("node", name), zap.Int("pods", n))
			}
		}
	}
	r.commit(rec, out.State)
	return nil, 0
}

// token is the fencing token for this runner's next irreversible write on
// the node: the state annotation it last wrote. The mutant without the
// check sends none, and the cluster then checks nothing.
func (r *Runner) token(rec *record) string {
	if !fence.Enabled(fence.CheckFencingToken) {
		return NoToken
	}
	return rec.raw
}

// NoToken is the fencing token of a write that checks none: only the
// mutation test's build sends it. A real Cluster refuses it.
const NoToken = "\x00no-fencing-token"

// minRetry re-syncs at once (after a reload) without spinning.
const minRetry = 10 * time.Millisecond

// slotRetry is when a node whose read found no BMC slot (slots.go) is
// synced again if no slot frees first (a freed slot wakes it).
const slotRetry = 2 * time.Second

// commit adopts s as the node's state and records what changed.
func (r *Runner) commit(rec *record, s fence.State) {
	if s.Phase == fence.Stuck && s.Stuck == fence.StuckContradiction && rec.state.Phase != fence.Stuck {
		r.opts.Recorder.Contradiction(rec.name)
	}
	if rec.state.Phase == fence.Detaching && s.Phase != fence.Detaching && !s.FencedAt.IsZero() {
		r.opts.Recorder.Detached(s.FencedAt.Sub(s.TaintedAt), s.FencedAt.Sub(s.FailureStart))
	}
	if s.Refusal != fence.Admitted && s.Refusal != rec.state.Refusal {
		r.opts.Recorder.Refused(s.Refusal.String())
	}
	rec.state = s
	rec.publish()
}

func (r *Runner) persist(ctx context.Context, name string, rec *record, s fence.State, ackID string) error {
	raw, err := fence.Encode(s)
	if err != nil {
		return err
	}
	if r.opts.DryRun {
		// Shadow mode writes nothing; the state lives in memory, and a
		// command, left on the node, is processed once.
		if ackID != "" {
			rec.acked = ackID
		}
		return nil
	}
	start := r.opts.Clock.Now()
	if err := r.opts.Cluster.SaveState(ctx, name, rec.raw, raw, ackID); err != nil {
		return err
	}
	r.log.Info("fence state saved", zap.String("node", name), zap.Stringer("phase", s.Phase), zap.Duration("took", r.opts.Clock.Since(start)))
	rec.wrote(raw)
	if ackID != "" {
		rec.acked = ackID
	}
	return nil
}

// readPower reads the BMC, stamping the reading with the time the request
// was sent (a reading counts as "later than" an event only if all of it is)
// and with the target that answered. A target whose identity has not been
// checked (a new one, or not for VerifyInterval) is checked first; one that
// fails gives no reading, so it can never prove the node off (invariant 3).
//
// Only a fence in flight waits for a BMC slot (readKind): for any other
// read with none free, ok is false and nothing was read.
func (r *Runner) readPower(ctx context.Context, name string, rec *record, s fence.State) (rd fence.Reading, ok bool) {
	ctrl, found := r.opts.Inventory.Controller(name)
	if !found {
		return fence.Reading{At: r.opts.Clock.Now(), Failure: "no BMC entry"}, true
	}
	got, err := r.acquireFor(ctx, name, s)
	if err != nil {
		return fence.Reading{At: r.opts.Clock.Now(), Failure: "cancelled"}, true
	}
	if !got {
		return fence.Reading{}, false
	}
	defer r.release()
	if _, ok := ctrl.(Leveled); ok {
		return r.readLevels(ctx, rec, ctrl), true
	}
	key := ctrl.Key()
	sent := r.opts.Clock.Now()
	if fence.Enabled(fence.CheckIdentity) && (key != rec.verifiedKey || sent.Sub(rec.verifiedAt) >= r.opts.VerifyInterval) {
		if err := r.verify(ctx, rec, ctrl); err != nil {
			return fence.Reading{At: sent, Failure: "identity check failed: " + err.Error(), Target: key}, true
		}
		sent = r.opts.Clock.Now()
	}
	st, err := ctrl.PowerStatus(ctx)
	rd = ReadingOf(sent, st, err)
	rd.Target = key
	return rd, true
}

// verify checks the target's identity now and remembers the success.
func (r *Runner) verify(ctx context.Context, rec *record, ctrl PowerController) error {
	if err := ctrl.Verify(ctx); err != nil {
		rec.verifiedKey = ""
		return err
	}
	rec.verifiedKey, rec.verifiedAt = ctrl.Key(), r.opts.Clock.Now()
	return nil
}

// ReadingOf turns a BMC power read sent at sent into the engine's Reading.
// The CLI's confirmations use it too, so both judge a reading the same way.
func ReadingOf(sent time.Time, st bmc.PowerStatus, err error) fence.Reading {
	if err != nil {
		return fence.Reading{At: sent, Failure: bmc.Reason(err) + ": " + err.Error()}
	}
	rd := fence.Reading{At: sent, Power: powerOf(st.State), OSRunning: st.OSRunning()}
	if st.Trusted.Resource != "" {
		rd.Source = st.Trusted.String()
	}
	return rd
}

func powerOf(s bmc.PowerState) fence.Power {
	switch s {
	case bmc.PowerOn:
		return fence.PowerOn
	case bmc.PowerOff:
		return fence.PowerOff
	case bmc.PoweringOn:
		return fence.PowerPoweringOn
	case bmc.PoweringOff:
		return fence.PowerPoweringOff
	case bmc.PowerUnknown:
		return fence.PowerUnknown
	}
	return fence.PowerUnknown
}

// sideEffect performs one irreversible action of the state s, decided on
// the view decided. A power-off and a taint rested on a cached view: the
// server is asked first (the fencing token, a renewal we missed,
// maintenance), and compared with the view the decision rested on, not
// with what our own reads took in since; the BMC target's identity is
// checked right before (invariants 3 and 4). An error wrapping ErrConflict
// means the fencing token is no longer ours and nothing was done.
func (r *Runner) sideEffect(ctx context.Context, name string, rec *record, s fence.State, k fence.ActionKind, decided fence.NodeView) (fence.Result, error) {
	// Until the BMC is called, nothing was sent: an error on the way is
	// not an attempt the BMC ignored (fence.Result.NotSent).
	res := fence.Result{NotSent: true}
	token := r.token(rec)
	if k == fence.ActPowerOff || k == fence.ActApplyTaint {
		start := r.opts.Clock.Now()
		c, err := r.opts.Cluster.Recheck(ctx, name)
		if err != nil {
			return res, fmt.Errorf("not acting: cannot read the node from the API server: %w", err)
		}
		r.log.Info("fence recheck done", zap.String("node", name), zap.Stringer("action", k), zap.Duration("took", r.opts.Clock.Since(start)))
		keepOff := s.Phase == fence.Detaching
		if err := c.blocks(token, !keepOff, decided); err != nil {
			return res, err
		}
	}
	switch k {
	case fence.ActPowerOff, fence.ActPowerOn:
		ctrl, ok := r.opts.Inventory.Controller(name)
		if !ok {
			return res, errors.New("no BMC entry")
		}
		if _, leveled := ctrl.(Leveled); leveled {
			// The level the fence read (s.Target): its outlets, or
			// its BMC. A target the entry no longer has gets level 1,
			// whose Key in the result tells the engine (as without
			// levels).
			if l, _, found := levelFor(ctrl, s.Target); found {
				ctrl = l
			}
		}
		res.Target = ctrl.Key()
		if err := r.acquire(ctx); err != nil {
			return res, err
		}
		defer r.release()
		if k == fence.ActPowerOff && fence.Enabled(fence.CheckIdentity) {
			if err := r.verify(ctx, rec, ctrl); err != nil {
				return res, fmt.Errorf("not acting: identity check failed: %w", err)
			}
		}
		res.NotSent = false
		call := ctrl.PowerOff
		if k == fence.ActPowerOn {
			call = ctrl.PowerOn
		}
		// Taken before the call: the engine counts ownOffWithin from it,
		// and the BMC cannot have received the command earlier.
		res.SentAt = r.opts.Clock.Now()
		_, err := call(ctx)
		if k == fence.ActPowerOff && s.Phase == fence.Detaching {
			r.opts.Recorder.KeptOff(name)
		}
		return res, err
	case fence.ActApplyTaint:
		if !s.Attested && fence.Enabled(fence.CheckIdentity) {
			// The last identity check before the taint: the Off run was
			// read from this target, and it must still be this node's.
			ctrl, ok := r.opts.Inventory.Controller(name)
			if !ok {
				return res, errors.New("not acting: no BMC entry")
			}
			if _, leveled := ctrl.(Leveled); leveled {
				if l, _, found := levelFor(ctrl, s.Target); found {
					ctrl = l
				}
			}
			if ctrl.Key() != s.Target && s.Target != "" {
				return res, fmt.Errorf("not acting: the node's BMC entry changed (%s, the run was read from %s)", ctrl.Key(), s.Target)
			}
			start := r.opts.Clock.Now()
			if err := r.acquire(ctx); err != nil {
				return res, err
			}
			slot := r.opts.Clock.Now()
			err := r.verify(ctx, rec, ctrl)
			r.release()
			if err != nil {
				return res, fmt.Errorf("not acting: identity check failed: %w", err)
			}
			r.log.Info("fence identity checked", zap.String("node", name), zap.Stringer("action", k),
				zap.Duration("slotWait", slot.Sub(start)), zap.Duration("took", r.opts.Clock.Since(slot)))
		}
		return res, r.opts.Cluster.ApplyTaint(ctx, name, token)
	case fence.ActRemoveTaint:
		return res, r.opts.Cluster.RemoveTaint(ctx, name, token)
	case fence.ActForgetTaint:
		return res, r.opts.Cluster.ForgetTaint(ctx, name, token)
	default:
		return res, fmt.Errorf("not a side effect: %v", k)
	}
}

// noteOutcome records metrics for a completed side effect.
func (r *Runner) noteOutcome(name string, prev, s fence.State, k fence.ActionKind, err error) {
	if err != nil {
		r.log.Warn("fence action failed", zap.String("node", name), zap.Stringer("action", k), zap.Error(err))
		return
	}
	r.log.Info("fence action done", zap.String("node", name), zap.Stringer("action", k), zap.Stringer("phase", s.Phase))
	if k == fence.ActApplyTaint {
		reason := "accepted"
		switch {
		case s.Attested:
			reason = "attested"
		case !s.PowerOffAccepted || s.AcceptanceUntrusted:
			reason = "unassisted"
		}
		r.opts.Recorder.Fence("tainted", reason, r.opts.Clock.Since(s.FailureStart))
		r.noteLevel(name, s)
	}
}

func (r *Runner) event(name string, ev fence.Event) {
	if ev.ManualFence {
		ev.Message += ". If you made sure it has no power (a failed supply, a pulled cord, an open breaker), fence it by hand: " + fence.ManualFenceCommand(name)
	}
	if r.opts.DryRun {
		ev.Reason = "DryRun" + ev.Reason
		ev.Message = "[dry-run] " + ev.Message
	}
	r.opts.Cluster.Event(name, ev)
	level := r.log.Info
	if ev.Warning {
		level = r.log.Warn
	}
	level(ev.Message, zap.String("node", name), zap.String("reason", ev.Reason))
}

// stormEvent announces a storm refusal once per stormEventEvery, on the
// first node refused, instead of once per node.
func (r *Runner) stormEvent(name string, ev fence.Event) {
	now := r.opts.Clock.Now()
	r.stormMu.Lock()
	say := r.stormSaid.IsZero() || now.Sub(r.stormSaid) >= stormEventEvery
	if say {
		r.stormSaid = now
	}
	r.stormMu.Unlock()
	if !say {
		r.log.Debug(ev.Message, zap.String("node", name), zap.String("reason", ev.Reason))
		return
	}
	ev.Reason = "FenceStorm"
	ev.Message += "; every power-off of a machine that may run is refused until it passes (each node's refusal is in its evidence; this Event repeats every " + stormEventEvery.String() + " while it lasts)"
	r.event(name, ev)
}

// would announces, once per phase entry, a side effect dry-run skips.
func (r *Runner) would(name string, rec *record, k fence.ActionKind, s fence.State) {
	if rec.would[k].Equal(s.Since) {
		return
	}
	if rec.would == nil {
		rec.would = map[fence.ActionKind]time.Time{} // only dry-run's nodes in a fence need one
	}
	rec.would[k] = s.Since
	ev := fence.Event{Warning: true, Reason: "Would" + k.String(),
		Message: fmt.Sprintf("would %s now (phase %s, failure began %s); dry-run changes nothing", k, s.Phase, s.FailureStart.UTC().Format(time.RFC3339))}
	r.opts.Cluster.Event(name, ev)
	r.log.Warn(ev.Message, zap.String("node", name), zap.Bool("dryRun", true))
}

// acquire waits for a BMC slot, as a fence in flight: first in line (slots.go).
func (r *Runner) acquire(ctx context.Context) error { return r.slots.acquire(ctx) }

// acquireFor takes a slot for a read of a node in state s (slots.go): a
// fence in flight waits for one; a suspect's first look and a watching
// read do not (ok false: the node is woken when a slot frees).
func (r *Runner) acquireFor(ctx context.Context, name string, s fence.State) (ok bool, err error) {
	kind := readKind(s)
	if kind == slotFence {
		start := r.opts.Clock.Now()
		if err := r.slots.acquire(ctx); err != nil {
			return false, err
		}
		if wait := r.opts.Clock.Since(start); wait >= slowSlot {
			r.log.Info("fence read waited for a BMC slot", zap.String("node", name), zap.Stringer("phase", s.Phase), zap.Duration("wait", wait))
		}
		return true, nil
	}
	var got bool
	if kind == slotLook {
		got = r.slots.tryLook(name)
	} else {
		got = r.slots.tryWatch(name)
	}
	if !got {
		r.log.Debug("no BMC slot for a read that does not wait; the node is synced again when one frees", zap.String("node", name), zap.Stringer("phase", s.Phase))
	}
	return got, nil
}

// slowSlot is the wait for a BMC slot worth a log line: the slots are too
// few for the fences in flight and the BMCs' speed (bmc.concurrency).
const slowSlot = time.Second

func (r *Runner) release() { r.slots.release() }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
