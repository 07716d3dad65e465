package dial

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/machine"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

// The Redfish evidence reader against the mock's vendor profiles over real
// HTTPS: what each BMC shows of a hang, a panic, a reboot through a long
// POST, and the lies (a stale entry, another system's entry, a POST timer).

// evidenceMock serves one On system "1" (and "2", another machine on the
// same BMC) with a 6-minute POST, on a fake clock.
func evidenceMock(t *testing.T, p redfishmock.Profile) (*Adapter, *redfishmock.Mock, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	timing := machine.Timing{PowerOn: 6 * time.Minute, PowerOff: time.Second, GracefulShutdown: 10 * time.Second, RestartOff: 5 * time.Second}
	cfg := mockConfig(redfishmock.SystemConfig{ID: "1"}, redfishmock.SystemConfig{ID: "2"})
	cfg.Profile, cfg.Timing = p, timing
	srv := startMock(t, cfg, redfishmock.WithClock(clk))
	return adapterFor(t, srv, withSystem("1")), srv.Mock, clk
}

func readEvidence(t *testing.T, a *Adapter) bmc.EvidenceReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), okTimeout)
	defer cancel()
	rep, err := a.ReadEvidence(ctx)
	if err != nil {
		t.Fatalf("ReadEvidence: %v", err)
	}
	return rep
}

// evidenceLine is what the tests compare of an entry.
type evidenceLine struct {
	Kind        bmc.EvidenceKind
	TimerUse    bmc.TimerUse
	Action      string
	Boot        bmc.BootRelation
	OtherSystem bool
}

func lines(rep bmc.EvidenceReport) []evidenceLine {
	var out []evidenceLine
	for _, e := range rep.Entries {
		out = append(out, evidenceLine{e.Kind, e.TimerUse, e.Action, e.Boot, e.OtherSystem})
	}
	return out
}

// Per profile: what the BMC says of the watchdog's timer use and action.
var profileEvidence = []struct {
	profile   redfishmock.Profile
	watchdog  bool         // HostWatchdogTimer reported
	use       bmc.TimerUse // of an SMS/OS expiry
	action    string       // of an expiry with no action
	bootKnown bool         // the entries can be placed relative to the boot
}{
	{redfishmock.ProfileGeneric, true, bmc.TimerUseSMSOS, "None", true},
	{redfishmock.ProfileIDRAC9, true, bmc.TimerUseUnknown, "None", false},
	{redfishmock.ProfileILO5, false, bmc.TimerUseUnknown, "", false},
	{redfishmock.ProfileOpenBMC, true, bmc.TimerUseSMSOS, "None", true},
}

func TestEvidenceOfAHangPerProfile(t *testing.T) {
	for _, pe := range profileEvidence {
		t.Run(string(pe.profile), func(t *testing.T) {
			a, m, clk := evidenceMock(t, pe.profile)
			if err := m.StartPetter("1", 30*time.Second, machine.WatchdogNoAction); err != nil {
				t.Fatal(err)
			}
			rep := readEvidence(t, a)
			if rep.Watchdog.Reported != pe.watchdog || (pe.watchdog && (!rep.Watchdog.Enabled || rep.Watchdog.TimeoutAction != "None")) {
				t.Errorf("armed watchdog reads %+v; want reported %v, enabled, None", rep.Watchdog, pe.watchdog)
			}
			if len(rep.Entries) != 0 || rep.Identity.SystemID != "1" {
				t.Fatalf("before the hang: %+v", rep)
			}
			clk.Step(10 * time.Second)
			if err := m.Event("1", machine.EventOSHang); err != nil {
				t.Fatal(err)
			}
			clk.Step(30*time.Second - time.Nanosecond)
			if rep := readEvidence(t, a); len(rep.Entries) != 0 {
				t.Fatalf("a nanosecond before the timeout: %+v", rep.Entries)
			}
			clk.Step(time.Nanosecond)
			rep = readEvidence(t, a)
			boot := bmc.BootUnknown
			if pe.bootKnown {
				boot = bmc.BootCurrent
			}
			want := []evidenceLine{{Kind: bmc.EvidenceWatchdogExpired, TimerUse: pe.use, Action: pe.action, Boot: boot}}
			if diff := cmp.Diff(want, lines(rep)); diff != "" {
				t.Errorf("after the timeout (-want +got):\n%s", diff)
			}
			e := rep.Entries[0]
			if e.Key == "" || e.EntryID == "" || !e.BMCTime.Equal(t0.Add(40*time.Second)) {
				t.Errorf("entry %+v: want a key, an id and the BMC's time %v", e, t0.Add(40*time.Second))
			}
			if pe.watchdog && rep.Watchdog.Enabled {
				t.Errorf("an expired watchdog still reads enabled: %+v", rep.Watchdog)
			}
			// The same entry keeps its key across reads.
			if again := readEvidence(t, a); again.Entries[0].Key != e.Key {
				t.Errorf("key changed between reads: %q, %q", e.Key, again.Entries[0].Key)
			}
		})
	}
}

