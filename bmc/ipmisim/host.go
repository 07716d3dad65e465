package ipmisim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Host is the machine's side of the BMC's system interface: what the host
// OS's IPMI driver sends in-band (over KCS on a real server), and what the
// BMC does to the host (hard reset, power off, NMI). It speaks OpenIPMI's
// "VM" serial codec (lanserv/serial_ipmi.c, the one qemu's ipmi-bmc-extern
// speaks) to ipmi_sim's system channel (channel 15), so the BMC's watchdog,
// SEL and chassis are ipmi_sim's own, as a remote client sees them.
//
// Framing: a message is seq, netfn<<2|lun, cmd, data, checksum (the bytes
// sum to zero), ended by A0h; a command is its byte and arguments, ended by
// A1h; A0h, A1h and AAh inside are sent as AAh then the byte with bit 4
// set.
type Host struct {
	sim  *Sim
	conn net.Conn

	mu         sync.Mutex
	seq        byte
	pending    map[byte]chan []byte
	ops        []HostOp
	petting    context.CancelFunc
	petDone    chan struct{}
	panicOnNMI bool
	closed     bool
	done       chan struct{}
}

// HostOp is something the BMC did to the host through its system
// interface.
type HostOp struct {
	At time.Time
	Op string // "reset", "power-off", "graceful-shutdown", "nmi"
}

// VM codec bytes (lanserv/serial_ipmi.c).
const (
	vmMsgChar    = 0xA0
	vmCmdChar    = 0xA1
	vmEscapeChar = 0xAA

	vmCmdVersion          = 0xff
	vmCmdNoAttn           = 0x00
	vmCmdAttn             = 0x01
	vmCmdAttnIRQ          = 0x02
	vmCmdPowerOff         = 0x03
	vmCmdReset            = 0x04
	vmCmdEnableIRQ        = 0x05
	vmCmdDisableIRQ       = 0x06
	vmCmdSendNMI          = 0x07
	vmCmdCapabilities     = 0x08
	vmCmdGracefulShutdown = 0x09

	vmCapPower = 0x01
	vmCapReset = 0x02
	vmCapNMI   = 0x08
)

// IPMI commands the host sends (IPMI 2.0 appendix G).
const (
	netFnApp              = 0x06
	netFnSensorEvent      = 0x04
	netFnStorage          = 0x0a
	cmdAddSELEntry        = 0x44
	cmdResetWatchdogTimer = 0x22
	cmdSetWatchdogTimer   = 0x24
	cmdGetWatchdogTimer   = 0x25
	cmdPlatformEvent      = 0x02

	// TimerUseSMSOS is the watchdog timer use an OS driver sets.
	TimerUseSMSOS = 0x04
	// The watchdog's timeout actions (Set Watchdog Timer byte 2 [2:0]).
	WatchdogNoAction   = 0x00
	WatchdogHardReset  = 0x01
	WatchdogPowerDown  = 0x02
	WatchdogPowerCycle = 0x03

	// Event generator ID of the Linux kernel (IPMI table 5-4: system
	// software ID 20h, sent as 41h), as ipmi_msghandler's panic event uses.
	kernelGeneratorID = 0x41
	evmRev            = 0x04
	sensorSpecific    = 0x6f
	// Sensor types of the events the host sends.
	SensorTypeOSStop     = 0x20
	SensorTypeSystemBoot = 0x1d
)

