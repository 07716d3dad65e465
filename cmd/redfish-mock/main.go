// Command redfish-mock serves bmcfence's Redfish mock (package
// bmc/redfishmock): N computer systems with a realistic power state machine,
// fault injection, and a control API under /mock/.
//
// On start it prints exactly one line to stdout,
//
//	redfish-mock: serving N systems on https://127.0.0.1:PORT
//
// so scripts can read the address (--listen 127.0.0.1:0 picks a free port).
// It stops cleanly on SIGINT or SIGTERM. Bad flags or config: one line on
// stderr, exit status 2.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/internal/version"
)

const passwordEnv = "REDFISH_MOCK_PASSWORD"

// maxSystems bounds the mock's system table. The mock holds 1000 systems in
// 1.3 MiB (bmc/redfishmock TestMemoryOf1000Systems); ten thousand, a fleet
// larger than any test here, stay near 13 MiB.
const maxSystems = 10000

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // could not serve (port taken, certificate unreadable at run time)
	exitUsage = 2 // bad flags or config
)

// usageError marks errors that are the caller's to fix (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

type options struct {
	listen       string
	systems      int
	username     string
	password     string
	passwordFile string
	useTLS       bool
	certFile     string
	keyFile      string
	writeCA      string
	configFile   string
	logLevel     string
	showVersion  bool

	timing         redfishmock.Timing
	faults         redfishmock.Faults
	profile        string
	authMode       string
	seed           int64
	maxSessions    int
	sessionTimeout time.Duration
	events         redfishmock.EventsConfig
}

func newFlagSet(o *options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("redfish-mock", pflag.ContinueOnError)
	fs.SortFlags = false
	def := redfishmock.DefaultTiming()

	fs.StringVar(&o.listen, "listen", "127.0.0.1:8443", "address to serve on; 127.0.0.1:0 picks a free port")
	fs.IntVar(&o.systems, "systems", 1, "number of computer systems (Ids 1..N); with --config, extends the file's list")
	fs.StringVar(&o.username, "username", "admin", "administrator username")
	fs.StringVar(&o.password, "password", "", "administrator password (prefer --password-file or $"+passwordEnv+": argv is visible to every local user)")
	fs.StringVar(&o.passwordFile, "password-file", "", "file holding the administrator password (trailing newline ignored)")
	fs.BoolVar(&o.useTLS, "tls", true, "serve HTTPS")
	fs.StringVar(&o.certFile, "cert", "", "TLS certificate PEM file (default: a fresh self-signed certificate)")
	fs.StringVar(&o.keyFile, "key", "", "TLS private key PEM file, with --cert")
	fs.StringVar(&o.writeCA, "write-ca", "", "write the served certificate (PEM) to this file, for clients to verify TLS")
	fs.StringVar(&o.configFile, "config", "", "YAML config file (see configs/redfish-mock.example.yaml); flags given explicitly override it")

	fs.DurationVar(&o.timing.PowerOn, "power-on-time", def.PowerOn, "how long a system reads PoweringOn")
	fs.DurationVar(&o.timing.PowerOff, "power-off-time", def.PowerOff, "how long a ForceOff reads PoweringOff")
	fs.DurationVar(&o.timing.GracefulShutdown, "graceful-shutdown-time", def.GracefulShutdown, "how long a GracefulShutdown reads PoweringOff")
	fs.DurationVar(&o.timing.RestartOff, "restart-off-time", def.RestartOff, "how long a restart reads Off before PoweringOn")

	fs.DurationVar(&o.faults.Latency, "latency", 0, "default fault: latency added to every request")
	fs.Float64Var(&o.faults.ErrorRate, "error-rate", 0, "default fault: fraction (0..1) of requests answered 500/503")
	fs.BoolVar(&o.faults.ConflictWhenOff, "conflict-when-off", false, "default fault: 409 on ForceOff/GracefulShutdown when already Off")
	fs.BoolVar(&o.faults.IgnoreCommands, "ignore-commands", false, "default fault: accept every Reset with 204 and do nothing")
	fs.BoolVar(&o.faults.IgnoreDuringTransition, "ignore-during-transition", false, "default fault: ignore Resets sent while a transition is under way")
	fs.BoolVar(&o.faults.PowerOnFails, "power-on-fails", false, "default fault: PoweringOn falls back to Off")
	fs.StringVar(&o.profile, "profile", string(redfishmock.ProfileGeneric), "vendor behaviour of every system: "+profileNames()+" (see the redfishmock package documentation)")
	fs.StringVar(&o.authMode, "auth-mode", "both", "authentication the service takes: both, basic-only (no SessionService) or session-only (HTTP Basic refused)")
	fs.Int64Var(&o.seed, "seed", 1, "seed of the error-rate RNG")
	fs.IntVar(&o.maxSessions, "max-sessions", redfishmock.DefaultMaxSessions, "size of the session table")
	fs.DurationVar(&o.sessionTimeout, "session-timeout", redfishmock.DefaultSessionTimeout, "idle timeout of a session")
	fs.DurationVar(&o.events.HeartbeatMinute, "heartbeat-minute", 0, "how long one minute of a subscription's HeartbeatIntervalMinutes lasts (0: a minute; shorten it for tests)")
	fs.DurationVar(&o.events.SSEIdleTimeout, "sse-idle-timeout", 0, "close an SSE stream after this long without data (0: the profile's, iDRAC an hour; negative: never)")

	fs.StringVar(&o.logLevel, "log-level", "info", "log level on stderr: debug (one line per request), info, warn, error")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	return fs
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	var o options
	fs := newFlagSet(&o)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: redfish-mock [flags]\n\n%s", fs.FlagUsages())
			return exitOK
		}
		fmt.Fprintf(stderr, "redfish-mock: %v (see --help)\n", err)
		return exitUsage
	}
	if o.showVersion {
		fmt.Fprintln(stdout, versionString())
		return exitOK
	}
	err := serve(ctx, fs, &o, stdout, stderr, getenv)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, new(usageError)) || errors.Is(err, redfishmock.ErrInvalidConfig):
		fmt.Fprintf(stderr, "redfish-mock: %s\n", oneLine(err))
		return exitUsage
	default:
		fmt.Fprintf(stderr, "redfish-mock: %s\n", oneLine(err))
		return exitError
	}
}

