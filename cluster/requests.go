package cluster

import (
	"errors"
	"fmt"

	"github.com/bmcfence/bmcfence/fence"
)

// pendingRequest is a human's authenticated request (a BMCFenceRequest)
// handed to the engine, until a state write takes it in.
type pendingRequest struct {
	id  string
	cmd fence.Command
	// vouch, when set, says whether the request may still be taken (nil)
	// or not (yet): the admission policy that authenticates it must be in
	// force from before its creation until it is taken (requests.Guard).
	vouch func() error
	// taking: our own state write that takes it in is under way; a node
	// that names it is that write's, not another engine's.
	taking bool
}

// ErrRequestNotVouched is returned by SaveState when the request it would
// take in can no longer be vouched for: nothing is written, and the request
// is not offered again until it can be.
var ErrRequestNotVouched = errors.New("request not vouched for")

// SetRequest offers a request to the engine for node: the runner sees it as
// NodeInfo.Command with CommandID id, and acknowledges it by id in the state
// write that takes it in (SaveState), which calls the OnRequestTaken hook.
// A newer request for the node replaces an older one not yet taken.
func (c *Cluster) SetRequest(node, id string, cmd fence.Command) {
	c.OfferRequest(node, id, cmd, nil)
}

// OfferRequest is SetRequest with a check, asked when the runner reads the
// node (a request it fails is not offered) and again right before the
// state write that would take it in (which it fails refuses): a request is
// taken only while vouch says nil.
func (c *Cluster) OfferRequest(node, id string, cmd fence.Command, vouch func() error) {
	c.mu.Lock()
	if c.requests == nil {
		c.requests = map[string]pendingRequest{}
	}
	c.requests[node] = pendingRequest{id: id, cmd: cmd, vouch: vouch}
	c.mu.Unlock()
	c.nodesChanged(node)
}

// offered reports whether p may be offered to the engine now.
func (p pendingRequest) offered() bool { return p.vouch == nil || p.vouch() == nil }

// vouchRequest checks, right before the state write that takes request id
// in, that it is still pending and that its check passes.
func (c *Cluster) vouchRequest(node, id string) error {
	if id == "" {
		return nil
	}
	c.mu.Lock()
	p, ok := c.requests[node]
	c.mu.Unlock()
	if !ok || p.id != id {
		// Refused, withdrawn (expired, deleted) or replaced by a newer
		// request since the runner read it: no longer ours to take.
		return fmt.Errorf("node %s: request %s: %w: it is no longer pending", node, id, ErrRequestNotVouched)
	}
	if p.vouch == nil {
		return nil
	}
	if err := p.vouch(); err != nil {
		return fmt.Errorf("node %s: request %s: %w: %w", node, id, ErrRequestNotVouched, err)
	}
	return nil
}

// WithdrawRequest removes the request id for node if it is still pending
// (it expired, or its object was deleted).
func (c *Cluster) WithdrawRequest(node, id string) {
	c.mu.Lock()
	p, ok := c.requests[node]
	if ok && p.id == id {
		delete(c.requests, node)
	}
	c.mu.Unlock()
	if ok && p.id == id {
		c.nodesChanged(node)
	}
}

// OnRequestTaken sets the hook called (outside our lock) after a state
// write took in a request offered with SetRequest.
func (c *Cluster) OnRequestTaken(f func(node, id string)) {
	c.mu.Lock()
	c.requestTaken = f
	c.mu.Unlock()
}

// takeRequest forgets the pending request id of node after the state write
// that acknowledged it (ours, or another engine's: the node names it in
// AnnotationRequestTaken), and reports it to the hook.
func (c *Cluster) takeRequest(node, id string) {
	if id == "" {
		return
	}
	c.mu.Lock()
	p, ok := c.requests[node]
	hook := c.requestTaken
	if ok && p.id == id {
		delete(c.requests, node)
		if e := c.entries[node]; e != nil {
			e.stale = true
		}
	}
	c.mu.Unlock()
	if ok && p.id == id && hook != nil {
		hook(node, id)
	}
}

// takingRequest marks (or unmarks) the pending request id of node as being
// taken in by our own state write, so that the node naming it is not taken
// for another engine's take (takenElsewhereLocked).
func (c *Cluster) takingRequest(node, id string, taking bool) {
	if id == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.requests[node]; ok && p.id == id {
		p.taking = taking
		c.requests[node] = p
	}
}
