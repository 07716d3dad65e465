package dial

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

// These tests drive the adapter over real HTTPS (and HTTP) on 127.0.0.1
// against bmc/redfishmock, TLS verified against the mock's certificate.

const (
	mockUser = "admin"
	// mockPass is long enough for bmc.Redact to search for it, and distinctive
	// enough that finding it in an error message is never a coincidence.
	mockPass = "pw-Sekr1t-9f3a"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// okTimeout bounds operations that must succeed: generous for the race
// detector, and never waited out by a passing test.
const okTimeout = 10 * time.Second

// failTimeout is the Target.Timeout of operations meant to time out, and
// slack what the adapter may take beyond it (scheduling, the race detector).
const (
	failTimeout = 300 * time.Millisecond
	slack       = 2 * time.Second
)

func mockConfig(systems ...redfishmock.SystemConfig) redfishmock.Config {
	if len(systems) == 0 {
		systems = redfishmock.Systems(1)
	}
	return redfishmock.Config{Username: mockUser, Password: mockPass, Systems: systems}
}

type targetOption func(*bmc.Target)

func withSystem(s string) targetOption { return func(t *bmc.Target) { t.System = s } }
func withAuth(m bmc.AuthMode) targetOption {
	return func(t *bmc.Target) { t.Auth = m }
}
func withTimeout(d time.Duration) targetOption { return func(t *bmc.Target) { t.Timeout = d } }
func withPassword(p string) targetOption {
	return func(t *bmc.Target) { t.Credentials.Password = bmc.Secret(p) }
}
func withCA(pem []byte) targetOption { return func(t *bmc.Target) { t.CACertificates = pem } }
func withInsecure() targetOption {
	return func(t *bmc.Target) { t.CACertificates, t.InsecureSkipVerify = nil, true }
}
func withAddress(addr string) targetOption {
	return func(t *bmc.Target) {
		ep, err := bmc.ParseAddress(addr)
		if err != nil {
			panic(err)
		}
		t.Address = ep
	}
}

// redfishTarget points at url with the mock's credentials, trusting caPEM
// (nil for plain HTTP).
func redfishTarget(tb testing.TB, url string, caPEM []byte, opts ...targetOption) bmc.Target {
	tb.Helper()
	ep, err := bmc.ParseAddress(url)
	if err != nil {
		tb.Fatal(err)
	}
	target := bmc.Target{
		Address:        ep,
		Credentials:    bmc.Credentials{Username: mockUser, Password: bmc.Secret(mockPass)},
		CACertificates: caPEM,
		Timeout:        okTimeout,
	}
	for _, opt := range opts {
		opt(&target)
	}
	return target
}

func newAdapter(tb testing.TB, target bmc.Target) *Adapter {
	tb.Helper()
	a, err := New(target)
	if err != nil {
		tb.Fatalf("New(%+v): %v", target, err)
	}
	return a
}

// adapterFor is an adapter for srv that trusts its CA (over HTTPS).
func adapterFor(tb testing.TB, srv *redfishmocktest.Server, opts ...targetOption) *Adapter {
	tb.Helper()
	return newAdapter(tb, redfishTarget(tb, srv.URL, srv.CAPEM, opts...))
}

func startMock(t *testing.T, cfg redfishmock.Config, opts ...redfishmock.Option) *redfishmocktest.Server {
	t.Helper()
	return redfishmocktest.Start(t, cfg, opts...)
}

// startWrapped serves the mock in clear text behind wrap, for BMC behaviour
// the mock refuses to be configured with (duplicate names) or races it
// cannot stage by itself.
func startWrapped(t *testing.T, cfg redfishmock.Config, wrap func(*redfishmock.Mock, http.Handler) http.Handler) (*redfishmock.Mock, string) {
	t.Helper()
	mock, err := redfishmock.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(wrap(mock, mock))
	t.Cleanup(func() {
		mock.Close()
		srv.Close()
	})
	return mock, srv.URL
}

func setPower(t *testing.T, m *redfishmock.Mock, id string, state redfishmock.PowerState) {
	t.Helper()
	if err := m.SetPower(id, state); err != nil {
		t.Fatal(err)
	}
}

func setFaults(t *testing.T, m *redfishmock.Mock, id string, f redfishmock.Faults) {
	t.Helper()
	if err := m.SetFaults(id, f); err != nil {
		t.Fatal(err)
	}
}

// resets is what the mock's system id received, by ResetType.
func resets(t *testing.T, m *redfishmock.Mock, id string) map[redfishmock.ResetType]int64 {
	t.Helper()
	st, err := m.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	return st.Counters.Resets
}

type resetCounts = map[redfishmock.ResetType]int64

func checkResets(t *testing.T, m *redfishmock.Mock, id string, want resetCounts) {
	t.Helper()
	if diff := cmp.Diff(want, resets(t, m, id), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("system %s received resets (-want +got):\n%s", id, diff)
	}
}

// openSessions lists the sessions open on the mock, read as the
// administrator with Basic auth (which opens none).
func openSessions(t *testing.T, client *http.Client, baseURL string) []string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, baseURL+"/redfish/v1/SessionService/Sessions", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(mockUser, mockPass)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET sessions: %v", err)
	}
	defer resp.Body.Close()
	var coll struct {
		Members []struct {
			ID string `json:"@odata.id"`
		} `json:"Members"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET sessions = %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&coll); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range coll.Members {
		ids = append(ids, m.ID)
	}
	return ids
}

func checkNoSessions(t *testing.T, srv *redfishmocktest.Server) {
	t.Helper()
	if s := openSessions(t, srv.Client(), srv.URL); len(s) != 0 {
		t.Errorf("sessions left open on the BMC: %v", s)
	}
}

// checkOpError asserts what every adapter error must be: one line, an
// *bmc.OpError naming the operation, protocol and address, wrapping want,
// and free of the password.
func checkOpError(t *testing.T, err error, want error, op bmc.Op, a *Adapter) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", op, want)
	}
	if !errors.Is(err, want) {
		t.Errorf("%s: error %q (reason %s) does not wrap %q", op, err, bmc.Reason(err), want)
	}
	var opErr *bmc.OpError
	if !errors.As(err, &opErr) {
		t.Fatalf("%s: error %q is a %T, not a *bmc.OpError", op, err, err)
	}
	target := a.Target()
	gotFields := []string{string(opErr.Op), string(opErr.Protocol), opErr.Address, opErr.System}
	wantFields := []string{string(op), string(bmc.Redfish), target.Address.String(), target.System}
	if diff := cmp.Diff(wantFields, gotFields); diff != "" {
		t.Errorf("OpError op, protocol, address, system (-want +got):\n%s", diff)
	}
	msg := err.Error()
	t.Logf("%s: %s", op, msg)
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans lines: %q", msg)
	}
	if pw := target.Credentials.Password.Reveal(); strings.Contains(msg, pw) {
		t.Errorf("error leaks the password: %q", msg)
	}
	if !strings.Contains(msg, target.Address.String()) || !strings.Contains(msg, string(op)) {
		t.Errorf("error %q does not name the operation and address %s", msg, target.Address)
	}
}

func mustPowerStatus(t *testing.T, a *Adapter) bmc.PowerStatus {
	t.Helper()
	st, err := a.PowerStatus(context.Background())
	if err != nil {
		t.Fatalf("PowerStatus: %v", err)
	}
	return st
}

// ignoreLatency compares everything but wall time, which is checked apart.
var ignoreLatency = cmpopts.IgnoreFields(bmc.Result{}, "Latency")

func TestRedfishPowerStatus(t *testing.T) {
	for _, transport := range []string{"https", "http"} {
		for _, auth := range []bmc.AuthMode{bmc.AuthBasic, bmc.AuthSession} {
			for _, power := range []redfishmock.PowerState{redfishmock.PowerOn, redfishmock.PowerOff} {
				t.Run(transport+"/"+string(auth)+"/"+string(power), func(t *testing.T) {
					var srv *redfishmocktest.Server
					if transport == "https" {
						srv = redfishmocktest.Start(t, mockConfig())
					} else {
						srv = redfishmocktest.StartHTTP(t, mockConfig())
					}
					setPower(t, srv.Mock, "1", power)
					a := adapterFor(t, srv, withAuth(auth))

					got := mustPowerStatus(t, a)
					want := bmc.PowerStatus{
						State:        bmc.PowerOn,
						Raw:          "On",
						BootProgress: "OSRunning",
						Result:       bmc.Result{Provider: "redfish", Attempts: 1},
						Trusted:      bmc.PowerSource{Resource: "system", Why: "the system reads power; the chassis is read only to confirm an Off"},
					}
					if power == redfishmock.PowerOff {
						// An Off system is checked against its chassis.
						want.State, want.Raw, want.ChassisRaw, want.BootProgress = bmc.PowerOff, "Off", "Off", "None"
						want.Trusted.Resource = "system and chassis"
						want.Trusted.Why = "the system reads Off and its chassis, which carries the real power (OpenBMC derives the system's PowerState from the host's firmware state), agrees"
					}
					if diff := cmp.Diff(want, got, ignoreLatency); diff != "" {
						t.Errorf("PowerStatus (-want +got):\n%s", diff)
					}
					if got.Latency <= 0 {
						t.Errorf("Latency = %v, want > 0", got.Latency)
					}
					checkNoSessions(t, srv)
				})
			}
		}
	}
}

func TestRedfishPowerOffAndOn(t *testing.T) {
	for _, auth := range []bmc.AuthMode{bmc.AuthBasic, bmc.AuthSession} {
		t.Run(string(auth), func(t *testing.T) {
			srv := startMock(t, mockConfig())
			a := adapterFor(t, srv, withAuth(auth))
			ctx := context.Background()

			res, err := a.PowerOff(ctx)
			if err != nil {
				t.Fatalf("PowerOff: %v", err)
			}
			if diff := cmp.Diff(bmc.Result{Provider: "redfish", Sent: "ComputerSystem.Reset ForceOff", Attempts: 1}, res, ignoreLatency); diff != "" || res.Latency <= 0 {
				t.Errorf("PowerOff result %+v (-want +got):\n%s", res, diff)
			}
			// Exactly one ForceOff, and no restart, cycle or graceful request.
			checkResets(t, srv.Mock, "1", resetCounts{redfishmock.ResetForceOff: 1})
			if st := mustPowerStatus(t, a); st.State != bmc.PowerOff || st.Raw != "Off" {
				t.Errorf("read-back after PowerOff = %v (%q), want Off", st.State, st.Raw)
			}
			checkNoSessions(t, srv)

			// A second PowerOff sends a second ForceOff: the adapter never
			// skips the command because the system reads Off (a restart's
			// off-dwell reads Off too).
			if _, err := a.PowerOff(ctx); err != nil {
				t.Fatalf("second PowerOff: %v", err)
			}
			checkResets(t, srv.Mock, "1", resetCounts{redfishmock.ResetForceOff: 2})

			if _, err := a.PowerOn(ctx); err != nil {
				t.Fatalf("PowerOn: %v", err)
			}
			checkResets(t, srv.Mock, "1", resetCounts{redfishmock.ResetForceOff: 2, redfishmock.ResetOn: 1})
			if st := mustPowerStatus(t, a); st.State != bmc.PowerOn {
				t.Errorf("read-back after PowerOn = %v, want On", st.State)
			}
			checkNoSessions(t, srv)
		})
	}
}

// With real timing the read-back shows the transitions; a fake clock steps
// through them.
func TestRedfishPowerTransitionsOnFakeClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	cfg := mockConfig()
	cfg.Timing = redfishmock.Timing{PowerOff: time.Second, PowerOn: 45 * time.Second}
	srv := startMock(t, cfg, redfishmock.WithClock(clk))
	a := adapterFor(t, srv)
	ctx := context.Background()

	if _, err := a.PowerOff(ctx); err != nil {
		t.Fatalf("PowerOff: %v", err)
	}
	if st := mustPowerStatus(t, a); st.State != bmc.PoweringOff || st.State.IsOff() {
		t.Errorf("just after PowerOff: %v, want PoweringOff (not proof of Off)", st.State)
	}
	clk.Step(time.Second)
	if st := mustPowerStatus(t, a); st.State != bmc.PowerOff {
		t.Errorf("1 s after PowerOff: %v, want Off", st.State)
	}

	if _, err := a.PowerOn(ctx); err != nil {
		t.Fatalf("PowerOn: %v", err)
	}
	if st := mustPowerStatus(t, a); st.State != bmc.PoweringOn {
		t.Errorf("just after PowerOn: %v, want PoweringOn", st.State)
	}
	clk.Step(45 * time.Second)
	if st := mustPowerStatus(t, a); st.State != bmc.PowerOn || st.BootProgress != "OSRunning" {
		t.Errorf("45 s after PowerOn: %v (%s), want On (OSRunning)", st.State, st.BootProgress)
	}
	checkResets(t, srv.Mock, "1", resetCounts{redfishmock.ResetForceOff: 1, redfishmock.ResetOn: 1})
}

func TestRedfishSystemSelection(t *testing.T) {
	tests := []struct {
		name     string
		systems  int
		selector string
		wantID   string // the system read, when it succeeds
		wantErr  error
		wantMsg  string // part of the error message
	}{
		{name: "one system, no selector", systems: 1, wantID: "1"},
		{name: "one system, by Id", systems: 1, selector: "1", wantID: "1"},
		{name: "several systems, no selector", systems: 3, wantErr: bmc.ErrSystem, wantMsg: "Ids 1, 2, 3"},
		{name: "by Id", systems: 3, selector: "2", wantID: "2"},
		{name: "by Name", systems: 3, selector: "System-3", wantID: "3"},
		{name: "unknown", systems: 3, selector: "nope", wantErr: bmc.ErrSystem, wantMsg: `"nope" (Ids 1, 2, 3)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startMock(t, mockConfig(redfishmock.Systems(tt.systems)...))
			// Only the expected system is Off, so a reading tells which one was read.
			for _, st := range srv.Mock.Statuses() {
				if st.ID == tt.wantID {
					setPower(t, srv.Mock, st.ID, redfishmock.PowerOff)
				}
			}
			a := adapterFor(t, srv, withSystem(tt.selector))

			st, err := a.PowerStatus(context.Background())
			id, idErr := a.Identity(context.Background())
			if tt.wantErr != nil {
				checkOpError(t, err, tt.wantErr, bmc.OpPowerStatus, a)
				checkOpError(t, idErr, tt.wantErr, bmc.OpIdentity, a)
				if !strings.Contains(err.Error(), tt.wantMsg) {
					t.Errorf("error %q does not say %q", err, tt.wantMsg)
				}
				_, offErr := a.PowerOff(context.Background())
				checkOpError(t, offErr, tt.wantErr, bmc.OpPowerOff, a)
				for _, s := range srv.Mock.Statuses() {
					checkResets(t, srv.Mock, s.ID, nil)
				}
				return
			}
			if err != nil || idErr != nil {
				t.Fatalf("PowerStatus: %v; Identity: %v", err, idErr)
			}
			if st.State != bmc.PowerOff || id.SystemID != tt.wantID {
				t.Errorf("read system %q (power %v), want system %q (Off)", id.SystemID, st.State, tt.wantID)
			}
		})
	}
}

