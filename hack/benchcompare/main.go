// Command benchcompare is P1: whole-process `kubectl-fence bmc status`
// against the Debian fence agents' `--action=status` on the same BMC:
// fence_redfish against our Redfish mock (the redfish-mock binary, over
// HTTPS) and fence_ipmilan against ipmi_sim.
//
// A whole process's time is mostly what the machine charges to start one:
// on a fresh 2-core machine any Go binary took ~13 ms to start, and the
// ratio of the raw times fell from 24x to 9.6x with no change to the code.
// So beside the figures it measures the floors, in the same alternating
// rounds: a trivial process (/bin/true), a Go hello world (the Go
// runtime's start), the Debian agents' interpreter (/usr/bin/python3 -c
// pass) and `kubectl-fence --version` (our binary's start: the runtime
// and our packages' initialisation). What the code controls is each side's
// time above its own runtime's floor, and the requests one status costs
// the BMC; benchcompare fails only on those: a ratio above the floors
// below -min-ratio, or more requests than the budget.
//
// Each round runs every command once, in an order that rotates from round
// to round, so all see the same machine and the same load; two warm-up
// rounds are not counted. It prints the machine, the commands, the floors
// and a Markdown table for the README.
//
//	go run ./hack/benchcompare -bin bin -rounds 30
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bmcfence/bmcfence/bmc/ipmisim"
	"github.com/bmcfence/bmcfence/internal/childproc"
)

const password = "bench-Pa55word"

// The budgets: what one `bmc status` may cost the BMC. Redfish: the
// system by its Id over one kept-alive connection (the service root and
// the chassis when the system reads Off may add a request each). IPMI: a
// session (channel authentication capabilities, open session, RAKP 1 and
// 3), Get Chassis Status, Get System GUID and closing the session.
const (
	defaultMaxRedfishRequests    = 3
	defaultMaxRedfishConnections = 1
	defaultMaxIPMIDatagrams      = 8
)

func main() {
	bin := flag.String("bin", "bin", "directory holding kubectl-fence and redfish-mock")
	rounds := flag.Int("rounds", 30, "rounds; each runs every command once")
	minRatio := flag.Float64("min-ratio", 5, "fail when a ratio of the medians above each side's runtime floor is below this")
	maxReq := flag.Int("max-redfish-requests", defaultMaxRedfishRequests, "fail when one bmc status sends the Redfish BMC more requests")
	maxConn := flag.Int("max-redfish-connections", defaultMaxRedfishConnections, "fail when one bmc status opens more connections to the Redfish BMC")
	maxDgram := flag.Int("max-ipmi-datagrams", defaultMaxIPMIDatagrams, "fail when one bmc status sends the IPMI BMC more datagrams")
	flag.Parse()
	if err := run(*bin, *rounds, budget{*minRatio, *maxReq, *maxConn, *maxDgram}); err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
}

type budget struct {
	minRatio                      float64
	redfishRequests, redfishConns int
	ipmiDatagrams                 int
}

// command is one process the rounds time.
type command struct {
	label string
	argv  []string
	stdin string // fence agents read their options here: no password in argv
	// ok checks that a run did its job (a status was read).
	ok    func(out []byte, err error) bool
	times []time.Duration
}

func exitZero(_ []byte, err error) bool { return err == nil }

func statusRead(out []byte, err error) bool {
	s := string(out)
	return err == nil || strings.Contains(s, "Status: ON") || strings.Contains(s, "Status: OFF")
}

func (c *command) shown() string {
	s := "BMC_PASSWORD=… " + strings.Join(c.argv, " ")
	if c.stdin == "" {
		return s
	}
	var opts []string
	for _, l := range strings.Split(strings.TrimSpace(c.stdin), "\n") {
		if strings.HasPrefix(l, "password=") {
			l = "password=…"
		}
		opts = append(opts, l)
	}
	return "printf '" + strings.Join(opts, "\\n") + "' | " + strings.Join(c.argv, " ")
}

