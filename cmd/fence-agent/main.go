// Command fence-agent is the bmcfence agent: a leader-elected DaemonSet on
// control-plane nodes that fences dead nodes through their BMCs (see
// internal/agent). Configuration: a YAML file (--config), BMCFENCE_*
// environment variables and flags, in rising precedence.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/zapr"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned/typed/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/internal/agent"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/goruntime"
	"github.com/bmcfence/bmcfence/internal/kube"
	"github.com/bmcfence/bmcfence/internal/memlimit"
	"github.com/bmcfence/bmcfence/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK       = 0
	exitFailed   = 1 // could not start or run (no cluster, port taken)
	exitProblems = 1 // validate: the cluster lacks what the configuration names (Secrets, CA ConfigMaps)
	exitUsage    = 2 // bad flags or configuration: nothing was started (validate: the same)
)

const usageHead = `Usage:
  fence-agent [flags]                     run the agent
  fence-agent validate --config FILE      check a configuration and exit (and, when a
                                          cluster is reachable, the inventory's Secrets
                                          and CA ConfigMaps); exit 0 valid, 2 the
                                          configuration (or a flag) is wrong, 1 the
                                          cluster lacks what it names
  fence-agent --version

Configuration: --config FILE < BMCFENCE_* environment variables < flags.
Every flag or configuration error is one line on stderr and exit status 2.

Flags:
`

func newFlagSet(stderr io.Writer) (*pflag.FlagSet, *bool) {
	fs := pflag.NewFlagSet("fence-agent", pflag.ContinueOnError)
	// pflag prints nothing itself with ContinueOnError; run says it in one
	// line, and --help prints the usage.
	fs.SetOutput(io.Discard)
	config.RegisterFlags(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() { fmt.Fprint(stderr, usageHead+fs.FlagUsages()) }
	return fs, showVersion
}

func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	validate := len(args) > 0 && args[0] == "validate"
	if validate {
		args = args[1:]
	}
	fs, showVersion := newFlagSet(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitOK // pflag printed the usage (fs.Usage)
		}
		fmt.Fprintf(stderr, "fence-agent: %v%s (fence-agent --help lists the flags)\n", err, suggestFlag(fs, err))
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fence-agent: unexpected argument %q: the only command is \"validate\", first (fence-agent --help)\n", fs.Arg(0))
		return exitUsage
	}
	if *showVersion {
		fmt.Fprintln(stdout, "fence-agent", version.Get())
		return exitOK
	}
	if validate {
		return runValidate(ctx, fs, environ, stdout, stderr)
	}
	cfg, err := config.Load(fs, environ)
	if err != nil {
		printErrors(stderr, "fence-agent: ", err)
		return exitUsage
	}
	log, err := logger(cfg.Log)
	if err != nil {
		fmt.Fprintf(stderr, "fence-agent: %v\n", err)
		return exitUsage
	}
	defer func() { _ = log.Sync() }()
	// client-go logs through klog (reflectors, leader election): into the
	// same structured log.
	klog.SetLogger(zapr.NewLogger(log.Named("client-go")))
	// The memory budget (internal/memlimit): GOMEMLIMIT, else 90% of the
	// container's limit; the DaemonSet sets GOMEMLIMIT (docs/design.md,
	// "Memory budget").
	if budget, err := memlimit.Apply(environ, "/"); err != nil {
		log.Warn("no memory budget: the container's limit could not be read", zap.Error(err))
	} else {
		log.Info("memory budget", zap.String("soft limit", budget.String()))
	}
	// One P and GOGC 20 unless the environment says otherwise
	// (internal/goruntime): the agent at rest is small wake-ups, not work
	// for two cores.
	log.Info("Go runtime", zap.String("settings", goruntime.Apply(environ).String()))
	restCfg, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		log.Error("cannot reach the cluster", zap.Error(err))
		return exitFailed
	}
	restCfg.UserAgent = "bmcfence-agent/" + version.Get().Version
	// client-go's default (5 requests/s, bursts of 10) serialises a
	// correlated failure: a rack of 100 nodes fenced together needs about
	// ten writes each (state, taint, Events, pod deletions), 200 s at 5/s;
	// at 50/s the scale harness's 100 power losses took 59 s to taint, at
	// 100/s 33 s (make scale).
	// At rest the agent makes well under one request a second (informers
	// watch), so the higher ceiling costs nothing there; the API server's
	// priority and fairness still bounds it.
	restCfg.QPS, restCfg.Burst = apiQPS, apiBurst
	client, err := kube.NewForConfig(withProtobuf(restCfg))
	if err != nil {
		log.Error("cannot build a client", zap.Error(err))
		return exitFailed
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		log.Error("cannot build a client", zap.Error(err))
		return exitFailed
	}
	a, err := agent.New(cfg, log, client, agent.WithDynamic(dyn))
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return exitFailed
	}
	fencing, err := fencingclient.NewForConfig(restCfg)
	if err != nil {
		log.Error("cannot build a client", zap.Error(err))
		return exitFailed
	}
	a.WithRemediation(fencing, dyn)
	if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("stopped", zap.Error(err))
		return exitFailed
	}
	return exitOK
}

// printErrors writes each error of a joined list on its own line.
func printErrors(w io.Writer, prefix string, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			fmt.Fprintf(w, "%s%s\n", prefix, line)
		}
	}
}

// suggestFlag names the flag a typo most likely meant: "--dryrun" is
// "--dry-run" without its dash, the mistake a DaemonSet's args invite.
func suggestFlag(fs *pflag.FlagSet, err error) string {
	msg := err.Error()
	i := strings.Index(msg, "--")
	if !strings.HasPrefix(msg, "unknown flag") || i < 0 {
		return ""
	}
	typed := strings.Fields(msg[i+2:])
	if len(typed) == 0 {
		return ""
	}
	norm := func(s string) string {
		return strings.ReplaceAll(strings.ReplaceAll(strings.ToLower(s), "-", ""), "_", "")
	}
	want := norm(strings.SplitN(typed[0], "=", 2)[0])
	var found string
	fs.VisitAll(func(f *pflag.Flag) {
		if norm(f.Name) == want {
			found = f.Name
		}
	})
	if found == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean --%s?", found)
}

// withProtobuf is cfg for the built-in types: protobuf on the wire, not
// compressed. The agent lists a thousand nodes' Leases every second: decoding
// them from protobuf instead of JSON takes a fraction of the CPU and
// garbage, and the initial lists of nodes and pods are smaller and faster.
// The API server gzips a response over 128 KiB (a list of a thousand
// Leases) unless asked not to; inflating it was 6 % of the agent's CPU
// profile at rest, for bytes that cross the cluster's own network. The
// project's CRDs and the dynamic client (BareMetalHosts, Machines) speak
// JSON only: they keep cfg.
func withProtobuf(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c.DisableCompression = true
	return c
}

// apiQPS and apiBurst bound the agent's requests to the API server.
const (
	apiQPS   = 100
	apiBurst = 200
)

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}

// logger is JSON for collectors, console on a terminal ("auto").
func logger(c config.Log) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	format := c.Format
	if format == "auto" {
		format = "json"
		if term.IsTerminal(int(os.Stderr.Fd())) {
			format = "console"
		}
	}
	zc := zap.NewProductionConfig()
	if format == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	}
	zc.Level = zap.NewAtomicLevelAt(level)
	zc.DisableStacktrace = true
	return zc.Build()
}
