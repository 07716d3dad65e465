package fence

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	prev "github.com/bmcfence/bmcfence/fence/testdata/prevstate"
)

// stateVariants are states this version may write: a whole fence's state,
// then, for every field of State (and of the structs it holds), the same
// state with that field set to a value of its own, every name of every enum
// included, and evidence with every kind of record. A field added later is
// covered without touching this list.
func stateVariants(t *testing.T) []State {
	t.Helper()
	base := richState(t)
	out := []State{{}, base}
	enums := map[reflect.Type][]uint64{}
	enumValues := func(typ reflect.Type) []uint64 {
		if v, ok := enums[typ]; ok {
			return v
		}
		var vals []uint64
		for i := uint64(0); i < 256; i++ {
			v := reflect.New(typ).Elem()
			v.SetUint(i)
			if s, ok := v.Interface().(fmt.Stringer); ok && s.String() != "?" && !strings.HasPrefix(s.String(), "Phase(") {
				vals = append(vals, i)
			}
		}
		enums[typ] = vals
		return vals
	}
	var walk func(v reflect.Value, set func())
	k := 0
	walk = func(v reflect.Value, set func()) {
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			if !f.CanSet() {
				continue // Evidence's records: below
			}
			k++
			switch {
			case f.Type() == reflect.TypeOf(time.Time{}):
				f.Set(reflect.ValueOf(t0.Add(time.Duration(k) * time.Second)))
				set()
			case f.Kind() == reflect.Struct:
				walk(f, set)
			case f.Kind() == reflect.Bool:
				f.SetBool(!f.Bool())
				set()
			case f.Kind() == reflect.String:
				f.SetString(fmt.Sprintf("variant-%d", k))
				set()
			case f.Kind() == reflect.Int:
				f.SetInt(int64(k))
				set()
			case f.Kind() == reflect.Uint8:
				for _, e := range enumValues(f.Type()) {
					f.SetUint(e)
					set()
				}
			default:
				t.Fatalf("stateVariants: field %s of kind %s: teach it this kind", v.Type().Field(i).Name, f.Kind())
			}
		}
	}
	s := base
	walk(reflect.ValueOf(&s).Elem(), func() { out = append(out, s) })
	// Evidence with every kind of record, every phase, power and action.
	ev := base
	ev.Evidence = Evidence{}
	for i := range int(numRecordKinds) {
		r := Record{At: t0.Add(time.Duration(i) * time.Second), Kind: RecordKind(i), Phase: Phase(i % int(numPhases)), Note: "note"}
		r.From, r.Power, r.Action = Phase((i+1)%int(numPhases)), PowerOff, ActionKind(i%int(numActionKinds))
		ev.Evidence.add(r)
	}
	for p := range numPhases {
		ev.Evidence.add(Record{At: t0.Add(time.Minute + time.Duration(p)*time.Second), Kind: RecTransition, Phase: Phase(p), From: Phase((p + 1) % numPhases)})
	}
	for a := range numActionKinds {
		ev.Evidence.add(Record{At: t0.Add(2*time.Minute + time.Duration(a)*time.Second), Kind: RecAction, Action: ActionKind(a)})
	}
	for pw := range numPowers {
		ev.Evidence.add(Record{At: t0.Add(3*time.Minute + time.Duration(pw)*time.Second), Kind: RecReading, Power: Power(pw), Count: 2, Until: t0.Add(4 * time.Minute)})
	}
	return append(out, ev)
}

