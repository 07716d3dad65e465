// Package timeline draws one fence (a BMCFenceRecord) on a time axis, for
// `kubectl fence history NODE RECORD --timeline` (Text, for a terminal)
// and `-o svg` (SVG, for a postmortem): the phases as bars, the BMC's
// readings as ticks, the actions and requests as labels, who asked, and the
// two witnesses a taint rests on: the node's Lease silent on the agent's
// clock, and a settled Off after a ForceOff of ours that the BMC accepted.
//
// Everything here is pure: a record in, text or SVG out, with the time zone
// to print wall-clock times in as a parameter. Times in a record are whole
// seconds (metav1.Time), so the pictures are too.
package timeline

import (
	"fmt"
	"strings"
	"time"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/cluster/history"
	"github.com/bmcfence/bmcfence/fence"
)

// Fence is one record laid out in time.
type Fence struct {
	Node, Record string
	Trigger      string
	RequestedBy  string
	Reason       string
	Outcome      string
	// Start is the record's startedAt: the node's last sign of life the
	// agent observed, where the Lease's silence begins. End is its
	// finishedAt, or its last entry while it is open.
	Start, End time.Time
	Open       bool
	// Phases in time order; a phase entered twice has two spans.
	Phases []Span
	// Readings of the BMC, in time order.
	Readings []Reading
	// Marks are the actions, their results, the requests and the
	// refusals, in time order: the labels of the picture.
	Marks []Mark
	// Silence is the first witness: no renewal of the node's Lease, from
	// Start until the node came back (or the end of the record).
	Silence Span
	// Renewed: the silence ended with a renewal the agent saw (the node
	// back, or a contradiction: alive after our ForceOff).
	Renewed bool
	// Off is the second witness, nil when the record has none: the Off
	// readings from the first after our accepted ForceOff (or the
	// human's attestation) until the taint was decided.
	Off *OffWitness
	// Entries is the record's timeline without the copies older agents
	// stored, oldest first.
	Entries []v1alpha1.TimelineEntry
}

// Span is an interval with a name.
type Span struct {
	Name     string
	From, To time.Time
}

// Duration of the span.
func (s Span) Duration() time.Duration { return s.To.Sub(s.From) }

// Reading is one Reading entry: a power read Count times from At to Until.
type Reading struct {
	At, Until time.Time
	Count     int
	Power     string
	Note      string
	Phase     string
}

// MarkKind says what a mark is.
type MarkKind string

// The mark kinds.
const (
	MarkAction  MarkKind = "action"
	MarkResult  MarkKind = "result"
	MarkRequest MarkKind = "request"
	MarkRefusal MarkKind = "refusal"
)

// Mark is a labelled moment.
type Mark struct {
	At    time.Time
	Kind  MarkKind
	Label string
	Who   string
}

// OffWitness is the settled Off a taint rests on.
type OffWitness struct {
	Span
	// ForceOffAt is when the BMC accepted our ForceOff (zero when the Off
	// was not ours: unassisted, or attested by a human).
	ForceOffAt time.Time
	// Reads counts the Off readings in the span.
	Reads int
	// How says what makes the Off count: "after our accepted ForceOff",
	// "unassisted: no ForceOff of ours accepted", "attested by alice".
	How string
}

