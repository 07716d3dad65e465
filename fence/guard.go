package fence

import (
	"fmt"
	"time"
)

// UnhealthyFor is how long the node has looked unhealthy to us: the longer of
// its heartbeat silence and, when Ready is not True, the time since we saw it
// leave True. A node we have not observed yet (zero HeartbeatAt) is never
// taken as unhealthy: absence of observation is not evidence of death.
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
		return fmt.Sprintf("%d of %d nodes are unhealthy (more than %.0f%%): a storm or a partition, not a node failure", r.Unhealthy, r.Nodes, r.Limit*100)
	case RefuseZoneUnhealthy:
		return fmt.Sprintf("%d of %d nodes in zone %q are unhealthy (more than %.0f%%): a storm or a partition, not a node failure", r.Unhealthy, r.Nodes, r.Zone, r.Limit*100)
	case RefuseInFlight:
		return fmt.Sprintf("%d fences already in flight (limit %d)", r.InFlight, int(r.Limit))
	case RefuseCooldown:
		return fmt.Sprintf("another fence started recently; cooldown ends in %s", r.Wait)
	}
	return r.Reason.String()
}

// Admit is the storm guard (invariant 2 in doc.go; docs/design.md §2.6). The API check comes
// first: with a stale view the counts themselves are not to be trusted.
func Admit(p Policy, f FleetView, now time.Time) Refusal {
	if age := now.Sub(f.APIFreshAt); f.APIFreshAt.IsZero() || age > p.MaxAPIStaleness {
		if f.APIFreshAt.IsZero() {
			age = 0
		}
		return Refusal{Reason: RefuseAPIStale, Wait: age, Limit: float64(p.MaxAPIStaleness)}
	}
	if storm(p, f.Unhealthy, f.Nodes) {
		return Refusal{Reason: RefuseClusterUnhealthy, Unhealthy: f.Unhealthy, Nodes: f.Nodes, Limit: p.MaxUnhealthyFraction}
	}
	for _, z := range f.Zones {
		if storm(p, z.Unhealthy, z.Nodes) {
			return Refusal{Reason: RefuseZoneUnhealthy, Zone: z.Zone, Unhealthy: z.Unhealthy, Nodes: z.Nodes, Limit: p.MaxUnhealthyFraction}
		}
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

// storm: more than the allowed fraction unhealthy, and at least
// StormMinUnhealthy nodes, so one dead node in a small zone is a failure to
// fence rather than a storm to sit out.
func storm(p Policy, unhealthy, nodes int) bool {
	return nodes > 0 && unhealthy >= p.StormMinUnhealthy && float64(unhealthy) > p.MaxUnhealthyFraction*float64(nodes)
}