// A power command to one of several systems reaches that one only, whether
// it is chosen by Id or by Name.
func TestRedfishPowerOffAmongSeveralSystems(t *testing.T) {
	for _, selector := range []string{"2", "System-2"} {
		t.Run(selector, func(t *testing.T) {
			srv := startMock(t, mockConfig(redfishmock.Systems(3)...))
			a := adapterFor(t, srv, withSystem(selector))
			if _, err := a.PowerOff(context.Background()); err != nil {
				t.Fatalf("PowerOff: %v", err)
			}
			checkResets(t, srv.Mock, "1", nil)
			checkResets(t, srv.Mock, "2", resetCounts{redfishmock.ResetForceOff: 1})
			checkResets(t, srv.Mock, "3", nil)
			if st := mustPowerStatus(t, a); st.State != bmc.PowerOff {
				t.Errorf("read-back = %v, want Off", st.State)
			}
		})
	}
}

// renameSystems makes every system report the same Name, which the mock
// refuses as configuration but BMCs with several nodes do show.
func renameSystems(name string) func(*redfishmock.Mock, http.Handler) http.Handler {
	return func(_ *redfishmock.Mock, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rest, ok := strings.CutPrefix(strings.TrimSuffix(r.URL.Path, "/"), "/redfish/v1/Systems/")
			if r.Method != http.MethodGet || !ok || strings.Contains(rest, "/") {
				next.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			if rec.Code == http.StatusOK {
				var doc map[string]any
				if err := json.Unmarshal(body, &doc); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				doc["Name"] = name
				body, _ = json.Marshal(doc)
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.Header().Del("Content-Length")
			w.WriteHeader(rec.Code)
			_, _ = w.Write(body)
		})
	}
}

