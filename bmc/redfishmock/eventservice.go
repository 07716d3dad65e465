package redfishmock

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The EventService's HTTP side: the service document, EventDestination
// subscriptions (push and SSE), SubmitTestEvent, and the SSE stream.

const (
	eventServiceURI  = "/redfish/v1/EventService"
	subscriptionsURI = "/redfish/v1/EventService/Subscriptions"
	submitTestURI    = "/redfish/v1/EventService/Actions/EventService.SubmitTestEvent"
)

// subscription is an EventDestination: a push destination, or the
// resource that stands for an open SSE stream.
type subscription struct {
	h       *eventHub
	id      string
	owner   principal
	context string
	created time.Time

	sse *sseStream // non-nil for an SSE stream's destination

	destination      string
	sendHeartbeat    bool
	heartbeatMinutes int
	nextHeartbeat    time.Time // guarded by h.mu
	registryPrefixes []string
	messageIDs       []string
	queue            chan []byte

	done    chan struct{}
	endOnce sync.Once
}

func (s *subscription) uri() string { return subscriptionsURI + "/" + s.id }

// wants applies the subscription's filters (RegistryPrefixes, MessageIds;
// a heartbeat passes whatever they say, as HeartbeatEvent is the
// subscriber's own request).
func (s *subscription) wants(rec eventRecord) bool {
	if strings.HasPrefix(rec.MessageID, "HeartbeatEvent.") {
		return true
	}
	if len(s.registryPrefixes) > 0 && !matchesAny(registryOf(rec.MessageID), s.registryPrefixes) {
		return false
	}
	if len(s.messageIDs) > 0 && !matchesAny(rec.MessageID, s.messageIDs) && !matchesAny(messageName(rec.MessageID), s.messageIDs) {
		return false
	}
	return true
}

// registryOf is the registry prefix of a MessageId ("ResourceEvent" of
// "ResourceEvent.1.3.ResourcePoweredOff"); Dell's bare ids belong to IDRAC.
func registryOf(id string) string {
	if i := strings.IndexByte(id, '.'); i > 0 {
		return id[:i]
	}
	return "IDRAC"
}

// messageName is the last segment of a MessageId.
func messageName(id string) string {
	return id[strings.LastIndexByte(id, '.')+1:]
}

func matchesAny(s string, list []string) bool {
	for _, x := range list {
		if strings.EqualFold(s, x) {
			return true
		}
	}
	return false
}

// deliver hands one event to the subscriber: a frame on the SSE stream
// (a stream too slow to take it is closed, as a BMC with a full send
// buffer does), or a POST to the push destination.
func (s *subscription) deliver(id uint64, rec eventRecord) {
	if !s.wants(rec) {
		return
	}
	s.h.mu.Lock()
	context := s.context // PATCH may change it
	s.h.mu.Unlock()
	body := envelope(id, context, rec)
	if s.sse != nil {
		select {
		case s.sse.frames <- sseFrame{id: id, data: body}:
		default:
			s.h.remove(s)
		}
		return
	}
	select {
	case s.queue <- body:
	default: // the destination has not taken the last 64: drop, as a BMC would
	}
}

// end stops the subscription's goroutine or closes its stream.
func (s *subscription) end() {
	s.endOnce.Do(func() { close(s.done) })
}

type sseStream struct {
	frames chan sseFrame
}

type sseFrame struct {
	id   uint64
	data []byte
}

// add registers a subscription under a fresh id; it fails at the bound.
func (h *eventHub) add(s *subscription) error {
	h.mu.Lock()
	if len(h.subs) >= h.cfg.MaxSubscriptions {
		h.mu.Unlock()
		return errTooManySubscriptions
	}
	h.lastSub++
	s.id = strconv.FormatUint(h.lastSub, 10)
	s.h = h
	s.done = make(chan struct{})
	if s.sendHeartbeat {
		s.nextHeartbeat = h.m.clock.Now().Add(time.Duration(s.heartbeatMinutes) * h.cfg.HeartbeatMinute)
	}
	h.subs[s.id] = s
	h.mu.Unlock()
	h.start()
	h.kick()
	return nil
}

var errTooManySubscriptions = errors.New("too many subscriptions")

// remove deletes a subscription and ends it.
func (h *eventHub) remove(s *subscription) {
	h.mu.Lock()
	if h.subs[s.id] == s {
		delete(h.subs, s.id)
	}
	h.mu.Unlock()
	s.end()
}

