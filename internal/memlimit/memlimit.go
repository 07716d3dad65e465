// Package memlimit gives the agent a memory budget: Go's soft memory limit
// (runtime/debug.SetMemoryLimit), from GOMEMLIMIT when it is set, else from
// the container's memory limit (cgroup v2 memory.max, v1
// memory.limit_in_bytes) times Fraction.
//
// Why: with the default GOGC=100 the collector lets the heap grow to about
// twice what is live before it collects, so an agent with 30 MiB live holds
// 60 and more. A soft limit makes the collector work harder only as the
// process nears its budget, and returns freed pages to the system: RSS
// follows the budget, not twice the live heap. It is soft: a live heap
// above it is not an error (the collector's CPU is then capped by the
// runtime at about half a core, and the container's hard limit still
// stands), so the budget is set a little above the live heap the agent
// needs at its size (docs/design.md, "Memory budget").
package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/bmcfence/bmcfence/internal/goruntime"
)

// Fraction of the container's memory limit taken as the soft limit when
// GOMEMLIMIT is not set: the rest is room for what Go's limit does not
// count (the binary's mapped pages, C allocations) before the kernel's
// OOM killer acts.
const Fraction = 0.9

// unlimited: cgroup v1 reports "no limit" as a huge page-rounded number
// (9223372036854771712); anything at or past this is no limit.
const unlimited = 1 << 62

// Source says where the limit in effect came from.
type Source string

// The sources, in the order they are consulted.
const (
	FromEnv    Source = "GOMEMLIMIT"
	FromCgroup Source = "cgroup"
	None       Source = "none"
)

// Setting is the limit in effect after Apply.
type Setting struct {
	// Bytes is the soft limit; math.MaxInt64 when there is none.
	Bytes  int64
	Source Source
	// Cgroup is the container's limit the soft one was derived from, and
	// CgroupFile the file it was read from (FromCgroup only).
	Cgroup     int64
	CgroupFile string
}

func (s Setting) String() string {
	switch s.Source {
	case FromEnv:
		if s.Bytes == math.MaxInt64 {
			return "none (GOMEMLIMIT=off)"
		}
		return fmt.Sprintf("%s from GOMEMLIMIT", mib(s.Bytes))
	case FromCgroup:
		return fmt.Sprintf("%s: %.0f%% of the container's %s (%s)", mib(s.Bytes), Fraction*100, mib(s.Cgroup), s.CgroupFile)
	case None:
		return "none (no GOMEMLIMIT, no container memory limit found)"
	}
	return "unknown"
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Apply sets the soft memory limit and says which one is in effect. environ
// is the process's environment; root is where /proc and /sys are found
// ("/" in production, a test's directory in tests). With GOMEMLIMIT set
// the runtime has already applied it, and Apply changes nothing. An error
// means the container's limit could not be read (the runtime's default, no
// limit, stays); it is worth a log line, not a failure.
func Apply(environ []string, root string) (Setting, error) {
	if env, ok := goruntime.Lookup(environ, "GOMEMLIMIT"); ok && env != "" {
		return Setting{Bytes: debug.SetMemoryLimit(-1), Source: FromEnv}, nil
	}
	limit, file, err := cgroupLimit(root)
	if err != nil || limit == 0 {
		return Setting{Bytes: debug.SetMemoryLimit(-1), Source: None}, err
	}
	soft := int64(float64(limit) * Fraction)
	debug.SetMemoryLimit(soft)
	return Setting{Bytes: soft, Source: FromCgroup, Cgroup: limit, CgroupFile: file}, nil
}

// cgroupLimit reads the memory limit of the cgroup this process is in: 0
// when there is none. The cgroup's own directory (from /proc/self/cgroup)
// is tried first, then the mount's root, which is the container's own
// cgroup when the runtime gave it a cgroup namespace (containerd and
// CRI-O on cgroup v2 do).
func cgroupLimit(root string) (int64, string, error) {
	v2Path, v1Path := ownCgroups(filepath.Join(root, "proc/self/cgroup"))
	var candidates []string
	if v2Path != "" {
		candidates = append(candidates, filepath.Join(root, "sys/fs/cgroup", v2Path, "memory.max"))
	}
	candidates = append(candidates, filepath.Join(root, "sys/fs/cgroup/memory.max"))
	if v1Path != "" {
		candidates = append(candidates, filepath.Join(root, "sys/fs/cgroup/memory", v1Path, "memory.limit_in_bytes"))
	}
	candidates = append(candidates, filepath.Join(root, "sys/fs/cgroup/memory/memory.limit_in_bytes"))
	for _, f := range candidates {
		raw, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, f, fmt.Errorf("reading the container's memory limit: %w", err)
		}
		s := string(bytes.TrimSpace(raw))
		if s == "max" {
			return 0, f, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return 0, f, fmt.Errorf("reading the container's memory limit: %s holds %q, not a number of bytes", f, s)
		}
		if n >= unlimited {
			return 0, f, nil
		}
		return n, f, nil
	}
	return 0, "", nil
}

// ownCgroups reads /proc/self/cgroup: the v2 path ("0::/path") and the v1
// memory controller's ("N:memory:/path"); "" where absent or the root.
func ownCgroups(file string) (v2, v1 string) {
	f, err := os.Open(file)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || parts[2] == "/" {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			v1 = parts[2]
		}
	}
	return v2, v1
}