// futureStates are states a later version could write, which this one
// cannot read exactly: a newer version, a field it does not know (at every
// depth), a name it does not know (of every enum).
var futureStates = map[string]string{
	"newer version":                 `{"v":3,"ph":"Fenced"}`,
	"unknown field":                 `{"v":2,"ph":"Fenced","lsa":1700000000000000000}`,
	"unknown field in the run":      `{"v":2,"ph":"ConfirmingOff","run":{"f":1,"l":2,"n":2,"src":"pdu"}}`,
	"unknown field in the reading":  `{"v":2,"ph":"Suspect","last":{"t":1,"p":"Off","outlet":"A3"}}`,
	"unknown field in the evidence": `{"v":2,"ph":"Suspect","ev":[{"t":1,"k":"reading","p":"Suspect","pw":"Off","dev":"pdu-1"}]}`,
	"unknown phase":                 `{"v":2,"ph":"PoweringOffLevel2"}`,
	"unknown stuck reason":          `{"v":2,"ph":"Stuck","st":"PDUMismatch"}`,
	"unknown refusal":               `{"v":2,"ph":"Suspect","rs":"RackBudget"}`,
	"unknown power in the reading":  `{"v":2,"ph":"Suspect","last":{"t":1,"p":"Paused"}}`,
	"unknown record kind":           `{"v":2,"ph":"Suspect","ev":[{"t":1,"k":"watchdog","p":"Suspect"}]}`,
	"unknown action":                `{"v":2,"ph":"Suspect","ev":[{"t":1,"k":"action","p":"Suspect","a":"PowerOffOutlet"}]}`,
	"unknown phase in the evidence": `{"v":2,"ph":"Suspect","ev":[{"t":1,"k":"transition","p":"Suspect","f":"Rebooting"}]}`,
}

// Mixed versions (docs/safety.md, "Versions mix during rollouts"): the
// previous release's decoder (fence/testdata/prevstate, a verbatim copy), run
// on every state this version writes, either refuses it or reads all of it:
// what it reads re-encodes to exactly what was written, so nothing is
// dropped. A field, a phase or any other name it does not know is refused,
// as is a newer version.
func TestPreviousReleaseRefusesWhatItCannotRead(t *testing.T) {
	read, refused := 0, 0
	for i, s := range stateVariants(t) {
		enc, err := Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := prev.Decode(enc)
		if err != nil {
			if !errors.Is(err, prev.ErrStateCorrupt) && !errors.Is(err, prev.ErrStateVersion) {
				t.Errorf("variant %d: the previous release fails with %v, which wraps neither of its sentinels", i, err)
			}
			refused++
			continue
		}
		back, err := prev.Encode(got)
		if err != nil {
			t.Fatal(err)
		}
		if diff := jsonDiff(enc, back); diff != "" {
			t.Errorf("variant %d: the previous release read this state and dropped or changed %s:\nwritten: %s\nread as: %s", i, diff, enc, back)
		}
		read++
	}
	for name, s := range futureStates {
		if _, err := prev.Decode(s); !errors.Is(err, prev.ErrStateCorrupt) && !errors.Is(err, prev.ErrStateVersion) {
			t.Errorf("%s: the previous release decodes %s with error %v; want it refused", name, s, err)
		}
	}
	t.Logf("%d states this version writes: %d read whole by the previous release, %d refused", read+refused, read, refused)
}

// This version, like the previous one, refuses every state it cannot read
// exactly (a later version's), saying which sentinel: the runner holds the
// node and says so (FenceStateUnreadable), never acts on what it read.
func TestDecodeRefusesAFutureState(t *testing.T) {
	for name, s := range futureStates {
		_, err := Decode(s)
		want := ErrStateCorrupt
		if name == "newer version" {
			want = ErrStateVersion
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: Decode(%s) = %v, want %v", name, s, err, want)
		}
	}
}

// jsonDiff names the keys whose values differ between two JSON objects
// (nested objects and arrays compared whole), or "".
func jsonDiff(a, b string) string {
	var x, y map[string]any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return "the whole document"
	}
	var keys []string
	for k, v := range x {
		if !reflect.DeepEqual(v, y[k]) {
			keys = append(keys, k)
		}
	}
	for k := range y {
		if _, ok := x[k]; !ok {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	return "key(s) " + strings.Join(keys, ", ")
}
