package redfishmock

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Profile names a vendor behaviour a system's BMC shows. Each is modelled
// from the vendor's public Redfish documentation and from what fencing
// projects found in the field; the source of each is in profileSpecs. A
// profile changes what the mock advertises and how it answers, never the
// machine behind it: power still moves as Timing says.
type Profile string

// The profiles.
const (
	ProfileGeneric    Profile = "generic"
	ProfileIDRAC9     Profile = "idrac9"
	ProfileIDRAC10    Profile = "idrac10"
	ProfileILO5       Profile = "ilo5"
	ProfileILO6       Profile = "ilo6"
	ProfileXCC        Profile = "xcc"
	ProfileOpenBMC    Profile = "openbmc"
	ProfileSupermicro Profile = "supermicro"
	ProfileAMIMulti   Profile = "ami-multi"
	ProfileSushy      Profile = "sushy"
)

// Profiles lists every profile, generic first.
func Profiles() []Profile {
	return []Profile{ProfileGeneric, ProfileIDRAC9, ProfileIDRAC10, ProfileILO5, ProfileILO6,
		ProfileXCC, ProfileOpenBMC, ProfileSupermicro, ProfileAMIMulti, ProfileSushy}
}

// Valid reports whether p is a known profile ("" means generic).
func (p Profile) Valid() bool { return p == "" || slices.Contains(Profiles(), p) }

// Source is the public documentation a profile is modelled from.
func (p Profile) Source() string { return p.spec().source }

// refusal is an error answer a profile gives.
type refusal struct {
	status    int
	code      string // error.code
	messageID string // @Message.ExtendedInfo[0].MessageId
	message   string // its Message; "" to give MessageArgs instead (iLO)
	args      []string
}

// resetAnswer is how a profile answers an accepted Reset.
type resetAnswer int

const (
	answerNoContent resetAnswer = iota // 204, no body
	answerILOOK                        // 200, iLO's Base.Success inside an "error" envelope
	answerSuccess                      // 200, a Base.Success message
	answerTask                         // 202, Location: a task monitor
)

type profileSpec struct {
	source string
	// allowed is ResetType@Redfish.AllowableValues; a Reset of any other
	// type is refused with 400 ActionParameterValueNotInList.
	allowed []ResetType
	// actionInfo advertises allowed through @Redfish.ActionInfo (a
	// ResetActionInfo resource) instead of inline.
	actionInfo bool
	// alreadyOff and alreadyOn, when set, refuse ForceOff/GracefulShutdown
	// of a system that reads Off (a restart's off-dwell included: the BMC
	// does nothing, and the restart goes on) and On/ForceOn of one that
	// reads On or PoweringOn.
	alreadyOff, alreadyOn *refusal
	// rejectIfMatch answers an action POST carrying If-Match with 412.
	rejectIfMatch bool
	// busyAfterReset: after each accepted Reset, the next this-many Resets
	// are refused with busy.
	busyAfterReset int
	busy           *refusal
	answer         resetAnswer
	// systemFromHost: the system's PowerState follows the host firmware
	// state (Off until the host runs), the chassis's the real power.
	systemFromHost bool
	// unavailableWhenOff: GET of the system answers 503 while it reads Off.
	unavailableWhenOff bool
	// bootProgress: BootProgress is reported.
	bootProgress bool
	// staticChassis: the chassis's PowerState is a constant On, whatever
	// the machine does (sushy-tools' chassis is a static template).
	staticChassis bool
	// nameRedirect: a system addressed by its Name instead of its Id is
	// answered 307 to the same URI with the Id (sushy-tools).
	nameRedirect bool
	manufacturer string
	model        string
}

func (p Profile) spec() *profileSpec {
	if s, ok := profileSpecs[p]; ok {
		return s
	}
	return profileSpecs[ProfileGeneric]
}

var (
	idracAllowed = []ResetType{ResetOn, ResetForceOff, ResetForceRestart, ResetGracefulShutdown, ResetPushPowerButton, ResetNmi}
	iloAllowed   = []ResetType{ResetOn, ResetForceOff, ResetGracefulShutdown, ResetForceRestart, ResetNmi, ResetPushPowerButton, ResetGracefulRestart}
)

// iDRAC's "already in that state": 409 with a PSU MessageId in a
// GeneralError envelope, as CloudStack and OpenStack instance-HA met it.
func idracAlready(state string) *refusal {
	id := "IDRAC.2.9.PSU501"
	if state == "ON" {
		id = "IDRAC.2.9.PSU502" // assumed: Dell documents PSU501 for "already OFF"
	}
	return &refusal{status: http.StatusConflict, code: "Base.1.12.GeneralError", messageID: id,
		message: "Server is already powered " + state + "."}
}

// iLO's: 400 InvalidOperationForSystemState with MessageArgs, no Message.
func iloAlready(version, state string) *refusal {
	return &refusal{status: http.StatusBadRequest, code: "iLO.0.10.ExtendedInfo",
		messageID: "iLO." + version + ".InvalidOperationForSystemState", args: []string{"Power is " + state}}
}

