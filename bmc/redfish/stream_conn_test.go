package redfish_test

// What the stream's own connection must keep doing now that it is opened by
// hand (dial, TLS, one GET, the body read in Run's goroutine) instead of by
// net/http's transport: chunked bodies, cancellation without a goroutine,
// the target's Timeout over the handshake and the header, the BMC's words
// in a refusal, the TLS identity checks, session auth, same-origin
// redirects only.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfish"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

// sseDiscovery answers the service root and the EventService the way a
// BMC with an SSE URI of /sse does; it reports whether it answered.
func sseDiscovery(w http.ResponseWriter, r *http.Request) bool {
	switch r.URL.Path {
	case "/redfish/v1/":
		_, _ = io.WriteString(w, `{"@odata.id":"/redfish/v1/","EventService":{"@odata.id":"/redfish/v1/EventService"}}`)
	case "/redfish/v1/EventService":
		_, _ = io.WriteString(w, `{"@odata.id":"/redfish/v1/EventService","ServerSentEventUri":"/sse"}`)
	default:
		return false
	}
	return true
}

func powerOffPayload(eventID string) string {
	return `{"Events":[{"EventId":"` + eventID + `","MessageId":"ResourceEvent.1.0.ResourcePoweredOff","OriginOfCondition":{"@odata.id":"/redfish/v1/Systems/1"}}]}`
}

// runStream runs a stream to tg on a fake clock (backoff waits until the
// test steps it) and returns it with its events and a stop that waits for
// Run to return.
func runStream(t *testing.T, tg bmc.Target) (*redfish.Stream, *clocktesting.FakeClock, chan redfish.PowerEvent, func()) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	s, err := redfish.NewStream(tg, redfish.StreamOptions{Clock: clk, Jitter: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan redfish.PowerEvent, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx, func(e redfish.PowerEvent) { events <- e }) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Errorf("Run did not return within 10s of its context's end")
			}
		})
	}
	t.Cleanup(stop)
	return s, clk, events, stop
}

// waitFor polls cond until it holds or 15 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 15s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitState(t *testing.T, s *redfish.Stream, mode redfish.StreamMode) redfish.StreamState {
	t.Helper()
	var st redfish.StreamState
	deadline := time.Now().Add(15 * time.Second)
	for st = s.State(); st.Mode != mode; st = s.State() {
		if time.Now().After(deadline) {
			t.Fatalf("stream is %s (%s), want %s", st.Mode, st.Reason, mode)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return st
}

func plainTarget(t *testing.T, url string, timeout time.Duration) bmc.Target {
	t.Helper()
	ep, err := bmc.ParseAddress(url)
	if err != nil {
		t.Fatal(err)
	}
	return bmc.Target{Address: ep, Credentials: bmc.Credentials{Username: "u", Password: "p-12345678"}, Timeout: timeout}
}

func tlsTarget(t *testing.T, srv *httptest.Server, ca []byte, timeout time.Duration) bmc.Target {
	t.Helper()
	tg := plainTarget(t, srv.URL, timeout)
	if ca == nil {
		ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	}
	tg.CACertificates = ca
	return tg
}

func TestStreamReadsAChunkedBodyWhoseChunksSplitLinesAndEvents(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sseDiscovery(w, r) {
			return
		}
		if r.URL.Path != "/sse" {
			http.NotFound(w, r)
			return
		}
		nc, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer nc.Close()
		stream := ": keep-alive\n\nid: 1\ndata: " + powerOffPayload("e1") + "\n\nid: 2\ndata: " + powerOffPayload("e2") + "\n\n"
		_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		// Chunks of 7 bytes: every line and every event spans several.
		for len(stream) > 0 {
			n := min(7, len(stream))
			fmt.Fprintf(rw, "%x\r\n%s\r\n", n, stream[:n])
			stream = stream[n:]
			_ = rw.Flush()
		}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	s, _, events, _ := runStream(t, plainTarget(t, srv.URL, 5*time.Second))
	waitState(t, s, redfish.StreamConnected)
	for _, want := range []string{"e1", "e2"} {
		select {
		case e := <-events:
			if e.EventID != want || e.Kind != redfish.EventPoweredOff || e.System != "/redfish/v1/Systems/1" {
				t.Errorf("event %+v, want %s powered off", e, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %s within 10s", want)
		}
	}
}

// ourGoroutines counts the goroutines running the stream and those of
// net/http's client connections (its readLoop and writeLoop).
func ourGoroutines() (stream, transport int, dump string) {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		switch {
		case strings.Contains(g, "redfish.(*Stream).Run"):
			stream++
		case strings.Contains(g, "net/http.(*persistConn)"):
			transport++
		}
	}
	return stream, transport, string(buf)
}

// clientGoroutines counts the goroutines that are not the mock BMC's own
// (its event pump runs from its first stream on).
func clientGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "redfishmock.") {
			n++
		}
	}
	return n
}

