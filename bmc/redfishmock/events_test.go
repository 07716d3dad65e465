package redfishmock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

// sseEvent is one event of an SSE stream as a test reads it.
type sseEvent struct {
	ID      string
	Payload struct {
		ODataType string `json:"@odata.type"`
		ID        string `json:"Id"`
		Context   string `json:"Context"`
		Events    []struct {
			EventType         string   `json:"EventType"`
			EventID           string   `json:"EventId"`
			EventTimestamp    string   `json:"EventTimestamp"`
			MessageID         string   `json:"MessageId"`
			MessageArgs       []string `json:"MessageArgs"`
			Severity          string   `json:"Severity"`
			OriginOfCondition struct {
				ODataID string `json:"@odata.id"`
			} `json:"OriginOfCondition"`
		} `json:"Events"`
	}
}

func (e sseEvent) messageID() string { return e.Payload.Events[0].MessageID }
func (e sseEvent) origin() string    { return e.Payload.Events[0].OriginOfCondition.ODataID }

// stream is an open SSE connection.
type stream struct {
	t      testing.TB
	resp   *http.Response
	events chan sseEvent
	done   chan struct{} // closed when the server ended the stream
}

type streamOpt func(*http.Request)

func lastEventID(id string) streamOpt {
	return func(r *http.Request) { r.Header.Set("Last-Event-ID", id) }
}

func asUser(user, pass string) streamOpt {
	return func(r *http.Request) { r.SetBasicAuth(user, pass) }
}

// openStream GETs path as an SSE stream and parses events in the
// background; the test ends it by closing.
func openStream(t testing.TB, srv *redfishmocktest.Server, path string, opts ...streamOpt) (*stream, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.SetBasicAuth(adminUser, adminPass)
	for _, o := range opts {
		o(req)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		return nil, resp
	}
	s := &stream{t: t, resp: resp, events: make(chan sseEvent, 100), done: make(chan struct{})}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		var data strings.Builder
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if data.Len() > 0 {
					if err := json.Unmarshal([]byte(data.String()), &ev.Payload); err != nil {
						t.Errorf("event data is not JSON: %v: %s", err, data.String())
					}
					s.events <- ev
				}
				ev, data = sseEvent{}, strings.Builder{}
			case strings.HasPrefix(line, "id: "):
				ev.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				data.WriteString(strings.TrimPrefix(line, "data: "))
			}
		}
	}()
	return s, resp
}

func (s *stream) next() sseEvent {
	s.t.Helper()
	select {
	case ev := <-s.events:
		return ev
	case <-s.done:
		s.t.Fatal("the stream ended before the next event")
	case <-time.After(10 * time.Second):
		s.t.Fatal("no event within 10s")
	}
	return sseEvent{}
}

func (s *stream) expectNothing() {
	s.t.Helper()
	select {
	case ev := <-s.events:
		s.t.Fatalf("unexpected event %s %s from %s", ev.ID, ev.messageID(), ev.origin())
	case <-time.After(100 * time.Millisecond):
	}
}

func (s *stream) waitClosed() {
	s.t.Helper()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.t.Fatal("the server did not close the stream")
	}
}

func startEvents(t *testing.T, cfg redfishmock.Config) (*redfishmocktest.Server, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	return redfishmocktest.Start(t, cfg, redfishmock.WithClock(clk)), clk
}

func getJSON(t testing.TB, srv *redfishmocktest.Server, path string, user, pass string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	req.SetBasicAuth(user, pass)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v
}

