// Package snmpsim runs a real SNMP agent for tests: Debian's snmpd (from
// package snmpd), on 127.0.0.1 on a free UDP port, with an APC
// PowerNet-MIB switched rack PDU behind its pass_persist extension. The
// PDU's outlets are a Bank: a bare one (NewMemoryBank) or a redfishmock
// PDU (Mock.PDUBank), whose outlets feed the mock's machines, so an SNMP
// client switching an outlet takes a machine's supply away.
//
// snmpd speaks SNMP v1, v2c and v3 (USM) itself, so clients meet the
// protocol as a real PDU serves it; only the PowerNet-MIB subtree
// (.1.3.6.1.4.1.318) is ours, answered by this process through a small
// relay (a bash script snmpd runs as its pass_persist program, forwarding
// stdin and stdout to a TCP port here). The agent reports sysObjectID
// .1.3.6.1.4.1.318.1.3.4.5 (an AP79xx switched rack PDU), which Debian's
// fence_apc_snmp maps to its rPDU outlet tables.
//
// Served (N is the 1-based outlet index):
//
//	.1.3.6.1.4.1.318.1.1.12.1.{1,5,6,8}.0         rPDUIdentName, ModelNumber, SerialNumber, DeviceNumOutlets
//	.1.3.6.1.4.1.318.1.1.12.3.3.1.1.{1,2,4}.N     rPDUOutletControlIndex, Name, Command (write 1 immediateOn, 2 immediateOff, 3 immediateReboot)
//	.1.3.6.1.4.1.318.1.1.12.3.5.1.1.{1,2,4}.N     rPDUOutletStatusIndex, Name, State (1 on, 2 off)
//	.1.3.6.1.4.1.318.1.1.4.4.2.1.{1,3,4}.N        sPDUOutletControlIndex, sPDUOutletCtl (write 1 on, 2 off, 3 reboot), Name
//	.1.3.6.1.4.1.318.1.1.26.9.4.3.1.{1,3,4,7}.N   rPDU2OutletMeteredStatusIndex, Name, Number, Power (W)
//
// Access: community "public" reads, "private" reads and writes (v1 and
// v2c); v3 user "fenceuser" (SHA, AES, authPriv) reads and writes,
// "readeruser" (SHA, AES) only reads. Every SET the PDU receives is
// recorded (Agent.Sets).
package snmpsim

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bmcfence/bmcfence/internal/childproc"
)

// Credentials the agent accepts.
const (
	ReadCommunity  = "public"
	WriteCommunity = "private"
	V3User         = "fenceuser"
	V3ReadUser     = "readeruser"
	V3AuthPass     = "fence-auth-pass"
	V3PrivPass     = "fence-priv-pass"
)

// Bank is the PDU's outlets, indexed 1..OutletCount.
type Bank interface {
	OutletCount() int
	Outlet(i int) (name string, on bool, watts int, err error)
	SetOutlet(i int, on bool) error
	Identity() (model, serial string)
}

// MemoryBank is a PDU whose outlets feed nothing.
type MemoryBank struct {
	mu     sync.Mutex
	on     []bool
	Serial string
}

// NewMemoryBank returns a PDU with n outlets, all on.
func NewMemoryBank(n int) *MemoryBank {
	b := &MemoryBank{on: make([]bool, n), Serial: "ZA1234567890"}
	for i := range b.on {
		b.on[i] = true
	}
	return b
}

func (b *MemoryBank) OutletCount() int { return len(b.on) }

func (b *MemoryBank) Outlet(i int) (string, bool, int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 1 || i > len(b.on) {
		return "", false, 0, fmt.Errorf("no outlet %d", i)
	}
	return "Outlet " + strconv.Itoa(i), b.on[i-1], 0, nil
}

func (b *MemoryBank) SetOutlet(i int, on bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i < 1 || i > len(b.on) {
		return fmt.Errorf("no outlet %d", i)
	}
	b.on[i-1] = on
	return nil
}

func (b *MemoryBank) Identity() (string, string) { return "AP7921B", b.Serial }

// Set is one SET the PDU took.
type Set struct {
	OID   string
	Value int
}

// Agent is a running snmpd with the PDU behind it.
type Agent struct {
	// Host and Port are where snmpd listens (UDP).
	Host string
	Port int
	// Dir holds snmpd.conf and snmpd's log.
	Dir string

	bank   Bank
	cmd    *exec.Cmd
	exited chan error // cmd.Wait's result
	ln     net.Listener

	mu    sync.Mutex
	conns []net.Conn
	sets  []Set
	wg    sync.WaitGroup
}

// Address is "127.0.0.1:PORT".
func (a *Agent) Address() string { return net.JoinHostPort(a.Host, strconv.Itoa(a.Port)) }

