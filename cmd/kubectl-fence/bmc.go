package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/dial"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/power"
)

// bmcFlags describe one BMC on the command line. There is deliberately no
// flag that takes a password: argv is visible to every user of the machine.
type bmcFlags struct {
	address      string
	system       string
	username     string
	passwordEnv  string
	passwordFile string
	caFile       string
	insecure     bool
	auth         string
	cipherSuite  int
	fallback     int
	chassisPower string
	timeout      time.Duration
}

// cliNames are the flags an adapter's error may ask the operator to change.
var cliNames = bmc.SettingNames{
	CA: "--ca-file", Insecure: "--insecure", System: "--system", Auth: "--auth",
	CipherSuite: "--cipher-suite", CipherSuiteFallback: "--cipher-suite-fallback", ChassisPower: "--chassis-power",
}

func (f *bmcFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.address, "address", "", "BMC address: https://HOST[:PORT] or http://HOST[:PORT] (Redfish), ipmi://HOST[:PORT] (IPMI lanplus)")
	fs.StringVar(&f.system, "system", "", "Redfish system Id or Name (required when the BMC has several)")
	fs.StringVar(&f.username, "username", "", "BMC username")
	fs.StringVar(&f.passwordEnv, "password-env", "", "name of the environment variable holding the BMC password")
	fs.StringVar(&f.passwordFile, "password-file", "", "file holding the BMC password (a trailing newline is ignored)")
	fs.StringVar(&f.caFile, "ca-file", "", "PEM bundle to verify the BMC's certificate (default: system roots)")
	fs.BoolVar(&f.insecure, "insecure", false, "do not verify the BMC's TLS certificate")
	fs.StringVar(&f.auth, "auth", "basic", "Redfish authentication: basic or session")
	fs.IntVar(&f.cipherSuite, "cipher-suite", bmc.DefaultIPMICipherSuite, "IPMI cipher suite: 3 (HMAC-SHA1, AES-128) or 17 (HMAC-SHA256, AES-128); a BMC that does not offer it is refused, never downgraded")
	fs.IntVar(&f.fallback, "cipher-suite-fallback", 0, "IPMI cipher suite to use when the BMC refuses --cipher-suite (e.g. 3 after 17); 0: none")
	fs.StringVar(&f.chassisPower, "chassis-power", string(bmc.ChassisPowerAuto), "Redfish: auto (a system's Off counts only if its chassis agrees, except on HPE's iLO emulator, whose chassis never changes), check (always), or ignore (trust the system's PowerState: sushy-tools with its libvirt or fake driver needs it; never use it with sushy-tools' nova or ironic drivers)")
	fs.DurationVar(&f.timeout, "timeout", bmc.DefaultTimeout, "time limit for each BMC operation")
}

// target builds and validates the BMC target, reading the password from the
// environment or a file.
func (f *bmcFlags) target() (bmc.Target, error) {
	if f.address == "" {
		return bmc.Target{}, usageError("--address is required (https://HOST[:PORT], http://HOST[:PORT] or ipmi://HOST[:PORT])")
	}
	ep, err := bmc.ParseAddress(f.address)
	if err != nil {
		return bmc.Target{}, withCode(exitUsage, err)
	}
	if f.username == "" {
		return bmc.Target{}, usageError("--username is required")
	}
	chassis, err := bmc.ParseChassisPower(f.chassisPower)
	if err != nil {
		return bmc.Target{}, usageError("--chassis-power %q: want auto, check or ignore", f.chassisPower)
	}
	pw, err := readPassword(f.passwordEnv, f.passwordFile)
	if err != nil {
		return bmc.Target{}, err
	}
	t := bmc.Target{
		Address:                 ep,
		System:                  f.system,
		Credentials:             bmc.Credentials{Username: f.username, Password: pw},
		Auth:                    bmc.AuthMode(f.auth),
		InsecureSkipVerify:      f.insecure,
		Timeout:                 f.timeout,
		IPMICipherSuite:         f.cipherSuite,
		IPMICipherSuiteFallback: f.fallback,
		ChassisPower:            chassis,
		Names:                   cliNames,
	}
	if f.caFile != "" {
		if f.insecure {
			return bmc.Target{}, usageError("--ca-file and --insecure contradict each other; pick one")
		}
		pem, err := os.ReadFile(f.caFile)
		if err != nil {
			return bmc.Target{}, usageError("--ca-file: %v", err)
		}
		t.CACertificates = pem
	}
	if err := t.WithDefaults().Validate(); err != nil {
		return bmc.Target{}, withCode(exitUsage, err)
	}
	return t, nil
}

