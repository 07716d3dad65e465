package bmc

import (
	"context"
	"time"
)

// Controller is the port every BMC implementation provides. One Controller
// serves one machine. Implementations must be safe for concurrent use and
// must bound every call by the context and their target's timeout.
//
// PowerOff means a hard off (Redfish ForceOff, IPMI `chassis power off`),
// never a cycle or reset, which can leave the machine on. PowerOff always
// sends the command, whatever the BMC last read: no "already off" short cut
// (bmclib's SetPowerState has one), because a restart's off-dwell reads Off
// too and only an Off we caused proves anything. A nil error means the BMC
// accepted the command; an error wrapping ErrAlreadyInState means it
// answered "already in that state" and did nothing. Neither proves the
// machine is off: BMCs lie, and only later PowerStatus readings do.
type Controller interface {
	PowerStatus(ctx context.Context) (PowerStatus, error)
	PowerOff(ctx context.Context) (Result, error)
	PowerOn(ctx context.Context) (Result, error)
	Identity(ctx context.Context) (Identity, error)
}

// Result records how an operation was carried out.
type Result struct {
	// Provider is the client that answered ("redfish", "ipmi").
	Provider string `json:"provider"`
	// Sent names the command a power operation put on the wire, in the
	// protocol's own words ("ComputerSystem.Reset ForceOff", "chassis power
	// off"); empty for reads and when nothing was sent.
	Sent string `json:"sent,omitempty"`
	// Attempts counts requests to the BMC for this operation, retries included.
	Attempts int `json:"attempts"`
	// Latency is the wall time of the whole operation.
	Latency time.Duration `json:"latency"`
	// Reply is the BMC's own answer to a command it did not simply
	// accept, in its own words: an IPMI completion code ("completion code
	// 0xd5 (...)"), a Redfish status and MessageId ("HTTP 409
	// IDRAC.2.9.PSU501: Server is already powered OFF."). Empty when the
	// command was accepted or never answered.
	Reply string `json:"reply,omitempty"`
	// CipherSuite is the IPMI cipher suite the session used (0 for
	// Redfish).
	CipherSuite int `json:"cipherSuite,omitempty"`
}

// PowerStatus is one power reading.
type PowerStatus struct {
	State PowerState `json:"powerState"`
	// Raw is exactly what the BMC said, for evidence and debugging: the
	// Redfish ComputerSystem.PowerState string; for IPMI, whose Get Chassis
	// Status answers with a bit, ipmitool's sentence for it ("Chassis Power
	// is on"), so evidence reads the same as it always has. Empty
	// when the system itself could not be read and the state comes from
	// its chassis (see ChassisRaw).
	Raw string `json:"raw"`
	// ChassisRaw is the Redfish Chassis.PowerState read beside the system,
	// when the adapter needed it: a system that reads Off counts as Off
	// only if its chassis, which reports the real power (OpenBMC derives
	// the system's PowerState from the host firmware state), agrees.
	ChassisRaw string `json:"chassisRaw,omitempty"`
	// Trusted names the resource whose power the State is, and Why says
	// why that one: the system's PowerState, its chassis's, both, or the
	// IPMI chassis power bit.
	Trusted PowerSource `json:"trusted"`
	// BootProgress is Redfish BootProgress.LastState ("OSRunning", ...), empty
	// when the BMC does not report it (IPMI, older Redfish).
	BootProgress string `json:"bootProgress,omitempty"`
	Result
}

// PowerSource is which resource's power a reading trusted, and why.
type PowerSource struct {
	// Resource: "system", "chassis", "system and chassis", "ipmi chassis".
	Resource string `json:"resource,omitempty"`
	// Why is one sentence an operator can check.
	Why string `json:"why,omitempty"`
	// ChassisSetAside is true when the system's Off was counted although
	// its chassis reads power (an identified emulator, or configuration).
	ChassisSetAside bool `json:"chassisSetAside,omitempty"`
}

// String is "resource: why".
func (p PowerSource) String() string {
	if p.Why == "" {
		return p.Resource
	}
	return p.Resource + ": " + p.Why
}

// OSRunning reports whether BootProgress says an operating system is up or
// starting. A BMC that reads Off while claiming the OS runs contradicts
// itself, and a contradiction is never proof of Off.
func (s PowerStatus) OSRunning() bool {
	switch s.BootProgress {
	case "OSRunning", "OSBootStarted":
		return true
	default:
		return false
	}
}

// Identity describes the machine behind a BMC, to check that inventory points
// at the node it claims to (Node systemUUID vs Redfish UUID).
type Identity struct {
	SystemID     string `json:"systemId,omitempty"`
	SystemName   string `json:"systemName,omitempty"`
	UUID         string `json:"uuid,omitempty"`
	SerialNumber string `json:"serialNumber,omitempty"`
	Manufacturer string `json:"manufacturer,omitempty"`
	Model        string `json:"model,omitempty"`
	// AllowedResets lists Redfish ResetType@Redfish.AllowableValues; empty
	// when the BMC does not advertise them.
	AllowedResets []string `json:"allowedResets,omitempty"`
	// Source says where UUID came from when it was not read from the
	// system just now (a system that answers 503 while its host is off):
	// empty when it was.
	Source string `json:"source,omitempty"`
	Result
}
