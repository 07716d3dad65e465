package ipmisim

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// File names inside the sim's directory.
const (
	lanConfFile   = "lan.conf"
	emuFile       = "bmc.emu"
	controlFile   = "chassis-control.sh"
	powerFile     = "power"
	behaviorFile  = "behavior"
	bootFile      = "boot"
	requestsFile  = "requests.log"
	fallbackFile  = "fallback"   // present while a PowerOnFails power-on awaits its one on-read
	pendingOnFile = "pending-on" // while a power cycle holds the machine off: when it comes on (ms)
	offAtFile     = "off-at"     // when a machine that was on last powered down (ms)
	cancelFile    = "cancel"     // a power-down cancelled the cycle under way
	logFile       = "ipmi_sim.log"
	stateDir      = "state"
	bmcIPMBAddr   = "0x20"
	simName       = "bmcfence-ipmisim"
	maxUserLen    = 16 // IPMI user name field
	maxPasswdLen  = 20 // IPMI 2.0 password field
	tempFilePrefx = ".tmp-"
)

// cycleFiles are the script's transient state, cleared by SetPower and at start.
var cycleFiles = []string{fallbackFile, pendingOnFile, offAtFile, cancelFile}

// lanConf is ipmi_sim's configuration (man ipmi_lan). The user line's trailing auth list and the
// allowed_auths_* lines only matter for IPMI 1.5 (-I lan); lanplus (RMCP+) authenticates with
// RAKP and takes the password from the user line. ipmi_sim runs the chassis_control line, with
// the request appended, through popen(3), that is /bin/sh -c; the line sources the program into
// that shell through a function (whose arguments the program sees as $1...), so no second shell
// starts for a chassis request: a fork and two execs less, milliseconds a real BMC does not
// spend. (The program may still "exit": it is the popen shell's to end.) The guid is needed by
// RAKP, and is what Get
// System GUID answers with (its 16 bytes as written, so SMBIOS byte order: see guidHex).
func lanConf(host string, port int, user, password, control, guid string, serialPort int) string {
	serial := ""
	if serialPort > 0 {
		// The system interface (channel 15) as OpenIPMI's VM codec on a TCP
		// port ipmi_sim listens on; Host connects to it (host.go).
		serial = fmt.Sprintf("  serial 15 %s %d codec VM\n", host, serialPort)
	}
	return serial + fmt.Sprintf(`# Written by github.com/bmcfence/bmcfence/bmc/ipmisim.
name "%s"
set_working_mc %s
  startlan 1
    addr %s %d
    priv_limit admin
    allowed_auths_callback md5
    allowed_auths_user md5
    allowed_auths_operator md5
    allowed_auths_admin md5
    guid %s
  endlan
  chassis_control "f() { . %s; }; f %s"
  user 2 true "%s" "%s" admin 10 md5
`, simName, bmcIPMBAddr, host, port, guid, shellQuote(control), bmcIPMBAddr, user, password)
}

// emu is the ipmi_sim command file (man ipmi_sim_cmd): a single MC that is the BMC, with a
// System Event Log and the watchdog's sensor: sensor 0 (ipmi_sim's WATCHDOG_SENSOR_NUM), type 23h
// "Watchdog 2", sensor-specific, event-only (ipmi_sim logs every expiry of an event-only sensor;
// a readable one only when its state bit changes), assertions of offsets 0-3 (timer expired, hard
// reset, power down, power cycle) and 8 (timer interrupt) enabled.
const emu = `# Written by github.com/bmcfence/bmcfence/bmc/ipmisim.
mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02
sel_enable 0x20 1000 0x0a
sensor_add 0x20 0 0 0x23 0x6f event-only
sensor_set_event_support 0x20 0 0 enable scanning per-state 000000100001111 000000000000000 000000100001111 000000000000000
mc_enable 0x20
`