// Systems that share a Name (multi-node BMCs show it) are commanded by Id,
// for reads and writes alike; the shared Name alone selects nothing.
func TestRedfishSharedNamesAreCommandedById(t *testing.T) {
	// The mock is wrapped so both systems report the same Name.
	mock, url := startWrapped(t, mockConfig(redfishmock.Systems(2)...), renameSystems("twin"))
	setPower(t, mock, "2", redfishmock.PowerOff)
	ctx := context.Background()

	byID := newAdapter(t, redfishTarget(t, url, nil, withSystem("1")))
	if st := mustPowerStatus(t, byID); st.State != bmc.PowerOn {
		t.Errorf("PowerStatus of system 1 = %v, want On", st.State)
	}
	if _, err := byID.PowerOff(ctx); err != nil {
		t.Fatalf("PowerOff of system 1 by Id: %v", err)
	}
	on := newAdapter(t, redfishTarget(t, url, nil, withSystem("2")))
	if _, err := on.PowerOn(ctx); err != nil {
		t.Fatalf("PowerOn of system 2 by Id: %v", err)
	}
	checkResets(t, mock, "1", resetCounts{redfishmock.ResetForceOff: 1})
	checkResets(t, mock, "2", resetCounts{redfishmock.ResetOn: 1})

	byName := newAdapter(t, redfishTarget(t, url, nil, withSystem("twin")))
	_, err := byName.PowerStatus(ctx)
	checkOpError(t, err, bmc.ErrSystem, bmc.OpPowerStatus, byName)
	if !strings.Contains(err.Error(), `2 systems are named "twin" (Ids 1, 2); choose one by Id`) {
		t.Errorf("error %q does not explain the ambiguity", err)
	}
	_, err = byName.PowerOff(ctx)
	checkOpError(t, err, bmc.ErrSystem, bmc.OpPowerOff, byName)
	checkResets(t, mock, "1", resetCounts{redfishmock.ResetForceOff: 1})
	checkResets(t, mock, "2", resetCounts{redfishmock.ResetOn: 1})
}

