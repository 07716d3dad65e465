//go:build !bmcfast

package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/bmcfence/bmcfence/internal/version"
)

// newRoot is the whole CLI. kubectl-fence as make builds it (tag bmcfast,
// root_bmcfast.go) holds only the bmc commands and runs this one, built as
// bmcfence-cli, for everything else.
func newRoot(s streams) *cobra.Command {
	root := &cobra.Command{
		// The binary is kubectl-fence; kubectl runs it as "kubectl fence",
		// and that is what help, usage and errors say.
		Use: "kubectl-fence",
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl fence",
		},
		Short: "Fence dead Kubernetes nodes through their BMCs, safely",
		Long: `kubectl fence powers off, confirms and taints dead nodes the way the bmcfence
agent does, by hand: a node is tainted out-of-service only after its BMC has
read back a settled Off.

` + exitCodesHelp,
		Example: `  kubectl fence status
  kubectl fence fence worker-3 --reason "PSU failed, OPS-1234"
  kubectl fence bmc status --address https://10.0.0.5 --username admin --password-env BMC_PASSWORD`,
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("kubectl-fence {{.Version}}\n")
	// Cobra's own flag errors ("unknown flag") are usage errors.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return withCode(exitUsage, err) })
	var k kubeFlags
	k.register(root.PersistentFlags())
	addKlogVerbosity(root.PersistentFlags())
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		quietKlog(cmd)
		return positiveDurations(cmd)
	}
	root.AddCommand(
		newStatusCmd(s, &k),
		newRequestCmd(s, &k, "fence", "Fence a node: our own ForceOff, confirm Off, taint, wait for detach",
			`The agent's own safe sequence, by hand: read the node's BMC, send our own
ForceOff, always, also when it reads Off (a restart's off-dwell reads Off too,
and an Off we did not cause proves nothing), confirm a settled Off after it
(several exact-Off reads over the settle window), apply the out-of-service
taint, and wait until its pods and volumes have moved, naming whatever blocks. It refuses when the BMC cannot confirm Off, and when the
node is Ready with a fresh heartbeat. When the bmcfence agent runs, the request
goes to it (no race); otherwise this command drives the same engine itself.
A fence already under way (the agent may have begun it) is followed, not
refused: the command waits for its outcome.`,
			`  kubectl fence fence worker-3 --reason "PSU failed, ticket OPS-1234"`, 5*time.Minute),
		newRequestCmd(s, &k, "confirm", "Attest that a node is off when no BMC can say so, and taint it",
			`A human attests the node is off (like Pacemaker's manual ack), for nodes whose
BMC is missing or unreachable. Recorded as evidence with your identity from the
kubeconfig. The node is then tainted out-of-service and its pods move.`,
			`  kubectl fence confirm worker-3 --reason "checked in the DC: powered off, cable pulled"`, 5*time.Minute),
		newRequestCmd(s, &k, "abort", "Stop a fence in flight (no taint if it was not applied yet)",
			`Stops an in-flight fence. Before the taint, nothing is left behind; after it,
the taint stays until "kubectl fence unfence". The node is held (Stuck) until a
human acts or it comes back.`,
			`  kubectl fence abort worker-3 --reason "wrong node"`, time.Minute),
		newRequestCmd(s, &k, "unfence", "Power on (optional), wait Ready with a fresh lease, remove our taint",
			`Ends a fence: optionally powers the node on through its BMC, waits until it is
Ready with a Lease renewed after the fence, then removes the out-of-service
taint if it is ours (someone else's taint is never touched).`,
			`  kubectl fence unfence worker-3 --power-on`, 10*time.Minute),
		newHistoryCmd(s, &k),
		newDrainCmd(s, &k),
		newUndrainCmd(s, &k),
		newPowerCmd(s, &k),
		newCheckCmd(s, &k),
		newVerifyOutletsCmd(s, &k),
		newBMCCmd(s),
		newVersionCmd(s),
	)
	argsAreUsage(root)
	unknownCommandsAreUsage(root)
	completeNodeNames(root, &k)
	return root
}
