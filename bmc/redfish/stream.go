package redfish

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/bmc"
)

// OpEvents names the event stream in errors.
const OpEvents bmc.Op = "events"

// StreamMode is whether a BMC's events reach us now.
type StreamMode string

const (
	// StreamConnecting: discovering the stream or opening it.
	StreamConnecting StreamMode = "connecting"
	// StreamConnected: the stream is open; events arrive as they happen.
	StreamConnected StreamMode = "connected"
	// StreamPolling: no stream now (the BMC has none, refused it, closed
	// it, or cannot be reached): what the engine knows comes from polling.
	// Reason says why; NextAttempt when the stream is tried again.
	StreamPolling StreamMode = "polling"
	// StreamStopped: Run returned (the agent lost the lead, or stopped).
	StreamStopped StreamMode = "stopped"
)

// StreamState is a stream's state for `kubectl fence status` and a metric.
type StreamState struct {
	BMC  string     `json:"bmc"`
	Mode StreamMode `json:"mode"`
	// Reason is one line on why the stream is not connected: what failed
	// (redacted), or that the BMC offers none. Empty when connected.
	Reason string `json:"reason,omitempty"`
	// URI is the SSE URI in use or last tried.
	URI string `json:"uri,omitempty"`
	// Since is when Mode last changed, on our clock.
	Since time.Time `json:"since"`
	// Connects counts streams opened; Failures the attempts that failed
	// since the last one that opened.
	Connects int `json:"connects"`
	Failures int `json:"failures"`
	// LastEvent is when the last event arrived, on our clock.
	LastEvent   time.Time `json:"lastEvent,omitempty"`
	NextAttempt time.Time `json:"nextAttempt,omitempty"`
}

// Defaults of StreamOptions, each with its reason.
const (
	// DefaultStreamMinBackoff: a stream the BMC closed is usually back at
	// once; a second is enough not to hammer one that is restarting.
	DefaultStreamMinBackoff = time.Second
	// DefaultStreamMaxBackoff caps the wait between attempts: a minute is
	// the agent's probe interval, so the stream never lags the probe by
	// more than that.
	DefaultStreamMaxBackoff = time.Minute
	// DefaultStreamRecheck: a BMC without SSE is asked again every ten
	// minutes (a firmware update may bring it).
	DefaultStreamRecheck = 10 * time.Minute
	// dellReconnectDelay: Dell's iDRAC9 Redfish API guide asks clients to
	// wait 20 to 30 seconds before opening a new SSE connection after one
	// closed.
	dellReconnectDelay = 20 * time.Second
	// defaultSeenIDs: how many event ids a stream remembers to tell a
	// replay (bmcweb keeps 200 events for Last-Event-ID).
	defaultSeenIDs = 1024
)

// DefaultStreamKeepAlive probes an idle stream's TCP connection: a BMC that
// lost power sends neither FIN nor RST, and an idle stream would wait for
// it forever. Idle 15 s, then a probe every 5 s, 3 unanswered: about 30 s.
var DefaultStreamKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}

// StreamOptions tune a Stream. The zero value is usable.
type StreamOptions struct {
	// Clock times backoff and stamps events (k8s.io/utils/clock; a fake
	// one in tests). Default: the real clock.
	Clock clock.WithTicker
	// MinBackoff and MaxBackoff bound the exponential backoff between
	// attempts; each wait is jittered to [d/2, d).
	MinBackoff, MaxBackoff time.Duration
	// Jitter returns a number in [0, 1); default math/rand/v2.
	Jitter func() float64
	// Recheck is how often a BMC without SSE is asked again.
	Recheck time.Duration
	// KeepAlive configures TCP keep-alive probes on the stream.
	KeepAlive *net.KeepAliveConfig
	// OnState, when set, is called after every state change (for a metric
	// or an Event); it must not block.
	OnState func(StreamState)
}

// Stream holds one SSE connection to one BMC (one per BMC, whatever number
// of systems it serves: iDRAC allows two connections in all), reconnects
// with capped, jittered backoff, resumes with Last-Event-ID, tells replays
// apart, and falls back to polling (saying why) when it cannot stream.
type Stream struct {
	client *Client // discovery, login, error classification
	// dialer, tls (nil for an http:// target) and redirect open the
	// stream's own connection (open).
	dialer   *net.Dialer
	tls      *tls.Config
	redirect func(*http.Request, []*http.Request) error
	opts     StreamOptions
	clock    clock.WithTicker

	mu     sync.Mutex
	state  StreamState
	lastID string // the last SSE id read, for Last-Event-ID
	seen   *idRing
}