// A system without a Name is as good as any other when chosen by Id.
func TestRedfishNamelessSystemAmongSeveral(t *testing.T) {
	nameless := func(_ *redfishmock.Mock, next http.Handler) http.Handler {
		return renameSystems("")(nil, next)
	}
	mock, url := startWrapped(t, mockConfig(redfishmock.Systems(2)...), nameless)
	a := newAdapter(t, redfishTarget(t, url, nil, withSystem("2")))
	if _, err := a.PowerOff(context.Background()); err != nil {
		t.Fatalf("PowerOff of nameless system 2 by Id: %v", err)
	}
	checkResets(t, mock, "1", nil)
	checkResets(t, mock, "2", resetCounts{redfishmock.ResetForceOff: 1})
}

// closedPort returns a loopback TCP port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestRedfishTLS(t *testing.T) {
	_, otherCA, err := redfishmock.SelfSignedCert("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		plain   bool // serve plain HTTP (and talk https:// to it)
		opts    []targetOption
		wantErr error
		wantMsg string
	}{
		{name: "CA bundle"},
		{name: "insecure", opts: []targetOption{withInsecure()}},
		{name: "no CA", opts: []targetOption{withCA(nil)}, wantErr: bmc.ErrTLS,
			wantMsg: "unknown authority: give the BMC's CA bundle with caConfigMap, or skip verification explicitly with insecureSkipVerify"},
		{name: "wrong CA", opts: []targetOption{withCA(otherCA)}, wantErr: bmc.ErrTLS, wantMsg: "unknown authority"},
		{name: "https to plain HTTP", plain: true, wantErr: bmc.ErrTLS, wantMsg: "does not speak TLS on this port (use http://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a *Adapter
			var srv *redfishmocktest.Server
			if tt.plain {
				srv = redfishmocktest.StartHTTP(t, mockConfig())
				a = newAdapter(t, redfishTarget(t, "https://"+srv.Host+":"+srv.Port, nil, tt.opts...))
			} else {
				srv = startMock(t, mockConfig())
				a = adapterFor(t, srv, tt.opts...)
			}
			ctx := context.Background()
			_, statusErr := a.PowerStatus(ctx)
			_, offErr := a.PowerOff(ctx)
			if tt.wantErr == nil {
				if statusErr != nil || offErr != nil {
					t.Fatalf("PowerStatus: %v; PowerOff: %v", statusErr, offErr)
				}
				checkResets(t, srv.Mock, "1", resetCounts{redfishmock.ResetForceOff: 1})
				return
			}
			checkOpError(t, statusErr, tt.wantErr, bmc.OpPowerStatus, a)
			checkOpError(t, offErr, tt.wantErr, bmc.OpPowerOff, a)
			if !strings.Contains(statusErr.Error(), tt.wantMsg) {
				t.Errorf("error %q does not say %q", statusErr, tt.wantMsg)
			}
			checkResets(t, srv.Mock, "1", nil)
		})
	}
}

func TestRedfishLatency(t *testing.T) {
	t.Parallel() // mostly waits out timeouts
	t.Run("below the timeout", func(t *testing.T) {
		// What a read costs is counted in requests, not in wall time: the
		// latency is only a lower bound on a loaded machine.
		const latency = 20 * time.Millisecond
		var requests atomic.Int32
		counted := func(_ *redfishmock.Mock, next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.URL.Path, "/redfish/v1/Systems") {
					requests.Add(1)
				}
				next.ServeHTTP(w, r)
			})
		}
		mock, url := startWrapped(t, mockConfig(), counted)
		setFaults(t, mock, "1", redfishmock.Faults{Latency: latency})
		a := newAdapter(t, redfishTarget(t, url, nil))
		st := mustPowerStatus(t, a)
		// The Systems collection, then the system: two slow requests.
		if st.State != bmc.PowerOn || st.Attempts != 1 || st.Latency < 2*latency || requests.Load() != 2 {
			t.Errorf("PowerStatus = %v in %d attempts, %d requests and %v, want On in 1 attempt, 2 requests, at least %v", st.State, st.Attempts, requests.Load(), st.Latency, 2*latency)
		}
		// Once the system is known, a read is one request.
		requests.Store(0)
		st = mustPowerStatus(t, a)
		if st.State != bmc.PowerOn || st.Latency < latency || requests.Load() != 1 {
			t.Errorf("second PowerStatus = %v in %d requests and %v, want On in one slow request (at least %v)", st.State, requests.Load(), st.Latency, latency)
		}
	})
	t.Run("above the timeout", func(t *testing.T) {
		// On a fake clock that never moves, the latency never ends: only
		// the adapter's timeout can.
		srv := startMock(t, mockConfig(), redfishmock.WithClock(clocktesting.NewFakeClock(t0)))
		setFaults(t, srv.Mock, "1", redfishmock.Faults{Latency: time.Minute})
		a := adapterFor(t, srv, withTimeout(failTimeout))
		for _, op := range []bmc.Op{bmc.OpPowerStatus, bmc.OpPowerOff} {
			start := time.Now()
			res, err := runOp(a, op)
			took := time.Since(start)
			checkOpError(t, err, bmc.ErrTimeout, op, a)
			if took > failTimeout+slack || res.Attempts != 1 {
				t.Errorf("%s took %v in %d attempts; the %v timeout must end it in one", op, took, res.Attempts, failTimeout)
			}
		}
		checkResets(t, srv.Mock, "1", nil)
	})
}

