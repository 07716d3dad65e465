// Command trimmer unmaps its binary's start-up pages and then runs code
// that reads what a position-independent build relocated at load (type
// and itab pointers, interface calls, reflection, maps of strings): a
// relocated page wrongly unmapped reads back the file's unrelocated bytes
// and crashes it. It prints what pagetrim did and "ok".
package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/bmcfence/bmcfence/internal/pagetrim"
)

type shape interface{ area() float64 }

type square struct{ side float64 }

func (s square) area() float64 { return s.side * s.side }

func main() {
	r, err := pagetrim.Binary()
	if err != nil && !errors.Is(err, pagetrim.ErrUnsupported) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var shapes []shape
	for i := range 100 {
		shapes = append(shapes, square{float64(i)})
	}
	sum := 0.0
	for _, s := range shapes {
		sum += s.area()
	}
	m := map[string]reflect.Type{}
	for _, v := range []any{1, "x", 2.5, square{}, []byte{}, errors.New("e")} {
		t := reflect.TypeOf(v)
		m[t.String()] = t
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Println(r.Mappings, sum, strings.Join(keys, ","))
	fmt.Println("ok")
}
