package runner

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/mutant"
)

// EvidenceReader is optionally implemented by a PowerController whose BMC
// can report hung-node evidence (its host watchdog and event log:
// bmc.EvidenceReport). The runner reads it only for a node in Suspect (or
// PoweringOff) whose BMC itself just read On (not a level below it), at
// most once per Options.EvidenceInterval: a healthy node costs no request
// at all.
type EvidenceReader interface {
	ReadEvidence(ctx context.Context) (bmc.EvidenceReport, error)
}

// DefaultEvidenceInterval bounds how often a suspect node's evidence is
// read again.
const DefaultEvidenceInterval = 10 * time.Second

// evidence is the runner's memory of one node's BMC evidence.
type evidence struct {
	// seen keeps, per target and entry key, when we first saw an entry,
	// on our clock, for the life of the runner (bmc.FirstSeen).
	seen bmc.FirstSeen
	// host is the latest read of this fence, handed with every reading
	// until the next read.
	host fence.HostEvidence
}

// hostEvidence is the node's evidence to hand to Step with the reading rd:
// read anew when it is due (the node is in a pre-taint phase of a fence,
// its BMC read On, the last read is EvidenceInterval old or from another
// target), the last read otherwise, nothing outside a fence.
func (r *Runner) hostEvidence(ctx context.Context, name string, rec *record, rd fence.Reading) fence.HostEvidence {
	ph := rec.state.Phase
	if ph != fence.Suspect && ph != fence.PoweringOff {
		rec.evidence.host = fence.HostEvidence{}
		return fence.HostEvidence{}
	}
	if rd.Failure != "" || (rd.Power != fence.PowerOn && rd.Power != fence.PowerPoweringOn) {
		return rec.evidence.host
	}
	ctrl, ok := r.opts.Inventory.Controller(name)
	if !ok {
		return fence.HostEvidence{}
	}
	er, ok := ctrl.(EvidenceReader)
	if !ok {
		return fence.HostEvidence{}
	}
	key := ctrl.Key()
	if rd.Target != key {
		// The reading came from a level below the BMC (its outlets):
		// evidence counts only when read from the target the reading
		// came from (fence/hostevidence.go, signRejection), so the BMC's
		// could license nothing here, and a BMC that could not answer
		// the power read would only cost its full timeout again.
		return rec.evidence.host
	}
	now := r.opts.Clock.Now()
	h := rec.evidence.host
	if (h.Target == key || mutant.On(mutant.EvidenceTarget)) && !h.At.IsZero() && now.Sub(h.At) < r.evidenceInterval() {
		return h
	}
	// A fence in flight waits for its slot; a suspect's evidence is read
	// only if a slot beyond the reserved ones is free now (slots.go): 500
	// live suspects' evidence reads waited in the fences' line.
	if readKind(rec.state) == slotFence {
		if err := r.acquire(ctx); err != nil {
			return h
		}
	} else if !r.slots.tryExtra() {
		return h
	}
	defer r.release()
	sent := r.opts.Clock.Now()
	// The power read right before verified this target (or failed); the
	// evidence counts only from a target verified when it was read.
	verified := rec.verifiedKey == key && (!fence.Enabled(fence.CheckIdentity) || sent.Sub(rec.verifiedAt) < r.opts.VerifyInterval)
	rep, err := er.ReadEvidence(ctx)
	h = HostEvidenceOf(sent, r.opts.Clock.Now(), key, verified, rep, err, &rec.evidence.seen)
	if err != nil {
		r.log.Info("cannot read the BMC's hung-node evidence", zap.String("node", name), zap.Error(err))
	}
	rec.evidence.host = h
	return h
}

func (r *Runner) evidenceInterval() time.Duration {
	if r.opts.EvidenceInterval > 0 {
		return r.opts.EvidenceInterval
	}
	return DefaultEvidenceInterval
}

// HostEvidenceOf turns one evidence read of target key, sent at sent and
// answered by now, into the engine's HostEvidence, stamping each entry
// with when we first saw it (seen, keyed by target and entry key).
func HostEvidenceOf(sent, now time.Time, key string, verified bool, rep bmc.EvidenceReport, err error, seen *bmc.FirstSeen) fence.HostEvidence {
	h := fence.HostEvidence{At: sent, Target: key, Verified: verified}
	if err != nil {
		h.Failure = bmc.Reason(err) + ": " + err.Error()
		return h
	}
	h.WatchdogReported, h.WatchdogArmed = rep.Watchdog.Reported, rep.Watchdog.Enabled
	h.Unsupported = append([]string(nil), rep.Unsupported...)
	keyed := make([]bmc.Evidence, len(rep.Entries))
	for i, e := range rep.Entries {
		e.Key = key + "|" + e.Key
		keyed[i] = e
	}
	first := seen.Observe(now, keyed)
	for i, e := range rep.Entries {
		h.Signs = append(h.Signs, fence.Sign{Kind: signKindOf(e.Kind), TimerUse: timerUseOf(e.TimerUse), Boot: bootOf(e.Boot),
			OtherSystem: e.OtherSystem, FirstSeen: first[i], Key: e.Key, Source: e.Source})
	}
	return h
}

func signKindOf(k bmc.EvidenceKind) fence.SignKind {
	switch k {
	case bmc.EvidenceWatchdogExpired:
		return fence.SignWatchdogExpired
	case bmc.EvidenceOSCriticalStop:
		return fence.SignOSCriticalStop
	}
	return fence.SignUnknown
}

func timerUseOf(u bmc.TimerUse) fence.SignTimerUse {
	switch u {
	case bmc.TimerUseBIOSFRB2:
		return fence.TimerUseBIOSFRB2
	case bmc.TimerUseBIOSPOST:
		return fence.TimerUseBIOSPOST
	case bmc.TimerUseOSLoad:
		return fence.TimerUseOSLoad
	case bmc.TimerUseSMSOS:
		return fence.TimerUseSMSOS
	case bmc.TimerUseOEM:
		return fence.TimerUseOEM
	case bmc.TimerUseUnknown:
	}
	return fence.TimerUseUnknown
}

func bootOf(b bmc.BootRelation) fence.SignBoot {
	switch b {
	case bmc.BootCurrent:
		return fence.SignBootCurrent
	case bmc.BootPrevious:
		return fence.SignBootPrevious
	case bmc.BootUnknown:
	}
	return fence.SignBootUnknown
}