// NewStream prepares a stream for a Redfish target; Run opens it.
func NewStream(target bmc.Target, opts StreamOptions) (*Stream, error) {
	c, err := New(target)
	if err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultStreamMinBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(DefaultStreamMaxBackoff, opts.MinBackoff)
	}
	if opts.Jitter == nil {
		opts.Jitter = rand.Float64
	}
	if opts.Recheck <= 0 {
		opts.Recheck = DefaultStreamRecheck
	}
	ka := DefaultStreamKeepAlive
	if opts.KeepAlive != nil {
		ka = *opts.KeepAlive
	}
	t := c.target
	s := &Stream{
		// What errors are classified and named with; the stream's
		// discovery and session use a client of their own per attempt
		// (opsClient), so no transport is held here.
		client: &Client{target: c.target, base: c.base, now: c.now},
		// The stream opens its connection itself (open): net/http's
		// transport would hold it with two goroutines of its own (a
		// readLoop and a writeLoop, two 8 KiB stacks) besides Run's,
		// at one stream per BMC. Its bounds are the transport's: the dial
		// and, together, the handshake and the answer's header within the
		// target's Timeout, keep-alive probes for a BMC that lost power.
		dialer:   &net.Dialer{Timeout: t.Timeout, KeepAliveConfig: ka},
		redirect: sameOrigin(t.Address),
		opts:     opts,
		clock:    opts.Clock,
		seen:     newIDRing(defaultSeenIDs),
	}
	if t.Address.Scheme == "https" {
		cfg, err := tlsConfig(t)
		if err != nil {
			return nil, err
		}
		// What net/http's transport set: the name the certificate must
		// carry is the target's host (an IP address is checked against
		// the certificate's IP addresses).
		cfg.ServerName = strings.TrimSuffix(strings.TrimPrefix(t.Address.Host, "["), "]")
		s.tls = cfg
	}
	s.state = StreamState{BMC: c.base, Mode: StreamStopped, Since: opts.Clock.Now()}
	return s, nil
}

// State returns the stream's state now.
func (s *Stream) State() StreamState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

func (s *Stream) update(f func(*StreamState)) {
	s.mu.Lock()
	before := s.state.Mode
	f(&s.state)
	if s.state.Mode != before {
		s.state.Since = s.clock.Now()
	}
	st := s.state
	s.mu.Unlock()
	if s.opts.OnState != nil {
		// Off the held stack (onFreshStack): the agent's callback logs
		// and tells the runner, which would leave it grown.
		onFreshStack(func() { s.opts.OnState(st) })
	}
}

// errNoSSE: the BMC offers no SSE stream; it is not a failure.
var errNoSSE = errors.New("the BMC offers no SSE stream")

// Run streams events to sink until ctx ends, and returns ctx's error.
// sink is called in arrival order, one call at a time, while Run waits;
// it must not block for long (a slow sink delays the stream, and a BMC drops a slow
// reader).
func (s *Stream) Run(ctx context.Context, sink func(PowerEvent)) error {
	defer s.update(func(st *StreamState) {
		st.Mode, st.Reason, st.NextAttempt = StreamStopped, "stopped", time.Time{}
	})
	failures := 0
	for ctx.Err() == nil {
		s.update(func(st *StreamState) { st.Mode, st.NextAttempt = StreamConnecting, time.Time{} })
		ops, err := s.opsClient()
		var uri string
		var minDelay time.Duration
		if err == nil {
			onFreshStack(func() { uri, minDelay, err = s.discover(ctx, ops) })
		}
		if ctx.Err() != nil {
			break
		}
		var wait time.Duration
		var reason string
		switch {
		case errors.Is(err, errNoSSE):
			failures = 0
			wait = s.opts.Recheck
			reason = err.Error()
		case err != nil:
			failures++
			wait = s.backoff(failures)
			reason = err.Error()
		default:
			opened, err := s.stream(ctx, ops, uri, sink)
			switch {
			case errors.Is(err, errNoSSE):
				failures = 0
				wait = s.opts.Recheck
			default:
				if opened {
					failures = 0
				}
				failures++
				wait = max(s.backoff(failures), minDelay)
			}
			reason = err.Error()
		}
		if ctx.Err() != nil {
			break
		}
		next := s.clock.Now().Add(wait)
		s.update(func(st *StreamState) {
			st.Mode, st.Reason, st.NextAttempt, st.Failures = StreamPolling, reason+"; polling, next attempt in "+wait.Round(time.Millisecond).String(), next, failures
			if uri != "" {
				st.URI = uri
			}
		})
		t := s.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C():
		}
	}
	return ctx.Err()
}

