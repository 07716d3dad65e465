// Package history keeps the durable record of every fence: one
// BMCFenceRecord per fence (by the agent's own detection, by NodeHealthCheck
// or MachineHealthCheck, by a human), whose status carries the evidence
// timeline (BMC readings with their times, the engine's decisions, actions
// and their results, human commands) copied from the node's fence state as
// it grows. The node's state holds only the last EvidenceCap records and
// Events expire within an hour; records stay, under a retention policy
// (count per node, age), across agent restarts and leader changes: a new
// leader continues the open record of a node instead of starting another.
package history

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned/typed/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// Retention defaults (documented in docs/remediation.md): the last 10 fences
// of a node, for 90 days. A node fenced more often than that has a problem
// its recent history shows; a quarter covers an incident review.
const (
	DefaultMaxPerNode = 10
	DefaultMaxAge     = 90 * 24 * time.Hour
)

// maxTimeline is the CRD's bound on status.timeline.
const maxTimeline = 200

// Suspicions that end without a power-off (the node renewed its Lease, or
// came back before fenceAfter; the BMC could not be read; the storm guard
// held it back) are recorded too, with outcome Cleared: they are the
// near-misses and the failures nobody fenced that a review asks about,
// and Events about them expire within an hour. Bounded so that they cannot
// flood the API server or push a node's fences out of its history:
//   - a node keeps its newest maxSuspicionsPerNode Cleared records, apart
//     from its maxPerNode fence records;
//   - new suspicion records are opened at most suspicionBurst at once and
//     suspicionsPerHour after that, cluster-wide (a partition of 600 nodes
//     opens 20, not 600); a suspicion over budget is logged, not recorded,
//     until the budget allows (its record then starts at the failure's
//     start all the same). A suspicion that becomes a fence (a power-off)
//     is recorded whatever the budget: the storm guard bounds those.
const (
	maxSuspicionsPerNode = 3
	suspicionBurst       = 20
	suspicionsPerHour    = 20
)

// OutcomeCleared is a record's outcome when the suspicion ended without a
// power-off; Fenced and Abandoned are fences'.
const OutcomeCleared = "Cleared"

// Nodes is what the recorder reads of *cluster.Cluster. A pass reads every
// node's state annotation (EachNodeState) and builds the whole view only of
// a node whose state changed (Node): at a thousand nodes, building every
// view every resync (every 2 s) was 3.5 % of the agent's CPU at rest and
// most of its garbage. A pass reads nothing when StateGeneration has not
// moved since a pass that left nothing to retry: reading a thousand
// annotations every 2 s was still 5 % of the CPU profile at rest.
type Nodes interface {
	EachNodeState(f func(name, state string))
	// StateGeneration changes whenever a node is added or deleted or its
	// state annotation changes.
	StateGeneration() uint64
	Node(name string) (runner.NodeInfo, bool)
	RemediatedBy(node string) string
}

// Options configure a Recorder.
type Options struct {
	Client     fencingclient.FencingV1alpha1Interface
	Nodes      Nodes
	MaxPerNode int
	MaxAge     time.Duration
	// Who names this agent replica in the timeline.
	Who    string
	Clock  clock.WithTicker
	Log    *zap.Logger
	Resync time.Duration
}