// Sets returns the SETs the PDU took, in order.
func (a *Agent) Sets() []Set {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Set(nil), a.sets...)
}

// Available reports what is missing to run an agent.
func Available() error {
	for _, bin := range []string{"snmpd", "bash"} {
		if _, err := lookPath(bin); err != nil {
			return fmt.Errorf("%s not found (Debian: apt-get install snmpd): %w", bin, err)
		}
	}
	return nil
}

func lookPath(bin string) (string, error) {
	if p, err := exec.LookPath(bin); err == nil {
		return p, nil
	}
	// snmpd lives in /usr/sbin, often not on a user's PATH.
	p := filepath.Join("/usr/sbin", bin)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", exec.ErrNotFound
}

// relayScript is snmpd's pass_persist program: it connects to our TCP
// port and copies snmpd's requests there and our answers back.
const relayScript = `#!/bin/bash
exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
cat <&3 &
exec cat >&3
`

// Start runs an agent serving bank in dir; Stop ends it.
func Start(ctx context.Context, bank Bank, dir string) (*Agent, error) {
	snmpd, err := lookPath("snmpd")
	if err != nil {
		return nil, Available()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &Agent{Host: "127.0.0.1", Dir: dir, bank: bank, ln: ln}
	a.wg.Add(1)
	go a.accept()
	relay := filepath.Join(dir, "pass_persist.sh")
	if err := os.WriteFile(relay, []byte(relayScript), 0o700); err != nil {
		a.Stop()
		return nil, err
	}
	relayPort := ln.Addr().(*net.TCPAddr).Port
	var lastErr error
	// A free UDP port can be taken between our probe and snmpd's bind:
	// try another.
	for attempt := 0; attempt < 3; attempt++ {
		port, err := pickUDPPort()
		if err != nil {
			a.Stop()
			return nil, err
		}
		if lastErr = a.run(ctx, snmpd, relay, relayPort, port); lastErr == nil {
			return a, nil
		}
	}
	a.Stop()
	return nil, lastErr
}

// pickUDPPort chooses snmpd's port; a variable so a test can hand it a
// port another snmpd holds.
var pickUDPPort = freeUDPPort

func freeUDPPort() (int, error) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}

func (a *Agent) run(ctx context.Context, snmpd, relay string, relayPort, port int) error {
	persist := filepath.Join(a.Dir, "persist")
	if err := os.MkdirAll(persist, 0o700); err != nil {
		return err
	}
	// The readiness probe asks with a community only this snmpd knows:
	// another test's snmpd that holds the port (ours then failed to bind)
	// drops it unanswered, so its answer is never taken for ours.
	probeCommunity := fmt.Sprintf("ready-%d-%d", os.Getpid(), time.Now().UnixNano())
	conf := fmt.Sprintf(`# written by pdu/snmpsim
agentAddress udp:127.0.0.1:%d
rocommunity %s 127.0.0.1
rocommunity `+probeCommunity+` 127.0.0.1
rwcommunity %s 127.0.0.1
createUser %s SHA "%s" AES "%s"
createUser %s SHA "%s" AES "%s"
rwuser %s priv
rouser %s priv
sysObjectID .1.3.6.1.4.1.318.1.3.4.5
sysName pdu-mock
sysDescr APC Web/SNMP Management Card (MB:v3.9.2 PF:v3.9.2 PN:apc_hw02_aos_392.bin AF1:v3.7.3 AN1:apc_hw02_rpdu_373.bin MN:AP7921B) (bmcfence pdu/snmpsim)
pass_persist .1.3.6.1.4.1.318 %s %d
`, port, ReadCommunity, WriteCommunity, V3User, V3AuthPass, V3PrivPass, V3ReadUser, V3AuthPass, V3PrivPass,
		V3User, V3ReadUser, relay, relayPort)
	confPath := filepath.Join(a.Dir, "snmpd.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return err
	}
	logPath := filepath.Join(a.Dir, "snmpd.log")
	// -f foreground, -C only our config, -Lf log to a file. No MIBs are
	// loaded (MIBS empty): the agent needs none, and loading Debian's
	// partial set only fills the log with warnings.
	cmd := exec.Command(snmpd, "-f", "-C", "-c", confPath, "-Lf", logPath, "-p", filepath.Join(a.Dir, "snmpd.pid"))
	cmd.Env = append(os.Environ(), "SNMP_PERSISTENT_DIR="+persist, "MIBS=", "MIBDIRS="+a.Dir)
	// Its own group (kill stops snmpd and its relay), and SIGKILL when the
	// test binary dies without its cleanups (a -timeout panic, a SIGKILL
	// from CI): otherwise snmpd runs on, in the foreground, holding its
	// port.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := childproc.Start(cmd); err != nil {
		return fmt.Errorf("start snmpd: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	a.cmd, a.exited = cmd, exited
	a.Port = port
	// Ready when it answers a GET of sysObjectID.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := probe(port, probeCommunity); err == nil {
			a.exited = exited
			return nil
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logPath)
			a.cmd = nil
			return fmt.Errorf("snmpd exited (%v) before it answered on udp 127.0.0.1:%d: %s", err, port, tail(string(log), 400))
		case <-ctx.Done():
			a.kill()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			a.kill()
			return fmt.Errorf("snmpd did not answer on udp 127.0.0.1:%d within 10s", port)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}