var profileSpecs = map[Profile]*profileSpec{
	ProfileGeneric: {
		source:       "DSP0266 (Redfish Specification) and DSP0268 ComputerSystem; the mock's historical behaviour",
		allowed:      AllowedResetTypes(),
		bootProgress: true,
		manufacturer: manufacturer, model: model,
	},
	ProfileIDRAC9: {
		source: "Dell iDRAC9 Redfish API Guide (ComputerSystem.Reset AllowableValues: no GracefulRestart, no PowerCycle); " +
			"409 IDRAC.*.PSU501 to ForceOff when off: openstack-k8s-operators/infra-operator#434; " +
			"SYS518 \"iDRAC not ready\" after an operation: sushy's connector retries it (test_op_retry_on_server_500_sys518)",
		allowed:    idracAllowed,
		alreadyOff: idracAlready("OFF"), alreadyOn: idracAlready("ON"),
		busyAfterReset: 1,
		busy: &refusal{status: http.StatusInternalServerError, code: "Base.1.12.GeneralError", messageID: "IDRAC.2.9.SYS518",
			message: "iDRAC is not ready. The configuration values cannot be accessed. Please retry after a few minutes."},
		bootProgress: true,
		manufacturer: "Dell Inc.", model: "PowerEdge R650",
	},
	ProfileIDRAC10: {
		source: "iDRAC9's behaviour plus: iDRAC10 rejects If-Match on action POSTs with 412 PreconditionFailed " +
			"(stmcginnis/gofish#510 and #512, tested on a PowerEdge R470; ironcore-dev/metal-operator#1015)",
		allowed:    idracAllowed,
		alreadyOff: idracAlready("OFF"), alreadyOn: idracAlready("ON"),
		rejectIfMatch:  true,
		busyAfterReset: 1,
		busy: &refusal{status: http.StatusInternalServerError, code: "Base.1.18.GeneralError", messageID: "IDRAC.2.9.SYS518",
			message: "iDRAC is not ready. The configuration values cannot be accessed. Please retry after a few minutes."},
		bootProgress: true,
		manufacturer: "Dell Inc.", model: "PowerEdge R470",
	},
	ProfileILO5: {
		source: "HPE iLO 5 Redfish resource definitions (servermanagementportal.ext.hpe.com, ComputerSystem; " +
			"iLO.2.x.InvalidOperationForSystemState \"attempting to turn the power off when it is already off\", 400); " +
			"iLO answers an accepted Reset 200 with Base.Success inside an error envelope; no BootProgress (Oem.Hpe.PostState instead)",
		allowed:    iloAllowed,
		alreadyOff: iloAlready("2.16", "off"), alreadyOn: iloAlready("2.16", "on"),
		answer:       answerILOOK,
		manufacturer: "HPE", model: "ProLiant DL360 Gen10",
	},
	ProfileILO6: {
		source:     "HPE iLO 6 Redfish resource definitions (as iLO 5, message registry iLO.2.18; BootProgress reported)",
		allowed:    iloAllowed,
		alreadyOff: iloAlready("2.18", "off"), alreadyOn: iloAlready("2.18", "on"),
		answer:       answerILOOK,
		bootProgress: true,
		manufacturer: "HPE", model: "ProLiant DL360 Gen11",
	},
	ProfileXCC: {
		source: "Lenovo XClarity Controller Redfish REST API guide: ResetType through ResetActionInfo " +
			"(@Redfish.ActionInfo), ForceOn offered, no PushPowerButton or PowerCycle",
		allowed:      []ResetType{ResetOn, ResetNmi, ResetGracefulShutdown, ResetGracefulRestart, ResetForceOn, ResetForceOff, ResetForceRestart},
		actionInfo:   true,
		answer:       answerNoContent,
		bootProgress: true,
		manufacturer: "Lenovo", model: "ThinkSystem SR650 V2",
	},
	ProfileOpenBMC: {
		source: "OpenBMC bmcweb redfish-core/lib/systems.hpp: Systems/*/PowerState from the host state (Running or Quiesced " +
			"On, TransitioningToRunning PoweringOn, TransitioningToOff PoweringOff, anything else Off), Chassis/*/PowerState " +
			"the chassis power; ResetActionInfo; openbmc/openbmc-test-automation#1530",
		allowed:        []ResetType{ResetOn, ResetForceOff, ResetForceOn, ResetForceRestart, ResetGracefulRestart, ResetGracefulShutdown, ResetPowerCycle, ResetNmi},
		actionInfo:     true,
		systemFromHost: true,
		bootProgress:   true,
		manufacturer:   "OpenBMC", model: "romulus",
	},
	ProfileSupermicro: {
		source: "Supermicro Redfish Reference Guide (X11/X12): AllowableValues On, ForceOff, GracefulShutdown, " +
			"GracefulRestart, ForceRestart, Nmi, ForceOn (also gist flaviotorres/6e09c16d); Reset answered 200 with a " +
			"Base.Success message; no BootProgress",
		allowed:      []ResetType{ResetOn, ResetForceOff, ResetGracefulShutdown, ResetGracefulRestart, ResetForceRestart, ResetNmi, ResetForceOn},
		answer:       answerSuccess,
		manufacturer: "Supermicro", model: "SYS-1029U-TRT",
	},
	ProfileAMIMulti: {
		source: "AMI MegaRAC multi-system BMCs (e.g. NVIDIA DGX H100): the System answers 503 while its host is off; " +
			"Reset answered 202 with a task monitor (DSP0266 \"Asynchronous operations\"; redfishtool#55 met it on HPE " +
			"multi-partition systems); no BootProgress",
		allowed:            []ResetType{ResetOn, ResetForceOff, ResetForceRestart, ResetGracefulShutdown, ResetPowerCycle},
		answer:             answerTask,
		unavailableWhenOff: true,
		manufacturer:       "NVIDIA", model: "DGXH100",
	},
	ProfileSushy: {
		source: "OpenStack sushy-tools, the virtual BMC of Metal3's dev environment and of libvirt and KubeVirt labs " +
			"(opendev.org/openstack/sushy-tools, sushy_tools/emulator): service root template root.json (Id RedvirtService, " +
			"Name \"Redvirt Service\", RedfishVersion 1.5.0, no SessionService); chassis.json hard-codes PowerState On; " +
			"system.json's ResetType@Redfish.AllowableValues On, ForceOff, GracefulShutdown, GracefulRestart, ForceRestart, " +
			"Nmi, ForceOn; main.py answers a system addressed by Name with 307 to its Id (AliasAccessError) and a Reset with " +
			"204; the libvirt driver powers a domain off at once (virsh destroy), a ForceOff of an Off domain does nothing",
		allowed:       []ResetType{ResetOn, ResetForceOff, ResetGracefulShutdown, ResetGracefulRestart, ResetForceRestart, ResetNmi, ResetForceOn},
		answer:        answerNoContent,
		staticChassis: true,
		nameRedirect:  true,
		manufacturer:  "Sushy Emulator", model: "",
	},
}

