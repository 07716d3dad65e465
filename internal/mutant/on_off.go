//go:build !mutant

package mutant

// On reports whether the named mutant is on: never, outside the mutation
// test.
func On(Name) bool { return false }

// Current names the mutant this build turns on: none.
func Current() Name { return "" }
