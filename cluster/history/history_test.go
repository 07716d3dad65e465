package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/client/clientset/versioned/fake"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// now is when retention runs in TestExpired.
var now = t0.Add(40 * 24 * time.Hour)

// rec is a record created at t0+created, finished finishedAgo before now
// (nil: still open).
func rec(name string, created time.Duration, finishedAgo *time.Duration) v1alpha1.BMCFenceRecord {
	r := v1alpha1.BMCFenceRecord{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(created))}}
	if finishedAgo != nil {
		t := metav1.NewTime(now.Add(-*finishedAgo))
		r.Status.FinishedAt = &t
	}
	return r
}

func ago(d time.Duration) *time.Duration { return &d }

func cleared(r v1alpha1.BMCFenceRecord) v1alpha1.BMCFenceRecord {
	r.Status.Outcome = OutcomeCleared
	return r
}

func TestExpired(t *testing.T) {
	day := 24 * time.Hour
	tests := []struct {
		name string
		recs []v1alpha1.BMCFenceRecord
		want []string
	}{
		{"within both limits", []v1alpha1.BMCFenceRecord{rec("a", 0, ago(time.Hour)), rec("b", day, ago(day))}, nil},
		{"beyond the count: the oldest go", []v1alpha1.BMCFenceRecord{rec("a", 0, ago(time.Hour)), rec("b", day, ago(day)), rec("c", 2*day, ago(2*day))}, []string{"a"}},
		{"an open record is never removed", []v1alpha1.BMCFenceRecord{rec("a", 0, nil), rec("b", day, ago(day)), rec("c", 2*day, ago(2*day))}, nil},
		{"too old", []v1alpha1.BMCFenceRecord{rec("a", 0, ago(31*day)), rec("b", 39*day, ago(day))}, []string{"a"}},
		{"suspicions are counted apart from fences", []v1alpha1.BMCFenceRecord{
			rec("f1", 0, ago(9*day)), rec("f2", day, ago(8*day)),
			cleared(rec("s1", 2*day, ago(7*day))), cleared(rec("s2", 3*day, ago(6*day))), cleared(rec("s3", 4*day, ago(5*day))),
			cleared(rec("s4", 5*day, ago(4*day))), cleared(rec("s5", 6*day, ago(3*day))),
		}, []string{"s2", "s1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Expired(tt.recs, 2, 30*day, now)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func entry(sec int, kind v1alpha1.EntryKind, msg string) v1alpha1.TimelineEntry {
	return v1alpha1.TimelineEntry{Time: metav1.NewTime(t0.Add(time.Duration(sec) * time.Second)), Kind: kind, Message: msg}
}

// The state's evidence ring repeats what it still holds and a collapsed
// reading grows in place: merging keeps one entry per record, in time order.
func TestMerge(t *testing.T) {
	have := []v1alpha1.TimelineEntry{entry(1, v1alpha1.EntryDecision, "Healthy → Suspect"), entry(2, v1alpha1.EntryReading, "BMC reads On (x2 until …)")}
	more := []v1alpha1.TimelineEntry{entry(2, v1alpha1.EntryReading, "BMC reads On (x5 until …)"), entry(3, v1alpha1.EntryAction, "PowerOff")}
	want := []v1alpha1.TimelineEntry{have[0], more[0], more[1]}
	if diff := cmp.Diff(want, Merge(have, more)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// apiRoundTrip is what the API server gives back: metav1.Time keeps
// whole seconds.
func apiRoundTrip(t *testing.T, tl []v1alpha1.TimelineEntry) []v1alpha1.TimelineEntry {
	t.Helper()
	b, err := json.Marshal(tl)
	if err != nil {
		t.Fatal(err)
	}
	var out []v1alpha1.TimelineEntry
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The recorder merges the state's evidence into the record it read back
// from the API server every resync: evidence it stored before must match
// its stored form, whose times are whole seconds, or the timeline fills
// with copies (a demo's record held each entry up to 10 times).
func TestMergeMatchesWhatTheAPIServerStored(t *testing.T) {
	at := t0.Add(1500 * time.Millisecond)
	evidence := []v1alpha1.TimelineEntry{
		{Time: metav1.NewTime(at), Kind: v1alpha1.EntryDecision, Phase: "Suspect", Message: "Healthy → Suspect: Lease silent for 20s"},
		{Time: metav1.NewTime(at.Add(100 * time.Millisecond)), Kind: v1alpha1.EntryReading, Phase: "Suspect", Message: "BMC reads Off"},
	}
	stored := apiRoundTrip(t, Merge(nil, evidence))
	for i := range 3 {
		stored = apiRoundTrip(t, Merge(stored, evidence))
		if len(stored) != len(evidence) {
			t.Fatalf("after %d resyncs: %d entries, want %d:\n%v", i+1, len(stored), len(evidence), stored)
		}
	}
}

// Two readings of the same power in one second but in different phases
// are two pieces of evidence.
func TestMergeKeepsTheSameReadingInTwoPhases(t *testing.T) {
	a := entry(1, v1alpha1.EntryReading, "BMC reads Off")
	a.Phase = "Suspect"
	b := a
	b.Phase = "PoweringOff"
	if got := Merge(nil, []v1alpha1.TimelineEntry{a, b}); len(got) != 2 {
		t.Errorf("merged into %d entries, want 2: %v", len(got), got)
	}
}

type fakeNodes struct {
	infos []runner.NodeInfo
	by    map[string]string
	built int // views built (Node calls)
	read  int // passes over every node's state (EachNodeState calls)
}

func (f *fakeNodes) EachNodeState(fn func(name, state string)) {
	f.read++
	for _, n := range f.infos {
		fn(n.Name, n.State)
	}
}

// StateGeneration hashes every node's name and state: the tests change
// f.infos in place.
func (f *fakeNodes) StateGeneration() uint64 {
	h := fnv.New64a()
	for _, n := range f.infos {
		h.Write([]byte(n.Name + "\x00" + n.State + "\x00"))
	}
	return h.Sum64()
}

func (f *fakeNodes) Node(name string) (runner.NodeInfo, bool) {
	f.built++
	for _, n := range f.infos {
		if n.Name == name {
			return n, true
		}
	}
	return runner.NodeInfo{}, false
}

func (f *fakeNodes) RemediatedBy(node string) string { return f.by[node] }

func info(t *testing.T, st fence.State) runner.NodeInfo {
	t.Helper()
	raw, err := fence.Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	return runner.NodeInfo{Name: "w1", State: raw}
}

// A fence opens a record naming who asked; a new leader (another Recorder)
// continues it instead of opening another; it closes when the node is
// Healthy again, with its outcome.
func TestSyncAcrossLeaders(t *testing.T) {
	client := fake.NewSimpleClientset()
	nodes := &fakeNodes{by: map[string]string{"w1": "nhc nhc-system/w1"}}
	clk := clocktesting.NewFakeClock(t0)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	recorder := func(who string) *Recorder {
		r, err := New(Options{Client: client.FencingV1alpha1(), Nodes: nodes, Who: who, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return r
	}
	sync := func(r *Recorder, st fence.State) {
		t.Helper()
		if err := r.Sync(ctx, info(t, st)); err != nil {
			t.Fatal(err)
		}
	}
	list := func() []v1alpha1.BMCFenceRecord {
		t.Helper()
		l, err := client.FencingV1alpha1().BMCFenceRecords().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	sync(recorder("a1"), fence.State{Phase: fence.Suspect, FailureStart: t0})
	if n := len(list()); n != 1 {
		t.Fatalf("%d records for the suspicion, want one", n)
	}
	sync(recorder("a1"), fence.State{Phase: fence.PoweringOff, FailureStart: t0})
	sync(recorder("a2"), fence.State{Phase: fence.Detaching, FailureStart: t0})
	recs := list()
	if len(recs) != 1 {
		t.Fatalf("%d records after a leader change, want one", len(recs))
	}
	r := recs[0]
	if r.Spec.Trigger != v1alpha1.TriggerNHC || r.Spec.RequestedBy != "nhc-system/w1" || r.Labels[v1alpha1.LabelRecordNode] != "w1" {
		t.Errorf("spec %+v labels %v", r.Spec, r.Labels)
	}
	clk.Step(time.Minute)
	sync(recorder("a2"), fence.State{Phase: fence.Healthy})
	r = list()[0]
	if r.Status.FinishedAt == nil || r.Status.Outcome != "Abandoned" && r.Status.Outcome != "Fenced" {
		t.Errorf("after recovery: status %+v", r.Status)
	}
}

// A refused request (issue 17) is a finished Refused record of its node;
// retention then keeps the newest refusals only among refusals, so a flood
// of them never pushes the node's fences out of its history.
func TestRecordRefusalKeepsTheFences(t *testing.T) {
	client := fake.NewSimpleClientset()
	created := 0
	client.PrependReactor("create", "bmcfencerecords", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*v1alpha1.BMCFenceRecord)
		created++
		if r.Name == "" { // the API server's generateName
			r.Name = fmt.Sprintf("%s%05d", r.GenerateName, created)
		}
		r.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(created) * time.Second))
		return false, nil, nil
	})
	records := client.FencingV1alpha1().BMCFenceRecords()
	ctx := context.Background()
	fenced := &v1alpha1.BMCFenceRecord{ObjectMeta: metav1.ObjectMeta{Name: "w1-fence", Labels: map[string]string{v1alpha1.LabelRecordNode: "w1"}},
		Spec:   v1alpha1.BMCFenceRecordSpec{NodeName: "w1", Trigger: v1alpha1.TriggerBuiltin},
		Status: v1alpha1.BMCFenceRecordStatus{Outcome: "Fenced", FinishedAt: &metav1.Time{Time: time.Unix(100, 0)}}}
	if _, err := records.Create(ctx, fenced, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last string
	for i := range 5 {
		name, err := RecordRefusal(ctx, records, Refusal{Node: "w1", RequestedBy: "alice", Reason: "confirm request x", Message: "refused: forged",
			Who: "agent a", At: time.Unix(int64(200+i), 0), MaxPerNode: 2})
		if err != nil {
			t.Fatal(err)
		}
		last = name
	}
	list, err := records.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var refused, fences int
	for _, r := range list.Items {
		switch r.Status.Outcome {
		case OutcomeRefused:
			refused++
			if r.Status.FinishedAt == nil || len(r.Status.Timeline) != 1 || r.Spec.Trigger != v1alpha1.TriggerHuman {
				t.Errorf("refusal record %+v", r)
			}
		case "Fenced":
			fences++
		}
	}
	if refused > 2 || fences != 1 || last == "" {
		t.Errorf("%d refusals (want at most 2) and %d fences (want 1) kept", refused, fences)
	}
}

func TestReadingTextRoundTrips(t *testing.T) {
	until := time.Date(2026, 11, 25, 20, 43, 33, 0, time.UTC)
	for _, r := range []ReadingText{
		{Power: "Off", Count: 1},
		{Power: "On", Note: "OSRunning", Count: 1},
		{Power: "Unknown", Note: "Get https://10.0.0.5: dial tcp: i/o timeout (x3 is not a count)", Count: 1},
		{Power: "Off", Count: 3, Until: until},
		{Power: "Unknown", Note: "HTTP 503: busy", Count: 12, Until: until},
	} {
		got, ok := ParseReading(r.String())
		if !ok {
			t.Errorf("%q: not parsed", r.String())
			continue
		}
		if diff := cmp.Diff(r, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", r.String(), diff)
		}
	}
	for _, msg := range []string{"PowerOff: ok", "BMC reads ", ""} {
		if _, ok := ParseReading(msg); ok {
			t.Errorf("%q parsed as a reading", msg)
		}
	}
}

func newRecorder(t *testing.T, client *fake.Clientset, clk *clocktesting.FakeClock) *Recorder {
	t.Helper()
	// The fake clientset does not generate names: as the API server would.
	seq := 0
	client.PrependReactor("create", "bmcfencerecords", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := a.(k8stesting.CreateAction).GetObject().(*v1alpha1.BMCFenceRecord)
		if o.Name == "" {
			seq++
			o.Name = fmt.Sprintf("%s%05d", o.GenerateName, seq)
		}
		return false, nil, nil
	})
	r, err := New(Options{Client: client.FencingV1alpha1(), Nodes: &fakeNodes{}, Who: "a1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

func nodeState(t *testing.T, name string, st fence.State) runner.NodeInfo {
	t.Helper()
	i := info(t, st)
	i.Name = name
	return i
}

// A suspicion that ends without a power-off (the node renewed; the BMC
// read On until then) is recorded, with outcome Cleared.
func TestSuspicionThatEndsWithoutActionIsRecordedCleared(t *testing.T) {
	client := fake.NewSimpleClientset()
	clk := clocktesting.NewFakeClock(t0)
	r := newRecorder(t, client, clk)
	ctx := context.Background()
	if err := r.Sync(ctx, nodeState(t, "w1", fence.State{Phase: fence.Suspect, FailureStart: t0})); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute)
	if err := r.Sync(ctx, nodeState(t, "w1", fence.State{Phase: fence.Healthy})); err != nil {
		t.Fatal(err)
	}
	l, err := client.FencingV1alpha1().BMCFenceRecords().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 {
		t.Fatalf("%d records, want one for the suspicion", len(l.Items))
	}
	got := l.Items[0].Status
	if got.Outcome != OutcomeCleared || got.FinishedAt == nil || !got.StartedAt.Time.Equal(t0) {
		t.Errorf("status %+v; want Cleared, started at the failure's start, finished", got)
	}
}

// Suspicion records are budgeted cluster-wide: a partition that makes 50
// nodes suspect opens suspicionBurst records, then suspicionsPerHour; a
// node whose suspicion becomes a power-off gets its record regardless.
func TestSuspicionRecordsAreBudgeted(t *testing.T) {
	client := fake.NewSimpleClientset()
	clk := clocktesting.NewFakeClock(t0)
	r := newRecorder(t, client, clk)
	ctx := context.Background()
	count := func() int {
		t.Helper()
		l, err := client.FencingV1alpha1().BMCFenceRecords().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	syncAll := func(n int) {
		t.Helper()
		for i := range n {
			if err := r.Sync(ctx, nodeState(t, fmt.Sprintf("n%02d", i), fence.State{Phase: fence.Suspect, FailureStart: t0})); err != nil {
				t.Fatal(err)
			}
		}
	}
	syncAll(50)
	if got := count(); got != suspicionBurst {
		t.Fatalf("%d records for 50 suspected nodes, want the burst, %d", got, suspicionBurst)
	}
	syncAll(50)
	if got := count(); got != suspicionBurst {
		t.Errorf("%d records after syncing again at once, want still %d", got, suspicionBurst)
	}
	clk.Step(time.Hour / suspicionsPerHour)
	syncAll(50)
	if got := count(); got != suspicionBurst+1 {
		t.Errorf("%d records %s later, want %d", got, time.Hour/suspicionsPerHour, suspicionBurst+1)
	}
	if err := r.Sync(ctx, nodeState(t, "n49", fence.State{Phase: fence.PoweringOff, FailureStart: t0})); err != nil {
		t.Fatal(err)
	}
	if got := count(); got != suspicionBurst+2 {
		t.Errorf("%d records after n49's power-off, want %d: a fence is recorded whatever the budget", got, suspicionBurst+2)
	}
}

// A node with nothing to record and no open record costs nothing but the
// informer's one LIST (of every node's records) when the recorder starts (every node's records every 2 s cost 100
// requests a second at 300 nodes); a suspicion over budget costs none.
func TestQuietNodesCostNoRequests(t *testing.T) {
	client := fake.NewSimpleClientset()
	clk := clocktesting.NewFakeClock(t0)
	r := newRecorder(t, client, clk)
	ctx := context.Background()
	lists := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "list" {
				n++
			}
		}
		return n
	}
	sync := func(node string, st fence.State) {
		t.Helper()
		if err := r.Sync(ctx, nodeState(t, node, st)); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		sync("w1", fence.State{Phase: fence.Healthy})
	}
	if got := lists(); got != 1 {
		t.Errorf("%d LISTs for a healthy node synced 3 times, want 1", got)
	}
	// It fails, is fenced, recovers: its record opens and closes, then it
	// is quiet again.
	sync("w1", fence.State{Phase: fence.PoweringOff, FailureStart: t0})
	sync("w1", fence.State{Phase: fence.Fenced, FailureStart: t0})
	sync("w1", fence.State{Phase: fence.Healthy})
	before := lists()
	for range 3 {
		sync("w1", fence.State{Phase: fence.Healthy})
	}
	if got := lists() - before; got != 0 {
		t.Errorf("%d LISTs after the record closed, want 0", got)
	}
	// Spend the budget, then a suspicion over it costs nothing.
	r.budget = 0
	sync("w2", fence.State{Phase: fence.Healthy})
	before = lists()
	for range 3 {
		sync("w2", fence.State{Phase: fence.Suspect, FailureStart: t0})
	}
	if got := lists() - before; got != 0 {
		t.Errorf("%d LISTs for a suspicion over budget, want 0", got)
	}
}

// At rest (no fence, or none that changed) the recorder asks the API server
// nothing: its records come from an informer, and a node whose state did
// not change is not looked at again. It used to LIST each node's records
// every resync.
func TestSyncAllAtRestAsksNothing(t *testing.T) {
	client := fake.NewSimpleClientset()
	var infos []runner.NodeInfo
	for i := range 1000 {
		infos = append(infos, runner.NodeInfo{Name: fmt.Sprintf("n%04d", i)})
	}
	// One node fenced long ago and Healthy again, its record closed.
	healthy, err := fence.Encode(fence.State{Phase: fence.Healthy})
	if err != nil {
		t.Fatal(err)
	}
	infos[7].State = healthy
	finished := metav1.NewTime(t0)
	if _, err := client.FencingV1alpha1().BMCFenceRecords().Create(context.Background(), &v1alpha1.BMCFenceRecord{
		ObjectMeta: metav1.ObjectMeta{Name: "n0007-abc", Labels: map[string]string{v1alpha1.LabelRecordNode: "n0007"}},
		Status:     v1alpha1.BMCFenceRecordStatus{StartedAt: &finished, FinishedAt: &finished, Outcome: "Fenced"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nodes := &fakeNodes{infos: infos}
	r, err := New(Options{Client: client.FencingV1alpha1(), Nodes: nodes, Clock: clocktesting.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r.SyncAll(ctx)
	client.ClearActions()
	nodes.built, nodes.read = 0, 0
	for range 10 {
		r.SyncAll(ctx)
	}
	if got := len(client.Actions()); got != 0 {
		t.Errorf("10 resyncs of 1000 nodes at rest made %d requests (first: %v), want none", got, client.Actions()[0])
	}
	// Nor does it build a node's view (a thousand every 2 s was 3.5 % of
	// the agent's CPU): only a node whose state changed is read whole.
	if nodes.built != 0 {
		t.Errorf("10 resyncs of 1000 nodes at rest built %d node views, want none", nodes.built)
	}
	// Nor reads every node's state while the state generation stands
	// (1000 annotations every 2 s was 5 % of the agent's CPU profile).
	if nodes.read != 0 {
		t.Errorf("10 resyncs at rest read every node's state %d times, want none", nodes.read)
	}
	nodes.infos[3].State = healthy
	r.SyncAll(ctx)
	if nodes.built != 1 || nodes.read != 1 {
		t.Errorf("a resync after one node's state changed built %d node views in %d passes, want 1 in 1", nodes.built, nodes.read)
	}
}

// A pass whose write failed is retried at the next resync although no
// state changed since: the generation alone does not license a skip.
func TestSyncAllRetriesAFailedWriteWithoutAStateChange(t *testing.T) {
	client := fake.NewSimpleClientset()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clk := clocktesting.NewFakeClock(t0)
	st := fence.State{Phase: fence.Suspect, FailureStart: t0}
	nodes := &fakeNodes{infos: []runner.NodeInfo{info(t, st)}}
	r, err := New(Options{Client: client.FencingV1alpha1(), Nodes: nodes, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	failing := true
	client.PrependReactor("create", "bmcfencerecords", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing {
			return true, nil, errors.New("etcd is away")
		}
		return false, nil, nil
	})
	r.SyncAll(ctx)
	failing = false
	r.SyncAll(ctx)
	recs, err := client.FencingV1alpha1().BMCFenceRecords().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs.Items) != 1 {
		t.Fatalf("%d records after a failed create and a resync with no state change, want 1", len(recs.Items))
	}
}

// The informer lags the recorder's own writes: a record just opened is
// extended and closed from what the recorder wrote, never opened twice.
func TestSyncDoesNotWaitForTheInformer(t *testing.T) {
	client := fake.NewSimpleClientset()
	// A watch that never delivers: the cache stays as first listed (empty).
	client.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clk := clocktesting.NewFakeClock(t0)
	r, err := New(Options{Client: client.FencingV1alpha1(), Nodes: &fakeNodes{}, Who: "a1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, st := range []fence.State{
		{Phase: fence.PoweringOff, FailureStart: t0},
		{Phase: fence.ConfirmingOff, FailureStart: t0},
		{Phase: fence.Detaching, FailureStart: t0},
		{Phase: fence.Healthy},
	} {
		if err := r.Sync(ctx, info(t, st)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := client.FencingV1alpha1().BMCFenceRecords().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Items[0].Status.FinishedAt == nil || l.Items[0].Status.Phase != "Healthy" {
		t.Errorf("records %+v, want one, closed", l.Items)
	}
}

// A suspicion over the budget is said once (one Info line), not at every
// resync: SyncAll keeps it over budget from one pass to the next, and
// tries it again at each (the budget refills while it lasts).
func TestSuspicionOverBudgetIsLoggedOnceAcrossResyncs(t *testing.T) {
	client := fake.NewSimpleClientset()
	clk := clocktesting.NewFakeClock(t0)
	r := newRecorder(t, client, clk)
	core, logs := observer.New(zap.InfoLevel)
	r.opts.Log = zap.New(core)
	var infos []runner.NodeInfo
	for i := range suspicionBurst + 1 {
		infos = append(infos, nodeState(t, fmt.Sprintf("n%02d", i), fence.State{Phase: fence.Suspect, FailureStart: t0}))
	}
	r.opts.Nodes = &fakeNodes{infos: infos}
	ctx := context.Background()
	for range 5 {
		r.SyncAll(ctx)
	}
	if got := logs.FilterMessageSnippet("suspicion not recorded").Len(); got != 1 {
		t.Errorf("5 resyncs of %d suspected nodes (one over the budget) logged %d over-budget lines, want 1", len(infos), got)
	}
}
