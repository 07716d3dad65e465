package fence

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMaintenanceExpiredIsSaid: a maintenance mark whose duration passed (on
// the agent's clock: the observation builder judges it) ends maintenance
// like a removed mark, and the engine says so in a Warning Event, once; the
// transition's note tells the two apart for `kubectl fence status`.
func TestMaintenanceExpiredIsSaid(t *testing.T) {
	d := newDriver(t)
	d.step(tick(view(maintenance()), at(sec(100))), at(sec(100)))
	d.wantPhase(Maintenance)
	expired := view(heartbeat(sec(690)), func(n *NodeView) { n.MaintenanceExpired = true })
	out := d.step(tick(expired, at(sec(700))), at(sec(700)))
	d.wantPhase(Healthy)
	if diff := cmp.Diff([]string{"FenceMaintenanceExpired"}, eventReasons(out)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if r := lastTransition(d.s); r.From != Maintenance || r.Note != NoteMaintenanceExpired {
		t.Errorf("last transition %+v, want from Maintenance noted %q", r, NoteMaintenanceExpired)
	}
	expired.HeartbeatAt, expired.RenewedAt = at(sec(725)), at(sec(725))
	if out := d.step(tick(expired, at(sec(730))), at(sec(730))); len(eventReasons(out)) != 0 {
		t.Errorf("said again: %v", eventReasons(out))
	}
	// A removed mark is no expiry.
	d = newDriver(t)
	d.step(tick(view(maintenance()), at(sec(100))), at(sec(100)))
	out = d.step(tick(view(heartbeat(sec(690))), at(sec(700))), at(sec(700)))
	if len(eventReasons(out)) != 0 || lastTransition(d.s).Note == NoteMaintenanceExpired {
		t.Errorf("a removed mark reported as expired: %v", eventReasons(out))
	}
}

func lastTransition(s State) Record {
	recs := s.Evidence.Records()
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Kind == RecTransition {
			return recs[i]
		}
	}
	return Record{}
}