func (h *eventHub) get(id string, who principal) (*subscription, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.subs[id]
	if !ok || !sameScope(who, s.owner) {
		return nil, false
	}
	return s, true
}

// sameScope: an administrator sees every subscription; a system-scoped
// user (a BMC of its own) only those made through its own BMC.
func sameScope(who, owner principal) bool {
	return who.scope == nil || who.scope == owner.scope
}

// serviceProfile is the profile of the BMC a request talks to: the one
// its credentials are scoped to, else the first system's.
func (m *Mock) serviceProfile(who principal) Profile {
	s := m.attribute(nil, who)
	if s == nil {
		s = m.systems[0]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.profile
}

func (m *Mock) eventServiceDocument(who principal) map[string]any {
	spec := m.serviceProfile(who).eventSpec()
	prefixes := []string{"ResourceEvent", "HeartbeatEvent", "Base"}
	if spec.dell {
		prefixes = []string{"IDRAC", "Base"}
	}
	doc := map[string]any{
		"@odata.id":                    eventServiceURI,
		"@odata.type":                  "#EventService.v1_10_0.EventService",
		"Id":                           "EventService",
		"Name":                         "Event Service",
		"ServiceEnabled":               true,
		"Status":                       statusOK,
		"DeliveryRetryAttempts":        m.events.cfg.DeliveryRetryAttempts,
		"DeliveryRetryIntervalSeconds": int64(m.events.cfg.DeliveryRetryInterval / time.Second),
		"EventFormatTypes":             []string{"Event"},
		"RegistryPrefixes":             prefixes,
		"ResourceTypes":                []string{"ComputerSystem"},
		"Subscriptions":                link{subscriptionsURI},
		"Actions": map[string]any{
			"#EventService.SubmitTestEvent": map[string]any{"target": submitTestURI},
		},
	}
	if spec.sseURI != "" {
		doc["ServerSentEventUri"] = spec.sseURI
		doc["SSEFilterPropertiesSupported"] = map[string]bool{
			"EventFormatType": true, "MessageId": true, "RegistryPrefix": true,
			"MetricReportDefinition": false, "OriginResource": false, "ResourceType": false,
		}
	}
	return doc
}

func (m *Mock) writeSubscriptions(w http.ResponseWriter, who principal) {
	h := m.events
	h.mu.Lock()
	var ids []string
	for id, s := range h.subs {
		if sameScope(who, s.owner) {
			ids = append(ids, id)
		}
	}
	h.mu.Unlock()
	sortIDs(ids)
	doc := collectionDoc{
		ODataContext: "/redfish/v1/$metadata#EventDestinationCollection.EventDestinationCollection",
		ODataID:      subscriptionsURI,
		ODataType:    "#EventDestinationCollection.EventDestinationCollection",
		Name:         "Event Subscriptions Collection",
		Members:      []link{},
	}
	for _, id := range ids {
		doc.Members = append(doc.Members, link{subscriptionsURI + "/" + id})
	}
	doc.Count = len(doc.Members)
	writeDescribed(w, "EventDestinationCollection", doc)
}

func sortIDs(ids []string) {
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && compareIDs(ids[j-1], ids[j]) > 0; j-- {
			ids[j-1], ids[j] = ids[j], ids[j-1]
		}
	}
}