func send(t testing.TB, srv *redfishmocktest.Server, method, path, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	req.SetBasicAuth(adminUser, adminPass)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func forceOff(t testing.TB, srv *redfishmocktest.Server, id string) {
	t.Helper()
	code, _, body := send(t, srv, http.MethodPost, "/redfish/v1/Systems/"+id+"/Actions/ComputerSystem.Reset", `{"ResetType":"ForceOff"}`)
	if code >= 300 {
		t.Fatalf("ForceOff of %s: %d %s", id, code, body)
	}
}

func subscriptionMembers(t testing.TB, srv *redfishmocktest.Server) []string {
	t.Helper()
	_, doc := getJSON(t, srv, "/redfish/v1/EventService/Subscriptions", adminUser, adminPass)
	var out []string
	for _, m := range doc["Members"].([]any) {
		out = append(out, m.(map[string]any)["@odata.id"].(string))
	}
	return out
}

func TestEventServiceAdvertisesTheSSEURIOfEachProfile(t *testing.T) {
	tests := []struct {
		profile redfishmock.Profile
		sse     string // "" : none advertised
	}{
		{redfishmock.ProfileGeneric, "/redfish/v1/EventService/SSE"},
		{redfishmock.ProfileOpenBMC, "/redfish/v1/EventService/SSE"},
		{redfishmock.ProfileIDRAC9, "/redfish/v1/SSE"},
		{redfishmock.ProfileIDRAC10, "/redfish/v1/SSE"},
		{redfishmock.ProfileXCC, "/redfish/v1/EventService/ServerSentEvent"},
		{redfishmock.ProfileILO5, ""},
		{redfishmock.ProfileILO6, ""},
	}
	paths := []string{"/redfish/v1/EventService/SSE", "/redfish/v1/SSE", "/redfish/v1/EventService/ServerSentEvent"}
	for _, tt := range tests {
		t.Run(string(tt.profile), func(t *testing.T) {
			srv, _ := startEvents(t, redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1), Profile: tt.profile})
			_, root := getJSON(t, srv, "/redfish/v1/", adminUser, adminPass)
			if got := root["EventService"].(map[string]any)["@odata.id"]; got != "/redfish/v1/EventService" {
				t.Fatalf("service root EventService = %v", got)
			}
			_, es := getJSON(t, srv, "/redfish/v1/EventService", adminUser, adminPass)
			got, _ := es["ServerSentEventUri"].(string)
			if got != tt.sse {
				t.Fatalf("ServerSentEventUri = %q, want %q", got, tt.sse)
			}
			for _, p := range paths {
				s, resp := openStream(t, srv, p)
				switch {
				case p == tt.sse && s == nil:
					t.Errorf("GET %s: %d, want a stream", p, resp.StatusCode)
				case p != tt.sse && s != nil:
					t.Errorf("GET %s opened a stream; only %q is this profile's", p, tt.sse)
				case p != tt.sse && resp.StatusCode != http.StatusNotFound:
					t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
				}
			}
		})
	}
}

