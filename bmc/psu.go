package bmc

import "fmt"

// PowerInput is what a BMC says about a power supply's input.
//
// The zero value is InputUnknown, so a supply never read is never taken
// for one that has (or lost) input.
type PowerInput uint8

const (
	// InputUnknown: the BMC said nothing this parser trusts.
	InputUnknown PowerInput = iota
	// InputNormal: the supply has input power.
	InputNormal
	// InputLost: the supply reports no input (Redfish LineInputStatus
	// NoInput or LossOfInput; iDRAC's legacy Power resource:
	// UnavailableOffline with no line voltage, "The power input for power
	// supply N is lost", PSU0003).
	InputLost
)

func (i PowerInput) String() string {
	switch i {
	case InputNormal:
		return "Normal"
	case InputLost:
		return "Lost"
	case InputUnknown:
	}
	return "Unknown"
}

// MarshalText writes the name, so JSON reads "input": "Lost".
func (i PowerInput) MarshalText() ([]byte, error) { return []byte(i.String()), nil }

// UnmarshalText accepts exactly the names String produces: a recorded
// outlet identity proof (its supplies) reads back.
func (i *PowerInput) UnmarshalText(b []byte) error {
	for _, v := range []PowerInput{InputUnknown, InputNormal, InputLost} {
		if string(b) == v.String() {
			*i = v
			return nil
		}
	}
	return fmt.Errorf("power input %q: want Normal, Lost or Unknown", b)
}

// PowerSupply is one power supply of a machine as its BMC reports it.
type PowerSupply struct {
	// ID is the supply's Id (PowerSubsystem) or MemberId (legacy Power).
	ID    string     `json:"id"`
	Name  string     `json:"name,omitempty"`
	Input PowerInput `json:"input"`
	// Raw is what the input was derived from, for evidence
	// ("LineInputStatus=NoInput", "State=UnavailableOffline LineInputVoltage=0").
	Raw string `json:"raw"`
}
