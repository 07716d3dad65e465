package dial

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

// Every vendor profile × {status, off, on, identity}, over real HTTPS with
// the mock's certificate verified.

// profileWant is what the adapter must report for a profile.
type profileWant struct {
	manufacturer   string
	allowed        []string
	bootProgress   bool   // BootProgress reported
	secondOff      error  // PowerOff of an Off system: nil (accepted) or ErrAlreadyInState
	secondOffTries int    // attempts it takes (busy answers are retried)
	offRaw         string // Raw of an Off system ("" when the system itself answers 503)
	offTrusted     string // the resource whose power an Off reading trusted
	// chassisPower is the entry's setting its users must give ("": auto)
	chassisPower bmc.ChassisPower
}

var profileWants = map[redfishmock.Profile]profileWant{
	redfishmock.ProfileGeneric: {manufacturer: "bmcfence", allowed: []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart", "PowerCycle", "Nmi"},
		bootProgress: true, secondOffTries: 1, offRaw: "Off", offTrusted: "system and chassis"},
	redfishmock.ProfileIDRAC9: {manufacturer: "Dell Inc.", allowed: []string{"On", "ForceOff", "ForceRestart", "GracefulShutdown", "PushPowerButton", "Nmi"},
		bootProgress: true, secondOff: bmc.ErrAlreadyInState, secondOffTries: 2, offRaw: "Off", offTrusted: "system and chassis"},
	redfishmock.ProfileIDRAC10: {manufacturer: "Dell Inc.", allowed: []string{"On", "ForceOff", "ForceRestart", "GracefulShutdown", "PushPowerButton", "Nmi"},
		bootProgress: true, secondOff: bmc.ErrAlreadyInState, secondOffTries: 2, offRaw: "Off", offTrusted: "system and chassis"},
	redfishmock.ProfileILO5: {manufacturer: "HPE", allowed: []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "Nmi", "PushPowerButton", "GracefulRestart"},
		secondOff: bmc.ErrAlreadyInState, secondOffTries: 1, offRaw: "Off", offTrusted: "system and chassis"},
	redfishmock.ProfileILO6: {manufacturer: "HPE", allowed: []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "Nmi", "PushPowerButton", "GracefulRestart"},
		bootProgress: true, secondOff: bmc.ErrAlreadyInState, secondOffTries: 1, offRaw: "Off", offTrusted: "system and chassis"},
	redfishmock.ProfileXCC: {manufacturer: "Lenovo", allowed: []string{"On", "Nmi", "GracefulShutdown", "GracefulRestart", "ForceOn", "ForceOff", "ForceRestart"},
		bootProgress: true, secondOffTries: 1, offRaw: "Off", offTrusted: "system and chassis"},
	redfishmock.ProfileOpenBMC: {manufacturer: "OpenBMC", allowed: []string{"On", "ForceOff", "ForceOn", "ForceRestart", "GracefulRestart", "GracefulShutdown", "PowerCycle", "Nmi"},
		bootProgress: true, secondOffTries: 1, offRaw: "Off", offTrusted: "system and chassis"},
	redfishmock.ProfileSupermicro: {manufacturer: "Supermicro", allowed: []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn"},
		secondOffTries: 1, offRaw: "Off", offTrusted: "system and chassis"},
	redfishmock.ProfileAMIMulti: {manufacturer: "NVIDIA", allowed: []string{"On", "ForceOff", "ForceRestart", "GracefulShutdown", "PowerCycle"},
		secondOffTries: 1, offRaw: "", offTrusted: "chassis"},
	redfishmock.ProfileSushy: {manufacturer: "Sushy Emulator", allowed: []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn"},
		secondOffTries: 1, offRaw: "Off", offTrusted: "system", chassisPower: bmc.ChassisPowerIgnore},
}

func TestEveryProfileHasExpectations(t *testing.T) {
	for _, p := range redfishmock.Profiles() {
		if _, ok := profileWants[p]; !ok {
			t.Errorf("profile %s has no expectations in profileWants", p)
		}
		if p.Source() == "" {
			t.Errorf("profile %s names no documentation source", p)
		}
	}
}

