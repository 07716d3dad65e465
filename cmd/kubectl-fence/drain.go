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
	timeout                                       time.Duration
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
		Long: `Planned maintenance, the safe way. Every pod on the node gets a move that keeps
its workload up, shown before anything changes:

  rollout-restart      a Deployment whose available replicas all sit on the node
                       (or a single replica): new pods surge elsewhere first
  evict                replicas elsewhere: Eviction API, PodDisruptionBudgets honored
  evict-one-at-a-time  StatefulSet pods: each replacement Ready before the next
  skip                 DaemonSet, static and finished pods
  refuse               no controller (--force), local data (--delete-local-data),
                       or no other node can take it (--force)

Then the node is cordoned and marked in maintenance (the bmcfence agent never
fences a node in maintenance), workloads move with bounded parallelism, and the
drain stops at --timeout with a report of what is left and what blocks it.
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
		Reason: f.reason, User: sess.user, Clock: clock.RealClock{},
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
		msg := "%w: %s stays cordoned and in maintenance; run the drain again to continue, or \"kubectl fence undrain %s\""
		if f.powerOff {
			msg += " (not powered off)"
		}
		return fmt.Errorf(msg, derr, node, node)
	case derr != nil && res.PowerOff != nil:
		return fmt.Errorf("drained, but the power-off failed (%s stays in maintenance): %w", node, derr)
	}
	return derr
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
	fmt.Fprintln(w, "POD\tOWNER\tACTION\tTARGET\tREASON")
	for _, pp := range p.Pods {
		action := string(pp.Action)
		if pp.Would != "" {
			action += " (would " + string(pp.Would) + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", pp.Pod, dash(pp.Owner), action, dash(pp.Target), pp.Reason)
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
	fmt.Fprintf(w, "\nDrain of %s %s after %s; the node is cordoned and in maintenance.\n", rep.Node, verdict, rep.Elapsed)
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
	Node      string        `json:"node"`
	PowerOn   *power.Report `json:"powerOn,omitempty"`
	Ready     bool          `json:"ready"`
	Undrained bool          `json:"undrained"`
	Elapsed   string        `json:"elapsed"`
	DryRun    bool          `json:"dryRun,omitempty"`
}

func newUndrainCmd(s streams, k *kubeFlags) *cobra.Command {
	var powerOn, dryRun, yes bool
	var timeout time.Duration
	var reason string
	out := outTable
	cmd := &cobra.Command{
		Use:   "undrain NODE",
		Short: "End maintenance: power on (optional), wait Ready with a fresh lease, uncordon",
		Long: `Ends a drain: optionally powers the node on through its BMC, waits until it is
Ready and its kubelet renews its Lease while we watch (a stale Lease never
counts), then uncordons it and clears the maintenance mark in one write, so
bmcfence watches it again.`,
		Example: `  kubectl fence undrain worker-3 --power-on --yes
  kubectl fence undrain worker-3 --dry-run`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			node := args[0]
			if timeout <= 0 {
				return usageError("--timeout %s: must be positive", timeout)
			}
			sess, n, err := openNode(ctx, k, node)
			if err != nil {
				return err
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
			res := undrainResult{Node: node, DryRun: dryRun}
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
			if err := drain.Undrain(ctx, sess.client, node, opts); err != nil {
				return errors.Join(print(), err)
			}
			res.Undrained = true
			return print()
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&powerOn, "power-on", false, "power the node on through its BMC first (asks first, unless --yes)")
	fs.BoolVarP(&yes, "yes", "y", false, "do not ask before --power-on")
	fs.BoolVar(&dryRun, "dry-run", false, "say what would happen; change nothing")
	fs.DurationVar(&timeout, "timeout", 10*time.Minute, "give up waiting for the node after this long")
	fs.StringVar(&reason, "reason", "", "recorded in the Undrained Event")
	fs.VarP(&out, "output", "o", "output format: table, json or yaml")
	return cmd
}

func undrainTable(w *tabwriter.Writer, r undrainResult, n *corev1.Node, ctrl *inventory.Controller) {
	if r.DryRun {
		m := cluster.InMaintenance(n)
		fmt.Fprintf(w, "Dry run for %s (cordoned: %v, in maintenance: %v); nothing was changed. It would:\n", r.Node, n.Spec.Unschedulable, m)
		if ctrl != nil {
			fmt.Fprintf(w, "  power it on through %s,\n", ctrl.Target.Address)
		}
		fmt.Fprintln(w, "  wait until it is Ready and renews its Lease while watched,")
		if m || n.Spec.Unschedulable {
			fmt.Fprintln(w, "  then uncordon it and clear the maintenance mark.")
		} else {
			fmt.Fprintln(w, "  and have nothing to undo.")
		}
		return
	}
	if p := r.PowerOn; p != nil {
		fmt.Fprintf(w, "Powered on through %s: %s after %s.\n", p.Address, p.PowerState, dash(p.Elapsed))
	}
	switch {
	case r.Undrained:
		fmt.Fprintf(w, "%s is Ready with a fresh Lease; uncordoned, maintenance over (%s).\n", r.Node, r.Elapsed)
	case r.Ready:
		fmt.Fprintf(w, "%s is Ready, but the undrain failed after %s.\n", r.Node, r.Elapsed)
	default:
		fmt.Fprintf(w, "%s did not become Ready with a fresh Lease within %s.\n", r.Node, r.Elapsed)
	}
}