// Recorder writes the records; only the leader runs it.
//
// It reads the records from an informer, indexed by node, that keeps only
// what finding a node's open record and retention need (no timelines: a
// record's timeline holds up to 200 entries, and a thousand nodes keep up to
// ten records each). A node's open record is read whole only to extend it:
// from what this recorder last wrote, else with one GET. At rest it makes
// no request at all (it used to LIST each node's records every resync: at
// a thousand nodes, as many LISTs as the client's rate limit let through).
type Recorder struct {
	opts     Options
	informer cache.SharedIndexInformer

	mu sync.Mutex
	// openRecs is each node's open record as this recorder last wrote or read
	// it whole (the informer lags our writes and holds no timelines).
	openRecs map[string]*v1alpha1.BMCFenceRecord
	// synced is each node's state annotation as last synced without error,
	// and the pass that saw it: an unchanged state needs nothing.
	synced map[string]syncedState
	pass   uint64

	// budget of new suspicion records (tokens) as of budgetAt; overBudget
	// holds the failure start of each node's suspicion already logged as
	// unrecorded, so it is said once. Only Sync's caller touches them.
	budget     float64
	budgetAt   time.Time
	overBudget map[string]time.Time
	// present is SyncAll's set of the nodes of its pass (SyncAll's only).
	present map[string]bool
	// restGen is the state generation a pass saw, when that pass left
	// nothing to retry (no error, no suspicion over budget); restValid
	// says it is set. SyncAll's only.
	restGen   uint64
	restValid bool
}

type syncedState struct {
	state string
	pass  uint64
}

// byNode indexes records by their node label.
const byNode = "node"

// New builds a Recorder.
func New(opts Options) (*Recorder, error) {
	if opts.Client == nil || opts.Nodes == nil {
		return nil, errors.New("history: Client and Nodes are required")
	}
	if opts.MaxPerNode <= 0 {
		opts.MaxPerNode = DefaultMaxPerNode
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Resync <= 0 {
		opts.Resync = 2 * time.Second
	}
	records := opts.Client.BMCFenceRecords()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return records.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return records.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &v1alpha1.BMCFenceRecord{}, 0, cache.Indexers{byNode: func(obj any) ([]string, error) {
		if r, ok := obj.(*v1alpha1.BMCFenceRecord); ok && r.Labels[v1alpha1.LabelRecordNode] != "" {
			return []string{r.Labels[v1alpha1.LabelRecordNode]}, nil
		}
		return nil, nil
	}})
	if err := inf.SetTransform(slimRecord); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &Recorder{opts: opts, informer: inf, openRecs: map[string]*v1alpha1.BMCFenceRecord{}, synced: map[string]syncedState{},
		budget: suspicionBurst, budgetAt: opts.Clock.Now(), overBudget: map[string]time.Time{}}, nil
}

// slimRecord keeps what finding the open record and retention read: the
// name, the node label, the creation time, the start and the end.
func slimRecord(obj any) (any, error) {
	r, ok := obj.(*v1alpha1.BMCFenceRecord)
	if !ok {
		return obj, nil
	}
	out := &v1alpha1.BMCFenceRecord{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, UID: r.UID, ResourceVersion: r.ResourceVersion, CreationTimestamp: r.CreationTimestamp},
		Spec:       v1alpha1.BMCFenceRecordSpec{NodeName: r.Spec.NodeName},
		Status:     v1alpha1.BMCFenceRecordStatus{StartedAt: r.Status.StartedAt, FinishedAt: r.Status.FinishedAt, Phase: r.Status.Phase, Outcome: r.Status.Outcome},
	}
	if n := r.Labels[v1alpha1.LabelRecordNode]; n != "" {
		out.Labels = map[string]string{v1alpha1.LabelRecordNode: n}
	}
	return out, nil
}

// Start runs the informer until ctx ends and waits until it has listed
// the records.
func (r *Recorder) Start(ctx context.Context) error {
	go r.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), r.informer.HasSynced) {
		return fmt.Errorf("history: records not listed: %w", ctx.Err())
	}
	return nil
}

// suspicionTokens refills the suspicion budget up to now and says whether
// one token is there.
func (r *Recorder) suspicionTokens(now time.Time) bool {
	if d := now.Sub(r.budgetAt); d > 0 {
		r.budget = min(suspicionBurst, r.budget+d.Hours()*suspicionsPerHour)
		r.budgetAt = now
	}
	return r.budget >= 1
}

// takeSuspicionToken spends one of the suspicion budget, if there is one.
func (r *Recorder) takeSuspicionToken(now time.Time) bool {
	if !r.suspicionTokens(now) {
		return false
	}
	r.budget--
	return true
}