// readPassword takes the password from exactly one of an environment
// variable (named, not given) or a file.
func readPassword(envName, file string) (bmc.Secret, error) {
	switch {
	case envName != "" && file != "":
		return "", usageError("give --password-env or --password-file, not both")
	case envName != "":
		v, ok := os.LookupEnv(envName)
		if !ok || v == "" {
			return "", usageError("--password-env %s: the environment variable is not set or empty", envName)
		}
		return bmc.Secret(v), nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", usageError("--password-file: %v", err)
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", usageError("--password-file %s is empty", file)
		}
		return bmc.Secret(v), nil
	}
	return "", usageError("the BMC password is needed: --password-env NAME or --password-file PATH (never on the command line)")
}

func newBMCCmd(s streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bmc",
		Short: "Talk to a BMC directly (no cluster needed)",
		Long: `Read and change a machine's power through its BMC, over Redfish or IPMI
(spoken natively: no ipmitool needed), without any cluster. "off" sends a hard
power-off (Redfish ComputerSystem.Reset ForceOff, IPMI chassis power off) and
succeeds only once the BMC has read back an Off it caused: several consecutive
Off reads spanning the settle window. A failed command is reported at once,
with an exit code that says why, and an "error" object in JSON and YAML.`,
		Example: `  export BMC_PASSWORD=...
  kubectl fence bmc status --address https://10.0.0.5 --system 1 --username admin --password-env BMC_PASSWORD
  kubectl fence bmc off --address ipmi://10.0.0.6 --username admin --password-file /run/secrets/bmc --yes`,
	}
	cmd.AddCommand(newBMCStatusCmd(s), newBMCOffCmd(s), newBMCOnCmd(s))
	return cmd
}

// statusView is `bmc status` output. Raw is exactly what the BMC said.
type statusView struct {
	Address  string       `json:"address"`
	System   string       `json:"system,omitempty"`
	Protocol bmc.Protocol `json:"protocol"`
	// UUID is the system's UUID (Redfish) or system GUID (IPMI), as the
	// node's status.nodeInfo.systemUUID shows it: what an inventory's
	// identity is checked against.
	UUID         string         `json:"uuid,omitempty"`
	SystemID     string         `json:"systemId,omitempty"`
	PowerState   bmc.PowerState `json:"powerState"`
	Raw          string         `json:"raw"`
	ChassisRaw   string         `json:"chassisRaw,omitempty"`
	BootProgress string         `json:"bootProgress,omitempty"`
	// Trusted is the resource whose power PowerState is, and why.
	Trusted     bmc.PowerSource  `json:"trusted"`
	Provider    string           `json:"provider,omitempty"`
	CipherSuite int              `json:"cipherSuite,omitempty"`
	Attempts    int              `json:"attempts"`
	LatencyMs   int64            `json:"latencyMs"`
	Error       *power.ErrorInfo `json:"error,omitempty"`
}

