// Package bmc is the port between bmcfence and baseboard management controllers.
//
// It holds what every consumer needs to talk about a BMC without knowing how
// it is reached: the Controller interface, the PowerState enum and its strict
// parsers, the Target a controller is built for, and the typed errors callers
// check with errors.Is. It deliberately imports no BMC library: adapters
// (bmc/redfish and bmc/ipmi, opened by bmc/dial) and fakes (bmc/bmctest) implement Controller.
//
// The one rule the types here encode: only an exact "Off" proves a machine is
// off. Every other answer, including ones we have never seen, is PowerUnknown
// or a transitional state, and none of those may ever lead to a taint.
package bmc
