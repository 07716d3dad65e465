//go:build !bmcfast

package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/inventory"
)

// nodeStatus is one row of `kubectl fence status`.
type nodeStatus struct {
	Name            string   `json:"name"`
	Ready           string   `json:"ready"`
	LeaseAgeSeconds *float64 `json:"leaseAgeSeconds,omitempty"`
	PowerState      string   `json:"powerState"`
	Phase           string   `json:"phase"`
	Taint           string   `json:"taint"`
	// Maintenance: a maintenance mark is on the node and the agent honours
	// it (the node is never fenced); MaintenanceMark says more.
	Maintenance       bool               `json:"maintenance"`
	MaintenanceMark   *maintenanceStatus `json:"maintenanceMark,omitempty"`
	Excluded          bool               `json:"excluded"`
	Pods              int                `json:"pods"`
	VolumeAttachments int                `json:"volumeAttachments"`
	Blockers          []string           `json:"blockers,omitempty"`
	Fenceable         bool               `json:"fenceable"`
	Reason            string             `json:"reason,omitempty"`
	// EventStream is the leading agent's last word on the node's BMC's
	// power events (its FenceEventStream Event): "connected", or
	// "polling: why"; "" when it said nothing (not a Redfish BMC).
	EventStream string `json:"eventStream,omitempty"`
	// Levels are the node's fencing levels below its BMC (PDU outlets),
	// each read live: whether it answers and has its outlet proofs.
	Levels []levelStatus `json:"levels,omitempty"`
	// FencedBy says what proved the machine off for the taint it carries:
	// its BMC, a fencing level's PDU outlets, or a human's attestation.
	FencedBy string `json:"fencedBy,omitempty"`
}

// levelStatus is one fencing level below the BMC, read live.
type levelStatus struct {
	Level int    `json:"level"`
	Name  string `json:"name"`
	// Power is what its outlets read together ("?" when unreadable).
	Power string `json:"power"`
	// Usable: it answers and every outlet has its identity proof (or the
	// opt-in); else Reason says why not.
	Usable bool   `json:"usable"`
	Reason string `json:"reason,omitempty"`
}

// String is the table's short form: "2:ok", "2:unreachable".
func (l levelStatus) String() string {
	if l.Usable {
		return fmt.Sprintf("%d:ok", l.Level)
	}
	why := l.Reason
	if i := strings.IndexByte(why, ':'); i > 0 {
		why = why[:i]
	}
	return fmt.Sprintf("%d:%s", l.Level, why)
}

// fencedBy says what proved the machine off for the taint a state carries:
// "" before a taint.
func fencedBy(st fence.State) string {
	switch {
	case st.TaintedAt.IsZero():
		return ""
	case st.Attested:
		return "attested by " + st.By
	case st.Last.Level >= 2:
		return fmt.Sprintf("level %d: PDU outlets (%s)", st.Last.Level, st.Target)
	}
	return "level 1: BMC"
}

// maintenanceStatus is a node's maintenance mark: as the drain wrote it,
// and whether the agent found it expired.
type maintenanceStatus struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Since is the writer's clock (a laptop's): shown, never used for the
	// expiry.
	Since *time.Time `json:"since,omitempty"`
	// For is the mark's duration, counted by the agent from when it saw
	// the mark ("" : until undrain).
	For string `json:"for,omitempty"`
	// CordonedByDrain: the drain cordoned the node; undrain uncordons it.
	CordonedByDrain bool `json:"cordonedByDrain"`
	// Expired is the agent's word: the duration passed on its clock, and it
	// may fence the node again (FenceMaintenanceExpired).
	Expired bool `json:"expired,omitempty"`
}

func (m *maintenanceStatus) String() string {
	switch {
	case m == nil:
		return "-"
	case m.Expired:
		return "expired"
	case m.For != "":
		return "for " + m.For
	}
	return "until undrain"
}

