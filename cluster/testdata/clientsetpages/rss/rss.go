// Package rss prints the process's resident memory, split as the kernel
// counts it: anonymous pages and the pages of mapped files (the binary).
package rss

import (
	"fmt"
	"os"
	"strings"
)

// Print writes "VmRSS … RssAnon … RssFile …" (kB) from /proc/self/status.
func Print() {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		panic(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, k := range []string{"VmRSS:", "RssAnon:", "RssFile:"} {
			if strings.HasPrefix(l, k) {
				out = append(out, strings.Join(strings.Fields(l)[:2], " "))
			}
		}
	}
	fmt.Println(strings.Join(out, " "))
}