func newBMCStatusCmd(s streams) *cobra.Command {
	var f bmcFlags
	var showUUID bool
	out := outTable
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Read a machine's power state",
		Example: `  export BMC_PASSWORD=...
  kubectl fence bmc status --address https://10.0.0.5 --username admin --password-env BMC_PASSWORD
  kubectl fence bmc status --address ipmi://10.0.0.6 --username admin --password-file /run/secrets/bmc -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl, t, err := controller(&f)
			if err != nil {
				return err
			}
			st, err := ctrl.PowerStatus(cmd.Context())
			v := statusView{
				Address: t.Address.String(), System: t.System, Protocol: t.Address.Protocol,
				PowerState: st.State, Raw: st.Raw, ChassisRaw: st.ChassisRaw, BootProgress: st.BootProgress,
				Trusted: st.Trusted, Provider: st.Provider, CipherSuite: st.CipherSuite, Attempts: st.Attempts,
				LatencyMs: st.Latency.Milliseconds(), Error: errorInfo(err),
			}
			if err == nil && (out != outTable || showUUID) {
				// The identity, so an inventory's expectedUUID can be
				// checked before there is a cluster. The table reads it
				// only when asked (--uuid): it costs a second IPMI
				// session, and a few Redfish requests.
				id, ierr := ctrl.Identity(cmd.Context())
				if ierr != nil {
					err = ierr
					v.Error = errorInfo(err)
				}
				v.UUID, v.SystemID = id.UUID, id.SystemID
			}
			if err != nil && out == outTable {
				return err // the one line on stderr says it all
			}
			if perr := printObject(s.Out, out, v, func(w *tabwriter.Writer) {
				if showUUID {
					fmt.Fprintln(w, "ADDRESS\tSYSTEM\tUUID\tPOWER\tRAW\tBOOT PROGRESS\tLATENCY")
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%dms\n", v.Address, dash(v.System), dash(v.UUID), v.PowerState, dash(rawView(v)), dash(v.BootProgress), v.LatencyMs)
				} else {
					fmt.Fprintln(w, "ADDRESS\tSYSTEM\tPOWER\tRAW\tBOOT PROGRESS\tLATENCY")
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%dms\n", v.Address, dash(v.System), v.PowerState, dash(rawView(v)), dash(v.BootProgress), v.LatencyMs)
				}
				if v.Trusted.Resource != "" {
					fmt.Fprintf(w, "Power trusted: %s\n", v.Trusted)
				}
			}); perr != nil {
				return perr
			}
			return err
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().VarP(&out, "output", "o", "output format: table, json or yaml")
	cmd.Flags().BoolVar(&showUUID, "uuid", false, "also read and show the system's UUID in the table (JSON and YAML always carry it)")
	return cmd
}

// rawView shows the BMC's own words in the table: the system's PowerState,
// and the chassis's where it was read.
func rawView(v statusView) string {
	switch {
	case v.ChassisRaw == "":
		return strconv.Quote(v.Raw)
	case v.Raw == "":
		return "chassis " + strconv.Quote(v.ChassisRaw)
	}
	return strconv.Quote(v.Raw) + ", chassis " + strconv.Quote(v.ChassisRaw)
}

// errorInfo is err for JSON and YAML readers: why, in a word and a line,
// and the exit code it makes.
func errorInfo(err error) *power.ErrorInfo {
	if err == nil {
		return nil
	}
	reason := bmc.Reason(err)
	switch {
	case errors.Is(err, power.ErrNotOff):
		reason = "not-off"
	case errors.Is(err, power.ErrNotOn):
		reason = "not-on"
	}
	return &power.ErrorInfo{Reason: reason, Message: oneLine(err.Error()), ExitCode: exitCode(err)}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func controller(f *bmcFlags) (bmc.Controller, bmc.Target, error) {
	t, err := f.target()
	if err != nil {
		return nil, t, err
	}
	a, err := dial.New(t)
	if err != nil {
		return nil, t, err
	}
	return a, a.Target(), nil
}

// settleFlags are the "off and staying off" parameters, defaulting to the
// agent's policy so a human and the agent agree on what Off means.
type settleFlags struct {
	window     time.Duration
	unassisted time.Duration
	reads      int
	limit      time.Duration
}

// defaultOffLimit is bmc off's --power-timeout: the unassisted settle
// window (60 s: an Off we did not cause must last that long) plus the
// agent's power timeout (60 s) for a slow BMC, so that the longest honest
// confirmation fits.
var defaultOffLimit = fence.DefaultPolicy().UnassistedSettleWindow + fence.DefaultPolicy().PowerTimeout

// bmcOffNames are the flags bmc off's reports and errors point at.
var bmcOffNames = power.Names{
	SettleWindow: "--settle-window", SettleReads: "--settle-reads", UnassistedSettleWindow: "--unassisted-settle-window",
	OwnOffWithin: "the agent's policy.ownOffWithin", PowerTimeout: "--power-timeout",
}

func (f *settleFlags) register(fs *pflag.FlagSet, limitName string, limitDefault time.Duration) {
	p := fence.DefaultPolicy()
	fs.DurationVar(&f.window, "settle-window", p.SettleWindow, "the consecutive Off reads after an accepted power-off must span at least this long")
	fs.DurationVar(&f.unassisted, "unassisted-settle-window", p.UnassistedSettleWindow, "the same for an Off we did not cause (the BMC answered \"already off\"): longer than any restart's off-dwell")
	fs.IntVar(&f.reads, "settle-reads", p.SettleReads, "consecutive exact-Off reads needed")
	fs.DurationVar(&f.limit, limitName, limitDefault, "give up after this long, every request to the BMC included")
}

func (f *settleFlags) policy() (fence.Policy, error) {
	p := fence.DefaultPolicy()
	p.SettleWindow, p.SettleReads, p.PowerTimeout, p.UnassistedSettleWindow = f.window, f.reads, f.limit, f.unassisted
	if f.reads < 2 {
		return p, usageError("--settle-reads %d: at least 2 (one read proves nothing: a restart reads Off for a moment)", f.reads)
	}
	if f.window <= 0 || f.limit <= 0 || f.unassisted <= 0 {
		return p, usageError("--settle-window, --unassisted-settle-window and the time limit must be positive")
	}
	// An Off the BMC did not cause (it answered "already off") settles over
	// the unassisted window, which must outlast every off-dwell; a settle
	// window is set to a BMC's known dwell, so it must be the shorter
	// (issue 17, as fence.Policy.Validate says).
	if f.unassisted <= f.window {
		return p, usageError("--settle-window %s: not shorter than --unassisted-settle-window %s, so an Off the BMC did not cause could settle inside an off-dwell that long: give a longer --unassisted-settle-window or a shorter --settle-window", f.window, f.unassisted)
	}
	if p.MaxReadGap < p.SettleInterval() {
		p.MaxReadGap = 2 * p.SettleInterval()
	}
	return p, nil
}

func printReport(s streams, out outputFormat, r power.Report) error {
	return printObject(s.Out, out, r, func(w *tabwriter.Writer) {
		action := r.Action
		if r.DryRun {
			action += " (dry run)"
		}
		fmt.Fprintln(w, "ADDRESS\tSYSTEM\tACTION\tSENT\tANSWER\tPOWER\tCONFIRMED\tELAPSED")
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%v\t%s\n", r.Address, dash(r.System), action, dash(r.Sent), dash(r.Answer), r.PowerState, r.Confirmed, dash(r.Elapsed))
		if r.Plan != "" {
			fmt.Fprintf(w, "Plan: %s\n", r.Plan)
		}
		if r.Reply != "" {
			fmt.Fprintf(w, "BMC replied: %s\n", r.Reply)
		}
		if r.Trusted != nil {
			fmt.Fprintf(w, "Power trusted: %s\n", r.Trusted)
		}
		if r.Note != "" {
			fmt.Fprintf(w, "Note: %s\n", r.Note)
		}
	})
}

// finishReport prints a power report and returns the operation's error. A
// failure that left nothing to report in a table (the command was never
// accepted) is the one stderr line alone; JSON and YAML carry it in an
// "error" object as well.
func finishReport(s streams, out outputFormat, r power.Report, err error) error {
	r.Error = errorInfo(err)
	if err != nil && out == outTable && r.Answer == "" {
		return err
	}
	if perr := printReport(s, out, r); perr != nil {
		return perr
	}
	return err
}

func newBMCOffCmd(s streams) *cobra.Command {
	var f bmcFlags
	var sf settleFlags
	var yes, dryRun, quiet bool
	out := outTable
	cmd := &cobra.Command{
		Use:   "off",
		Short: "Hard power-off, confirmed by a settled Off read-back",
		Long: `Send a hard power-off (Redfish ComputerSystem.Reset ForceOff, IPMI chassis power
off; never a cycle or reset) and wait until the BMC reads exactly Off on
--settle-reads consecutive reads spanning --settle-window, all after the BMC
accepted the command. A BMC that answers "already in that state" (iDRAC 409,
iLO 400, IPMI 0xD5) did nothing, and answers the same during a restart's
off-dwell: then the Off counts only after it has lasted the agent's unassisted
settle window (60 s), and any reading with power sends the power-off again.
A command that fails (wrong password, refused, unsupported) is reported at
once with its exit code; nothing is polled. A BMC that accepts the command and
never reads Off (a lying BMC) fails with exit code 7.`,
		Example: `  kubectl fence bmc off --address https://10.0.0.5 --system 1 --username admin --password-env BMC_PASSWORD
  kubectl fence bmc off --address ipmi://10.0.0.6 --username admin --password-file pw --yes -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := sf.policy()
			if err != nil {
				return err
			}
			ctrl, t, err := controller(&f)
			if err != nil {
				return err
			}
			if dryRun {
				r, err := dryRunReport(cmd.Context(), ctrl, t, bmc.OpPowerOff)
				return finishReport(s, out, r, err)
			}
			if err := confirm(s, yes, fmt.Sprintf("Power off %s%s now (a hard off: like pulling the plug)?", t.Address, systemSuffix(t.System))); err != nil {
				return err
			}
			r, err := power.OffConfirmedWith(cmd.Context(), ctrl, power.OffOptions{
				Policy: p, Limit: sf.limit, Names: bmcOffNames, Say: newBMCProgress(s, quiet).say,
			})
			r.Address, r.System = t.Address.String(), t.System
			return finishReport(s, out, r, err)
		},
	}
	f.register(cmd.Flags())
	sf.register(cmd.Flags(), "power-timeout", defaultOffLimit)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check the BMC (reachable, credentials, system, the power it reads) and say what would be sent; send nothing")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress lines on stderr")
	cmd.Flags().VarP(&out, "output", "o", "output format: table, json or yaml")
	return cmd
}

