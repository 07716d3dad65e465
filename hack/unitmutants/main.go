// Command unitmutants proves that the rules outside the simulation's reach
// (redaction, the merged per-node policy's validation, request
// authorization, mixed-version refusal, the metrics token cache, the chassis
// rule's exceptions, the identity of a system that answers 503, the outlet
// identity test) are tested:
// for each unit mutant of internal/mutant it runs the tests of the packages
// that must catch it, built with the mutant on, and expects them to fail.
// First it runs the same tests with every mutant off, which must pass, so a
// failure is the mutant's and not the tests'. It prints one line per mutant
// and
//
//	unit mutants: K of M killed
//
// and exits 1 unless K = M. make unit-mutants runs it.
//
//	go run ./hack/unitmutants [-v]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/bmcfence/bmcfence/internal/mutant"
)

const nameVar = "github.com/bmcfence/bmcfence/internal/mutant.name"

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

func main() {
	verbose := flag.Bool("v", false, "print the go test output of each run")
	flag.Parse()
	start := time.Now()
	all := mutant.All()

	// The baseline: the same tests, the mutant build, no mutant on.
	var pkgs, runs []string
	for _, m := range all {
		for _, p := range m.Packages {
			if !slices.Contains(pkgs, p) {
				pkgs = append(pkgs, p)
			}
		}
		runs = append(runs, m.Run)
	}
	out, err := goTest("", strings.Join(runs, "|"), pkgs)
	if err != nil {
		fmt.Printf("unit mutants: the tests fail with no mutant on (%v):\n%s\n", err, out)
		os.Exit(1)
	}
	if *verbose {
		fmt.Print(out)
	}

	killed := 0
	for _, m := range all {
		out, err := goTest(string(m.Name), m.Run, m.Packages)
		if *verbose {
			fmt.Print(out)
		}
		fails := failLine.FindAllStringSubmatch(out, -1)
		var names []string
		for _, f := range fails {
			if !strings.Contains(f[1], "/") { // top-level tests only
				names = append(names, f[1])
			}
		}
		switch {
		case err != nil && len(names) > 0:
			killed++
			fmt.Printf("unit mutant %-30s killed by %s (%s)\n", m.Name, strings.Join(names, ", "), strings.Join(m.Packages, " "))
		case err != nil:
			fmt.Printf("unit mutant %-30s NOT killed: go test failed without a failing test (a build error?):\n%s\n", m.Name, out)
		default:
			fmt.Printf("unit mutant %-30s NOT killed: %s pass with it on\n", m.Name, strings.Join(m.Packages, " "))
		}
	}
	fmt.Printf("unit mutants: %d of %d killed (%s)\n", killed, len(all), time.Since(start).Round(time.Second))
	if killed != len(all) {
		os.Exit(1)
	}
}

// goTest runs go test -tags mutant with the named mutant on ("" for none).
func goTest(name, run string, pkgs []string) (string, error) {
	args := []string{"test", "-tags", "mutant", "-count=1", "-ldflags", "-X " + nameVar + "=" + name, "-run", run}
	cmd := exec.Command("go", append(args, pkgs...)...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}
