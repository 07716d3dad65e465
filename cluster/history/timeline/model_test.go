package timeline

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
)

var t0 = time.Date(2026, 11, 25, 20, 0, 0, 0, time.UTC)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

// entry is a timeline entry sec seconds after t0.
func entry(sec int, kind v1alpha1.EntryKind, phase, msg string) v1alpha1.TimelineEntry {
	return v1alpha1.TimelineEntry{Time: metav1.NewTime(at(sec)), Kind: kind, Phase: phase, Who: "agent a1", Message: msg}
}

func record(finished int, entries ...v1alpha1.TimelineEntry) v1alpha1.BMCFenceRecord {
	start := metav1.NewTime(t0)
	r := v1alpha1.BMCFenceRecord{
		ObjectMeta: metav1.ObjectMeta{Name: "w1-abcde"},
		Spec:       v1alpha1.BMCFenceRecordSpec{NodeName: "w1", Trigger: v1alpha1.TriggerBuiltin, RequestedBy: "agent a1"},
		Status:     v1alpha1.BMCFenceRecordStatus{StartedAt: &start, Timeline: entries},
	}
	if finished > 0 {
		end := metav1.NewTime(at(finished))
		r.Status.FinishedAt = &end
	}
	return r
}

const (
	dec = v1alpha1.EntryDecision
	rdg = v1alpha1.EntryReading
	act = v1alpha1.EntryAction
	req = v1alpha1.EntryRequest
)

// ourFence is a power loss fenced the usual way.
var ourFence = []v1alpha1.TimelineEntry{
	entry(20, dec, "Suspect", "Healthy → Suspect: Lease silent for 20s"),
	entry(20, rdg, "Suspect", "BMC reads Off"),
	entry(20, dec, "PoweringOff", "Suspect → PoweringOff: powering off"),
	entry(20, act, "PoweringOff", "PowerOff"),
	entry(20, act, "PoweringOff", "PowerOff: ok"),
	entry(22, rdg, "PoweringOff", "BMC reads Off"),
	entry(22, dec, "ConfirmingOff", "PoweringOff → ConfirmingOff: BMC read Off"),
	entry(25, rdg, "ConfirmingOff", "BMC reads Off (x2 until 2026-11-25T20:00:28Z)"),
	entry(28, dec, "Tainting", "ConfirmingOff → Tainting: off settled"),
	entry(28, act, "Tainting", "ApplyTaint"),
	entry(28, act, "Tainting", "ApplyTaint: ok"),
	entry(28, dec, "Detaching", "Tainting → Detaching: tainted"),
	entry(29, dec, "Fenced", "Detaching → Fenced: detached"),
	entry(40, dec, "Untainting", "Fenced → Untainting: node Ready after fence"),
	entry(40, dec, "Healthy", "Untainting → Healthy: untainted"),
}

// The two witnesses of a fence: the Lease silent from the last sign of
// life until the node came back, and a settled run of Off reads after our
// accepted ForceOff, until the taint.
func TestBuildFindsBothWitnesses(t *testing.T) {
	f := Build(record(41, ourFence...))
	if want := (Span{Name: "Lease silent", From: at(0), To: at(40)}); f.Silence != want || !f.Renewed {
		t.Errorf("silence %+v renewed %v, want %+v, renewed", f.Silence, f.Renewed, want)
	}
	want := &OffWitness{Span: Span{Name: "Off settled", From: at(22), To: at(28)}, ForceOffAt: at(20), Reads: 3, How: "after our accepted ForceOff"}
	if diff := cmp.Diff(want, f.Off); diff != "" {
		t.Errorf("Off witness (-want +got):\n%s", diff)
	}
	var phases []string
	for _, p := range f.Phases {
		phases = append(phases, p.Name)
	}
	if diff := cmp.Diff([]string{"Suspect", "PoweringOff", "ConfirmingOff", "Tainting", "Detaching", "Fenced", "Untainting"}, phases); diff != "" {
		t.Errorf("phases (-want +got):\n%s", diff)
	}
	if fenced := f.Phases[5]; fenced.From != at(29) || fenced.To != at(40) {
		t.Errorf("Fenced spans %v–%v, want from its decision to the next", fenced.From, fenced.To)
	}
	open := Build(record(0, ourFence[:13]...))
	if last := open.Phases[len(open.Phases)-1]; last.Name != "Fenced" || last.To != at(29) || !open.Open || open.Renewed {
		t.Errorf("an open record ends in %+v (open %v, renewed %v), want Fenced until its last entry, still silent", last, open.Open, open.Renewed)
	}
}

