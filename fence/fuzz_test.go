package fence

import (
	"reflect"
	"testing"
	"time"
)

// FuzzStep builds a state and an input from fuzz bytes and checks that Step
// never panics, always keeps the invariants, and is deterministic.
func FuzzStep(f *testing.F) {
	f.Add([]byte{1, 2, 0, 1, 3, 0, 0, 1, 0, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9})
	f.Add([]byte{4, 1, 1, 2, 0, 0, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17})
	f.Fuzz(func(t *testing.T, b []byte) {
		p := DefaultPolicy()
		s, in, now := fuzzCase(b)
		out := Step(p, s, in, now)
		if err := checkInvariants(p, s, in, now, out); err != nil {
			t.Fatalf("state %+v input %+v: %v", s, in, err)
		}
		if again := Step(p, s, in, now); !reflect.DeepEqual(out, again) {
			t.Fatal("Step is not deterministic")
		}
	})
}

// fuzzCase decodes bytes into a (state, input, now) triple whose times fall
// around a 400 s timeline, so that orderings between them vary.
func fuzzCase(b []byte) (State, Input, time.Time) {
	r := byteReader(b)
	now := at(400 * time.Second)
	tm := func() time.Time {
		v := r.u8()
		if v == 0 {
			return time.Time{}
		}
		return at(time.Duration(v) * 2 * time.Second)
	}
	s := State{
		Phase:        Phase(r.u8() % uint8(numPhases)),
		FailureStart: tm(),
		Manual:       r.u8()%4 == 0,
		Attested:     r.u8()%4 == 0,
		PowerOffAt:   tm(),
		PowerOffs:    int(r.u8() % 5),
		TaintOwned:   r.u8()%2 == 0,
		TaintedAt:    tm(),
		NextReadAt:   tm(),
		Stuck:        StuckReason(r.u8() % uint8(numStuckReasons)),
	}
	s.PowerOffAccepted = r.u8()%2 == 0
	s.AttestedAt = tm()
	s.Forced = r.u8()%5 == 0
	s.NotReadyFence = r.u8()%5 == 0
	s.AdmittedAt = tm()
	// Keep what the engine keeps together together: a count of our
	// ForceOffs goes with the time of the last one.
	switch {
	case s.PowerOffAt.IsZero():
		s.PowerOffs, s.PowerOffAccepted = 0, false
	case s.PowerOffs == 0:
		s.PowerOffs = 1
	}
	if c := int(r.u8() % 6); c > 0 {
		first := tm()
		s.OffRun = OffRun{First: first, Last: first.Add(time.Duration(r.u8()) * 100 * time.Millisecond), Count: c}
	}
	// An unsaved suspicion is only ever a Suspect on silence alone.
	s.Unsaved = s.Phase == Suspect && !s.Manual && !s.NotReadyFence && r.u8()%3 == 0
	n := NodeView{
		Ready:         Readiness(r.u8() % 3),
		NotReadySince: tm(),
		HeartbeatAt:   tm(),
		RenewedAt:     tm(),
		Maintenance:   r.u8()%5 == 0,
		Excluded:      r.u8()%5 == 0,
		HasBMC:        r.u8()%5 != 0,
		Taint:         TaintState(r.u8() % 3),
		Pods:          int(r.u8() % 3),
		Terminating:   int(r.u8() % 2),
	}
	if n.RenewedAt.After(n.HeartbeatAt) {
		// The observation builder moves HeartbeatAt with every renewal.
		n.HeartbeatAt = n.RenewedAt
	}
	f := FleetView{Nodes: 5, Unhealthy: int(r.u8() % 6), InFlight: int(r.u8() % 2), APIFreshAt: now.Add(-time.Duration(r.u8()) * time.Second)}
	in := Input{Kind: InputKind(r.u8() % uint8(numInputKinds)), Node: n, Fleet: f}
	switch in.Kind {
	case InputReading:
		in.Reading = Reading{At: tm(), Power: Power(r.u8() % uint8(numPowers)), OSRunning: r.u8()%4 == 0}
		if r.u8()%5 == 0 {
			in.Reading = Reading{At: in.Reading.At, Failure: "timeout"}
		}
	case InputResult:
		in.Result = Result{Action: ActionKind(r.u8() % uint8(numActionKinds))}
		if r.u8()%2 == 0 {
			in.Result.SentAt = tm() // of this ForceOff or not, later than now or not
		}
		switch r.u8() % 4 {
		case 0:
			in.Result.Err = "boom"
		case 1:
			in.Result.Err, in.Result.AlreadyInState = "409", true
		}
	case InputCommand:
		in.Command = Command{Kind: CommandKind(r.u8() % uint8(numCommandKinds)), User: "fuzz", Reason: "r", PowerOn: r.u8()%2 == 0,
			Force: r.u8()%4 == 0, SeenAt: tm()}
	case InputTick:
	}
	return s, in, now
}

type byteReader []byte

func (r *byteReader) u8() uint8 {
	if len(*r) == 0 {
		return 0
	}
	v := (*r)[0]
	*r = (*r)[1:]
	return v
}
