package cluster

import (
	"strings"
	"time"
)

// The planned-reboot signals other tools give, besides the kubelet's
// graceful shutdown (observeShutdown): kured's reboot lock, medik8s's
// NodeMaintenance, a Cluster API Machine deleted or remediated by its
// owner. PlannedSignals watches them and reports each source's open
// signals with SetPlanned; the view (infoLocked) names the earliest.

// Planned-reboot sources, as SetPlanned and PlannedSourceState name them.
const (
	SourceKured           = "kured"
	SourceNodeMaintenance = "nodemaintenance"
	SourceClusterAPI      = "clusterapi"
)

// SignalKuredLock names kured's reboot lock in Events ("planned reboot
// (kured lock)").
const SignalKuredLock = "kured lock"

// plannedKey is one open signal: its source and the object that gives it
// (kured's DaemonSet, a NodeMaintenance, a Machine).
type plannedKey struct{ source, id string }

// plannedSignal is an open signal: what it says now ("NodeMaintenance
// nm-w1", "Cluster API Machine default/m1 deleted") and when we first saw
// its object give it.
type plannedSignal struct {
	by     string
	seenAt time.Time
}

// SetPlanned replaces the open signals of one source: node → object id →
// what it says. A signal already open (same source, node and object) keeps
// the time we first saw it, even if what it says changed (a Machine
// remediated by its owner, then deleted by it), so a relist or an update
// does not restart its window; a signal that is gone is forgotten (the tool
// cleared it), and one that comes back later is new. Nodes whose signals
// changed are notified.
func (c *Cluster) SetPlanned(source string, signals map[string]map[string]string) {
	now := c.clock.Now()
	c.mu.Lock()
	if c.planned == nil {
		c.planned = map[string]map[plannedKey]plannedSignal{}
	}
	var changed []string
	for node, open := range c.planned {
		for k := range open {
			if _, still := signals[node][k.id]; k.source == source && !still {
				delete(open, k)
				changed = append(changed, node)
			}
		}
		if len(open) == 0 {
			delete(c.planned, node)
		}
	}
	for node, ids := range signals {
		for id, by := range ids {
			k := plannedKey{source, id}
			s, ok := c.planned[node][k]
			switch {
			case ok && s.by == by:
				continue
			case ok:
				s.by = by
			default:
				s = plannedSignal{by: by, seenAt: now}
			}
			if c.planned[node] == nil {
				c.planned[node] = map[plannedKey]plannedSignal{}
			}
			c.planned[node][k] = s
			changed = append(changed, node)
		}
	}
	c.mu.Unlock()
	c.nodesChanged(changed...)
}

// plannedLocked is the earliest open signal of the node among those
// SetPlanned reported: when we first saw it and what it says. Ties go to
// the smaller text, so the view is stable.
func (c *Cluster) plannedLocked(node string) (at time.Time, by string, ok bool) {
	for _, s := range c.planned[node] {
		if !ok || s.seenAt.Before(at) || (s.seenAt.Equal(at) && strings.Compare(s.by, by) < 0) {
			at, by, ok = s.seenAt, s.by, true
		}
	}
	return at, by, ok
}