func TestAConnectedStreamIsOneGoroutineWithoutHTTPTransport(t *testing.T) {
	srv := redfishmocktest.Start(t, redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1)})
	s, _, _, _ := runStream(t, target(t, srv, adminUser, adminPass, ""))
	waitState(t, s, redfish.StreamConnected)
	// Discovery's kept-alive connection is closed once the stream is
	// open: no net/http connection is left.
	deadline := time.Now().Add(10 * time.Second)
	for {
		stream, transport, dump := ourGoroutines()
		if stream == 1 && transport == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connected stream runs %d Run goroutines and %d net/http connection goroutines; want 1 and 0:\n%s", stream, transport, dump)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAStreamCancelledWhileIdleReturnsPromptlyAndLeavesNoGoroutine(t *testing.T) {
	srv := redfishmocktest.Start(t, redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1)})
	before := clientGoroutines()
	s, _, _, stop := runStream(t, target(t, srv, adminUser, adminPass, ""))
	waitState(t, s, redfish.StreamConnected)
	start := time.Now()
	stop() // fails the test if Run is still running 10 s later
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Run took %s to return after its context ended", took)
	}
	if st := s.State(); st.Mode != redfish.StreamStopped {
		t.Errorf("state after cancel %+v", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for clientGoroutines() > before {
		if time.Now().After(deadline) {
			_, _, dump := ourGoroutines()
			t.Fatalf("%d goroutines before the stream, %d after it was cancelled:\n%s", before, clientGoroutines(), dump)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdingListener serves the first `serve` connections and holds every
// later one open without a byte in answer (a BMC whose TLS stack hangs).
type holdingListener struct {
	net.Listener
	serve int
	mu    sync.Mutex
	n     int
	held  []net.Conn
}

func (l *holdingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		l.n++
		if l.n <= l.serve {
			l.mu.Unlock()
			return c, nil
		}
		l.held = append(l.held, c)
		l.mu.Unlock()
	}
}

func (l *holdingListener) Close() error {
	l.mu.Lock()
	for _, c := range l.held {
		_ = c.Close()
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

func TestOpeningAStreamIsBoundedByTheTargetsTimeout(t *testing.T) {
	const timeout = time.Second
	for _, tc := range []struct {
		name   string
		hold   bool // hold the stream's connection before the TLS handshake
		header bool // answer the handshake and the request, never a header
	}{
		{name: "TLS handshake never answered", hold: true},
		{name: "response header never sent", header: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quit := make(chan struct{})
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if sseDiscovery(w, r) {
					return
				}
				select { // no header, ever
				case <-r.Context().Done():
				case <-quit:
				}
			}))
			if tc.hold {
				// Discovery's connection is served; the stream's is held.
				srv.Listener = &holdingListener{Listener: srv.Listener, serve: 1}
			}
			srv.StartTLS()
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(quit) })
			s, _, _, _ := runStream(t, tlsTarget(t, srv, nil, timeout))
			start := time.Now()
			st := waitState(t, s, redfish.StreamPolling)
			if !strings.Contains(st.Reason, "no answer within 1s") || st.Connects != 0 {
				t.Errorf("state %+v; want a timeout after 1s", st)
			}
			t.Logf("gave up after %s: %s", time.Since(start).Round(time.Millisecond), st.Reason)
		})
	}
}