func TestProfiles(t *testing.T) {
	for _, p := range redfishmock.Profiles() {
		want := profileWants[p]
		for _, auth := range []bmc.AuthMode{bmc.AuthBasic, bmc.AuthSession} {
			t.Run(string(p)+"/"+string(auth), func(t *testing.T) {
				t.Parallel()
				cfg := mockConfig(redfishmock.SystemConfig{ID: "node-1", UUID: "4c4c4544-0042-4410-8030-b5c04f4d3132"})
				cfg.Profile = p
				srv := redfishmocktest.Start(t, cfg)
				a := adapterFor(t, srv, withAuth(auth), func(t *bmc.Target) { t.ChassisPower = want.chassisPower })
				ctx := context.Background()

				// status
				st := mustPowerStatus(t, a)
				if st.State != bmc.PowerOn || st.Raw != "On" || (st.BootProgress != "") != want.bootProgress {
					t.Errorf("status = %+v; want On, BootProgress reported %v", st, want.bootProgress)
				}

				// identity
				id, err := a.Identity(ctx)
				if err != nil {
					t.Fatalf("Identity: %v", err)
				}
				if id.UUID != "4c4c4544-0042-4410-8030-b5c04f4d3132" || id.SystemID != "node-1" || id.Manufacturer != want.manufacturer {
					t.Errorf("Identity = %+v", id)
				}
				if diff := cmp.Diff(want.allowed, id.AllowedResets); diff != "" {
					t.Errorf("AllowedResets (-want +got):\n%s", diff)
				}

				// off: accepted, and the system reads Off
				res, err := a.PowerOff(ctx)
				if err != nil || res.Sent != "ComputerSystem.Reset ForceOff" {
					t.Fatalf("PowerOff = %+v, %v", res, err)
				}
				st = mustPowerStatus(t, a)
				if st.State != bmc.PowerOff || st.Raw != want.offRaw || st.Trusted.Resource != want.offTrusted || st.Trusted.Why == "" {
					t.Errorf("status after PowerOff = %+v; want Off (raw %q), trusting the %s and saying why", st, want.offRaw, want.offTrusted)
				}

				// off again: the command goes out; the vendor's answer to an
				// Off system is acceptance or "already in that state"
				res, err = a.PowerOff(ctx)
				if !errors.Is(err, want.secondOff) || (want.secondOff == nil && err != nil) {
					t.Errorf("second PowerOff: %v, want %v", err, want.secondOff)
				}
				if res.Attempts != want.secondOffTries {
					t.Errorf("second PowerOff took %d attempts, want %d", res.Attempts, want.secondOffTries)
				}
				if n := resets(t, srv.Mock, "node-1")[redfishmock.ResetForceOff]; n != int64(1+want.secondOffTries) {
					t.Errorf("the BMC received %d ForceOff, want %d", n, 1+want.secondOffTries)
				}

				// on
				res, err = a.PowerOn(ctx)
				if err != nil {
					t.Fatalf("PowerOn: %v", err)
				}
				if st := mustPowerStatus(t, a); st.State != bmc.PowerOn {
					t.Errorf("status after PowerOn = %v (result %+v)", st.State, res)
				}
				if auth == bmc.AuthSession {
					checkNoSessions(t, srv)
				}
			})
		}
	}
}

