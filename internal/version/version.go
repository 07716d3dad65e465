// Package version reports what a bmcfence binary was built from. The
// Makefile sets the variables with -ldflags -X; a plain `go build` falls back
// to the module's build information.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by -ldflags "-X github.com/bmcfence/bmcfence/internal/version.Version=…".
var (
	Version = ""
	Commit  = ""
	Date    = ""
)

// Info is the version of the running binary.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Date    string `json:"date"`
	Go      string `json:"go"`
}

// Get returns the build's version information.
func Get() Info {
	i := Info{Version: Version, Commit: Commit, Date: Date, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if i.Version == "" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if i.Commit == "" {
					i.Commit = s.Value
				}
			case "vcs.time":
				if i.Date == "" {
					i.Date = s.Value
				}
			}
		}
	}
	for _, p := range []*string{&i.Version, &i.Commit, &i.Date} {
		if *p == "" || *p == "(devel)" {
			*p = "unknown"
		}
	}
	return i
}

// String is the one-line form every binary prints for --version.
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s)", i.Version, i.Commit, i.Date, i.Go)
}
