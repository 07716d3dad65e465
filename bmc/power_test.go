package bmc

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseRedfishPowerState(t *testing.T) {
	tests := []struct {
		raw  string
		want PowerState
	}{
		{"On", PowerOn},
		{"Off", PowerOff},
		{"PoweringOn", PoweringOn},
		{"PoweringOff", PoweringOff},
		{"Paused", PowerUnknown}, // valid Redfish, but a paused host still holds state
		{"off", PowerUnknown},
		{"OFF", PowerUnknown},
		{" Off", PowerUnknown},
		{"Off ", PowerUnknown},
		{"Off\n", PowerUnknown},
		{"", PowerUnknown},
		{"null", PowerUnknown},
		{"Chassis Power is off", PowerUnknown}, // the IPMI sentence is not a Redfish value
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			if got := ParseRedfishPowerState(tt.raw); got != tt.want {
				t.Errorf("ParseRedfishPowerState(%q) = %v, want %v", tt.raw, got, tt.want)
			}
		})
	}
}

func TestParseIPMIPowerState(t *testing.T) {
	tests := []struct {
		raw  string
		want PowerState
	}{
		{"Chassis Power is on\n", PowerOn},
		{"Chassis Power is off\n", PowerOff},
		{"Chassis Power is off", PowerOff},
		{"Chassis Power is off\r\n", PowerOff},
		{"Chassis Power is off\n\n", PowerUnknown},
		{"chassis power is off\n", PowerUnknown},
		{"Chassis Power is Off\n", PowerUnknown},
		{" Chassis Power is off\n", PowerUnknown},
		{"Warning: session\nChassis Power is off\n", PowerUnknown},
		{"Chassis Power Control: Down/Off\n", PowerUnknown}, // a command ack, not a reading
		{"Off", PowerUnknown},
		{"", PowerUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			if got := ParseIPMIPowerState(tt.raw); got != tt.want {
				t.Errorf("ParseIPMIPowerState(%q) = %v, want %v", tt.raw, got, tt.want)
			}
		})
	}
}

func TestPowerStateTextRoundTrip(t *testing.T) {
	for s := PowerUnknown; s <= PoweringOff; s++ {
		b, err := json.Marshal(struct {
			S PowerState `json:"powerState"`
		}{s})
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"powerState":"` + s.String() + `"}`; string(b) != want {
			t.Errorf("marshal %v = %s, want %s", s, b, want)
		}
		var back PowerState
		if err := back.UnmarshalText([]byte(s.String())); err != nil || back != s {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", s, back, err, s)
		}
	}
	var s PowerState
	if err := s.UnmarshalText([]byte("off")); err == nil {
		t.Error(`UnmarshalText("off") succeeded; want an error`)
	}
}

func TestZeroPowerStateIsNotOff(t *testing.T) {
	var s PowerState
	if s.IsOff() {
		t.Fatal("the zero PowerState reads as Off")
	}
}

// FuzzParsePowerState checks the one property that matters: nothing but the
// exact allow-listed strings ever parses as Off.
func FuzzParsePowerState(f *testing.F) {
	for _, s := range []string{"Off", "On", "off", "Chassis Power is off\n", "Chassis Power is off", "PoweringOff", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if ParseRedfishPowerState(raw).IsOff() != (raw == "Off") {
			t.Errorf("ParseRedfishPowerState(%q) = %v", raw, ParseRedfishPowerState(raw))
		}
		exactIPMI := raw == "Chassis Power is off" || raw == "Chassis Power is off\n" ||
			raw == "Chassis Power is off\r\n" || raw == "Chassis Power is off\r"
		if ParseIPMIPowerState(raw).IsOff() != exactIPMI {
			t.Errorf("ParseIPMIPowerState(%q) = %v", raw, ParseIPMIPowerState(raw))
		}
		if got := ParseRedfishPowerState(raw).String(); strings.HasPrefix(got, "PowerState(") {
			t.Errorf("parser produced an out-of-range state %s", got)
		}
	})
}