// sushyRoot is sushy-tools' service root template (root.json): what a
// client identifies the emulator by.
var sushyRoot = struct{ id, name, uuid, version string }{
	id: "RedvirtService", name: "Redvirt Service", uuid: "85775665-c110-4b85-8989-e6162170b3ec", version: "1.5.0",
}

// write answers with the refusal.
func (r *refusal) write(w http.ResponseWriter) {
	info := map[string]any{"@odata.type": "#Message.v1_1_1.Message", "MessageId": r.messageID, "Severity": "Warning"}
	if r.message != "" {
		info["Message"] = r.message
		info["Resolution"] = "None."
	}
	if len(r.args) > 0 {
		info["MessageArgs"] = r.args
	}
	msg := r.message
	if msg == "" {
		msg = "See @Message.ExtendedInfo for more information."
	}
	writeJSON(w, r.status, map[string]any{"error": map[string]any{
		"code": r.code, "message": msg, "@Message.ExtendedInfo": []any{info},
	}})
}

// parseProfile accepts a profile name as written in a flag or a file.
func parseProfile(s string) (Profile, error) {
	p := Profile(strings.TrimSpace(s))
	if !p.Valid() {
		names := make([]string, 0, len(Profiles()))
		for _, q := range Profiles() {
			names = append(names, string(q))
		}
		return "", fmt.Errorf("profile %q: want one of %s", s, strings.Join(names, ", "))
	}
	if p == "" {
		p = ProfileGeneric
	}
	return p, nil
}

// ParseProfile is parseProfile for callers outside the package (flags).
func ParseProfile(s string) (Profile, error) { return parseProfile(s) }

// AuthMode is what authentication the service takes.
type AuthMode string

const (
	// AuthBoth takes HTTP Basic and sessions (the default).
	AuthBoth AuthMode = ""
	// AuthBasicOnly has no SessionService: a simple BMC or emulator.
	AuthBasicOnly AuthMode = "basic-only"
	// AuthSessionOnly refuses HTTP Basic (401 without offering it), as BMCs
	// with Basic authentication disabled do (Redfish AccountService
	// HTTPBasicAuth Disabled).
	AuthSessionOnly AuthMode = "session-only"
)

// ParseAuthMode accepts "", "both", "basic-only" or "session-only".
func ParseAuthMode(s string) (AuthMode, error) {
	switch AuthMode(s) {
	case AuthBoth, "both":
		return AuthBoth, nil
	case AuthBasicOnly, AuthSessionOnly:
		return AuthMode(s), nil
	}
	return "", fmt.Errorf("auth mode %q: want both, basic-only or session-only", s)
}
