//go:build !bmcfast

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/inventory"
	"github.com/bmcfence/bmcfence/internal/power"
)

func newPowerCmd(s streams, k *kubeFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "power",
		Short: "Read or change a node's power through its inventory entry",
		Long: `Power operations on a node's BMC, found through the agent's inventory (the
same Secrets, CA and identity check). "off" is a hard off confirmed by a
settled Off read-back, like "bmc off". Powering a node off here does not fence
it: use "kubectl fence fence" for that.`,
		Example: `  kubectl fence power status worker-3
  kubectl fence power off worker-3 --yes
  kubectl fence power cycle worker-3`,
	}
	cmd.AddCommand(
		newPowerOpCmd(s, k, "status", "Read the node's power state", "  kubectl fence power status worker-3 -o json"),
		newPowerOpCmd(s, k, "on", "Power the node on", "  kubectl fence power on worker-3 --wait"),
		newPowerOpCmd(s, k, "off", "Hard power-off, confirmed by a settled Off read-back", "  kubectl fence power off worker-3 --yes"),
		newPowerOpCmd(s, k, "cycle", "Power off (confirmed), then on", "  kubectl fence power cycle worker-3"),
	)
	return cmd
}

func newPowerOpCmd(s streams, k *kubeFlags, op, short, example string) *cobra.Command {
	var yes, dryRun, wait bool
	var sf settleFlags
	out := outTable
	cmd := &cobra.Command{
		Use:     op + " NODE",
		Short:   short,
		Example: example,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			node := args[0]
			sess, err := openView(ctx, k)
			if err != nil {
				return err
			}
			if _, err := sess.getNode(ctx, node); err != nil {
				return err
			}
			c, err := sess.inv.Lookup(node)
			if err != nil {
				return withCode(exitUnsupported, err)
			}
			if op == "status" {
				st, err := c.PowerStatus(ctx)
				if err != nil {
					return err
				}
				return printReport(s, out, power.Report{Address: c.Target.Address.String(), System: c.Target.System, Action: "status", PowerState: st.State, Confirmed: true})
			}
			if dryRun {
				return printReport(s, out, power.Report{Address: c.Target.Address.String(), System: c.Target.System, Action: op + " (dry run: nothing sent)"})
			}
			if op != "on" {
				if err := verifyIdentity(ctx, c); err != nil {
					return err
				}
			}
			if err := confirm(s, yes, fmt.Sprintf("Power %s node %s (%s)?", op, node, c.Target.Address)); err != nil {
				return err
			}
			r, err := powerOp(cmd, c, op, sf, wait, newProgress(s))
			r.Address, r.System = c.Target.Address.String(), c.Target.System
			if perr := printReport(s, out, r); perr != nil {
				return perr
			}
			return err
		},
	}
	if op != "status" {
		cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
		cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what would be sent; send nothing")
	}
	if op == "off" || op == "cycle" {
		sf.register(cmd.Flags(), "power-timeout", fence.DefaultPolicy().PowerTimeout)
	}
	if op == "on" || op == "cycle" {
		cmd.Flags().BoolVar(&wait, "wait", op == "cycle", "wait until the BMC reads On")
	}
	cmd.Flags().VarP(&out, "output", "o", "output format: table, json or yaml")
	return cmd
}

// verifyIdentity refuses (exitRefused) a BMC that does not prove it is the
// node's machine: never power off a machine that may not be this node.
func verifyIdentity(ctx context.Context, c *inventory.Controller) error {
	err := c.Verify(ctx)
	if errors.Is(err, inventory.ErrIdentity) {
		return withCode(exitRefused, fmt.Errorf("refusing to power off: %w", err))
	}
	return err
}

// powerOnNode powers the machine on, within the default policy's limit.
func powerOnNode(ctx context.Context, c bmc.Controller, wait bool, prog progress) (power.Report, error) {
	p := fence.DefaultPolicy()
	return power.On(ctx, c, wait, p.PowerOnTimeout, p.PowerPollInterval, prog.say)
}

func powerOp(cmd *cobra.Command, c bmc.Controller, op string, sf settleFlags, wait bool, prog progress) (power.Report, error) {
	ctx := cmd.Context()
	switch op {
	case "on":
		return powerOnNode(ctx, c, wait, prog)
	case "off", "cycle":
		p, err := sf.policy()
		if err != nil {
			return power.Report{Action: op}, err
		}
		r, err := power.OffConfirmed(ctx, c, p, prog.say)
		if err != nil || op == "off" {
			return r, err
		}
		start := time.Now()
		on, err := powerOnNode(ctx, c, wait, prog)
		on.Action, on.Elapsed = "cycle", time.Since(start).Round(time.Millisecond).String()
		return on, err
	}
	return power.Report{}, usageError("unknown power operation %q", op)
}
