//go:build scale

package scale

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/bmcfence/bmcfence/test/testbed"
)

// profiles saves the agent's CPU profile (over -profile, after the steady
// window, so that profiling does not count in its CPU figure) and its heap
// profile (after a GC: what is live), with `go tool pprof -top` of each
// beside them: cpu.pprof, cpu.top.txt, heap.pprof, heap.top.txt; and,
// for the memory's breakdown (the Go collector's memstats: heap in use,
// idle and released, stacks, runtime), its /metrics as metrics.txt and
// its goroutines grouped by stack as goroutines.txt.
func (h *harness) profiles(dir string) {
	if *flagProfile <= 0 {
		return
	}
	base := h.agent.MetricsURL() + "/debug/pprof/"
	for _, p := range []struct {
		file, url, index string
		timeout          time.Duration
	}{
		{"cpu.pprof", fmt.Sprintf("%sprofile?seconds=%d", base, int(flagProfile.Seconds())), "", *flagProfile + time.Minute},
		{"heap.pprof", base + "heap?gc=1", "inuse_space", time.Minute},
		{"metrics.txt", h.agent.MetricsURL() + "/metrics", "", time.Minute},
		{"goroutines.txt", base + "goroutine?debug=1", "", time.Minute},
	} {
		path, ok := h.save(dir, p.file, p.url, p.timeout)
		if !ok {
			continue
		}
		if filepath.Ext(path) != ".pprof" {
			fmt.Printf("scale: profile: %s\n", path)
			continue
		}
		args := []string{"tool", "pprof", "-top", "-nodecount=30"}
		if p.index != "" {
			args = append(args, "-sample_index="+p.index)
		}
		top, err := exec.Command("go", append(args, path)...).CombinedOutput()
		if err != nil {
			h.t.Logf("go tool pprof %s: %v\n%s", path, err, top)
			continue
		}
		txt := path[:len(path)-len(".pprof")] + ".top.txt"
		if err := os.WriteFile(txt, top, 0o644); err != nil {
			h.t.Error(err)
		}
		fmt.Printf("scale: profile: %s (%s)\n", path, txt)
	}
}

// heapAtStart saves the agent's heap profile as the steady window starts
// (heap-start.pprof, no GC forced): its allocation counts are cumulative,
// so what the agent allocates at rest is the difference,
//
//	go tool pprof -sample_index=alloc_space -base heap-start.pprof heap.pprof
func (h *harness) heapAtStart(dir string) {
	if *flagProfile > 0 {
		h.save(dir, "heap-start.pprof", h.agent.MetricsURL()+"/debug/pprof/heap", time.Minute)
	}
}

// save fetches url into dir/file; ok is false (and the test says why) when
// it could not.
func (h *harness) save(dir, file, url string, timeout time.Duration) (path string, ok bool) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Error(err)
		return "", false
	}
	path = filepath.Join(dir, file)
	if err := fetch(url, path, timeout); err != nil {
		h.t.Logf("no %s: %v", file, err)
		return "", false
	}
	return path, true
}

func fetch(url, path string, timeout time.Duration) error {
	resp, err := testbed.MetricsClient(timeout).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// gzipFile writes src, gzip-compressed, to dst (a 1000-node run's agent log
// is tens of MiB of JSON; compressed, a few).
func gzipFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		return fmt.Errorf("compressing %s: %w", src, err)
	}
	return zw.Close()
}