func serve(ctx context.Context, fs *pflag.FlagSet, o *options, stdout, stderr io.Writer, getenv func(string) string) error {
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q; every setting is a --flag", fs.Arg(0))
	}
	logger, err := newLogger(o.logLevel, stderr)
	if err != nil {
		return err
	}
	cfg, err := buildConfig(fs, o, getenv)
	if err != nil {
		return err
	}
	mock, err := redfishmock.New(cfg, redfishmock.WithLogger(logger))
	if err != nil {
		return err
	}
	tlsConfig, caPEM, err := tlsSetup(o)
	if err != nil {
		return err
	}

	listener, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer listener.Close()
	scheme := "http"
	if tlsConfig != nil {
		scheme = "https"
		listener = tls.NewListener(listener, tlsConfig)
	}
	if o.writeCA != "" {
		if caPEM == nil {
			return usagef("--write-ca needs --tls")
		}
		// Written before the address line, so a script that has read the line
		// can use the file at once.
		if err := writeFileAtomic(o.writeCA, caPEM); err != nil {
			return fmt.Errorf("--write-ca: %w", err)
		}
	}

	srv := &http.Server{
		Handler:           mock,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(stderr, "redfish-mock: ", 0),
	}
	// Hung requests (the hang fault) would keep Shutdown waiting forever.
	srv.RegisterOnShutdown(mock.Close)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(listener) }()
	fmt.Fprintf(stdout, "redfish-mock: serving %d systems on %s://%s\n", len(cfg.Systems), scheme, listener.Addr())

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// buildConfig layers the config: built-in defaults, then the --config file,
// then $REDFISH_MOCK_PASSWORD, then flags given explicitly.
func buildConfig(fs *pflag.FlagSet, o *options, getenv func(string) string) (redfishmock.Config, error) {
	cfg := redfishmock.Config{Timing: redfishmock.DefaultTiming()}
	if o.configFile != "" {
		var err error
		if cfg, err = redfishmock.LoadConfig(o.configFile); err != nil {
			return redfishmock.Config{}, err
		}
	}
	set := func(name string) bool { return fs.Changed(name) }

	if cfg.Username == "" || set("username") {
		cfg.Username = o.username
	}
	if env := getenv(passwordEnv); env != "" {
		cfg.Password = env
	}
	switch {
	case set("password") && set("password-file"):
		return redfishmock.Config{}, usagef("--password and --password-file are mutually exclusive")
	case set("password"):
		cfg.Password = o.password
	case set("password-file"):
		data, err := os.ReadFile(o.passwordFile)
		if err != nil {
			return redfishmock.Config{}, usagef("--password-file: %w", err)
		}
		cfg.Password = strings.TrimRight(string(data), "\r\n")
	}
	if cfg.Password == "" {
		return redfishmock.Config{}, usagef("no password: use --password-file, $%s or password: in --config", passwordEnv)
	}

	// Checked before anything is allocated: the count sizes the system
	// table, and --systems 100000000 once took 24 GB before the OOM killer.
	if o.systems > maxSystems {
		return redfishmock.Config{}, usagef("--systems %d: at most %d (a real BMC serves a handful; %d systems already cover a large fleet at ~1.3 KiB each)", o.systems, maxSystems, maxSystems)
	}
	if len(cfg.Systems) > maxSystems {
		return redfishmock.Config{}, usagef("%s lists %d systems: at most %d", o.configFile, len(cfg.Systems), maxSystems)
	}
	switch {
	case o.configFile == "" || len(cfg.Systems) == 0:
		if o.systems < 1 {
			return redfishmock.Config{}, usagef("--systems: %d; serve at least one system", o.systems)
		}
		cfg.Systems = redfishmock.Systems(o.systems)
	case set("systems"):
		if o.systems < len(cfg.Systems) {
			return redfishmock.Config{}, usagef("--systems %d but %s lists %d systems; raise --systems or shorten the list", o.systems, o.configFile, len(cfg.Systems))
		}
		cfg.Systems = append(cfg.Systems, redfishmock.Systems(o.systems-len(cfg.Systems))...)
	}

	if o.configFile == "" || set("profile") {
		p, err := redfishmock.ParseProfile(o.profile)
		if err != nil {
			return redfishmock.Config{}, usagef("--profile: %v", err)
		}
		cfg.Profile = p
		if set("profile") && o.configFile != "" {
			// The flag wins over the file's per-system profiles too.
			for i := range cfg.Systems {
				cfg.Systems[i].Profile = p
			}
		}
	}
	if o.configFile == "" || set("auth-mode") {
		a, err := redfishmock.ParseAuthMode(o.authMode)
		if err != nil {
			return redfishmock.Config{}, usagef("--auth-mode: %v", err)
		}
		cfg.AuthMode = a
	}

	overrides := []struct {
		flag  string
		apply func()
	}{
		{"power-on-time", func() { cfg.Timing.PowerOn = o.timing.PowerOn }},
		{"power-off-time", func() { cfg.Timing.PowerOff = o.timing.PowerOff }},
		{"graceful-shutdown-time", func() { cfg.Timing.GracefulShutdown = o.timing.GracefulShutdown }},
		{"restart-off-time", func() { cfg.Timing.RestartOff = o.timing.RestartOff }},
		{"latency", func() { cfg.Faults.Latency = o.faults.Latency }},
		{"error-rate", func() { cfg.Faults.ErrorRate = o.faults.ErrorRate }},
		{"conflict-when-off", func() { cfg.Faults.ConflictWhenOff = o.faults.ConflictWhenOff }},
		{"ignore-commands", func() { cfg.Faults.IgnoreCommands = o.faults.IgnoreCommands }},
		{"ignore-during-transition", func() { cfg.Faults.IgnoreDuringTransition = o.faults.IgnoreDuringTransition }},
		{"power-on-fails", func() { cfg.Faults.PowerOnFails = o.faults.PowerOnFails }},
		{"seed", func() { cfg.Seed = o.seed }},
		{"max-sessions", func() { cfg.MaxSessions = o.maxSessions }},
		{"session-timeout", func() { cfg.SessionTimeout = o.sessionTimeout }},
		{"heartbeat-minute", func() { cfg.Events.HeartbeatMinute = o.events.HeartbeatMinute }},
		{"sse-idle-timeout", func() { cfg.Events.SSEIdleTimeout = o.events.SSEIdleTimeout }},
	}
	for _, ov := range overrides {
		// Without a file, the flag defaults are the config.
		if o.configFile == "" || set(ov.flag) {
			ov.apply()
		}
	}
	return cfg, nil
}

