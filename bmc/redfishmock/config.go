package redfishmock

import (
	"github.com/bmcfence/bmcfence/bmc/machine"

	"crypto/sha1" //nolint:gosec // SHA-1 is what RFC 4122 name-based (v5) UUIDs are defined with; nothing here is secret.
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Defaults applied by New to the zero values of Config.
const (
	// DefaultMaxSessions is a typical BMC session table size (iDRAC and iLO
	// allow a few dozen); small enough that a client leaking sessions hits
	// the limit in a test, as it would in production.
	DefaultMaxSessions = 32
	// DefaultSessionTimeout is the Redfish SessionService.SessionTimeout most
	// BMCs ship with (1800 s).
	DefaultSessionTimeout = 30 * time.Minute
)

// ErrInvalidConfig is wrapped by every error New and LoadConfig return for a
// configuration that cannot be served.
var ErrInvalidConfig = errors.New("invalid redfish mock config")

// Config describes one mock Redfish service (one BMC endpoint) and the
// systems behind it.
type Config struct {
	// Username and Password are the administrator credentials. They see
	// every system. Both are required.
	Username string
	Password string
	// Systems are the computer systems served; at least one. Zero fields of
	// each are filled in by New (see SystemConfig).
	Systems []SystemConfig
	// Timing is the timing of every system that does not set its own. The
	// zero Timing makes every transition instant.
	Timing Timing
	// Faults are the faults of every system that does not set its own.
	Faults Faults
	// MaxSessions bounds the session table; 0 means DefaultMaxSessions.
	MaxSessions int
	// SessionTimeout is how long an unused session lives; 0 means
	// DefaultSessionTimeout.
	SessionTimeout time.Duration
	// Seed seeds the per-system RNGs behind Faults.ErrorRate.
	Seed int64
	// Profile is the vendor behaviour of every system that does not set
	// its own (see Profile); "" means generic.
	Profile Profile
	// AuthMode is what authentication the service takes; "" takes both
	// HTTP Basic and sessions.
	AuthMode AuthMode
	// Events tunes the event service (heartbeat minute, SSE idle close
	// and stream bound, push retries); the zero value is realistic.
	Events EventsConfig
	// PDUs are rack PDUs served under /redfish/v1/PowerEquipment, whose
	// outlets feed the systems' power supplies (see PDUConfig).
	PDUs []PDUConfig
}

// SystemConfig describes one ComputerSystem. Every field is optional.
type SystemConfig struct {
	// ID is the Redfish Id and the last segment of the system's URI; it
	// must be a plain URI segment. Default: its 1-based position.
	ID string
	// Name is the Redfish Name. Several systems may share one (multi-node
	// BMCs do); clients must then select by Id. Default: "System-<ID>".
	Name string
	// UUID is the system UUID, reported exactly as written. Default: a
	// name-based UUID derived from ID, stable across runs.
	UUID string
	// SerialNumber defaults to "MOCK-<ID>".
	SerialNumber string
	// PowerState is the initial power state, On or Off. Default: On.
	PowerState PowerState
	// Username and Password, when set, are credentials that see only this
	// system: the service root, collections and sessions look as if the
	// system were alone behind its own BMC. That keeps a client which lists
	// every system (bmclib does) from tripping over another system's faults.
	Username string
	Password string
	// Timing overrides Config.Timing for this system when non-nil.
	Timing *Timing
	// Faults overrides Config.Faults for this system when non-nil.
	Faults *Faults
	// Profile overrides Config.Profile for this system when set.
	Profile Profile
	// ResetTypes, when set, replaces the profile's advertised (and
	// accepted) ResetType@Redfish.AllowableValues: a BMC without ForceOff,
	// say.
	ResetTypes []ResetType
	// PowerSupplies is the number of power supplies, 1 to 8. Default:
	// DefaultPowerSupplies (2).
	PowerSupplies int
}

// Systems returns n systems with every field defaulted: Ids "1".."n".
func Systems(n int) []SystemConfig {
	if n < 0 {
		n = 0
	}
	return make([]SystemConfig, n)
}

// systemSpec is a SystemConfig with every default resolved.
type systemSpec struct {
	id, name, uuid, serial string
	power                  PowerState
	username, password     string
	timing                 Timing
	faults                 Faults
	profile                Profile
	resetTypes             []ResetType // nil: the profile's
	psus                   int
}

// resolve fills in defaults and validates, naming the offending field of
// every problem it finds.
func (c Config) resolve() (resolvedConfig, error) {
	rc := resolvedConfig{
		username:       c.Username,
		password:       c.Password,
		maxSessions:    c.MaxSessions,
		sessionTimeout: c.SessionTimeout,
		seed:           c.Seed,
		authMode:       c.AuthMode,
		profile:        c.Profile,
	}
	if rc.maxSessions == 0 {
		rc.maxSessions = DefaultMaxSessions
	}
	if rc.sessionTimeout == 0 {
		rc.sessionTimeout = DefaultSessionTimeout
	}

	var problems []string
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if c.Username == "" {
		problem("username: required")
	} else if strings.ContainsAny(c.Username, ":\r\n") {
		problem("username: must not contain ':' or line breaks (HTTP Basic auth cannot carry them)")
	}
	if c.Password == "" {
		problem("password: required")
	}
	if c.MaxSessions < 0 {
		problem("maxSessions: %d is negative; use 0 for the default (%d)", c.MaxSessions, DefaultMaxSessions)
	}
	if c.SessionTimeout < 0 {
		problem("sessionTimeout: %v is negative; use 0 for the default (%v)", c.SessionTimeout, DefaultSessionTimeout)
	}
	if err := c.Timing.Validate(); err != nil {
		problem("timing: %v", oneLine(err))
	}
	if err := c.Faults.validate(); err != nil {
		problem("faults: %v", oneLine(err))
	}
	if len(c.Systems) == 0 {
		problem("systems: at least one system is required")
	}
	if !c.Profile.Valid() {
		problem("profile: %q: want one of %v", c.Profile, Profiles())
	}
	switch c.AuthMode {
	case AuthBoth, AuthBasicOnly, AuthSessionOnly:
	default:
		problem("authMode: %q: want both, basic-only or session-only", c.AuthMode)
	}
	problems = append(problems, c.Events.validate()...)

	seenID := map[string]int{}
	seenUUID := map[string]int{}
	seenUser := map[string]string{c.Username: "username"}
	for i, sc := range c.Systems {
		field := fmt.Sprintf("systems[%d]", i)
		spec := systemSpec{
			id: sc.ID, name: sc.Name, uuid: sc.UUID, serial: sc.SerialNumber,
			power: sc.PowerState, username: sc.Username, password: sc.Password,
			timing: c.Timing, faults: c.Faults,
			profile: c.Profile, resetTypes: sc.ResetTypes,
			psus: sc.PowerSupplies,
		}
		if spec.psus == 0 {
			spec.psus = DefaultPowerSupplies
		}
		if spec.psus < 1 || spec.psus > 8 {
			problem("%s.powerSupplies: %d: want 1 to 8 (0 for the default, %d)", field, sc.PowerSupplies, DefaultPowerSupplies)
		}
		if sc.Profile != "" {
			spec.profile = sc.Profile
		}
		if spec.profile == "" {
			spec.profile = ProfileGeneric
		}
		if !spec.profile.Valid() {
			problem("%s.profile: %q: want one of %v", field, spec.profile, Profiles())
		}
		for _, rt := range sc.ResetTypes {
			if !rt.Valid() {
				problem("%s.resetTypes: %q is not a ResetType the machine understands (%v)", field, rt, KnownResetTypes())
			}
		}
		if spec.id == "" {
			spec.id = strconv.Itoa(i + 1)
		}
		if spec.name == "" {
			spec.name = "System-" + spec.id
		}
		if spec.uuid == "" {
			spec.uuid = nameUUID("system/" + spec.id)
		}
		if spec.serial == "" {
			spec.serial = "MOCK-" + spec.id
		}
		if spec.power == "" {
			spec.power = PowerOn
		}
		if sc.Timing != nil {
			spec.timing = *sc.Timing
		}
		if sc.Faults != nil {
			spec.faults = *sc.Faults
		}

		if !validID.MatchString(spec.id) {
			problem("%s.id: %q is not a plain URI segment (use letters, digits, '.', '_', '-'; at most 64)", field, spec.id)
		}
		if j, dup := seenID[spec.id]; dup {
			problem("%s.id: %q is already used by systems[%d]", field, spec.id, j)
		}
		seenID[spec.id] = i
		// Reported exactly as configured (BMCs differ in case), but compared
		// without regard to case, as UUIDs are.
		if !validUUID.MatchString(spec.uuid) {
			problem("%s.uuid: %q is not a UUID like 8-4-4-4-12 hex digits", field, sc.UUID)
		} else if j, dup := seenUUID[strings.ToLower(spec.uuid)]; dup {
			problem("%s.uuid: %q is already used by systems[%d] (use faults.wrongUUID to simulate a mix-up)", field, spec.uuid, j)
		}
		seenUUID[strings.ToLower(spec.uuid)] = i
		if spec.power != PowerOn && spec.power != PowerOff {
			problem("%s.powerState: %q is not On or Off", field, spec.power)
		}
		switch {
		case spec.username == "" && spec.password != "":
			problem("%s.username: required when %s.password is set", field, field)
		case spec.username != "" && spec.password == "":
			problem("%s.password: required when %s.username is set", field, field)
		case spec.username != "":
			if strings.ContainsAny(spec.username, ":\r\n") {
				problem("%s.username: must not contain ':' or line breaks", field)
			}
			if other, dup := seenUser[spec.username]; dup {
				problem("%s.username: %q is already used by %s", field, spec.username, other)
			}
			seenUser[spec.username] = field + ".username"
		}
		if err := spec.timing.Validate(); err != nil && sc.Timing != nil {
			problem("%s.timing: %v", field, oneLine(err))
		}
		if err := spec.faults.validate(); err != nil && sc.Faults != nil {
			problem("%s.faults: %v", field, oneLine(err))
		}
		rc.systems = append(rc.systems, spec)
	}
	if len(problems) > 0 {
		return resolvedConfig{}, fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return rc, nil
}

type resolvedConfig struct {
	authMode AuthMode
	// profile is the service's own (Config.Profile): it decides what the
	// service root says (sushy-tools' is a fixed template).
	profile            Profile
	username, password string
	maxSessions        int
	sessionTimeout     time.Duration
	seed               int64
	systems            []systemSpec
}

var (
	validID   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	validUUID = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

// nameUUID derives an RFC 4122 version 5 UUID from name, so a system's
// default UUID is the same on every run and differs between systems.
func nameUUID(name string) string {
	// Namespace: the RFC 4122 URL namespace; the name is a mock-specific URN.
	namespace := [16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	h := sha1.New() //nolint:gosec // see import comment
	h.Write(namespace[:])
	h.Write([]byte("urn:bmcfence:redfish-mock:" + name))
	sum := h.Sum(nil)
	sum[6] = (sum[6] & 0x0f) | 0x50 // version 5
	sum[8] = (sum[8] & 0x3f) | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
}

func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// LoadConfig reads a YAML (or JSON) config file. Field names are the
// camelCase forms of Config's (see configs/redfish-mock.example.yaml).
// Unknown fields are errors. Whatever the file leaves out keeps the
// binary's defaults: DefaultTiming for timing, no faults. A system's
// timing and faults are merged onto the file's top-level ones, so a system
// names only what differs.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig is LoadConfig for a document already in memory.
func ParseConfig(data []byte) (Config, error) {
	cfg, err := parseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return cfg, nil
}

type fileConfig struct {
	Username       string            `json:"username"`
	Password       string            `json:"password"`
	MaxSessions    int               `json:"maxSessions"`
	SessionTimeout machine.Duration  `json:"sessionTimeout"`
	Seed           int64             `json:"seed"`
	Timing         json.RawMessage   `json:"timing"`
	Faults         json.RawMessage   `json:"faults"`
	Profile        Profile           `json:"profile"`
	AuthMode       string            `json:"authMode"`
	Systems        []json.RawMessage `json:"systems"`
	Events         *fileEvents       `json:"events"`
	PDUs           []filePDU         `json:"pdus"`
}

type fileEvents struct {
	HeartbeatMinute       machine.Duration `json:"heartbeatMinute"`
	SSEIdleTimeout        machine.Duration `json:"sseIdleTimeout"`
	MaxSSEStreams         int              `json:"maxSSEStreams"`
	DeliveryRetryInterval machine.Duration `json:"deliveryRetryInterval"`
	DeliveryRetryAttempts int              `json:"deliveryRetryAttempts"`
	Buffer                int              `json:"buffer"`
}

type filePDU struct {
	ID           flexString   `json:"id"`
	Name         string       `json:"name"`
	SerialNumber flexString   `json:"serialNumber"`
	Outlets      []fileOutlet `json:"outlets"`
}

type fileOutlet struct {
	ID         flexString      `json:"id"`
	Name       string          `json:"name"`
	Feeds      string          `json:"feeds"`
	PowerState json.RawMessage `json:"powerState"`
}

type fileSystem struct {
	ID           flexString      `json:"id"`
	Name         string          `json:"name"`
	UUID         string          `json:"uuid"`
	SerialNumber flexString      `json:"serialNumber"`
	PowerState   json.RawMessage `json:"powerState"`
	Username     string          `json:"username"`
	Password     string          `json:"password"`
	Timing       json.RawMessage `json:"timing"`
	Faults       json.RawMessage `json:"faults"`
	Profile      Profile         `json:"profile"`
	ResetTypes   []ResetType     `json:"resetTypes"`
	PowerSupply  int             `json:"powerSupplies"`
}

func parseConfig(data []byte) (Config, error) {
	// Strict: duplicate keys are errors rather than last-one-wins.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return Config{}, fmt.Errorf("not valid YAML: %w", err)
	}
	var file fileConfig
	if err := decodeStrict(js, &file); err != nil {
		return Config{}, err
	}
	cfg := Config{
		Username:       file.Username,
		Password:       file.Password,
		MaxSessions:    file.MaxSessions,
		SessionTimeout: time.Duration(file.SessionTimeout),
		Seed:           file.Seed,
		Timing:         DefaultTiming(),
		Profile:        file.Profile,
	}
	if cfg.AuthMode, err = ParseAuthMode(file.AuthMode); err != nil {
		return Config{}, err
	}
	if isPresent(file.Timing) {
		if err := cfg.Timing.UnmarshalJSON(file.Timing); err != nil {
			return Config{}, fmt.Errorf("timing: %w", err)
		}
	}
	if isPresent(file.Faults) {
		if err := cfg.Faults.UnmarshalJSON(file.Faults); err != nil {
			return Config{}, fmt.Errorf("faults: %w", err)
		}
	}
	for i, raw := range file.Systems {
		field := fmt.Sprintf("systems[%d]", i)
		var fs fileSystem
		if isPresent(raw) {
			if err := decodeStrict(raw, &fs); err != nil {
				return Config{}, fmt.Errorf("%s: %w", field, err)
			}
		}
		sc := SystemConfig{
			ID:            string(fs.ID),
			Name:          fs.Name,
			UUID:          fs.UUID,
			SerialNumber:  string(fs.SerialNumber),
			Username:      fs.Username,
			Password:      fs.Password,
			Profile:       fs.Profile,
			ResetTypes:    fs.ResetTypes,
			PowerSupplies: fs.PowerSupply,
		}
		if sc.PowerState, err = parseFilePowerState(fs.PowerState); err != nil {
			return Config{}, fmt.Errorf("%s.powerState: %w", field, err)
		}
		if isPresent(fs.Timing) {
			t := cfg.Timing
			if err := t.UnmarshalJSON(fs.Timing); err != nil {
				return Config{}, fmt.Errorf("%s.timing: %w", field, err)
			}
			sc.Timing = &t
		}
		if isPresent(fs.Faults) {
			f := cfg.Faults
			if err := f.UnmarshalJSON(fs.Faults); err != nil {
				return Config{}, fmt.Errorf("%s.faults: %w", field, err)
			}
			sc.Faults = &f
		}
		cfg.Systems = append(cfg.Systems, sc)
	}
	if e := file.Events; e != nil {
		cfg.Events = EventsConfig{
			HeartbeatMinute:       time.Duration(e.HeartbeatMinute),
			SSEIdleTimeout:        time.Duration(e.SSEIdleTimeout),
			MaxSSEStreams:         e.MaxSSEStreams,
			DeliveryRetryInterval: time.Duration(e.DeliveryRetryInterval),
			DeliveryRetryAttempts: e.DeliveryRetryAttempts,
			Buffer:                e.Buffer,
		}
	}
	for i, fp := range file.PDUs {
		pc := PDUConfig{ID: string(fp.ID), Name: fp.Name, SerialNumber: string(fp.SerialNumber)}
		for j, fo := range fp.Outlets {
			state, err := parseFilePowerState(fo.PowerState)
			if err != nil {
				return Config{}, fmt.Errorf("pdus[%d].outlets[%d].powerState: %w", i, j, err)
			}
			pc.Outlets = append(pc.Outlets, OutletConfig{ID: string(fo.ID), Name: fo.Name, Feeds: fo.Feeds, PowerState: state})
		}
		cfg.PDUs = append(cfg.PDUs, pc)
	}
	return cfg, nil
}

func isPresent(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// parseFilePowerState accepts On/Off, and also YAML 1.1 booleans: an unquoted
// On or Off in YAML arrives here as true or false.
func parseFilePowerState(raw json.RawMessage) (PowerState, error) {
	if !isPresent(raw) {
		return "", nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err == nil {
		if b {
			return PowerOn, nil
		}
		return PowerOff, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("want On or Off, got %s", truncate(string(raw), 40))
	}
	return PowerState(s), nil // checked by Config.resolve
}

// flexString accepts a string or a number, so `id: 1` in YAML means "1".
type flexString string

func (s *flexString) UnmarshalJSON(data []byte) error {
	var str string
	if err := json.Unmarshal(data, &str); err == nil {
		*s = flexString(str)
		return nil
	}
	var num json.Number
	if err := json.Unmarshal(data, &num); err != nil {
		return fmt.Errorf("want a string, got %s", truncate(string(data), 40))
	}
	*s = flexString(num.String())
	return nil
}