func systemSuffix(system string) string {
	if system == "" {
		return ""
	}
	return " system " + system
}

func newBMCOnCmd(s streams) *cobra.Command {
	var f bmcFlags
	var yes, wait, dryRun, quiet bool
	var limit time.Duration
	out := outTable
	cmd := &cobra.Command{
		Use:   "on",
		Short: "Power on",
		Long: `Send a power-on (Redfish On, IPMI chassis power on). With --wait, wait until the
BMC reads On (a server can take a minute or more to get there).`,
		Example: `  kubectl fence bmc on --address https://10.0.0.5 --system 1 --username admin --password-env BMC_PASSWORD --wait`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl, t, err := controller(&f)
			if err != nil {
				return err
			}
			if dryRun {
				r, err := dryRunReport(cmd.Context(), ctrl, t, bmc.OpPowerOn)
				return finishReport(s, out, r, err)
			}
			if err := confirm(s, yes, fmt.Sprintf("Power on %s%s?", t.Address, systemSuffix(t.System))); err != nil {
				return err
			}
			r, err := power.On(cmd.Context(), ctrl, wait, limit, fence.DefaultPolicy().PowerPollInterval, newBMCProgress(s, quiet).say)
			r.Address, r.System = t.Address.String(), t.System
			return finishReport(s, out, r, err)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the BMC reads On")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check the BMC (reachable, credentials, system, the power it reads) and say what would be sent; send nothing")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress lines on stderr")
	cmd.Flags().DurationVar(&limit, "power-timeout", fence.DefaultPolicy().PowerOnTimeout, "with --wait: give up after this long")
	cmd.Flags().VarP(&out, "output", "o", "output format: table, json or yaml")
	return cmd
}

