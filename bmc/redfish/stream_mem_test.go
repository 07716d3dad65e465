package redfish_test

// What a stream or a push receiver holds for a BMC. A replay ring
// preallocated for 1024 ids cost an idle Stream about 72 KiB (72 MiB for
// the 1000-node fleet whose whole agent the README sizes at 208 MiB); a
// PushReceiver kept that ring for every BMC it was told to Forget; and ids
// were kept whole, up to maxLine (256 KiB) each. The bounds below are an
// order of magnitude above what the code holds now (about 1 KiB per idle
// stream, nothing per forgotten BMC, 0.3 MiB after 200 ids of 100 KiB),
// and far below what it held before.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfish"
)

func TestIdleStreamAndForgottenPushBMCHoldLittle(t *testing.T) {
	ep, err := bmc.ParseAddress("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	tg := bmc.Target{Address: ep, Credentials: bmc.Credentials{Username: "u", Password: "p-12345678"}, Timeout: time.Second}
	const n = 1000
	keep := make([]*redfish.Stream, 0, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		s, err := redfish.NewStream(tg, redfish.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, s)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	perStream := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n / 1024
	t.Logf("one idle Stream holds %.1f KiB of heap (%d streams)", perStream, len(keep))
	recv := redfish.NewPushReceiver(nil, func(redfish.PowerEvent) {})
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		tok := bmc.Secret("token-" + string(rune('a'+i%26)) + time.Duration(i).String())
		recv.Expect(tok, "https://bmc-"+time.Duration(i).String())
		recv.Forget(tok)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perForgotten := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n / 1024
	runtime.KeepAlive(recv)
	t.Logf("PushReceiver after %d Expect+Forget pairs still holds %.1f KiB per forgotten BMC", n, perForgotten)
	if perStream > 16 {
		t.Errorf("an idle Stream holds %.1f KiB before any event (its 1024-id ring is preallocated)", perStream)
	}
	if perForgotten > 4 {
		t.Errorf("PushReceiver keeps %.1f KiB per BMC it was told to Forget (its seen ring)", perForgotten)
	}
}

// One BMC must not make a Stream hold 1024 × 256 KiB of ids: 200 events
// whose SSE id is 100 KiB leave less than 1 MiB retained (ids longer than
// maxSeenID are remembered by their hash).
func TestStreamBoundsWhatABMCMakesItKeep(t *testing.T) {
	const events, idLen = 200, 100 << 10
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redfish/v1/":
			_, _ = io.WriteString(w, `{"EventService":{"@odata.id":"/redfish/v1/EventService"}}`)
		case "/redfish/v1/EventService":
			_, _ = io.WriteString(w, `{"ServerSentEventUri":"/sse"}`)
		case "/sse":
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; i < events; i++ {
				id := fmt.Sprintf("%06d", i) + strings.Repeat("x", idLen)
				fmt.Fprintf(w, "id: %s\ndata: {\"Events\":[{\"MessageId\":\"Base.1.0.Success\"}]}\n\n", id)
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ep, err := bmc.ParseAddress(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	s, err := redfish.NewStream(bmc.Target{Address: ep, Credentials: bmc.Credentials{Username: "u", Password: "p-12345678"}, Timeout: 5 * time.Second}, redfish.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{}, events)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	go func() { defer close(done); _ = s.Run(ctx, func(redfish.PowerEvent) { got <- struct{}{} }) }()
	for i := 0; i < events; i++ {
		select {
		case <-got:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d events of %d", i, events)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	kept := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / (1 << 20)
	cancel()
	srv.CloseClientConnections()
	<-done
	runtime.KeepAlive(s)
	t.Logf("after %d events with %d-byte ids the stream retains %.1f MiB (1024 such ids: %.0f MiB)", events, idLen, kept, kept*1024/events)
	if kept > 1 {
		t.Errorf("a BMC made one Stream retain %.1f MiB with %d events (ids of %d bytes are kept whole)", kept, events, idLen)
	}
}