// overBudgetOnce logs, once per suspicion, that it is not recorded.
func (r *Recorder) overBudgetOnce(node string, st fence.State) {
	if r.overBudget[node] != st.FailureStart {
		r.overBudget[node] = st.FailureStart
		r.opts.Log.Info("suspicion not recorded (BMCFenceRecord): more than the budget of suspicion records opened recently; its Events and a fence, if one follows, are recorded",
			zap.String("node", node), zap.Int("burst", suspicionBurst), zap.Int("perHour", suspicionsPerHour))
	}
}

// Run records until ctx ends.
func (r *Recorder) Run(ctx context.Context) error {
	if err := r.Start(ctx); err != nil {
		return err
	}
	t := r.opts.Clock.NewTicker(r.opts.Resync)
	defer t.Stop()
	for {
		r.SyncAll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// SyncAll syncs every node whose state changed since it last synced.
func (r *Recorder) SyncAll(ctx context.Context) {
	// Read before the pass: a change during it moves the generation, and
	// the next pass looks again.
	gen := r.opts.Nodes.StateGeneration()
	if r.restValid && r.restGen == gen && len(r.overBudget) == 0 {
		return
	}
	r.restValid = false
	clean := true
	var changed []string
	// present: every node of this pass, for the over-budget cleanup below
	// (a node goes over budget during the pass, in Sync). Kept between
	// passes and cleared, so a pass allocates no map.
	if r.present == nil {
		r.present = map[string]bool{}
	}
	clear(r.present)
	r.mu.Lock()
	r.pass++
	pass := r.pass
	r.opts.Nodes.EachNodeState(func(name, state string) {
		r.present[name] = true
		if last, seen := r.synced[name]; seen && last.state == state {
			r.synced[name] = syncedState{state: state, pass: pass}
			return
		}
		changed = append(changed, name)
	})
	r.mu.Unlock()
	slices.Sort(changed)
	for _, name := range changed {
		n, ok := r.opts.Nodes.Node(name)
		if !ok {
			continue // deleted since: forgotten below
		}
		if err := r.Sync(ctx, n); err != nil {
			r.opts.Log.Warn("fence record", zap.String("node", n.Name), zap.Error(err))
			clean = false
			continue
		}
		if _, over := r.overBudget[n.Name]; over {
			// A suspicion over budget is tried again on every pass: the
			// budget refills while it lasts.
			continue
		}
		r.mu.Lock()
		r.synced[n.Name] = syncedState{state: n.State, pass: pass}
		r.mu.Unlock()
	}
	// Forget nodes that are gone.
	r.mu.Lock()
	for name, s := range r.synced {
		if s.pass != pass {
			delete(r.synced, name)
			delete(r.openRecs, name)
		}
	}
	r.mu.Unlock()
	for name := range r.overBudget {
		if !r.present[name] {
			delete(r.overBudget, name)
		}
	}
	r.restGen, r.restValid = gen, clean
}

// recorded: a fence, or a suspicion, worth a record (while it lasts).
func recorded(st fence.State) bool {
	switch st.Phase {
	case fence.PoweringOff, fence.ConfirmingOff, fence.Tainting, fence.Detaching, fence.Fenced,
		fence.PoweringOn, fence.Recovering, fence.Untainting, fence.Stuck, fence.Suspect:
		return true
	case fence.Healthy, fence.Maintenance:
	}
	return false
}

// openRecord returns node's open record, whole, or nil: the one this
// recorder last wrote, else the cache's (read whole with a GET; the cache
// may still show a record open that was closed since).
func (r *Recorder) openRecord(ctx context.Context, node string) (*v1alpha1.BMCFenceRecord, error) {
	r.mu.Lock()
	mine := r.openRecs[node]
	r.mu.Unlock()
	if mine != nil {
		return mine, nil
	}
	name, found := "", false
	for _, rec := range r.cached(node) {
		if rec.Status.FinishedAt == nil {
			name, found = rec.Name, true
		}
	}
	if !found {
		return nil, nil
	}
	rec, err := r.opts.Client.BMCFenceRecords().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading record %s: %w", name, err)
	case rec.Status.FinishedAt != nil:
		return nil, nil
	}
	r.keep(node, rec)
	return rec, nil
}

// cached lists node's records as the informer holds them (slim).
func (r *Recorder) cached(node string) []v1alpha1.BMCFenceRecord {
	objs, _ := r.informer.GetIndexer().ByIndex(byNode, node)
	out := make([]v1alpha1.BMCFenceRecord, 0, len(objs))
	for _, o := range objs {
		if rec, ok := o.(*v1alpha1.BMCFenceRecord); ok {
			out = append(out, *rec)
		}
	}
	SortNewestFirst(out)
	slices.Reverse(out) // oldest first: the last open one wins, as a LIST in creation order had it
	return out
}

// keep remembers rec as node's open record (nil or a finished one: none).
func (r *Recorder) keep(node string, rec *v1alpha1.BMCFenceRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec == nil || rec.Status.FinishedAt != nil {
		delete(r.openRecs, node)
		return
	}
	r.openRecs[node] = rec
}

// suspicionOnly: the node is suspected and nothing more (no power-off yet,
// no human's request): a record of it comes out of the suspicion budget.
func suspicionOnly(st fence.State) bool {
	return st.Phase == fence.Suspect && !st.Manual && !st.Attested
}

// Sync brings node's open record up to date: it opens one when a fence
// begins, appends the evidence the state gained, closes it when the node
// is back to Healthy. Start must have returned.
func (r *Recorder) Sync(ctx context.Context, n runner.NodeInfo) error {
	var st fence.State
	if n.State != "" {
		var err error
		if st, err = fence.Decode(n.State); err != nil {
			return fmt.Errorf("decoding the fence state: %w", err)
		}
	}
	now := r.opts.Clock.Now()
	open, err := r.openRecord(ctx, n.Name)
	if err != nil {
		return err
	}
	switch {
	case open == nil && !recorded(st):
		delete(r.overBudget, n.Name)
		return nil
	case open == nil && suspicionOnly(st) && !r.takeSuspicionToken(now):
		r.overBudgetOnce(n.Name, st)
		return nil
	case open == nil:
		rec, err := r.open(ctx, n, st, now)
		if err != nil {
			return err
		}
		r.keep(n.Name, rec)
		delete(r.overBudget, n.Name)
		open = rec
		defer r.retain(ctx, n.Name, now)
	}
	next := open.DeepCopy()
	acted := open.Status.Phase != "" && open.Status.Phase != fence.Suspect.String() && open.Status.Phase != fence.Healthy.String()
	next.Status.Phase = st.Phase.String()
	next.Status.Timeline = Merge(next.Status.Timeline, Timeline(st, r.opts.Who))
	if !recorded(st) {
		// Back to Healthy (or in maintenance): the fence is over.
		t := metav1.NewTime(now)
		next.Status.FinishedAt = &t
		next.Status.Outcome = outcome(next.Spec, acted, next.Status.Timeline)
	} else if st.Phase == fence.Stuck {
		next.Status.Outcome = "Stuck"
	}
	if equalStatus(open.Status, next.Status) {
		return nil
	}
	updated, err := r.opts.Client.BMCFenceRecords().UpdateStatus(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		// Read it whole again next time: someone else may have written it.
		r.keep(n.Name, nil)
		return fmt.Errorf("updating record %s: %w", open.Name, err)
	}
	r.keep(n.Name, updated)
	return nil
}

func (r *Recorder) open(ctx context.Context, n runner.NodeInfo, st fence.State, now time.Time) (*v1alpha1.BMCFenceRecord, error) {
	trigger, by, reason := v1alpha1.TriggerBuiltin, r.opts.Who, "the node's Lease went silent"
	switch src := r.opts.Nodes.RemediatedBy(n.Name); {
	case st.Manual || st.Attested:
		trigger, by, reason = v1alpha1.TriggerHuman, st.By, "a human's request"
	case src != "":
		kind, ref, _ := strings.Cut(src, " ")
		trigger, by = v1alpha1.Trigger(kind), ref
		reason = "remediation CR " + ref
	}
	rec := &v1alpha1.BMCFenceRecord{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: n.Name + "-",
			Labels:       map[string]string{v1alpha1.LabelRecordNode: n.Name},
		},
		Spec: v1alpha1.BMCFenceRecordSpec{NodeName: n.Name, Trigger: trigger, RequestedBy: fence.Clip(by, 512), Reason: reason},
	}
	created, err := r.opts.Client.BMCFenceRecords().Create(ctx, rec, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating a record: %w", err)
	}
	started := metav1.NewTime(now)
	if !st.FailureStart.IsZero() {
		started = metav1.NewTime(st.FailureStart)
	}
	created.Status.StartedAt = &started
	return created, nil
}