func TestEvidenceOfAPanicPerProfile(t *testing.T) {
	for _, pe := range profileEvidence {
		t.Run(string(pe.profile), func(t *testing.T) {
			a, m, _ := evidenceMock(t, pe.profile)
			if err := m.Event("1", machine.EventOSPanic); err != nil {
				t.Fatal(err)
			}
			got := lines(readEvidence(t, a))
			boot := bmc.BootUnknown
			if pe.bootKnown {
				boot = bmc.BootCurrent
			}
			if diff := cmp.Diff([]evidenceLine{{Kind: bmc.EvidenceOSCriticalStop, Boot: boot}}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// An expiry that reset the machine is, once it boots again, from the
// previous boot: on BMCs that log boots or report LastResetTime.
func TestEvidenceFromBeforeTheLastBootIsMarkedPrevious(t *testing.T) {
	for _, pe := range profileEvidence {
		t.Run(string(pe.profile), func(t *testing.T) {
			a, m, clk := evidenceMock(t, pe.profile)
			if err := m.StartPetter("1", 30*time.Second, machine.WatchdogHardReset); err != nil {
				t.Fatal(err)
			}
			if err := m.Event("1", machine.EventOSHang); err != nil {
				t.Fatal(err)
			}
			clk.Step(31 * time.Second) // expired, reset: in its restart dwell
			clk.Step(10 * time.Minute) // booted again
			rep := readEvidence(t, a)
			if len(rep.Entries) != 1 {
				t.Fatalf("entries %+v", rep.Entries)
			}
			want := bmc.BootPrevious
			if pe.profile == redfishmock.ProfileILO5 {
				want = bmc.BootUnknown // the IML here logs no boots and iLO shows no LastResetTime
			}
			if got := rep.Entries[0].Boot; got != want {
				t.Errorf("boot %q, want %q (boot marker %+v)", got, want, rep.Boot)
			}
		})
	}
}

// The lies a phase-B rule must see through, each visible in the report:
// an entry stamped before the last boot, one about another system on a
// shared log, and a BIOS/POST expiry.
func TestEvidenceReportsWhatMakesAnEntryNotCount(t *testing.T) {
	a, m, clk := evidenceMock(t, redfishmock.ProfileGeneric)
	clk.Step(time.Hour)
	// The machine as it booted now: LastResetTime is t0+1h.
	m.Reset()
	for _, e := range []machine.LogEntry{
		{At: t0.Add(30 * time.Minute), Kind: machine.LogWatchdogExpired, Use: machine.TimerUseSMSOS},
		{Kind: machine.LogWatchdogExpired, Use: machine.TimerUseSMSOS, Origin: "2"},
		{Kind: machine.LogWatchdogExpired, Use: machine.TimerUseBIOSPOST},
	} {
		if _, err := m.AppendLog("1", e); err != nil {
			t.Fatal(err)
		}
	}
	rep := readEvidence(t, a)
	want := []evidenceLine{
		{Kind: bmc.EvidenceWatchdogExpired, TimerUse: bmc.TimerUseSMSOS, Action: "None", Boot: bmc.BootPrevious},
		{Kind: bmc.EvidenceWatchdogExpired, TimerUse: bmc.TimerUseSMSOS, Action: "None", Boot: bmc.BootCurrent, OtherSystem: true},
		{Kind: bmc.EvidenceWatchdogExpired, TimerUse: bmc.TimerUseBIOSPOST, Action: "None", Boot: bmc.BootCurrent},
	}
	if diff := cmp.Diff(want, lines(rep), cmpopts.SortSlices(func(a, b evidenceLine) bool {
		return fmt.Sprint(a) < fmt.Sprint(b)
	})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// A reboot through a 6-minute POST: the kernel re-armed the watchdog for
// 120 s, and the SMS/OS timer expires while the machine boots normally.
// The report shows it in the current boot, with BootProgress short of
// OSRunning: only the planned-reboot window can tell it from a hang.
func TestEvidenceOfARebootThroughALongPOST(t *testing.T) {
	a, m, clk := evidenceMock(t, redfishmock.ProfileOpenBMC)
	if err := m.StartPetter("1", 30*time.Second, machine.WatchdogNoAction); err != nil {
		t.Fatal(err)
	}
	if err := m.Event("1", machine.EventOSReboot); err != nil {
		t.Fatal(err)
	}
	clk.Step(3 * time.Minute)
	rep := readEvidence(t, a)
	want := []evidenceLine{{Kind: bmc.EvidenceWatchdogExpired, TimerUse: bmc.TimerUseSMSOS, Action: "None", Boot: bmc.BootCurrent}}
	if diff := cmp.Diff(want, lines(rep)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if rep.Boot.BootProgress == "OSRunning" || !rep.Boot.LastReset.Equal(t0.Add(5*time.Second)) {
		t.Errorf("boot marker %+v: want a boot started at +5s, not yet OSRunning", rep.Boot)
	}
}

// A BMC without log services or a watchdog says so, for the Event that
// names the evidence that is missing.
func TestEvidenceSaysWhatTheBMCDoesNotOffer(t *testing.T) {
	a, _, _ := evidenceMock(t, redfishmock.ProfileSupermicro)
	rep := readEvidence(t, a)
	if len(rep.Unsupported) == 0 || rep.Unsupported[0] != "HostWatchdogTimer" {
		t.Errorf("unsupported %v, want HostWatchdogTimer named", rep.Unsupported)
	}
}

// ComputerSystem.Reset Nmi where the system lists it (inline or through
// ResetActionInfo); refused, with nothing sent, where it does not.
func TestDiagnosticSendsNmiOnlyWhereListed(t *testing.T) {
	for _, p := range []redfishmock.Profile{redfishmock.ProfileGeneric, redfishmock.ProfileIDRAC9, redfishmock.ProfileILO5,
		redfishmock.ProfileOpenBMC, redfishmock.ProfileXCC, redfishmock.ProfileAMIMulti} {
		t.Run(string(p), func(t *testing.T) {
			a, m, _ := evidenceMock(t, p)
			if err := m.SetPanicOnNMI("1", true); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), okTimeout)
			defer cancel()
			res, err := a.Diagnostic(ctx)
			st, _ := m.Status("1")
			if p == redfishmock.ProfileAMIMulti {
				if !errors.Is(err, bmc.ErrUnsupported) || st.Counters.Resets[redfishmock.ResetNmi] != 0 {
					t.Fatalf("no Nmi listed: %v, %d sent; want ErrUnsupported and nothing sent", err, st.Counters.Resets[redfishmock.ResetNmi])
				}
				return
			}
			if err != nil || res.Sent != "ComputerSystem.Reset Nmi" || st.Counters.Resets[redfishmock.ResetNmi] != 1 {
				t.Fatalf("Diagnostic: %+v, %v, %d Nmi received", res, err, st.Counters.Resets[redfishmock.ResetNmi])
			}
			if st.PowerState != redfishmock.PowerOn || !st.OSHung {
				t.Errorf("after the NMI: %s, hung %v; want On, the kdump kernel panicked", st.PowerState, st.OSHung)
			}
			if got := lines(readEvidence(t, a)); len(got) != 1 || got[0].Kind != bmc.EvidenceOSCriticalStop {
				t.Errorf("evidence after the NMI: %+v; want the panic's OS critical stop", got)
			}
		})
	}
}
