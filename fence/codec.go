package fence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	unitmutant "github.com/bmcfence/bmcfence/internal/mutant"
)

// StateVersion is the version of the annotation format Encode writes. Decode
// also reads version 1 (no writer, target or acceptance): such a state was
// written by another process and is adopted onto our clock like any other.
//
// Versions mix during a rollout or a rollback: an older leader reads what a
// newer one wrote (docs/safety.md, "Versions mix during rollouts"). Decode
// therefore refuses whatever it cannot read exactly: a newer version, a field
// it does not know at any depth, a name it does not know (phase, stuck
// reason, refusal, record kind, action, power), an impossible value. The
// runner holds such a node (FenceStateUnreadable): it neither acts on it nor
// overwrites the state. So:
//
//   - A new field needs no new version if its zero value (omitted) means
//     exactly what the older release does without it: the older release
//     refuses the state whenever the field is set, and reads it whole when
//     it is not. Give it `omitempty`.
//   - A new name in an enum needs no new version: older releases refuse it.
//   - Bump StateVersion when an older release would read a state without
//     an error and misread it: a field's meaning or unit changes, a field
//     is removed or renamed while older releases still read its old key,
//     or a field's zero value starts to mean something the older release
//     would act on differently. Keep reading every version an agent may
//     still find on a node, and adopt it (Adopt).
//
// TestPreviousReleaseRefusesWhatItCannotRead runs the previous release's
// decoder (fence/testdata/prevstate; refresh it at each release with
// hack/prevstate.sh) on every state this version writes: it must refuse it
// or read it back whole.
const StateVersion = 2

// maxEncoded bounds what Decode accepts. Encode stays below it whatever the
// state holds: every free text is clipped (notes to MaxNoteLen, names and
// targets to maxIDLen), so a full evidence ring is at most ~10 KiB; and
// annotations are limited to 256 KiB in all.
const maxEncoded = 64 << 10

// maxIDLen bounds a writer ID, a target key, a user name.
const maxIDLen = 256

// Errors from Decode. Neither ever leads to a fence: the runner holds a node
// whose state it cannot read and says so.
var (
	ErrStateVersion = errors.New("fence state written by an unknown version")
	ErrStateCorrupt = errors.New("fence state is not readable")
)

type wireRun struct {
	First int64 `json:"f"`
	Last  int64 `json:"l"`
	Count int   `json:"n"`
}

type wireReading struct {
	At      int64  `json:"t"`
	Power   string `json:"p"`
	OS      bool   `json:"os,omitempty"`
	Failure string `json:"e,omitempty"`
	Target  string `json:"tg,omitempty"`
	Level   int    `json:"lv,omitempty"`
}

type wireRecord struct {
	At     int64  `json:"t"`
	Until  int64  `json:"u,omitempty"`
	Count  int    `json:"n,omitempty"`
	Kind   string `json:"k"`
	Phase  string `json:"p"`
	From   string `json:"f,omitempty"`
	Power  string `json:"pw,omitempty"`
	Action string `json:"a,omitempty"`
	Note   string `json:"m,omitempty"`
}