// OpenBMC reports the host state as the system's PowerState: while the
// chassis powers on (host firmware not running yet) the system reads Off.
// The chassis has power, so the adapter must not report Off.
func TestOpenBMCSystemOffWhileTheChassisIsOn(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	cfg := mockConfig()
	cfg.Profile = redfishmock.ProfileOpenBMC
	cfg.Timing = redfishmock.Timing{PowerOn: 45 * time.Second}
	srv := startMock(t, cfg, redfishmock.WithClock(clk))
	setPower(t, srv.Mock, "1", redfishmock.PowerOff)
	a := adapterFor(t, srv)
	if _, err := a.PowerOn(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := mustPowerStatus(t, a)
	if st.Raw != "Off" || st.ChassisRaw != "PoweringOn" || st.State != bmc.PoweringOn {
		t.Errorf("status = %+v; want the system's Off overruled by the chassis (PoweringOn)", st)
	}
	clk.Step(45 * time.Second)
	if st := mustPowerStatus(t, a); st.State != bmc.PowerOn {
		t.Errorf("status after power-on = %+v", st)
	}
}

// AMI multi-system BMCs answer 503 on an off system: its power is read
// from the chassis, and a command still reaches it.
func TestAMIMultiSystemUnavailableWhileOff(t *testing.T) {
	cfg := mockConfig(redfishmock.Systems(2)...)
	cfg.Profile = redfishmock.ProfileAMIMulti
	srv := startMock(t, cfg)
	setPower(t, srv.Mock, "2", redfishmock.PowerOff)
	a := adapterFor(t, srv, withSystem("2"))
	st := mustPowerStatus(t, a)
	if st.State != bmc.PowerOff || st.Raw != "" || st.ChassisRaw != "Off" {
		t.Errorf("status of an off system = %+v; want Off from the chassis", st)
	}
	if _, err := a.PowerOn(context.Background()); err != nil {
		t.Fatalf("PowerOn of a system that answers 503: %v", err)
	}
	checkResets(t, srv.Mock, "2", resetCounts{redfishmock.ResetOn: 1})
	checkResets(t, srv.Mock, "1", nil)
}

// A 202 task is followed to completion; its monitor reads Running until the
// power-off time has passed on the mock's clock.
func TestTaskIsFollowedToCompletion(t *testing.T) {
	cfg := mockConfig()
	cfg.Profile = redfishmock.ProfileAMIMulti
	cfg.Timing = redfishmock.Timing{PowerOff: 700 * time.Millisecond}
	srv := startMock(t, cfg)
	a := adapterFor(t, srv)
	start := time.Now()
	res, err := a.PowerOff(context.Background())
	if err != nil {
		t.Fatalf("PowerOff: %v", err)
	}
	if took := time.Since(start); took < 700*time.Millisecond {
		t.Errorf("PowerOff returned after %v, before its task (700 ms) completed", took)
	}
	if res.Attempts != 1 {
		t.Errorf("attempts = %d", res.Attempts)
	}
}

// A system that offers no hard off is refused before anything is sent.
func TestNoHardOffIsRefused(t *testing.T) {
	cfg := mockConfig(redfishmock.SystemConfig{ResetTypes: []redfishmock.ResetType{redfishmock.ResetOn, redfishmock.ResetGracefulShutdown, redfishmock.ResetPushPowerButton}})
	srv := startMock(t, cfg)
	a := adapterFor(t, srv)
	_, err := a.PowerOff(context.Background())
	checkOpError(t, err, bmc.ErrUnsupported, bmc.OpPowerOff, a)
	checkResets(t, srv.Mock, "1", nil)
}

// PushPowerButton as the only way on is used only on an Off system.
func TestPushPowerButtonOnlyWhenOff(t *testing.T) {
	cfg := mockConfig(redfishmock.SystemConfig{ResetTypes: []redfishmock.ResetType{redfishmock.ResetForceOff, redfishmock.ResetPushPowerButton}})
	srv := startMock(t, cfg)
	a := adapterFor(t, srv)
	_, err := a.PowerOn(context.Background())
	checkOpError(t, err, bmc.ErrAlreadyInState, bmc.OpPowerOn, a)
	checkResets(t, srv.Mock, "1", nil)
	setPower(t, srv.Mock, "1", redfishmock.PowerOff)
	res, err := a.PowerOn(context.Background())
	if err != nil || res.Sent != "ComputerSystem.Reset PushPowerButton" {
		t.Fatalf("PowerOn of an Off system = %+v, %v", res, err)
	}
	if st := mustPowerStatus(t, a); st.State != bmc.PowerOn {
		t.Errorf("status = %v", st.State)
	}
}

// Session-only and Basic-only services: the adapter says clearly what to
// change.
func TestAuthModes(t *testing.T) {
	tests := []struct {
		name    string
		mode    redfishmock.AuthMode
		auth    bmc.AuthMode
		wantErr error
		wantMsg string
	}{
		{name: "session-only BMC, session auth", mode: redfishmock.AuthSessionOnly, auth: bmc.AuthSession},
		{name: "session-only BMC, basic auth", mode: redfishmock.AuthSessionOnly, auth: bmc.AuthBasic,
			wantErr: bmc.ErrAuth, wantMsg: "does not offer HTTP Basic authentication, try auth: session"},
		{name: "basic-only BMC, basic auth", mode: redfishmock.AuthBasicOnly, auth: bmc.AuthBasic},
		{name: "basic-only BMC, session auth", mode: redfishmock.AuthBasicOnly, auth: bmc.AuthSession,
			wantErr: bmc.ErrUnsupported, wantMsg: "the BMC has no Redfish SessionService"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mockConfig()
			cfg.AuthMode = tt.mode
			srv := startMock(t, cfg)
			a := adapterFor(t, srv, withAuth(tt.auth))
			for _, op := range allOps {
				_, err := runOp(a, op)
				if tt.wantErr == nil {
					if err != nil {
						t.Errorf("%s: %v", op, err)
					}
					continue
				}
				checkOpError(t, err, tt.wantErr, op, a)
				if !strings.Contains(err.Error(), tt.wantMsg) {
					t.Errorf("%s: error %q does not say %q", op, err, tt.wantMsg)
				}
			}
		})
	}
}