// controlScript is the chassis-control program. See the package documentation for the protocol.
// It runs to completion before ipmi_sim handles the next request, so it never races itself; it can
// race the Go side, which only ever replaces whole files.
const controlScript = `#!/bin/sh
# Chassis control program for ipmi_sim, written by github.com/bmcfence/bmcfence/bmc/ipmisim.
# ipmi_sim runs: PROG 0x20 get power|boot, or PROG 0x20 set NAME VALUE [NAME VALUE ...].
# "get" prints NAME:VALUE lines; a non-zero exit makes the BMC answer completion code 0xFF.
d=@DIR@
stuck=0 failing=0 status_fails=0 poweron_fails=0 delay=0 cycle_dwell_ms=0
[ -r "$d/behavior" ] && . "$d/behavior"
shift
op=$1
[ $# -gt 0 ] && shift
printf '%s\n' "$op $*" >>"$d/requests.log"
[ "$delay" = 0 ] || sleep "$delay"
put() { printf '%s\n' "$2" >"$d/.tmp-$1.$$" && mv -f "$d/.tmp-$1.$$" "$d/$1"; }
# Reads use only shell builtins: ipmi_sim waits for this program on every chassis request, and
# a fork per read would make the simulated BMC several milliseconds slower than it need be.
now=
if [ "$op" = set ] || [ -e "$d/pending-on" ]; then now=$(date +%s%3N); fi
# A power cycle's off-dwell ends by itself: the machine comes on when it is due.
if [ -e "$d/pending-on" ]; then
	read -r due <"$d/pending-on"
	if [ "$now" -ge "$due" ]; then
		rm -f "$d/pending-on"
		put power 1
	fi
fi
read -r power <"$d/power" || exit 1
# since_off: milliseconds since the last power-down of a machine that was on (ipmi_sim's own
# cycle sends its power-up about 1000 ms after it).
since_off=999999
if [ -e "$d/off-at" ] && [ -n "$now" ]; then
	read -r off_at <"$d/off-at"
	since_off=$((now - off_at))
fi
case $op in
get)
	if [ "$status_fails" = 1 ]; then echo "ipmisim: status reads fail"; exit 1; fi
	for p in "$@"; do
		case $p in
		power)
			echo "power:$power"
			# PowerOnFails: the machine read on once after the power-on; now it falls back.
			if [ -e "$d/fallback" ]; then rm -f "$d/fallback"; put power 0; fi
			;;
		boot) read -r boot <"$d/boot"; echo "boot:$boot" ;;
		*) echo "ipmisim: cannot get $p"; exit 1 ;;
		esac
	done
	;;
set)
	if [ "$failing" = 1 ]; then echo "ipmisim: chassis control fails"; exit 1; fi
	if [ "$stuck" = 1 ]; then exit 0; fi
	while [ $# -ge 2 ]; do
		p=$1 v=$2
		shift 2
		case $p in
		power)
			case $v in
			0)
				rm -f "$d/fallback"
				if [ "$power" = 1 ]; then
					put off-at "$now"
				elif [ -e "$d/pending-on" ] || [ "$since_off" -lt 1600 ]; then
					# A power-down during a cycle's off-dwell cancels the cycle.
					rm -f "$d/pending-on"
					put cancel "$now"
				fi
				put power 0
				;;
			1)
				if [ "$cycle_dwell_ms" != 0 ] && [ "$power" = 0 ] && [ "$since_off" -ge 800 ] && [ "$since_off" -lt 1600 ]; then
					# ipmi_sim's own cycle powering up again: hold the machine off for the dwell,
					# unless a power-down cancelled the cycle.
					if [ -e "$d/cancel" ]; then
						rm -f "$d/cancel"
					else
						put pending-on $((off_at + cycle_dwell_ms))
					fi
					rm -f "$d/off-at"
				else
					rm -f "$d/cancel" "$d/pending-on"
					if [ "$poweron_fails" = 1 ] && [ "$power" = 0 ]; then : >"$d/fallback"; fi
					put power 1
				fi
				;;
			*) echo "ipmisim: bad power value $v"; exit 1 ;;
			esac
			;;
		shutdown) rm -f "$d/fallback" "$d/pending-on"; put power 0 ;;
		reset) ;; # a reset pulse leaves the power as it is
		boot) put boot "$v" ;;
		identify) ;;
		*) echo "ipmisim: cannot set $p"; exit 1 ;;
		esac
	done
	;;
*)
	echo "ipmisim: unknown operation $op"
	exit 1
	;;
esac
exit 0
`

