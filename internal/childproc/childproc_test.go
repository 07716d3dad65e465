package childproc

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// A child started from a goroutine that locks its thread and then ends (so
// the runtime retires that thread) must outlive that goroutine: Pdeathsig
// follows the spawner's thread, not the caller's.
func TestChildOutlivesTheThreadOfTheGoroutineThatStartedIt(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the runtime retires this thread when the goroutine ends
		started <- Start(cmd)
	}()
	if err := <-started; err != nil {
		t.Fatalf("Start: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	if cmd.SysProcAttr.Pdeathsig != syscall.SIGKILL {
		t.Fatalf("Pdeathsig = %v, want SIGKILL", cmd.SysProcAttr.Pdeathsig)
	}
	// The goroutine has ended and its thread is retired (or about to be);
	// a child tied to that thread is killed at once. Watching for one
	// second is a wall-clock wait on the kernel, not on our code's timers.
	select {
	case err := <-exited:
		exited <- err
		t.Fatalf("the child died with the thread of the goroutine that asked for it: %v", err)
	case <-time.After(time.Second):
	}
}