func TestSSEStreamReportsAForceOffWithTheResourceEventRegistry(t *testing.T) {
	srv, _ := startEvents(t, twoSystems())
	before := subscriptionMembers(t, srv)
	s, _ := openStream(t, srv, "/redfish/v1/EventService/SSE")
	if got := s.resp.Header.Get("Content-Type"); got != "text/event-stream; charset=utf-8" {
		t.Errorf("Content-Type %q", got)
	}
	after := subscriptionMembers(t, srv)
	if len(after) != len(before)+1 {
		t.Fatalf("subscriptions %v → %v: opening a stream creates one EventDestination", before, after)
	}
	_, dest := getJSON(t, srv, after[len(after)-1], adminUser, adminPass)
	if dest["SubscriptionType"] != "SSE" || dest["Context"] == "" {
		t.Errorf("the stream's EventDestination: %v", dest)
	}

	forceOff(t, srv, "2")
	var got []string
	var ids []string
	for i := 0; i < 2; i++ {
		ev := s.next()
		got = append(got, ev.messageID()+" "+ev.origin())
		ids = append(ids, ev.ID)
		if ev.ID != ev.Payload.Events[0].EventID {
			t.Errorf("SSE id %q differs from EventId %q", ev.ID, ev.Payload.Events[0].EventID)
		}
	}
	want := []string{
		"ResourceEvent.1.3.ResourcePoweringOff /redfish/v1/Systems/2",
		"ResourceEvent.1.3.ResourcePoweredOff /redfish/v1/Systems/2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if ids[0] == ids[1] {
		t.Errorf("two events share the id %s", ids[0])
	}

	s.resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(subscriptionMembers(t, srv)) != len(before) {
		if time.Now().After(deadline) {
			t.Fatal("the stream's EventDestination outlived the stream")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestIDRACReportsHostPowerAsDellAlerts(t *testing.T) {
	cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileIDRAC9}
	srv, _ := startEvents(t, cfg)
	s, _ := openStream(t, srv, "/redfish/v1/SSE?$filter=EventFormatType%20eq%20Event")

	code, _, body := send(t, srv, http.MethodPost, "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", `{"ResetType":"ForceRestart"}`)
	if code >= 300 {
		t.Fatalf("ForceRestart: %d %s", code, body)
	}
	ev := s.next()
	e := ev.Payload.Events[0]
	if e.MessageID != "SYS1003" || e.EventType != "Alert" || e.Severity != "Informational" || ev.origin() != "/redfish/v1/Systems/1" {
		t.Errorf("a reset: %+v", e)
	}
	if _, err := time.Parse("2006-01-02T15:04:05-0700", e.EventTimestamp); err != nil {
		t.Errorf("EventTimestamp %q is not iDRAC's +hhmm form: %v", e.EventTimestamp, err)
	}
	if ev := s.next(); ev.messageID() != "SYS1000" {
		t.Errorf("after the reset's off-dwell: %s, want SYS1000 (turning on)", ev.messageID())
	}
	// iDRAC is busy once after an accepted Reset (SYS518); retry.
	for i := 0; i < 3; i++ {
		if code, _, _ = send(t, srv, http.MethodPost, "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", `{"ResetType":"ForceOff"}`); code < 300 {
			break
		}
	}
	if ev := s.next(); ev.messageID() != "SYS1001" {
		t.Errorf("after a ForceOff: %s, want SYS1001 (turning off)", ev.messageID())
	}
	s.expectNothing() // nothing when the off completes
}

func TestIDRACAllowsTwoSSEConnections(t *testing.T) {
	cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileIDRAC9}
	srv, _ := startEvents(t, cfg)
	openStream(t, srv, "/redfish/v1/SSE")
	openStream(t, srv, "/redfish/v1/SSE")
	if s, resp := openStream(t, srv, "/redfish/v1/SSE"); s != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a third SSE connection: %v; want 503", resp.Status)
	}
}

func TestIDRACClosesAStreamIdleForAnHour(t *testing.T) {
	cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileIDRAC9}
	srv, clk := startEvents(t, cfg)
	s, _ := openStream(t, srv, "/redfish/v1/SSE")
	waitWaiters(t, clk)
	clk.Step(59 * time.Minute)
	select {
	case <-s.done:
		t.Fatal("closed before an hour")
	case <-time.After(50 * time.Millisecond):
	}
	clk.Step(time.Minute)
	s.waitClosed()
}

func TestIdleCloseIsConfigurable(t *testing.T) {
	cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileIDRAC9,
		Events: redfishmock.EventsConfig{SSEIdleTimeout: 5 * time.Second}}
	srv, clk := startEvents(t, cfg)
	s, _ := openStream(t, srv, "/redfish/v1/SSE")
	waitWaiters(t, clk)
	clk.Step(5 * time.Second)
	s.waitClosed()
}

func waitWaiters(t testing.TB, clk *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("nothing waits on the clock")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLastEventIDReplaysWhatTheClientMissed(t *testing.T) {
	srv, _ := startEvents(t, redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileOpenBMC})
	s, _ := openStream(t, srv, "/redfish/v1/EventService/SSE")
	forceOff(t, srv, "1")
	first := s.next()
	s.next()
	s.resp.Body.Close()

	// While nobody listens the host comes back.
	code, _, _ := send(t, srv, http.MethodPost, "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", `{"ResetType":"On"}`)
	if code >= 300 {
		t.Fatal(code)
	}
	s2, _ := openStream(t, srv, "/redfish/v1/EventService/SSE", lastEventID(first.ID))
	var got []string
	for i := 0; i < 3; i++ {
		got = append(got, s2.next().messageID())
	}
	want := []string{"ResourceEvent.1.3.ResourcePoweredOff", "ResourceEvent.1.3.ResourcePoweringOn", "ResourceEvent.1.3.ResourcePoweredOn"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replayed after Last-Event-ID %s (-want +got):\n%s", first.ID, diff)
	}

	s3, _ := openStream(t, srv, "/redfish/v1/EventService/SSE", lastEventID("999999"))
	if got := s3.next().messageID(); got != "Base.1.13.EventBufferExceeded" {
		t.Errorf("an unknown Last-Event-ID got %s, want EventBufferExceeded", got)
	}
}