func (c *command) once() (time.Duration, error) {
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = append(os.Environ(), "BMC_PASSWORD="+password)
	if c.stdin != "" {
		cmd.Stdin = strings.NewReader(c.stdin)
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if !c.ok(out, err) {
		return 0, fmt.Errorf("%s: %v: %s", c.label, err, out)
	}
	return d, nil
}

func (c *command) median() time.Duration {
	s := slices.Clone(c.times)
	slices.Sort(s)
	return s[len(s)/2]
}

// pair is one BMC: our status and the Debian agent's, and what each costs
// the BMC.
type pair struct {
	name        string
	ours, their *command
	// cost counts what one run sends the BMC: requests (and connections)
	// or datagrams.
	cost                func(c *command) (cost, error)
	oursCost, theirCost cost
}

type cost struct {
	requests, connections int
	unit                  string // "requests" or "datagrams"
}

func (c cost) String() string {
	if c.unit == "datagrams" {
		return plural(c.requests, "datagram")
	}
	return plural(c.requests, "request") + ", " + plural(c.connections, "connection")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func run(bin string, rounds int, b budget) error {
	ctx := context.Background()
	kf := filepath.Join(bin, "kubectl-fence")
	tmp, err := os.MkdirTemp("", "benchcompare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	hello, err := buildHello(tmp)
	if err != nil {
		return err
	}
	floors := []*command{
		{label: "/bin/true", argv: []string{"/bin/true"}, ok: exitZero},
		{label: "hello world in Go (static)", argv: []string{hello}, ok: exitZero},
		{label: "/usr/bin/python3 -c pass", argv: []string{"/usr/bin/python3", "-c", "pass"}, ok: exitZero},
		{label: "kubectl-fence --version", argv: []string{kf, "--version"}, ok: exitZero},
	}
	goFloor, pyFloor := floors[1], floors[2]
	var pairs []*pair

	if _, err := exec.LookPath("fence_redfish"); err != nil {
		fmt.Fprintln(os.Stderr, "skipping Redfish: fence_redfish not installed (apt-get install fence-agents)")
	} else {
		mock, err := startMock(filepath.Join(bin, "redfish-mock"))
		if err != nil {
			return err
		}
		defer mock.stop()
		port := mock.url[strings.LastIndex(mock.url, ":")+1:]
		pairs = append(pairs, &pair{
			name: "Redfish over HTTPS (redfish-mock)",
			ours: &command{label: "kubectl-fence bmc status (Redfish)", ok: statusRead,
				argv: []string{kf, "bmc", "status", "--address", mock.url, "--system", "1", "--username", "admin", "--password-env", "BMC_PASSWORD", "--insecure"}},
			their: &command{label: "fence_redfish --action=status", ok: statusRead, argv: []string{"fence_redfish"},
				stdin: fmt.Sprintf("ip=127.0.0.1\nipport=%s\nusername=admin\npassword=%s\nssl_insecure=1\nsystems_uri=/redfish/v1/Systems/1\naction=status\n", port, password)},
			cost: mock.cost,
		})
	}

	_, noIpmitool := exec.LookPath("ipmitool") // fence_ipmilan runs it
	if _, err := exec.LookPath("fence_ipmilan"); err != nil || noIpmitool != nil || ipmisim.Available() != nil {
		fmt.Fprintln(os.Stderr, "skipping IPMI: fence_ipmilan or ipmi_sim not installed (apt-get install fence-agents openipmi ipmitool)")
	} else {
		sim, err := ipmisim.Start(ctx, ipmisim.Options{Password: password, InitialPower: true})
		if err != nil {
			return err
		}
		defer sim.Stop()
		relay, err := startRelay(sim.Port())
		if err != nil {
			return err
		}
		defer relay.stop()
		pairs = append(pairs, &pair{
			name: "IPMI 2.0 lanplus (ipmi_sim)",
			ours: &command{label: "kubectl-fence bmc status (IPMI)", ok: statusRead,
				argv: []string{kf, "bmc", "status", "--address", "ipmi://" + sim.Address(), "--username", sim.Username(), "--password-env", "BMC_PASSWORD"}},
			their: &command{label: "fence_ipmilan --action=status", ok: statusRead, argv: []string{"fence_ipmilan"},
				stdin: fmt.Sprintf("ip=127.0.0.1\nipport=%d\nusername=%s\npassword=%s\nlanplus=1\ncipher=3\naction=status\n", sim.Port(), sim.Username(), password)},
			cost: func(c *command) (cost, error) { return relay.cost(c, sim.Port()) },
		})
	}

	all := slices.Clone(floors)
	for _, p := range pairs {
		all = append(all, p.ours, p.their)
	}
	loadBefore := loadAverage()
	for r := -2; r < rounds; r++ { // two warm-up rounds: page cache, the BMCs' first answers
		for i := range all {
			c := all[(i+max(r, 0))%len(all)]
			d, err := c.once()
			if err != nil {
				return err
			}
			if r >= 0 {
				c.times = append(c.times, d)
			}
		}
	}
	loadAfter := loadAverage()
	// What one status costs the BMC, counted apart from the timed runs.
	for _, p := range pairs {
		if p.oursCost, err = p.cost(p.ours); err != nil {
			return err
		}
		if p.theirCost, err = p.cost(p.their); err != nil {
			return err
		}
	}

	fmt.Printf("Machine: %s; load average %s at the start, %s at the end.\n", machine(), loadBefore, loadAfter)
	fmt.Printf("Whole process, median of %d rounds; each round runs every command once, in an order that rotates.\n\n", rounds)
	for _, p := range pairs {
		fmt.Printf("  ours:   %s\n  theirs: %s\n", p.ours.shown(), p.their.shown())
	}
	fmt.Printf("\nFloors (no code of ours or theirs):\n\n| process | median |\n|---|---|\n")
	for _, f := range floors {
		fmt.Printf("| %s | %s |\n", strings.ReplaceAll(f.label, "|", "\\|"), ms(f.median()))
	}
	fmt.Printf("\n| BMC | kubectl-fence bmc status | Debian agent --action=status | ratio | ours above Go's start | theirs above Python's start | ratio above the floors | one status costs the BMC: ours / theirs |\n|---|---|---|---|---|---|---|---|\n")
	var failures []error
	for _, p := range pairs {
		r := result{name: p.name, ours: p.ours.median(), theirs: p.their.median(), goFloor: goFloor.median(), pyFloor: pyFloor.median(), oursCost: p.oursCost}
		fmt.Printf("| %s | %s | %s | %.1fx | %s | %s | %.1fx | %s / %s |\n", p.name, ms(r.ours), ms(r.theirs), float64(r.theirs)/float64(r.ours),
			ms(r.ours-r.goFloor), ms(r.theirs-r.pyFloor), r.aboveFloors(), p.oursCost, p.theirCost)
		failures = append(failures, judge(r, b)...)
	}
	return errors.Join(failures...)
}

// result is one BMC's medians and what our status cost it.
type result struct {
	name                           string
	ours, theirs, goFloor, pyFloor time.Duration
	oursCost                       cost
}

// aboveFloors is the ratio of each side's time above its runtime's start:
// the Debian agent's above Python's, ours above Go's.
func (r result) aboveFloors() float64 {
	return float64(r.theirs-r.pyFloor) / float64(max(r.ours-r.goFloor, time.Microsecond))
}

// judge fails a result only on what the code controls: our time above the
// Go runtime's start against theirs above Python's, and the requests one
// status costs the BMC. The raw ratio is the machine's as much as ours.
func judge(r result, b budget) []error {
	var failures []error
	if above := r.aboveFloors(); above < b.minRatio {
		failures = append(failures, fmt.Errorf("%s: above each runtime's start, ours %s and theirs %s: %.1fx is below %.0fx", r.name, ms(r.ours-r.goFloor), ms(r.theirs-r.pyFloor), above, b.minRatio))
	}
	switch c := r.oursCost; c.unit {
	case "datagrams":
		if c.requests > b.ipmiDatagrams {
			failures = append(failures, fmt.Errorf("%s: one bmc status sent %d datagrams, the budget is %d", r.name, c.requests, b.ipmiDatagrams))
		}
	default:
		if c.requests > b.redfishRequests || c.connections > b.redfishConns {
			failures = append(failures, fmt.Errorf("%s: one bmc status cost %s, the budget is %s", r.name, c, cost{requests: b.redfishRequests, connections: b.redfishConns}))
		}
	}
	return failures
}

// buildHello builds the smallest Go program, as make builds ours
// (CGO_ENABLED=0, -trimpath, -s -w): the Go runtime's own start.
func buildHello(dir string) (string, error) {
	src := filepath.Join(dir, "hello")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module hello\n\ngo 1.24\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"hello\\n\") }\n"), 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "hello-bin")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the hello world: %v\n%s", err, b)
	}
	return out, nil
}

