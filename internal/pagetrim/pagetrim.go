// Package pagetrim unmaps the pages of the agent's own binary that its
// start-up touched: the package initializers of its dependencies (API
// types, protobuf and scheme registrations, parsers) run once and read
// most of the binary's code and read-only data, and the kernel maps 64 KiB
// around each such fault. Those pages stayed mapped, and counted in the
// agent's RSS, for its whole life: 27 to 37 MiB of it at every fleet size
// (README, "Scale").
//
// Binary drops the process's mappings of the binary's read-only,
// file-backed pages (madvise MADV_DONTNEED). They are clean copies of the
// file, shared with the page cache: nothing is lost, the page cache keeps
// them until the kernel needs the memory (an unmapped file page is the
// first it reclaims), and a page the agent runs again is mapped back from
// the cache on its first use, without reading the disk while the page is
// cached. The pages of what runs at rest (the Lease lists, the runner's
// ticks, the event streams) come back within seconds; those of the
// start-up, and of a fence until one runs, stay unmapped.
//
// Not MADV_PAGEOUT, which would also evict the pages from the page cache:
// the kernel honours it on a file only for its owner or a writer, and the
// agent runs as an unprivileged user on a binary owned by root (the
// image), so it did nothing there.
package pagetrim

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrUnsupported: not Linux, or the kernel refused the advice.
var ErrUnsupported = errors.New("pagetrim: the binary's pages cannot be unmapped here")

// Result says what Binary did.
type Result struct {
	// Mappings and Bytes: the read-only mappings of the binary unmapped,
	// and their total size.
	Mappings int
	Bytes    uint64
	// RSSFileBefore and RSSFileAfter: the process's file-backed resident
	// memory (RssFile of /proc/self/status) around the call, in bytes.
	RSSFileBefore, RSSFileAfter uint64
}

func (r Result) String() string {
	return fmt.Sprintf("%d mappings (%.1f MiB) of the binary unmapped; file-backed RSS %.1f → %.1f MiB",
		r.Mappings, mib(r.Bytes), mib(r.RSSFileBefore), mib(r.RSSFileAfter))
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// mapping is one mapping of /proc/self/smaps: its range, permissions,
// path and how much of it is the process's own (Anonymous: pages written
// since they were mapped, copy-on-write).
type mapping struct {
	start, end uint64
	perms      string
	path       string
	anonymous  uint64 // bytes
}

// parseSmaps reads /proc/PID/smaps: a header line per mapping ("start-end
// perms offset dev inode path", the path the rest of the line), then
// "Key: value" lines. Mappings without a path (anonymous memory) have
// path "".
func parseSmaps(s *bufio.Scanner) ([]mapping, error) {
	var out []mapping
	for s.Scan() {
		line := s.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if strings.HasSuffix(f[0], ":") {
			if f[0] == "Anonymous:" && len(out) > 0 && len(f) == 3 && f[2] == "kB" {
				kb, err := strconv.ParseUint(f[1], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("pagetrim: malformed smaps line %q", line)
				}
				out[len(out)-1].anonymous = kb << 10
			}
			continue
		}
		if len(f) < 5 {
			return nil, fmt.Errorf("pagetrim: malformed smaps line %q", line)
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || errors.Join(err1, err2) != nil || end < start {
			return nil, fmt.Errorf("pagetrim: malformed smaps line %q", line)
		}
		m := mapping{start: start, end: end, perms: f[1]}
		// The path is the rest of the line after five fields, as the
		// kernel wrote it (spaces included).
		rest := line
		for range 5 {
			rest = strings.TrimLeft(rest, " ")
			if i := strings.IndexByte(rest, ' '); i >= 0 {
				rest = rest[i:]
			} else {
				rest = ""
			}
		}
		m.path = strings.TrimLeft(rest, " ")
		out = append(out, m)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("pagetrim: reading the mappings: %w", err)
	}
	return out, nil
}

// binaryMappings selects the mappings of the file exe that are not
// writable (code, read-only data) and hold no page of the process's own:
// clean copies of the file, which MADV_DONTNEED only unmaps. A mapping
// that is read-only now may still hold pages written before (relocations
// a loader applied and then protected, RELRO in a position-independent or
// dynamically linked build; a debugger's or uprobe's breakpoint): those
// would be replaced by the file's unrelocated bytes, and are never
// touched. The agent's own build (static, not position-independent) has
// none.
func binaryMappings(all []mapping, exe string) []mapping {
	var out []mapping
	for _, m := range all {
		if m.path == exe && len(m.perms) >= 2 && m.perms[1] != 'w' && m.anonymous == 0 {
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
		return 0, fmt.Errorf("pagetrim: %w", err)
	}
	return rssFile(string(b))
}
