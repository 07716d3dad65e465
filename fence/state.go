package fence

import (
	"slices"
	"time"
	"unicode/utf8"
)

// StuckReason says why a node needs a human.
type StuckReason uint8

const (
	StuckNone StuckReason = iota
	// StuckPowerOffIgnored: the BMC accepted ForceOff PowerOffAttempts
	// times and never read Off (a lying BMC, or one that cannot act).
	StuckPowerOffIgnored
	// StuckAborted: a human aborted the fence; the node is held.
	StuckAborted
	// StuckContradiction: the node renewed its Lease after a ForceOff of
	// ours that the BMC accepted (or after a human attested it off): the
	// BMC is not this node's, or it reports a cached state. Never tainted.
	StuckContradiction
	numStuckReasons
)

var stuckNames = [numStuckReasons]string{"", "PowerOffIgnored", "Aborted", "Contradiction"}

func (r StuckReason) String() string {
	if r < numStuckReasons {
		return stuckNames[r]
	}
	return "?"
}

// State is everything the engine remembers about one node. It is a value:
// Step returns a new one. The runner persists it on the Node (Encode) so a
// restarted agent or a new leader resumes exactly.
type State struct {
	// Writer identifies the process that wrote this state (a runner's ID).
	// Times in a state another process wrote are on its clock: the runner
	// adopts such a state (Adopt) before comparing any of them with ours.
	Writer string
	Phase  Phase
	// Since is when Phase was entered.
	Since time.Time
	// FailureStart is the last sign of life we observed before the node was
	// suspected; every reading that counts must be later.
	FailureStart time.Time
	// Target is the BMC target this fence talks to (Reading.Target). A
	// reading or command result from another target voids what the fence
	// learned: everything starts over against the new one.
	Target string
	// NotReadyFence: suspected for being NotReady past
	// Policy.PowerOffNotReadyAfter while still renewing its Lease (an
	// explicit opt-in); renewals before our ForceOff do not end it.
	NotReadyFence bool
	// AdmittedAt is when the storm guard admitted this fence, or when it
	// last sent a ForceOff since (for the fleet's cooldown). Zero when not
	// admitted.
	AdmittedAt time.Time
	// PowerLoss: the fence was admitted on an exact-Off reading
	// (AdmitPowerLoss), and counts against MaxConcurrentPowerLossFences
	// instead of MaxConcurrentFences.
	PowerLoss bool
	// Manual: a human asked for this fence. Attested: a human confirmed the
	// node is off. By names that human.
	Manual   bool
	Attested bool
	By       string
	// AttestedAt is when a human's confirm was taken (on our clock); it
	// stands for Policy.AttestationTTL. Forced: the confirm overrides a
	// contrary live witness (kubectl fence confirm --force, with a reason).
	AttestedAt time.Time
	Forced     bool
	// OffRun is the current run of valid exact-Off readings.
	OffRun OffRun
	// PowerOffAt is our last power-off request, PowerOffs how many we sent
	// in this fence. PowerOffAccepted: the BMC accepted that request (no
	// error). Only Off readings after an accepted ForceOff settle within
	// SettleWindow; after one answered "already off", or failed, the Off is
	// not ours and settles only over UnassistedSettleWindow.
	PowerOffAt       time.Time
	PowerOffs        int
	PowerOffAccepted bool
	// PowerOffSentAt is when the runner sent that request (Result.SentAt):
	// after PowerOffAt by the state write, the recheck and the identity
	// check. Policy.OwnOffWithin counts from it (forceOffFrom).
	PowerOffSentAt time.Time
	// AcceptanceUntrusted: in this fence the BMC accepted a ForceOff and
	// the machine read On after it anyway (ignored past
	// Policy.OwnOffWithin, or undone after an Off). An acceptance from
	// this BMC no longer makes an Off ours: every Off of this fence
	// settles over UnassistedSettleWindow.
	AcceptanceUntrusted bool
	// KeptOff counts ForceOffs sent after the taint because the machine
	// read On again before detach completed (invariant 7).
	KeptOff int
	// KeptOffAt is when this process last decided a keep-off ForceOff,
	// or heard it was sent: the node is back (recoveredAfterTaint) only
	// on a renewal written after it. Not persisted: a process that adopts
	// a state with KeptOff > 0 counts from its adoption (Adopt).
	KeptOffAt time.Time
	PowerOnAt time.Time
	// TaintedAt is when our taint was applied (or adopted); TaintOwned says
	// whether the taint on the node is ours to remove.
	TaintedAt  time.Time
	TaintOwned bool
	FencedAt   time.Time
	// NextReadAt schedules the next BMC read (or, while detaching, the next
	// poll); ReadFailures counts consecutive failed reads for backoff.
	NextReadAt   time.Time
	ReadFailures int
	// UnfenceableSaid: this episode's report that nothing the agent can
	// reach proves the machine off has been sent; it is sent once per
	// episode, however often the BMC comes and goes.
	UnfenceableSaid bool
	// Last is the most recent BMC reading.
	Last  Reading
	Stuck StuckReason
	// Refusal is the storm guard's current refusal, so it is announced once
	// per streak rather than on every read.
	Refusal RefusalReason
	// Warned: the warning belonging to the current phase (not fenceable,
	// detach blocked) has been emitted.
	Warned   bool
	Evidence Evidence
	// DiagnoseAt is when this fence sent its diagnostic interrupt (an NMI
	// for a crash dump, Policy.DiagnoseBeforeOff), zero when it sent none;
	// the ForceOff waits Policy.DiagnoseTimeout from then. DiagnoseSkipped:
	// the interrupt could not be sent (a BMC without one, a refusal): the
	// fence goes on without a dump (diagnose.go).
	DiagnoseAt      time.Time
	DiagnoseSkipped bool
	// Unsaved: a suspicion entered from Healthy on the Lease's silence
	// alone, not written yet (Step's output, "unsaved suspicions"). Never
	// encoded: the annotation still holds the Healthy state before it, and
	// a restarted agent or a new leader suspects afresh on its own clock.
	// A suspicion a power-off event started is one too (events.go,
	// offEventEntry): its first write would sit on the event's fast path,
	// in series with the ForceOff's, at the moment a power loss makes the
	// API server slowest.
	Unsaved bool
	// HeldEvent is what an unsaved suspicion had to say beyond the
	// suspicion itself (the power-off event that started it), said when
	// the suspicion is written or ends; Reason is empty when there is
	// none. In memory only, as Unsaved.
	HeldEvent Event
}

