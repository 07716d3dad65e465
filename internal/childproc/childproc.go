// Package childproc starts the child processes that tests and test
// harnesses run (etcd, kube-apiserver, snmpd, ...) so that they die with the
// process that started them.
//
// Linux delivers Pdeathsig when the *thread* that forked the child exits,
// not the process. The Go runtime retires a thread whose goroutine ends while
// locked to it, so a child forked from an arbitrary goroutine could be
// killed in mid-test. Start forks every child from one goroutine locked to
// its own OS thread for the life of the process: Pdeathsig then means "when
// this process dies", also on a crash or a SIGKILL of `go test`.
package childproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

var spawner = struct {
	once sync.Once
	reqs chan request
}{reqs: make(chan request)}

type request struct {
	cmd   *exec.Cmd
	reply chan error
}

// Start starts cmd from the spawner thread. It sets Pdeathsig to SIGKILL
// when cmd has no SysProcAttr or leaves Pdeathsig unset; everything else in
// cmd is left as the caller set it.
func Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	spawner.once.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the process
			for r := range spawner.reqs {
				r.reply <- r.cmd.Start()
			}
		}()
	})
	reply := make(chan error, 1)
	spawner.reqs <- request{cmd: cmd, reply: reply}
	return <-reply
}
