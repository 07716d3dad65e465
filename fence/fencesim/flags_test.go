package fencesim

import (
	"flag"
	"testing"
)

var seedFlag = flag.Uint64("seed", 0, "run only this simulation seed")

// simScenarios: the full run proves the invariants over 100000 scenarios;
// -short and the race detector (ten times slower on this pure computation,
// and with no concurrency here to check) run a sample.
func simScenarios() int {
	switch {
	case testing.Short():
		return 2000
	case raceEnabled:
		return 5000
	default:
		return 100000
	}
}