func subscriptionDocument(s *subscription) map[string]any {
	doc := map[string]any{
		"@odata.id":       s.uri(),
		"@odata.type":     "#EventDestination.v1_14_1.EventDestination",
		"Id":              s.id,
		"Name":            "Event Subscription " + s.id,
		"Context":         s.context,
		"Protocol":        "Redfish",
		"EventFormatType": "Event",
		"Status":          statusOK,
	}
	if s.sse != nil {
		doc["SubscriptionType"] = "SSE"
		return doc
	}
	doc["SubscriptionType"] = "RedfishEvent"
	doc["Destination"] = s.destination
	doc["DeliveryRetryPolicy"] = "TerminateAfterRetries"
	doc["SendHeartbeat"] = s.sendHeartbeat
	doc["HeartbeatIntervalMinutes"] = s.heartbeatMinutes
	doc["RegistryPrefixes"] = nonNil(s.registryPrefixes)
	doc["MessageIds"] = nonNil(s.messageIDs)
	return doc
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// subscriptionRequest is the body of POST (and PATCH) to an
// EventDestination. Pointers tell absent from zero.
type subscriptionRequest struct {
	Destination              *string   `json:"Destination"`
	Protocol                 *string   `json:"Protocol"`
	Context                  *string   `json:"Context"`
	SubscriptionType         *string   `json:"SubscriptionType"`
	EventFormatType          *string   `json:"EventFormatType"`
	SendHeartbeat            *bool     `json:"SendHeartbeat"`
	HeartbeatIntervalMinutes *int      `json:"HeartbeatIntervalMinutes"`
	RegistryPrefixes         *[]string `json:"RegistryPrefixes"`
	MessageIDs               *[]string `json:"MessageIds"`
	DeliveryRetryPolicy      *string   `json:"DeliveryRetryPolicy"`
}

// createSubscription serves POST to the Subscriptions collection: a push
// subscription (SSE ones are made by opening the stream).
func (m *Mock) createSubscription(w http.ResponseWriter, r *http.Request, who principal) {
	var req subscriptionRequest
	if err := readJSON(w, r, &req, false); err != nil {
		writeError(w, http.StatusBadRequest, msgMalformedJSON, "The request body is not valid JSON: "+err.Error()+".", "")
		return
	}
	var missing []string
	if req.Destination == nil {
		missing = append(missing, "Destination")
	}
	if req.Protocol == nil {
		missing = append(missing, "Protocol")
	}
	if len(missing) > 0 {
		writeError(w, http.StatusBadRequest, msgCreateFailedMissingReqProperty,
			fmt.Sprintf("The create operation failed because the required properties %s were missing from the request.", strings.Join(missing, " and ")), "")
		return
	}
	if *req.Protocol != "Redfish" {
		writePropertyValue(w, "Protocol", *req.Protocol, "Redfish")
		return
	}
	if req.SubscriptionType != nil && *req.SubscriptionType != "RedfishEvent" {
		writePropertyValue(w, "SubscriptionType", *req.SubscriptionType, "RedfishEvent (SSE subscriptions are made by opening the ServerSentEventUri)")
		return
	}
	if req.EventFormatType != nil && *req.EventFormatType != "Event" {
		writePropertyValue(w, "EventFormatType", *req.EventFormatType, "Event")
		return
	}
	u, err := url.Parse(*req.Destination)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		writePropertyValue(w, "Destination", *req.Destination, "an http:// or https:// URI")
		return
	}
	s := &subscription{owner: who, destination: *req.Destination, created: m.clock.Now(), queue: make(chan []byte, 64),
		heartbeatMinutes: DefaultHeartbeatIntervalMinutes}
	if req.Context != nil {
		s.context = *req.Context
	}
	if !applyHeartbeat(w, s, req) {
		return
	}
	if req.RegistryPrefixes != nil {
		s.registryPrefixes = *req.RegistryPrefixes
	}
	if req.MessageIDs != nil {
		s.messageIDs = *req.MessageIDs
	}
	if err := m.events.add(s); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.8.CreateLimitReachedForResource",
			fmt.Sprintf("The create operation failed because the resource has reached the limit of %d subscriptions.", m.events.cfg.MaxSubscriptions),
			"Delete a subscription and resubmit the request.")
		return
	}
	m.events.wg.Add(1)
	go m.events.pushLoop(s)
	w.Header().Set("Location", s.uri())
	writeJSON(w, http.StatusCreated, subscriptionDocument(s))
}

// applyHeartbeat takes SendHeartbeat and HeartbeatIntervalMinutes from a
// request (EventDestination v1.11: 1 to 65535 minutes); it answers 400
// itself and reports false when they are wrong.
func applyHeartbeat(w http.ResponseWriter, s *subscription, req subscriptionRequest) bool {
	if s.sse != nil && (req.SendHeartbeat != nil || req.HeartbeatIntervalMinutes != nil) {
		// EventDestination: SendHeartbeat "shall not apply to event
		// destinations if the SubscriptionType property contains SSE".
		writeError(w, http.StatusBadRequest, "Base.1.8.PropertyNotWritable",
			"SendHeartbeat and HeartbeatIntervalMinutes do not apply to an SSE subscription.", "Remove them from the request body.")
		return false
	}
	if req.HeartbeatIntervalMinutes != nil {
		if n := *req.HeartbeatIntervalMinutes; n < 1 || n > 65535 {
			writePropertyValue(w, "HeartbeatIntervalMinutes", strconv.Itoa(n), "1 to 65535")
			return false
		}
		s.heartbeatMinutes = *req.HeartbeatIntervalMinutes
	}
	if req.SendHeartbeat != nil {
		s.sendHeartbeat = *req.SendHeartbeat
	}
	return true
}