// retain deletes the node's finished records beyond the newest MaxPerNode
// and those finished more than MaxAge ago.
func (r *Recorder) retain(ctx context.Context, node string, now time.Time) {
	records := r.opts.Client.BMCFenceRecords()
	for _, name := range Expired(r.cached(node), r.opts.MaxPerNode, r.opts.MaxAge, now) {
		if err := records.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			r.opts.Log.Warn("retention: deleting a record", zap.String("record", name), zap.Error(err))
		}
	}
}

// Expired names the records retention removes: finished fences beyond the
// newest maxPerNode fences (open records count but are never removed),
// finished suspicions (outcome Cleared) beyond the newest
// maxSuspicionsPerNode suspicions, and anything finished more than maxAge
// ago. Suspicions are counted apart, so a flapping node's near-misses
// never push its fences out.
func Expired(recs []v1alpha1.BMCFenceRecord, maxPerNode int, maxAge time.Duration, now time.Time) []string {
	recs = slices.Clone(recs)
	SortNewestFirst(recs)
	var out []string
	fences, suspicions := 0, 0
	for _, rec := range recs {
		n, limit := &fences, maxPerNode
		if rec.Status.Outcome == OutcomeCleared {
			n, limit = &suspicions, maxSuspicionsPerNode
		}
		*n++
		if rec.Status.FinishedAt == nil {
			continue
		}
		if *n > limit || now.Sub(rec.Status.FinishedAt.Time) > maxAge {
			out = append(out, rec.Name)
		}
	}
	return out
}