type wireState struct {
	V             int          `json:"v"`
	Writer        string       `json:"wr,omitempty"`
	Phase         string       `json:"ph"`
	Target        string       `json:"tg,omitempty"`
	NotReadyFence bool         `json:"nrf,omitempty"`
	AttestedAt    int64        `json:"aa,omitempty"`
	Forced        bool         `json:"frc,omitempty"`
	Accepted      bool         `json:"poa,omitempty"`
	Untrusted     bool         `json:"pou,omitempty"`
	KeptOff       int          `json:"ko,omitempty"`
	Since         int64        `json:"si,omitempty"`
	FailureStart  int64        `json:"fs,omitempty"`
	AdmittedAt    int64        `json:"ad,omitempty"`
	PowerLoss     bool         `json:"pl,omitempty"`
	Manual        bool         `json:"man,omitempty"`
	Attested      bool         `json:"att,omitempty"`
	By            string       `json:"by,omitempty"`
	OffRun        *wireRun     `json:"run,omitempty"`
	PowerOffAt    int64        `json:"po,omitempty"`
	PowerOffSent  int64        `json:"ps,omitempty"`
	PowerOffs     int          `json:"pos,omitempty"`
	PowerOnAt     int64        `json:"pn,omitempty"`
	TaintedAt     int64        `json:"ta,omitempty"`
	TaintOwned    bool         `json:"to,omitempty"`
	FencedAt      int64        `json:"fa,omitempty"`
	NextReadAt    int64        `json:"nr,omitempty"`
	ReadFailures  int          `json:"rf,omitempty"`
	Last          *wireReading `json:"last,omitempty"`
	Stuck         string       `json:"st,omitempty"`
	Refusal       string       `json:"rs,omitempty"`
	Warned        bool         `json:"w,omitempty"`
	Evidence      []wireRecord `json:"ev,omitempty"`
	Unfenceable   bool         `json:"uf,omitempty"`
	// DiagnoseAt, DiagnoseSkipped: State's (diagnose.go).
	DiagnoseAt      int64 `json:"dg,omitempty"`
	DiagnoseSkipped bool  `json:"dgs,omitempty"`
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Encode writes the state as a compact, versioned annotation value.
func Encode(s State) (string, error) {
	w := wireState{
		V:             StateVersion,
		Writer:        Clip(s.Writer, maxIDLen),
		Phase:         s.Phase.String(),
		Target:        Clip(s.Target, maxIDLen),
		NotReadyFence: s.NotReadyFence,
		AttestedAt:    nanos(s.AttestedAt),
		Forced:        s.Forced,
		Accepted:      s.PowerOffAccepted,
		Untrusted:     s.AcceptanceUntrusted,
		KeptOff:       s.KeptOff,
		Since:         nanos(s.Since),
		FailureStart:  nanos(s.FailureStart),
		AdmittedAt:    nanos(s.AdmittedAt),
		PowerLoss:     s.PowerLoss,
		Manual:        s.Manual,
		Attested:      s.Attested,
		By:            Clip(s.By, maxIDLen),
		PowerOffAt:    nanos(s.PowerOffAt),
		PowerOffSent:  nanos(s.PowerOffSentAt),
		PowerOffs:     s.PowerOffs,
		PowerOnAt:     nanos(s.PowerOnAt),
		TaintedAt:     nanos(s.TaintedAt),
		TaintOwned:    s.TaintOwned,
		FencedAt:      nanos(s.FencedAt),
		NextReadAt:    nanos(s.NextReadAt),
		ReadFailures:  s.ReadFailures,
		Stuck:         s.Stuck.String(),
		Warned:        s.Warned,
		Unfenceable:   s.UnfenceableSaid,
	}
	w.DiagnoseAt, w.DiagnoseSkipped = nanos(s.DiagnoseAt), s.DiagnoseSkipped
	if s.Refusal != Admitted {
		w.Refusal = s.Refusal.String()
	}
	if s.OffRun.Count > 0 {
		w.OffRun = &wireRun{First: nanos(s.OffRun.First), Last: nanos(s.OffRun.Last), Count: s.OffRun.Count}
	}
	if !s.Last.At.IsZero() {
		w.Last = &wireReading{At: nanos(s.Last.At), Power: s.Last.Power.String(), OS: s.Last.OSRunning,
			Failure: Clip(s.Last.Failure, MaxNoteLen), Target: Clip(s.Last.Target, maxIDLen), Level: s.Last.Level}
	}
	for _, r := range s.Evidence.Records() {
		wr := wireRecord{At: nanos(r.At), Until: nanos(r.Until), Kind: r.Kind.String(), Phase: r.Phase.String(), Note: Clip(r.Note, MaxNoteLen)}
		if r.Count > 1 {
			wr.Count = r.Count
		}
		switch r.Kind {
		case RecTransition:
			wr.From = r.From.String()
		case RecReading:
			wr.Power = r.Power.String()
		case RecAction, RecResult:
			wr.Action = r.Action.String()
		case RecCommand, RecRefusal:
		}
		w.Evidence = append(w.Evidence, wr)
	}
	b, err := json.Marshal(w)
	if err != nil {
		return "", fmt.Errorf("encoding fence state: %w", err)
	}
	return string(b), nil
}

// Decode reads an annotation value written by Encode. Anything else, an
// unknown version, an unknown name or an impossible value is an error: a
// state we cannot read exactly is not a state to act on.
func Decode(v string) (State, error) {
	if len(v) > maxEncoded {
		return State{}, fmt.Errorf("%w: %d bytes (limit %d)", ErrStateCorrupt, len(v), maxEncoded)
	}
	var probe struct {
		V *int `json:"v"`
	}
	if err := json.Unmarshal([]byte(v), &probe); err != nil || probe.V == nil {
		return State{}, fmt.Errorf("%w: not a versioned JSON object", ErrStateCorrupt)
	}
	lenient := unitmutant.On(unitmutant.MixedVersion) // the mutant reads what it knows and drops the rest
	if *probe.V != StateVersion && *probe.V != 1 && !(lenient && *probe.V > StateVersion) {
		return State{}, fmt.Errorf("%w: version %d (this agent reads 1 and %d)", ErrStateVersion, *probe.V, StateVersion)
	}
	var w wireState
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	if !lenient {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(&w); err != nil {
		return State{}, fmt.Errorf("%w: %v", ErrStateCorrupt, err)
	}
	if dec.More() {
		return State{}, fmt.Errorf("%w: trailing data", ErrStateCorrupt)
	}
	return w.state()
}

func (w wireState) state() (State, error) {
	var s State
	var err error
	var ok bool
	bad := func(field string, val any) (State, error) {
		return State{}, fmt.Errorf("%w: field %s has an impossible value %v", ErrStateCorrupt, field, val)
	}
	if s.Phase, err = ParsePhase(w.Phase); err != nil {
		return bad("ph", w.Phase)
	}
	if w.PowerOffs < 0 || w.ReadFailures < 0 || w.KeptOff < 0 {
		return bad("pos/rf/ko", fmt.Sprint(w.PowerOffs, w.ReadFailures, w.KeptOff))
	}
	s.Writer, s.Target, s.NotReadyFence = w.Writer, w.Target, w.NotReadyFence
	s.AttestedAt, s.Forced, s.PowerOffAccepted, s.KeptOff = fromNanos(w.AttestedAt), w.Forced, w.Accepted, w.KeptOff
	s.AcceptanceUntrusted = w.Untrusted
	s.Since, s.FailureStart, s.AdmittedAt = fromNanos(w.Since), fromNanos(w.FailureStart), fromNanos(w.AdmittedAt)
	s.Manual, s.Attested, s.By, s.PowerLoss = w.Manual, w.Attested, w.By, w.PowerLoss
	s.PowerOffAt, s.PowerOffs, s.PowerOnAt = fromNanos(w.PowerOffAt), w.PowerOffs, fromNanos(w.PowerOnAt)
	s.PowerOffSentAt = fromNanos(w.PowerOffSent)
	s.TaintedAt, s.TaintOwned, s.FencedAt = fromNanos(w.TaintedAt), w.TaintOwned, fromNanos(w.FencedAt)
	s.NextReadAt, s.ReadFailures, s.Warned = fromNanos(w.NextReadAt), w.ReadFailures, w.Warned
	s.UnfenceableSaid = w.Unfenceable
	s.DiagnoseAt, s.DiagnoseSkipped = fromNanos(w.DiagnoseAt), w.DiagnoseSkipped
	if w.OffRun != nil {
		if w.OffRun.Count <= 0 || w.OffRun.Last < w.OffRun.First {
			return bad("run", *w.OffRun)
		}
		s.OffRun = OffRun{First: fromNanos(w.OffRun.First), Last: fromNanos(w.OffRun.Last), Count: w.OffRun.Count}
	}
	if w.Last != nil {
		p, ok := parsePower(w.Last.Power)
		if !ok {
			return bad("last.p", w.Last.Power)
		}
		s.Last = Reading{At: fromNanos(w.Last.At), Power: p, OSRunning: w.Last.OS, Failure: w.Last.Failure, Target: w.Last.Target, Level: w.Last.Level}
	}
	if s.Stuck, ok = parseStuck(w.Stuck); !ok {
		return bad("st", w.Stuck)
	}
	if w.Refusal != "" {
		if s.Refusal, ok = parseRefusal(w.Refusal); !ok || s.Refusal == Admitted {
			return bad("rs", w.Refusal)
		}
	}
	if len(w.Evidence) > EvidenceCap {
		return bad("ev", fmt.Sprintf("%d records", len(w.Evidence)))
	}
	if len(w.Evidence) > 0 {
		s.Evidence.recs = make([]Record, len(w.Evidence))
	}
	for i, wr := range w.Evidence {
		r, ok := wr.record()
		if !ok {
			return bad(fmt.Sprintf("ev[%d]", i), wr)
		}
		s.Evidence.recs[i] = r
	}
	return s, nil
}

func (wr wireRecord) record() (Record, bool) {
	r := Record{At: fromNanos(wr.At), Until: fromNanos(wr.Until), Count: max(wr.Count, 1), Note: wr.Note}
	var ok bool
	if r.Kind, ok = parseName[RecordKind](recordNames[:], wr.Kind); !ok {
		return r, false
	}
	if r.Phase, ok = parseName[Phase](phaseNames[:], wr.Phase); !ok {
		return r, false
	}
	if wr.Count < 0 {
		return r, false
	}
	switch r.Kind {
	case RecTransition:
		r.From, ok = parseName[Phase](phaseNames[:], wr.From)
	case RecReading:
		r.Power, ok = parsePower(wr.Power)
	case RecAction, RecResult:
		r.Action, ok = parseName[ActionKind](actionNames[:], wr.Action)
	case RecCommand, RecRefusal:
	}
	return r, ok
}

func parseName[T ~uint8](names []string, s string) (T, bool) {
	for i, n := range names {
		if n == s {
			return T(i), true
		}
	}
	return 0, false
}

func parsePower(s string) (Power, bool)       { return parseName[Power](powerNames[:], s) }
func parseStuck(s string) (StuckReason, bool) { return parseName[StuckReason](stuckNames[:], s) }
func parseRefusal(s string) (RefusalReason, bool) {
	return parseName[RefusalReason](refusalNames[:], s)
}
