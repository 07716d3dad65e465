//go:build race

package fence

// raceEnabled thins the exhaustive and randomized tests under the race
// detector, which slows pure computation tenfold and finds nothing in a
// package without goroutines.
const raceEnabled = true