// connectHost connects to the sim's system channel and announces what the
// host can have done to it: power, reset, NMI.
func (s *Sim) connectHost(ctx context.Context) (*Host, error) {
	var d net.Dialer
	var conn net.Conn
	var err error
	for {
		conn, err = d.DialContext(ctx, "tcp", net.JoinHostPort(s.host, fmt.Sprint(s.serialPort)))
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("ipmisim: connecting the host to the system channel: %w", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	h := &Host{sim: s, conn: conn, pending: map[byte]chan []byte{}, done: make(chan struct{})}
	go h.read()
	if err := h.command(vmCmdCapabilities, vmCapPower|vmCapReset|vmCapNMI); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return h, nil
}

func (h *Host) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	cancel := h.petting
	h.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	_ = h.conn.Close()
	<-h.done
}

func escape(out []byte, b byte) []byte {
	switch b {
	case vmMsgChar, vmCmdChar, vmEscapeChar:
		return append(out, vmEscapeChar, b|0x10)
	}
	return append(out, b)
}

func (h *Host) command(b ...byte) error {
	var out []byte
	for _, x := range b {
		out = escape(out, x)
	}
	out = append(out, vmCmdChar)
	_, err := h.conn.Write(out)
	return err
}

// Request sends one IPMI request in-band and returns the response data
// (completion code first).
func (h *Host) Request(ctx context.Context, netFn, cmd byte, data ...byte) ([]byte, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errors.New("ipmisim: host closed")
	}
	h.seq++
	seq := h.seq
	ch := make(chan []byte, 1)
	h.pending[seq] = ch
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.pending, seq)
		h.mu.Unlock()
	}()
	raw := append([]byte{seq, netFn << 2, cmd}, data...)
	var sum byte
	for _, b := range raw {
		sum += b
	}
	raw = append(raw, -sum)
	var out []byte
	for _, b := range raw {
		out = escape(out, b)
	}
	out = append(out, vmMsgChar)
	if _, err := h.conn.Write(out); err != nil {
		return nil, err
	}
	select {
	case resp := <-ch:
		return resp, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("ipmisim: in-band %02x/%02x: %w", netFn, cmd, ctx.Err())
	case <-h.done:
		return nil, errors.New("ipmisim: the system channel closed")
	}
}

func (h *Host) read() {
	defer close(h.done)
	r := bufio.NewReader(h.conn)
	var buf []byte
	esc := false
	for {
		b, err := r.ReadByte()
		if err != nil {
			return
		}
		switch {
		case b == vmMsgChar:
			h.handleMsg(buf)
			buf, esc = buf[:0], false
		case b == vmCmdChar:
			h.handleCmd(buf)
			buf, esc = buf[:0], false
		case b == vmEscapeChar:
			esc = true
		default:
			if esc {
				b &^= 0x10
				esc = false
			}
			buf = append(buf, b)
		}
	}
}

func (h *Host) handleMsg(m []byte) {
	if len(m) < 4 {
		return
	}
	var sum byte
	for _, b := range m {
		sum += b
	}
	if sum != 0 {
		return
	}
	seq := m[0]
	data := append([]byte(nil), m[3:len(m)-1]...)
	h.mu.Lock()
	ch := h.pending[seq]
	h.mu.Unlock()
	if ch != nil {
		ch <- data
	}
}

func (h *Host) handleCmd(c []byte) {
	if len(c) == 0 {
		return
	}
	op := ""
	switch c[0] {
	case vmCmdReset:
		op = "reset"
	case vmCmdPowerOff:
		op = "power-off"
		// The host's power is the chassis-control program's file.
		_ = h.sim.SetPower(false)
	case vmCmdGracefulShutdown:
		op = "graceful-shutdown"
	case vmCmdSendNMI:
		op = "nmi"
	default:
		return // version, attention, interrupts
	}
	h.mu.Lock()
	h.ops = append(h.ops, HostOp{At: time.Now(), Op: op})
	cancel := h.petting
	panics := h.panicOnNMI
	h.mu.Unlock()
	switch op {
	case "reset", "power-off":
		if cancel != nil {
			cancel() // the OS that petted is gone
		}
	case "nmi":
		if panics {
			go func() {
				ctx, c := context.WithTimeout(context.Background(), 5*time.Second)
				defer c()
				_ = h.OSCriticalStop(ctx)
			}()
		}
	}
}

// Ops lists what the BMC did to the host, oldest first.
func (h *Host) Ops() []HostOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]HostOp(nil), h.ops...)
}

// SetPanicOnNMI: the host's kernel panics (and logs an OS Critical Stop)
// on an NMI, as one set up for kdump does.
func (h *Host) SetPanicOnNMI(v bool) {
	h.mu.Lock()
	h.panicOnNMI = v
	h.mu.Unlock()
}

func completion(resp []byte, what string) error {
	if len(resp) == 0 {
		return fmt.Errorf("ipmisim: %s: empty response", what)
	}
	if resp[0] != 0 {
		return fmt.Errorf("ipmisim: %s: completion code %#02x", what, resp[0])
	}
	return nil
}

