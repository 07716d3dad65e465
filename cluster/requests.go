package cluster

import (
	"github.com/bmcfence/bmcfence/fence"
)

// pendingRequest is a human's authenticated request (a BMCFenceRequest)
// handed to the engine, until a state write takes it in.
type pendingRequest struct {
	id  string
	cmd fence.Command
	// taking: our own state write that takes it in is under way; a node
	// that names it is that write's, not another engine's.
	taking bool
}

// SetRequest offers a request to the engine for node: the runner sees it as
// NodeInfo.Command with CommandID id, and acknowledges it by id in the state
// write that takes it in (SaveState), which calls the OnRequestTaken hook.
// A newer request for the node replaces an older one not yet taken.
func (c *Cluster) SetRequest(node, id string, cmd fence.Command) {
	c.mu.Lock()
	if c.requests == nil {
		c.requests = map[string]pendingRequest{}
	}
	c.requests[node] = pendingRequest{id: id, cmd: cmd}
	c.mu.Unlock()
	c.nodesChanged(node)
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
