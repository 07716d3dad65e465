package redfish

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// EventKind is what a BMC event says happened, as far as fencing cares.
type EventKind string

const (
	// EventPoweredOff: the BMC says the system has powered off
	// (ResourceEvent ResourcePoweredOff).
	EventPoweredOff EventKind = "poweredOff"
	// EventPoweringOff: the system is turning off (ResourcePoweringOff;
	// iDRAC SYS1001 "System is turning off").
	EventPoweringOff EventKind = "poweringOff"
	// EventPoweredOn: the system has powered on (ResourcePoweredOn).
	EventPoweredOn EventKind = "poweredOn"
	// EventPoweringOn: the system is turning on (ResourcePoweringOn;
	// iDRAC SYS1000 "System is turning on").
	EventPoweringOn EventKind = "poweringOn"
	// EventHeartbeat: the event service is alive (HeartbeatEvent
	// RedfishServiceFunctional).
	EventHeartbeat EventKind = "heartbeat"
	// EventGap: the BMC lost events we asked for (Base
	// EventBufferExceeded after a Last-Event-ID): whatever happened
	// meanwhile must be read, not heard.
	EventGap EventKind = "gap"
	// EventOther: anything else, a reset among them (iDRAC SYS1003
	// "System CPU Resetting": a restart, not an off).
	EventOther EventKind = "other"
)

// PowerEvent is one event a BMC sent, as the engine may consume it. It
// proves nothing by itself: at most it starts a read sooner.
type PowerEvent struct {
	// BMC is the stream's address (scheme://host:port).
	BMC string `json:"bmc"`
	// System is the OriginOfCondition as a path
	// ("/redfish/v1/Systems/1"); "" when the event names none. On a BMC
	// with several systems it tells them apart: compare it with the
	// verified system's URI (Client.SystemURI), never assume.
	System    string    `json:"system,omitempty"`
	Kind      EventKind `json:"kind"`
	MessageID string    `json:"messageId"`
	// EventID is the event's EventId, else the SSE id of its payload.
	EventID string `json:"eventId,omitempty"`
	// StreamID is the SSE "id:" field; "" for a push delivery.
	StreamID string `json:"streamId,omitempty"`
	// BMCTimestamp is EventTimestamp exactly as sent: informational only,
	// never compared with our clock (the BMC's may be anything).
	BMCTimestamp string `json:"bmcTimestamp,omitempty"`
	// Received is when we read it, on our clock.
	Received time.Time `json:"received"`
	// ConnectedAt is when the connection that carried it opened, on our
	// clock: an event received right after a (re)connect may be a
	// backlog the BMC replays, not news.
	ConnectedAt time.Time `json:"connectedAt,omitempty"`
	// Replay: this stream delivered an event with the same EventId (or
	// SSE id) before. A replay is never news.
	Replay bool `json:"replay,omitempty"`
	// Source is "sse" or "push".
	Source string `json:"source"`
}

// eventPayload is the part of a Redfish Event resource the parser reads.
type eventPayload struct {
	ODataType string            `json:"@odata.type"`
	ID        json.RawMessage   `json:"Id"`
	Events    []json.RawMessage `json:"Events"`
}

type eventRecord struct {
	EventID           json.RawMessage `json:"EventId"`
	EventTimestamp    string          `json:"EventTimestamp"`
	MessageID         string          `json:"MessageId"`
	OriginOfCondition json.RawMessage `json:"OriginOfCondition"`
}

// maxEventBytes bounds one payload: a handful of event records.
const maxEventBytes = 256 << 10

// ParseEvents reads a Redfish Event payload (the data of one SSE event,
// or the body of a push delivery) into events, one per record. Kind,
// System, MessageID, EventID and BMCTimestamp are filled; the rest is the
// caller's. A payload that is not an Event resource is an error; an odd
// record is kept as EventOther rather than dropped.
func ParseEvents(data []byte) ([]PowerEvent, error) {
	if len(data) > maxEventBytes {
		return nil, fmt.Errorf("event payload of %d bytes: more than %d", len(data), maxEventBytes)
	}
	var p eventPayload
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("event payload is not JSON: %w", err)
	}
	if p.ODataType != "" && !strings.Contains(p.ODataType, "#Event.") {
		return nil, fmt.Errorf("payload of type %q is not an Event", truncateText(p.ODataType, 60))
	}
	if p.Events == nil {
		return nil, fmt.Errorf("event payload has no Events array")
	}
	out := make([]PowerEvent, 0, len(p.Events))
	for _, raw := range p.Events {
		var r eventRecord
		if err := json.Unmarshal(raw, &r); err != nil {
			out = append(out, PowerEvent{Kind: EventOther})
			continue
		}
		out = append(out, PowerEvent{
			System:       originPath(r.OriginOfCondition),
			Kind:         Classify(r.MessageID),
			MessageID:    r.MessageID,
			EventID:      rawString(r.EventID),
			BMCTimestamp: r.EventTimestamp,
		})
	}
	return out, nil
}

// Classify maps a MessageId to a kind. The DMTF names count only in their
// own registries (ResourceEvent, HeartbeatEvent, Base; any version); Dell's
// SYS ids only bare ("SYS1001", as iDRAC 5.x sends them) or in the IDRAC
// registry ("IDRAC.2.9.SYS1001"), so another vendor's SYS1001 is not
// mistaken for Dell's.
func Classify(messageID string) EventKind {
	registry, name := "", messageID
	if i := strings.LastIndexByte(messageID, '.'); i >= 0 {
		name = messageID[i+1:]
		registry = messageID[:strings.IndexByte(messageID, '.')]
	}
	switch {
	case registry == "ResourceEvent" && name == "ResourcePoweredOff":
		return EventPoweredOff
	case registry == "ResourceEvent" && name == "ResourcePoweringOff":
		return EventPoweringOff
	case registry == "ResourceEvent" && name == "ResourcePoweredOn":
		return EventPoweredOn
	case registry == "ResourceEvent" && name == "ResourcePoweringOn":
		return EventPoweringOn
	case registry == "HeartbeatEvent" && name == "RedfishServiceFunctional":
		return EventHeartbeat
	case registry == "Base" && name == "EventBufferExceeded":
		return EventGap
	case (registry == "" || strings.EqualFold(registry, "IDRAC")) && name == "SYS1001":
		return EventPoweringOff
	case (registry == "" || strings.EqualFold(registry, "IDRAC")) && name == "SYS1000":
		return EventPoweringOn
	}
	return EventOther
}

// originPath reads OriginOfCondition, a link object {"@odata.id": ...}
// (DSP0268) or a bare string (iLO, OpenManage), as a path without a
// fragment or trailing slash.
func originPath(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var uri string
	var obj struct {
		ODataID string `json:"@odata.id"`
	}
	if err := json.Unmarshal(raw, &obj); err == nil && obj.ODataID != "" {
		uri = obj.ODataID
	} else if err := json.Unmarshal(raw, &uri); err != nil {
		return ""
	}
	uri = onlyPath(uri)
	if i := strings.IndexByte(uri, '#'); i >= 0 {
		uri = uri[:i]
	}
	if len(uri) > 1 {
		uri = strings.TrimRight(uri, "/")
	}
	return uri
}

// rawString reads an id that BMCs send as a string or a number.
func rawString(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

func truncateText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
