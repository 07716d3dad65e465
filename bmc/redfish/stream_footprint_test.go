//go:build footprint

package redfish_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfish"
	"github.com/bmcfence/bmcfence/test/controlplane"
)

// TestConnectedStreamFootprint measures what one connected SSE stream
// costs the agent's process: heap, goroutine stacks and goroutines. The
// BMCs are cmd/redfish-mock processes (20 event subscriptions each, a real
// BMC's bound), so only the client side is counted here:
//
//	go build -o /tmp/redfish-mock ./cmd/redfish-mock
//	REDFISH_MOCK=/tmp/redfish-mock go test -tags footprint -run ConnectedStreamFootprint -v ./bmc/redfish/
//
// FOOTPRINT_MOCKS (default 5: 100 streams) sets the number of mocks,
// FOOTPRINT_SETTLE the wait before measuring, FOOTPRINT_GCS the
// collections before it, FOOTPRINT_HEAPPROFILE a file for a heap profile
// of every allocation, FOOTPRINT_STACKS=1 prints every goroutine.
func TestConnectedStreamFootprint(t *testing.T) {
	bin := os.Getenv("REDFISH_MOCK")
	if bin == "" {
		t.Skip("REDFISH_MOCK names a built cmd/redfish-mock")
	}
	// FOOTPRINT_MOCKS=25: 500 streams, where the runtime's per-P cache of
	// dead goroutines' stacks (up to 64 of 8 KiB per P, whatever the
	// number of streams) weighs less on the figure per stream.
	const perMock = 20
	mocks := 5
	if v, err := strconv.Atoi(os.Getenv("FOOTPRINT_MOCKS")); err == nil && v > 0 {
		mocks = v
	}
	if os.Getenv("FOOTPRINT_HEAPPROFILE") != "" {
		runtime.MemProfileRate = 1 // every allocation, for a profile of a few KiB per stream
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mock.yaml")
	if err := os.WriteFile(cfg, []byte("events:\n  maxSSEStreams: -1\n  sseIdleTimeout: -1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var targets []bmc.Target
	for i := range mocks {
		port, err := controlplane.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ca := filepath.Join(dir, fmt.Sprintf("ca%d.pem", i))
		cmd := exec.Command(bin, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--systems", "1", "--write-ca", ca, "--config", cfg, "--log-level", "error")
		cmd.Env = append(os.Environ(), "REDFISH_MOCK_PASSWORD=pw-123456")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		var pem []byte
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if pem, err = os.ReadFile(ca); err == nil && len(pem) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("mock %d wrote no CA", i)
			}
		}
		ep, err := bmc.ParseAddress(fmt.Sprintf("https://127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, bmc.Target{Address: ep, CACertificates: pem, Timeout: 5 * time.Second,
			Credentials: bmc.Credentials{Username: "admin", Password: bmc.Secret("pw-123456")}})
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	var streams []*redfish.Stream
	for _, tg := range targets {
		for range perMock {
			// As the agent's power-events manager: every state change
			// logged (zap's JSON encoder), which takes a deep stack.
			s, err := redfish.NewStream(tg, redfish.StreamOptions{OnState: func(st redfish.StreamState) {
				log.Info("BMC event stream "+string(st.Mode), zap.String("uri", st.URI), zap.String("reason", st.Reason), zap.Int("nodes", 1))
			}})
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, s)
			go func() { _ = s.Run(ctx, func(redfish.PowerEvent) {}) }()
		}
	}
	n := len(streams)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		up := 0
		var modes []string
		for _, s := range streams {
			st := s.State()
			if st.Mode == redfish.StreamConnected {
				up++
			} else if len(modes) < 3 {
				modes = append(modes, string(st.Mode)+": "+st.Reason)
			}
		}
		if up == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d streams connected; others: %s", up, n, strings.Join(modes, "; "))
		}
	}
	// Settled: past the operations client's idle close (15 s), as in the
	// agent between fences.
	settle := 20 * time.Second
	if v, err := time.ParseDuration(os.Getenv("FOOTPRINT_SETTLE")); err == nil {
		settle = v
	}
	time.Sleep(settle)
	gcs := 1
	if v, err := strconv.Atoi(os.Getenv("FOOTPRINT_GCS")); err == nil && v > 0 {
		gcs = v
	}
	for range gcs {
		runtime.GC()
	}
	runtime.ReadMemStats(&after)
	if p := os.Getenv("FOOTPRINT_HEAPPROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	g1 := runtime.NumGoroutine()
	heap := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n) / 1024
	stacks := (float64(after.StackInuse) - float64(before.StackInuse)) / float64(n) / 1024
	fmt.Printf("footprint: one connected stream after %s: heap %.1f KiB, stacks %.1f KiB, goroutines %.2f (%d streams); 1000 BMCs: %.1f MiB\n", settle,
		heap, stacks, float64(g1-g0)/float64(n), n, (heap+stacks)*1000/1024)
	if os.Getenv("FOOTPRINT_STACKS") != "" {
		buf := make([]byte, 1<<22)
		fmt.Printf("%s\n", buf[:runtime.Stack(buf, true)])
	}
	runtime.KeepAlive(streams)
}
