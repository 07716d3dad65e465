package pagetrim

import (
	"bufio"
	"errors"
	"runtime"
	"strings"
	"testing"
)

func TestParseMapsAndSelectTheBinarysReadOnlyMappings(t *testing.T) {
	const maps = `00400000-01a2b000 r-xp 00000000 fd:01 1234 /usr/local/bin/fence-agent
01a2b000-0305c000 r--p 0162b000 fd:01 1234 /usr/local/bin/fence-agent
0305c000-030a1000 rw-p 02c5c000 fd:01 1234 /usr/local/bin/fence-agent
030a1000-030f0000 rw-p 00000000 00:00 0
c000000000-c004000000 rw-p 00000000 00:00 0
7f0000000000-7f0000021000 r--p 00000000 fd:01 99 /usr/lib/other lib.so
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
`
	all, err := parseMaps(bufio.NewScanner(strings.NewReader(maps)))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 7 || all[5].path != "/usr/lib/other lib.so" {
		t.Fatalf("parsed %d mappings (%+v), want 7 and a path with a space kept whole", len(all), all)
	}
	got := binaryMappings(all, "/usr/local/bin/fence-agent")
	want := []mapping{
		{start: 0x400000, end: 0x1a2b000, perms: "r-xp", path: "/usr/local/bin/fence-agent"},
		{start: 0x1a2b000, end: 0x305c000, perms: "r--p", path: "/usr/local/bin/fence-agent"},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("binary mappings = %+v, want the code and the read-only data only (never the writable data)", got)
	}
	if _, err := parseMaps(bufio.NewScanner(strings.NewReader("zz-yy r--p 0 0 0 /x\n"))); err == nil {
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