// SortNewestFirst orders records by creation, newest first (name breaks
// ties, so the order is total).
func SortNewestFirst(recs []v1alpha1.BMCFenceRecord) {
	slices.SortFunc(recs, func(a, b v1alpha1.BMCFenceRecord) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
}

// Timeline renders the state's evidence as timeline entries.
func Timeline(st fence.State, who string) []v1alpha1.TimelineEntry {
	var out []v1alpha1.TimelineEntry
	for _, rec := range st.Evidence.Records() {
		e := v1alpha1.TimelineEntry{Time: metav1.NewTime(rec.At), Phase: rec.Phase.String(), Who: who}
		switch rec.Kind {
		case fence.RecReading:
			e.Kind, e.Message = v1alpha1.EntryReading, ReadingText{Power: rec.Power.String(), Note: rec.Note, Count: rec.Count, Until: rec.Until}.String()
		case fence.RecTransition:
			e.Kind, e.Message = v1alpha1.EntryDecision, fmt.Sprintf("%s → %s: %s", rec.From, rec.Phase, rec.Note)
		case fence.RecAction:
			e.Kind, e.Message = v1alpha1.EntryAction, rec.Action.String()
		case fence.RecResult:
			e.Kind, e.Message = v1alpha1.EntryAction, rec.Action.String()+": "+orOK(rec.Note)
		case fence.RecCommand:
			e.Kind, e.Message, e.Who = v1alpha1.EntryRequest, rec.Note, st.By
		case fence.RecRefusal:
			e.Kind, e.Message = v1alpha1.EntryDecision, "refused: "+rec.Note
		}
		e.Message = fence.Clip(e.Message, 1024)
		out = append(out, e)
	}
	return out
}

// ReadingText is a Reading entry's message: the power the BMC read, the
// failure or remark beside it, and how many identical readings it stands
// for, until when.
type ReadingText struct {
	Power string
	Note  string
	// Count > 1: the same reading Count times, the last at Until.
	Count int
	Until time.Time
}

const readingPrefix = "BMC reads "

// String is the message: "BMC reads Off", "BMC reads Unknown: timeout",
// "BMC reads Off (x3 until 2026-11-25T20:43:33Z)".
func (r ReadingText) String() string {
	s := readingPrefix + r.Power
	if r.Note != "" {
		s += ": " + r.Note
	}
	if r.Count > 1 {
		s += fmt.Sprintf(" (x%d until %s)", r.Count, r.Until.UTC().Format(time.RFC3339))
	}
	return s
}

// ParseReading reads a Reading entry's message back; false when it is not
// one String wrote.
func ParseReading(msg string) (ReadingText, bool) {
	rest, ok := strings.CutPrefix(msg, readingPrefix)
	if !ok {
		return ReadingText{}, false
	}
	r := ReadingText{Count: 1}
	if i := strings.LastIndex(rest, " (x"); i >= 0 && strings.HasSuffix(rest, ")") {
		var n int
		var until string
		if _, err := fmt.Sscanf(rest[i:], " (x%d until %s", &n, &until); err == nil {
			if t, err := time.Parse(time.RFC3339, strings.TrimSuffix(until, ")")); err == nil && n > 1 {
				r.Count, r.Until, rest = n, t, rest[:i]
			}
		}
	}
	r.Power, r.Note, _ = strings.Cut(rest, ": ")
	if r.Power == "" {
		return ReadingText{}, false
	}
	return r, true
}

func orOK(s string) string {
	if s == "" {
		return "ok"
	}
	return s
}

// Merge appends to have the entries of more it does not hold yet (the
// state's evidence ring repeats what it still holds, and a collapsed
// reading's count grows in place), keeping at most maxTimeline entries:
// the oldest readings go first, decisions and actions stay. Times are
// kept to the second, as the API server stores them (metav1.Time): have
// is what it gave back, and more must match it.
func Merge(have, more []v1alpha1.TimelineEntry) []v1alpha1.TimelineEntry {
	out := slices.Clone(have)
	for i := range out {
		out[i].Time = out[i].Time.Rfc3339Copy()
	}
	for _, e := range more {
		e.Time = e.Time.Rfc3339Copy()
		i := slices.IndexFunc(out, func(h v1alpha1.TimelineEntry) bool {
			return h.Time.Equal(&e.Time) && h.Kind == e.Kind && h.Phase == e.Phase &&
				(h.Message == e.Message || (h.Kind == v1alpha1.EntryReading && sameReading(h.Message, e.Message)))
		})
		switch {
		case i < 0:
			out = append(out, e)
		case out[i].Message != e.Message:
			out[i] = e // a collapsed reading that grew
		}
	}
	slices.SortStableFunc(out, func(a, b v1alpha1.TimelineEntry) int { return a.Time.Compare(b.Time.Time) })
	for len(out) > maxTimeline {
		i := slices.IndexFunc(out, func(e v1alpha1.TimelineEntry) bool { return e.Kind == v1alpha1.EntryReading })
		if i < 0 {
			i = 0
		}
		out = slices.Delete(out, i, i+1)
	}
	return out
}

// sameReading: two renderings of one collapsed reading record (the count
// and its end grow).
func sameReading(a, b string) bool {
	cut := func(s string) string { p, _, _ := strings.Cut(s, " (x"); return p }
	return cut(a) == cut(b)
}

// outcome of a finished record: Fenced once detach began; Cleared when a
// suspicion ended with nothing done (no phase past Suspect, seen by the
// recorder (acted) or in the timeline, and no human's request); else
// Abandoned (a fence stopped before the taint).
func outcome(spec v1alpha1.BMCFenceRecordSpec, acted bool, tl []v1alpha1.TimelineEntry) string {
	acted = acted || spec.Trigger == v1alpha1.TriggerHuman
	for _, e := range tl {
		switch e.Phase {
		case fence.Detaching.String(), fence.Fenced.String():
			return "Fenced"
		case fence.Healthy.String(), fence.Suspect.String(), fence.Maintenance.String(), "":
		default:
			acted = true
		}
	}
	if !acted {
		return OutcomeCleared
	}
	return "Abandoned"
}

func equalStatus(a, b v1alpha1.BMCFenceRecordStatus) bool {
	return a.Phase == b.Phase && a.Outcome == b.Outcome && (a.FinishedAt == nil) == (b.FinishedAt == nil) &&
		(a.StartedAt == nil) == (b.StartedAt == nil) && slices.EqualFunc(a.Timeline, b.Timeline, func(x, y v1alpha1.TimelineEntry) bool {
		return x.Time.Equal(&y.Time) && x.Kind == y.Kind && x.Message == y.Message && x.Phase == y.Phase && x.Who == y.Who
	})
}

// Refusal is a request the agent refused before any fence began (issue 17:
// one the admission policy did not authenticate), kept in the node's
// history as a finished record with outcome Refused.
type Refusal struct {
	Node, RequestedBy, Reason, Message string
	// Who names the agent replica.
	Who string
	At  time.Time
	// MaxPerNode and MaxAge: the retention applied to the node's records
	// afterwards (defaults DefaultMaxPerNode, DefaultMaxAge).
	MaxPerNode int
	MaxAge     time.Duration
}

// OutcomeRefused is the outcome of a Refusal's record.
const OutcomeRefused = "Refused"

// RecordRefusal writes rf as a finished BMCFenceRecord of its node and
// applies the retention to the node's refusals; it returns the record's
// name.
func RecordRefusal(ctx context.Context, records fencingclient.BMCFenceRecordInterface, rf Refusal) (string, error) {
	if rf.MaxPerNode <= 0 {
		rf.MaxPerNode = DefaultMaxPerNode
	}
	if rf.MaxAge <= 0 {
		rf.MaxAge = DefaultMaxAge
	}
	rec := &v1alpha1.BMCFenceRecord{
		ObjectMeta: metav1.ObjectMeta{GenerateName: rf.Node + "-", Labels: map[string]string{v1alpha1.LabelRecordNode: rf.Node}},
		Spec: v1alpha1.BMCFenceRecordSpec{NodeName: rf.Node, Trigger: v1alpha1.TriggerHuman,
			RequestedBy: fence.Clip(rf.RequestedBy, 512), Reason: fence.Clip(rf.Reason, 1024)},
	}
	created, err := records.Create(ctx, rec, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating a record: %w", err)
	}
	at := metav1.NewTime(rf.At)
	created.Status = v1alpha1.BMCFenceRecordStatus{Outcome: OutcomeRefused, StartedAt: &at, FinishedAt: &at,
		Timeline: []v1alpha1.TimelineEntry{{Time: at, Kind: v1alpha1.EntryRequest, Who: rf.Who, Message: fence.Clip(rf.Message, 1024)}}}
	if _, err := records.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return created.Name, fmt.Errorf("recording the refusal in %s: %w", created.Name, err)
	}
	// Retention among the node's refusals only: a flood of refused
	// requests must not push its fences out of its history.
	if list, err := records.List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRecordNode + "=" + rf.Node}); err == nil {
		refused := slices.DeleteFunc(list.Items, func(r v1alpha1.BMCFenceRecord) bool { return r.Status.Outcome != OutcomeRefused })
		for _, name := range Expired(refused, rf.MaxPerNode, rf.MaxAge, rf.At) {
			_ = records.Delete(ctx, name, metav1.DeleteOptions{})
		}
	}
	return created.Name, nil
}
