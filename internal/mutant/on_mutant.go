//go:build mutant

package mutant

// name is set at link time by the mutation test:
//
//	-ldflags "-X github.com/bmcfence/bmcfence/internal/mutant.name=NAME"
var name string

// On reports whether the named mutant is the one this build turns on.
func On(n Name) bool { return name != "" && string(n) == name }

// Current names the mutant this build turns on ("" for none).
func Current() Name { return Name(name) }
