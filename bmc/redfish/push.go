package redfish

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/bmc"
)

// Push subscriptions: for BMCs without SSE (HPE iLO) and where the agent is
// reachable from the BMC network. The BMC POSTs each event to a listener
// of ours; PushReceiver turns the deliveries into the same PowerEvents a
// Stream gives, with heartbeats (which SSE streams never get).

// OpSubscribe names subscription calls in errors.
const OpSubscribe bmc.Op = "subscribe"

// Subscription is what Subscribe asks a BMC for.
type Subscription struct {
	// Destination is the listener's URL as the BMC must reach it.
	Destination string
	// Context is sent back in every delivery: PushReceiver uses it as the
	// token that tells which BMC a delivery comes from (and refuses one
	// that carries no known token). Make it unguessable.
	Context bmc.Secret
	// HeartbeatMinutes, when positive, asks for RedfishServiceFunctional
	// every that many minutes (EventDestination v1.11).
	HeartbeatMinutes int
}

// Subscribe creates a push subscription (POST to the EventService's
// Subscriptions) and returns its URI.
func (c *Client) Subscribe(ctx context.Context, s Subscription) (string, error) {
	var uri string
	var res bmc.Result
	err := c.run(ctx, OpSubscribe, &res, func(cn *conn) error {
		body := map[string]any{"Destination": s.Destination, "Protocol": "Redfish", "Context": s.Context.Reveal(), "EventFormatType": "Event"}
		if s.HeartbeatMinutes > 0 {
			body["SendHeartbeat"], body["HeartbeatIntervalMinutes"] = true, s.HeartbeatMinutes
		}
		resp, err := cn.request(http.MethodPost, "/redfish/v1/EventService/Subscriptions", body, false)
		if err != nil {
			return err
		}
		if !resp.ok() {
			return newHTTPError(http.MethodPost, "/redfish/v1/EventService/Subscriptions", resp, cn.c.target.Credentials, s.Context)
		}
		uri = onlyPath(resp.header.Get("Location"))
		if uri == "" {
			return fmt.Errorf("%w: the subscription was created (HTTP %d) but the answer has no Location", bmc.ErrBMC, resp.status)
		}
		return nil
	})
	if err != nil {
		return "", bmc.RedactError(err, s.Context)
	}
	return uri, nil
}

// Unsubscribe deletes a subscription; one already gone is not an error.
func (c *Client) Unsubscribe(ctx context.Context, uri string) error {
	var res bmc.Result
	return c.run(ctx, OpSubscribe, &res, func(cn *conn) error {
		resp, err := cn.request(http.MethodDelete, uri, nil, true)
		if err != nil {
			return err
		}
		if !resp.ok() && resp.status != http.StatusNotFound {
			return newHTTPError(http.MethodDelete, uri, resp, cn.c.target.Credentials)
		}
		return nil
	})
}

// PushReceiver is the listener's http.Handler: it takes POSTed Event
// payloads, finds the BMC by the payload's Context, and hands each event
// to the sink with Source "push". Unknown contexts are refused (403) and
// never reach the sink.
type PushReceiver struct {
	clock clock.PassiveClock
	sink  func(PowerEvent)

	mu     sync.Mutex
	tokens map[string]string // Context → BMC address
	seen   map[string]*idRing
}

// NewPushReceiver makes a receiver; clk stamps Received.
func NewPushReceiver(clk clock.PassiveClock, sink func(PowerEvent)) *PushReceiver {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &PushReceiver{clock: clk, sink: sink, tokens: map[string]string{}, seen: map[string]*idRing{}}
}

// Expect registers the Context a BMC's subscription carries.
func (p *PushReceiver) Expect(token bmc.Secret, bmcAddress string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tokens[token.Reveal()] = bmcAddress
}

// Forget drops a BMC's token: deliveries carrying it are refused from now
// on. What the receiver remembers of the BMC's events goes with its last
// token.
func (p *PushReceiver) Forget(token bmc.Secret) {
	p.mu.Lock()
	defer p.mu.Unlock()
	addr, ok := p.tokens[token.Reveal()]
	if !ok {
		return
	}
	delete(p.tokens, token.Reveal())
	for _, a := range p.tokens {
		if a == addr {
			return
		}
	}
	delete(p.seen, addr)
}

// bmcOf finds the BMC whose token context is, and its replay ring
// (created on its first event). Called with p.mu held, so a token
// forgotten meanwhile is not used.
func (p *PushReceiver) bmcOf(context string) (string, *idRing, bool) {
	for tok, addr := range p.tokens {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(context)) == 1 {
			seen := p.seen[addr]
			if seen == nil {
				seen = newIDRing(defaultSeenIDs)
				p.seen[addr] = seen
			}
			return addr, seen, true
		}
	}
	return "", nil, false
}

var errUnknownContext = errors.New("unknown subscription context")

func (p *PushReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST an Event payload", http.StatusMethodNotAllowed)
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, maxEventBytes+1))
	if err != nil {
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return
	}
	evs, err := ParseEvents(data)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var env struct {
		Context string `json:"Context"`
	}
	_ = json.Unmarshal(data, &env)
	now := p.clock.Now()
	p.mu.Lock()
	addr, seen, ok := p.bmcOf(env.Context)
	if !ok {
		p.mu.Unlock()
		http.Error(w, errUnknownContext.Error(), http.StatusForbidden)
		return
	}
	for i := range evs {
		e := &evs[i]
		e.BMC, e.Received, e.Source = addr, now, "push"
		if e.Kind != EventHeartbeat && e.EventID != "" {
			e.Replay = !seen.add(e.EventID)
		}
	}
	p.mu.Unlock()
	for _, e := range evs {
		p.sink(e)
	}
	w.WriteHeader(http.StatusNoContent)
}