func TestAStreamRefusedWith503SaysWhatTheBMCSaid(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sseDiscovery(w, r) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"code":"Base.1.8.ServiceTemporarilyUnavailable","message":"The maximum number of SSE connections p-12345678 is reached.","@Message.ExtendedInfo":[{"MessageId":"Base.1.8.ServiceTemporarilyUnavailable","Message":"Retry in 30 seconds."}]}}`)
	}))
	t.Cleanup(srv.Close)
	s, _, _, _ := runStream(t, tlsTarget(t, srv, nil, 5*time.Second))
	st := waitState(t, s, redfish.StreamPolling)
	// What the stream said when net/http's transport carried it.
	want := "redfish events " + srv.URL + ": BMC answered with an error: GET /sse: HTTP 503 Base.1.8.ServiceTemporarilyUnavailable: Retry in 30 seconds.; polling, next attempt in 500ms"
	if st.Reason != want {
		t.Errorf("reason\n %q\nwant\n %q", st.Reason, want)
	}
}

// testPKI is a CA and certificates it signs for 127.0.0.1 or another name.
type testPKI struct {
	caPEM          []byte
	good, misnamed tls.Certificate
	strange        tls.Certificate // self-signed for 127.0.0.1
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test BMC CA"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, ips []net.IP, names []string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) tls.Certificate {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "bmc"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			IPAddresses: ips, DNSNames: names, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
		if parent == nil {
			parent, parentKey = tmpl, k
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &k.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	}
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	return &testPKI{
		caPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		good:     leaf(2, loopback, nil, ca, caKey),
		misnamed: leaf(3, nil, []string{"other-bmc.example"}, ca, caKey),
		strange:  leaf(4, loopback, nil, nil, nil),
	}
}

func TestAStreamToABMCWhoseCertificateFailsItsIdentityIsRefused(t *testing.T) {
	pki := newTestPKI(t)
	for _, tc := range []struct {
		name   string
		second tls.Certificate
		reason string
	}{
		{"signed by another CA", pki.strange, "certificate signed by an unknown authority"},
		{"for another host", pki.misnamed, "certificate is not valid for 127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sseRequests, handshakes atomic.Int32
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if sseDiscovery(w, r) {
					return
				}
				sseRequests.Add(1)
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}))
			// Discovery's connection gets the good certificate, the
			// stream's the bad one. (A listener of our own: httptest's
			// StartTLS would add its own certificate, which a client that
			// sends no SNI, as to an IP address, always gets.)
			// No session tickets: the stream's handshake would otherwise
			// resume discovery's session (their TLS configuration is
			// shared) and see no certificate at all.
			srv.Listener = tls.NewListener(srv.Listener, &tls.Config{SessionTicketsDisabled: true, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				if handshakes.Add(1) == 1 {
					return &pki.good, nil
				}
				return &tc.second, nil
			}})
			srv.Start()
			t.Cleanup(srv.Close)
			tg := plainTarget(t, "https://"+srv.Listener.Addr().String(), 5*time.Second)
			tg.CACertificates = pki.caPEM
			s, _, _, _ := runStream(t, tg)
			st := waitState(t, s, redfish.StreamPolling)
			if !strings.Contains(st.Reason, "BMC certificate not trusted: "+tc.reason) || st.URI != "/sse" || st.Connects != 0 {
				t.Errorf("state %+v; want a TLS refusal: %s", st, tc.reason)
			}
			if n := sseRequests.Load(); n != 0 {
				t.Errorf("the BMC received %d SSE requests (with our credentials) over a connection that failed its identity check", n)
			}
		})
	}
}

// serveSessions answers a BMC's SessionService: a login (POST) gets token
// tok-N and session N, a logout (DELETE) is told to logout. It reports
// whether it answered. The caller holds its lock.
func serveSessions(w http.ResponseWriter, r *http.Request, logins *int, logout func(path string)) bool {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/redfish/v1/SessionService/Sessions":
		*logins++
		w.Header().Set("X-Auth-Token", fmt.Sprintf("tok-%d", *logins))
		w.Header().Set("Location", fmt.Sprintf("/redfish/v1/SessionService/Sessions/%d", *logins))
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"@odata.id":"/redfish/v1/SessionService/Sessions/%d"}`, *logins)
		return true
	case r.Method == http.MethodDelete:
		logout(r.URL.Path)
		return true
	}
	return false
}