// dryRunReport checks everything a real command would need (the BMC
// answers, takes the credentials, has the system; its power is read) and
// says what the command would send. Nothing is sent.
func dryRunReport(ctx context.Context, ctrl bmc.Controller, t bmc.Target, op bmc.Op) (power.Report, error) {
	start := time.Now()
	r := power.Report{Address: t.Address.String(), System: t.System, Action: "off", DryRun: true}
	cmdWords := map[bmc.Protocol]string{bmc.Redfish: "redfish ComputerSystem.Reset ForceOff", bmc.IPMI: "ipmi chassis power off"}
	if op == bmc.OpPowerOn {
		r.Action = "on"
		cmdWords = map[bmc.Protocol]string{bmc.Redfish: "redfish ComputerSystem.Reset On", bmc.IPMI: "ipmi chassis power on"}
	}
	elapsed := func() string { return time.Since(start).Round(time.Millisecond).String() }
	id, err := ctrl.Identity(ctx)
	if err != nil {
		r.Elapsed = elapsed()
		return r, err
	}
	r.UUID = id.UUID
	if op == bmc.OpPowerOff && len(id.AllowedResets) > 0 && !slices.Contains(id.AllowedResets, "ForceOff") {
		r.Elapsed = elapsed()
		return r, fmt.Errorf("%w: the system offers no hard off (ResetType ForceOff; it allows %s): bmc off would send nothing", bmc.ErrUnsupported, strings.Join(id.AllowedResets, ", "))
	}
	st, err := ctrl.PowerStatus(ctx)
	r.Elapsed = elapsed()
	if err != nil {
		return r, err
	}
	r.PowerState, r.CipherSuite = st.State, st.CipherSuite
	if st.Trusted.Resource != "" {
		tr := st.Trusted
		r.Trusted = &tr
	}
	who := "the system"
	if id.SystemID != "" {
		who = "system " + id.SystemID
	}
	if id.UUID != "" {
		who += " (UUID " + id.UUID + ")"
	}
	r.Plan = fmt.Sprintf("would send %s to %s, which reads %s; nothing was sent", cmdWords[t.Address.Protocol], who, st.State)
	if op == bmc.OpPowerOff {
		r.Plan += "; then it would wait for a settled Off read back"
	}
	return r, nil
}