// mock is the redfish-mock binary, logging one line per request.
type mock struct {
	url  string
	cmd  *exec.Cmd
	mu   sync.Mutex
	reqs []string // the remote address of each request, in order
}

func startMock(path string) (*mock, error) {
	cmd := exec.Command(path, "--listen", "127.0.0.1:0", "--systems", "1", "--username", "admin", "--log-level", "debug")
	cmd.Env = append(os.Environ(), "REDFISH_MOCK_PASSWORD="+password)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logs, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := childproc.Start(cmd); err != nil {
		return nil, fmt.Errorf("start %s (run make build first): %w", path, err)
	}
	m := &mock{cmd: cmd}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		m.stop()
		return nil, fmt.Errorf("redfish-mock did not start: %w", err)
	}
	i := strings.Index(line, "https://")
	if i < 0 {
		m.stop()
		return nil, fmt.Errorf("unexpected redfish-mock output %q", line)
	}
	m.url = strings.TrimSpace(line[i:])
	go func() {
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			l := sc.Text()
			if !strings.Contains(l, "msg=request") || !strings.Contains(l, "path=/redfish") {
				continue
			}
			remote := ""
			if j := strings.Index(l, "remote="); j >= 0 {
				remote = strings.Fields(l[j+len("remote="):])[0]
			}
			m.mu.Lock()
			m.reqs = append(m.reqs, remote)
			m.mu.Unlock()
		}
	}()
	return m, nil
}