// sushy-tools' chassis always reads On (a static template), and its
// service root, the same for every driver, does not say what its system's
// Off means: its nova and ironic drivers read a paused, suspended, crashed
// or unknown machine as Off, and nova's ForceOff of an instance that is not
// running is answered 204 and does nothing (sushy-tools 2b51921,
// novadriver.py, ironicdriver.py). The mock plays that: the system reads
// Off and ignores the ForceOff it accepts. With chassisPower auto the Off
// is refused, saying what to set and which drivers never to fence
// through; only the entry's chassisPower: ignore (the operator knows the
// driver) sets the chassis aside; check reads the chassis's On.
func TestSushyChassisIsSetAsideOnlyByConfiguration(t *testing.T) {
	cfg := mockConfig()
	cfg.Profile = redfishmock.ProfileSushy
	srv := startMock(t, cfg)
	setPower(t, srv.Mock, "1", redfishmock.PowerOff)                      // nova: PAUSED; ironic: power_state None
	setFaults(t, srv.Mock, "1", redfishmock.Faults{IgnoreCommands: true}) // nova: ForceOff of a non-running instance is a no-op
	a := adapterFor(t, srv)
	if _, err := a.PowerOff(context.Background()); err != nil {
		t.Fatalf("PowerOff: %v", err)
	}
	st, err := a.PowerStatus(context.Background())
	if !errors.Is(err, bmc.ErrUnsupported) {
		t.Fatalf("auto: status = %+v, %v; want ErrUnsupported: an accepted ForceOff that changed nothing, then an Off that may be a paused VM or a machine Ironic cannot read", st, err)
	}
	for _, want := range []string{"sushy-tools", "chassisPower: ignore", "libvirt or fake driver", "nova or ironic"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("auto: error %q does not say %q", err, want)
		}
	}
	// The CLI's words.
	_, err = adapterFor(t, srv, func(t *bmc.Target) { t.Names.ChassisPower = "--chassis-power" }).PowerStatus(context.Background())
	if err == nil || !strings.Contains(err.Error(), "--chassis-power ignore") {
		t.Errorf("auto, CLI: %v; want the flag named", err)
	}
	st = mustPowerStatus(t, adapterFor(t, srv, func(t *bmc.Target) { t.ChassisPower = bmc.ChassisPowerIgnore }))
	if st.State != bmc.PowerOff || !st.Trusted.ChassisSetAside || !strings.Contains(st.Trusted.Why, "chassisPower ignore") {
		t.Errorf("chassisPower ignore: %+v; want the system's Off, by configuration", st)
	}
	st = mustPowerStatus(t, adapterFor(t, srv, func(t *bmc.Target) { t.ChassisPower = bmc.ChassisPowerCheck }))
	if st.State != bmc.PowerOn || st.Trusted.Resource != "chassis" {
		t.Errorf("chassisPower check: %+v; want On from the chassis", st)
	}
}

