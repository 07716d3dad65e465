package fence

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// stateCmp compares States by their evidence records, not the ring's layout.
var stateCmp = cmp.Options{
	cmp.Comparer(func(a, b Evidence) bool { return cmp.Equal(a.Records(), b.Records()) }),
}

// richState walks a node through a whole fence so the evidence is realistic.
func richState(t *testing.T) State {
	t.Helper()
	d := newDriver(t)
	d.p.FenceAfter = d.p.SuspectAfter
	n := view()
	d.suspect(n)
	d.step(reading(n, at(sec(20)), PowerOn), at(sec(20)))
	d.step(result(n, at(sec(20.5)), ActPowerOff, "409 Conflict"), at(sec(20.5)))
	d.step(reading(n, at(sec(22)), PowerOff), at(sec(22)))
	d.step(reading(n, at(sec(25)), PowerOff), at(sec(25)))
	d.step(reading(n, at(sec(28)), PowerOff), at(sec(28)))
	d.step(result(view(withTaint(TaintOurs), pods(1, 1)), at(sec(28.1)), ActApplyTaint, ""), at(sec(28.1)))
	d.step(command(view(withTaint(TaintOurs), pods(1, 1)), at(sec(30)), Command{Kind: CmdAbort, User: "ops@example", Reason: "checking \"rack\" 4"}), at(sec(30)))
	return d.s
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	states := []State{
		{},
		{Phase: Suspect, Since: at(sec(1.5)), FailureStart: t0, NextReadAt: at(sec(2)), ReadFailures: 2, Last: Reading{At: at(sec(1)), Failure: "timeout"}, Refusal: RefuseCooldown},
		richState(t),
	}
	for _, s := range states {
		enc, err := Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode(%s): %v", enc, err)
		}
		if diff := cmp.Diff(s, got, stateCmp, cmp.AllowUnexported(State{})); diff != "" {
			t.Errorf("round trip (-want +got):\n%s\nencoded: %s", diff, enc)
		}
		// A decoded state must behave exactly like the original.
		in := tick(view(withTaint(TaintOurs)), at(sec(100)))
		a, b := Step(DefaultPolicy(), s, in, at(sec(100))), Step(DefaultPolicy(), got, in, at(sec(100)))
		if diff := cmp.Diff(a, b, stateCmp); diff != "" {
			t.Errorf("decoded state steps differently (-orig +decoded):\n%s", diff)
		}
	}
}

func TestEncodedStateIsCompact(t *testing.T) {
	s := richState(t)
	// Fill the ring completely with distinct records.
	for i := 0; i < EvidenceCap; i++ {
		s.Evidence.add(Record{At: at(time.Duration(i) * time.Second), Kind: RecCommand, Note: "fence by someone-with-a-long-name@example.com: a reason of ordinary length"})
	}
	enc, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(enc) > 8<<10 {
		t.Errorf("a full state encodes to %d bytes; keep annotations under 8 KiB", len(enc))
	}
	t.Logf("full state: %d bytes", len(enc))
}

func TestDecodeRefusesWhatItCannotReadExactly(t *testing.T) {
	good, err := Encode(richState(t))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"empty", "", ErrStateCorrupt},
		{"garbage", "not json", ErrStateCorrupt},
		{"no version", `{"ph":"Healthy"}`, ErrStateCorrupt},
		{"future version", `{"v":3,"ph":"Fenced","x":1}`, ErrStateVersion},
		{"unknown phase", `{"v":1,"ph":"Fencing"}`, ErrStateCorrupt},
		{"unknown field", `{"v":1,"ph":"Healthy","zz":1}`, ErrStateCorrupt},
		{"bad run", `{"v":1,"ph":"ConfirmingOff","run":{"f":5,"l":1,"n":2}}`, ErrStateCorrupt},
		{"negative counter", `{"v":1,"ph":"PoweringOff","pos":-1}`, ErrStateCorrupt},
		{"bad reading", `{"v":1,"ph":"Suspect","last":{"t":1,"p":"off"}}`, ErrStateCorrupt},
		{"bad evidence", `{"v":1,"ph":"Suspect","ev":[{"t":1,"k":"reading","p":"Suspect","pw":"OFF"}]}`, ErrStateCorrupt},
		{"trailing data", good + `{}`, ErrStateCorrupt},
		{"too large", `{"v":1,"ph":"Healthy","by":"` + strings.Repeat("x", 70<<10) + `"}`, ErrStateCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.in)
			if !errors.Is(err, tt.want) {
				t.Errorf("Decode = %v, want %v", err, tt.want)
			}
		})
	}
}

// FuzzDecode: the decoder never panics, and whatever it accepts re-encodes
// to something it decodes to the same state.
func FuzzDecode(f *testing.F) {
	good, _ := Encode(State{Phase: Detaching, TaintOwned: true, TaintedAt: t0, OffRun: OffRun{First: t0, Last: t0.Add(time.Second), Count: 2}})
	for _, s := range []string{good, `{"v":1,"ph":"Healthy"}`, `{"v":2}`, `[]`, `{"v":1,"ph":"Suspect","ev":[{"t":1,"k":"reading","p":"Suspect","pw":"Off","n":3}]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Decode(in)
		if err != nil {
			if !errors.Is(err, ErrStateCorrupt) && !errors.Is(err, ErrStateVersion) {
				t.Fatalf("Decode error %v wraps neither sentinel", err)
			}
			return
		}
		enc, err := Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", enc, err)
		}
		if diff := cmp.Diff(s, back, stateCmp, cmp.AllowUnexported(State{})); diff != "" {
			t.Fatalf("not stable (-first +second):\n%s", diff)
		}
	})
}