func writePropertyValue(w http.ResponseWriter, prop, value, want string) {
	writeError(w, http.StatusBadRequest, "Base.1.8.PropertyValueNotInList",
		fmt.Sprintf("The value %q for the property %s is not in the list of acceptable values (%s).", truncate(value, 80), prop, want),
		"Choose a value from the enumeration list and resubmit the request.")
}

// serveSubscription serves GET, PATCH and DELETE of one EventDestination.
// Deleting an SSE stream's destination closes the stream.
func (m *Mock) serveSubscription(w http.ResponseWriter, r *http.Request, who principal, id string) {
	s, ok := m.events.get(id, who)
	if !ok {
		writeNotFound(w, subscriptionsURI+"/"+id)
		return
	}
	switch r.Method {
	case http.MethodDelete:
		m.events.remove(s)
		w.WriteHeader(http.StatusNoContent)
	case http.MethodPatch:
		var req subscriptionRequest
		if err := readJSON(w, r, &req, false); err != nil {
			writeError(w, http.StatusBadRequest, msgMalformedJSON, "The request body is not valid JSON: "+err.Error()+".", "")
			return
		}
		if req.Destination != nil || req.Protocol != nil || req.SubscriptionType != nil {
			writeError(w, http.StatusBadRequest, "Base.1.8.PropertyNotWritable",
				"Destination, Protocol and SubscriptionType cannot be changed; delete the subscription and create another.", "")
			return
		}
		m.events.mu.Lock()
		cp := &subscription{sse: s.sse, sendHeartbeat: s.sendHeartbeat, heartbeatMinutes: s.heartbeatMinutes}
		m.events.mu.Unlock()
		if !applyHeartbeat(w, cp, req) {
			return
		}
		m.events.mu.Lock()
		if req.Context != nil {
			s.context = *req.Context
		}
		s.sendHeartbeat, s.heartbeatMinutes = cp.sendHeartbeat, cp.heartbeatMinutes
		if s.sendHeartbeat {
			s.nextHeartbeat = m.clock.Now().Add(time.Duration(s.heartbeatMinutes) * m.events.cfg.HeartbeatMinute)
		}
		doc := subscriptionDocument(s)
		m.events.mu.Unlock()
		m.events.kick()
		writeJSON(w, http.StatusOK, doc)
	default:
		m.events.mu.Lock()
		doc := subscriptionDocument(s)
		m.events.mu.Unlock()
		writeDescribed(w, "EventDestination.v1_14_1", doc)
	}
}

// pushClient delivers push events. The mock is a test peer: it does not
// verify the listener's certificate (iDRAC's IgnoreCertificateErrors).
var pushClient = &http.Client{
	Timeout: 5 * time.Second,
	Transport: &http.Transport{
		Proxy:           nil,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a test peer posting to a test listener
	},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// pushLoop POSTs a push subscription's events in order. A delivery that
// fails DeliveryRetryAttempts more times ends the subscription
// (DeliveryRetryPolicy TerminateAfterRetries).
func (h *eventHub) pushLoop(s *subscription) {
	defer h.wg.Done()
	for {
		select {
		case body := <-s.queue:
			if !h.post(s, body) {
				h.remove(s)
				return
			}
		case <-s.done:
			return
		case <-h.m.closed:
			return
		}
	}
}

func (h *eventHub) post(s *subscription, body []byte) bool {
	for attempt := 0; attempt <= h.cfg.DeliveryRetryAttempts; attempt++ {
		if attempt > 0 {
			t := h.m.waiter.NewTimer(h.cfg.DeliveryRetryInterval)
			select {
			case <-t.C():
			case <-s.done:
				t.Stop()
				return true
			case <-h.m.closed:
				t.Stop()
				return true
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-s.done:
			case <-h.m.closed:
			case <-ctx.Done():
			}
			cancel()
		}()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.destination, bytes.NewReader(body))
		if err != nil {
			cancel()
			return false
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("OData-Version", "4.0")
		resp, err := pushClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode >= 200 && resp.StatusCode < 300 {
				return true
			}
		}
	}
	return false
}

