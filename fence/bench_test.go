package fence

import (
	"testing"
)

// BenchmarkStep measures the calls the agent makes most: a healthy node's
// heartbeat, and a read during confirmation.
func BenchmarkStep(b *testing.B) {
	p := DefaultPolicy()
	b.Run("healthy-tick", func(b *testing.B) {
		s := State{}
		in := tick(view(heartbeat(sec(5))), at(sec(10)))
		now := at(sec(10))
		b.ReportAllocs()
		for b.Loop() {
			Step(p, s, in, now)
		}
	})
	b.Run("confirming-read", func(b *testing.B) {
		s := State{Phase: ConfirmingOff, FailureStart: t0, OffRun: OffRun{First: at(sec(20)), Last: at(sec(20)), Count: 1}}
		n := view()
		in := reading(n, at(sec(23)), PowerOff)
		now := at(sec(23))
		b.ReportAllocs()
		for b.Loop() {
			Step(p, s, in, now)
		}
	})
	b.Run("suspect-transition", func(b *testing.B) {
		s := State{}
		in := tick(view(), at(sec(25)))
		now := at(sec(25))
		b.ReportAllocs()
		for b.Loop() {
			Step(p, s, in, now)
		}
	})
}
