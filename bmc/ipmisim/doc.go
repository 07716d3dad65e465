// Package ipmisim runs a real IPMI-over-LAN BMC on 127.0.0.1 for tests: Debian's OpenIPMI
// ipmi_sim, with a generated chassis-control program whose behaviour tests script from Go.
//
// It is not a test-only package (there is no _test suffix) so that other packages' tests and the
// end-to-end harness can import it. It needs `ipmi_sim` and `ipmitool` on PATH
// (`apt-get install openipmi ipmitool`); [Available] says whether they are there and [StartT]
// skips the test when they are not.
//
// # How it works
//
// [Start] writes into a directory (Options.Dir or a temp dir):
//
//	lan.conf             one LAN channel on 127.0.0.1:PORT, one admin user, chassis_control line
//	bmc.emu              one MC at 0x20 made the BMC (mc_setbmc, mc_add, mc_enable)
//	chassis-control.sh   the program ipmi_sim runs for every chassis request (below)
//	power                "1" or "0": the machine's power, the truth behind every status read
//	behavior             shell variables (stuck=…, failing=…, …) that [Sim.SetBehavior] replaces
//	boot                 the last boot device set over IPMI
//	requests.log         one line per request the program received ("get power", "set power 0")
//	ipmi_sim.log         ipmi_sim's stdout and stderr (start-up errors only: later ones go to syslog)
//	state/               ipmi_sim's persistence directory (-s), recreated empty on every Start
//
// and then runs `ipmi_sim -c lan.conf -f bmc.emu -s state -n` in its own process group, and
// returns once the BMC answers an RMCP presence ping (ASF ping/pong on the same UDP port).
// Go changes files by writing a temp file and renaming it, so the program never reads half a file.
//
// # The chassis-control protocol (found in OpenIPMI's lanserv/bmc_chassis.c and extcmd.c)
//
// The lan.conf line `chassis_control "f() { . 'PROG'; }; f 0x20"` makes ipmi_sim run, through
// popen(3) (so /bin/sh parses the line; hence the single quotes around the path; the function
// sources PROG into that shell, sparing a second one), with the request appended:
//
//	PROG 0x20 get power          Get Chassis Status: print "power:1" or "power:0"
//	PROG 0x20 get boot           boot-info acknowledge (ipmitool chassis bootdev): print "boot:VALUE"
//	PROG 0x20 set power 0|1      Chassis Control power down / power up; also the first half of a cycle
//	PROG 0x20 set reset 1        Chassis Control hard reset (a pulse)
//	PROG 0x20 set shutdown 1     Chassis Control soft shutdown (ipmitool chassis power soft)
//	PROG 0x20 set boot pxe|…     boot device
//	PROG 0x20 set identify "I F" chassis identify (interval, force)
//
// A "set" prints nothing. Any non-zero exit makes ipmi_sim answer the IPMI request with
// completion code 0xFF, which ipmitool prints as "Unspecified error". ipmi_sim is single-threaded
// and waits for the program: while the program sleeps ([Behavior].Delay) the whole BMC is silent.
//
// Power cycle is done by ipmi_sim itself, not the program: `set power 0`, then one second later
// `get power` and, if that reads off, `set power 1`. So a cycle turns an OFF machine ON (real BMCs
// refuse a cycle when off, completion code 0xD5), and a Stuck BMC that ignored the off does not
// get the `set power 1`. A cycle whose `set power 0` fails starts no timer.
//
// # What ipmitool 1.8.19 prints (ipmitool -I lanplus -C 3 … -E, exit code in brackets)
//
// The tests assert these outputs and exit codes; the 6 s, 18 s and 20 s timings, and the -C 3
// stall, were measured by hand.
//
//	chassis power status, on            stdout "Chassis Power is on\n" [0]
//	chassis power status, off           stdout "Chassis Power is off\n" [0]
//	chassis power off                   stdout "Chassis Power Control: Down/Off\n" [0], also when
//	                                    already off (ipmi_sim never answers 0xD5)
//	chassis power on                    stdout "Chassis Power Control: Up/On\n" [0], also when on
//	chassis power cycle|reset|soft      stdout "Chassis Power Control: Cycle|Reset|Soft\n" [0]
//	Stuck, power off                    stdout "Chassis Power Control: Down/Off\n" [0]; status stays on
//	Failing, power off                  stderr "Set Chassis Power Control to Down/Off failed: Unspecified error\n" [1]
//	Failing, power on                   stderr "Set Chassis Power Control to Up/On failed: Unspecified error\n" [1]
//	StatusFails, power status           stderr "Get Chassis Power Status failed: Unspecified error\n" [1]
//	Delay below 1 s                     the normal output, that much later
//	Delay of 1–3 s, default -N/-R       ipmitool retransmits after 1 s; the sim executes the
//	                                    retransmission too (two "set power 0" in Commands) and
//	                                    ipmitool prints the normal output after 2×Delay [0].
//	                                    A 6 s delay: three executions, 18 s.
//	Delay 2.5 s, -N 1 -R 1              ipmitool gives up after 2 s: stderr "Unable to set Chassis
//	                                    Power Control to Down/Off\n" (status: "Unable to get Chassis
//	                                    Power Status\n"), then "Close Session command failed\n" [1];
//	                                    and the sim still powers the machine off.
//	wrong password, unknown user        stderr "Error: Unable to establish IPMI v2 / RMCP+ session\n" [1],
//	                                    at once. With -v, before it: "Loading IANA PEN Registry...\n"
//	                                    and "> RAKP 2 HMAC is invalid\n" (password) or
//	                                    "RAKP 2 message indicates an error : unauthorized name\n" (user)
//	nothing listening                   the same stderr line [1], after 2 s with -N 1 -R 1, 20 s with
//	                                    the defaults. With -v, before it: "Get Auth Capabilities error"
//	                                    and "Error issuing Get Channel Authentication Capabilities request"
//
// So without -v an authentication failure and an unreachable BMC print the same words; only the
// time taken (or -v) tells them apart. Without -C 3, ipmitool prints "Unable to Get Channel
// Cipher Suites" and stalls 10 s before succeeding.
package ipmisim
