package fencesim

import (
	"flag"
	"testing"
)

var (
	seedFlag      = flag.Uint64("seed", 0, "run only this simulation seed, and print its plan")
	scenariosFlag = flag.Int("scenarios", 0, "run this many scenarios instead of the default")
	stopFirst     = flag.Bool("stop-first", false, "stop at the first violation and print its seed (the mutation test's child mode)")
	mutantsOnly   = flag.Bool("mutants-only", false, "run the mutation test alone, without the scenarios before it (make mutants)")
)

// simScenarios: the full run proves the invariants over 100000 scenarios;
// -short and the race detector (ten times slower on this pure computation,
// and with no concurrency here to check) run a sample.
func simScenarios() int {
	switch {
	case *scenariosFlag > 0:
		return *scenariosFlag
	case testing.Short():
		return 2000
	case raceEnabled:
		return 1500
	default:
		return 100000
	}
}
