// Package pagetrim gives back the pages of the agent's own binary that its
// start-up touched: the package initializers of its dependencies (API
// types, protobuf and scheme registrations, parsers) run once and read
// most of the binary's code and read-only data, and the kernel maps 64 KiB
// around each such fault. Those pages stayed in the agent's RSS for its
// whole life: 27 to 37 MiB of it at every fleet size (README, "Scale").
//
// Binary asks the kernel to reclaim the binary's read-only, file-backed
// mappings (madvise MADV_PAGEOUT, Linux 5.4 and later). They are clean
// copies of the file: nothing is written anywhere, and a page the agent
// runs again is read back on its first use. The pages of what runs at rest
// (the Lease lists, the runner's ticks, the event streams) come back within
// seconds; those of the start-up, and of a fence until one runs, stay out.
package pagetrim

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrUnsupported: this system has no MADV_PAGEOUT (not Linux, or a kernel
// before 5.4).
var ErrUnsupported = errors.New("pagetrim: the kernel cannot reclaim pages on request (MADV_PAGEOUT)")

// Result says what Binary did.
type Result struct {
	// Mappings and Bytes: the read-only mappings of the binary advised,
	// and their total size.
	Mappings int
	Bytes    uint64
	// RSSFileBefore and RSSFileAfter: the process's file-backed resident
	// memory (RssFile of /proc/self/status) around the call, in bytes.
	RSSFileBefore, RSSFileAfter uint64
}

func (r Result) String() string {
	return fmt.Sprintf("%d mappings (%.1f MiB) of the binary advised; file-backed RSS %.1f → %.1f MiB",
		r.Mappings, mib(r.Bytes), mib(r.RSSFileBefore), mib(r.RSSFileAfter))
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// mapping is one line of /proc/self/maps.
type mapping struct {
	start, end uint64
	perms      string
	path       string
}

// parseMaps reads /proc/PID/maps lines: "start-end perms offset dev inode
// path". Lines without a path (anonymous memory) are kept with path "".
func parseMaps(s *bufio.Scanner) ([]mapping, error) {
	var out []mapping
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			return nil, fmt.Errorf("pagetrim: malformed maps line %q", s.Text())
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err := errors.Join(err1, err2); err != nil || end < start {
			return nil, fmt.Errorf("pagetrim: malformed maps line %q", s.Text())
		}
		m := mapping{start: start, end: end, perms: f[1]}
		if len(f) >= 6 {
			m.path = strings.Join(f[5:], " ")
		}
		out = append(out, m)
	}
	return out, s.Err()
}

// binaryMappings selects the mappings of the file exe that are not
// writable (code, read-only data): clean copies of the file. A writable
// mapping's pages may be the process's own (copy-on-write), and are left
// alone.
func binaryMappings(all []mapping, exe string) []mapping {
	var out []mapping
	for _, m := range all {
		if m.path == exe && len(m.perms) >= 2 && m.perms[1] != 'w' {
			out = append(out, m)
		}
	}
	return out
}

// rssFile reads RssFile (bytes) from a /proc/PID/status.
func rssFile(status string) (uint64, error) {
	for line := range strings.Lines(status) {
		rest, ok := strings.CutPrefix(line, "RssFile:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			break
		}
		return kb << 10, nil
	}
	return 0, errors.New("pagetrim: no RssFile in /proc/self/status")
}

func readRSSFile() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	return rssFile(string(b))
}
