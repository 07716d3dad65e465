//go:build !bmcfast

package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned"
	"github.com/bmcfence/bmcfence/cluster/history"
	"github.com/bmcfence/bmcfence/cluster/history/timeline"
	"github.com/bmcfence/bmcfence/fence"
)

// historyFormat is history's -o: the common formats, and svg for one
// record.
type historyFormat string

const (
	historyTable historyFormat = historyFormat(outTable)
	historySVG   historyFormat = "svg"
)

func (f *historyFormat) String() string { return string(*f) }
func (f *historyFormat) Type() string   { return "table|json|yaml|svg" }
func (f *historyFormat) Set(v string) error {
	if v == string(historySVG) {
		*f = historySVG
		return nil
	}
	var o outputFormat
	if err := o.Set(v); err != nil {
		return fmt.Errorf("output %q: want table, json, yaml or svg", v)
	}
	*f = historyFormat(o)
	return nil
}

// list is the format of the node's list (never svg: checkHistoryFlags
// refuses it there).
func (f historyFormat) list() outputFormat { return outputFormat(f) }

// checkHistoryFlags refuses, before anything is read, the combinations
// that draw nothing: a picture of one fence needs its record's name.
func checkHistoryFlags(out historyFormat, drawTimeline bool, args []string) error {
	example := "kubectl fence history " + args[0] + " RECORD"
	switch {
	case drawTimeline && out != historyTable:
		return usageError("--timeline draws in the terminal: drop -o %s, or use -o svg for an image", out)
	case len(args) == 2:
		return nil
	case drawTimeline:
		return usageError("--timeline draws one fence: name its record (%s --timeline; %s lists them)", example, "kubectl fence history "+args[0])
	case out == historySVG:
		return usageError("-o svg draws one fence: name its record (%s -o svg; %s lists them)", example, "kubectl fence history "+args[0])
	}
	return nil
}

// showRecord prints one fence record of node: as a table, JSON or YAML,
// drawn on a time axis (timeline), or as SVG. Wall-clock times are in loc.
func showRecord(ctx context.Context, w io.Writer, fencing fencingclient.Interface, node, name string, out historyFormat, drawTimeline bool, loc *time.Location) error {
	r, err := fencing.FencingV1alpha1().BMCFenceRecords().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return usageError("fence record %q not found: kubectl fence history %s lists the node's records", name, node)
	}
	if err != nil {
		return fmt.Errorf("fence record %s: %w", name, err)
	}
	if r.Spec.NodeName != node {
		return usageError("fence record %s is of node %s, not %s: kubectl fence history %s %s", name, r.Spec.NodeName, node, r.Spec.NodeName, name)
	}
	switch {
	case drawTimeline:
		return timeline.Text(w, timeline.Build(*r), loc)
	case out == historySVG:
		return timeline.SVG(w, timeline.Build(*r), loc)
	}
	fr := toFenceRecord(*r, true)
	return printObject(w, out.list(), fr, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "record %s: node %s, %s by %s (%s)\n", fr.Name, r.Spec.NodeName, fr.Trigger, fr.RequestedBy, fr.Reason)
		fmt.Fprintf(w, "outcome %s, phase %s\n", orDash(fr.Outcome), fr.Phase)
		fmt.Fprintln(w, "\nTIME\tKIND\tPHASE\tWHO\tDETAIL")
		for _, e := range fr.Timeline {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.Time.In(loc).Format("2006-01-02 15:04:05"), e.Kind, e.Phase, e.Who, e.Message)
		}
	})
}

// historyView is `kubectl fence history` output.
type historyView struct {
	Node         string     `json:"node"`
	Phase        string     `json:"phase"`
	Since        *time.Time `json:"since,omitempty"`
	FailureStart *time.Time `json:"failureStart,omitempty"`
	TaintedAt    *time.Time `json:"taintedAt,omitempty"`
	By           string     `json:"by,omitempty"`
	// FencedBy: what proved the machine off for its taint (the BMC, a
	// fencing level's PDU outlets, a human); "" before a taint.
	FencedBy string   `json:"fencedBy,omitempty"`
	Evidence []record `json:"evidence"`
	Events   []event  `json:"events"`
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
		// Merge drops the copies older agents stored of each entry.
		out.Timeline = history.Merge(nil, r.Status.Timeline)
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
	out := historyTable
	var drawTimeline bool
	cmd := &cobra.Command{
		Use:   "history NODE [RECORD]",
		Short: "List a node's past fences, newest first, or show one in full, as a table, a timeline or an SVG",
		Long: `Every fence of the node the agent recorded (a BMCFenceRecord each: by its own
detection, by NodeHealthCheck or MachineHealthCheck, or by a human), newest
first, with the fence state the agent keeps on the node now (its bounded
evidence: BMC readings, phase transitions, actions and their results, human
commands) and the node's Events. With RECORD, that fence's whole timeline.

--timeline draws the fence in the terminal: its phases as bars on one time
axis, the BMC's readings as ticks, the two witnesses a taint rests on (the
node's Lease silent on the agent's clock, and a settled Off after our own
ForceOff that the BMC accepted), then every entry with its time after the
start. -o svg writes the same picture as an SVG image, for a postmortem.`,
		Example: `  kubectl fence history worker-3
  kubectl fence history worker-3 -o json
  kubectl fence history worker-3 worker-3-x7k2p
  kubectl fence history worker-3 worker-3-x7k2p --timeline
  kubectl fence history worker-3 worker-3-x7k2p -o svg > fence.svg`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			node := args[0]
			if err := checkHistoryFlags(out, drawTimeline, args); err != nil {
				return err
			}
			sess, n, err := openNode(ctx, k, node)
			if err != nil {
				return err
			}
			if len(args) == 2 {
				return showRecord(ctx, s.Out, sess.fencing, node, args[1], out, drawTimeline, time.Local)
			}
			recs, err := nodeRecords(ctx, sess, node)
			if err != nil {
				return err
			}
			st, _, err := nodeState(n)
			if err != nil {
				return err
			}
			h := historyView{Node: node, Phase: st.Phase.String(), By: st.By, Since: opt(st.Since), FailureStart: opt(st.FailureStart), TaintedAt: opt(st.TaintedAt),
				FencedBy: fencedBy(st)}
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
			return printObject(s.Out, out.list(), h, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "node %s: %s", node, h.Phase)
				if h.By != "" {
					fmt.Fprintf(w, " (by %s)", h.By)
				}
				if h.FencedBy != "" {
					fmt.Fprintf(w, ", fenced by %s", h.FencedBy)
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
	cmd.Flags().VarP(&out, "output", "o", "output format: table, json or yaml; with RECORD also svg (the timeline as an image)")
	cmd.Flags().BoolVar(&drawTimeline, "timeline", false, "with RECORD: draw the fence on a time axis in the terminal")
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