// OffRun tracks "off and staying off": consecutive valid exact-Off readings.
// The CLI's `bmc off` uses the same type, so a human and the agent agree on
// what settled means.
type OffRun struct {
	First time.Time
	Last  time.Time
	Count int
}

// Observe returns the run extended by rd, or an empty run if rd does not
// count: anything but an exact Off, a failed read, an OS claimed running, a
// reading not later than notBefore, or one not later than the run's last.
// A valid reading more than maxGap after the run's last starts a new run: we
// did not watch the machine in between, so the reads are not consecutive.
func (r OffRun) Observe(rd Reading, notBefore time.Time, maxGap time.Duration) OffRun {
	if rd.Failure != "" || rd.Power != PowerOff || rd.OSRunning || !rd.At.After(notBefore) ||
		(r.Count > 0 && !rd.At.After(r.Last)) {
		return OffRun{}
	}
	if r.Count > 0 && (rd.At.Sub(r.Last) > maxGap || !r.First.After(notBefore) || r.Last.Before(r.First)) {
		// A hole, or a run that does not itself satisfy notBefore (a
		// power-off since, or a state we did not write): start over.
		r = OffRun{}
	}
	if r.Count == 0 {
		r.First = rd.At
	}
	r.Last = rd.At
	r.Count++
	return r
}

// Settled reports whether the run proves the machine is off and staying off
// after a ForceOff of ours that the BMC accepted.
func (r OffRun) Settled(p Policy) bool { return r.SettledOver(p.SettleWindow, p.SettleReads) }

// SettledOver reports whether the run holds at least reads readings spanning
// at least window (UnassistedSettleWindow for an Off we did not cause).
func (r OffRun) SettledOver(window time.Duration, reads int) bool {
	return r.Count >= reads && r.Last.Sub(r.First) >= window
}

// RecordKind classifies evidence.
type RecordKind uint8

const (
	RecReading RecordKind = iota
	RecTransition
	RecAction
	RecResult
	RecCommand
	RecRefusal
	numRecordKinds
)

var recordNames = [numRecordKinds]string{"reading", "transition", "action", "result", "command", "refusal"}

func (k RecordKind) String() string {
	if k < numRecordKinds {
		return recordNames[k]
	}
	return "?"
}

// Record is one piece of evidence. Identical consecutive readings collapse
// into one record with a Count and an Until, so a long wait does not flush the
// decisions that matter out of the bounded history.
type Record struct {
	At     time.Time
	Until  time.Time
	Count  int
	Kind   RecordKind
	Phase  Phase // the phase after the record (transitions: the new phase)
	From   Phase // transitions only
	Power  Power
	Action ActionKind
	Note   string
}

// EvidenceCap bounds the history kept per node; with collapsed readings it
// holds a whole fence, and it keeps the annotation a few KiB.
const EvidenceCap = 24

// Evidence is the node's latest records, oldest first, at most EvidenceCap.
// States are values the engine copies at every step: the records are never
// written in place (add builds a new slice), so copies share them safely.
// A node that was never in a fence has none, and no State holds an array:
// an inline ring made every State 2.5 KiB, copied by value at each step and
// held twice per node (the runner's records were 7.5 MiB at 1000 nodes).
type Evidence struct {
	recs []Record
}

// Len returns the number of records held.
func (e *Evidence) Len() int { return len(e.recs) }

// Records returns the records, oldest first.
func (e *Evidence) Records() []Record { return slices.Clone(e.recs) }

// last returns a copy of the newest record, or nil.
func (e *Evidence) last() *Record {
	if len(e.recs) == 0 {
		return nil
	}
	l := e.recs[len(e.recs)-1]
	return &l
}

// MaxNoteLen bounds one evidence note (and the human's name and reason in
// it), so that a full ring always encodes within what Decode accepts.
const MaxNoteLen = 240

// Clip cuts s to at most n bytes at a UTF-8 boundary, marking the cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

func (e *Evidence) add(r Record) {
	if r.Count == 0 {
		r.Count = 1
	}
	r.Note = Clip(r.Note, MaxNoteLen)
	n := len(e.recs)
	if r.Kind == RecReading && n > 0 {
		if l := e.recs[n-1]; l.Kind == RecReading && l.Power == r.Power && l.Note == r.Note && l.Phase == r.Phase {
			l.Count++
			l.Until = r.At
			out := slices.Clone(e.recs)
			out[n-1] = l
			e.recs = out
			return
		}
	}
	drop := max(0, n+1-EvidenceCap)
	out := make([]Record, 0, n+1-drop)
	out = append(out, e.recs[drop:]...)
	e.recs = append(out, r)
}