// Build lays a record out.
func Build(rec v1alpha1.BMCFenceRecord) Fence {
	entries := history.Merge(nil, rec.Status.Timeline)
	f := Fence{
		Node: rec.Spec.NodeName, Record: rec.Name, Trigger: string(rec.Spec.Trigger), RequestedBy: rec.Spec.RequestedBy,
		Reason: rec.Spec.Reason, Outcome: rec.Status.Outcome, Entries: entries, Open: rec.Status.FinishedAt == nil,
	}
	switch {
	case rec.Status.StartedAt != nil:
		f.Start = rec.Status.StartedAt.Time
	case len(entries) > 0:
		f.Start = entries[0].Time.Time
	}
	f.End = f.Start
	if rec.Status.FinishedAt != nil {
		f.End = rec.Status.FinishedAt.Time
	}
	later := func(t time.Time) {
		if t.After(f.End) {
			f.End = t
		}
		if t.Before(f.Start) {
			f.Start = t
		}
	}
	f.Silence = Span{Name: "Lease silent", From: f.Start}
	var (
		renewed    time.Time
		forceOffAt time.Time
		offFrom    time.Time
		offReads   int
		attestedBy string
		settledAt  time.Time
		settledHow string
		openPhase  = -1
		offNotOurs bool
	)
	for _, e := range entries {
		at := e.Time.Time
		later(at)
		switch e.Kind {
		case v1alpha1.EntryReading:
			r, ok := history.ParseReading(e.Message)
			if !ok {
				r = history.ReadingText{Power: "Unknown", Note: e.Message, Count: 1}
			}
			rd := Reading{At: at, Until: at, Count: max(r.Count, 1), Power: r.Power, Note: r.Note, Phase: e.Phase}
			if r.Count > 1 && r.Until.After(at) {
				rd.Until = r.Until
			}
			later(rd.Until)
			f.Readings = append(f.Readings, rd)
			if settledAt.IsZero() && (!forceOffAt.IsZero() || offNotOurs) {
				if r.Power == fence.PowerOff.String() && r.Note == "" {
					if offFrom.IsZero() {
						offFrom = at
					}
					offReads += rd.Count
				} else {
					offFrom, offReads = time.Time{}, 0
				}
			}
		case v1alpha1.EntryDecision:
			to, note, ok := transition(e.Message)
			if !ok {
				f.Marks = append(f.Marks, Mark{At: at, Kind: MarkRefusal, Label: e.Message, Who: e.Who})
				continue
			}
			if openPhase >= 0 {
				f.Phases[openPhase].To = at
			}
			f.Phases = append(f.Phases, Span{Name: to, From: at, To: at})
			openPhase = len(f.Phases) - 1
			switch {
			case renewed.IsZero() && (to == fence.Untainting.String() || to == fence.Healthy.String() ||
				to == fence.Stuck.String() && strings.Contains(note, "renewal")):
				renewed = at
			case to == fence.Tainting.String() && settledAt.IsZero():
				settledAt = at
				switch {
				case strings.HasPrefix(note, "off attested by "):
					attestedBy = strings.TrimPrefix(note, "off attested by ")
					settledHow = "attested by " + attestedBy
				case !forceOffAt.IsZero():
					settledHow = "after our accepted ForceOff"
				default:
					settledHow = "unassisted: no ForceOff of ours accepted"
				}
			case to == fence.Suspect.String() || to == fence.PoweringOff.String():
				// A new attempt: an Off run starts over after it.
				offFrom, offReads = time.Time{}, 0
			}
		case v1alpha1.EntryAction:
			kind, label := action(e.Message)
			f.Marks = append(f.Marks, Mark{At: at, Kind: kind, Label: label, Who: e.Who})
			if settledAt.IsZero() {
				switch {
				case e.Message == fence.ActPowerOff.String()+": ok":
					forceOffAt, offNotOurs = at, false
					offFrom, offReads = time.Time{}, 0
				case strings.HasPrefix(e.Message, fence.ActPowerOff.String()+": "):
					// Answered "already off", or failed: an Off now is
					// not ours and counts only over the unassisted window.
					forceOffAt, offNotOurs = time.Time{}, true
				}
			}
		case v1alpha1.EntryRequest:
			f.Marks = append(f.Marks, Mark{At: at, Kind: MarkRequest, Label: e.Message, Who: e.Who})
		}
	}
	if openPhase >= 0 {
		f.Phases[openPhase].To = f.End
	}
	// The record closes when the node is Healthy again: that last phase
	// is the end, not a span.
	if n := len(f.Phases); n > 0 && f.Phases[n-1].Name == fence.Healthy.String() && !f.Open {
		f.Phases = f.Phases[:n-1]
	}
	f.Silence.To = f.End
	if !renewed.IsZero() {
		f.Silence.To, f.Renewed = renewed, true
	}
	if !settledAt.IsZero() {
		w := &OffWitness{Span: Span{Name: "Off settled", From: offFrom, To: settledAt}, ForceOffAt: forceOffAt, Reads: offReads, How: settledHow}
		if attestedBy != "" || offFrom.IsZero() {
			// A human's word, not a run of readings.
			w.From, w.Reads, w.Name = settledAt, 0, "Off attested"
		}
		f.Off = w
	}
	return f
}

// transition reads a Decision's "From → To: note".
func transition(msg string) (to, note string, ok bool) {
	_, rest, ok := strings.Cut(msg, " → ")
	if !ok {
		return "", "", false
	}
	to, note, _ = strings.Cut(rest, ": ")
	if _, err := fence.ParsePhase(to); err != nil {
		return "", "", false
	}
	return to, note, true
}

// actionWords are what an operator calls the recorded actions: the thing
// done, the action sent, its success.
var actionWords = map[string][3]string{
	fence.ActPowerOff.String():    {"ForceOff", "ForceOff sent", "ForceOff accepted by the BMC"},
	fence.ActPowerOn.String():     {"power-on", "power-on sent", "power-on accepted by the BMC"},
	fence.ActApplyTaint.String():  {"out-of-service taint", "out-of-service taint sent", "out-of-service taint applied"},
	fence.ActRemoveTaint.String(): {"removing our taint", "removing our taint", "our taint removed"},
	fence.ActForgetTaint.String(): {"forgetting our taint", "forgetting our taint", "our taint forgotten"},
	fence.ActDiagnose.String():    {"crash-dump NMI", "NMI sent for a crash dump (diagnoseBeforeOff)", "NMI accepted by the BMC"},
}

// action labels an Action entry: "PowerOff" (sent) or "PowerOff: ok"
// (its result).
func action(msg string) (MarkKind, string) {
	name, result, isResult := strings.Cut(msg, ": ")
	words, known := actionWords[name]
	switch {
	case !known:
		return MarkAction, msg
	case !isResult:
		return MarkAction, words[1]
	case result == "ok":
		return MarkResult, words[2]
	case strings.HasPrefix(result, "already in that state"):
		return MarkResult, words[0] + " not accepted: " + result
	default:
		return MarkResult, words[0] + " failed: " + result
	}
}

// SilenceNote says how long the Lease was silent and how that ended.
func (f Fence) SilenceNote() string {
	s := fmt.Sprintf("no renewal seen for %s", since(f.Silence.From, f.Silence.To))
	if f.Renewed {
		return s + ", then one"
	}
	return s + ", nor since"
}

// Offset is t as seconds after the fence's start, "+20s".
func (f Fence) Offset(t time.Time) string {
	return "+" + since(f.Start, t)
}

// since formats t-start in whole seconds: "20s", "1m29s".
func since(start, t time.Time) string {
	return t.Sub(start).Round(time.Second).String()
}