// HPE's iLO emulator, a pure emulator whose ForceOff changes the system and
// never Chassis/1, is identified by its service root (Vendor HPE, Product
// "… SIMULATED"): in auto its chassis is set aside, and the reading says so.
func TestILOEmulatorChassisIsSetAsideByItsServiceRoot(t *testing.T) {
	rewrite := func(path string, edit func(map[string]any)) func(*redfishmock.Mock, http.Handler) http.Handler {
		return func(_ *redfishmock.Mock, next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.Path != path {
					next.ServeHTTP(w, r)
					return
				}
				rec := httptest.NewRecorder()
				next.ServeHTTP(rec, r)
				var doc map[string]any
				if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				edit(doc)
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(doc)
			})
		}
	}
	root := rewrite("/redfish/v1/", func(d map[string]any) { d["Vendor"], d["Product"] = "HPE", "ProLiant DL360 Gen10 Plus - SIMULATED" })
	chassis := rewrite("/redfish/v1/Chassis/1", func(d map[string]any) { d["PowerState"] = "On" })
	mock, url := startWrapped(t, mockConfig(), func(m *redfishmock.Mock, next http.Handler) http.Handler {
		return root(m, chassis(m, next))
	})
	setPower(t, mock, "1", redfishmock.PowerOff)
	st := mustPowerStatus(t, newAdapter(t, redfishTarget(t, url, nil)))
	if st.State != bmc.PowerOff || st.ChassisRaw != "On" || !st.Trusted.ChassisSetAside || !strings.Contains(st.Trusted.Why, "iLO emulator") {
		t.Errorf("status = %+v; want Off, the chassis's On set aside because the service root is HPE's iLO emulator's", st)
	}
}

// An unknown service keeps the chassis rule, and explicit configuration
// (chassisPower: ignore) is the only other way to set it aside.
func TestChassisRuleOnlyConfigurationSetsItAsideOnAnUnknownService(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	cfg := mockConfig()
	cfg.Profile = redfishmock.ProfileOpenBMC
	cfg.Timing = redfishmock.Timing{PowerOn: 45 * time.Second}
	srv := startMock(t, cfg, redfishmock.WithClock(clk))
	setPower(t, srv.Mock, "1", redfishmock.PowerOff)
	if _, err := adapterFor(t, srv).PowerOn(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := mustPowerStatus(t, adapterFor(t, srv)); st.State != bmc.PoweringOn || st.Trusted.Resource != "chassis" {
		t.Errorf("openbmc, auto: %+v; want the chassis's PoweringOn", st)
	}
	st := mustPowerStatus(t, adapterFor(t, srv, func(t *bmc.Target) { t.ChassisPower = bmc.ChassisPowerIgnore }))
	if st.State != bmc.PowerOff || !st.Trusted.ChassisSetAside || !strings.Contains(st.Trusted.Why, "chassisPower ignore") {
		t.Errorf("openbmc, chassisPower ignore: %+v; want the system's Off, by configuration", st)
	}
}

// sushy-tools answers a system's Name with 307 to its Id. The adapter
// finds a Name in the collection and never asks a per-system URI by Name;
// a redirect, where one comes, is followed only to the same origin.
func TestSystemByNameOnSushy(t *testing.T) {
	cfg := mockConfig(redfishmock.SystemConfig{ID: "27946b59-9e44-4fa7-8e91-f3527a1ef094", Name: "fake"})
	cfg.Profile = redfishmock.ProfileSushy
	srv := startMock(t, cfg)
	a := adapterFor(t, srv, withSystem("fake"))
	if _, err := a.PowerOff(context.Background()); err != nil {
		t.Fatalf("PowerOff of the system named fake: %v", err)
	}
	checkResets(t, srv.Mock, "27946b59-9e44-4fa7-8e91-f3527a1ef094", resetCounts{redfishmock.ResetForceOff: 1})
	// The mock redirects a Name, as sushy-tools does: 307 to the same
	// path by Id, a relative Location.
	client := srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/redfish/v1/Systems/fake", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(mockUser, mockPass)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := "/redfish/v1/Systems/27946b59-9e44-4fa7-8e91-f3527a1ef094"; resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != want {
		t.Errorf("GET of the system by Name: %d, Location %q; want 307 to %s", resp.StatusCode, resp.Header.Get("Location"), want)
	}
}

// A redirect to another origin is never followed: the credentials would
// go to a host we did not choose.
func TestRedirectsFollowedOnlyToTheSameOrigin(t *testing.T) {
	var other atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(elsewhere.Close)
	mock, url := startWrapped(t, mockConfig(), func(m *redfishmock.Mock, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/redfish/v1/Systems/1":
				http.Redirect(w, r, "/redfish/v1/Systems/one", http.StatusTemporaryRedirect)
			case "/redfish/v1/Systems/one":
				http.Redirect(w, r, elsewhere.URL+"/redfish/v1/Systems/1", http.StatusTemporaryRedirect)
			default:
				next.ServeHTTP(w, r)
			}
		})
	})
	_ = mock
	a := newAdapter(t, redfishTarget(t, url, nil, withSystem("1")))
	_, err := a.PowerStatus(context.Background())
	if err == nil || !strings.Contains(err.Error(), "another origin") {
		t.Fatalf("PowerStatus = %v; want the cross-origin redirect refused", err)
	}
	if other.Load() != 0 {
		t.Errorf("the other origin received %d requests", other.Load())
	}
}

