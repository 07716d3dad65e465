//go:build footprint

package cluster_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestClientsetPagesAtStart measures what linking client-go's whole
// clientset costs a process before it does anything: every API group's
// types are registered at init, which touches most of the binary, and a
// Go binary's touched pages stay resident (the binary's share of the
// agent's RSS, about 37 MiB in make scale at 733e141). It builds four
// programs as the Makefile builds the agent (testdata/clientsetpages: the
// whole clientset; client-go's typed clients of only the seven API groups
// the agent calls, as the agent had them; the agent's own client of those
// groups, internal/kube; a bare REST client with the seven groups' types),
// starts each five times and prints the median:
//
//	go test -tags footprint -run ClientsetPages -v ./cluster/
func TestClientsetPagesAtStart(t *testing.T) {
	type figures struct{ rss, anon, file float64 }
	measure := func(name string) (figures, int64) {
		bin := filepath.Join(t.TempDir(), name)
		build := exec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/clientsetpages/"+name)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", name, err, out)
		}
		st, err := os.Stat(bin)
		if err != nil {
			t.Fatal(err)
		}
		var runs []figures
		for range 5 {
			out, err := exec.Command(bin).Output()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var f figures
			if _, err := fmt.Sscanf(string(out), "VmRSS: %g RssAnon: %g RssFile: %g", &f.rss, &f.anon, &f.file); err != nil {
				t.Fatalf("%s printed %q: %v", name, out, err)
			}
			runs = append(runs, f)
		}
		slices.SortFunc(runs, func(a, b figures) int { return int(a.rss - b.rss) })
		return runs[len(runs)/2], st.Size()
	}
	full, fullSize := measure("full")
	typed, typedSize := measure("typed")
	own, ownSize := measure("kube")
	groups, groupsSize := measure("groups")
	for _, r := range []struct {
		what string
		f    figures
		size int64
	}{
		{"the whole clientset", full, fullSize},
		{"client-go, 7 groups", typed, typedSize},
		{"internal/kube", own, ownSize},
		{"REST, 7 groups", groups, groupsSize},
	} {
		fmt.Printf("clientset pages: %-19s binary %.1f MB, RSS at start %.1f MiB (the binary's pages %.1f, anonymous %.1f)\n",
			r.what, float64(r.size)/1e6, r.f.rss/1024, r.f.file/1024, r.f.anon/1024)
	}
	fmt.Printf("clientset pages: client-go's typed clients of 7 groups cost %.1f MiB of RSS at start more than internal/kube, %.1f MiB of it the binary's pages\n",
		(typed.rss-own.rss)/1024, (typed.file-own.file)/1024)
}
