package dial

import (
	"context"
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
		secondOffTries: 1, offRaw: "Off", offTrusted: "system"},
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
				a := adapterFor(t, srv, withAuth(auth))
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

// sushy-tools' chassis always reads On (a static template): its service
// root identifies it, so the system's Off counts, and the reading says
// which resource it trusted and why.
func TestSushyChassisIsSetAsideByItsServiceRoot(t *testing.T) {
	cfg := mockConfig()
	cfg.Profile = redfishmock.ProfileSushy
	srv := startMock(t, cfg)
	setPower(t, srv.Mock, "1", redfishmock.PowerOff)
	st := mustPowerStatus(t, adapterFor(t, srv))
	if st.State != bmc.PowerOff || st.ChassisRaw != "On" || !st.Trusted.ChassisSetAside || !strings.Contains(st.Trusted.Why, "sushy-tools") {
		t.Errorf("status = %+v; want Off, the chassis's On set aside because the service root is sushy-tools'", st)
	}
	// Told to check the chassis anyway, the adapter does: never Off.
	st = mustPowerStatus(t, adapterFor(t, srv, func(t *bmc.Target) { t.ChassisPower = bmc.ChassisPowerCheck }))
	if st.State != bmc.PowerOn || st.Trusted.Resource != "chassis" {
		t.Errorf("status with chassisPower check = %+v; want On from the chassis", st)
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
	// The mock redirects a Name, as sushy-tools does.
	resp, err := srv.Client().Get(srv.URL + "/redfish/v1/Systems/fake")
	if err == nil {
		resp.Body.Close()
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