// ArmWatchdog does what Linux's ipmi_watchdog does when /dev/watchdog is
// opened: Set Watchdog Timer (timer use SMS/OS, don't stop, the action,
// no pre-timeout, clear the SMS/OS expiration flag, the countdown in
// tenths of a second), then Reset Watchdog Timer to start it.
func (h *Host) ArmWatchdog(ctx context.Context, timeout time.Duration, action byte) error {
	tenths := uint16(timeout / (100 * time.Millisecond))
	resp, err := h.Request(ctx, netFnApp, cmdSetWatchdogTimer,
		0x40|TimerUseSMSOS, action&0x07, 0, 1<<TimerUseSMSOS, byte(tenths), byte(tenths>>8))
	if err != nil {
		return err
	}
	if err := completion(resp, "Set Watchdog Timer"); err != nil {
		return err
	}
	return h.Pet(ctx)
}

// Pet is Reset Watchdog Timer: the countdown starts again.
func (h *Host) Pet(ctx context.Context) error {
	resp, err := h.Request(ctx, netFnApp, cmdResetWatchdogTimer)
	if err != nil {
		return err
	}
	return completion(resp, "Reset Watchdog Timer")
}

// DisarmWatchdog stops the timer (Set Watchdog Timer without "don't
// stop"), what the driver does on the magic close.
func (h *Host) DisarmWatchdog(ctx context.Context) error {
	resp, err := h.Request(ctx, netFnApp, cmdSetWatchdogTimer, TimerUseSMSOS, 0, 0, 0, 0x64, 0)
	if err != nil {
		return err
	}
	return completion(resp, "Set Watchdog Timer (stop)")
}

// StartPetting arms the watchdog and pets it every interval until
// StopPetting (or the host is reset, powered off or hung).
func (h *Host) StartPetting(ctx context.Context, timeout, interval time.Duration, action byte) error {
	if err := h.ArmWatchdog(ctx, timeout, action); err != nil {
		return err
	}
	pctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h.mu.Lock()
	h.petting, h.petDone = cancel, done
	h.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
				rctx, c := context.WithTimeout(pctx, interval)
				_ = h.Pet(rctx)
				c()
			}
		}
	}()
	return nil
}

// StopPetting stops the petter. With disarm it stops the timer first (the
// magic close); without, the timer runs on (a hang, a killed petter).
func (h *Host) StopPetting(ctx context.Context, disarm bool) error {
	h.mu.Lock()
	cancel, done := h.petting, h.petDone
	h.petting, h.petDone = nil, nil
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	if disarm {
		return h.DisarmWatchdog(ctx)
	}
	return nil
}

// PlatformEvent sends a Platform Event Message from the kernel (generator
// 41h) for a sensor-specific offset of sensorType; the BMC adds it to its
// SEL. Debian's ipmi_sim 2.0.33 does not implement the command (OpenIPMI
// added it in 8366bed4, 2025-04: it answers C1h); the host then adds the
// same record with Add SEL Entry, which the BMC stamps with its own time.
func (h *Host) PlatformEvent(ctx context.Context, sensorType, offset, data2, data3 byte) error {
	resp, err := h.Request(ctx, netFnSensorEvent, cmdPlatformEvent,
		kernelGeneratorID, evmRev, sensorType, 0, sensorSpecific, 0xa0|offset, data2, data3)
	if err != nil {
		return err
	}
	if len(resp) > 0 && resp[0] == 0xc1 {
		resp, err = h.Request(ctx, netFnStorage, cmdAddSELEntry,
			0, 0, 0x02, 0, 0, 0, 0, kernelGeneratorID, 0, evmRev, sensorType, 0, sensorSpecific, 0xa0|offset, data2, data3)
		if err != nil {
			return err
		}
		return completion(resp, "Add SEL Entry")
	}
	return completion(resp, "Platform Event Message")
}

// OSCriticalStop is Linux's panic event (ipmi_msghandler panic_op=event):
// OS Stop/Shutdown, offset 01h, run-time critical stop.
func (h *Host) OSCriticalStop(ctx context.Context) error {
	return h.PlatformEvent(ctx, SensorTypeOSStop, 0x01, 0xff, 0xff)
}

// BootInitiated is what BIOS logs when the host starts: System Boot /
// Restart Initiated (sensor type 1Dh), offset 00h by power-up or 01h by
// hard reset. The boot marker of the SEL.
func (h *Host) BootInitiated(ctx context.Context, byReset bool) error {
	offset := byte(0x00)
	if byReset {
		offset = 0x01
	}
	return h.PlatformEvent(ctx, SensorTypeSystemBoot, offset, 0xff, 0xff)
}