// The agent's probe is one Identity per node per minute, and a README
// promise (one BMC request per node per minute; make scale's maxBMCPerMin
// = 1.0): once the system's URI is known, an identity read is one GET.
// Binding the identity to the BMC and chassis (the service root and the
// chassis, two more) is done right before our ForceOff, and at every
// identity read only on a BMC whose system has answered 503 (AMI
// multi-system BMCs).
func TestRedfishProbeOfAKnownSystemIsOneRequest(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	_, url := startWrapped(t, mockConfig(), func(_ *redfishmock.Mock, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			paths = append(paths, r.Method+" "+r.URL.Path)
			mu.Unlock()
			next.ServeHTTP(w, r)
		})
	})
	sent := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := paths
		paths = nil
		return out
	}
	a := newAdapter(t, redfishTarget(t, url, nil, withSystem("1")))
	if _, err := a.Identity(context.Background()); err != nil { // resolves and caches the system
		t.Fatal(err)
	}
	sent()
	for i := 0; i < 3; i++ {
		if _, err := a.Identity(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := sent(); len(got) != 1 {
			t.Errorf("probe %d (Identity of a known system) sent %d requests: %v; documented: one", i+1, len(got), got)
		}
	}
	// Right before a ForceOff, the identity is bound: the system, the
	// service root, the chassis, then the command.
	if _, err := a.PowerOff(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"GET /redfish/v1/Systems/1", "GET /redfish/v1/", "GET /redfish/v1/Chassis/1", "POST " + resetPath1}
	if diff := cmp.Diff(want, sent()); diff != "" {
		t.Errorf("PowerOff's requests (-want +got):\n%s", diff)
	}
}

func runOp(a *Adapter, op bmc.Op) (bmc.Result, error) {
	ctx := context.Background()
	switch op {
	case bmc.OpPowerStatus:
		st, err := a.PowerStatus(ctx)
		return st.Result, err
	case bmc.OpPowerOff:
		return a.PowerOff(ctx)
	case bmc.OpPowerOn:
		return a.PowerOn(ctx)
	case bmc.OpIdentity:
		id, err := a.Identity(ctx)
		return id.Result, err
	}
	panic("unknown op " + op)
}

var allOps = []bmc.Op{bmc.OpPowerStatus, bmc.OpPowerOff, bmc.OpPowerOn, bmc.OpIdentity}

func TestRedfishHang(t *testing.T) {
	t.Parallel() // mostly waits out timeouts
	for _, auth := range []bmc.AuthMode{bmc.AuthBasic, bmc.AuthSession} {
		t.Run(string(auth), func(t *testing.T) {
			t.Parallel()
			srv := startMock(t, mockConfig())
			setFaults(t, srv.Mock, "1", redfishmock.Faults{Hang: true})
			a := adapterFor(t, srv, withAuth(auth), withTimeout(failTimeout))
			for _, op := range allOps {
				start := time.Now()
				_, err := runOp(a, op)
				checkOpError(t, err, bmc.ErrTimeout, op, a)
				if took := time.Since(start); took > failTimeout+slack {
					t.Errorf("%s against a hung BMC took %v; the %v timeout must end it", op, took, failTimeout)
				}
			}
			checkResets(t, srv.Mock, "1", nil)
		})
	}
}

// A session opened before the BMC stops answering must still be closed:
// sessions are a scarce resource on BMCs, and each leaked one stays until it
// expires (30 minutes by default).
func TestRedfishSessionClosedWhenTheOperationTimesOut(t *testing.T) {
	t.Parallel() // mostly waits out timeouts
	t.Run("gofish read", func(t *testing.T) {
		// With the administrator's credentials and two systems, the login
		// and the collection belong to no system; only system 2's own URI
		// hangs.
		srv := startMock(t, mockConfig(redfishmock.Systems(2)...))
		setFaults(t, srv.Mock, "2", redfishmock.Faults{Hang: true})
		a := adapterFor(t, srv, withAuth(bmc.AuthSession), withSystem("2"), withTimeout(failTimeout))
		for _, op := range allOps {
			start := time.Now()
			_, err := runOp(a, op)
			checkOpError(t, err, bmc.ErrTimeout, op, a)
			if took := time.Since(start); took > failTimeout+slack {
				t.Errorf("%s took %v", op, took)
			}
			checkNoSessions(t, srv)
		}
		checkResets(t, srv.Mock, "2", nil)
	})
	t.Run("command", func(t *testing.T) {
		// System 2 hangs from the ForceOff on, after the login and the
		// read of the system succeeded.
		var posts atomic.Int32
		hangOnReset := func(m *redfishmock.Mock, next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/Actions/ComputerSystem.Reset") {
					posts.Add(1)
					_ = m.SetFaults("2", redfishmock.Faults{Hang: true})
				}
				next.ServeHTTP(w, r)
			})
		}
		mock, url := startWrapped(t, mockConfig(redfishmock.Systems(2)...), hangOnReset)
		a := newAdapter(t, redfishTarget(t, url, nil, withAuth(bmc.AuthSession), withSystem("2"), withTimeout(failTimeout)))
		start := time.Now()
		_, err := a.PowerOff(context.Background())
		if posts.Load() == 0 {
			t.Fatalf("no ForceOff was sent; error %v", err)
		}
		checkOpError(t, err, bmc.ErrTimeout, bmc.OpPowerOff, a)
		if took := time.Since(start); took > failTimeout+slack {
			t.Errorf("PowerOff took %v", took)
		}
		if s := openSessions(t, &http.Client{}, url); len(s) != 0 {
			t.Errorf("sessions left open on the BMC: %v", s)
		}
		// The hang took the request before the mock counted it.
		checkResets(t, mock, "2", nil)
	})
}

// Chosen by Id, a system is read and commanded through its own URI only: a
// wedged neighbour behind the same BMC changes nothing.
func TestRedfishWedgedNeighbour(t *testing.T) {
	srv := startMock(t, mockConfig(redfishmock.Systems(2)...))
	setFaults(t, srv.Mock, "2", redfishmock.Faults{Hang: true})
	a := adapterFor(t, srv, withSystem("1"), withTimeout(okTimeout))
	if st := mustPowerStatus(t, a); st.State != bmc.PowerOn {
		t.Errorf("PowerStatus of system 1 = %v, want On", st.State)
	}
	if _, err := a.PowerOff(context.Background()); err != nil {
		t.Fatalf("PowerOff of system 1 beside a wedged system 2: %v", err)
	}
	checkResets(t, srv.Mock, "1", resetCounts{redfishmock.ResetForceOff: 1})
}

