// Package dial opens a BMC: New builds the bmc.Controller for a target by
// its address's scheme, Redfish (package bmc/redfish) or IPMI (package
// bmc/ipmi). Both protocols are spoken natively; nothing here needs
// ipmitool or a third-party BMC library.
package dial

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
