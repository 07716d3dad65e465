//go:build !bmcfast

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/drain"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/inventory"
	"github.com/bmcfence/bmcfence/internal/power"
)

type drainFlags struct {
	dryRun, force, deleteLocalData, powerOff, yes bool
	timeout, maintenanceFor                       time.Duration
	parallelism                                   int
	reason                                        string
	settle                                        settleFlags
	out                                           outputFormat
}

// drainResult is `drain -o json` when the drain runs (a dry run prints the
// plan alone).
type drainResult struct {
	Plan     drain.Plan    `json:"plan"`
	Report   *drain.Report `json:"report,omitempty"`
	PowerOff *power.Report `json:"powerOff,omitempty"`
}

func newDrainCmd(s streams, k *kubeFlags) *cobra.Command {
	var f drainFlags
	f.out = outTable
	cmd := &cobra.Command{
		Use:   "drain NODE",
		Short: "Move a node's workloads first (per-workload, PDB-aware), then optionally power it off",
		Long: `Planned maintenance, the safe way. Every pod on the node gets a move that never
takes its workload below what its own strategy allows (a Deployment:
replicas - maxUnavailable; a StatefulSet: one pod at a time), shown before
anything changes (KEEPS, and "bound" in -o json):

  rollout-restart      a Deployment that evicting would take below its bound (all
                       its replicas here, one replica, maxUnavailable 0): new pods
                       surge elsewhere first
  evict                replicas elsewhere meet the bound: Eviction API,
                       PodDisruptionBudgets honored
  evict-one-at-a-time  StatefulSet pods, and Deployment pods when only one at a
                       time meets the bound: each replacement available first
  skip                 DaemonSet, static and finished pods
  refuse               no controller (--force), local data: emptyDir, hostPath,
                       local volumes (--delete-local-data), no other node can
                       take it (--force), a paused Deployment it would take
                       below its bound (--force), two PodDisruptionBudgets

Then the node is cordoned and marked in maintenance (the bmcfence agent never
fences a node in maintenance), workloads move with bounded parallelism, and the
drain stops at --timeout with a report of what is left and what blocks it.
While the drain runs, the mark lapses --timeout + 2m after the agent saw it (a
drain that dies does not hold the node); a complete drain makes it last until
undrain (or --maintenance-for). A node that goes down during the drain stops
it and is given back to fencing (mark removed, cordon kept).
With --power-off, a complete drain ends with a hard power-off confirmed by a
settled Off read-back. "kubectl fence undrain" ends the maintenance.`,
		Example: `  # Show the plan only; change nothing
  kubectl fence drain worker-3 --dry-run -o json

  # Drain, then power off for a hardware swap
  kubectl fence drain worker-3 --reason "DIMM swap, OPS-1234" --power-off --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDrain(cmd.Context(), s, k, args[0], f)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&f.dryRun, "dry-run", false, "print the plan only; change nothing")
	fs.BoolVar(&f.force, "force", false, "also move pods without a controller (gone for good) and pods no other node can take (they stay Pending); drain a node that is not Ready")
	fs.BoolVar(&f.deleteLocalData, "delete-local-data", false, "accept losing emptyDir data and moving pods off local PersistentVolumes")
	fs.DurationVar(&f.timeout, "timeout", drain.DefaultTimeout, "stop the drain after this long and report what is left")
	fs.DurationVar(&f.maintenanceFor, "maintenance-for", 0, "after a complete drain, the agent honours the maintenance mark this long after it sees it, then may fence the node again (default: until undrain)")
	fs.IntVar(&f.parallelism, "parallelism", drain.DefaultParallelism, "workloads moved at once (a StatefulSet's pods always go one at a time)")
	fs.StringVar(&f.reason, "reason", "", "why (recorded in the maintenance annotation and Events)")
	fs.BoolVar(&f.powerOff, "power-off", false, "after a complete drain, power the node off through its BMC and confirm a settled Off")
	fs.BoolVarP(&f.yes, "yes", "y", false, "do not ask before --power-off")
	f.settle.register(fs, "power-timeout", fence.DefaultPolicy().PowerTimeout)
	fs.VarP(&f.out, "output", "o", "output format: table, json or yaml")
	return cmd
}

func runDrain(ctx context.Context, s streams, k *kubeFlags, node string, f drainFlags) error {
	if f.timeout <= 0 {
		return usageError("--timeout %s: must be positive", f.timeout)
	}
	if f.parallelism < 1 {
		return usageError("--parallelism %d: at least 1", f.parallelism)
	}
	policy, err := f.settle.policy()
	if err != nil {
		return err
	}
	sess, n, err := openNode(ctx, k, node)
	if err != nil {
		return err
	}
	if err := drainable(n, f.force); err != nil {
		return err
	}
	opts := drain.Options{
		Force: f.force, DeleteLocalData: f.deleteLocalData, Timeout: f.timeout, Parallelism: f.parallelism,
		Reason: f.reason, User: sess.user, Clock: clock.RealClock{}, MaintenanceFor: f.maintenanceFor,
	}
	plan, err := drain.MakePlan(ctx, sess.client, node, opts)
	if err != nil {
		return err
	}
	if f.dryRun || plan.Err() != nil {
		if perr := printObject(s.Out, f.out, plan, func(w *tabwriter.Writer) { planTable(w, plan) }); perr != nil {
			return perr
		}
		if err := plan.Err(); err != nil {
			return withCode(exitRefused, fmt.Errorf("%w; nothing was changed", err))
		}
		return nil
	}

	// Everything that could stop the power-off is checked before the
	// drain, not ten minutes into it.
	var ctrl *inventory.Controller
	if f.powerOff {
		if ctrl, err = powerOffTarget(ctx, sess, node); err != nil {
			return err
		}
		if err := confirm(s, f.yes, fmt.Sprintf("Drain %s, then power it off through %s?", node, ctrl.Target.Address)); err != nil {
			return err
		}
	}
	if f.out == outTable {
		if err := printObject(s.Out, f.out, plan, func(w *tabwriter.Writer) { planTable(w, plan) }); err != nil {
			return err
		}
	}
	prog := newProgress(s)
	opts.Progress = func(p drain.Progress) {
		prog.say("%s  %s: %s %s: %s", p.At.Format("15:04:05"), p.Workload, p.Action, p.State, p.Message)
	}
	rep, derr := drain.Execute(ctx, sess.client, plan, opts)
	res := drainResult{Plan: plan, Report: &rep}
	if derr == nil && f.powerOff {
		r, perr := power.OffConfirmed(ctx, ctrl, policy, prog.say)
		r.Address, r.System = ctrl.Target.Address.String(), ctrl.Target.System
		res.PowerOff = &r
		derr = perr
	}
	if perr := printObject(s.Out, f.out, res, func(w *tabwriter.Writer) { reportTable(w, res) }); perr != nil {
		return perr
	}
	switch {
	case errors.Is(derr, drain.ErrFenced):
		// A fence began after the check above; nothing was changed.
		return withCode(exitRefused, derr)
	case errors.Is(derr, drain.ErrIncomplete):
		return incompleteError(derr, rep, node, f.powerOff)
	case derr != nil && res.PowerOff != nil:
		return fmt.Errorf("drained, but the power-off failed (%s stays in maintenance): %w", node, derr)
	}
	return derr
}

// incompleteError says what an incomplete drain left, and the command
// that goes on from there.
func incompleteError(err error, rep drain.Report, node string, powerOff bool) error {
	var msg string
	switch {
	case rep.Released:
		msg = fmt.Sprintf("%s is not Ready: its maintenance mark was removed, so bmcfence may fence it; it stays cordoned. Once it is back, run the drain again", node)
	case rep.NodeDown:
		// Loud: nothing fences this node until the mark goes.
		return withCode(exitFailed, fmt.Errorf("%w; %s is NOT Ready and still in maintenance, so bmcfence will not fence it until the mark lapses; give it back to fencing now: \"kubectl fence undrain %s --release\"", err, node, node))
	case rep.MaintenanceFor != "":
		msg = fmt.Sprintf("%s stays cordoned, and in maintenance until the mark lapses (%s after bmcfence saw it); run the drain again to continue, or \"kubectl fence undrain %s\"", node, rep.MaintenanceFor, node)
	default:
		msg = fmt.Sprintf("%s stays cordoned and in maintenance; run the drain again to continue, or \"kubectl fence undrain %s\"", node, node)
	}
	if powerOff {
		msg += " (not powered off)"
	}
	return fmt.Errorf("%w: %s", err, msg)
}

// drainable refuses to drain a node a fence is handling, and (without
// --force) a node that is not Ready: its pods cannot leave by eviction, and
// the maintenance mark would stop the agent from fencing a dead node.
func drainable(n *corev1.Node, force bool) error {
	if err := drain.CheckNotFenced(n); errors.Is(err, drain.ErrFenced) {
		return withCode(exitRefused, err)
	} else if err != nil {
		return err
	}
	if !force && !cluster.NodeReady(n) {
		return withCode(exitRefused, fmt.Errorf("node %s is not Ready: its pods cannot leave by eviction, and maintenance would stop bmcfence from fencing it; fence it instead (\"kubectl fence fence %s\"), or pass --force", n.Name, n.Name))
	}
	return nil
}

// powerOffTarget finds the node's BMC and proves it is this node's machine.
func powerOffTarget(ctx context.Context, sess *session, node string) (*inventory.Controller, error) {
	if err := sess.startView(ctx); err != nil {
		return nil, err
	}
	c, err := sess.inv.Lookup(node)
	if err != nil {
		return nil, withCode(exitUnsupported, fmt.Errorf("--power-off: %w", err))
	}
	if err := verifyIdentity(ctx, c); err != nil {
		return nil, fmt.Errorf("--power-off: %w", err)
	}
	return c, nil
}

func planTable(w *tabwriter.Writer, p drain.Plan) {
	fmt.Fprintln(w, "POD\tOWNER\tACTION\tKEEPS\tTARGET\tREASON")
	for _, pp := range p.Pods {
		action := string(pp.Action)
		if pp.Would != "" {
			action += " (would " + string(pp.Would) + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", pp.Pod, dash(pp.Owner), action, pp.Bound, dash(pp.Target), pp.Reason)
	}
	if len(p.Pods) == 0 {
		fmt.Fprintf(w, "(no pods on %s)\n", p.Node)
	}
	for _, warn := range p.Warnings {
		fmt.Fprintf(w, "Warning: %s\n", warn)
	}
}

func reportTable(w *tabwriter.Writer, r drainResult) {
	rep := r.Report
	fmt.Fprintln(w)
	fmt.Fprintln(w, "WORKLOAD\tACTION\tSTATE\tELAPSED\tMESSAGE")
	for _, wl := range rep.Workloads {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", wl.Workload, wl.Action, wl.State, dash(wl.Elapsed), wl.Message)
	}
	if len(rep.Left) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "LEFT ON THE NODE\tOWNER\tBLOCKED BY\tREASON")
		for _, l := range rep.Left {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", l.Pod, dash(l.Owner), dash(strings.Join(l.BlockedBy, ", ")), l.Reason)
		}
	}
	verdict := "complete"
	if !rep.Complete {
		verdict = "INCOMPLETE"
		if rep.TimedOut {
			verdict += " (timed out)"
		}
	}
	state := "the node is cordoned and in maintenance until undrain"
	switch {
	case rep.Released:
		state = "the node is NOT Ready: it stays cordoned, and its maintenance mark was removed so that bmcfence may fence it"
	case rep.NodeDown:
		state = "the node is NOT Ready and still in maintenance: \"kubectl fence undrain " + rep.Node + " --release\" gives it back to fencing"
	case rep.MaintenanceFor != "":
		state = "the node is cordoned, and in maintenance for " + rep.MaintenanceFor + " after bmcfence saw the mark"
	}
	fmt.Fprintf(w, "\nDrain of %s %s after %s; %s.\n", rep.Node, verdict, rep.Elapsed, state)
	if p := r.PowerOff; p != nil {
		state := "NOT confirmed Off"
		if p.Confirmed {
			state = "confirmed " + p.PowerState.String()
		}
		fmt.Fprintf(w, "Power-off through %s: %s after %s.\n", p.Address, state, dash(p.Elapsed))
	}
}

// undrainResult is `undrain -o json`.
type undrainResult struct {
	Node string `json:"node"`
	// InMaintenance: the node carried the maintenance mark. Without it,
	// undrain does nothing.
	InMaintenance bool          `json:"inMaintenance"`
	PowerOn       *power.Report `json:"powerOn,omitempty"`
	Ready         bool          `json:"ready"`
	Undrained     bool          `json:"undrained"`
	// Uncordoned: the drain had cordoned the node, and undrain uncordoned
	// it; KeptCordon says why a cordon stays.
	Uncordoned bool   `json:"uncordoned"`
	KeptCordon string `json:"keptCordon,omitempty"`
	// Released: --release removed the mark without waiting (the cordon
	// stays).
	Released bool   `json:"released,omitempty"`
	Elapsed  string `json:"elapsed"`
	DryRun   bool   `json:"dryRun,omitempty"`
}

func newUndrainCmd(s streams, k *kubeFlags) *cobra.Command {
	var powerOn, dryRun, yes, release bool
	var timeout time.Duration
	var reason string
	out := outTable
	cmd := &cobra.Command{
		Use:   "undrain NODE",
		Short: "End maintenance: power on (optional), wait Ready with a fresh lease, uncordon",
		Long: `Ends a drain: optionally powers the node on through its BMC, waits until it is
Ready and its kubelet renews its Lease while we watch (a stale Lease never
counts), then clears the maintenance mark and, if the drain cordoned the node,
uncordons it, in one write, so bmcfence watches it again. A cordon from before
the drain stays. A node without the maintenance mark is left alone.

--release gives a node back to fencing at once, Ready or not: it removes the
mark and keeps the cordon (for a node that went down in maintenance, which
would never become Ready for an undrain).`,
		Example: `  kubectl fence undrain worker-3 --power-on --yes
  kubectl fence undrain worker-3 --dry-run
  kubectl fence undrain worker-3 --release --yes   # it went down mid-drain`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			node := args[0]
			if timeout <= 0 {
				return usageError("--timeout %s: must be positive", timeout)
			}
			if release && powerOn {
				return usageError("--release and --power-on: --release gives the node back to fencing as it is; power it on afterwards, or undrain without --release")
			}
			sess, n, err := openNode(ctx, k, node)
			if err != nil {
				return err
			}
			if !cluster.InMaintenance(n) {
				// Nothing of ours to undo: its cordon, if any, is someone
				// else's.
				res := undrainResult{Node: node, DryRun: dryRun, Elapsed: "0s"}
				if perr := printObject(s.Out, out, res, func(w *tabwriter.Writer) { undrainTable(w, res, n, nil) }); perr != nil {
					return perr
				}
				if powerOn {
					return withCode(exitRefused, fmt.Errorf("%s is not in maintenance: nothing to undo, and not powered on (\"kubectl fence power on %s\" does that)", node, node))
				}
				return nil
			}
			if release {
				res := undrainResult{Node: node, InMaintenance: true, DryRun: dryRun, Elapsed: "0s"}
				if !dryRun {
					if err := confirm(s, yes, fmt.Sprintf("Give %s back to fencing now? bmcfence may then power it off if it is down; it stays cordoned", node)); err != nil {
						return err
					}
					opts := drain.Options{Reason: reason, User: sess.user, Clock: clock.RealClock{}}
					if res.Released, err = drain.Release(ctx, sess.client, node, opts); err != nil {
						return err
					}
				}
				return printObject(s.Out, out, res, func(w *tabwriter.Writer) {
					if dryRun {
						fmt.Fprintf(w, "Dry run for %s; nothing was changed. It would remove the maintenance mark at once, Ready or not, and keep the cordon: bmcfence may then fence it.\n", node)
						return
					}
					undrainTable(w, res, n, nil)
				})
			}
			var ctrl *inventory.Controller
			if powerOn {
				if err := sess.startView(ctx); err != nil {
					return err
				}
				if ctrl, err = sess.inv.Lookup(node); err != nil {
					return withCode(exitUnsupported, fmt.Errorf("--power-on: %w", err))
				}
			}
			start := time.Now()
			res := undrainResult{Node: node, InMaintenance: true, DryRun: dryRun}
			print := func() error {
				res.Elapsed = time.Since(start).Round(time.Millisecond).String()
				return printObject(s.Out, out, res, func(w *tabwriter.Writer) { undrainTable(w, res, n, ctrl) })
			}
			if dryRun {
				return print()
			}
			// Powering a machine on asks first, as every command that
			// changes a machine's power or a taint does.
			if powerOn {
				if err := confirm(s, yes, fmt.Sprintf("Power %s on through %s, then end its maintenance once it is Ready?", node, ctrl.Target.Address)); err != nil {
					return err
				}
			}
			prog := newProgress(s)
			opts := drain.Options{Timeout: timeout, Reason: reason, User: sess.user, Clock: clock.RealClock{}}
			if powerOn {
				r, err := powerOnNode(ctx, ctrl, true, prog)
				r.Address, r.System = ctrl.Target.Address.String(), ctrl.Target.System
				res.PowerOn = &r
				if err != nil {
					return errors.Join(print(), err)
				}
			}
			prog.say("waiting for %s to be Ready and renew its Lease", node)
			if err := drain.WaitReady(ctx, sess.client, node, opts); err != nil {
				return errors.Join(print(), fmt.Errorf("%w; %s stays cordoned and in maintenance", err, node))
			}
			res.Ready = true
			ur, err := drain.Undrain(ctx, sess.client, node, opts)
			res.InMaintenance, res.Uncordoned, res.KeptCordon = ur.InMaintenance, ur.Uncordoned, ur.KeptCordon
			if err != nil {
				return errors.Join(print(), err)
			}
			res.Undrained = ur.InMaintenance
			return print()
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&powerOn, "power-on", false, "power the node on through its BMC first (asks first, unless --yes)")
	fs.BoolVarP(&yes, "yes", "y", false, "do not ask before --power-on or --release")
	fs.BoolVar(&dryRun, "dry-run", false, "say what would happen; change nothing")
	fs.BoolVar(&release, "release", false, "give the node back to fencing now, Ready or not: remove the maintenance mark, keep the cordon, do not wait (asks first, unless --yes)")
	fs.DurationVar(&timeout, "timeout", 10*time.Minute, "give up waiting for the node after this long")
	fs.StringVar(&reason, "reason", "", "recorded in the Undrained (or MaintenanceReleased) Event")
	fs.VarP(&out, "output", "o", "output format: table, json or yaml")
	return cmd
}