func TestRedfishErrorRate(t *testing.T) {
	// The mock answers every request 500 or 503 (with Retry-After), so
	// neither the read nor the command ever gets through.
	srv := startMock(t, mockConfig())
	setFaults(t, srv.Mock, "1", redfishmock.Faults{ErrorRate: 1})
	a := adapterFor(t, srv, withTimeout(3*time.Second))
	for _, tt := range []struct {
		op           bmc.Op
		wantAttempts int
	}{
		// Reads are tried twice; commands never get past the read of the
		// system they act on.
		{bmc.OpPowerStatus, 2},
		{bmc.OpIdentity, 2},
		{bmc.OpPowerOff, 1},
		{bmc.OpPowerOn, 1},
	} {
		res, err := runOp(a, tt.op)
		checkOpError(t, err, bmc.ErrBMC, tt.op, a)
		if res.Attempts != tt.wantAttempts {
			t.Errorf("%s: %d attempts, want %d", tt.op, res.Attempts, tt.wantAttempts)
		}
	}
	checkResets(t, srv.Mock, "1", nil)
}

// One flaky answer is absorbed by the read's second attempt.
func TestRedfishReadRetriesATransientError(t *testing.T) {
	var calls atomic.Int32
	flakyOnce := func(_ *redfishmock.Mock, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/redfish/v1/Systems/1" {
				if calls.Add(1) == 1 {
					http.Error(w, `{"error":{"code":"Base.1.8.InternalError","message":"busy"}}`, http.StatusInternalServerError)
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
	_, url := startWrapped(t, mockConfig(), flakyOnce)
	a := newAdapter(t, redfishTarget(t, url, nil))
	st := mustPowerStatus(t, a)
	if st.State != bmc.PowerOn || st.Attempts != 2 {
		t.Errorf("PowerStatus = %v in %d attempts, want On in 2", st.State, st.Attempts)
	}
}

func TestRedfishConflictWhenOff(t *testing.T) {
	t.Run("already off", func(t *testing.T) {
		// The ForceOff goes out although the system reads Off, and the
		// BMC's 409 means it did nothing: ErrAlreadyInState, not
		// acceptance.
		srv := startMock(t, mockConfig())
		setPower(t, srv.Mock, "1", redfishmock.PowerOff)
		setFaults(t, srv.Mock, "1", redfishmock.Faults{ConflictWhenOff: true})
		a := adapterFor(t, srv)
		res, err := a.PowerOff(context.Background())
		checkOpError(t, err, bmc.ErrAlreadyInState, bmc.OpPowerOff, a)
		if res.Sent != "ComputerSystem.Reset ForceOff" || res.Attempts != 1 {
			t.Errorf("result %+v: want one ForceOff sent", res)
		}
		checkResets(t, srv.Mock, "1", resetCounts{redfishmock.ResetForceOff: 1})
		if st := mustPowerStatus(t, a); st.State != bmc.PowerOff {
			t.Errorf("read-back = %v, want Off", st.State)
		}
	})
	t.Run("turned off between read and command", func(t *testing.T) {
		// The system reads On when the adapter reads it, and is Off (someone
		// else fenced it) when the ForceOff arrives: the BMC answers 409.
		offFirst := func(m *redfishmock.Mock, next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/Actions/ComputerSystem.Reset") {
					_ = m.SetPower("1", redfishmock.PowerOff)
				}
				next.ServeHTTP(w, r)
			})
		}
		cfg := mockConfig()
		cfg.Faults = redfishmock.Faults{ConflictWhenOff: true}
		mock, url := startWrapped(t, cfg, offFirst)
		a := newAdapter(t, redfishTarget(t, url, nil))
		_, err := a.PowerOff(context.Background())
		checkOpError(t, err, bmc.ErrAlreadyInState, bmc.OpPowerOff, a)
		if !strings.Contains(err.Error(), "HTTP 409") {
			t.Errorf("error %q does not carry the BMC's 409", err)
		}
		checkResets(t, mock, "1", resetCounts{redfishmock.ResetForceOff: 1})
		if st := mustPowerStatus(t, a); st.State != bmc.PowerOff {
			t.Errorf("read-back = %v, want Off", st.State)
		}
	})
}

// A lying BMC acknowledges and ignores: the adapter reports what the BMC
// said; only the read-back tells the truth.
func TestRedfishIgnoreCommands(t *testing.T) {
	srv := startMock(t, mockConfig())
	setFaults(t, srv.Mock, "1", redfishmock.Faults{IgnoreCommands: true})
	a := adapterFor(t, srv)
	if _, err := a.PowerOff(context.Background()); err != nil {
		t.Fatalf("PowerOff: %v", err)
	}
	checkResets(t, srv.Mock, "1", resetCounts{redfishmock.ResetForceOff: 1})
	if st := mustPowerStatus(t, a); st.State != bmc.PowerOn {
		t.Errorf("read-back = %v, want On (the BMC ignored the ForceOff)", st.State)
	}
}

func TestRedfishIgnoreDuringTransition(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	cfg := mockConfig()
	cfg.Timing = redfishmock.Timing{PowerOn: 45 * time.Second}
	srv := startMock(t, cfg, redfishmock.WithClock(clk))
	setPower(t, srv.Mock, "1", redfishmock.PowerOff)
	setFaults(t, srv.Mock, "1", redfishmock.Faults{IgnoreDuringTransition: true})
	a := adapterFor(t, srv)
	ctx := context.Background()

	if _, err := a.PowerOn(ctx); err != nil {
		t.Fatalf("PowerOn: %v", err)
	}
	clk.Step(10 * time.Second)
	if _, err := a.PowerOff(ctx); err != nil {
		t.Fatalf("PowerOff during PoweringOn: %v", err)
	}
	checkResets(t, srv.Mock, "1", resetCounts{redfishmock.ResetOn: 1, redfishmock.ResetForceOff: 1})
	if st := mustPowerStatus(t, a); st.State != bmc.PoweringOn {
		t.Errorf("read-back = %v, want PoweringOn (the ForceOff was ignored)", st.State)
	}
	clk.Step(35 * time.Second)
	if st := mustPowerStatus(t, a); st.State != bmc.PowerOn {
		t.Errorf("read-back at the end of power-on = %v, want On", st.State)
	}
}

