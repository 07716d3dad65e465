package redfishmock

import (
	"github.com/bmcfence/bmcfence/bmc/machine"

	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// The event service: power events of the systems, pushed to SSE streams
// and to push subscriptions (EventDestination), the way each vendor
// documents it (eventSpecs). See the package documentation, "Events".

// eventSpec is how a profile's BMC publishes events.
type eventSpec struct {
	// sseURI is the EventService's ServerSentEventUri; "" for a BMC that
	// documents no SSE (push subscriptions only).
	sseURI string
	// maxStreams bounds the SSE connections open at once on one BMC;
	// 0 means no bound.
	maxStreams int
	// idle closes an SSE stream after this long without data; 0 never.
	idle time.Duration
	// dell: Dell iDRAC Alerts with Dell MessageIds instead of the DMTF
	// ResourceEvent registry; prefixed: with the "IDRAC.2.9." registry
	// prefix (newer firmware), else bare ("SYS1001", as iDRAC 5.00 sent).
	dell, prefixed bool
	// none: the service has no EventService at all.
	none   bool
	source string
}

const dmtfEventSource = "DSP0266 (Redfish 1.15) \"Eventing\" and \"Server-sent events\"; EventService v1.10, " +
	"EventDestination v1.14 (SendHeartbeat, HeartbeatIntervalMinutes since v1.11; not for SSE destinations); " +
	"ResourceEvent 1.3 (ResourcePoweredOff, ResourcePoweringOff, ResourcePoweredOn, ResourcePoweringOn), " +
	"HeartbeatEvent 1.0 (RedfishServiceFunctional)"

const dellEventSource = "Dell whitepaper \"Manage iDRAC alerts by using the Redfish Eventing feature in YX3X and later " +
	"PowerEdge servers\" (SSE at /redfish/v1/SSE, SSE id = the event's unique id, data = the Event payload, the stream " +
	"closed after an hour without data, the SSE subscription listed in and removed from the Subscriptions collection); " +
	"iDRAC9 telemetry whitepaper (at most 2 SSE connections; the client resumes with the last event id); " +
	"iDRAC alert payload shape as captured from a PowerEdge R640, iDRAC 5.00 (redhat-cne/hw-event-proxy " +
	"e2e-tests/data/TMP0120.json: EventType Alert, bare MessageId, EventTimestamp with a +hhmm offset); " +
	"MessageIds SYS1000 (System is turning on), SYS1001 (System is turning off), SYS1003 (System CPU Resetting), " +
	"from Dell's Event and Error Messages reference (EEMI; the dellemc.openmanage collection matches SYS1003 in the " +
	"Lifecycle log to follow a host reset)"

var eventSpecs = map[Profile]eventSpec{
	ProfileGeneric: {sseURI: "/redfish/v1/EventService/SSE", source: dmtfEventSource},
	ProfileIDRAC9:  {sseURI: "/redfish/v1/SSE", maxStreams: 2, idle: time.Hour, dell: true, source: dellEventSource},
	ProfileIDRAC10: {sseURI: "/redfish/v1/SSE", maxStreams: 2, idle: time.Hour, dell: true, prefixed: true, source: dellEventSource},
	ProfileILO5:    {source: "HPE iLO 5 Redfish documentation (servermanagementportal.ext.hpe.com, \"Redfish events\"): push subscriptions (HTTPS POST to a listener); no SSE documented"},
	ProfileILO6:    {source: "HPE iLO 6 Redfish documentation: push subscriptions only, as iLO 5"},
	ProfileXCC: {sseURI: "/redfish/v1/EventService/ServerSentEvent", source: "Lenovo XClarity Controller Redfish REST API " +
		"guide (EventService ServerSentEventUri); events modelled with the DMTF ResourceEvent registry (assumed)"},
	ProfileOpenBMC: {sseURI: "/redfish/v1/EventService/SSE", maxStreams: 10, source: "OpenBMC bmcweb " +
		"redfish-core/lib/eventservice_sse.hpp (SSE at /redfish/v1/EventService/SSE, Last-Event-Id replays its buffer, " +
		"an unknown id gets EventBufferExceeded), subscription.hpp (at most 20 subscriptions, 10 of them SSE), " +
		"subscription.cpp (RedfishServiceFunctional heartbeats for push subscriptions)"},
	ProfileSupermicro: {source: "Supermicro Redfish Reference Guide: push subscriptions; no SSE modelled (none found documented)"},
	ProfileAMIMulti:   {source: "AMI MegaRAC: push subscriptions; no SSE modelled (none found documented)"},
	ProfileSushy:      {none: true, source: "sushy-tools' emulator has no EventService (its root.json template names none)"},
}

func (p Profile) eventSpec() eventSpec {
	if s, ok := eventSpecs[p]; ok {
		return s
	}
	return eventSpecs[ProfileGeneric]
}

// Defaults of EventsConfig.
const (
	// DefaultEventBuffer is how many events the service keeps for
	// Last-Event-ID: bmcweb's buffer holds 200.
	DefaultEventBuffer = 200
	// DefaultMaxSubscriptions bounds the EventDestinations (push and SSE):
	// iDRAC and bmcweb both allow 20.
	DefaultMaxSubscriptions = 20
	// DefaultDeliveryRetryAttempts and DefaultDeliveryRetryInterval are
	// iDRAC's defaults for push deliveries (3 retries, 30 s apart).
	DefaultDeliveryRetryAttempts = 3
	DefaultDeliveryRetryInterval = 30 * time.Second
	// DefaultHeartbeatIntervalMinutes is EventDestination's default.
	DefaultHeartbeatIntervalMinutes = 10
)

// EventsConfig tunes the event service. The zero value is realistic.
type EventsConfig struct {
	// HeartbeatMinute is how long one minute of a subscription's
	// HeartbeatIntervalMinutes lasts in the mock; 0 means a minute. Tests
	// shorten it: HeartbeatIntervalMinutes is an integer of minutes.
	HeartbeatMinute time.Duration
	// SSEIdleTimeout overrides the profile's idle close of an SSE stream
	// (iDRAC: an hour); negative disables it.
	SSEIdleTimeout time.Duration
	// MaxSSEStreams overrides the profile's bound on SSE connections per
	// BMC (iDRAC: 2); negative removes it.
	MaxSSEStreams int
	// DeliveryRetryInterval and DeliveryRetryAttempts govern push
	// deliveries; zero means the defaults.
	DeliveryRetryInterval time.Duration
	DeliveryRetryAttempts int
	// Buffer is how many events are kept for Last-Event-ID; 0 means
	// DefaultEventBuffer.
	Buffer int
	// MaxSubscriptions bounds the EventDestinations of the service; 0
	// means DefaultMaxSubscriptions (one real BMC's bound). A mock that
	// stands for many BMCs (the scale harness serves every node's system
	// from one mock) needs one per system, or all but 20 nodes' streams
	// are refused and retry forever.
	MaxSubscriptions int
}

func (c EventsConfig) validate() []string {
	var problems []string
	if c.HeartbeatMinute < 0 {
		problems = append(problems, fmt.Sprintf("events.heartbeatMinute: %v is negative", c.HeartbeatMinute))
	}
	if c.DeliveryRetryInterval < 0 {
		problems = append(problems, fmt.Sprintf("events.deliveryRetryInterval: %v is negative", c.DeliveryRetryInterval))
	}
	if c.DeliveryRetryAttempts < 0 {
		problems = append(problems, fmt.Sprintf("events.deliveryRetryAttempts: %d is negative", c.DeliveryRetryAttempts))
	}
	if c.Buffer < 0 {
		problems = append(problems, fmt.Sprintf("events.buffer: %d is negative", c.Buffer))
	}
	if c.MaxSubscriptions < 0 {
		problems = append(problems, fmt.Sprintf("events.maxSubscriptions: %d is negative", c.MaxSubscriptions))
	}
	return problems
}

func (c EventsConfig) withDefaults() EventsConfig {
	if c.HeartbeatMinute == 0 {
		c.HeartbeatMinute = time.Minute
	}
	if c.DeliveryRetryInterval == 0 {
		c.DeliveryRetryInterval = DefaultDeliveryRetryInterval
	}
	if c.DeliveryRetryAttempts == 0 {
		c.DeliveryRetryAttempts = DefaultDeliveryRetryAttempts
	}
	if c.Buffer == 0 {
		c.Buffer = DefaultEventBuffer
	}
	if c.MaxSubscriptions == 0 {
		c.MaxSubscriptions = DefaultMaxSubscriptions
	}
	return c
}

// EventFaults are the ways one system's event service misbehaves. The zero
// value is an honest one.
type EventFaults struct {
	// ReplayStale makes every new SSE connection first receive the last N
	// events it can see again, with their original ids, whatever
	// Last-Event-ID asked: a BMC that replays its buffer on reconnect.
	ReplayStale int `json:"replayStale,omitempty"`
	// NoHeartbeats stops RedfishServiceFunctional heartbeats: an event
	// service that hung while the web server still answers.
	NoHeartbeats bool `json:"noHeartbeats,omitempty"`
	// DropEvents publishes nothing of the system: its power changes
	// happen, nobody hears of them.
	DropEvents bool `json:"dropEvents,omitempty"`
}

func (f EventFaults) validate() error {
	if f.ReplayStale < 0 {
		return fmt.Errorf("replayStale: %d is negative", f.ReplayStale)
	}
	return nil
}

// EventInjection is an event the control API makes a BMC send that did not
// happen to it (POST /mock/systems/{id}/inject-event).
type EventInjection struct {
	// Origin is the OriginOfCondition to send: another system's URI (the
	// wrong system of a multi-system BMC), or any URI. Default: the
	// system's own.
	Origin string `json:"origin,omitempty"`
	// Change is the power change to report: "PoweredOff" (default),
	// "PoweringOff", "PoweredOn" or "PoweringOn".
	Change string `json:"change,omitempty"`
}

// eventRecord is one entry of an Event's Events array.
type eventRecord struct {
	EventType         string          `json:"EventType"`
	EventID           string          `json:"EventId"`
	EventTimestamp    string          `json:"EventTimestamp"`
	Severity          string          `json:"Severity,omitempty"`
	MessageSeverity   string          `json:"MessageSeverity,omitempty"`
	Message           string          `json:"Message"`
	MessageID         string          `json:"MessageId"`
	MessageArgs       []string        `json:"MessageArgs,omitempty"`
	OriginOfCondition *link           `json:"OriginOfCondition,omitempty"`
	MemberID          string          `json:"MemberId"`
	Context           string          `json:"Context,omitempty"`
	Oem               json.RawMessage `json:"Oem,omitempty"`
}

// published is an event the service has sent (or would have, had anyone
// listened): kept for Last-Event-ID and the stale-replay fault.
type published struct {
	id     uint64
	system *system // whose event; nil for one about the service itself
	record eventRecord
}

// envelope is the Event resource carrying records to one subscriber.
func envelope(id uint64, context string, records ...eventRecord) []byte {
	recs := make([]eventRecord, len(records))
	for i, r := range records {
		r.Context = context
		r.MemberID = strconv.Itoa(i)
		recs[i] = r
	}
	b, _ := json.Marshal(map[string]any{
		"@odata.type": "#Event.v1_7_0.Event",
		"Id":          strconv.FormatUint(id, 10),
		"Name":        "Event Array",
		"Context":     context,
		"Events":      recs,
	})
	return b
}

// powerRecord is the event a profile's BMC sends for a power change of
// system uri, or false when it sends none for that change.
func powerRecord(spec eventSpec, id uint64, uri string, c machine.Change) (eventRecord, bool) {
	if spec.dell {
		return dellPowerRecord(spec, id, uri, c)
	}
	var name, verb string
	switch c.To {
	case PowerOff:
		name, verb = "ResourcePoweredOff", "has powered off"
	case PowerPoweringOff:
		name, verb = "ResourcePoweringOff", "is powering off"
	case PowerOn:
		name, verb = "ResourcePoweredOn", "has powered on"
	case PowerPoweringOn:
		name, verb = "ResourcePoweringOn", "is powering on"
	default:
		return eventRecord{}, false
	}
	return eventRecord{
		EventType:         "Other",
		EventID:           strconv.FormatUint(id, 10),
		EventTimestamp:    c.At.UTC().Format(time.RFC3339),
		MessageSeverity:   "OK",
		Message:           fmt.Sprintf("The resource `%s` %s.", uri, verb),
		MessageID:         "ResourceEvent.1.3." + name,
		MessageArgs:       []string{uri},
		OriginOfCondition: &link{uri},
	}, true
}

// dellPowerRecord: iDRAC reports host power as Alerts: SYS1001 when the
// host turns off (our ForceOff, or a loss of host power with the iDRAC
// up), SYS1003 for a reset (a restart's off-dwell), SYS1000 when it turns
// on. It sends nothing when the off or on completes.
func dellPowerRecord(spec eventSpec, id uint64, uri string, c machine.Change) (eventRecord, bool) {
	var msgID, text string
	switch {
	case c.To == PowerPoweringOff, c.To == PowerOff && c.From == PowerOn && !c.Restart:
		msgID, text = "SYS1001", "System is turning off."
	case c.To == PowerOff && c.Restart:
		msgID, text = "SYS1003", "System CPU Resetting."
	case c.To == PowerPoweringOn:
		msgID, text = "SYS1000", "System is turning on."
	default:
		return eventRecord{}, false
	}
	if spec.prefixed {
		msgID = "IDRAC.2.9." + msgID
	}
	return eventRecord{
		EventType:         "Alert",
		EventID:           strconv.FormatUint(id, 10),
		EventTimestamp:    c.At.Format("2006-01-02T15:04:05-0700"),
		Severity:          "Informational",
		Message:           text,
		MessageID:         msgID,
		OriginOfCondition: &link{uri},
	}, true
}

// heartbeatRecord is HeartbeatEvent's RedfishServiceFunctional, with the
// subscription as its origin, as bmcweb sends it.
func heartbeatRecord(now time.Time, subURI string) eventRecord {
	return eventRecord{
		EventType:         "Other",
		EventTimestamp:    now.UTC().Format(time.RFC3339),
		MessageSeverity:   "OK",
		Message:           "Redfish service is functional.",
		MessageID:         "HeartbeatEvent.1.0.RedfishServiceFunctional",
		OriginOfCondition: &link{subURI},
	}
}

// eventBufferExceeded answers a Last-Event-ID the buffer no longer holds,
// as bmcweb does.
func eventBufferExceeded(now time.Time) eventRecord {
	return eventRecord{
		EventType:       "Other",
		EventTimestamp:  now.UTC().Format(time.RFC3339),
		MessageSeverity: "Warning",
		Message:         "Event buffer exceeded: events after the requested Last-Event-ID were lost.",
		MessageID:       "Base.1.13.EventBufferExceeded",
	}
}

// eventHub fans the systems' events out to SSE streams and push
// subscriptions. Its pump goroutine runs from the first subscription until
// Close: only then does anything run in the background.
type eventHub struct {
	m   *Mock
	cfg EventsConfig

	mu      sync.Mutex
	lastID  uint64
	buffer  []published // the last cfg.Buffer events, oldest first
	subs    map[string]*subscription
	lastSub uint64
	running bool

	kickc chan struct{}
	wg    sync.WaitGroup
}

func newEventHub(m *Mock, cfg EventsConfig) *eventHub {
	return &eventHub{m: m, cfg: cfg.withDefaults(), subs: map[string]*subscription{}, kickc: make(chan struct{}, 1)}
}

// kick wakes the pump: a power change happened now, or a subscription
// came or went.
func (h *eventHub) kick() {
	select {
	case h.kickc <- struct{}{}:
	default:
	}
}

// start runs the pump if it is not running yet. The changes the machines
// logged before anyone listened are discarded: nobody was there to hear.
func (h *eventHub) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running {
		return
	}
	h.running = true
	now := h.m.clock.Now()
	for _, s := range h.m.systems {
		s.mu.Lock()
		s.hw.TakeChanges(now)
		s.mu.Unlock()
	}
	h.wg.Add(1)
	go h.pump()
}

