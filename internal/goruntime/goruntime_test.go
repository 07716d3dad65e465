package goruntime

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestApply(t *testing.T) {
	procs, gc := runtime.GOMAXPROCS(0), debug.SetGCPercent(100)
	t.Cleanup(func() { runtime.GOMAXPROCS(procs); debug.SetGCPercent(gc) })
	tests := []struct {
		name      string
		environ   []string
		wantProcs int
		wantGC    int
		wantText  string
	}{
		{"defaults", []string{"HOME=/"}, DefaultMaxProcs, DefaultGCPercent, "GOMAXPROCS 1, GOGC 20 (the agent's defaults)"},
		{"empty values are unset", []string{"GOMAXPROCS=", "GOGC="}, DefaultMaxProcs, DefaultGCPercent, "GOMAXPROCS 1, GOGC 20 (the agent's defaults)"},
		// The runtime read the variables at start; Apply leaves what it
		// set (here set by hand, as the runtime would have).
		{"the environment wins", []string{"GOMAXPROCS=3", "GOGC=80"}, 3, 80, "GOMAXPROCS 3, GOGC 80 (GOMAXPROCS and GOGC from the environment)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runtime.GOMAXPROCS(3)
			debug.SetGCPercent(80)
			s := Apply(tt.environ)
			if got := runtime.GOMAXPROCS(0); got != tt.wantProcs || s.MaxProcs != tt.wantProcs {
				t.Errorf("GOMAXPROCS = %d (reported %d), want %d", got, s.MaxProcs, tt.wantProcs)
			}
			if got := debug.SetGCPercent(80); got != tt.wantGC || s.GCPercent != tt.wantGC {
				t.Errorf("GOGC = %d (reported %d), want %d", got, s.GCPercent, tt.wantGC)
			}
			if s.String() != tt.wantText {
				t.Errorf("String() = %q, want %q", s.String(), tt.wantText)
			}
		})
	}
}

func TestGCOffReadsOff(t *testing.T) {
	if got := (Setting{MaxProcs: 1, GCPercent: -1, FromEnv: []string{"GOGC"}}).String(); got != "GOMAXPROCS 1, GOGC off (GOGC from the environment)" {
		t.Errorf("String() = %q", got)
	}
}