func TestRedfishPowerOnFails(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	cfg := mockConfig()
	cfg.Timing = redfishmock.Timing{PowerOn: 45 * time.Second}
	srv := startMock(t, cfg, redfishmock.WithClock(clk))
	setPower(t, srv.Mock, "1", redfishmock.PowerOff)
	setFaults(t, srv.Mock, "1", redfishmock.Faults{PowerOnFails: true})
	a := adapterFor(t, srv)

	if _, err := a.PowerOn(context.Background()); err != nil {
		t.Fatalf("PowerOn: %v", err)
	}
	if st := mustPowerStatus(t, a); st.State != bmc.PoweringOn {
		t.Errorf("just after PowerOn: %v, want PoweringOn", st.State)
	}
	clk.Step(45 * time.Second)
	if st := mustPowerStatus(t, a); st.State != bmc.PowerOff {
		t.Errorf("after the failed POST: %v, want Off", st.State)
	}
	checkResets(t, srv.Mock, "1", resetCounts{redfishmock.ResetOn: 1})
}

func TestRedfishSessionLimits(t *testing.T) {
	t.Run("exhausted, session auth", func(t *testing.T) {
		srv := startMock(t, mockConfig())
		setFaults(t, srv.Mock, "1", redfishmock.Faults{SessionsExhausted: true})
		a := adapterFor(t, srv, withAuth(bmc.AuthSession))
		for _, op := range allOps {
			_, err := runOp(a, op)
			checkOpError(t, err, bmc.ErrBMC, op, a)
			if msg := err.Error(); !strings.Contains(msg, "HTTP 503") || !strings.Contains(msg, "simultaneous sessions exceeding the limit") {
				t.Errorf("%s: error %q does not say the session table is full", op, msg)
			}
		}
		checkResets(t, srv.Mock, "1", nil)
	})
	t.Run("exhausted, basic auth", func(t *testing.T) {
		srv := startMock(t, mockConfig())
		setFaults(t, srv.Mock, "1", redfishmock.Faults{SessionsExhausted: true})
		a := adapterFor(t, srv, withAuth(bmc.AuthBasic))
		for _, op := range allOps {
			if _, err := runOp(a, op); err != nil {
				t.Errorf("%s with Basic auth and a full session table: %v", op, err)
			}
		}
	})
	t.Run("one slot, session auth", func(t *testing.T) {
		// Each operation logs in once and out again: one slot is enough
		// for any number of operations in a row.
		srv := startMock(t, mockConfig())
		setFaults(t, srv.Mock, "1", redfishmock.Faults{SessionLimit: 1})
		a := adapterFor(t, srv, withAuth(bmc.AuthSession))
		for _, op := range allOps {
			if _, err := runOp(a, op); err != nil {
				t.Errorf("%s with one session slot: %v", op, err)
			}
			checkNoSessions(t, srv)
		}
	})
}

func TestRedfishAuthFailures(t *testing.T) {
	tests := []struct {
		name     string
		faults   redfishmock.Faults
		password string
	}{
		{name: "stale password (authFailure)", faults: redfishmock.Faults{AuthFailure: true}},
		{name: "wrong password", password: "wrong-" + mockPass},
	}
	for _, tt := range tests {
		for _, auth := range []bmc.AuthMode{bmc.AuthBasic, bmc.AuthSession} {
			t.Run(tt.name+"/"+string(auth), func(t *testing.T) {
				srv := startMock(t, mockConfig())
				setFaults(t, srv.Mock, "1", tt.faults)
				opts := []targetOption{withAuth(auth)}
				if tt.password != "" {
					opts = append(opts, withPassword(tt.password))
				}
				a := adapterFor(t, srv, opts...)
				for _, op := range allOps {
					res, err := runOp(a, op)
					checkOpError(t, err, bmc.ErrAuth, op, a)
					if res.Attempts != 1 {
						t.Errorf("%s: %d attempts; a rejected password is not retried", op, res.Attempts)
					}
					// checkOpError looked for the password the adapter was
					// given; the mock's real one must not show either.
					if strings.Contains(err.Error(), mockPass) {
						t.Errorf("%s: error leaks a password: %q", op, err)
					}
				}
				checkResets(t, srv.Mock, "1", nil)
			})
		}
	}
}

func TestRedfishUnreachable(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			var opts []targetOption
			if scheme == "https" {
				opts = append(opts, withInsecure())
			}
			a := newAdapter(t, redfishTarget(t, scheme+"://"+closedPort(t), nil, opts...))
			for _, op := range allOps {
				start := time.Now()
				_, err := runOp(a, op)
				checkOpError(t, err, bmc.ErrUnreachable, op, a)
				if took := time.Since(start); took > slack {
					t.Errorf("%s to a closed port took %v; a refused connection must fail fast", op, took)
				}
				if !strings.Contains(err.Error(), "connection refused") {
					t.Errorf("%s: error %q does not say the connection was refused", op, err)
				}
			}
		})
	}
}

func TestRedfishIdentity(t *testing.T) {
	const uuid = "4c4c4544-0042-4410-8030-b5c04f4d3132"
	for _, wrongUUID := range []bool{false, true} {
		name := "honest"
		if wrongUUID {
			name = "wrong UUID"
		}
		t.Run(name, func(t *testing.T) {
			srv := startMock(t, mockConfig(redfishmock.SystemConfig{ID: "node-a", Name: "worker-a", UUID: uuid, SerialNumber: "SN-0001"}))
			setFaults(t, srv.Mock, "node-a", redfishmock.Faults{WrongUUID: wrongUUID})
			a := adapterFor(t, srv)
			got, err := a.Identity(context.Background())
			if err != nil {
				t.Fatalf("Identity: %v", err)
			}
			st, err := srv.Mock.Status("node-a")
			if err != nil {
				t.Fatal(err)
			}
			want := bmc.Identity{
				SystemID:     "node-a",
				SystemName:   "worker-a",
				UUID:         st.ReportedUUID,
				SerialNumber: "SN-0001",
				Manufacturer: "bmcfence",
				Model:        "redfish-mock",
				AllowedResets: []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart",
					"GracefulRestart", "PowerCycle", "Nmi"},
				Result: bmc.Result{Provider: "redfish", Attempts: 1},
			}
			if diff := cmp.Diff(want, got, ignoreLatency); diff != "" {
				t.Errorf("Identity (-want +got):\n%s", diff)
			}
			if got.Latency <= 0 {
				t.Errorf("Latency = %v, want > 0", got.Latency)
			}
			if (got.UUID != uuid) != wrongUUID {
				t.Errorf("UUID = %s with wrongUUID=%v; configured %s", got.UUID, wrongUUID, uuid)
			}
		})
	}
}

