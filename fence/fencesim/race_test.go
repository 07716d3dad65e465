//go:build race

package fencesim

const raceEnabled = true
