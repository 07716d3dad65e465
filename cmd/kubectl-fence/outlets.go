//go:build !bmcfast

package main

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bmcfence/bmcfence/internal/inventory"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
	"github.com/bmcfence/bmcfence/pdu"
)

// outletResult is one outlet's identity test, as verify-outlets prints it.
type outletResult struct {
	Outlet string `json:"outlet"`
	Level  int    `json:"level"`
	PSU    string `json:"psu,omitempty"`
	Result string `json:"result"`
}

func newVerifyOutletsCmd(s streams, k *kubeFlags) *cobra.Command {
	out := outTable
	var yes bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "verify-outlets NODE",
		Short: "Tie a node's PDU outlets to its machine: switch each off in turn while it runs, record the proof",
		Long: `The outlet identity test, for every outlet of the node's fencing levels (levels
in its inventory entry), one at a time: on the running machine, with at least two
power supplies all with input, it switches the outlet off, waits until exactly
one supply reports its input lost while the machine stays On, switches the
outlet back on and waits until the input is back. Each passed test is recorded
in the ConfigMap bmcfence-outlet-proofs in the agent's namespace, which the
agent reads: an outlet counts for fencing only with its proof (or the
allowUnverifiedOutlet opt-in).

The machine keeps running on its other supply; an outlet that feeds another
machine takes one of that machine's supplies for the test's duration, and the
test fails saying so. A machine with a single supply is refused before anything
is switched (exit 13). The PDUs and the BMC are reached from where you run this.`,
		Example: `  kubectl fence verify-outlets worker-3
  kubectl fence verify-outlets worker-3 --yes -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			node := args[0]
			sess, err := openView(ctx, k)
			if err != nil {
				return err
			}
			c, err := sess.inv.Lookup(node)
			if err != nil {
				return fmt.Errorf("%s: %w", node, err)
			}
			outlets := c.Outlets()
			if len(outlets) == 0 {
				return withCode(exitFailed, fmt.Errorf("%s has no PDU outlets: give its inventory entry (or inventory.defaults) levels with outlets first", node))
			}
			m, ok := c.Machine()
			if !ok {
				return withCode(exitUnsupported, fmt.Errorf("%s: its BMC (%s) does not report power supplies, which the test reads: only Redfish does", node, c.Target.Address))
			}
			// Refused before anything is asked or switched: the test would
			// cut a single-supply machine's only power.
			supplies, err := m.PowerSupplies(ctx)
			if err != nil {
				return fmt.Errorf("%s: reading its power supplies: %w", node, err)
			}
			if len(supplies) < 2 {
				return withCode(exitSinglePSU, fmt.Errorf("%s has %d power supply reporting: switching its outlet would power it off; refused (use allowUnverifiedOutlet if you vouch for the outlet)", node, len(supplies)))
			}
			if err := confirm(s, yes, fmt.Sprintf("Switch off each of %s's %d outlets in turn, for seconds each, while it runs on its other supply?", node, len(outlets))); err != nil {
				return err
			}
			p := newBMCProgress(s, out != outTable)
			var results []outletResult
			var failed error
			for _, o := range outlets {
				p.say("testing outlet %s (level %d)", o.Name, o.Level)
				proof, err := pdu.VerifyOutlet(ctx, m, o.Outlet, pdu.VerifyOptions{Poll: time.Second, Timeout: timeout})
				if err == nil {
					err = inventory.RecordOutletProof(ctx, clientgo.Wrap(sess.client), sess.cfg.Namespace, node, proof)
				}
				r := outletResult{Outlet: o.Name, Level: o.Level, PSU: proof.PSU, Result: "proof recorded"}
				if err != nil {
					r.Result = "FAILED: " + err.Error()
					failed = errors.Join(failed, fmt.Errorf("outlet %s: %w", o.Name, err))
				}
				results = append(results, r)
				if errors.Is(err, pdu.ErrSinglePSU) {
					break
				}
			}
			if err := printObject(s.Out, out, results, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "OUTLET\tLEVEL\tPSU\tRESULT")
				for _, r := range results {
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", r.Outlet, r.Level, r.PSU, r.Result)
				}
			}); err != nil {
				return err
			}
			if errors.Is(failed, pdu.ErrSinglePSU) {
				return withCode(exitSinglePSU, failed)
			}
			if failed != nil {
				return withCode(exitFailed, failed)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long each wait (for the input's loss, then its return) may take")
	cmd.Flags().VarP(&out, "output", "o", "output format: table, json or yaml")
	return cmd
}