// submitTestEvent serves EventService.SubmitTestEvent: the body's message
// (default a ResourceEvent about nothing in particular) goes to every
// subscriber that sees the caller's systems.
func (m *Mock) submitTestEvent(w http.ResponseWriter, r *http.Request, who principal) {
	var body struct {
		MessageID         *string  `json:"MessageId"`
		Message           *string  `json:"Message"`
		MessageArgs       []string `json:"MessageArgs"`
		Severity          *string  `json:"MessageSeverity"`
		OriginOfCondition *string  `json:"OriginOfCondition"`
		EventTimestamp    *string  `json:"EventTimestamp"`
	}
	if err := readJSON(w, r, &body, false); err != nil {
		writeError(w, http.StatusBadRequest, msgMalformedJSON, "The request body is not valid JSON: "+err.Error()+".", "")
		return
	}
	now := m.clock.Now()
	rec := eventRecord{EventType: "Other", EventTimestamp: now.UTC().Format(time.RFC3339), MessageSeverity: "OK",
		MessageID: "Base.1.13.Success", Message: "Test event."}
	if body.MessageID != nil {
		rec.MessageID = *body.MessageID
	}
	if body.Message != nil {
		rec.Message = *body.Message
	}
	if body.Severity != nil {
		rec.MessageSeverity = *body.Severity
	}
	if body.EventTimestamp != nil {
		rec.EventTimestamp = *body.EventTimestamp
	}
	rec.MessageArgs = body.MessageArgs
	if body.OriginOfCondition != nil {
		rec.OriginOfCondition = &link{*body.OriginOfCondition}
	}
	m.events.publish(who.scope, func(id uint64) (eventRecord, bool) {
		rec.EventID = strconv.FormatUint(id, 10)
		return rec, true
	})
	w.WriteHeader(http.StatusNoContent)
}

// sseFilter is the part of an SSE $filter the mock understands: clauses
// joined by "and", each "EventFormatType eq Event", "RegistryPrefix eq X"
// or "MessageId eq X" (quotes optional), as iDRAC's and bmcweb's guides
// show them.
func parseSSEFilter(q string) (prefixes, ids []string, err error) {
	for _, clause := range strings.Split(q, " and ") {
		f := strings.Fields(clause)
		if len(f) != 3 || f[1] != "eq" {
			return nil, nil, fmt.Errorf("cannot read the $filter clause %q: want PROPERTY eq VALUE", truncate(strings.TrimSpace(clause), 80))
		}
		v := strings.Trim(f[2], "'")
		switch f[0] {
		case "EventFormatType":
			if v != "Event" {
				return nil, nil, fmt.Errorf("EventFormatType %q: this service streams only Event", truncate(v, 40))
			}
		case "RegistryPrefix":
			prefixes = append(prefixes, v)
		case "MessageId":
			ids = append(ids, v)
		default:
			return nil, nil, fmt.Errorf("$filter on %q is not supported (see SSEFilterPropertiesSupported)", truncate(f[0], 40))
		}
	}
	return prefixes, ids, nil
}

// acceptsEventStream reports whether an Accept header admits
// text/event-stream (absent, */* and text/* do).
func acceptsEventStream(accept string) bool {
	if accept == "" {
		return true
	}
	for _, part := range strings.Split(accept, ",") {
		mt := strings.TrimSpace(strings.SplitN(part, ";", 2)[0])
		switch strings.ToLower(mt) {
		case "text/event-stream", "*/*", "text/*":
			return true
		}
	}
	return false
}

