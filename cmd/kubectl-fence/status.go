//go:build !bmcfast

package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/cluster/history"
	"github.com/bmcfence/bmcfence/fence"
)

// nodeStatus is one row of `kubectl fence status`.
type nodeStatus struct {
	Name              string   `json:"name"`
	Ready             string   `json:"ready"`
	LeaseAgeSeconds   *float64 `json:"leaseAgeSeconds,omitempty"`
	PowerState        string   `json:"powerState"`
	Phase             string   `json:"phase"`
	Taint             string   `json:"taint"`
	Maintenance       bool     `json:"maintenance"`
	Excluded          bool     `json:"excluded"`
	Pods              int      `json:"pods"`
	VolumeAttachments int      `json:"volumeAttachments"`
	Blockers          []string `json:"blockers,omitempty"`
	Fenceable         bool     `json:"fenceable"`
	Reason            string   `json:"reason,omitempty"`
}

func newStatusCmd(s streams, k *kubeFlags) *cobra.Command {
	out := outTable
	cmd := &cobra.Command{
		Use:   "status [NODE...]",
		Short: "Show each node's health, live BMC power, fence phase and what blocks detach",
		Long: `For every node (or those named): Ready, the age of its last Lease renewal, the
power state read live from its BMC, its fence phase, whose out-of-service taint
it carries, the pods and VolumeAttachments still bound to it, and whether it
can be fenced (and why not).`,
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
				fmt.Fprintln(w, "NODE\tREADY\tLEASE\tPOWER\tPHASE\tTAINT\tFENCEABLE\tBLOCKERS")
				for _, r := range rows {
					lease := "-"
					if r.LeaseAgeSeconds != nil {
						lease = (time.Duration(*r.LeaseAgeSeconds) * time.Second).String()
					}
					fenceable := "yes"
					if !r.Fenceable {
						fenceable = "no: " + r.Reason
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Ready, lease, r.PowerState, r.Phase, r.Taint, fenceable, dash(strings.Join(r.Blockers, "; ")))
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
		if t, ok := renewed[info.Name]; ok {
			age := time.Since(t).Round(time.Second).Seconds()
			r.LeaseAgeSeconds = &age
		}
		switch {
		case info.State != "":
			if st, err := fence.Decode(info.State); err == nil {
				r.Phase = st.Phase.String()
			} else {
				r.Phase = "unreadable"
			}
		case v.Maintenance:
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
		g.Go(func() error {
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
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, nil
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

// historyView is `kubectl fence history` output.
type historyView struct {
	Node         string     `json:"node"`
	Phase        string     `json:"phase"`
	Since        *time.Time `json:"since,omitempty"`
	FailureStart *time.Time `json:"failureStart,omitempty"`
	TaintedAt    *time.Time `json:"taintedAt,omitempty"`
	By           string     `json:"by,omitempty"`
	Evidence     []record   `json:"evidence"`
	Events       []event    `json:"events"`
	// Records: every fence of the node the agent kept (BMCFenceRecord),
	// newest first; `history NODE RECORD` shows one in full.
	Records []fenceRecord `json:"records"`
}

// fenceRecord is one BMCFenceRecord, as history lists it.
type fenceRecord struct {
	Name        string                   `json:"name"`
	Trigger     string                   `json:"trigger"`
	RequestedBy string                   `json:"requestedBy,omitempty"`
	Reason      string                   `json:"reason,omitempty"`
	Outcome     string                   `json:"outcome,omitempty"`
	Phase       string                   `json:"phase,omitempty"`
	StartedAt   *time.Time               `json:"startedAt,omitempty"`
	FinishedAt  *time.Time               `json:"finishedAt,omitempty"`
	Timeline    []v1alpha1.TimelineEntry `json:"timeline,omitempty"`
}

func toFenceRecord(r v1alpha1.BMCFenceRecord, full bool) fenceRecord {
	out := fenceRecord{Name: r.Name, Trigger: string(r.Spec.Trigger), RequestedBy: r.Spec.RequestedBy, Reason: r.Spec.Reason,
		Outcome: r.Status.Outcome, Phase: r.Status.Phase}
	if r.Status.StartedAt != nil {
		t := r.Status.StartedAt.Time
		out.StartedAt = &t
	}
	if r.Status.FinishedAt != nil {
		t := r.Status.FinishedAt.Time
		out.FinishedAt = &t
	}
	if full {
		out.Timeline = r.Status.Timeline
	}
	return out
}

// nodeRecords lists the node's fence records, newest first.
func nodeRecords(ctx context.Context, sess *session, node string) ([]v1alpha1.BMCFenceRecord, error) {
	list, err := sess.fencing.FencingV1alpha1().BMCFenceRecords().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRecordNode + "=" + node})
	if err != nil {
		return nil, fmt.Errorf("listing the fence records of %s: %w", node, err)
	}
	history.SortNewestFirst(list.Items)
	return list.Items, nil
}

func showRecord(ctx context.Context, s streams, sess *session, out outputFormat, name string) error {
	r, err := sess.fencing.FencingV1alpha1().BMCFenceRecords().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("fence record %s: %w", name, err)
	}
	fr := toFenceRecord(*r, true)
	return printObject(s.Out, out, fr, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "record %s: node %s, %s by %s (%s)\n", fr.Name, r.Spec.NodeName, fr.Trigger, fr.RequestedBy, fr.Reason)
		fmt.Fprintf(w, "outcome %s, phase %s\n", orDash(fr.Outcome), fr.Phase)
		fmt.Fprintln(w, "\nTIME\tKIND\tPHASE\tWHO\tDETAIL")
		for _, e := range fr.Timeline {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format("2006-01-02 15:04:05"), e.Kind, e.Phase, e.Who, e.Message)
		}
	})
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type record struct {
	At     time.Time  `json:"at"`
	Until  *time.Time `json:"until,omitempty"`
	Count  int        `json:"count,omitempty"`
	Kind   string     `json:"kind"`
	Phase  string     `json:"phase"`
	From   string     `json:"from,omitempty"`
	Power  string     `json:"power,omitempty"`
	Action string     `json:"action,omitempty"`
	Note   string     `json:"note,omitempty"`
}

func newHistoryCmd(s streams, k *kubeFlags) *cobra.Command {
	out := outTable
	cmd := &cobra.Command{
		Use:   "history NODE [RECORD]",
		Short: "List a node's past fences, newest first, or show one in full",
		Long: `Every fence of the node the agent recorded (a BMCFenceRecord each: by its own
detection, by NodeHealthCheck or MachineHealthCheck, or by a human), newest
first, with the fence state the agent keeps on the node now (its bounded
evidence: BMC readings, phase transitions, actions and their results, human
commands) and the node's Events. With RECORD, that fence's whole timeline.`,
		Example: `  kubectl fence history worker-3
  kubectl fence history worker-3 -o json
  kubectl fence history worker-3 worker-3-x7k2p`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			node := args[0]
			sess, n, err := openNode(ctx, k, node)
			if err != nil {
				return err
			}
			if len(args) == 2 {
				return showRecord(ctx, s, sess, out, args[1])
			}
			recs, err := nodeRecords(ctx, sess, node)
			if err != nil {
				return err
			}
			st, _, err := nodeState(n)
			if err != nil {
				return err
			}
			h := historyView{Node: node, Phase: st.Phase.String(), By: st.By, Since: opt(st.Since), FailureStart: opt(st.FailureStart), TaintedAt: opt(st.TaintedAt)}
			h.Evidence = []record{}
			for _, r := range st.Evidence.Records() {
				rec := record{At: r.At, Kind: r.Kind.String(), Phase: r.Phase.String(), Note: r.Note}
				switch r.Kind {
				case fence.RecReading:
					rec.Power = r.Power.String()
					if r.Count > 1 {
						rec.Count, rec.Until = r.Count, opt(r.Until)
					}
				case fence.RecTransition:
					rec.From = r.From.String()
				case fence.RecAction, fence.RecResult:
					rec.Action = r.Action.String()
				case fence.RecCommand, fence.RecRefusal:
				}
				h.Evidence = append(h.Evidence, rec)
			}
			h.Events = nodeEvents(ctx, sess, node, time.Time{})
			if h.Events == nil {
				h.Events = []event{}
			}
			h.Records = []fenceRecord{}
			for _, r := range recs {
				h.Records = append(h.Records, toFenceRecord(r, false))
			}
			return printObject(s.Out, out, h, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "node %s: %s", node, h.Phase)
				if h.By != "" {
					fmt.Fprintf(w, " (by %s)", h.By)
				}
				fmt.Fprintln(w)
				fmt.Fprintln(w, "\nTIME\tKIND\tDETAIL")
				for _, r := range h.Evidence {
					fmt.Fprintf(w, "%s\t%s\t%s\n", r.At.Local().Format("15:04:05.000"), r.Kind, describe(r))
				}
				fmt.Fprintln(w, "\nRECORD\tSTARTED\tTRIGGER\tBY\tOUTCOME")
				for _, r := range h.Records {
					started := "-"
					if r.StartedAt != nil {
						started = r.StartedAt.Local().Format("2006-01-02 15:04:05")
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.Name, started, r.Trigger, r.RequestedBy, orDash(r.Outcome))
				}
				fmt.Fprintln(w, "\nTIME\tTYPE\tREASON\tMESSAGE")
				for _, e := range h.Events {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", e.Time.Local().Format("15:04:05"), e.Type, e.Reason, e.Message)
				}
			})
		},
	}
	cmd.Flags().VarP(&out, "output", "o", "output format: table, json or yaml")
	return cmd
}

func describe(r record) string {
	switch r.Kind {
	case "reading":
		s := "BMC reads " + r.Power
		if r.Note != "" {
			s = "BMC read: " + r.Note
		}
		if r.Count > 1 {
			s += fmt.Sprintf(" (x%d until %s)", r.Count, r.Until.Local().Format("15:04:05"))
		}
		return s
	case "transition":
		return fmt.Sprintf("%s → %s: %s", r.From, r.Phase, r.Note)
	case "action":
		return r.Action
	case "result":
		return r.Action + ": " + r.Note
	default:
		return r.Note
	}
}

func opt(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
