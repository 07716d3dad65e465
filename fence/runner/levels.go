package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
)

// Fencing levels, Pacemaker-style: level 1 is the node's BMC (the
// PowerController the Inventory gives); the levels below it (PDU outlets)
// are PowerControllers too, with their own Key naming the level, so the
// engine sees a reading whose Target names the level and its existing rules
// do the rest: a reading from another target than the fence's voids what
// the old one said (before the taint), our own off must be accepted and
// read back Off, settled, from that same target.
//
// A level is read only when every level above it cannot fence: its read,
// or its identity check, failed as unreachable, timed out, refused our
// credentials, or is unsupported. A level that answers (On, Off, anything)
// is never overruled by one below it. Power commands go to the level the
// fence's Target names: keep-off, power-on and unfence go through the same
// outlets as the off.

// Leveled is optionally implemented by a node's PowerController (its
// level 1) when the node has fencing levels below its BMC.
type Leveled interface {
	// Levels are the levels below the BMC, level 2 first. Each one's Key
	// names the level; Verify passes only for a level whose every outlet
	// has a recorded identity proof for this node (or the explicit
	// allowUnverifiedOutlet opt-in).
	Levels() []PowerController
}

// Metered is implemented by a level that meters what the machine draws (a
// PDU level: its outlets' metering).
type Metered interface {
	// Drawless reports whether every outlet of the level meters about 0 W
	// now. An error (a PDU that does not meter) is not drawless.
	Drawless(ctx context.Context) (bool, error)
}

// LevelRecorder is optionally implemented by a Recorder: it counts taints
// by the fencing level that proved the machine off ("1" the BMC, "2"...).
type LevelRecorder interface {
	LevelFence(level string)
}

// cannotFence reports whether err means the level cannot fence at all
// (the next level may be tried), as opposed to an answer.
func cannotFence(err error) bool {
	return errors.Is(err, bmc.ErrUnreachable) || errors.Is(err, bmc.ErrTimeout) ||
		errors.Is(err, bmc.ErrAuth) || errors.Is(err, bmc.ErrUnsupported)
}

// levelsOf lists the node's levels, level 1 (ctrl itself) first.
func levelsOf(ctrl PowerController) []PowerController {
	out := []PowerController{ctrl}
	if lv, ok := ctrl.(Leveled); ok {
		out = append(out, lv.Levels()...)
	}
	return out
}

// levelFor is the level whose Key is target, with its number (1-based);
// level 1 when target is empty. ok is false when no level of the node has
// that key (its inventory entry changed).
func levelFor(ctrl PowerController, target string) (PowerController, int, bool) {
	levels := levelsOf(ctrl)
	if target == "" {
		return ctrl, 1, true
	}
	for i, l := range levels {
		if l.Key() == target {
			return l, i + 1, true
		}
	}
	return ctrl, 1, false
}

// DeadLevelTimeout is the default Options.DeadLevelTimeout: it bounds the
// read of a level that could not fence at its last read (a BMC dead with
// its machine), when a level below it is left to try. It is still read first, every time, so a level that answers
// again is heard and never overruled; but its silence costs this, not the
// BMC's full timeout (10 s), on each of the reads a fence through the
// level below takes (suspect, off, every settle read).
const DeadLevelTimeout = 2 * time.Second

// readLevels reads level after level until one can answer (see above).
// The caller holds a BMC slot.
func (r *Runner) readLevels(ctx context.Context, rec *record, ctrl PowerController) fence.Reading {
	levels := levelsOf(ctrl)
	begun := r.opts.Clock.Now()
	var rd fence.Reading
	for i, l := range levels {
		var err error
		lctx, cancel := ctx, context.CancelFunc(func() {})
		if i < len(levels)-1 && rec.silentLevels[l.Key()] {
			lctx, cancel = context.WithTimeout(ctx, r.opts.DeadLevelTimeout)
		}
		rd, err = r.readLevel(lctx, rec, l)
		if err != nil && lctx.Err() != nil && ctx.Err() == nil && !cannotFence(err) {
			// Silent again within the bound: as unreachable as before.
			err = fmt.Errorf("%w: no answer within %s, as at its last read: %w", bmc.ErrTimeout, r.opts.DeadLevelTimeout, err)
		}
		cancel()
		if rec.silentLevels == nil {
			rec.silentLevels = map[string]bool{}
		}
		rec.silentLevels[l.Key()] = err != nil && cannotFence(err)
		if i > 0 {
			rd.Level = i + 1 // the Events say the outlets read it, not the BMC
		}
		if err == nil || !cannotFence(err) || i == len(levels)-1 {
			rd.Begun = begun // the settle reads are spaced from here (fence.Reading.Begun)
			if i > 0 && rd.Failure != "" {
				rd.Failure = "level " + strconv.Itoa(i+1) + ": " + rd.Failure
			}
			return rd
		}
	}
	return rd
}

// readLevel reads one level: its identity checked first when due, then its
// power; a Metered level reading On is asked whether it draws anything.
func (r *Runner) readLevel(ctx context.Context, rec *record, ctrl PowerController) (fence.Reading, error) {
	key := ctrl.Key()
	sent := r.opts.Clock.Now()
	if fence.Enabled(fence.CheckIdentity) && (key != rec.verifiedKey || sent.Sub(rec.verifiedAt) >= r.opts.VerifyInterval) {
		if err := r.verify(ctx, rec, ctrl); err != nil {
			return fence.Reading{At: sent, Failure: "identity check failed: " + err.Error(), Target: key}, err
		}
		sent = r.opts.Clock.Now()
	}
	st, err := ctrl.PowerStatus(ctx)
	rd := ReadingOf(sent, st, err)
	rd.Target = key
	if m, ok := ctrl.(Metered); ok && err == nil && rd.Power == fence.PowerOn {
		if !fence.Enabled(fence.CheckOutletDrawless) {
			rd.Drawless = true // the mutant: an outlet that is on is taken for a dead machine, unmetered
		} else if dl, merr := m.Drawless(ctx); merr == nil && dl {
			rd.Drawless = true
		}
	}
	return rd, err
}

// noteLevel counts a taint by the fencing level whose Off it rests on.
func (r *Runner) noteLevel(name string, s fence.State) {
	lr, ok := r.opts.Recorder.(LevelRecorder)
	if !ok || s.Attested {
		return
	}
	level := "1"
	if ctrl, ok := r.opts.Inventory.Controller(name); ok {
		if _, n, found := levelFor(ctrl, s.Target); found {
			level = strconv.Itoa(n)
		}
	}
	lr.LevelFence(level)
}