// The adapter never touches a system it was not pointed at, even when the
// other one is broken: a system-scoped user sees a BMC of its own.
func TestRedfishScopedCredentialsSeeOneSystem(t *testing.T) {
	cfg := mockConfig(
		redfishmock.SystemConfig{Username: "node-1", Password: "pw-node-1"},
		redfishmock.SystemConfig{Username: "node-2", Password: "pw-node-2", Faults: &redfishmock.Faults{Hang: true}},
	)
	srv := startMock(t, cfg)
	target := redfishTarget(t, srv.URL, srv.CAPEM)
	target.Credentials = bmc.Credentials{Username: "node-1", Password: "pw-node-1"}
	a := newAdapter(t, target)
	if _, err := a.PowerOff(context.Background()); err != nil {
		t.Fatalf("PowerOff without a selector, scoped to one system: %v", err)
	}
	checkResets(t, srv.Mock, "1", resetCounts{redfishmock.ResetForceOff: 1})
	checkResets(t, srv.Mock, "2", nil)
}

// A cancelled caller is not a BMC failure: the error says so and is not
// retried.
func TestRedfishCancelledContext(t *testing.T) {
	srv := startMock(t, mockConfig())
	a := adapterFor(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, err := a.PowerStatus(ctx)
	if !errors.Is(err, context.Canceled) || st.Attempts != 1 {
		t.Errorf("PowerStatus with a cancelled context = %v in %d attempts, want context.Canceled in 1", err, st.Attempts)
	}
	var opErr *bmc.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("error %v is not a *bmc.OpError", err)
	}
}

func TestRedfishAddressIsHonoured(t *testing.T) {
	// The same mock, addressed as localhost: the certificate is for
	// 127.0.0.1 only, so verification must fail on the name.
	srv := startMock(t, mockConfig())
	a := adapterFor(t, srv, withAddress("https://localhost:"+srv.Port))
	_, err := a.PowerStatus(context.Background())
	checkOpError(t, err, bmc.ErrTLS, bmc.OpPowerStatus, a)
	if !strings.Contains(err.Error(), "not valid for localhost") {
		t.Errorf("error %q does not say the certificate is for another name", err)
	}
}

// Every request of an operation carries the operation's deadline: a BMC
// slow on every answer cannot stretch one power command (a read of the
// system, then the Reset) beyond its timeout.
func TestRedfishPowerCommandIsBoundedByTheTimeout(t *testing.T) {
	const (
		timeout = 600 * time.Millisecond
		latency = 400 * time.Millisecond // under the timeout for any one request
	)
	srv := startMock(t, mockConfig())
	setFaults(t, srv.Mock, "1", redfishmock.Faults{Latency: latency})
	a := adapterFor(t, srv, withSystem("1"), withTimeout(timeout))
	start := time.Now()
	_, err := a.PowerOff(context.Background())
	took := time.Since(start)
	checkOpError(t, err, bmc.ErrTimeout, bmc.OpPowerOff, a)
	if took > timeout+slack {
		t.Errorf("PowerOff took %v with a %v timeout", took, timeout)
	}
}

// A long-lived adapter (the agent keeps one per node) reuses one kept-alive
// connection, and once it knows the system's URI a power read is one GET.
func TestRedfishLongLivedAdapterReusesItsConnection(t *testing.T) {
	mock, err := redfishmock.New(mockConfig(redfishmock.Systems(2)...))
	if err != nil {
		t.Fatal(err)
	}
	var conns, requests atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		mock.ServeHTTP(w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(func() { mock.Close(); srv.Close() })
	a := newAdapter(t, redfishTarget(t, srv.URL, nil, withSystem("2"), withInsecure()))
	for range 5 {
		if st := mustPowerStatus(t, a); st.State != bmc.PowerOn {
			t.Fatalf("PowerStatus = %v", st.State)
		}
	}
	// The first read finds the system in the collection (one GET more).
	if conns.Load() != 1 || requests.Load() != 6 {
		t.Errorf("5 reads took %d connections and %d requests; want 1 connection, the collection, and one GET each", conns.Load(), requests.Load())
	}
}

// The fenceability probe reads the identity once a minute: after the
// first read (which finds the system and binds its identity to its BMC and
// chassis), each read is one GET of the system, so a BMC sees one request
// per node per minute. The binding is read again only when the identity
// changes, or an hour later.
func TestRedfishRepeatedIdentityIsOneRequestEach(t *testing.T) {
	mock, err := redfishmock.New(mockConfig(redfishmock.Systems(2)...))
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		mock.ServeHTTP(w, r)
	}))
	srv.StartTLS()
	t.Cleanup(func() { mock.Close(); srv.Close() })
	a := newAdapter(t, redfishTarget(t, srv.URL, nil, withSystem("2"), withInsecure()))
	if _, err := a.Identity(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := requests.Load()
	for range 5 {
		if _, err := a.Identity(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := requests.Load() - first; got != 5 {
		t.Errorf("5 identity reads after the first took %d requests, want 5 (one GET of the system each)", got)
	}
}

// The agent's probe reads each BMC once a minute and lets the connection
// close in between (an idle connection per BMC costs both sides): the next
// handshake resumes the TLS session instead of a full one (no certificate
// to send, verify or sign for).
func TestRedfishResumesTheTLSSession(t *testing.T) {
	mock, err := redfishmock.New(mockConfig(redfishmock.Systems(1)...))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var resumed []bool
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		resumed = append(resumed, r.TLS.DidResume)
		mu.Unlock()
		mock.ServeHTTP(w, r)
	}))
	srv.StartTLS()
	t.Cleanup(func() { mock.Close(); srv.Close() })
	a := newAdapter(t, redfishTarget(t, srv.URL, nil, withSystem("1"), withInsecure()))
	for range 3 {
		if st := mustPowerStatus(t, a); st.State != bmc.PowerOn {
			t.Fatalf("PowerStatus = %v", st.State)
		}
		a.Controller.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(resumed) < 3 || resumed[0] || !resumed[len(resumed)-1] || !resumed[len(resumed)-2] {
		t.Errorf("resumed per request: %v; want the first handshake full, the later ones resumed", resumed)
	}
}
