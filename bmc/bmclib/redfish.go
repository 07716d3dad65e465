package bmclib

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/common"
	"github.com/stmcginnis/gofish/redfish"

	"github.com/bmcfence/bmcfence/bmc"
)

// systemsURI is fixed by the Redfish specification (DSP0266: "/redfish/v1/Systems"),
// so we can list members without fetching every one of them.
const systemsURI = "/redfish/v1/Systems"

// redfishSession caches what one operation learns about the systems collection.
type redfishSession struct {
	client  *gofish.APIClient
	members []string                  // member @odata.id links, fetched once
	all     []*redfish.ComputerSystem // every member, fetched only when a Name must be matched
}

func (s *redfishSession) memberLinks() ([]string, error) {
	if s.members == nil {
		coll, err := common.GetCollection(s.client, systemsURI)
		if err != nil {
			return nil, err
		}
		s.members = coll.ItemLinks
		if s.members == nil {
			s.members = []string{}
		}
	}
	return s.members, nil
}

func (s *redfishSession) allSystems() ([]*redfish.ComputerSystem, error) {
	if s.all != nil {
		return s.all, nil
	}
	links, err := s.memberLinks()
	if err != nil {
		return nil, err
	}
	all := make([]*redfish.ComputerSystem, 0, len(links))
	for _, l := range links {
		sys, err := redfish.GetComputerSystem(s.client, l)
		if err != nil {
			return nil, err
		}
		all = append(all, sys)
	}
	s.all = all
	return all, nil
}

// system selects the ComputerSystem an operation acts on: by Id (one GET),
// else by Name (all members), else the only one. It refuses rather than
// guesses: several systems and no selector, an unknown selector, or a Name
// shared by several systems are errors that list what the BMC has.
func (s *redfishSession) system(selector string) (*redfish.ComputerSystem, error) {
	links, err := s.memberLinks()
	if err != nil {
		return nil, err
	}
	if selector == "" {
		switch len(links) {
		case 0:
			return nil, fmt.Errorf("%w: the BMC lists no systems", bmc.ErrSystem)
		case 1:
			return redfish.GetComputerSystem(s.client, links[0])
		default:
			return nil, fmt.Errorf("%w: the BMC has %d systems (Ids %s); choose one by Id or Name", bmc.ErrSystem, len(links), strings.Join(linkIDs(links), ", "))
		}
	}
	for _, l := range links {
		if path.Base(l) != selector {
			continue
		}
		sys, err := redfish.GetComputerSystem(s.client, l)
		if err != nil {
			return nil, err
		}
		// A BMC whose member link and Id disagree is not one whose
		// selection we trust.
		if sys.ID != selector {
			return nil, fmt.Errorf("%w: member %s reports Id %q, not %q", bmc.ErrSystem, l, sys.ID, selector)
		}
		return sys, nil
	}
	all, err := s.allSystems()
	if err != nil {
		return nil, err
	}
	var named []*redfish.ComputerSystem
	for _, sys := range all {
		if sys.Name == selector {
			named = append(named, sys)
		}
	}
	switch len(named) {
	case 1:
		return named[0], nil
	case 0:
		return nil, fmt.Errorf("%w: no system with Id or Name %q (Ids %s)", bmc.ErrSystem, selector, strings.Join(linkIDs(links), ", "))
	default:
		return nil, fmt.Errorf("%w: %d systems are named %q; choose one by Id", bmc.ErrSystem, len(named), selector)
	}
}

// requireUniqueName checks that bmclib, which selects by Name and takes the
// first match, would act on exactly sys.
func (s *redfishSession) requireUniqueName(sys *redfish.ComputerSystem) error {
	links, err := s.memberLinks()
	if err != nil {
		return err
	}
	if len(links) == 1 {
		return nil
	}
	all, err := s.allSystems()
	if err != nil {
		return err
	}
	n := 0
	for _, other := range all {
		if other.Name == sys.Name {
			n++
		}
	}
	if sys.Name == "" {
		return fmt.Errorf("%w: system %q has no Name; bmclib selects by Name, so no command is sent rather than risk the wrong machine", bmc.ErrSystem, sys.ID)
	}
	if n != 1 {
		return fmt.Errorf("%w: system %q has a Name (%q) shared by %d systems; bmclib selects by Name, so no command is sent rather than risk the wrong machine", bmc.ErrSystem, sys.ID, sys.Name, n)
	}
	return nil
}

// resetAllowed follows gofish: a system that lists no allowable values is
// assumed to accept any ResetType.
func resetAllowed(allowed []redfish.ResetType, want string) bool {
	return len(allowed) == 0 || slices.Contains(allowed, redfish.ResetType(want))
}

func linkIDs(links []string) []string {
	ids := make([]string, len(links))
	for i, l := range links {
		ids[i] = path.Base(l)
	}
	return ids
}
