package runner

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/fence"
)

// Every field of NodeView, and every field of a struct inside it, counts
// in the renewal skip's comparison but the two signs of life: set alone,
// each makes two views differ. A field added to NodeView (or PowerEvent)
// and forgotten in sameButSignsOfLife fails here, naming it.
func TestSameButSignsOfLifeSeesEveryField(t *testing.T) {
	// HeartbeatFrom moves with HeartbeatAt: where a listed renewal is
	// placed for ordering an event, which a renewal just taken in cannot
	// make act (its silence starts again).
	signsOfLife := map[string]bool{"HeartbeatAt": true, "RenewedAt": true, "HeartbeatFrom": true}
	var leaves func(typ reflect.Type, path []int, name string)
	n := 0
	leaves = func(typ reflect.Type, path []int, name string) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			p, fname := append(append([]int{}, path...), i), strings.TrimPrefix(name+"."+f.Name, ".")
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Time]() {
				leaves(f.Type, p, fname)
				continue
			}
			n++
			var a, b fence.NodeView
			setNonZero(t, reflect.ValueOf(&b).Elem().FieldByIndex(p), fname)
			if got, want := sameButSignsOfLife(a, b), signsOfLife[fname]; got != want {
				if want {
					t.Errorf("NodeView.%s is a sign of life, compared by renewalOnly itself; sameButSignsOfLife says the views differ", fname)
				} else {
					t.Errorf("NodeView.%s changed and sameButSignsOfLife says the views are the same: compare it there, or the renewal skip hides its change", fname)
				}
			}
			if !sameButSignsOfLife(b, b) {
				t.Errorf("a view with NodeView.%s set differs from itself", fname)
			}
		}
	}
	leaves(reflect.TypeFor[fence.NodeView](), nil, "")
	if n < 20 {
		t.Fatalf("only %d fields walked", n)
	}
}

func setNonZero(t *testing.T, v reflect.Value, name string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(2)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(2)
	case reflect.String:
		v.SetString("x")
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		setNonZero(t, s.Index(0), name+"[0]")
		v.Set(s)
	case reflect.Struct: // time.Time
		v.Set(reflect.ValueOf(time.Unix(1_000_000, 0)))
	default:
		t.Fatalf("NodeView.%s is a %s: teach setNonZero (and sameButSignsOfLife) about it", name, v.Kind())
	}
}

// BenchmarkRenewalSkipComparison is the view comparison of a Healthy
// node's renewal (a hundred a second at 1000 nodes), as it was and now:
//
//	go test -run '^$' -bench RenewalSkip -benchmem ./fence/runner/
func BenchmarkRenewalSkipComparison(b *testing.B) {
	t0 := time.Unix(1_000_000, 0)
	q := fence.NodeView{Ready: fence.ReadyTrue, HeartbeatAt: t0, RenewedAt: t0, HasBMC: true, Pods: 30,
		Blockers: []string{"pod default/a", "pod default/b", "pod default/c"}, BMCSystem: "/redfish/v1/Systems/1"}
	v := q
	v.Blockers = append([]string{}, q.Blockers...)
	v.HeartbeatAt, v.RenewedAt = t0.Add(10*time.Second), t0.Add(10*time.Second)
	b.Run("deepequal-before", func(b *testing.B) {
		for b.Loop() {
			w := v
			if !slices.Equal(w.Blockers, q.Blockers) {
				b.Fatal("differ")
			}
			w.HeartbeatAt, w.RenewedAt = q.HeartbeatAt, q.RenewedAt
			if !reflect.DeepEqual(w, q) {
				b.Fatal("differ")
			}
		}
	})
	b.Run("fields", func(b *testing.B) {
		for b.Loop() {
			if !sameButSignsOfLife(v, q) {
				b.Fatal("differ")
			}
		}
	})
}