// maintenanceOf reads the node's mark; the agent's state (its last
// transition out of Maintenance) says whether it expired.
func maintenanceOf(n *corev1.Node, state string) *maintenanceStatus {
	raw := n.Annotations[cluster.AnnotationMaintenance]
	if raw == "" {
		return nil
	}
	out := &maintenanceStatus{}
	if m, err := cluster.DecodeMaintenance(raw); err == nil {
		out.By, out.Reason, out.CordonedByDrain = m.By, m.Reason, m.Cordoned
		if !m.Since.IsZero() {
			since := m.Since
			out.Since = &since
		}
		if d := m.Expiry(); d > 0 {
			out.For = d.String()
		}
	}
	if st, err := fence.Decode(state); err == nil && st.Phase != fence.Maintenance && out.For != "" {
		recs := st.Evidence.Records()
		for i := len(recs) - 1; i >= 0; i-- {
			if recs[i].Kind == fence.RecTransition {
				out.Expired = recs[i].From == fence.Maintenance && recs[i].Note == fence.NoteMaintenanceExpired
				break
			}
		}
	}
	return out
}

func newStatusCmd(s streams, k *kubeFlags) *cobra.Command {
	out := outTable
	cmd := &cobra.Command{
		Use:   "status [NODE...]",
		Short: "Show each node's health, live BMC power, fence phase and what blocks detach",
		Long: `For every node (or those named): Ready, the age of its last Lease renewal, the
power state read live from its BMC, its fence phase, whose out-of-service taint
it carries, its maintenance mark (until undrain, for a duration the agent
counts from when it saw the mark, or expired), the pods and VolumeAttachments
still bound to it, and whether it can be fenced (and why not).`,
		Example: `  kubectl fence status
  kubectl fence status worker-3 -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			sess, err := openView(ctx, k)
			if err != nil {
				return err
			}
			rows, err := statuses(ctx, sess, args)
			if err != nil {
				return err
			}
			return printObject(s.Out, out, rows, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NODE\tREADY\tLEASE\tPOWER\tPHASE\tTAINT\tMAINTENANCE\tFENCEABLE\tEVENTS\tLEVELS\tBLOCKERS")
				for _, r := range rows {
					lease := "-"
					if r.LeaseAgeSeconds != nil {
						lease = (time.Duration(*r.LeaseAgeSeconds) * time.Second).String()
					}
					fenceable := "yes"
					if !r.Fenceable {
						fenceable = "no: " + r.Reason
					}
					events := dash(r.EventStream)
					if i := strings.IndexByte(events, ':'); i > 0 {
						events = events[:i] // the mode; -o json says why
					}
					levels := "bmc"
					for _, l := range r.Levels {
						levels += "," + l.String()
					}
					if r.FencedBy != "" {
						levels += " (fenced by " + strings.SplitN(r.FencedBy, ":", 2)[0] + ")"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Ready, lease, r.PowerState, r.Phase, r.Taint, r.MaintenanceMark, fenceable, events, levels, dash(strings.Join(r.Blockers, "; ")))
				}
			})
		},
	}
	cmd.Flags().VarP(&out, "output", "o", "output format: table, json or yaml")
	return cmd
}

// statuses builds the rows, reading every BMC concurrently.
func statuses(ctx context.Context, sess *session, names []string) ([]nodeStatus, error) {
	infos := sess.view.Nodes()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	leases, err := sess.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing node Leases: %w", err)
	}
	renewed := map[string]time.Time{}
	for _, l := range leases.Items {
		if l.Spec.RenewTime != nil {
			renewed[l.Name] = l.Spec.RenewTime.Time
		}
	}
	var rows []nodeStatus
	for _, info := range infos {
		if len(names) > 0 && !want[info.Name] {
			continue
		}
		delete(want, info.Name) // what is left in want does not exist
		v := info.View
		r := nodeStatus{
			Name: info.Name, Ready: v.Ready.String(), Phase: fence.Healthy.String(), Taint: taintName(v.Taint),
			Maintenance: v.Maintenance, Excluded: v.Excluded, Pods: v.Pods, VolumeAttachments: v.VolumeAttachments,
			Blockers: v.Blockers, PowerState: "-",
		}
		// The CLI's own view saw every mark just now: whether one expired
		// is the agent's word, read from its state.
		if n, ok := sess.view.NodeObject(info.Name); ok {
			r.MaintenanceMark = maintenanceOf(n, info.State)
			r.Maintenance = r.MaintenanceMark != nil && !r.MaintenanceMark.Expired
		}
		if t, ok := renewed[info.Name]; ok {
			age := time.Since(t).Round(time.Second).Seconds()
			r.LeaseAgeSeconds = &age
		}
		switch {
		case info.State != "":
			if st, err := fence.Decode(info.State); err == nil {
				r.Phase = st.Phase.String()
				r.FencedBy = fencedBy(st)
			} else {
				r.Phase = "unreadable"
			}
		case r.Maintenance:
			// No agent has written a state yet; it would say this.
			r.Phase = fence.Maintenance.String()
		}
		rows = append(rows, r)
	}
	for n := range want {
		return nil, usageError("node %q not found", n)
	}
	// Eight BMCs at a time: a slow one holds one slot, not the table.
	var g errgroup.Group
	g.SetLimit(8)
	for i := range rows {
		r := &rows[i]
		switch {
		case r.Excluded:
			r.Reason = "excluded by label"
			continue
		case r.Maintenance:
			r.Reason = "under maintenance"
		}
		c, err := sess.inv.Lookup(r.Name)
		if err != nil {
			r.Reason = strings.TrimPrefix(err.Error(), "node "+r.Name+": ")
			continue
		}
		for i, l := range c.Levels() {
			r.Levels = append(r.Levels, levelStatus{Level: i + 2, Name: l.Key()})
		}
		g.Go(func() error {
			for i, l := range c.Levels() {
				ls := &r.Levels[i]
				st, err := l.PowerStatus(ctx)
				if err != nil {
					ls.Power, ls.Reason = "?", bmc.Reason(err)+": "+err.Error()
					continue
				}
				ls.Power = st.State.String()
				if err := l.Verify(ctx); err != nil {
					ls.Reason = err.Error()
					if errors.Is(err, inventory.ErrNoOutletProof) {
						ls.Reason = "no proof: " + err.Error()
					}
					continue
				}
				ls.Usable = true
			}
			st, err := c.PowerStatus(ctx)
			if err != nil {
				r.PowerState, r.Reason = "?", bmc.Reason(err)+": "+err.Error()
				return nil // a row's reason, not the table's failure
			}
			r.PowerState = st.State.String()
			if err := c.Verify(ctx); err != nil {
				r.Reason = err.Error()
				return nil
			}
			r.Fenceable = !r.Maintenance
			return nil
		})
	}
	_ = g.Wait() // every func returns nil
	streams := eventStreams(ctx, sess)
	for i := range rows {
		rows[i].EventStream = streams[rows[i].Name]
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, nil
}

// eventStreams reads, per node, the leading agent's latest FenceEventStream
// Event: whether its BMC's power events reach the agent ("connected: ...")
// or it polls only ("polling: why"). One list for the whole table.
func eventStreams(ctx context.Context, sess *session) map[string]string {
	out := map[string]string{}
	list, err := sess.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,reason=FenceEventStream"})
	if err != nil {
		return out
	}
	latest := map[string]time.Time{}
	for _, e := range list.Items {
		t := e.LastTimestamp.Time
		if t.IsZero() {
			t = e.EventTime.Time
		}
		n := e.InvolvedObject.Name
		if prev, ok := latest[n]; ok && !t.After(prev) {
			continue
		}
		latest[n] = t
		msg := e.Message
		if i := strings.Index(msg, " ("); i > 0 && strings.HasPrefix(msg, "connected:") {
			msg = "connected"
		}
		out[n] = msg
	}
	return out
}

func taintName(t fence.TaintState) string {
	switch t {
	case fence.TaintOurs:
		return "ours"
	case fence.TaintForeign:
		return "foreign"
	default:
		return "-"
	}
}

// event is a Node Event, for history and for watching a request.
type event struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
}

// nodeEvents lists the node's Events since a time, oldest first.
func nodeEvents(ctx context.Context, sess *session, node string, since time.Time) []event {
	list, err := sess.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
	if err != nil {
		return nil
	}
	var out []event
	for _, e := range list.Items {
		t := e.LastTimestamp.Time
		if t.IsZero() {
			t = e.EventTime.Time
		}
		if t.Before(since.Add(-time.Second)) {
			continue
		}
		out = append(out, event{Time: t, Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

func opt(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