const resetPath1 = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"

// A ForceOff POST answered with a same-origin 301, 302 or 303 is not the
// BMC's acceptance of the command: net/http would turn the POST into a GET
// of the new location, and the 2xx of that GET would read as "accepted",
// letting an Off that is a restart's off-dwell settle over the short
// settleWindow instead of the unassisted window. A command is never
// redirected.
func TestRedirectedForceOffIsNotAcceptance(t *testing.T) {
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			var gets atomic.Int32
			mock, url := startWrapped(t, mockConfig(), func(_ *redfishmock.Mock, next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					switch {
					case r.Method == http.MethodPost && r.URL.Path == resetPath1:
						// e.g. a BMC web server sending a request it does
						// not route to its front page
						http.Redirect(w, r, "/front-page", code)
						return
					case r.URL.Path == "/front-page":
						gets.Add(1)
						w.WriteHeader(http.StatusOK)
						return
					}
					next.ServeHTTP(w, r)
				})
			})
			a := newAdapter(t, redfishTarget(t, url, nil, withSystem("1")))
			res, err := a.PowerOff(context.Background())
			got := resets(t, mock, "1")[redfishmock.ResetForceOff]
			if err == nil {
				t.Errorf("PowerOff = %+v, nil error; the BMC received %d ForceOff: a redirected POST was reported as accepted", res, got)
			}
			if !errors.Is(err, bmc.ErrBMC) || !strings.Contains(err.Error(), "never redirected") {
				t.Errorf("PowerOff error %v; want ErrBMC saying a command is never redirected", err)
			}
			if n := gets.Load(); n != 0 {
				t.Errorf("the redirect was followed: %d GETs of its location", n)
			}
		})
	}
}

// A ForceOff for system 1 that the BMC answers with 307 (or 308) to
// system 2's Reset would be POSTed there again by net/http (same origin):
// the identity was checked on system 1, and system 2 would be powered off.
func TestForceOffIsNeverRedirectedToAnotherSystem(t *testing.T) {
	for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			mock, url := startWrapped(t, mockConfig(redfishmock.Systems(2)...), func(_ *redfishmock.Mock, next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Method == http.MethodPost && r.URL.Path == resetPath1 {
						http.Redirect(w, r, strings.Replace(resetPath1, "/1/", "/2/", 1), code)
						return
					}
					next.ServeHTTP(w, r)
				})
			})
			a := newAdapter(t, redfishTarget(t, url, nil, withSystem("1")))
			id, err := a.Identity(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			_, err = a.PowerOff(context.Background())
			if n := resets(t, mock, "2")[redfishmock.ResetForceOff]; n != 0 {
				t.Errorf("identity checked on system 1 (UUID %s), yet system 2 received %d ForceOff (PowerOff error: %v)", id.UUID, n, err)
			}
			if st := mustPowerStatus(t, a); st.State == bmc.PowerOn && err == nil {
				t.Errorf("PowerOff reported success while the selected system still reads %s", st.State)
			}
		})
	}
}

