// Command benchcompare is P1: whole-process `kubectl-fence bmc status`
// against the Debian fence agents' `--action=status` on the same BMC:
// fence_redfish against our Redfish mock (the redfish-mock binary, over
// HTTPS) and fence_ipmilan against ipmi_sim. Each round runs both, in
// alternating order, so both see the same machine and the same load; two
// warm-up rounds are not counted. It prints the commands, the medians and
// their ratio as a Markdown table for the README, and exits 1 when a ratio
// is below -min-ratio.
//
//	go run ./hack/benchcompare -bin bin -rounds 30
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bmcfence/bmcfence/bmc/ipmisim"
)

const password = "bench-Pa55word"

func main() {
	bin := flag.String("bin", "bin", "directory holding kubectl-fence and redfish-mock")
	rounds := flag.Int("rounds", 30, "paired calls per comparison")
	minRatio := flag.Float64("min-ratio", 10, "fail when a ratio of medians is below this")
	flag.Parse()
	rows, err := run(*bin, *rounds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
	for _, r := range rows {
		if ratio := r.ratio(); ratio < *minRatio {
			fmt.Fprintf(os.Stderr, "benchcompare: %s: %.1fx is below %.0fx\n", r.name, ratio, *minRatio)
			os.Exit(1)
		}
	}
}

type row struct {
	name        string
	oursCmd     string
	theirCmd    string
	ours, their []time.Duration
}

func (r row) ratio() float64 { return float64(median(r.their)) / float64(median(r.ours)) }

func run(bin string, rounds int) ([]row, error) {
	ctx := context.Background()
	kf := filepath.Join(bin, "kubectl-fence")
	var rows []row

	if _, err := exec.LookPath("fence_redfish"); err != nil {
		fmt.Fprintln(os.Stderr, "skipping Redfish: fence_redfish not installed (apt-get install fence-agents)")
	} else {
		addr, stop, err := startMock(filepath.Join(bin, "redfish-mock"))
		if err != nil {
			return nil, err
		}
		defer stop()
		port := addr[strings.LastIndex(addr, ":")+1:]
		ours := []string{kf, "bmc", "status", "--address", addr, "--system", "1", "--username", "admin", "--password-env", "BMC_PASSWORD", "--insecure"}
		their := []string{"fence_redfish"}
		stdin := fmt.Sprintf("ip=127.0.0.1\nipport=%s\nusername=admin\npassword=%s\nssl_insecure=1\nsystems_uri=/redfish/v1/Systems/1\naction=status\n", port, password)
		r, err := compare("Redfish over HTTPS (redfish-mock)", ours, their, stdin, rounds)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}

	_, noIpmitool := exec.LookPath("ipmitool") // fence_ipmilan runs it
	if _, err := exec.LookPath("fence_ipmilan"); err != nil || noIpmitool != nil || ipmisim.Available() != nil {
		fmt.Fprintln(os.Stderr, "skipping IPMI: fence_ipmilan or ipmi_sim not installed (apt-get install fence-agents openipmi ipmitool)")
	} else {
		sim, err := ipmisim.Start(ctx, ipmisim.Options{Password: password, InitialPower: true})
		if err != nil {
			return nil, err
		}
		defer sim.Stop()
		ours := []string{kf, "bmc", "status", "--address", "ipmi://" + sim.Address(), "--username", sim.Username(), "--password-env", "BMC_PASSWORD"}
		their := []string{"fence_ipmilan"}
		stdin := fmt.Sprintf("ip=127.0.0.1\nipport=%d\nusername=%s\npassword=%s\nlanplus=1\ncipher=3\naction=status\n", sim.Port(), sim.Username(), password)
		r, err := compare("IPMI 2.0 lanplus (ipmi_sim)", ours, their, stdin, rounds)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}

	fmt.Printf("Whole process, median of %d alternating runs each (%d CPUs, %s/%s):\n\n", rounds, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	for _, r := range rows {
		fmt.Printf("  ours:   %s\n  theirs: %s\n", r.oursCmd, r.theirCmd)
	}
	fmt.Printf("\n| BMC | kubectl-fence bmc status | Debian agent --action=status | ratio |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s | %.1fx |\n", r.name, ms(median(r.ours)), ms(median(r.their)), r.ratio())
	}
	return rows, nil
}

func compare(name string, ours, their []string, stdin string, rounds int) (row, error) {
	r := row{name: name, oursCmd: shown(ours, ""), theirCmd: shown(their, stdin)}
	// Warm-up: page cache, the mock's and the sim's first answers.
	for i := 0; i < 2; i++ {
		for _, argv := range [][]string{ours, their} {
			if _, err := timeOne(argv, stdin); err != nil {
				return r, err
			}
		}
	}
	for i := 0; i < rounds; i++ {
		first, second := ours, their
		if i%2 == 1 {
			first, second = their, ours
		}
		for _, argv := range [][]string{first, second} {
			d, err := timeOne(argv, stdin)
			if err != nil {
				return r, err
			}
			if argv[0] == ours[0] {
				r.ours = append(r.ours, d)
			} else {
				r.their = append(r.their, d)
			}
		}
	}
	return r, nil
}

// shown is the command as a reader can rerun it (the password elided).
func shown(argv []string, stdin string) string {
	s := "BMC_PASSWORD=… " + strings.Join(argv, " ")
	if stdin != "" {
		var opts []string
		for _, l := range strings.Split(strings.TrimSpace(stdin), "\n") {
			if strings.HasPrefix(l, "password=") {
				l = "password=…"
			}
			opts = append(opts, l)
		}
		s = "printf '" + strings.Join(opts, "\\n") + "' | " + strings.Join(argv, " ")
	}
	return s
}

func timeOne(argv []string, stdin string) (time.Duration, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "BMC_PASSWORD="+password)
	if !strings.Contains(argv[0], "kubectl-fence") {
		cmd.Stdin = strings.NewReader(stdin) // fence agents read options from stdin: no password in argv
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if err != nil && !strings.Contains(string(out), "Status: ON") && !strings.Contains(string(out), "Status: OFF") {
		return 0, fmt.Errorf("%s: %v: %s", argv[0], err, out)
	}
	return d, nil
}

// startMock runs the redfish-mock binary on a free port and returns its URL.
func startMock(path string) (string, func(), error) {
	cmd := exec.Command(path, "--listen", "127.0.0.1:0", "--systems", "1", "--username", "admin", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "REDFISH_MOCK_PASSWORD="+password)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start %s (run make build first): %w", path, err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("redfish-mock did not start: %w", err)
	}
	i := strings.Index(line, "https://")
	if i < 0 {
		stop()
		return "", nil, fmt.Errorf("unexpected redfish-mock output %q", line)
	}
	return strings.TrimSpace(line[i:]), stop, nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