// backoff is the wait before attempt n+1 after n failures in a row:
// MinBackoff doubling up to MaxBackoff, jittered to [d/2, d) so a fleet of
// agents does not reconnect in step.
func (s *Stream) backoff(n int) time.Duration {
	d := s.opts.MinBackoff
	for i := 1; i < n && d < s.opts.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.opts.MaxBackoff)
	return d/2 + time.Duration(s.opts.Jitter()*float64(d/2))
}

// discover finds the SSE URI: the EventService's ServerSentEventUri, else
// the vendor's documented path (iDRAC /redfish/v1/SSE, Lenovo XCC
// /redfish/v1/EventService/ServerSentEvent, OpenBMC
// /redfish/v1/EventService/SSE). minDelay is the vendor's least wait
// before reconnecting.
func (s *Stream) discover(ctx context.Context, ops *Client) (uri string, minDelay time.Duration, err error) {
	var res bmc.Result
	var noSSE error // not a failure: kept out of run's classification
	err = ops.run(ctx, OpEvents, &res, func(cn *conn) error {
		var root struct {
			Vendor       string          `json:"Vendor"`
			Oem          json.RawMessage `json:"Oem"`
			EventService *link           `json:"EventService"`
		}
		if err := cn.get("/redfish/v1/", &root); err != nil {
			return err
		}
		vendorPath := ""
		switch v := root.Vendor + " " + string(root.Oem); {
		case strings.Contains(v, "Dell"):
			vendorPath, minDelay = "/redfish/v1/SSE", dellReconnectDelay
		case strings.Contains(v, "Lenovo"):
			vendorPath = "/redfish/v1/EventService/ServerSentEvent"
		case strings.Contains(v, "OpenBMC"):
			vendorPath = "/redfish/v1/EventService/SSE"
		}
		if root.EventService == nil || root.EventService.ODataID == "" {
			noSSE = fmt.Errorf("%w (its service root links no EventService)", errNoSSE)
			return nil
		}
		var es struct {
			ServiceEnabled *bool  `json:"ServiceEnabled"`
			SSE            string `json:"ServerSentEventUri"`
		}
		if err := cn.get(root.EventService.ODataID, &es); err != nil {
			return err
		}
		if es.ServiceEnabled != nil && !*es.ServiceEnabled {
			noSSE = fmt.Errorf("%w (its EventService is disabled: ServiceEnabled false)", errNoSSE)
			return nil
		}
		uri = onlyPath(es.SSE)
		if uri == "" {
			uri = vendorPath
		}
		if uri == "" {
			noSSE = fmt.Errorf("%w (its EventService has no ServerSentEventUri; HPE iLO documents push subscriptions only)", errNoSSE)
			return nil
		}
		if uri == "/redfish/v1/SSE" {
			minDelay = max(minDelay, dellReconnectDelay)
		}
		return nil
	})
	if err == nil && noSSE != nil {
		return "", 0, noSSE
	}
	return uri, minDelay, err
}

// stream opens one SSE connection and reads it until it ends. opened
// reports whether the BMC accepted it; err says why it ended.
func (s *Stream) stream(ctx context.Context, ops *Client, uri string, sink func(PowerEvent)) (opened bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var body io.Reader
	var nc *streamConn
	var logout func()
	onFreshStack(func() { body, nc, logout, err = s.connect(ctx, ops, uri) })
	if err != nil {
		return false, err
	}
	if logout != nil {
		defer onFreshStack(logout)
	}
	// Closing the connection ends the body too (and unblocks a read);
	// resp.Body.Close would read a chunked body to its end first.
	defer nc.close()
	connectedAt := s.clock.Now()
	s.update(func(st *StreamState) {
		st.Mode, st.Reason, st.URI, st.NextAttempt, st.Failures = StreamConnected, "", uri, time.Time{}, 0
		st.Connects++
	})
	// body reads the connection without the request and the answer: their
	// headers and URLs (1.7 KiB) are not held by a stream that is read.
	err = s.read(body, connectedAt, sink)
	if ctx.Err() != nil {
		return true, ctx.Err()
	}
	if err == nil {
		return true, errors.New("the BMC closed the stream (iDRAC closes a stream idle for an hour)")
	}
	return true, s.client.opError(OpEvents, s.client.classify(ctx, err))
}

