package runner

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/bmcfence/bmcfence/fence"
)

// The kubelet port of a suspect node (docs/safety.md, "The kubelet port"):
// a TCP connect to its InternalIP and kubelet port says which class of
// failure the node is in: a reset (the OS runs, only the kubelet is dead),
// an answer (OS and network run, the kubelet does not renew), a timeout
// (off, hung or cut off). Reachability is what a partition fakes: the
// answer only names the class in the engine's Events and decides nothing.

// KubeletProber connects to a node's kubelet port and says what it met.
// It returns within its own bounded timeout.
type KubeletProber interface {
	ProbeKubelet(ctx context.Context, addr string) fence.KubeletPort
}

// Defaults of the kubelet-port probe.
const (
	// DefaultKubeletProbeTimeout bounds one connect.
	DefaultKubeletProbeTimeout = 2 * time.Second
	// DefaultKubeletProbeInterval: a suspect node's port is probed at
	// most once per interval.
	DefaultKubeletProbeInterval = 30 * time.Second
	// kubeletProbeConcurrency bounds the probes in progress at once; a
	// node whose turn finds them all busy keeps its last answer and is
	// probed at a later sync.
	kubeletProbeConcurrency = 4
)

// TCPKubeletProber is the agent's prober: a plain TCP connect, closed at
// once (nothing is sent, no credential is needed).
type TCPKubeletProber struct {
	// Timeout bounds one connect; default DefaultKubeletProbeTimeout.
	Timeout time.Duration
	// ResetWait bounds the wait for a reset once connected (within
	// Timeout); default defaultResetWait.
	ResetWait time.Duration
}

// ProbeKubelet connects to addr: accepted is "answers", refused (a reset),
// or accepted and reset at once, is "reset", no answer within the timeout is "timeout"; any other error
// (no route, an unreachable host) proves nothing and is "unknown".
func (p TCPKubeletProber) ProbeKubelet(ctx context.Context, addr string) fence.KubeletPort {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultKubeletProbeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		wait := p.ResetWait
		if wait <= 0 {
			wait = defaultResetWait
		}
		return afterConnect(ctx, c, wait)
	}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET):
		return fence.KubeletPortReset
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fence.KubeletPortUnknown // we were stopped, not the node
		}
		return fence.KubeletPortTimeout
	default:
		return fence.KubeletPortUnknown
	}
}

// defaultResetWait is how long a probe waits, once connected, for a
// reset: a host that accepts and at once resets (a proxy, the testbed's
// stand-in) answers with a reset too. A kubelet sends nothing before the
// TLS client hello: the read times out, and the port answers.
const defaultResetWait = time.Second

// afterConnect reads briefly from an accepted connection, then closes it:
// a reset now is "reset"; anything else (data, an end, silence) "answers".
func afterConnect(ctx context.Context, c net.Conn, wait time.Duration) fence.KubeletPort {
	defer c.Close()
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetReadDeadline(deadline)
	var b [64]byte
	_, err := c.Read(b[:])
	if errors.Is(err, syscall.ECONNRESET) {
		return fence.KubeletPortReset
	}
	return fence.KubeletPortAnswers
}

// kubeletAnswer is a node's latest probe: what it met, and when (our
// clock).
type kubeletAnswer struct {
	port fence.KubeletPort
	at   time.Time
}

// probeKubelet probes the node's kubelet port when the node is suspect (a
// fence before its taint, or silent for SuspectAfter), at most once per DefaultKubeletProbeInterval,
// with at most kubeletProbeConcurrency probes at once across nodes. It
// holds the node's lock only to read and to store, never during the
// connect: the fleet view reads every record. A node no longer suspect
// forgets its answer, so each episode starts unprobed.
func (r *Runner) probeKubelet(ctx context.Context, rec *record, info NodeInfo) {
	if r.opts.KubeletProbe == nil {
		return
	}
	now := r.opts.Clock.Now()
	rec.mu.Lock()
	// Suspect: a fence before its taint, or a healthy node whose Lease is
	// silent for SuspectAfter (this sync makes it suspect, and may send
	// the ForceOff whose Event names the class).
	suspect := (rec.state.Phase != fence.Healthy && rec.state.Phase.PreTaint()) ||
		(rec.state.Phase == fence.Healthy && fence.SilentFor(info.View, now) >= r.opts.Policy.SuspectAfter)
	if !suspect {
		rec.kubelet = kubeletAnswer{}
	}
	due := suspect && info.KubeletAddr != "" && (rec.kubelet.at.IsZero() || now.Sub(rec.kubelet.at) >= DefaultKubeletProbeInterval)
	rec.mu.Unlock()
	if !due {
		return
	}
	select {
	case r.kubeletSem <- struct{}{}:
	default:
		return
	}
	port := r.opts.KubeletProbe.ProbeKubelet(ctx, info.KubeletAddr)
	<-r.kubeletSem
	rec.mu.Lock()
	rec.kubelet = kubeletAnswer{port: port, at: now}
	rec.mu.Unlock()
	r.log.Debug("kubelet port probed", zap.String("node", info.Name), zap.String("kubeletPort", port.String()))
}
