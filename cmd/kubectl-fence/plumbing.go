//go:build !bmcfast

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/bmcfence/bmcfence/internal/version"
)

// addKlogVerbosity adds kubectl's -v/--v: client-go's request logging
// (-v=6 shows every request, -v=8 the bodies), on stderr.
func addKlogVerbosity(fs *pflag.FlagSet) {
	gfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gfs)
	if f := gfs.Lookup("v"); f != nil {
		pf := pflag.PFlagFromGoFlag(f)
		pf.Shorthand = "v"
		pf.Usage = "number for the log level verbosity of the Kubernetes client (6: requests, 8: bodies)"
		fs.AddFlag(pf)
	}
}

// quietKlog silences client-go's own log (klog) unless -v asks for it:
// its reflectors print a line per failed retry, which buried the one line
// that said what was wrong; the command reports errors itself.
func quietKlog(cmd *cobra.Command) {
	if f := cmd.Flags().Lookup("v"); f != nil && f.Changed {
		return
	}
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
}

// positiveDurations refuses a zero or negative value for any duration flag
// given on the command line: every duration flag is a timeout, a window or
// an interval, and "--timeout -1s" is a typo, never a wish.
func positiveDurations(cmd *cobra.Command) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if err != nil || f.Value.Type() != "duration" {
			return
		}
		if d, perr := time.ParseDuration(f.Value.String()); perr == nil && d <= 0 {
			err = usageError("--%s %s: must be positive", f.Name, f.Value.String())
		}
	})
	return err
}

// completeNodeNames completes NODE arguments with the cluster's node names
// (kubectl fence fence <TAB>), read with the same connection flags.
func completeNodeNames(cmd *cobra.Command, k *kubeFlags) {
	for _, sub := range cmd.Commands() {
		completeNodeNames(sub, k)
	}
	if !strings.Contains(cmd.Use, "NODE") || cmd.ValidArgsFunction != nil {
		return
	}
	many := strings.Contains(cmd.Use, "NODE...")
	cmd.ValidArgsFunction = func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 && !many {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names, err := nodeNames(k)
		if err != nil {
			cobra.CompDebugln("node names: "+err.Error(), true)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		taken := map[string]bool{}
		for _, a := range args {
			taken[a] = true
		}
		var out []cobra.Completion
		for _, n := range names {
			if strings.HasPrefix(n, toComplete) && !taken[n] {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completionTimeout keeps a <TAB> on an unreachable cluster short.
const completionTimeout = 5 * time.Second

func nodeNames(k *kubeFlags) ([]string, error) {
	rc, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	rc.Timeout = completionTimeout
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	return names, nil
}

func newVersionCmd(s streams) *cobra.Command {
	out := outTable
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of kubectl fence",
		Example: `  kubectl fence version
  kubectl fence version -o json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := version.Get()
			return printObject(s.Out, out, v, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "kubectl-fence %s\n", v)
			})
		},
	}
	cmd.Flags().VarP(&out, "output", "o", "output format: table, json or yaml")
	return cmd
}
