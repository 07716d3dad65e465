package redfishmock_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

func TestNewFillsDefaults(t *testing.T) {
	m, err := redfishmock.New(redfishmock.Config{Username: "admin", Password: "secret", Systems: redfishmock.Systems(2)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range m.Statuses() {
		got = append(got, st.ID+" "+st.Name+" "+string(st.PowerState))
	}
	want := []string{"1 System-1 On", "2 System-2 On"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("systems (-want +got):\n%s", diff)
	}
	a, _ := m.Status("1")
	b, _ := m.Status("2")
	if a.UUID == b.UUID {
		t.Errorf("default UUIDs collide: %s", a.UUID)
	}
	// Deterministic: a second mock derives the same UUID.
	m2, _ := redfishmock.New(redfishmock.Config{Username: "admin", Password: "secret", Systems: redfishmock.Systems(1)})
	if again, _ := m2.Status("1"); again.UUID != a.UUID {
		t.Errorf("UUID of system 1 changed between mocks: %s then %s", a.UUID, again.UUID)
	}
}

func TestNewRejectsBadConfigNamingTheField(t *testing.T) {
	valid := func() redfishmock.Config {
		return redfishmock.Config{Username: "admin", Password: "secret", Systems: redfishmock.Systems(2)}
	}
	tests := []struct {
		name   string
		mutate func(*redfishmock.Config)
		want   string // a fragment of the error naming the field
	}{
		{"no username", func(c *redfishmock.Config) { c.Username = "" }, "username: required"},
		{"colon in username", func(c *redfishmock.Config) { c.Username = "a:b" }, "username: must not contain ':'"},
		{"no password", func(c *redfishmock.Config) { c.Password = "" }, "password: required"},
		{"no systems", func(c *redfishmock.Config) { c.Systems = nil }, "systems: at least one"},
		{"negative max sessions", func(c *redfishmock.Config) { c.MaxSessions = -1 }, "maxSessions"},
		{"negative session timeout", func(c *redfishmock.Config) { c.SessionTimeout = -time.Second }, "sessionTimeout"},
		{"negative timing", func(c *redfishmock.Config) { c.Timing.PowerOn = -time.Second }, "timing: powerOnTime"},
		{"error rate above 1", func(c *redfishmock.Config) { c.Faults.ErrorRate = 1.5 }, "faults: errorRate"},
		{"duplicate id", func(c *redfishmock.Config) { c.Systems[0].ID = "2" }, `systems[1].id: "2" is already used by systems[0]`},
		{"id with a slash", func(c *redfishmock.Config) { c.Systems[0].ID = "a/b" }, "systems[0].id"},
		{"unknown profile", func(c *redfishmock.Config) { c.Systems[1].Profile = "hal9000" }, "systems[1].profile"},
		{"unknown reset type", func(c *redfishmock.Config) { c.Systems[0].ResetTypes = []redfishmock.ResetType{"Explode"} }, "systems[0].resetTypes"},
		{"unknown auth mode", func(c *redfishmock.Config) { c.AuthMode = "telepathy" }, "authMode"},
		{"bad uuid", func(c *redfishmock.Config) { c.Systems[1].UUID = "nope" }, "systems[1].uuid"},
		{"duplicate uuid", func(c *redfishmock.Config) {
			c.Systems[0].UUID, c.Systems[1].UUID = "4c4c4544-0042-3510-8052-b4c04f4e3532", "4C4C4544-0042-3510-8052-B4C04F4E3532"
		}, "systems[1].uuid"},
		{"transitional initial state", func(c *redfishmock.Config) { c.Systems[0].PowerState = redfishmock.PowerPoweringOn }, "systems[0].powerState"},
		{"system password without user", func(c *redfishmock.Config) { c.Systems[0].Password = "x" }, "systems[0].username: required"},
		{"system user reusing admin", func(c *redfishmock.Config) {
			c.Systems[1].Username, c.Systems[1].Password = "admin", "x"
		}, `systems[1].username: "admin" is already used by username`},
		{"system timing negative", func(c *redfishmock.Config) {
			c.Systems[1].Timing = &redfishmock.Timing{RestartOff: -1}
		}, "systems[1].timing: restartOffTime"},
		{"system faults invalid", func(c *redfishmock.Config) {
			c.Systems[0].Faults = &redfishmock.Faults{SessionLimit: -1}
		}, "systems[0].faults: sessionLimit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid()
			tt.mutate(&cfg)
			_, err := redfishmock.New(cfg)
			if !errors.Is(err, redfishmock.ErrInvalidConfig) {
				t.Fatalf("New() error = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New() error = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseConfig(t *testing.T) {
	doc := `
username: admin
password: secret
maxSessions: 4
sessionTimeout: 90s
seed: 7
timing:
  powerOnTime: 20s
faults:
  latency: 50ms
systems:
  - id: 1                 # a YAML number is fine
    name: node-a
    powerState: Off       # a YAML 1.1 boolean (false) is fine too
  - name: node-b
    powerState: "On"
    timing: {powerOnTime: 45s}
    faults: {conflictWhenOff: true}
  - {}
`
	got, err := redfishmock.ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	def := redfishmock.DefaultTiming()
	wantTiming := def
	wantTiming.PowerOn = 20 * time.Second
	slowTiming := wantTiming
	slowTiming.PowerOn = 45 * time.Second
	want := redfishmock.Config{
		Username: "admin", Password: "secret", MaxSessions: 4, SessionTimeout: 90 * time.Second, Seed: 7,
		Timing: wantTiming,
		Faults: redfishmock.Faults{Latency: 50 * time.Millisecond},
		Systems: []redfishmock.SystemConfig{
			{ID: "1", Name: "node-a", PowerState: redfishmock.PowerOff},
			{
				Name: "node-b", PowerState: redfishmock.PowerOn,
				Timing: &slowTiming,
				// Merged onto the file's default faults.
				Faults: &redfishmock.Faults{Latency: 50 * time.Millisecond, ConflictWhenOff: true},
			},
			{},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseConfig (-want +got):\n%s", diff)
	}
}

func TestParseConfigRejects(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"unknown top-level field", "usernme: x", `unknown field "usernme"`},
		{"unknown timing field", "timing: {powerOn: 1s}", `timing: json: unknown field "powerOn"`},
		{"unknown fault", "systems: [{faults: {latncy: 1s}}]", `systems[0].faults: json: unknown field "latncy"`},
		{"unknown system field", "systems: [{serial: x}]", `systems[0]: json: unknown field "serial"`},
		{"bare number duration", "timing: {powerOnTime: 30}", `want a duration string`},
		{"bad duration", "faults: {latency: soon}", `faults: want a duration string`},
		{"bad power state type", "systems: [{powerState: [1]}]", "systems[0].powerState: want On or Off"},
		{"duplicate key", "username: a\nusername: b", "not valid YAML"},
		{"not YAML", "{{{", "not valid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := redfishmock.ParseConfig([]byte(tt.doc))
			if !errors.Is(err, redfishmock.ErrInvalidConfig) {
				t.Fatalf("ParseConfig() error = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseConfig() error = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestExampleConfigLoadsAndServes(t *testing.T) {
	path := filepath.Join("..", "..", "configs", "redfish-mock.example.yaml")
	cfg, err := redfishmock.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := redfishmock.New(cfg)
	if err != nil {
		t.Fatalf("New(example config): %v", err)
	}
	b, err := m.Status("2")
	if err != nil {
		t.Fatal(err)
	}
	if b.Name != "node-b" || b.PowerState != redfishmock.PowerOff || b.Timing.PowerOn != 45*time.Second || !b.Faults.ConflictWhenOff {
		t.Errorf("system 2 of the example = %+v", b)
	}
	p, err := m.PDU("1")
	if err != nil || len(p.Outlets) != 3 || p.Outlets[1].Feeds != "1/2" || p.SerialNumber != "ZA1234567890" {
		t.Errorf("PDU 1 of the example = %+v, %v", p, err)
	}
	if cfg.Events.HeartbeatMinute != time.Minute {
		t.Errorf("events.heartbeatMinute = %v", cfg.Events.HeartbeatMinute)
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	_, err := redfishmock.LoadConfig(filepath.Join(t.TempDir(), "absent.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !errors.Is(err, redfishmock.ErrInvalidConfig) {
		t.Errorf("LoadConfig(absent) = %v, want ErrNotExist and ErrInvalidConfig", err)
	}
}