// onFreshStack runs f on a goroutine of its own and waits for it. A
// held stream's goroutine spends its life blocked in a read that needs
// about 5 KiB of stack; the TLS handshake, the JSON of discovery and a
// session's login and logout need several times that, and a goroutine's
// stack, once grown, shrinks only to four times what it uses when the
// collector looks. Run on the stream's own goroutine they left every
// held stream a 16 KiB stack (15.2 KiB a stream in
// TestConnectedStreamFootprint); run here, they leave it the size a new
// goroutine starts with.
func onFreshStack(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// connect opens the stream at uri: the session's login (logout, when not
// nil, ends it), the GET on a connection of its own, and its answer's
// header checked. body then reads the events; closing nc ends it.
func (s *Stream) connect(ctx context.Context, ops *Client, uri string) (body io.Reader, nc *streamConn, logout func(), err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.client.base+uri, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("OData-Version", "4.0")
	req.Header.Set("Cache-Control", "no-cache")
	s.mu.Lock()
	last := s.lastID
	s.mu.Unlock()
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	t := s.client.target
	if t.Auth == bmc.AuthSession {
		lctx, lcancel := context.WithTimeout(ctx, t.Timeout)
		cn := &conn{c: ops, ctx: lctx}
		lerr := cn.login()
		lcancel()
		if lerr != nil {
			return nil, nil, nil, s.client.opError(OpEvents, s.client.classify(ctx, lerr))
		}
		cn.ctx = ctx
		logout = cn.logout
		defer func() {
			// err is the named result: any failure from here on logs
			// out (logout itself is nil by then).
			if err != nil {
				cn.logout()
			}
		}()
		req.Header.Set("X-Auth-Token", cn.token)
	} else {
		req.SetBasicAuth(t.Credentials.Username, t.Credentials.Password.Reveal())
	}
	// Discovery's (and the login's) kept-alive connection is not needed
	// any more: closed now, not after idleConnTimeout, its two goroutines
	// end with it. A session's logout opens one again (resuming the TLS
	// session).
	ops.CloseIdleConnections()
	resp, rbody, rnc, err := s.open(ctx, req)
	if err != nil {
		return nil, nil, nil, s.client.opError(OpEvents, s.client.classify(ctx, err))
	}
	defer func() {
		if err != nil {
			rnc.close()
		}
	}()
	if resp.StatusCode != http.StatusOK {
		body := make([]byte, 64<<10)
		n, _ := bufio.NewReader(resp.Body).Read(body)
		herr := newHTTPError(http.MethodGet, uri, &response{status: resp.StatusCode, header: resp.Header, body: body[:n]}, t.Credentials)
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
			return nil, nil, nil, fmt.Errorf("%w (GET %s answered %d)", errNoSSE, uri, resp.StatusCode)
		}
		return nil, nil, nil, s.client.opError(OpEvents, s.client.classifyHTTP(herr))
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(strings.ToLower(ct), "text/event-stream") {
		return nil, nil, nil, s.client.opError(OpEvents, fmt.Errorf("%w: GET %s answered Content-Type %q, not text/event-stream", bmc.ErrBMC, uri, truncateText(ct, 60)))
	}
	// Open: no deadline from here on (an idle stream is silent for as
	// long as nothing happens; TCP keep-alive finds a dead BMC).
	if err := rnc.SetDeadline(time.Time{}); err != nil {
		return nil, nil, nil, s.client.opError(OpEvents, s.client.classify(ctx, err))
	}
	return rbody, rnc, logout, nil
}

// streamConn is an open stream's connection, closed when its context ends.
type streamConn struct {
	net.Conn
	stop func() bool // unregisters the close on the context's end
}

func (c *streamConn) close() {
	c.stop()
	_ = c.Conn.Close()
}

// open sends the stream's GET on a connection of its own and reads the
// answer's header; the body is then read from the returned response in
// the caller's goroutine: no goroutine of its own holds the connection,
// and the context's end closes it (context.AfterFunc). The dial, and the
// TLS handshake with the request and the answer's header together, are
// each bounded by the target's Timeout (the caller clears the deadline
// once the stream is accepted). A GET is followed through a redirect as
// the operations client follows one (sameOrigin: to the target's own
// origin only, at most maxRedirects times). Errors read as net/http's
// client reported them, for the same reasons in the stream's state.
func (s *Stream) open(ctx context.Context, req *http.Request) (*http.Response, io.Reader, *streamConn, error) {
	var via []*http.Request
	for {
		resp, body, nc, err := s.roundTrip(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, nil, nil, &url.Error{Op: "Get", URL: req.URL.String(), Err: err}
		}
		loc := resp.Header.Get("Location")
		switch resp.StatusCode {
		case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		default:
			return resp, body, nc, nil
		}
		if loc == "" {
			return resp, body, nc, nil // net/http returns such an answer as it is
		}
		nc.close()
		u, err := req.URL.Parse(loc)
		if err != nil {
			return nil, nil, nil, &url.Error{Op: "Get", URL: req.URL.String(), Err: fmt.Errorf("failed to parse Location header %q: %v", loc, err)}
		}
		next := req.Clone(ctx)
		next.URL, next.Host, next.Response = u, "", resp
		next.Header.Set("Referer", req.URL.String())
		via = append(via, req)
		if err := s.redirect(next, via); err != nil {
			return nil, nil, nil, &url.Error{Op: "Get", URL: loc, Err: err}
		}
		req = next
	}
}

// roundTrip is one request on a new connection: dial (the dialer's
// Timeout), then the handshake, the request and the answer's header
// within the target's Timeout.
func (s *Stream) roundTrip(ctx context.Context, req *http.Request) (*http.Response, io.Reader, *streamConn, error) {
	raw, err := s.dialer.DialContext(ctx, "tcp", s.client.target.Address.HostPort())
	if err != nil {
		return nil, nil, nil, err
	}
	if err := raw.SetDeadline(time.Now().Add(s.client.target.Timeout)); err != nil {
		_ = raw.Close()
		return nil, nil, nil, err
	}
	nc := &streamConn{Conn: raw}
	if s.tls != nil {
		nc.Conn = tls.Client(raw, s.tls)
	}
	nc.stop = context.AfterFunc(ctx, func() { _ = nc.Conn.Close() })
	if tc, ok := nc.Conn.(*tls.Conn); ok {
		// Handshake, not HandshakeContext: the latter watches the context
		// from a goroutine of its own; the AfterFunc above closes the
		// connection instead.
		if err := tc.Handshake(); err != nil {
			nc.close()
			return nil, nil, nil, err
		}
	}
	// The request goes out in one write (one TLS record), from a buffer
	// dropped once sent.
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		nc.close()
		return nil, nil, nil, err
	}
	if _, err := nc.Write(buf.Bytes()); err != nil {
		nc.close()
		return nil, nil, nil, err
	}
	br := bufio.NewReaderSize(nc.Conn, streamReadBuffer)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		nc.close()
		return nil, nil, nil, err
	}
	// The body as resp.Body reads it, without resp.Body's hold on the
	// answer (for its trailers) and thus on the request.
	var body io.Reader = br
	switch {
	case len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked":
		body = httputil.NewChunkedReader(br)
	case resp.ContentLength >= 0:
		body = io.LimitReader(br, resp.ContentLength)
	}
	return resp, body, nc, nil
}