// behaviorVars renders b as the shell assignments the control script sources.
func behaviorVars(b Behavior) string {
	delay := "0"
	if b.Delay > 0 {
		// sleep(1) takes fractional seconds; millisecond resolution is plenty.
		delay = strconv.FormatFloat(b.Delay.Round(time.Millisecond).Seconds(), 'f', 3, 64)
	}
	return fmt.Sprintf("stuck=%d\nfailing=%d\nstatus_fails=%d\npoweron_fails=%d\ndelay=%s\ncycle_dwell_ms=%d\n",
		b2i(b.Stuck), b2i(b.Failing), b2i(b.StatusFails), b2i(b.PowerOnFails), delay, b.CycleDwell.Milliseconds())
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func powerString(on bool) string {
	if on {
		return "1\n"
	}
	return "0\n"
}

// shellQuote quotes s for /bin/sh. Callers have rejected quotes and backslashes already (see
// checkPath), which ipmi_sim's config tokenizer would not pass through unharmed.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// checkPath rejects directory names that cannot be written into lan.conf's quoted
// chassis_control string. t.TempDir() names never contain these characters.
func checkPath(dir string) error {
	if i := strings.IndexAny(dir, "'\"\\\n\r\t"); i >= 0 {
		return fmt.Errorf("directory %q contains %q, which cannot be quoted in lan.conf", dir, dir[i])
	}
	return nil
}

// checkCredential rejects what lan.conf cannot carry inside a quoted token, and what IPMI cannot hold.
func checkCredential(what, v string, maxLen int) error {
	if v == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(v) > maxLen {
		return fmt.Errorf("%s is longer than %d bytes (IPMI limit)", what, maxLen)
	}
	for _, r := range v {
		if r <= ' ' || r >= 0x7f || r == '"' || r == '\\' || r == '#' {
			return fmt.Errorf("%s may only hold printable ASCII without space, '\"', '\\' and '#'", what)
		}
	}
	return nil
}

// writeFileAtomic replaces dir/name by writing a temp file in dir and renaming it over the old one.
func writeFileAtomic(dir, name, content string, perm os.FileMode) error {
	f, err := os.CreateTemp(dir, tempFilePrefx+name+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.WriteString(content)
	cerr := f.Close()
	if err := firstErr(werr, cerr, os.Chmod(tmp, perm)); err != nil {
		_ = os.Remove(tmp) // best effort: the write already failed
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp) // best effort: the rename already failed
		return err
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// guidHex renders a canonical SMBIOS-decoded GUID string as the 32 hex digits lan.conf's guid
// takes: the 16 bytes in SMBIOS order, the first three fields little-endian, which is how BMCs
// answer Get System GUID and what a client decodes back to the same string.
func guidHex(u string) (string, error) {
	h := strings.ReplaceAll(u, "-", "")
	if len(h) != 32 || len(u) != 36 {
		return "", fmt.Errorf("GUID %q is not 8-4-4-4-12 hex digits", u)
	}
	var b [16]byte
	for i := range b {
		v, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return "", fmt.Errorf("GUID %q is not 8-4-4-4-12 hex digits", u)
		}
		b[i] = byte(v)
	}
	b[0], b[1], b[2], b[3] = b[3], b[2], b[1], b[0]
	b[4], b[5] = b[5], b[4]
	b[6], b[7] = b[7], b[6]
	return fmt.Sprintf("%x", b[:]), nil
}