// pump publishes the machines' power changes as they happen and sends the
// heartbeats that are due.
func (h *eventHub) pump() {
	defer h.wg.Done()
	for {
		now := h.m.clock.Now()
		h.collect(now)
		h.heartbeats(now)
		wait, ok := h.nextWake(now)
		var timer clock.Timer
		var timerC <-chan time.Time
		if ok {
			timer = h.m.waiter.NewTimer(wait)
			timerC = timer.C()
		}
		select {
		case <-timerC:
		case <-h.kickc:
		case <-h.m.closed:
			if timer != nil {
				timer.Stop()
			}
			return
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// collect publishes every power change the machines logged up to now,
// oldest first.
func (h *eventHub) collect(now time.Time) {
	type change struct {
		s *system
		c machine.Change
	}
	var all []change
	for _, s := range h.m.systems {
		s.mu.Lock()
		cs := s.hw.TakeChanges(now)
		drop := s.eventFaults.DropEvents || s.dead
		s.mu.Unlock()
		if drop {
			continue // a dead BMC tells nobody; a dropping one neither
		}
		for _, c := range cs {
			all = append(all, change{s, c})
		}
	}
	slices.SortStableFunc(all, func(a, b change) int { return a.c.At.Compare(b.c.At) })
	for _, ch := range all {
		ch.s.mu.Lock()
		spec := ch.s.profile.eventSpec()
		ch.s.mu.Unlock()
		h.publish(ch.s, func(id uint64) (eventRecord, bool) {
			return powerRecord(spec, id, "/redfish/v1/Systems/"+ch.s.spec.id, ch.c)
		})
	}
}

// publish numbers an event, keeps it and hands it to every subscriber that
// sees s.
func (h *eventHub) publish(s *system, build func(id uint64) (eventRecord, bool)) {
	h.mu.Lock()
	id := h.lastID + 1
	rec, ok := build(id)
	if !ok {
		h.mu.Unlock()
		return
	}
	h.lastID = id
	p := published{id: id, system: s, record: rec}
	if len(h.buffer) == h.cfg.Buffer {
		h.buffer = append(h.buffer[:0], h.buffer[1:]...)
	}
	h.buffer = append(h.buffer, p)
	subs := h.subscribersLocked(s)
	h.mu.Unlock()
	for _, sub := range subs {
		sub.deliver(id, rec)
	}
}

// subscribersLocked are the subscriptions whose owner sees s, in id order.
func (h *eventHub) subscribersLocked(s *system) []*subscription {
	var out []*subscription
	for _, sub := range h.subs {
		if s == nil || sub.owner.sees(s) {
			out = append(out, sub)
		}
	}
	slices.SortFunc(out, func(a, b *subscription) int { return compareIDs(a.id, b.id) })
	return out
}

// heartbeats sends the RedfishServiceFunctional heartbeats that are due.
func (h *eventHub) heartbeats(now time.Time) {
	h.mu.Lock()
	var due []*subscription
	for _, sub := range h.subs {
		if sub.sse == nil && sub.sendHeartbeat && !now.Before(sub.nextHeartbeat) {
			sub.nextHeartbeat = now.Add(time.Duration(sub.heartbeatMinutes) * h.cfg.HeartbeatMinute)
			due = append(due, sub)
		}
	}
	h.mu.Unlock()
	for _, sub := range due {
		if owner := h.m.attribute(nil, sub.owner); owner != nil {
			owner.mu.Lock()
			silent := owner.eventFaults.NoHeartbeats || owner.dead
			owner.mu.Unlock()
			if silent {
				continue
			}
		}
		sub.deliver(0, heartbeatRecord(now, sub.uri()))
	}
}

// nextWake is how long the pump may sleep: until the next transition ends
// or the next heartbeat is due.
func (h *eventHub) nextWake(now time.Time) (time.Duration, bool) {
	var next time.Time
	consider := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, s := range h.m.systems {
		s.mu.Lock()
		if t, ok := s.hw.NextChange(); ok {
			consider(t)
		}
		s.mu.Unlock()
	}
	h.mu.Lock()
	for _, sub := range h.subs {
		if sub.sse == nil && sub.sendHeartbeat {
			consider(sub.nextHeartbeat)
		}
	}
	h.mu.Unlock()
	if next.IsZero() {
		return 0, false
	}
	if d := next.Sub(now); d > 0 {
		return d, true
	}
	return 0, true
}

// since returns the kept events after id that who sees; false when id is
// no longer (or never was) in the buffer.
func (h *eventHub) since(id uint64, who principal) ([]published, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	found := false
	var out []published
	for _, p := range h.buffer {
		if p.id == id {
			found = true
			continue
		}
		if found && (p.system == nil || who.sees(p.system)) {
			out = append(out, p)
		}
	}
	return out, found
}

// lastSeen returns the last n kept events who sees (the stale replay).
func (h *eventHub) lastSeen(n int, who principal) []published {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []published
	for i := len(h.buffer) - 1; i >= 0 && len(out) < n; i-- {
		if p := h.buffer[i]; p.system == nil || who.sees(p.system) {
			out = append(out, p)
		}
	}
	slices.Reverse(out)
	return out
}

// reset ends every subscription (Mock.Reset). Event ids keep counting, so
// an id is never reused.
func (h *eventHub) reset() {
	h.mu.Lock()
	subs := h.subs
	h.subs = map[string]*subscription{}
	h.buffer = nil
	h.mu.Unlock()
	for _, sub := range subs {
		sub.end()
	}
}

// Unwrap lets http.ResponseController reach the connection's Flusher
// through the request logger's wrapper.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// SetEventFaults replaces a system's event faults.
func (m *Mock) SetEventFaults(id string, f EventFaults) error {
	s, err := m.system(id)
	if err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	s.mu.Lock()
	s.eventFaults = f
	s.mu.Unlock()
	m.events.kick()
	return nil
}

// EventFaultsOf returns a system's event faults.
func (m *Mock) EventFaultsOf(id string) (EventFaults, error) {
	s, err := m.system(id)
	if err != nil {
		return EventFaults{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eventFaults, nil
}

// DropStreams closes every SSE stream that sees the system, as a BMC that
// restarts its web server (or a network blip) does. It returns how many it
// closed.
func (m *Mock) DropStreams(id string) (int, error) {
	s, err := m.system(id)
	if err != nil {
		return 0, err
	}
	h := m.events
	h.mu.Lock()
	var drop []*subscription
	for _, sub := range h.subs {
		if sub.sse != nil && sub.owner.sees(s) {
			drop = append(drop, sub)
			delete(h.subs, sub.id)
		}
	}
	h.mu.Unlock()
	for _, sub := range drop {
		sub.end()
	}
	return len(drop), nil
}

// InjectEvent makes system id's BMC send a power event that did not
// happen to it: by default a ResourcePoweredOff (or the Dell alert for it)
// about the system itself, or with in.Origin about another one.
func (m *Mock) InjectEvent(id string, in EventInjection) error {
	s, err := m.system(id)
	if err != nil {
		return err
	}
	c := machine.Change{At: m.clock.Now(), From: PowerOn, To: PowerOff}
	switch in.Change {
	case "", "PoweredOff":
	case "PoweringOff":
		c.To = PowerPoweringOff
	case "PoweredOn":
		c.From, c.To = PowerPoweringOn, PowerOn
	case "PoweringOn":
		c.From, c.To = PowerOff, PowerPoweringOn
	default:
		return fmt.Errorf("%w: change %q: want PoweredOff, PoweringOff, PoweredOn or PoweringOn", ErrInvalidInput, in.Change)
	}
	origin := in.Origin
	if origin == "" {
		origin = "/redfish/v1/Systems/" + s.spec.id
	}
	s.mu.Lock()
	spec := s.profile.eventSpec()
	s.mu.Unlock()
	m.events.publish(s, func(id uint64) (eventRecord, bool) { return powerRecord(spec, id, origin, c) })
	return nil
}
