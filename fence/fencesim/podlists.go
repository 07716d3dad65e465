package fencesim

import (
	"math/rand/v2"
	"time"

	"github.com/bmcfence/bmcfence/fence"
)

// The real cluster adapter lists a node's pods only once its fence reaches
// the taint (phases Tainting and Detaching): a cluster-wide pod cache would
// cost the agent memory in proportion to every pod of the cluster. Until
// that list completes, the view says PodsUnknown, with no pods counted. A
// stateless node runs pods without volumes: nothing but its pods then
// stands between the taint and the node counted detached.

// EnablePodLists makes the world's pod lists lag (half the worlds: 5 to 30
// s after the state reaches the taint) and some nodes stateless. Its own
// random source, so the scenarios of every seed stay what they were.
// Reports what it chose, for the plan ("" when nothing).
func (w *World) EnablePodLists(seed uint64) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	rng := rand.New(rand.NewPCG(seed, 0x9d5119c7))
	if rng.IntN(2) == 0 {
		return ""
	}
	w.podListLag = time.Duration(5+rng.IntN(26)) * time.Second
	stateless := 0
	for _, n := range w.Nodes {
		if rng.IntN(2) == 0 {
			n.stateless, n.vas = true, 0
			stateless++
		}
	}
	return sprintf("pod lists lag %s, %d stateless nodes", w.podListLag, stateless)
}

// podListsFollow starts or ends the node's pod list as its state enters or
// leaves the phases in which the adapter lists them. Under the world's lock.
func (w *World) podListsFollow(n *Node, p fence.Phase, ok bool) {
	listing := ok && (p == fence.Tainting || p == fence.Detaching)
	switch {
	case listing && !n.podsListing:
		n.podsListing, n.podsListedAt = true, w.now().Add(w.podListLag)
		if w.podListLag > 0 {
			w.quirk(faultPodsUnlisted)
		}
	case !listing:
		n.podsListing = false
	}
}

// podsUnlisted: the adapter has not listed the node's pods. In a world
// whose lists lag (EnablePodLists), as in the agent: a node whose fence is
// not at the taint has none listed, and one at the taint until its list
// completes. In the others every node's pods are known at once.
func (w *World) podsUnlisted(n *Node) bool {
	if w.podListLag == 0 {
		return false
	}
	return !n.podsListing || w.now().Before(n.podsListedAt)
}

// relisting: an agent process that started after a node's list completed
// lists the node's pods itself (a restart, a new leader), podListLag from
// its start.
func (w *World) relisting(n *Node, since time.Time) bool {
	return w.podListLag > 0 && n.podsListing && w.now().Before(since.Add(w.podListLag))
}

// checkDetached is the oracle's Detach rule, at a state write from
// Tainting or Detaching to Fenced or PoweringOn (a fence that applied its
// taint and counted the node detached in one step writes Tainting to
// Fenced): the node must hold no pod and no VolumeAttachment. Only a
// human's unfence may power on a node that still holds them (a write to
// PoweringOn that takes an unfence request; any other request taken in the
// same write exempts nothing). While the node stays tainted the world
// never binds new pods to it, so what it holds now it held when the agent
// decided. Under the world's lock.
func (w *World) checkDetached(n *Node, old, new fence.Phase, unfence bool) {
	if (old != fence.Tainting && old != fence.Detaching) || (new != fence.Fenced && new != fence.PoweringOn) {
		return
	}
	if (new == fence.PoweringOn && unfence) || n.taint == fence.TaintAbsent || (n.pods == 0 && n.vas == 0) {
		return
	}
	w.violate("%s: counted detached (%s) while %d pods and %d VolumeAttachments are bound to it", n.Name, new, n.pods, n.vas)
}
