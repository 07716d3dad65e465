package pagetrim

import (
	"bufio"
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestParseSmapsAndSelectTheBinarysCleanReadOnlyMappings(t *testing.T) {
	const smaps = `00400000-01a2b000 r-xp 00000000 fd:01 1234                               /usr/local/bin/fence-agent
Size:              22700 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
01a2b000-0305c000 r--p 0162b000 fd:01 1234                               /usr/local/bin/fence-agent
Size:              22724 kB
Anonymous:             0 kB
0305c000-030a1000 rw-p 02c5c000 fd:01 1234                               /usr/local/bin/fence-agent
Anonymous:           276 kB
030a1000-030f0000 rw-p 00000000 00:00 0
Anonymous:           316 kB
5600000000-5600100000 r--p 00200000 fd:01 4321                           /opt/pie  bin/agent (deleted)
Anonymous:            64 kB
7f0000000000-7f0000021000 r--p 00000000 fd:01 99                         /usr/lib/other lib.so
Anonymous:             0 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
`
	all, err := parseSmaps(bufio.NewScanner(strings.NewReader(smaps)))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 7 || all[4].path != "/opt/pie  bin/agent (deleted)" || all[4].anonymous != 64<<10 || all[5].path != "/usr/lib/other lib.so" {
		t.Fatalf("parsed %+v: want 7 mappings, paths kept whole (spaces, a deleted binary), the Anonymous sizes", all)
	}
	got := binaryMappings(all, "/usr/local/bin/fence-agent")
	want := []mapping{
		{start: 0x400000, end: 0x1a2b000, perms: "r-xp", path: "/usr/local/bin/fence-agent"},
		{start: 0x1a2b000, end: 0x305c000, perms: "r--p", path: "/usr/local/bin/fence-agent"},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("binary mappings = %+v, want the code and the read-only data only (never the writable data)", got)
	}
	// A read-only mapping with pages of the process's own (relocations
	// applied, then protected: RELRO) is never unmapped.
	if got := binaryMappings(all, "/opt/pie  bin/agent (deleted)"); len(got) != 0 {
		t.Errorf("binary mappings = %+v: a read-only mapping with written pages was selected", got)
	}
	if _, err := parseSmaps(bufio.NewScanner(strings.NewReader("zz-yy r--p 0 0 0 /x\n"))); err == nil {
		t.Error("a malformed line was accepted")
	}
}

func TestRSSFile(t *testing.T) {
	got, err := rssFile("Name:\tx\nVmRSS:\t   1684 kB\nRssAnon:\t     112 kB\nRssFile:\t    1572 kB\n")
	if err != nil || got != 1572<<10 {
		t.Errorf("rssFile = %d, %v; want %d", got, err, 1572<<10)
	}
	if _, err := rssFile("VmRSS: 1 kB\n"); err == nil {
		t.Error("no RssFile line, no error")
	}
}

// TestBinaryUnmapsTheTestBinarysPages runs Binary on this test binary:
// its file-backed RSS must drop (the test binary's initializers touched
// much of it), and the process goes on running (the code it runs next is
// read back).
func TestBinaryUnmapsTheTestBinarysPages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	r, err := Binary()
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("kernel: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	if r.Mappings < 2 || r.Bytes == 0 {
		t.Fatalf("%+v: want the code and read-only data mappings advised", r)
	}
	if r.RSSFileAfter >= r.RSSFileBefore {
		t.Errorf("file-backed RSS %d → %d bytes: nothing unmapped", r.RSSFileBefore, r.RSSFileAfter)
	}
}

// TestBinaryLeavesRelocatedPagesAlone builds testdata/trimmer position
// independent, as a hardened build environment may (GOFLAGS=-buildmode=pie):
// its loader relocates type and itab pointers into a region it then makes
// read-only (RELRO). Unmapping those pages would read the file's
// unrelocated bytes back and crash the program at its next allocation (it
// did, before binaryMappings skipped mappings with pages of the process's
// own). The default build (the agent's: static, not position independent)
// runs it too.
func TestBinaryLeavesRelocatedPagesAlone(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("linux/amd64 only")
	}
	if testing.Short() {
		t.Skip("builds a program")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command")
		}
	}
	for _, mode := range []string{"pie", "default"} {
		t.Run(mode, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "trimmer")
			build := exec.Command(goBin, "build", "-buildmode="+mode, "-o", bin, "./testdata/trimmer")
			build.Env = append(build.Environ(), "CGO_ENABLED=0")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build -buildmode=%s: %v\n%s", mode, err, out)
			}
			out, err := exec.Command(bin).CombinedOutput()
			if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
				t.Fatalf("the trimmed program: %v\n%.2000s", err, out)
			}
		})
	}
}
