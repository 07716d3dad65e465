package redfish

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
)

func TestParseEventsReadsEachVendorsShape(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		want    []PowerEvent
	}{
		{
			name: "DMTF ResourceEvent with a link object",
			payload: `{"@odata.type":"#Event.v1_7_0.Event","Id":"7","Events":[{"EventId":"7","EventTimestamp":"2026-01-02T03:04:05Z",
				"MessageId":"ResourceEvent.1.3.ResourcePoweredOff","OriginOfCondition":{"@odata.id":"/redfish/v1/Systems/1/"}}]}`,
			want: []PowerEvent{{System: "/redfish/v1/Systems/1", Kind: EventPoweredOff, MessageID: "ResourceEvent.1.3.ResourcePoweredOff", EventID: "7", BMCTimestamp: "2026-01-02T03:04:05Z"}},
		},
		{
			name: "iDRAC 5.00 alert: bare MessageId, +hhmm offset (captured from a PowerEdge R640)",
			payload: `{"@odata.context":"/redfish/v1/$metadata#Event.Event","@odata.type":"#Event.v1_3_0.Event","Events":[{"EventId":"2162",
				"EventTimestamp":"2021-09-14T02:28:55+0300","EventType":"Alert","MessageId":"SYS1001","OriginOfCondition":{"@odata.id":"/redfish/v1/Systems/System.Embedded.1"},"Severity":"Informational"}],"Id":"x","Name":"Event Array"}`,
			want: []PowerEvent{{System: "/redfish/v1/Systems/System.Embedded.1", Kind: EventPoweringOff, MessageID: "SYS1001", EventID: "2162", BMCTimestamp: "2021-09-14T02:28:55+0300"}},
		},
		{
			name:    "iDRAC alert without OriginOfCondition (as iDRAC sends PWR1004)",
			payload: `{"Events":[{"EventId":2274,"MessageId":"IDRAC.2.8.SYS1000"}]}`,
			want:    []PowerEvent{{Kind: EventPoweringOn, MessageID: "IDRAC.2.8.SYS1000", EventID: "2274"}},
		},
		{
			name:    "an origin as a bare absolute URI with a fragment (iLO, OpenManage)",
			payload: `{"Events":[{"MessageId":"ResourceEvent.1.0.ResourcePoweringOff","OriginOfCondition":"https://10.0.0.5/redfish/v1/Systems/1#/Foo"}]}`,
			want:    []PowerEvent{{System: "/redfish/v1/Systems/1", Kind: EventPoweringOff, MessageID: "ResourceEvent.1.0.ResourcePoweringOff"}},
		},
		{
			name:    "heartbeat and buffer loss",
			payload: `{"Events":[{"MessageId":"HeartbeatEvent.1.0.RedfishServiceFunctional"},{"MessageId":"Base.1.13.EventBufferExceeded"}]}`,
			want:    []PowerEvent{{Kind: EventHeartbeat, MessageID: "HeartbeatEvent.1.0.RedfishServiceFunctional"}, {Kind: EventGap, MessageID: "Base.1.13.EventBufferExceeded"}},
		},
		{
			name:    "another vendor's SYS1001 is not Dell's",
			payload: `{"Events":[{"MessageId":"Acme.1.0.SYS1001"},{"MessageId":"Acme.1.0.ResourcePoweredOff"},{"MessageId":"Garbage"}]}`,
			want:    []PowerEvent{{Kind: EventOther, MessageID: "Acme.1.0.SYS1001"}, {Kind: EventOther, MessageID: "Acme.1.0.ResourcePoweredOff"}, {Kind: EventOther, MessageID: "Garbage"}},
		},
		{
			name:    "an odd record is kept as other, not dropped",
			payload: `{"Events":[42]}`,
			want:    []PowerEvent{{Kind: EventOther}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEvents([]byte(tt.payload))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseEventsRefusesWhatIsNotAnEvent(t *testing.T) {
	for _, payload := range []string{`not json`, `{"@odata.type":"#MetricReport.v1_4_0.MetricReport","Events":[]}`, `{"Id":"1"}`, `[]`} {
		if _, err := ParseEvents([]byte(payload)); err == nil {
			t.Errorf("%s: parsed", payload)
		}
	}
}

func FuzzParseEvents(f *testing.F) {
	f.Add([]byte(`{"Events":[{"EventId":"1","MessageId":"ResourceEvent.1.3.ResourcePoweredOff","OriginOfCondition":{"@odata.id":"/redfish/v1/Systems/1"}}]}`))
	f.Add([]byte(`{"Events":[{"MessageId":"SYS1001","OriginOfCondition":"/x#y"}]}`))
	f.Add([]byte(`{"Events":[null,{},{"EventId":1.5e300}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := ParseEvents(data)
		if err != nil {
			return
		}
		for _, e := range evs {
			switch e.Kind {
			case EventPoweredOff, EventPoweringOff, EventPoweredOn, EventPoweringOn, EventHeartbeat, EventGap, EventOther:
			default:
				t.Fatalf("kind %q", e.Kind)
			}
			if e.Kind != Classify(e.MessageID) && e.Kind != EventOther {
				t.Fatalf("kind %s for %q", e.Kind, e.MessageID)
			}
			if strings.ContainsAny(e.System, "#") {
				t.Fatalf("system %q keeps a fragment", e.System)
			}
		}
	})
}

func TestSSEFramingFollowsTheStandard(t *testing.T) {
	s := &Stream{client: &Client{base: "https://bmc"}, clock: clocktesting.NewFakeClock(time.Time{}), seen: newIDRing(4)}
	body := strings.Join([]string{
		": a comment, a keep-alive",
		"retry: 5000",
		"id: 1",
		`data: {"Events":[{"EventId":"1",`,
		`data: "MessageId":"ResourceEvent.1.3.ResourcePoweredOff"}]}`,
		"",
		"event: message",
		"id: 2",
		`data:{"Events":[{"MessageId":"ResourceEvent.1.3.ResourcePoweredOn"}]}`,
		"",
		"id: 1",
		`data: {"Events":[{"EventId":"1","MessageId":"ResourceEvent.1.3.ResourcePoweredOff"}]}`,
		"",
		"data: trailing, never ended by a blank line",
	}, "\n")
	var got []PowerEvent
	if err := s.read(strings.NewReader(body), time.Time{}, func(e PowerEvent) { got = append(got, e) }); err != nil {
		t.Fatal(err)
	}
	want := []PowerEvent{
		{Kind: EventPoweredOff, MessageID: "ResourceEvent.1.3.ResourcePoweredOff", EventID: "1", StreamID: "1"},
		{Kind: EventPoweredOn, MessageID: "ResourceEvent.1.3.ResourcePoweredOn", EventID: "2", StreamID: "2"},
		{Kind: EventPoweredOff, MessageID: "ResourceEvent.1.3.ResourcePoweredOff", EventID: "1", StreamID: "1", Replay: true},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(PowerEvent{}, "BMC", "Received", "ConnectedAt", "Source")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if s.lastID != "1" {
		t.Errorf("Last-Event-ID would be %q", s.lastID)
	}
}

func TestBackoffIsCappedAndJittered(t *testing.T) {
	for _, tt := range []struct {
		jitter   float64
		failures int
		want     time.Duration
	}{
		{0, 1, 500 * time.Millisecond},
		{0, 2, time.Second},
		{0, 3, 2 * time.Second},
		{0.999999, 3, 4 * time.Second},
		{0, 20, 30 * time.Second}, // capped at a minute, jittered to [30 s, 60 s)
		{0.5, 20, 45 * time.Second},
	} {
		s := &Stream{opts: StreamOptions{MinBackoff: time.Second, MaxBackoff: time.Minute, Jitter: func() float64 { return tt.jitter }}}
		if got := s.backoff(tt.failures); got.Round(time.Millisecond) != tt.want {
			t.Errorf("backoff(%d) with jitter %v = %v, want %v", tt.failures, tt.jitter, got, tt.want)
		}
	}
}

func TestIDRingForgetsTheOldest(t *testing.T) {
	r := newIDRing(2)
	if !r.add("a") || !r.add("b") || r.add("a") {
		t.Fatal("a, b, a")
	}
	r.add("c") // evicts a
	if !r.add("a") {
		t.Error("a was forgotten after two newer ids; it is new again")
	}
}

// The ring holds nothing until ids arrive, keeps a long id as its hash,
// and still tells a replay of one apart.
func TestIDRingGrowsAsIDsArriveAndHashesLongOnes(t *testing.T) {
	r := newIDRing(defaultSeenIDs)
	if r.ids != nil || r.set != nil {
		t.Fatalf("a new ring holds %d ids, a set: %v", cap(r.ids), r.set != nil)
	}
	long := strings.Repeat("x", 100<<10)
	if !r.add(long) || r.add(long) || !r.add(long+"y") {
		t.Fatal("long, long again (a replay), another long id")
	}
	for _, id := range r.ids {
		if len(id) > maxSeenID {
			t.Errorf("the ring keeps an id of %d bytes", len(id))
		}
	}
	if len(r.ids) != 2 {
		t.Errorf("the ring holds %d ids after two", len(r.ids))
	}
}

// A forgotten token is refused at once; the BMC's replay ring goes with
// its last token, not before.
func TestPushReceiverForgetsABMCWithItsLastToken(t *testing.T) {
	p := NewPushReceiver(nil, func(PowerEvent) {})
	p.Expect("token-one-1234", "https://bmc-1")
	p.Expect("token-two-1234", "https://bmc-1")
	post := func(token string) int {
		rec := httptest.NewRecorder()
		body := `{"Context":"` + token + `","Events":[{"EventId":"7","MessageId":"ResourceEvent.1.3.ResourcePoweredOff"}]}`
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/events", strings.NewReader(body)))
		return rec.Code
	}
	if code := post("token-one-1234"); code != http.StatusNoContent {
		t.Fatalf("delivery with a known token: %d", code)
	}
	p.Forget("token-one-1234")
	if code := post("token-one-1234"); code != http.StatusForbidden {
		t.Errorf("delivery with a forgotten token: %d, want 403", code)
	}
	if p.seen["https://bmc-1"] == nil {
		t.Error("the ring went while the BMC still has a token")
	}
	p.Forget("token-two-1234")
	if n := len(p.seen); n != 0 {
		t.Errorf("the receiver keeps %d rings after the BMC's last token was forgotten", n)
	}
}

// TestLegacyPowerSuppliesAsIDRACReportsThem reads the legacy Power
// resource only (no PowerSubsystem), with iDRAC's words for a supply that
// lost its input.
func TestLegacyPowerSuppliesAsIDRACReportsThem(t *testing.T) {
	docs := map[string]any{
		"/redfish/v1/Systems": map[string]any{"Members": []any{map[string]any{"@odata.id": "/redfish/v1/Systems/System.Embedded.1"}}},
		"/redfish/v1/Systems/System.Embedded.1": map[string]any{"Id": "System.Embedded.1", "PowerState": "On",
			"Links": map[string]any{"Chassis": []any{map[string]any{"@odata.id": "/redfish/v1/Chassis/System.Embedded.1"}}}},
		"/redfish/v1/Chassis/System.Embedded.1": map[string]any{"Power": map[string]any{"@odata.id": "/redfish/v1/Chassis/System.Embedded.1/Power"}},
		"/redfish/v1/Chassis/System.Embedded.1/Power": map[string]any{"PowerSupplies": []any{
			map[string]any{"MemberId": "PSU.Slot.1", "Name": "PS1 Status", "LineInputVoltage": 0, "Status": map[string]any{"State": "UnavailableOffline", "Health": "Critical"}},
			map[string]any{"MemberId": "PSU.Slot.2", "Name": "PS2 Status", "LineInputVoltage": 231, "Status": map[string]any{"State": "Enabled", "Health": "OK"}},
			map[string]any{"MemberId": "PSU.Slot.3", "Status": map[string]any{"State": "Absent"}},
			map[string]any{"MemberId": "PSU.Slot.4", "LineInputVoltage": 0, "Status": map[string]any{"State": "Enabled"}},
		}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(d)
	}))
	defer srv.Close()
	ep, _ := bmc.ParseAddress(srv.URL)
	c, err := New(bmc.Target{Address: ep, System: "System.Embedded.1", Credentials: bmc.Credentials{Username: "u", Password: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.PowerSupplies(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []bmc.PowerSupply{
		{ID: "PSU.Slot.1", Name: "PS1 Status", Input: bmc.InputLost, Raw: "State=UnavailableOffline LineInputVoltage=0"},
		{ID: "PSU.Slot.2", Name: "PS2 Status", Input: bmc.InputNormal, Raw: "State=Enabled LineInputVoltage=231"},
		// Enabled with no line voltage contradicts itself: it proves nothing.
		{ID: "PSU.Slot.4", Input: bmc.InputUnknown, Raw: "State=Enabled LineInputVoltage=0"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
