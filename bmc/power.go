package bmc

import (
	"fmt"
	"strings"
)

// PowerState is what a BMC reported about its host's power.
//
// The zero value is PowerUnknown, so a reading that was never filled in can
// never be mistaken for Off.
type PowerState uint8

const (
	// PowerUnknown is any answer outside the protocol's allow-list (Paused,
	// empty, mis-cased, garbled), and the state of a reading that failed.
	PowerUnknown PowerState = iota
	PowerOn
	PowerOff
	PoweringOn
	PoweringOff
)

var powerStateNames = [...]string{
	PowerUnknown: "Unknown",
	PowerOn:      "On",
	PowerOff:     "Off",
	PoweringOn:   "PoweringOn",
	PoweringOff:  "PoweringOff",
}

// String returns the Redfish spelling of the state ("On", "Off", ...).
func (s PowerState) String() string {
	if int(s) < len(powerStateNames) {
		return powerStateNames[s]
	}
	return fmt.Sprintf("PowerState(%d)", uint8(s))
}

// IsOff reports whether the state proves the host is off. It is the only
// predicate the fence path may use.
func (s PowerState) IsOff() bool { return s == PowerOff }

// MarshalText encodes the state with its Redfish spelling, so JSON and YAML
// output reads "powerState": "Off".
func (s PowerState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText accepts exactly the names String produces.
func (s *PowerState) UnmarshalText(b []byte) error {
	for i, name := range powerStateNames {
		if string(b) == name {
			*s = PowerState(i)
			return nil
		}
	}
	return fmt.Errorf("unknown power state %q: want one of %s", b, strings.Join(powerStateNames[:], ", "))
}

// ParseRedfishPowerState maps a ComputerSystem.PowerState value. The match is
// exact and case-sensitive: the Redfish schema spells the enum this way, and a
// BMC that says "off" or " Off" is not one we can trust to mean Off. "Paused"
// (a valid Redfish value) is Unknown on purpose: a paused host still holds its
// memory and may resume writing.
func ParseRedfishPowerState(raw string) PowerState {
	switch raw {
	case "On":
		return PowerOn
	case "Off":
		return PowerOff
	case "PoweringOn":
		return PoweringOn
	case "PoweringOff":
		return PoweringOff
	default:
		return PowerUnknown
	}
}

// ParseIPMIPowerState maps the output of `ipmitool chassis power status`,
// which is also how the IPMI adapter words Get Chassis Status's power bit.
// ipmitool ends its line with a newline, which is the only thing trimmed;
// anything else around the sentence (warnings, a second line) makes the
// answer Unknown rather than guessed at.
func ParseIPMIPowerState(raw string) PowerState {
	raw = strings.TrimSuffix(raw, "\n")
	raw = strings.TrimSuffix(raw, "\r")
	switch raw {
	case "Chassis Power is on":
		return PowerOn
	case "Chassis Power is off":
		return PowerOff
	default:
		return PowerUnknown
	}
}