func undrainTable(w *tabwriter.Writer, r undrainResult, n *corev1.Node, ctrl *inventory.Controller) {
	if !r.InMaintenance {
		fmt.Fprintf(w, "%s is not in maintenance (no %s mark): nothing to undo; its cordon, if any, is not the drain's (cordoned: %v).\n",
			r.Node, cluster.AnnotationMaintenance, n.Spec.Unschedulable)
		return
	}
	m, merr := cluster.DecodeMaintenance(n.Annotations[cluster.AnnotationMaintenance])
	ours := merr == nil && m.Cordoned
	if r.DryRun {
		fmt.Fprintf(w, "Dry run for %s (cordoned: %v, in maintenance: true); nothing was changed. It would:\n", r.Node, n.Spec.Unschedulable)
		if ctrl != nil {
			fmt.Fprintf(w, "  power it on through %s,\n", ctrl.Target.Address)
		}
		undo := "remove the maintenance mark"
		switch {
		case !n.Spec.Unschedulable:
		case ours:
			undo += " and uncordon it (the drain cordoned it)"
		default:
			undo += " and leave it cordoned (not the drain's cordon)"
		}
		fmt.Fprintln(w, "  wait until it is Ready and renews its Lease while watched,")
		fmt.Fprintf(w, "  then %s.\n", undo)
		return
	}
	if r.Released {
		fmt.Fprintf(w, "%s is given back to fencing: maintenance mark removed; it stays cordoned.\n", r.Node)
		return
	}
	if p := r.PowerOn; p != nil {
		fmt.Fprintf(w, "Powered on through %s: %s after %s.\n", p.Address, p.PowerState, dash(p.Elapsed))
	}
	switch {
	case r.Undrained && r.Uncordoned:
		fmt.Fprintf(w, "%s is Ready with a fresh Lease; uncordoned, maintenance over (%s).\n", r.Node, r.Elapsed)
	case r.Undrained && r.KeptCordon != "":
		fmt.Fprintf(w, "%s is Ready with a fresh Lease; maintenance over, still cordoned: %s (%s).\n", r.Node, r.KeptCordon, r.Elapsed)
	case r.Undrained:
		fmt.Fprintf(w, "%s is Ready with a fresh Lease; maintenance over (%s).\n", r.Node, r.Elapsed)
	case r.Ready:
		fmt.Fprintf(w, "%s is Ready, but the undrain failed after %s.\n", r.Node, r.Elapsed)
	default:
		fmt.Fprintf(w, "%s did not become Ready with a fresh Lease within %s.\n", r.Node, r.Elapsed)
	}
}
