package fence

import (
	"fmt"
	"time"
)

// SilentFor is how long the node has been silent on our clock: since the last
// sign of life we observed (a Lease renewal or Ready heartbeat changing), or
// since we first saw it. This, not NotReady, is the witness that the kubelet
// is dead: a kubelet whose runtime or CNI is down is NotReady and renews. A
// node we have not observed yet (zero HeartbeatAt) is never silent: absence
// of observation is not evidence of death.
func SilentFor(n NodeView, now time.Time) time.Duration {
	if n.HeartbeatAt.IsZero() || !now.After(n.HeartbeatAt) {
		return 0
	}
	return now.Sub(n.HeartbeatAt)
}

// UnhealthyFor is how long the node has looked unhealthy to us: the longer of
// its silence and, when Ready is not True, the time since we saw it leave
// True. It counts nodes for the storm guard, where a NotReady node is as
// unhealthy as the node lifecycle controller takes it to be; it never
// licenses a fence (SilentFor does).
func UnhealthyFor(n NodeView, now time.Time) time.Duration {
	if n.HeartbeatAt.IsZero() {
		return 0
	}
	d := now.Sub(n.HeartbeatAt)
	if n.Ready != ReadyTrue && !n.NotReadySince.IsZero() {
		if nr := now.Sub(n.NotReadySince); nr > d {
			d = nr
		}
	}
	if d < 0 {
		return 0
	}
	return d
}

// CountsAsUnhealthy is the fleet's notion of an unhealthy node, for the storm
// guard's counts. The runner must use it (not its own rule) so that the guard
// and the lifecycle agree.
func CountsAsUnhealthy(p Policy, n NodeView, now time.Time) bool {
	return UnhealthyFor(n, now) >= p.SuspectAfter
}

// RefusalReason says why the storm guard refused a fence.
type RefusalReason uint8

const (
	Admitted RefusalReason = iota
	RefuseAPIStale
	RefuseClusterUnhealthy
	RefuseZoneUnhealthy
	RefuseInFlight
	RefuseCooldown
	numRefusalReasons
)

var refusalNames = [numRefusalReasons]string{"Admitted", "APIViewStale", "ClusterUnhealthy", "ZoneUnhealthy", "TooManyInFlight", "Cooldown"}

// sameSay: a refusal for reason o was already said for r. "Another fence
// in flight" and "cooldown" both mean the guard paces fences; a node that
// waits its turn flips between them as fences start and end, and a new
// Event for every flip says nothing new.
func (r RefusalReason) sameSay(o RefusalReason) bool {
	paced := func(x RefusalReason) bool { return x == RefuseInFlight || x == RefuseCooldown }
	return r == o || (paced(r) && paced(o))
}

func (r RefusalReason) String() string {
	if r < numRefusalReasons {
		return refusalNames[r]
	}
	return "?"
}

// Refusal is the storm guard's verdict with the numbers behind it. The zero
// value admits.
type Refusal struct {
	Reason    RefusalReason
	Zone      string
	Unhealthy int
	Nodes     int
	Limit     float64
	InFlight  int
	Wait      time.Duration
}

// Admitted reports whether the guard let the fence through.
func (r Refusal) Admitted() bool { return r.Reason == Admitted }

func (r Refusal) String() string {
	switch r.Reason {
	case Admitted:
		return "admitted"
	case RefuseAPIStale:
		return fmt.Sprintf("our view of the API server is %s old (limit %s); a stale view makes live nodes look dead", r.Wait, time.Duration(r.Limit))
	case RefuseClusterUnhealthy:
		return fmt.Sprintf("%d of %d nodes are unhealthy (at least %.0f%%): a storm or a partition, not a node failure", r.Unhealthy, r.Nodes, r.Limit*100)
	case RefuseZoneUnhealthy:
		return fmt.Sprintf("%d of %d nodes in zone %q are unhealthy (at least %.0f%%): a storm or a partition, not a node failure", r.Unhealthy, r.Nodes, r.Zone, r.Limit*100)
	case RefuseInFlight:
		return fmt.Sprintf("%d fences of this kind already in flight (limit %d)", r.InFlight, int(r.Limit))
	case RefuseCooldown:
		return fmt.Sprintf("another fence started recently; cooldown ends in %s", r.Wait)
	}
	return r.Reason.String()
}

