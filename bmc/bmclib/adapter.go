// Package bmclib is bmcfence's BMC adapter: New builds the bmc.Controller
// for a target, Redfish (package bmc/redfish) or IPMI (package bmc/ipmi).
//
// The name is historical: the adapter used to drive bmclib v2, whose
// SetPowerState sends nothing when the BMC already reads the wanted state
// (a restart's off-dwell reads Off, so the fence's ForceOff never went
// out), selects Redfish systems by Name, and needs ipmitool on PATH. Both
// protocols are now spoken directly; bmclib and gofish remain only as
// independent clients in the mock's conformance tests. Callers keep
// importing this package and calling New.
package bmclib

import (
	"fmt"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/ipmi"
	"github.com/bmcfence/bmcfence/bmc/redfish"
)

// Adapter is a bmc.Controller for one target. It is safe for concurrent
// use; a long-lived Adapter reuses its Redfish connection between
// operations.
type Adapter struct {
	bmc.Controller
	target bmc.Target
}

var _ bmc.Controller = (*Adapter)(nil)

// New validates the target and builds the controller its protocol needs.
func New(target bmc.Target) (*Adapter, error) {
	target = target.WithDefaults()
	if err := target.Validate(); err != nil {
		return nil, err
	}
	switch target.Address.Protocol {
	case bmc.Redfish:
		c, err := redfish.New(target)
		if err != nil {
			return nil, err
		}
		return &Adapter{Controller: c, target: c.Target()}, nil
	case bmc.IPMI:
		c, err := ipmi.New(target)
		if err != nil {
			return nil, err
		}
		return &Adapter{Controller: c, target: c.Target()}, nil
	}
	return nil, fmt.Errorf("%w: address protocol %q: want redfish or ipmi", bmc.ErrInvalidTarget, target.Address.Protocol)
}

// Target returns the target with defaults applied.
func (a *Adapter) Target() bmc.Target { return a.target }