// tlsSetup returns the server's TLS config and the PEM clients should trust,
// or nils for plain HTTP.
func tlsSetup(o *options) (*tls.Config, []byte, error) {
	if !o.useTLS {
		if o.certFile != "" || o.keyFile != "" {
			return nil, nil, usagef("--cert/--key need --tls")
		}
		return nil, nil, nil
	}
	var (
		cert  tls.Certificate
		caPEM []byte
		err   error
	)
	switch {
	case o.certFile == "" && o.keyFile == "":
		cert, caPEM, err = redfishmock.SelfSignedCert(certHosts(o.listen)...)
		if err != nil {
			return nil, nil, err
		}
	case o.certFile == "" || o.keyFile == "":
		return nil, nil, usagef("--cert and --key go together")
	default:
		if cert, err = tls.LoadX509KeyPair(o.certFile, o.keyFile); err != nil {
			return nil, nil, usagef("--cert/--key: %w", err)
		}
		if caPEM, err = os.ReadFile(o.certFile); err != nil {
			return nil, nil, usagef("--cert: %w", err)
		}
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, caPEM, nil
}

// certHosts names the listen host in the self-signed certificate, besides
// the loopback names.
func certHosts(listen string) []string {
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" {
		return hosts
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return hosts
	}
	for _, h := range hosts {
		if h == host {
			return hosts
		}
	}
	return append(hosts, host)
}

func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level: %q is not debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".redfish-mock-ca-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil { // a certificate is public
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// versionString is stamped by make build like every bmcfence binary
// (internal/version, -ldflags -X), else read from the Go build info.
func versionString() string {
	return "redfish-mock " + version.Get().String()
}

func profileNames() string {
	var names []string
	for _, p := range redfishmock.Profiles() {
		names = append(names, string(p))
	}
	return strings.Join(names, "|")
}

func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