// Admit is the storm guard for a new fence (docs/design.md §2, invariant 6): the
// absolute part (StillSafe), then the limits on fences at once and the
// cooldown.
func Admit(p Policy, f FleetView, now time.Time) Refusal {
	if r := StillSafe(p, f, now); !r.Admitted() {
		return r
	}
	if f.InFlight >= p.MaxConcurrentFences {
		return Refusal{Reason: RefuseInFlight, InFlight: f.InFlight, Limit: float64(p.MaxConcurrentFences)}
	}
	if !f.LastFenceAt.IsZero() {
		if since := now.Sub(f.LastFenceAt); since < p.Cooldown {
			return Refusal{Reason: RefuseCooldown, Wait: p.Cooldown - since}
		}
	}
	return Refusal{}
}

// AdmitPowerLoss is the storm guard for a fence whose BMC reads exactly Off
// (a power loss: a tripped PDU, a pulled cord): a fresh view of the API
// server, and fewer than MaxConcurrentPowerLossFences such fences in flight.
// No storm fraction, no cooldown, no MaxConcurrentFences: what a partition
// can fake is a silent Lease over a machine that runs, and such a machine's
// BMC reads On (or does not answer), never Off. The Off itself proves
// nothing yet (a restart's off-dwell reads Off too): the fence still sends
// our own ForceOff, needs it accepted and a settled Off run after it, and
// the Lease silent throughout before any taint.
func AdmitPowerLoss(p Policy, f FleetView, now time.Time) Refusal {
	if r := Fresh(p, f, now); !r.Admitted() {
		return r
	}
	if f.InFlightPowerLoss >= p.MaxConcurrentPowerLossFences {
		return Refusal{Reason: RefuseInFlight, InFlight: f.InFlightPowerLoss, Limit: float64(p.MaxConcurrentPowerLossFences)}
	}
	return Refusal{}
}

// Fresh is the guard's first and absolute check: our view of the API
// server was proven fresh within MaxAPIStaleness. A stale view makes live
// nodes look dead, whatever their BMCs say.
func Fresh(p Policy, f FleetView, now time.Time) Refusal {
	if age := now.Sub(f.APIFreshAt); f.APIFreshAt.IsZero() || age > p.MaxAPIStaleness {
		if f.APIFreshAt.IsZero() {
			age = 0
		}
		return Refusal{Reason: RefuseAPIStale, Wait: age, Limit: float64(p.MaxAPIStaleness)}
	}
	return Refusal{}
}

// StillSafe is the part of the storm guard no fence may pass, a human's
// included, and that every later power-off and taint of an admitted fence
// checks again: a fresh view of the API server (a stale one makes live nodes
// look dead, so it comes first: the counts themselves are not to be trusted)
// and no storm or partition in the cluster or any zone.
func StillSafe(p Policy, f FleetView, now time.Time) Refusal {
	if r := Fresh(p, f, now); !r.Admitted() {
		return r
	}
	if storm(p, f.Unhealthy, f.Nodes) {
		return Refusal{Reason: RefuseClusterUnhealthy, Unhealthy: f.Unhealthy, Nodes: f.Nodes, Limit: p.MaxUnhealthyFraction}
	}
	for _, z := range f.Zones {
		if storm(p, z.Unhealthy, z.Nodes) {
			return Refusal{Reason: RefuseZoneUnhealthy, Zone: z.Zone, Unhealthy: z.Unhealthy, Nodes: z.Nodes, Limit: p.MaxUnhealthyFraction}
		}
	}
	return Refusal{}
}

// storm: at least the allowed fraction unhealthy, and at least
// StormMinUnhealthy nodes, so one dead node in a small zone is a failure to
// fence rather than a storm to sit out. It compares as the node lifecycle
// controller does (notReady > 2 && notReady/nodes >= threshold, with
// StormMinUnhealthy 3 by default), so the two stop at the same count.
func storm(p Policy, unhealthy, nodes int) bool {
	return nodes > 0 && unhealthy >= p.StormMinUnhealthy && float64(unhealthy) >= p.MaxUnhealthyFraction*float64(nodes)
}
