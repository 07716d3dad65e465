package redfish_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfish"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

const (
	adminUser = "admin"
	adminPass = "s3cret-Pa55"
)

// rig is a mock BMC over HTTPS and a stream to it, on one fake clock.
type rig struct {
	t      *testing.T
	srv    *redfishmocktest.Server
	clock  *clocktesting.FakeClock
	stream *redfish.Stream
	events chan redfish.PowerEvent
	cancel context.CancelFunc
	done   chan struct{}
}

func target(t testing.TB, srv *redfishmocktest.Server, user, pass, system string) bmc.Target {
	t.Helper()
	ep, err := bmc.ParseAddress(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return bmc.Target{Address: ep, System: system, CACertificates: srv.CAPEM,
		Credentials: bmc.Credentials{Username: user, Password: bmc.Secret(pass)}, Timeout: 5 * time.Second}
}

func newRig(t *testing.T, cfg redfishmock.Config, user, pass string) *rig {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	if cfg.Username == "" {
		cfg.Username, cfg.Password = adminUser, adminPass
	}
	srv := redfishmocktest.Start(t, cfg, redfishmock.WithClock(clk))
	s, err := redfish.NewStream(target(t, srv, user, pass, ""), redfish.StreamOptions{
		Clock:  clk,
		Jitter: func() float64 { return 0 }, // the shortest wait of each step
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{t: t, srv: srv, clock: clk, stream: s, events: make(chan redfish.PowerEvent, 100), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = s.Run(ctx, func(e redfish.PowerEvent) { r.events <- e })
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// waitMode waits until the stream's state is mode.
func (r *rig) waitMode(mode redfish.StreamMode) redfish.StreamState {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := r.stream.State()
		if st.Mode == mode {
			return st
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("stream is %s (%s), want %s", st.Mode, st.Reason, mode)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (r *rig) next() redfish.PowerEvent {
	r.t.Helper()
	select {
	case e := <-r.events:
		return e
	case <-time.After(10 * time.Second):
		r.t.Fatal("no event within 10s")
	}
	return redfish.PowerEvent{}
}

func (r *rig) nothing() {
	r.t.Helper()
	select {
	case e := <-r.events:
		r.t.Fatalf("unexpected event %+v", e)
	case <-time.After(100 * time.Millisecond):
	}
}

// advance steps the fake clock once the stream waits on it.
func (r *rig) advance(d time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !r.clock.HasWaiters() {
		if time.Now().After(deadline) {
			r.t.Fatal("nothing waits on the clock")
		}
		time.Sleep(time.Millisecond)
	}
	r.clock.Step(d)
}

func TestStreamDeliversPowerEventsNamingTheirSystem(t *testing.T) {
	r := newRig(t, redfishmock.Config{Systems: redfishmock.Systems(2)}, adminUser, adminPass)
	st := r.waitMode(redfish.StreamConnected)
	if st.URI != "/redfish/v1/EventService/SSE" || st.Connects != 1 {
		t.Errorf("state %+v", st)
	}
	if err := r.srv.Mock.Event("2", redfishmock.EventPowerLoss); err != nil {
		t.Fatal(err)
	}
	e := r.next()
	if e.System != "/redfish/v1/Systems/2" || e.Kind != redfish.EventPoweredOff || e.Source != "sse" || e.Replay {
		t.Errorf("event %+v", e)
	}
	if !e.Received.Equal(t0) || !e.ConnectedAt.Equal(t0) || e.BMCTimestamp != t0.Format(time.RFC3339) {
		t.Errorf("times: received %v, connected %v, BMC %q", e.Received, e.ConnectedAt, e.BMCTimestamp)
	}
	if e.EventID == "" || e.EventID != e.StreamID || e.BMC != r.srv.URL {
		t.Errorf("ids %q/%q, BMC %q", e.EventID, e.StreamID, e.BMC)
	}
}

func TestStreamReadsIDRACAlerts(t *testing.T) {
	r := newRig(t, redfishmock.Config{Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileIDRAC9}, adminUser, adminPass)
	if st := r.waitMode(redfish.StreamConnected); st.URI != "/redfish/v1/SSE" {
		t.Errorf("URI %s", st.URI)
	}
	if err := r.srv.Mock.Event("1", redfishmock.EventOSReboot); err != nil {
		t.Fatal(err)
	}
	reset := r.next()
	if reset.MessageID != "SYS1003" || reset.Kind != redfish.EventOther || reset.System != "/redfish/v1/Systems/1" {
		t.Errorf("a reset: %+v (a restart is not an off)", reset)
	}
	if on := r.next(); on.Kind != redfish.EventPoweringOn {
		t.Errorf("then %+v", on)
	}
	if err := r.srv.Mock.Event("1", redfishmock.EventPowerLoss); err != nil {
		t.Fatal(err)
	}
	if off := r.next(); off.MessageID != "SYS1001" || off.Kind != redfish.EventPoweringOff {
		t.Errorf("host power lost: %+v", off)
	}
}

func TestStreamReconnectsAndResumesAfterTheBMCDropsIt(t *testing.T) {
	r := newRig(t, redfishmock.Config{Systems: redfishmock.Systems(1)}, adminUser, adminPass)
	r.waitMode(redfish.StreamConnected)
	_ = r.srv.Mock.Event("1", redfishmock.EventPowerLoss)
	first := r.next()
	if _, err := r.srv.Mock.DropStreams("1"); err != nil {
		t.Fatal(err)
	}
	st := r.waitMode(redfish.StreamPolling)
	if !strings.Contains(st.Reason, "closed the stream") || !st.NextAttempt.Equal(t0.Add(500*time.Millisecond)) {
		t.Errorf("after the drop: %+v", st)
	}
	// Missed while disconnected:
	_ = r.srv.Mock.Event("1", redfishmock.EventPowerRestore)
	r.advance(500 * time.Millisecond)
	if st := r.waitMode(redfish.StreamConnected); st.Connects != 2 {
		t.Errorf("connects %d", st.Connects)
	}
	missed := r.next()
	if missed.Kind != redfish.EventPoweringOn || missed.Replay || missed.EventID == first.EventID {
		t.Errorf("resumed with %+v; want the missed PoweringOn, not a replay", missed)
	}
	if !missed.ConnectedAt.Equal(t0.Add(500 * time.Millisecond)) {
		t.Errorf("ConnectedAt %v: the backlog came on the new connection", missed.ConnectedAt)
	}
}

func TestStreamMarksEventsTheBMCReplays(t *testing.T) {
	r := newRig(t, redfishmock.Config{Systems: redfishmock.Systems(1)}, adminUser, adminPass)
	r.waitMode(redfish.StreamConnected)
	_ = r.srv.Mock.Event("1", redfishmock.EventPowerLoss)
	original := r.next()
	if err := r.srv.Mock.SetEventFaults("1", redfishmock.EventFaults{ReplayStale: 1}); err != nil {
		t.Fatal(err)
	}
	_, _ = r.srv.Mock.DropStreams("1")
	r.waitMode(redfish.StreamPolling)
	r.advance(time.Second)
	r.waitMode(redfish.StreamConnected)
	replayed := r.next()
	if !replayed.Replay || replayed.EventID != original.EventID || replayed.Kind != redfish.EventPoweredOff {
		t.Errorf("replayed %+v; want it marked Replay", replayed)
	}
}

func TestStreamNamesAnotherSystemsEventAsSuch(t *testing.T) {
	cfg := redfishmock.Config{Systems: []redfishmock.SystemConfig{{Username: "bmc1", Password: "p1"}, {Username: "bmc2", Password: "p2"}}}
	r := newRig(t, cfg, "bmc1", "p1")
	r.waitMode(redfish.StreamConnected)
	if err := r.srv.Mock.InjectEvent("1", redfishmock.EventInjection{Origin: "/redfish/v1/Systems/2"}); err != nil {
		t.Fatal(err)
	}
	e := r.next()
	c, err := redfish.New(target(t, r.srv, "bmc1", "p1", ""))
	if err != nil {
		t.Fatal(err)
	}
	mine, err := c.SystemURI(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if e.Kind != redfish.EventPoweredOff || e.System != "/redfish/v1/Systems/2" || mine != "/redfish/v1/Systems/1" {
		t.Errorf("event about %q, this BMC's system %q: the consumer must be able to tell them apart", e.System, mine)
	}
}

func TestStreamFallsBackToPollingOnABMCWithoutSSE(t *testing.T) {
	r := newRig(t, redfishmock.Config{Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileILO6}, adminUser, adminPass)
	st := r.waitMode(redfish.StreamPolling)
	if !strings.Contains(st.Reason, "no SSE") || !st.NextAttempt.Equal(t0.Add(redfish.DefaultStreamRecheck)) {
		t.Errorf("%+v", st)
	}
}

func TestStreamSaysWhyWhenTheCredentialsAreWrong(t *testing.T) {
	r := newRig(t, redfishmock.Config{Systems: redfishmock.Systems(1)}, adminUser, "wrong-Pa55word")
	st := r.waitMode(redfish.StreamPolling)
	if !strings.Contains(st.Reason, "credentials") || strings.Contains(st.Reason, "wrong-Pa55word") {
		t.Errorf("reason %q", st.Reason)
	}
	// Failures back off: 0.5 s, 1 s, 2 s ... (jitter 0: the shortest).
	r.advance(500 * time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for r.stream.State().Failures < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no second attempt")
		}
		time.Sleep(time.Millisecond)
	}
	if st := r.stream.State(); !st.NextAttempt.Equal(t0.Add(1500 * time.Millisecond)) {
		t.Errorf("second wait ends %v, want +1.5s", st.NextAttempt.Sub(t0))
	}
}

func TestStreamWaitsAsDellAsksBeforeReconnectingToIDRAC(t *testing.T) {
	r := newRig(t, redfishmock.Config{Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileIDRAC9}, adminUser, adminPass)
	r.waitMode(redfish.StreamConnected)
	_, _ = r.srv.Mock.DropStreams("1")
	if st := r.waitMode(redfish.StreamPolling); st.NextAttempt.Sub(t0) != 20*time.Second {
		t.Errorf("next attempt in %v; Dell asks for 20 to 30 s", st.NextAttempt.Sub(t0))
	}
}

func TestStreamRefusedByAFullIDRACSaysSo(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	srv := redfishmocktest.Start(t, redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileIDRAC9}, redfishmock.WithClock(clk))
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()
	for i := 0; i < 2; i++ { // two other clients hold iDRAC's two connections
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/redfish/v1/SSE", nil)
		req.SetBasicAuth(adminUser, adminPass)
		resp, err := srv.Client().Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("holder %d: %v %v", i, err, resp)
		}
		wg.Add(1)
		go func() { defer wg.Done(); <-ctx.Done(); resp.Body.Close() }()
	}
	s, err := redfish.NewStream(target(t, srv, adminUser, adminPass, ""), redfish.StreamOptions{Clock: clk, Jitter: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(sctx, func(redfish.PowerEvent) {}) }()
	defer func() { scancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for s.State().Mode != redfish.StreamPolling {
		if time.Now().After(deadline) {
			t.Fatalf("state %+v", s.State())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if st := s.State(); !strings.Contains(st.Reason, "503") || !strings.Contains(st.Reason, "at most 2 SSE connections") {
		t.Errorf("reason %q", st.Reason)
	}
}

func TestPowerSuppliesShowAnOutletsSupplyLosingInput(t *testing.T) {
	cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1),
		PDUs: []redfishmock.PDUConfig{{Outlets: []redfishmock.OutletConfig{{ID: "A1", Feeds: "1/1"}, {ID: "A2", Feeds: "1/2"}}}}}
	srv := redfishmocktest.Start(t, cfg)
	c, err := redfish.New(target(t, srv, adminUser, adminPass, "1"))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := c.PowerSupplies(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Input != bmc.InputNormal || ps[1].Input != bmc.InputNormal {
		t.Fatalf("before: %+v", ps)
	}
	if err := srv.Mock.SetOutlet("1", "A2", redfishmock.PowerOff); err != nil {
		t.Fatal(err)
	}
	ps, err = c.PowerSupplies(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ps[0].Input != bmc.InputNormal || ps[1].Input != bmc.InputLost || ps[1].Raw != "LineInputStatus=NoInput" {
		t.Errorf("after A2 off: %+v", ps)
	}
}

func TestPushSubscriptionDeliversEventsAndHeartbeatsToTheReceiver(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	srv := redfishmocktest.Start(t, redfishmock.Config{Username: adminUser, Password: adminPass, Systems: redfishmock.Systems(1), Profile: redfishmock.ProfileILO6},
		redfishmock.WithClock(clk))
	events := make(chan redfish.PowerEvent, 10)
	recv := redfish.NewPushReceiver(clk, func(e redfish.PowerEvent) { events <- e })
	listener := httptest.NewTLSServer(recv)
	defer listener.Close()
	token := bmc.Secret("tok-3f9a1c2e77d0")
	recv.Expect(token, srv.URL)

	c, err := redfish.New(target(t, srv, adminUser, adminPass, "1"))
	if err != nil {
		t.Fatal(err)
	}
	uri, err := c.Subscribe(context.Background(), redfish.Subscription{Destination: listener.URL + "/events", Context: token, HeartbeatMinutes: 1})
	if err != nil {
		t.Fatal(err)
	}
	next := func() redfish.PowerEvent {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery")
		}
		return redfish.PowerEvent{}
	}
	_ = srv.Mock.Event("1", redfishmock.EventPowerLoss)
	if e := next(); e.Kind != redfish.EventPoweredOff || e.Source != "push" || e.BMC != srv.URL || e.System != "/redfish/v1/Systems/1" {
		t.Errorf("event %+v", e)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	clk.Step(time.Minute)
	if e := next(); e.Kind != redfish.EventHeartbeat {
		t.Errorf("after a minute: %+v", e)
	}
	// A delivery with another context is refused.
	resp, err := listener.Client().Post(listener.URL, "application/json", strings.NewReader(`{"Context":"forged","Events":[{"MessageId":"ResourceEvent.1.3.ResourcePoweredOff"}]}`))
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("forged delivery: %v %v", err, resp)
	}
	if err := c.Unsubscribe(context.Background(), uri); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		t.Errorf("unexpected %+v", e)
	default:
	}
}