func TestAStreamWithSessionAuthSendsTheTokenResumesAndLogsOut(t *testing.T) {
	var (
		mu       sync.Mutex
		logins   int
		logouts  []string
		sse      []http.Header
		sseReady = make(chan chan struct{}, 4)
	)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if serveSessions(w, r, &logins, func(path string) { logouts = append(logouts, path) }) {
			mu.Unlock()
			return
		}
		if r.Header.Get("X-Auth-Token") == "" || r.Header.Get("Authorization") != "" {
			mu.Unlock()
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Unlock()
		if sseDiscovery(w, r) {
			return
		}
		mu.Lock()
		sse = append(sse, r.Header.Clone())
		n := len(sse)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		if n == 1 {
			_, _ = io.WriteString(w, "id: 41\ndata: "+powerOffPayload("41")+"\n\n")
			w.(http.Flusher).Flush()
			end := make(chan struct{})
			sseReady <- end
			select { // the BMC closes the first stream when told
			case <-end:
			case <-r.Context().Done():
			}
			return
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	tg := tlsTarget(t, srv, nil, 5*time.Second)
	tg.Auth = bmc.AuthSession
	s, clk, events, stop := runStream(t, tg)
	select {
	case e := <-events:
		if e.EventID != "41" {
			t.Errorf("event %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	close(<-sseReady)
	waitState(t, s, redfish.StreamPolling)
	waitFor(t, "the fake clock's backoff timer", clk.HasWaiters)
	clk.Step(time.Second)
	waitFor(t, "a second SSE request", func() bool { mu.Lock(); defer mu.Unlock(); return len(sse) == 2 })
	waitState(t, s, redfish.StreamConnected)
	stop()
	waitFor(t, "every session logged out", func() bool { mu.Lock(); defer mu.Unlock(); return len(logouts) == logins })
	mu.Lock()
	defer mu.Unlock()
	for i, h := range sse {
		if h.Get("Accept") != "text/event-stream" || h.Get("OData-Version") != "4.0" || h.Get("Cache-Control") != "no-cache" || !strings.HasPrefix(h.Get("X-Auth-Token"), "tok-") {
			t.Errorf("SSE request %d headers %v", i+1, h)
		}
	}
	if got := sse[0].Get("Last-Event-ID"); got != "" {
		t.Errorf("first request's Last-Event-ID %q", got)
	}
	if got := sse[1].Get("Last-Event-ID"); got != "41" {
		t.Errorf("the reconnect's Last-Event-ID is %q, want 41", got)
	}
	if logins != 4 { // discovery and stream, twice
		t.Errorf("%d logins, logouts %v", logins, logouts)
	}
}

// A stream the BMC refuses after the login (a 503, a 404, the wrong
// Content-Type) logs its session out: each retry would otherwise leave a
// session behind, and BMCs cap them (the fence's own login then fails).
// The review of 93794c6 found the leak: the logout on failure looked at a
// shadowed error.
func TestAStreamRefusedAfterItsLoginLogsOut(t *testing.T) {
	for _, answer := range []int{http.StatusServiceUnavailable, http.StatusNotFound, http.StatusOK} {
		t.Run(http.StatusText(answer), func(t *testing.T) {
			var (
				mu       sync.Mutex
				logins   int
				logouts  int
				attempts int
			)
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				if serveSessions(w, r, &logins, func(string) { logouts++ }) {
					return
				}
				if sseDiscovery(w, r) {
					return
				}
				attempts++
				if answer == http.StatusOK {
					w.Header().Set("Content-Type", "application/json") // not an event stream
				}
				w.WriteHeader(answer)
			}))
			t.Cleanup(srv.Close)
			tg := tlsTarget(t, srv, nil, 5*time.Second)
			tg.Auth = bmc.AuthSession
			_, _, _, stop := runStream(t, tg)
			waitFor(t, "a refused stream", func() bool { mu.Lock(); defer mu.Unlock(); return attempts >= 1 })
			stop()
			waitFor(t, "every session logged out", func() bool { mu.Lock(); defer mu.Unlock(); return logouts == logins })
		})
	}
}

func TestAStreamFollowsOnlyASameOriginRedirect(t *testing.T) {
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the other origin received %s %s (Authorization %t)", r.Method, r.URL, r.Header.Get("Authorization") != "")
	}))
	t.Cleanup(other.Close)
	for _, tc := range []struct {
		name, location string
		hops           int
		connected      bool
		reason         string
	}{
		{name: "same origin", location: "/sse/", hops: 1, connected: true},
		{name: "another origin", location: other.URL + "/sse", hops: 1, reason: "another origin"},
		{name: "a loop", location: "/sse/", hops: 100, reason: "redirected 4 times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hops atomic.Int32
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if sseDiscovery(w, r) {
					return
				}
				if int(hops.Add(1)) <= tc.hops {
					w.Header().Set("Location", tc.location)
					w.WriteHeader(http.StatusTemporaryRedirect)
					return
				}
				if r.URL.Path != "/sse/" || r.Header.Get("Authorization") == "" {
					t.Errorf("redirected to %s, Authorization %q", r.URL, r.Header.Get("Authorization"))
				}
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				_, _ = io.WriteString(w, "id: 1\ndata: "+powerOffPayload("r1")+"\n\n")
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}))
			t.Cleanup(srv.Close)
			s, _, events, _ := runStream(t, tlsTarget(t, srv, nil, 5*time.Second))
			if tc.connected {
				waitState(t, s, redfish.StreamConnected)
				select {
				case e := <-events:
					if e.EventID != "r1" {
						t.Errorf("event %+v", e)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("no event within 10s")
				}
				return
			}
			st := waitState(t, s, redfish.StreamPolling)
			if !strings.Contains(st.Reason, tc.reason) || st.Connects != 0 {
				t.Errorf("state %+v; want %q", st, tc.reason)
			}
		})
	}
}
