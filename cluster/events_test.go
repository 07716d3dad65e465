package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/bmcfence/bmcfence/fence"
)

// flush waits for the Event pipeline, bounded so a bug fails instead of
// hanging.
func flush(t *testing.T, c *Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// createdEvents returns the Events the fake clientset was asked to create.
func createdEvents(actions []clienttesting.Action) []*corev1.Event {
	var out []*corev1.Event
	for _, a := range actions {
		if a.GetVerb() != "create" || a.GetResource().Resource != "events" {
			continue
		}
		out = append(out, a.(clienttesting.CreateAction).GetObject().(*corev1.Event))
	}
	return out
}

// reasons lists created Events as "Type/Reason".
func reasons(actions []clienttesting.Action) []string {
	var out []string
	for _, e := range createdEvents(actions) {
		out = append(out, e.Type+"/"+e.Reason)
	}
	return out
}

func TestEventsOnTheNode(t *testing.T) {
	h := newHarness(t)
	h.deliver(node("w1"))
	h.c.Event("w1", fence.Event{Warning: true, Reason: "FenceCannotVerify", Message: "BMC unreachable: dial tcp: i/o timeout"})
	h.c.Event("w1", fence.Event{Reason: "FenceTainted", Message: "applied node.kubernetes.io/out-of-service"})
	h.c.Event("ghost", fence.Event{Reason: "FenceTainted", Message: "a node not in the cache yet"})
	flush(t, h.c)

	type ev struct {
		Namespace, Type, Reason, Message string
		Object                           corev1.ObjectReference
		Source                           corev1.EventSource
	}
	var got []ev
	for _, e := range createdEvents(h.client.Actions()) {
		got = append(got, ev{e.Namespace, e.Type, e.Reason, e.Message, e.InvolvedObject, e.Source})
	}
	node := corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "w1", UID: "uid-w1"}
	src := corev1.EventSource{Component: "bmcfence"}
	want := []ev{
		{"default", corev1.EventTypeWarning, "FenceCannotVerify", "BMC unreachable: dial tcp: i/o timeout", node, src},
		{"default", corev1.EventTypeNormal, "FenceTainted", "applied node.kubernetes.io/out-of-service", node, src},
		{"default", corev1.EventTypeNormal, "FenceTainted", "a node not in the cache yet", corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "ghost"}, src},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
}

func TestShutdownFlushesAndIsIdempotent(t *testing.T) {
	h := newHarness(t)
	h.deliver(node("w1"))
	h.c.Event("w1", fence.Event{Reason: "FenceTainted", Message: "last words"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"Normal/FenceTainted"}, reasons(h.client.Actions())); diff != "" {
		t.Errorf("Events written by Shutdown (-want +got):\n%s", diff)
	}
	if err := h.c.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := h.c.Flush(ctx); !errors.Is(err, errEventsStopped) {
		t.Errorf("Flush after Shutdown = %v, want errEventsStopped at once", err)
	}
}

func TestFlushIsBoundedByItsContext(t *testing.T) {
	h := newHarness(t)
	// An API server that never answers.
	release := make(chan struct{})
	h.client.PrependReactor("create", "events", func(clienttesting.Action) (bool, runtime.Object, error) {
		<-release
		return false, nil, nil
	})
	defer close(release)
	h.c.Event("w1", fence.Event{Reason: "FenceTainted", Message: "stuck"})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.c.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Flush behind a stuck write = %v, want DeadlineExceeded", err)
	}
}
