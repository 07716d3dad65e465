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
	"syscall"

	"github.com/go-logr/zapr"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/bmcfence/bmcfence/internal/agent"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Environ(), os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args, environ []string, stderr io.Writer) int {
	fs := pflag.NewFlagSet("fence-agent", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	config.RegisterFlags(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stderr, "fence-agent", version.Get())
		return 0
	}
	cfg, err := config.Load(fs, environ)
	if err != nil {
		fmt.Fprintf(stderr, "fence-agent: invalid configuration:\n%v\n", err)
		return 2
	}
	log, err := logger(cfg.Log)
	if err != nil {
		fmt.Fprintf(stderr, "fence-agent: %v\n", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	// client-go logs through klog (reflectors, leader election): into the
	// same structured log.
	klog.SetLogger(zapr.NewLogger(log.Named("client-go")))
	restCfg, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		log.Error("cannot reach the cluster", zap.Error(err))
		return 1
	}
	restCfg.UserAgent = "bmcfence-agent/" + version.Get().Version
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		log.Error("cannot build a client", zap.Error(err))
		return 1
	}
	a, err := agent.New(cfg, log, client)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 1
	}
	if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("stopped", zap.Error(err))
		return 1
	}
	return 0
}

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