func TestStaleReplayFaultResendsOldEventsWithTheirIDs(t *testing.T) {
	srv, _ := startEvents(t, redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1)})
	s, _ := openStream(t, srv, "/redfish/v1/EventService/SSE")
	forceOff(t, srv, "1")
	a, b := s.next(), s.next()
	if err := srv.Mock.SetEventFaults("1", redfishmock.EventFaults{ReplayStale: 2}); err != nil {
		t.Fatal(err)
	}
	s2, _ := openStream(t, srv, "/redfish/v1/EventService/SSE")
	if x, y := s2.next(), s2.next(); x.ID != a.ID || y.ID != b.ID {
		t.Errorf("replayed ids %s, %s; want the originals %s, %s", x.ID, y.ID, a.ID, b.ID)
	}
}

func TestInjectedEventNamesAnotherSystemOnThisSystemsStream(t *testing.T) {
	cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: []redfishmock.SystemConfig{
		{Username: "bmc1", Password: "p1"}, {Username: "bmc2", Password: "p2"},
	}}
	srv, _ := startEvents(t, cfg)
	s1, _ := openStream(t, srv, "/redfish/v1/EventService/SSE", asUser("bmc1", "p1"))
	s2, _ := openStream(t, srv, "/redfish/v1/EventService/SSE", asUser("bmc2", "p2"))
	code, _, body := send(t, srv, http.MethodPost, "/mock/systems/1/inject-event", `{"origin":"/redfish/v1/Systems/2"}`)
	if code != http.StatusNoContent {
		t.Fatalf("inject-event: %d %s", code, body)
	}
	if ev := s1.next(); ev.origin() != "/redfish/v1/Systems/2" || ev.messageID() != "ResourceEvent.1.3.ResourcePoweredOff" {
		t.Errorf("system 1's BMC sent %s about %s", ev.messageID(), ev.origin())
	}
	s2.expectNothing() // system 2's own BMC heard nothing: it did not happen
	st, _ := srv.Mock.Status("2")
	if st.PowerState != redfishmock.PowerOn {
		t.Errorf("system 2 reads %s; the injected event changed nothing", st.PowerState)
	}
}

func TestAScopedStreamSeesOnlyItsSystem(t *testing.T) {
	cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: []redfishmock.SystemConfig{
		{Username: "bmc1", Password: "p1"}, {Username: "bmc2", Password: "p2"},
	}}
	srv, _ := startEvents(t, cfg)
	s1, _ := openStream(t, srv, "/redfish/v1/EventService/SSE", asUser("bmc1", "p1"))
	forceOff(t, srv, "2")
	s1.expectNothing()
	forceOff(t, srv, "1")
	if ev := s1.next(); ev.origin() != "/redfish/v1/Systems/1" {
		t.Errorf("got an event about %s", ev.origin())
	}
}