func TestBuildOffWitness(t *testing.T) {
	tests := []struct {
		name    string
		entries []v1alpha1.TimelineEntry
		want    *OffWitness
	}{
		{
			name: "already off is not acceptance: the Off settled unassisted",
			entries: []v1alpha1.TimelineEntry{
				entry(20, dec, "PoweringOff", "Suspect → PoweringOff: powering off"),
				entry(20, act, "PoweringOff", "PowerOff"),
				entry(21, act, "PoweringOff", "PowerOff: already in that state (the BMC did nothing): HTTP 409"),
				entry(23, rdg, "PoweringOff", "BMC reads Off (x20 until 2026-11-25T20:01:30Z)"),
				entry(90, dec, "Tainting", "ConfirmingOff → Tainting: off settled"),
			},
			want: &OffWitness{Span: Span{Name: "Off settled", From: at(23), To: at(90)}, Reads: 20, How: "unassisted: no ForceOff of ours accepted"},
		},
		{
			name: "an On breaks the run: only the Off reads after it count",
			entries: []v1alpha1.TimelineEntry{
				entry(20, act, "PoweringOff", "PowerOff: ok"),
				entry(22, rdg, "PoweringOff", "BMC reads Off"),
				entry(24, rdg, "ConfirmingOff", "BMC reads On"),
				entry(24, dec, "PoweringOff", "ConfirmingOff → PoweringOff: off run broken"),
				entry(24, act, "PoweringOff", "PowerOff"),
				entry(25, act, "PoweringOff", "PowerOff: ok"),
				entry(27, rdg, "PoweringOff", "BMC reads Off (x3 until 2026-11-25T20:00:33Z)"),
				entry(33, dec, "Tainting", "ConfirmingOff → Tainting: off settled"),
			},
			want: &OffWitness{Span: Span{Name: "Off settled", From: at(27), To: at(33)}, ForceOffAt: at(25), Reads: 3, How: "after our accepted ForceOff"},
		},
		{
			name: "a human's attestation",
			entries: []v1alpha1.TimelineEntry{
				entry(30, req, "Suspect", "confirm by alice: the PDU shows no draw"),
				entry(30, dec, "Tainting", "Suspect → Tainting: off attested by alice"),
			},
			want: &OffWitness{Span: Span{Name: "Off attested", From: at(30), To: at(30)}, How: "attested by alice"},
		},
		{
			name: "no taint, no witness",
			entries: []v1alpha1.TimelineEntry{
				entry(20, act, "PoweringOff", "PowerOff: ok"),
				entry(22, rdg, "PoweringOff", "BMC reads Off"),
				entry(23, dec, "Stuck", "ConfirmingOff → Stuck: renewal after our power-off"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Build(record(0, tt.entries...)).Off); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// Records written before the recorder matched stored times hold each
// entry many times: the picture shows each once.
func TestBuildDropsTheCopiesOlderAgentsStored(t *testing.T) {
	var copies []v1alpha1.TimelineEntry
	for i := 0; i < len(ourFence); i += 3 {
		for range 4 {
			copies = append(copies, ourFence[:min(i+3, len(ourFence))]...)
		}
	}
	clean, dup := Build(record(41, ourFence...)), Build(record(41, copies...))
	if diff := cmp.Diff(clean, dup); diff != "" {
		t.Errorf("(-clean +with copies):\n%s", diff)
	}
}

func TestActionLabels(t *testing.T) {
	tests := []struct {
		msg  string
		kind MarkKind
		want string
	}{
		{"PowerOff", MarkAction, "ForceOff sent"},
		{"PowerOff: ok", MarkResult, "ForceOff accepted by the BMC"},
		{"PowerOff: already in that state (the BMC did nothing): HTTP 409", MarkResult, "ForceOff not accepted: already in that state (the BMC did nothing): HTTP 409"},
		{"PowerOff: HTTP 500", MarkResult, "ForceOff failed: HTTP 500"},
		{"PowerOn: ok", MarkResult, "power-on accepted by the BMC"},
		{"ApplyTaint: ok", MarkResult, "out-of-service taint applied"},
		{"RemoveTaint: conflict", MarkResult, "removing our taint failed: conflict"},
		{"Something new", MarkAction, "Something new"},
	}
	for _, tt := range tests {
		kind, got := action(tt.msg)
		if kind != tt.kind || got != tt.want {
			t.Errorf("%q: %s %q, want %s %q", tt.msg, kind, got, tt.kind, tt.want)
		}
	}
}