// serveSSE opens an SSE stream: an EventDestination (SubscriptionType SSE)
// stands for it while it is open. Last-Event-ID replays the events after
// that id (or EventBufferExceeded when the buffer no longer holds it).
func (m *Mock) serveSSE(w http.ResponseWriter, r *http.Request, who principal, path string) {
	spec := m.serviceProfile(who).eventSpec()
	if spec.sseURI == "" || path != spec.sseURI {
		writeNotFound(w, path)
		return
	}
	if !acceptsEventStream(r.Header.Get("Accept")) {
		writeError(w, http.StatusNotAcceptable, "Base.1.8.HeaderInvalid",
			fmt.Sprintf("The Accept header %q does not admit text/event-stream, the only representation of %s.", truncate(r.Header.Get("Accept"), 80), path),
			"Send Accept: text/event-stream.")
		return
	}
	s := &subscription{owner: who, created: m.clock.Now(), sse: &sseStream{frames: make(chan sseFrame, 256)}}
	if q := r.URL.Query().Get("$filter"); q != "" {
		var err error
		if s.registryPrefixes, s.messageIDs, err = parseSSEFilter(q); err != nil {
			writeError(w, http.StatusBadRequest, "Base.1.8.QueryParameterValueFormatError", err.Error(), "Correct the $filter and resubmit the request.")
			return
		}
	}
	limit := spec.maxStreams
	if c := m.events.cfg.MaxSSEStreams; c != 0 {
		limit = c
	}
	m.events.mu.Lock()
	open := 0
	for _, o := range m.events.subs {
		if o.sse != nil && o.owner.scope == who.scope {
			open++
		}
	}
	m.events.mu.Unlock()
	if limit > 0 && open >= limit {
		w.Header().Set("Retry-After", "30")
		writeError(w, http.StatusServiceUnavailable, msgServiceTemporarilyUnavailable,
			fmt.Sprintf("The service allows at most %d SSE connections; %d are open.", limit, open),
			"Close another SSE connection, or wait, and resubmit the request.")
		return
	}
	var raw [12]byte
	_, _ = rand.Read(raw[:])
	s.context = "sse-" + hex.EncodeToString(raw[:]) // service-generated, opaque
	if err := m.events.add(s); err != nil {
		writeError(w, http.StatusServiceUnavailable, msgServiceTemporarilyUnavailable,
			fmt.Sprintf("The service allows at most %d subscriptions.", m.events.cfg.MaxSubscriptions), "Delete a subscription and resubmit the request.")
		return
	}
	defer m.events.remove(s)

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("OData-Version", "4.0")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	write := func(f sseFrame) bool {
		var b bytes.Buffer
		if f.id != 0 {
			fmt.Fprintf(&b, "id: %d\n", f.id)
		}
		b.WriteString("data: ")
		b.Write(f.data)
		b.WriteString("\n\n")
		if _, err := w.Write(b.Bytes()); err != nil {
			return false
		}
		return rc.Flush() == nil
	}

	// What happened before the connection: the stale-replay fault, then
	// what Last-Event-ID asked for.
	var backlog []published
	if owner := m.attribute(nil, who); owner != nil {
		owner.mu.Lock()
		n := owner.eventFaults.ReplayStale
		owner.mu.Unlock()
		if n > 0 {
			backlog = m.events.lastSeen(n, who)
		}
	}
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		id, err := strconv.ParseUint(strings.TrimSpace(last), 10, 64)
		missed, found := m.events.since(id, who)
		if err != nil || !found {
			m.events.mu.Lock()
			m.events.lastID++
			bid := m.events.lastID
			m.events.mu.Unlock()
			backlog = append(backlog, published{id: bid, record: eventBufferExceeded(m.clock.Now())})
		} else {
			backlog = append(backlog, missed...)
		}
	}
	for _, p := range backlog {
		if !s.wants(p.record) {
			continue
		}
		rec := p.record
		if rec.EventID == "" {
			rec.EventID = strconv.FormatUint(p.id, 10)
		}
		if !write(sseFrame{id: p.id, data: envelope(p.id, s.context, rec)}) {
			return
		}
	}

	idle := spec.idle
	if c := m.events.cfg.SSEIdleTimeout; c != 0 {
		idle = c
	}
	var idleTimer interface {
		C() <-chan time.Time
		Reset(time.Duration) bool
		Stop() bool
	}
	var idleC <-chan time.Time
	if idle > 0 {
		t := m.waiter.NewTimer(idle)
		idleTimer, idleC = t, t.C()
		defer t.Stop()
	}
	for {
		select {
		case f := <-s.sse.frames:
			if !write(f) {
				return
			}
			if idleTimer != nil {
				idleTimer.Stop()
				idleTimer.Reset(idle)
			}
		case <-idleC:
			return // iDRAC: "no data ... for more than one hour": closed by the service
		case <-s.done:
			return // its EventDestination was deleted, or the stream dropped
		case <-r.Context().Done():
			return
		case <-m.closed:
			return
		}
	}
}