// probe sends an SNMPv2c GET of sysObjectID.0 with community and waits
// briefly for any answer.
func probe(port int, community string) error {
	c, err := net.Dial("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(getRequest(community, []int{1, 3, 6, 1, 2, 1, 1, 2, 0})); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 1500)
	_, err = c.Read(buf)
	return err
}

// getRequest encodes a minimal SNMPv2c GetRequest (BER) for probe.
func getRequest(community string, oid []int) []byte {
	tlv := func(tag byte, v []byte) []byte {
		l := len(v)
		if l < 128 {
			return append([]byte{tag, byte(l)}, v...)
		}
		return append([]byte{tag, 0x81, byte(l)}, v...)
	}
	enc := []byte{byte(oid[0]*40 + oid[1])}
	for _, n := range oid[2:] {
		var b []byte
		for {
			b = append([]byte{byte(n & 0x7f)}, b...)
			n >>= 7
			if n == 0 {
				break
			}
		}
		for i := 0; i < len(b)-1; i++ {
			b[i] |= 0x80
		}
		enc = append(enc, b...)
	}
	varbind := tlv(0x30, append(tlv(0x06, enc), 0x05, 0x00))
	pdu := tlv(0xa0, append(append(append(tlv(0x02, []byte{1}), tlv(0x02, []byte{0})...), tlv(0x02, []byte{0})...), tlv(0x30, varbind)...))
	return tlv(0x30, append(append(tlv(0x02, []byte{1}), tlv(0x04, []byte(community))...), pdu...))
}

// Stop ends snmpd and the relay; it is safe to call twice.
func (a *Agent) Stop() {
	a.kill()
	if a.ln != nil {
		a.ln.Close()
	}
	a.mu.Lock()
	for _, c := range a.conns {
		c.Close()
	}
	a.conns = nil
	a.mu.Unlock()
	a.wg.Wait()
}

func (a *Agent) kill() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	// The whole group: snmpd and its pass_persist relay.
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGTERM)
	if a.exited != nil {
		select {
		case <-a.exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
			<-a.exited
		}
	}
	a.cmd = nil
}

func (a *Agent) accept() {
	defer a.wg.Done()
	for {
		c, err := a.ln.Accept()
		if err != nil {
			return
		}
		a.mu.Lock()
		a.conns = append(a.conns, c)
		a.mu.Unlock()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer c.Close()
			a.serve(c)
		}()
	}
}

// serve speaks snmpd's pass_persist protocol (snmpd(8), "pass_persist"):
// PING → PONG; get/getnext OID → OID, TYPE, VALUE or NONE; set OID, "TYPE
// VALUE" → DONE or an error token.
func (a *Agent) serve(c net.Conn) {
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	line := func() (string, bool) {
		s, err := r.ReadString('\n')
		if err != nil {
			return "", false
		}
		return strings.TrimSpace(s), true
	}
	for {
		cmd, ok := line()
		if !ok {
			return
		}
		var reply []string
		switch cmd {
		case "PING":
			reply = []string{"PONG"}
		case "get", "getnext":
			oid, ok := line()
			if !ok {
				return
			}
			e, found := a.lookup(oid, cmd == "getnext")
			if !found {
				reply = []string{"NONE"}
			} else {
				reply = []string{e.oid, e.typ, e.value}
			}
		case "set":
			oid, ok := line()
			if !ok {
				return
			}
			tv, ok := line()
			if !ok {
				return
			}
			reply = []string{a.set(oid, tv)}
		default:
			continue // unknown commands are ignored, as snmpd's examples do
		}
		w.WriteString(strings.Join(reply, "\n") + "\n")
		if w.Flush() != nil {
			return
		}
	}
}

type entry struct {
	oid, typ, value string
	key             []int
}

const (
	rPDUIdent    = ".1.3.6.1.4.1.318.1.1.12.1"
	rPDUControl  = ".1.3.6.1.4.1.318.1.1.12.3.3.1.1"
	rPDUStatus   = ".1.3.6.1.4.1.318.1.1.12.3.5.1.1"
	sPDUControl  = ".1.3.6.1.4.1.318.1.1.4.4.2.1"
	rPDU2Metered = ".1.3.6.1.4.1.318.1.1.26.9.4.3.1"
)

