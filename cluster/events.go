package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/kube"
)

// eventCorrelation tunes client-go's Event spam filter, a per-node token
// bucket. Its defaults (25 at once, then one per 5 minutes) are sized for
// controllers that emit an Event per retry; one fence emits about ten
// decisions, and a node that stays unverifiable adds a "cannot verify" per
// backoff step, which must not starve the Event that says the node was
// tainted. 100 at once covers several whole fences; one a minute afterwards
// still bounds a runaway loop.
var eventCorrelation = record.CorrelatorOptions{BurstSize: 100, QPS: 1.0 / 60}

// flushKind marks the sentinel Events Flush sends through the pipeline; the
// sink recognises and swallows them.
const flushKind = "bmcfence.dev/FlushMarker"

// events records core/v1 Events through client-go's broadcaster, and can
// flush it: the broadcaster writes asynchronously and offers no way to wait.
type events struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder

	mu      sync.Mutex
	stopped bool
	seq     uint64
	waiters map[string]chan struct{}
}

func newEvents(client kube.Interface, component string) *events {
	ev := &events{waiters: map[string]chan struct{}{}}
	ev.broadcaster = record.NewBroadcaster(record.WithCorrelatorOptions(eventCorrelation))
	ev.broadcaster.StartRecordingToSink(flushSink{
		inner: eventSink{client.CoreV1()},
		ev:    ev,
	})
	ev.recorder = ev.broadcaster.NewRecorder(kube.Scheme, corev1.EventSource{Component: component})
	return ev
}

// eventSink writes Events as client-go's EventSinkImpl does, each in its
// own namespace.
type eventSink struct{ core kube.CoreV1Interface }

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.core.Events(e.Namespace).Create(context.TODO(), e, metav1.CreateOptions{})
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.core.Events(e.Namespace).Update(context.TODO(), e, metav1.UpdateOptions{})
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.core.Events(e.Namespace).Patch(context.TODO(), e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}

// flushSink passes Events to the API server, except flush markers: one
// reaching the sink proves every Event recorded before it was handled
// (written, or given up on), because one goroutine handles them in order.
type flushSink struct {
	inner record.EventSink
	ev    *events
}

func (s flushSink) Create(e *corev1.Event) (*corev1.Event, error) {
	if s.ev.markerArrived(e) {
		return e, nil
	}
	return s.inner.Create(e)
}

func (s flushSink) Update(e *corev1.Event) (*corev1.Event, error) {
	if s.ev.markerArrived(e) {
		return e, nil
	}
	return s.inner.Update(e)
}

func (s flushSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	if s.ev.markerArrived(e) {
		return e, nil
	}
	return s.inner.Patch(e, data)
}

func (ev *events) markerArrived(e *corev1.Event) bool {
	if e.InvolvedObject.Kind != flushKind {
		return false
	}
	ev.mu.Lock()
	ch := ev.waiters[e.InvolvedObject.Name]
	delete(ev.waiters, e.InvolvedObject.Name)
	ev.mu.Unlock()
	if ch != nil {
		close(ch)
	}
	return true
}

// flush waits until every Event recorded so far has been handled.
func (ev *events) flush(ctx context.Context) error {
	ev.mu.Lock()
	if ev.stopped {
		ev.mu.Unlock()
		return errEventsStopped
	}
	ev.seq++
	// A fresh name per marker: the correlator neither aggregates nor
	// rate-limits it with anything else.
	name := "flush-" + strconv.FormatUint(ev.seq, 10)
	done := make(chan struct{})
	ev.waiters[name] = done
	ev.mu.Unlock()
	ev.recorder.Event(&corev1.ObjectReference{Kind: flushKind, Namespace: metav1.NamespaceDefault, Name: name},
		corev1.EventTypeNormal, "Flush", "flush marker (never written)")
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		ev.mu.Lock()
		delete(ev.waiters, name)
		ev.mu.Unlock()
		return fmt.Errorf("flush events: %w", ctx.Err())
	}
}

// Event records ev on the Node: a core/v1 Event (namespace default, like
// every Event about a Node) whose involvedObject is the Node with its UID,
// from source component Options.Component. Delivery is asynchronous; Flush
// waits for it.
func (c *Cluster) Event(node string, ev fence.Event) {
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node}
	if n, err := c.nodeLister.Get(node); err == nil {
		ref.UID = n.UID
	}
	c.ObjectEvent(ref, ev)
}

// ObjectEvent records an Event on an object other than a Node: a
// BareMetalHost whose BMC the inventory cannot use is told on the host,
// where its owner looks.
func (c *Cluster) ObjectEvent(ref *corev1.ObjectReference, ev fence.Event) {
	typ := corev1.EventTypeNormal
	if ev.Warning {
		typ = corev1.EventTypeWarning
	}
	reason := ev.Reason
	if reason == "" {
		reason = "BMCFence"
	}
	c.events.recorder.Event(ref, typ, reason, ev.Message)
}

// Flush waits (bounded by ctx) until every Event recorded so far has been
// written to the API server or given up on.
func (c *Cluster) Flush(ctx context.Context) error { return c.events.flush(ctx) }

// Shutdown flushes pending Events (bounded by ctx) and stops the Event
// broadcaster; Events recorded afterwards are dropped. It is idempotent. The
// informers stop with Start's context.
func (c *Cluster) Shutdown(ctx context.Context) error {
	err := c.events.flush(ctx)
	if errors.Is(err, errEventsStopped) {
		return nil
	}
	c.events.mu.Lock()
	c.events.stopped = true
	c.events.mu.Unlock()
	c.events.broadcaster.Shutdown()
	return err
}

var errEventsStopped = errors.New("events: the recorder is shut down")