// A redirected read counts only as the resource it was sent for: what
// answers at the location must be the resource there (its @odata.id), and
// a system's read must be the system it was resolved to.
func TestRedirectedReadIsOnlyTheResourceAsked(t *testing.T) {
	for _, tt := range []struct {
		name, to, want string
	}{
		{"a page claiming to be the system", "/front", "not the resource redirected to"},
		{"another system", "/redfish/v1/Systems/2", "not the system it was resolved to"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var redirect atomic.Bool
			mock, url := startWrapped(t, mockConfig(redfishmock.Systems(2)...), func(_ *redfishmock.Mock, next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					switch {
					case redirect.Load() && r.URL.Path == "/redfish/v1/Systems/1":
						http.Redirect(w, r, tt.to, http.StatusFound)
					case r.URL.Path == "/front":
						w.Header().Set("Content-Type", "application/json")
						_, _ = w.Write([]byte(`{"@odata.id":"/redfish/v1/Systems/1","Id":"1","PowerState":"Off"}`))
					default:
						next.ServeHTTP(w, r)
					}
				})
			})
			setPower(t, mock, "2", redfishmock.PowerOff)
			a := newAdapter(t, redfishTarget(t, url, nil, withSystem("1")))
			if st := mustPowerStatus(t, a); st.State != bmc.PowerOn {
				t.Fatalf("system 1 reads %s before any redirect", st.State)
			}
			redirect.Store(true)
			st, err := a.PowerStatus(context.Background())
			if err == nil || !errors.Is(err, bmc.ErrBMC) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("PowerStatus of system 1 redirected to %s = %+v, %v; want ErrBMC, %q", tt.to, st, err, tt.want)
			}
		})
	}
}

// An AMI multi-system BMC answers 503 on the system while its host is off:
// its identity is the one read from the system while it answered, as
// long as the BMC and the chassis still read the same; a client that
// never read it cannot identify the system.
func TestAMIMultiIdentityWhileTheHostIsOff(t *testing.T) {
	cfg := mockConfig(redfishmock.Systems(2)...)
	cfg.Profile = redfishmock.ProfileAMIMulti
	srv := startMock(t, cfg)
	a := adapterFor(t, srv, withSystem("2"))
	on, err := a.Identity(context.Background())
	if err != nil || on.Source != "" {
		t.Fatalf("Identity while on = %+v, %v", on, err)
	}
	if _, err := a.PowerOff(context.Background()); err != nil {
		t.Fatal(err)
	}
	off, err := a.Identity(context.Background())
	if err != nil || off.UUID != on.UUID || !strings.Contains(off.Source, "503") {
		t.Fatalf("Identity while off = %+v, %v; want the UUID read while on, saying so", off, err)
	}
	_, err = adapterFor(t, srv, withSystem("2")).Identity(context.Background())
	if err == nil || !strings.Contains(err.Error(), "never read") {
		t.Errorf("a new client's Identity of an off system = %v; want it refused", err)
	}
}

// The identity read before our ForceOff identifies an AMI system that
// answers 503 only while what identified its BMC and chassis then reads
// the same: another BMC at the address (another service root UUID), or
// another chassis, is refused. (This test fails when the comparison of
// the two fingerprints is removed.)
func TestAMIMultiIdentityIsRefusedOnceTheBMCIsAnother(t *testing.T) {
	for _, tt := range []struct {
		name, path, field string
	}{
		{"another BMC at the address (service root UUID)", "/redfish/v1/", "UUID"},
		{"another chassis (UUID)", "/redfish/v1/Chassis/2", "UUID"},
		{"another chassis (serial number)", "/redfish/v1/Chassis/2", "SerialNumber"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var swapped atomic.Bool
			cfg := mockConfig(redfishmock.Systems(2)...)
			cfg.Profile = redfishmock.ProfileAMIMulti
			_, url := startWrapped(t, cfg, func(_ *redfishmock.Mock, next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if !swapped.Load() || r.Method != http.MethodGet || r.URL.Path != tt.path {
						next.ServeHTTP(w, r)
						return
					}
					rec := httptest.NewRecorder()
					next.ServeHTTP(rec, r)
					var doc map[string]any
					if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					doc[tt.field] = "00000000-0000-4000-8000-000000000001"
					w.Header().Set("Content-Type", "application/json")
					_ = json.NewEncoder(w).Encode(doc)
				})
			})
			a := newAdapter(t, redfishTarget(t, url, nil, withSystem("2")))
			if _, err := a.Identity(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, err := a.PowerOff(context.Background()); err != nil {
				t.Fatal(err)
			}
			if id, err := a.Identity(context.Background()); err != nil || !strings.Contains(id.Source, "503") {
				t.Fatalf("Identity while off, nothing changed = %+v, %v", id, err)
			}
			swapped.Store(true)
			id, err := a.Identity(context.Background())
			if err == nil || !strings.Contains(err.Error(), "has changed") {
				t.Errorf("Identity after the BMC changed = %+v, %v; want it refused", id, err)
			}
		})
	}
}
