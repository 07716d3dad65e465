// Command benchcompare times `kubectl-fence bmc status` against the Debian
// fence agents on the same BMCs: fence_redfish against our Redfish mock (the
// redfish-mock binary, over HTTPS) and fence_ipmilan against ipmi_sim. Calls
// are paired and alternate in order, so both tools see the same machine
// state. It prints a Markdown table for the README.
//
//	go run ./hack/benchcompare -bin bin -rounds 20
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bmcfence/bmcfence/bmc/ipmisim"
)

const password = "bench-Pa55word"

func main() {
	bin := flag.String("bin", "bin", "directory holding kubectl-fence and redfish-mock")
	rounds := flag.Int("rounds", 20, "paired calls per comparison")
	flag.Parse()
	if err := run(*bin, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
}

type row struct {
	name        string
	ours, their []time.Duration
}

func run(bin string, rounds int) error {
	ctx := context.Background()
	kf := filepath.Join(bin, "kubectl-fence")
	var rows []row

	if _, err := exec.LookPath("fence_redfish"); err != nil {
		fmt.Fprintln(os.Stderr, "skipping Redfish: fence_redfish not installed (apt-get install fence-agents)")
	} else {
		addr, stop, err := startMock(filepath.Join(bin, "redfish-mock"))
		if err != nil {
			return err
		}
		defer stop()
		port := addr[strings.LastIndex(addr, ":")+1:]
		ours := []string{kf, "bmc", "status", "--address", addr, "--system", "1", "--username", "admin", "--password-env", "BMC_PASSWORD", "--insecure"}
		their := []string{"fence_redfish"}
		stdin := fmt.Sprintf("ip=127.0.0.1\nipport=%s\nusername=admin\npassword=%s\nssl_insecure=1\nsystems_uri=/redfish/v1/Systems/1\naction=status\n", port, password)
		r, err := compare("kubectl-fence bmc status vs fence_redfish --action=status (HTTPS, Redfish mock)", ours, their, stdin, rounds)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}

	if _, err := exec.LookPath("fence_ipmilan"); err != nil || ipmisim.Available() != nil {
		fmt.Fprintln(os.Stderr, "skipping IPMI: fence_ipmilan or ipmi_sim not installed (apt-get install fence-agents openipmi ipmitool)")
	} else {
		sim, err := ipmisim.Start(ctx, ipmisim.Options{Password: password, InitialPower: true})
		if err != nil {
			return err
		}
		defer sim.Stop()
		ours := []string{kf, "bmc", "status", "--address", "ipmi://" + sim.Address(), "--username", sim.Username(), "--password-env", "BMC_PASSWORD"}
		their := []string{"fence_ipmilan"}
		stdin := fmt.Sprintf("ip=127.0.0.1\nipport=%d\nusername=%s\npassword=%s\nlanplus=1\ncipher=3\naction=status\n", sim.Port(), sim.Username(), password)
		r, err := compare("kubectl-fence bmc status vs fence_ipmilan --action=status (ipmi_sim)", ours, their, stdin, rounds)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}

	fmt.Printf("| comparison (%d paired calls) | ours, median | theirs, median | ratio |\n|---|---|---|---|\n", rounds)
	for _, r := range rows {
		mo, mt := median(r.ours), median(r.their)
		fmt.Printf("| %s | %s | %s | %.1fx |\n", r.name, ms(mo), ms(mt), float64(mt)/float64(mo))
	}
	return nil
}

func compare(name string, ours, their []string, stdin string, rounds int) (row, error) {
	r := row{name: name}
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
	cmd := exec.Command(path, "--listen", "127.0.0.1:0", "--systems", "1", "--username", "admin")
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
