package watchdog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// fakeDevice is a regular file standing in for /dev/watchdog: every write
// lands in it, so the test reads back the pets and the magic close; the two
// ioctls are answered from fields.
type fakeDevice struct {
	*os.File
	identity string
	took     int // the timeout the "driver" takes; 0: as asked
	asked    int
}

func (d *fakeDevice) Identity() (string, error) { return d.identity + "\x00\x00", nil }
func (d *fakeDevice) SetTimeout(s int) (int, error) {
	d.asked = s
	if d.took != 0 {
		return d.took, nil
	}
	return s, nil
}

// recorder opens only through OpenDevice's own os.OpenFile, on a fake
// device file, and records every path asked for.
type recorder struct {
	mu     sync.Mutex
	opened []string
	dev    *fakeDevice
	ident  string
	took   int
}

func (r *recorder) open(path string) (Device, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.opened = append(r.opened, path)
	f, err := os.OpenFile(path, os.O_WRONLY, 0) // what OpenDevice does
	if err != nil {
		return nil, err
	}
	r.dev = &fakeDevice{File: f, identity: r.ident, took: r.took}
	return r.dev, nil
}

func fakeDeviceFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "watchdog")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestPetterPetsBelowTheTimeoutAndDisarmsWithTheMagicClose(t *testing.T) {
	path := fakeDeviceFile(t)
	rec := &recorder{ident: IPMIIdentity}
	clk := clocktesting.NewFakeClock(t0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := Config{Device: path, Timeout: 30 * time.Second, Interval: 10 * time.Second, Identity: IPMIIdentity}
	go func() { done <- Run(ctx, cfg, rec.open, clk, t.Logf) }()
	// Armed: a first pet at once, then one per interval.
	waitFor(t, func() bool { return written(t, path) == pet && clk.HasWaiters() })
	for i := 2; i <= 4; i++ {
		clk.Step(10 * time.Second)
		waitFor(t, func() bool { return written(t, path) == strings.Repeat(pet, i) })
	}
	// Just short of the next interval: no pet.
	clk.Step(10*time.Second - time.Nanosecond)
	if got := written(t, path); got != strings.Repeat(pet, 4) {
		t.Fatalf("petted early: %q", got)
	}
	cancel() // SIGTERM
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := written(t, path); got != strings.Repeat(pet, 4)+magicClose {
		t.Errorf("device got %q; want 4 pets, then the magic close 'V' last", got)
	}
	if rec.dev.asked != 30 {
		t.Errorf("asked the driver for a %ds timeout, want 30", rec.dev.asked)
	}
	if len(rec.opened) != 1 || rec.opened[0] != path {
		t.Errorf("opened %v; want only the device %s", rec.opened, path)
	}
}

func TestPetterRefusesWhatWouldNotBeEvidence(t *testing.T) {
	tests := []struct {
		name  string
		cfg   func(path string) Config
		ident string
		took  int
		want  error
		// The device after: nothing armed, or armed then disarmed.
		wantWritten string
	}{
		{name: "a kernel-only watchdog (softdog) is invisible to the BMC", ident: "Software Watchdog",
			cfg: func(p string) Config {
				return Config{Device: p, Timeout: 30 * time.Second, Interval: 10 * time.Second, Identity: IPMIIdentity}
			},
			want: ErrDevice},
		{name: "an interval as long as the timeout would let it expire", ident: IPMIIdentity,
			cfg:  func(p string) Config { return Config{Device: p, Timeout: 30 * time.Second, Interval: 30 * time.Second} },
			want: ErrConfig},
		{name: "a timeout in fractions of a second", ident: IPMIIdentity,
			cfg: func(p string) Config {
				return Config{Device: p, Timeout: 1500 * time.Millisecond, Interval: time.Second}
			},
			want: ErrConfig},
		{name: "a driver that takes a timeout at or under the interval is disarmed again", ident: IPMIIdentity, took: 10,
			cfg: func(p string) Config {
				return Config{Device: p, Timeout: 30 * time.Second, Interval: 10 * time.Second, Identity: IPMIIdentity}
			},
			want: ErrDevice, wantWritten: magicClose},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := fakeDeviceFile(t)
			rec := &recorder{ident: tt.ident, took: tt.took}
			err := Run(context.Background(), tt.cfg(path), rec.open, clocktesting.NewFakeClock(t0), t.Logf)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Run: %v, want %v", err, tt.want)
			}
			t.Logf("%v", err)
			if got := written(t, path); got != tt.wantWritten {
				t.Errorf("device got %q, want %q", got, tt.wantWritten)
			}
		})
	}
}

// A pet that fails ends the petter without the magic close: the watchdog
// stays armed and expires, as it must when nothing can pet it.
func TestPetterThatCannotPetLeavesTheWatchdogArmed(t *testing.T) {
	path := fakeDeviceFile(t)
	rec := &recorder{ident: IPMIIdentity}
	clk := clocktesting.NewFakeClock(t0)
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{Device: path, Timeout: 30 * time.Second, Interval: 10 * time.Second}, rec.open, clk, t.Logf)
	}()
	waitFor(t, func() bool { return written(t, path) == pet && clk.HasWaiters() })
	rec.mu.Lock()
	_ = rec.dev.File.Close() // the device goes away under it
	rec.mu.Unlock()
	clk.Step(10 * time.Second)
	if err := <-done; !errors.Is(err, ErrPetting) {
		t.Fatalf("Run: %v, want ErrPetting", err)
	}
	if got := written(t, path); got != pet {
		t.Errorf("device got %q; want the one pet and no magic close", got)
	}
}

func written(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFor waits for the petter's goroutine (no sleeping in the test's own
// logic: the fake clock drives time; this only yields to the goroutine).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(time.Millisecond)
	}
}
