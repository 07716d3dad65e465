//go:build !race

package fencesim

const raceEnabled = false
