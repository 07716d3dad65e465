//go:build mutant

package fence

// mutant is set at link time by the mutation test:
//
//	go test -tags mutant -ldflags "-X github.com/bmcfence/bmcfence/fence.mutant=keep-off" ...
var mutant string

// Enabled reports whether a safety check is on: all but the mutant's.
func Enabled(c Check) bool { return string(c) != mutant }

// Mutant names the check this build disables.
func Mutant() Check { return Check(mutant) }