// table is the whole subtree now, sorted by OID.
func (a *Agent) table() []entry {
	model, serial := a.bank.Identity()
	n := a.bank.OutletCount()
	es := []entry{
		{oid: rPDUIdent + ".1.0", typ: "string", value: "pdu-mock"},
		{oid: rPDUIdent + ".5.0", typ: "string", value: model},
		{oid: rPDUIdent + ".6.0", typ: "string", value: serial},
		{oid: rPDUIdent + ".8.0", typ: "integer", value: strconv.Itoa(n)},
	}
	for i := 1; i <= n; i++ {
		name, on, watts, err := a.bank.Outlet(i)
		if err != nil {
			continue
		}
		state := "2"
		if on {
			state = "1"
		}
		idx, s := strconv.Itoa(i), "."+strconv.Itoa(i)
		es = append(es,
			entry{oid: rPDUControl + ".1" + s, typ: "integer", value: idx},
			entry{oid: rPDUControl + ".2" + s, typ: "string", value: name},
			entry{oid: rPDUControl + ".4" + s, typ: "integer", value: state},
			entry{oid: rPDUStatus + ".1" + s, typ: "integer", value: idx},
			entry{oid: rPDUStatus + ".2" + s, typ: "string", value: name},
			entry{oid: rPDUStatus + ".4" + s, typ: "integer", value: state},
			entry{oid: sPDUControl + ".1" + s, typ: "integer", value: idx},
			entry{oid: sPDUControl + ".3" + s, typ: "integer", value: state},
			entry{oid: sPDUControl + ".4" + s, typ: "string", value: name},
			entry{oid: rPDU2Metered + ".1" + s, typ: "integer", value: idx},
			entry{oid: rPDU2Metered + ".3" + s, typ: "string", value: name},
			entry{oid: rPDU2Metered + ".4" + s, typ: "integer", value: idx},
			entry{oid: rPDU2Metered + ".7" + s, typ: "integer", value: strconv.Itoa(watts)},
		)
	}
	for i := range es {
		es[i].key = parseOID(es[i].oid)
	}
	sort.Slice(es, func(i, j int) bool { return compareOID(es[i].key, es[j].key) < 0 })
	return es
}

func parseOID(s string) []int {
	var out []int
	for _, p := range strings.Split(strings.TrimPrefix(s, "."), ".") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil
		}
		out = append(out, n)
	}
	return out
}

func compareOID(a, b []int) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] - b[i]
		}
	}
	return len(a) - len(b)
}

func (a *Agent) lookup(oid string, next bool) (entry, bool) {
	key := parseOID(oid)
	if key == nil {
		return entry{}, false
	}
	for _, e := range a.table() {
		c := compareOID(e.key, key)
		if (!next && c == 0) || (next && c > 0) {
			return e, true
		}
	}
	return entry{}, false
}

// set applies a SET: rPDUOutletControlOutletCommand and sPDUOutletCtl
// take 1 (on), 2 (off), 3 (reboot: off, then on a second later).
func (a *Agent) set(oid, typeValue string) string {
	key := parseOID(oid)
	var idx int
	switch {
	case len(key) > 0 && hasPrefix(key, parseOID(rPDUControl+".4")) && len(key) == len(parseOID(rPDUControl+".4"))+1,
		len(key) > 0 && hasPrefix(key, parseOID(sPDUControl+".3")) && len(key) == len(parseOID(sPDUControl+".3"))+1:
		idx = key[len(key)-1]
	default:
		return "not-writable"
	}
	typ, val, _ := strings.Cut(typeValue, " ")
	if typ != "integer" {
		return "wrong-type"
	}
	v, err := strconv.Atoi(strings.TrimSpace(val))
	if err != nil {
		return "wrong-type"
	}
	if idx < 1 || idx > a.bank.OutletCount() {
		return "not-writable"
	}
	switch v {
	case 1, 2:
		if err := a.bank.SetOutlet(idx, v == 1); err != nil {
			return "inconsistent-value"
		}
	case 3:
		if err := a.bank.SetOutlet(idx, false); err != nil {
			return "inconsistent-value"
		}
		time.AfterFunc(time.Second, func() { _ = a.bank.SetOutlet(idx, true) })
	default:
		return "wrong-value"
	}
	a.mu.Lock()
	a.sets = append(a.sets, Set{OID: oid, Value: v})
	a.mu.Unlock()
	return "DONE"
}

func hasPrefix(key, prefix []int) bool {
	if len(key) < len(prefix) {
		return false
	}
	return compareOID(key[:len(prefix)], prefix) == 0
}