// maxLine bounds one SSE line: an event payload is a few kilobytes.
const maxLine = maxEventBytes

// A held stream's buffers. streamReadBuffer is the one reader over the
// connection: the answer's header and a chunked body's size lines go
// through it, while the scanner's reads, as large as its buffer, bypass it
// when it is empty. streamScanBuffer holds one SSE line and grows to the
// longest read, up to maxLine. (A connected stream measured 34.5 KiB of
// heap with net/http's default buffers, 26 KiB with these sizes on
// net/http's transport, and less since the stream opens its connection
// itself: TestConnectedStreamFootprint, build tag footprint, prints it.)
// The request is written in one piece and needs no buffer of its own.
const (
	streamReadBuffer = 512
	streamScanBuffer = 1024
)

// read parses the SSE stream (WHATWG "server-sent events": fields id,
// data, event, retry; ":" starts a comment; a blank line ends an event)
// and hands each payload's events to sink. It returns nil at a clean end.
func (s *Stream) read(body interface{ Read([]byte) (int, error) }, connectedAt time.Time, sink func(PowerEvent)) error {
	sc := bufio.NewScanner(body)
	// Small to start (heartbeats and keep-alive comments are short): it
	// grows to the longest line read, up to maxLine.
	sc.Buffer(make([]byte, streamScanBuffer), maxLine)
	var id string
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if data.Len() > 0 {
				// Parsing and the sink run off the held stack too
				// (onFreshStack): a heartbeat a minute would otherwise
				// leave it grown.
				onFreshStack(func() { s.dispatch(id, data.Bytes(), connectedAt, sink) })
			}
			id = ""
			data.Reset()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment (a keep-alive)
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			if !strings.ContainsRune(value, 0) {
				id = value
			}
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		case "event", "retry":
			// The event name is always Redfish's; retry is ours to choose.
		}
	}
	return sc.Err()
}