func TestDroppedAndDeletedStreamsAreClosedByTheService(t *testing.T) {
	srv, _ := startEvents(t, twoSystems())
	s, _ := openStream(t, srv, "/redfish/v1/EventService/SSE")
	code, _, body := send(t, srv, http.MethodPost, "/mock/systems/1/drop-streams", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"dropped":1`) {
		t.Fatalf("drop-streams: %d %s", code, body)
	}
	s.waitClosed()

	s2, _ := openStream(t, srv, "/redfish/v1/EventService/SSE")
	members := subscriptionMembers(t, srv)
	if code, _, _ := send(t, srv, http.MethodDelete, members[len(members)-1], ""); code != http.StatusNoContent {
		t.Fatalf("DELETE of the stream's EventDestination: %d", code)
	}
	s2.waitClosed()
}

func TestSSERefusesAClientThatDoesNotAcceptAnEventStream(t *testing.T) {
	srv, _ := startEvents(t, twoSystems())
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/redfish/v1/EventService/SSE", nil)
	req.SetBasicAuth(adminUser, adminPass)
	req.Header.Set("Accept", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 400 || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("%d %s; want an error >= 400 in JSON", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// listener collects push deliveries.
type listener struct {
	mu     sync.Mutex
	bodies []map[string]any
	got    chan struct{}
	status int
}

func newListener(t *testing.T) (*listener, *httptest.Server) {
	l := &listener{got: make(chan struct{}, 100), status: http.StatusOK}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v map[string]any
		_ = json.NewDecoder(r.Body).Decode(&v)
		l.mu.Lock()
		l.bodies = append(l.bodies, v)
		st := l.status
		l.mu.Unlock()
		w.WriteHeader(st)
		l.got <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	return l, srv
}

func (l *listener) next(t testing.TB) map[string]any {
	t.Helper()
	select {
	case <-l.got:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery within 10s")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bodies[len(l.bodies)-1]
}

func messageOf(body map[string]any) string {
	return body["Events"].([]any)[0].(map[string]any)["MessageId"].(string)
}

func TestPushSubscriptionDeliversEventsAndHeartbeats(t *testing.T) {
	l, dest := newListener(t)
	cfg := twoSystems()
	cfg.Profile = redfishmock.ProfileILO6 // push only
	srv, clk := startEvents(t, cfg)
	code, hdr, body := send(t, srv, http.MethodPost, "/redfish/v1/EventService/Subscriptions",
		`{"Destination":"`+dest.URL+`/events","Protocol":"Redfish","Context":"node-a","SendHeartbeat":true,"HeartbeatIntervalMinutes":2}`)
	if code != http.StatusCreated || hdr.Get("Location") == "" {
		t.Fatalf("POST subscription: %d %s", code, body)
	}
	forceOff(t, srv, "1")
	if got := l.next(t); messageOf(got) != "ResourceEvent.1.3.ResourcePoweringOff" || got["Context"] != "node-a" {
		t.Errorf("first delivery: %v", got)
	}
	l.next(t) // PoweredOff

	waitWaiters(t, clk)
	clk.Step(2 * time.Minute)
	hb := l.next(t)
	if messageOf(hb) != "HeartbeatEvent.1.0.RedfishServiceFunctional" {
		t.Errorf("after 2 minutes: %s, want a heartbeat", messageOf(hb))
	}
	if origin := hb["Events"].([]any)[0].(map[string]any)["OriginOfCondition"].(map[string]any)["@odata.id"]; origin != hdr.Get("Location") {
		t.Errorf("heartbeat origin %v, want the subscription %s", origin, hdr.Get("Location"))
	}

	// EventDestination: 1 to 65535 minutes.
	if code, _, _ := send(t, srv, http.MethodPatch, hdr.Get("Location"), `{"HeartbeatIntervalMinutes":0}`); code != http.StatusBadRequest {
		t.Errorf("HeartbeatIntervalMinutes 0: %d, want 400", code)
	}
}

func TestAnSSEDestinationTakesNoHeartbeatSettings(t *testing.T) {
	srv, _ := startEvents(t, twoSystems())
	openStream(t, srv, "/redfish/v1/EventService/SSE")
	members := subscriptionMembers(t, srv)
	if code, _, body := send(t, srv, http.MethodPatch, members[0], `{"SendHeartbeat":true}`); code != http.StatusBadRequest {
		t.Errorf("PATCH SendHeartbeat on an SSE destination: %d %s, want 400 (EventDestination: it shall not apply to SSE)", code, body)
	}
}

func TestATransitionThatEndsByItselfIsReportedWhenItEnds(t *testing.T) {
	cfg := twoSystems()
	cfg.Timing = redfishmock.Timing{PowerOff: 3 * time.Second}
	srv, clk := startEvents(t, cfg)
	s, _ := openStream(t, srv, "/redfish/v1/EventService/SSE")
	forceOff(t, srv, "1")
	if ev := s.next(); ev.messageID() != "ResourceEvent.1.3.ResourcePoweringOff" {
		t.Fatalf("first %s", ev.messageID())
	}
	s.expectNothing()
	waitWaiters(t, clk)
	clk.Step(3 * time.Second)
	ev := s.next()
	if ev.messageID() != "ResourceEvent.1.3.ResourcePoweredOff" {
		t.Fatalf("then %s", ev.messageID())
	}
	if got, want := ev.Payload.Events[0].EventTimestamp, t0.Add(3*time.Second).Format(time.RFC3339); got != want {
		t.Errorf("EventTimestamp %s, want %s (when PoweringOff ended)", got, want)
	}
}

func TestNoHeartbeatsFaultSilencesTheHeartbeat(t *testing.T) {
	l, dest := newListener(t)
	cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: []redfishmock.SystemConfig{{Username: "bmc1", Password: "p1"}}}
	srv, clk := startEvents(t, cfg)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/redfish/v1/EventService/Subscriptions",
		strings.NewReader(`{"Destination":"`+dest.URL+`","Protocol":"Redfish","SendHeartbeat":true,"HeartbeatIntervalMinutes":1}`))
	req.SetBasicAuth("bmc1", "p1")
	resp, err := srv.Client().Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("subscribe: %v %v", err, resp)
	}
	resp.Body.Close()
	waitWaiters(t, clk)
	clk.Step(time.Minute)
	l.next(t)
	if err := srv.Mock.SetEventFaults("1", redfishmock.EventFaults{NoHeartbeats: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		waitWaiters(t, clk)
		clk.Step(time.Minute)
	}
	select {
	case <-l.got:
		t.Fatal("a heartbeat arrived with NoHeartbeats set")
	case <-time.After(100 * time.Millisecond):
	}
}

func TestAPushSubscriptionThatCannotBeDeliveredEnds(t *testing.T) {
	l, dest := newListener(t)
	l.status = http.StatusInternalServerError
	cfg := twoSystems()
	cfg.Events = redfishmock.EventsConfig{DeliveryRetryAttempts: 1, DeliveryRetryInterval: time.Second}
	srv, clk := startEvents(t, cfg)
	code, _, _ := send(t, srv, http.MethodPost, "/redfish/v1/EventService/Subscriptions", `{"Destination":"`+dest.URL+`","Protocol":"Redfish"}`)
	if code != http.StatusCreated {
		t.Fatal(code)
	}
	forceOff(t, srv, "1")
	l.next(t)
	waitWaiters(t, clk)
	clk.Step(time.Second)
	l.next(t)
	deadline := time.Now().Add(10 * time.Second)
	for len(subscriptionMembers(t, srv)) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the subscription survived its failed deliveries")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSubscriptionRequestsAreValidated(t *testing.T) {
	srv, _ := startEvents(t, twoSystems())
	for _, body := range []string{
		`{"Destination":"https://192.0.2.1/x","Protocol":"FTP"}`,
		`{"Protocol":"Redfish"}`,
		`{"Destination":"ftp://192.0.2.1/x","Protocol":"Redfish"}`,
		`{"Destination":"https://192.0.2.1/x","Protocol":"Redfish","HeartbeatIntervalMinutes":0}`,
	} {
		if code, _, _ := send(t, srv, http.MethodPost, "/redfish/v1/EventService/Subscriptions", body); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", body, code)
		}
	}
}

// A mock that stands for many BMCs (the scale harness) raises the bound on
// subscriptions; a real BMC's bound stays the default.
func TestSubscriptionBoundIsTheConfiguredOne(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bound int
		want  int
	}{
		{"default: one BMC's bound", 0, redfishmock.DefaultMaxSubscriptions},
		{"raised for a mock of many BMCs", 25, 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := twoSystems()
			cfg.Events.MaxSubscriptions = tc.bound
			srv, _ := startEvents(t, cfg)
			body := `{"Destination":"https://192.0.2.1/x","Protocol":"Redfish"}`
			for i := 0; i < tc.want; i++ {
				if code, _, out := send(t, srv, http.MethodPost, "/redfish/v1/EventService/Subscriptions", body); code != http.StatusCreated {
					t.Fatalf("subscription %d: %d %s", i+1, code, out)
				}
			}
			code, _, out := send(t, srv, http.MethodPost, "/redfish/v1/EventService/Subscriptions", body)
			if code != http.StatusBadRequest || !strings.Contains(string(out), fmt.Sprintf("limit of %d subscriptions", tc.want)) {
				t.Errorf("subscription %d: %d %s, want 400 at the limit of %d", tc.want+1, code, out, tc.want)
			}
		})
	}
}
