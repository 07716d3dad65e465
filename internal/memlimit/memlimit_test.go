package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestApplyTakesTheBudgetFromGOMEMLIMITElseTheContainer(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		name    string
		environ []string
		files   map[string]string // under the fake root
		want    Setting
		wantErr string
	}{{
		name:    "GOMEMLIMIT set: the runtime's, unchanged",
		environ: []string{"GOMEMLIMIT=90MiB"},
		files:   map[string]string{"sys/fs/cgroup/memory.max": "268435456"},
		want:    Setting{Bytes: 77 * mi, Source: FromEnv}, // what the test set as the runtime's
	}, {
		name:  "cgroup v2 with a namespace: the mount's root",
		files: map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "268435456\n"},
		want:  Setting{Bytes: 241591910 /* 0.9 × 256 MiB */, Source: FromCgroup, Cgroup: 256 * mi, CgroupFile: "sys/fs/cgroup/memory.max"},
	}, {
		name: "cgroup v2 without a namespace: the process's own cgroup",
		files: map[string]string{
			"proc/self/cgroup":                          "0::/kubepods/pod1/c1\n",
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": "134217728",
		},
		want: Setting{Bytes: 120795955, Source: FromCgroup, Cgroup: 128 * mi, CgroupFile: "sys/fs/cgroup/kubepods/pod1/c1/memory.max"},
	}, {
		name:  "cgroup v2 without a limit",
		files: map[string]string{"sys/fs/cgroup/memory.max": "max\n"},
		want:  Setting{Bytes: math.MaxInt64, Source: None},
	}, {
		name: "cgroup v1, the memory controller's own path",
		files: map[string]string{
			"proc/self/cgroup": "4:memory:/kubepods/pod1/c1\n1:cpu,cpuacct:/x\n0::/\n",
			"sys/fs/cgroup/memory/kubepods/pod1/c1/memory.limit_in_bytes": "268435456",
		},
		want: Setting{Bytes: 241591910, Source: FromCgroup, Cgroup: 256 * mi, CgroupFile: "sys/fs/cgroup/memory/kubepods/pod1/c1/memory.limit_in_bytes"},
	}, {
		name:  "cgroup v1 without a limit (its huge number)",
		files: map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712"},
		want:  Setting{Bytes: math.MaxInt64, Source: None},
	}, {
		name: "no cgroup files at all",
		want: Setting{Bytes: math.MaxInt64, Source: None},
	}, {
		name:    "an unreadable limit: no limit, and an error to log",
		files:   map[string]string{"sys/fs/cgroup/memory.max": "lots"},
		want:    Setting{Bytes: math.MaxInt64, Source: None},
		wantErr: `holds "lots", not a number of bytes`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tc.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// The runtime's limit is process-wide: start each case from
			// no limit (or the case's GOMEMLIMIT stand-in), restore after.
			old := debug.SetMemoryLimit(math.MaxInt64)
			t.Cleanup(func() { debug.SetMemoryLimit(old) })
			if tc.want.Source == FromEnv {
				debug.SetMemoryLimit(tc.want.Bytes)
			}
			got, err := Apply(tc.environ, root)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v; want one containing %q", err, tc.wantErr)
			}
			got.CgroupFile = strings.TrimPrefix(strings.TrimPrefix(got.CgroupFile, root), "/")
			if got != tc.want {
				t.Fatalf("Apply = %+v; want %+v", got, tc.want)
			}
			if now := debug.SetMemoryLimit(-1); now != got.Bytes {
				t.Fatalf("the runtime's limit is %d; Apply said %d", now, got.Bytes)
			}
			if got.String() == "unknown" {
				t.Fatalf("%+v has no description", got)
			}
		})
	}
}