// dispatch delivers one SSE event's payload.
func (s *Stream) dispatch(id string, data []byte, connectedAt time.Time, sink func(PowerEvent)) {
	now := s.clock.Now()
	evs, err := ParseEvents(data)
	if err != nil {
		// Not an Event (a MetricReport, garbage): nothing to act on, but
		// the stream is alive.
		evs = []PowerEvent{{Kind: EventOther, MessageID: ""}}
	}
	s.mu.Lock()
	if id != "" {
		s.lastID = id
	}
	for i := range evs {
		e := &evs[i]
		e.BMC, e.StreamID, e.Received, e.ConnectedAt, e.Source = s.client.base, id, now, connectedAt, "sse"
		if e.EventID == "" && len(evs) == 1 {
			e.EventID = id
		}
		if e.Kind != EventHeartbeat && e.EventID != "" {
			e.Replay = !s.seen.add(e.EventID)
		}
	}
	s.state.LastEvent = now
	s.mu.Unlock()
	for _, e := range evs {
		sink(e)
	}
}

// maxSeenID bounds what the ring keeps of one id: Redfish event ids are
// short (bmcweb counts, iDRAC numbers them); a longer one is kept as its
// SHA-256, so a BMC sending huge ids cannot make a stream hold
// defaultSeenIDs times maxLine.
const maxSeenID = 128

// idRing remembers the last n ids (each at most maxSeenID bytes). It grows
// as ids arrive: an idle stream, or a BMC that sends no ids, holds none.
type idRing struct {
	n    int
	ids  []string
	next int
	set  map[string]struct{}
}

func newIDRing(n int) *idRing { return &idRing{n: n} }

// seenKey is what the ring keeps of id.
func seenKey(id string) string {
	if len(id) <= maxSeenID {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// add records id; false when it was already there.
func (r *idRing) add(id string) bool {
	id = seenKey(id)
	if _, ok := r.set[id]; ok {
		return false
	}
	if r.set == nil {
		r.set = make(map[string]struct{})
	}
	if len(r.ids) < r.n {
		r.ids = append(r.ids, id)
	} else {
		delete(r.set, r.ids[r.next])
		r.ids[r.next] = id
		r.next = (r.next + 1) % r.n
	}
	r.set[id] = struct{}{}
	return true
}

// opsClient is a client for one attempt's discovery and session, dropped
// after it: a Stream that held an operations client held its transport's
// bookkeeping and a TLS configuration of its own for good (about 5 KiB per
// BMC in the footprint's heap profile). It shares the stream's TLS
// configuration, and with it the session cache: each handshake resumes
// the session of the other's.
func (s *Stream) opsClient() (*Client, error) {
	c, err := New(s.client.target)
	if err != nil {
		return nil, err
	}
	if tr, ok := c.hc.Transport.(*http.Transport); ok && s.tls != nil {
		tr.TLSClientConfig = s.tls
	}
	return c, nil
}

// SystemURI resolves the target's system and returns its URI
// ("/redfish/v1/Systems/1"): what a PowerEvent's System must equal for the
// event to be about this node's machine.
func (c *Client) SystemURI(ctx context.Context) (string, error) {
	var uri string
	var res bmc.Result
	err := c.run(ctx, bmc.OpIdentity, &res, func(cn *conn) error {
		_, u, err := cn.system()
		uri = strings.TrimRight(onlyPath(u), "/")
		return err
	})
	return uri, err
}
