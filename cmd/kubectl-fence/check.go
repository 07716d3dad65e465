//go:build !bmcfast

package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
	"github.com/bmcfence/bmcfence/internal/preflight"
)

func newCheckCmd(s streams, k *kubeFlags) *cobra.Command {
	out := outTable
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Preflight: can every node be fenced, and does the cluster let the agent do it?",
		Long: `Checks, for every node, that its inventory entry resolves, that its BMC answers
with those credentials and TLS settings, that the BMC's system UUID is the
node's, and reads its power; and, for the cluster, the Kubernetes version
(out-of-service taint GA in 1.28, the manifests need 1.30), the agent's
namespace, ServiceAccount and RBAC, the workloads whose pods tolerate the
out-of-service taint (a fence does not move them), and whether
kube-controller-manager runs with --disable-force-detach-on-timeout (read
from its pod in kube-system where the API shows it, else unknown). Each
finding says what to fix. Exits 1 if any check fails (warnings do not fail
it). The BMCs are reached from where you run this.`,
		Example: `  kubectl fence check
  kubectl fence check -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			// The view's inventory also knows the Nodes (annotations, UUIDs).
			sess, err := openView(ctx, k)
			if err != nil {
				return err
			}
			secrets, configMaps := sess.cfg.Inventory.ReferencedNames()
			results, err := preflight.Run(ctx, preflight.Options{
				ByName: true, SecretNames: secrets, ConfigMapNames: configMaps,
				Client: clientgo.Wrap(sess.client), Inventory: sess.inv, Namespace: sess.cfg.Namespace, Timeout: sess.cfg.BMC.Timeout,
				LeaseName: sess.cfg.LeaderElection.Name, Metal3Namespaces: metal3Namespaces(sess.cfg.Inventory),
				Kured: kuredLock(sess.cfg.PlannedReboots.Kured),
			})
			if err != nil {
				return err
			}
			if err := printObject(s.Out, out, results, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "SCOPE\tCHECK\tSTATUS\tMESSAGE")
				for _, r := range results {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Scope, r.Check, r.Status, r.Message)
				}
			}); err != nil {
				return err
			}
			if preflight.Worst(results) == preflight.StatusFail {
				return withCode(exitFailed, errors.New("some checks failed (see above)"))
			}
			return nil
		},
	}
	cmd.Flags().VarP(&out, "output", "o", "output format: table, json or yaml")
	return cmd
}

// metal3Namespaces are the BareMetalHosts' namespaces the agent reads in
// this cluster, if it reads any here: with inventory.metal3.kubeconfigSecret
// the hosts are in a management cluster, read as that kubeconfig's user,
// whose grants are there (each node's inventory check says what it could
// not read).
func metal3Namespaces(inv config.Inventory) []string {
	if !inv.UsesMetal3() || inv.Metal3.KubeconfigSecret != "" {
		return nil
	}
	return inv.Metal3.Namespaces
}

// kuredLock is the agent config's kured lock, for the preflight.
func kuredLock(k config.Kured) *cluster.KuredLock {
	return &cluster.KuredLock{Namespace: k.Namespace, DaemonSet: k.DaemonSet, Annotation: k.LockAnnotation}
}