func (m *mock) stop() { _ = m.cmd.Process.Kill(); _ = m.cmd.Wait() }

// cost runs c once and counts the Redfish requests and the connections
// (client ports) the mock logged for it.
func (m *mock) cost(c *command) (cost, error) {
	count := func() int { m.mu.Lock(); defer m.mu.Unlock(); return len(m.reqs) }
	before := count()
	if _, err := c.once(); err != nil {
		return cost{}, err
	}
	// The mock logs a request as its handler returns, maybe after the
	// client has exited: wait until the count stops moving.
	for last, stable := count(), 0; stable < 5; time.Sleep(20 * time.Millisecond) {
		if n := count(); n != last {
			last, stable = n, 0
		} else {
			stable++
		}
	}
	m.mu.Lock()
	reqs := slices.Clone(m.reqs[before:])
	m.mu.Unlock()
	conns := map[string]bool{}
	for _, r := range reqs {
		conns[r] = true
	}
	return cost{requests: len(reqs), connections: len(conns), unit: "requests"}, nil
}

// relay is a UDP relay in front of ipmi_sim that counts what clients send.
type relay struct {
	conn  *net.UDPConn
	sent  atomic.Int64
	close func()
}

func startRelay(simPort int) (*relay, error) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	r := &relay{conn: conn}
	sim := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: simPort}
	var mu sync.Mutex
	upstream := map[string]*net.UDPConn{}
	done := make(chan struct{})
	r.close = func() {
		close(done)
		conn.Close()
		mu.Lock()
		for _, u := range upstream {
			u.Close()
		}
		mu.Unlock()
	}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			r.sent.Add(1)
			mu.Lock()
			u, ok := upstream[from.String()]
			if !ok {
				if u, err = net.DialUDP("udp", nil, sim); err != nil {
					mu.Unlock()
					continue
				}
				upstream[from.String()] = u
				go func(u *net.UDPConn, client *net.UDPAddr) {
					b := make([]byte, 65536)
					for {
						n, err := u.Read(b)
						if err != nil {
							return
						}
						_, _ = conn.WriteToUDP(b[:n], client)
					}
				}(u, from)
			}
			mu.Unlock()
			_, _ = u.Write(buf[:n])
		}
	}()
	return r, nil
}

func (r *relay) stop() { r.close() }

func (r *relay) port() int { return r.conn.LocalAddr().(*net.UDPAddr).Port }

// cost runs c once through the relay and counts the datagrams it sent.
func (r *relay) cost(c *command, simPort int) (cost, error) {
	via := *c
	via.argv = slices.Clone(c.argv)
	for i, a := range via.argv {
		via.argv[i] = strings.ReplaceAll(a, fmt.Sprintf(":%d", simPort), fmt.Sprintf(":%d", r.port()))
	}
	via.stdin = strings.ReplaceAll(c.stdin, fmt.Sprintf("ipport=%d", simPort), fmt.Sprintf("ipport=%d", r.port()))
	before := r.sent.Load()
	if _, err := via.once(); err != nil {
		return cost{}, err
	}
	return cost{requests: int(r.sent.Load() - before), unit: "datagrams"}, nil
}

// machine names the machine the figures were measured on.
func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", kernel " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%s, %d CPUs, %s/%s%s, %s", cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, kernel, runtime.Version())
}

// loadAverage is the 1-minute load average, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
