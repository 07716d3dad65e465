// Package goruntime sets the agent's Go scheduler and collector defaults:
// GOMAXPROCS 1 and GOGC 20, each unless its environment variable is set.
//
// Why, from the scale harness (1000 nodes, one event stream per BMC, a
// hundred Lease renewals a second; README, "Scale"): the agent at rest is a
// stream of small wake-ups, and with a second P the scheduler spent a
// quarter of the agent's CPU waking and parking threads that found nothing
// to do (runtime.findRunnable, futex). The same agent with GOMAXPROCS=1 in
// its environment used 17 % less CPU (7.48 → 6.21 % of a core). The agent
// never needs two cores: its requests are a tenth of one, and a fence's
// work is BMC and API round trips. GOGC 20 keeps the heap at 1.2 times
// what is live instead of twice: the live heap is small and changes
// slowly, and at rest the agent allocated about 1.3 MB/s while it watched
// the Leases (three quarters of it decoding renewals), so collecting more
// often costs little.
// At 1000 nodes (make scale, both on one cluster): GOGC 50 held RSS at
// 134.6 MiB and GOGC 20 at 121.2 MiB, the collector's share of the CPU
// profile 0.18 → 0.27 % of a core (GOGC 100 to 50 had given RSS 188 →
// 162 MiB with one P).
// The memory budget (internal/memlimit) still caps the heap near the
// container's limit.
package goruntime

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Defaults, each used when its environment variable is unset or empty.
const (
	DefaultMaxProcs  = 1
	DefaultGCPercent = 20
)

// Setting is what Apply left in effect.
type Setting struct {
	MaxProcs, GCPercent int
	// FromEnv names the variables that were set (and so left alone).
	FromEnv []string
}

func (s Setting) String() string {
	from := "the agent's defaults"
	if len(s.FromEnv) > 0 {
		from = strings.Join(s.FromEnv, " and ") + " from the environment"
	}
	gc := fmt.Sprint(s.GCPercent)
	if s.GCPercent < 0 {
		gc = "off"
	}
	return fmt.Sprintf("GOMAXPROCS %d, GOGC %s (%s)", s.MaxProcs, gc, from)
}

// Apply sets GOMAXPROCS and GOGC to the defaults where environ does not
// set them (the runtime has applied those already), and says what is in
// effect.
func Apply(environ []string) Setting {
	var s Setting
	if v, ok := Lookup(environ, "GOMAXPROCS"); ok && v != "" {
		s.FromEnv = append(s.FromEnv, "GOMAXPROCS")
		s.MaxProcs = runtime.GOMAXPROCS(0)
	} else {
		runtime.GOMAXPROCS(DefaultMaxProcs)
		s.MaxProcs = DefaultMaxProcs
	}
	if v, ok := Lookup(environ, "GOGC"); ok && v != "" {
		s.FromEnv = append(s.FromEnv, "GOGC")
		s.GCPercent = debug.SetGCPercent(-1)
		debug.SetGCPercent(s.GCPercent)
	} else {
		debug.SetGCPercent(DefaultGCPercent)
		s.GCPercent = DefaultGCPercent
	}
	return s
}

// Lookup returns key's value in environ (NAME=VALUE entries; the last one
// wins) and whether it is there.
func Lookup(environ []string, key string) (string, bool) {
	for i := len(environ) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(environ[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}
