package redfish

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/bmcfence/bmcfence/bmc"
)

// OpPowerSupplies names the power supply read in errors.
const OpPowerSupplies bmc.Op = "power-supplies"

// PowerSupplies reads the power supplies of the system's chassis and
// whether each has input: from PowerSubsystem/PowerSupplies
// (LineInputStatus) where the chassis links it, else from the legacy
// Power resource (Status.State and LineInputVoltage), which iDRAC and
// older BMCs serve. The outlet identity test reads this before and after
// it switches an outlet.
func (c *Client) PowerSupplies(ctx context.Context) ([]bmc.PowerSupply, error) {
	var out []bmc.PowerSupply
	var res bmc.Result
	err := c.run(ctx, OpPowerSupplies, &res, func(cn *conn) error {
		return retryRead(cn, &res, func() error {
			var err error
			out, err = cn.powerSupplies()
			return err
		})
	})
	return out, err
}

type powerLinksDoc struct {
	Power          *link `json:"Power"`
	PowerSubsystem *link `json:"PowerSubsystem"`
}

func (cn *conn) powerSupplies() ([]bmc.PowerSupply, error) {
	if _, _, err := cn.system(); err != nil {
		return nil, err
	}
	chassis := cn.c.cached().chassisURI
	if chassis == "" {
		return nil, fmt.Errorf("%w: the system links no chassis, so no power supplies can be read", bmc.ErrUnsupported)
	}
	var ch powerLinksDoc
	if err := cn.get(chassis, &ch); err != nil {
		return nil, err
	}
	switch {
	case ch.PowerSubsystem != nil && ch.PowerSubsystem.ODataID != "":
		return cn.subsystemSupplies(ch.PowerSubsystem.ODataID)
	case ch.Power != nil && ch.Power.ODataID != "":
		return cn.legacySupplies(ch.Power.ODataID)
	}
	return nil, fmt.Errorf("%w: chassis %s links neither PowerSubsystem nor Power", bmc.ErrUnsupported, chassis)
}

func (cn *conn) subsystemSupplies(uri string) ([]bmc.PowerSupply, error) {
	var sub struct {
		PowerSupplies *link `json:"PowerSupplies"`
	}
	if err := cn.get(uri, &sub); err != nil {
		return nil, err
	}
	if sub.PowerSupplies == nil {
		return nil, fmt.Errorf("%w: %s links no PowerSupplies", bmc.ErrUnsupported, uri)
	}
	var coll collectionDoc
	if err := cn.get(sub.PowerSupplies.ODataID, &coll); err != nil {
		return nil, err
	}
	var out []bmc.PowerSupply
	for _, m := range coll.Members {
		var ps struct {
			ID              string `json:"Id"`
			Name            string `json:"Name"`
			LineInputStatus string `json:"LineInputStatus"`
			Status          struct {
				State string `json:"State"`
			} `json:"Status"`
		}
		if err := cn.get(m.ODataID, &ps); err != nil {
			var herr *httpError
			if errors.As(err, &herr) && herr.status == http.StatusNotFound {
				continue // a member gone between the two reads
			}
			return nil, err
		}
		if ps.Status.State == "Absent" {
			continue
		}
		in := bmc.InputUnknown
		switch ps.LineInputStatus {
		case "Normal":
			in = bmc.InputNormal
		case "NoInput", "LossOfInput":
			in = bmc.InputLost
		}
		out = append(out, bmc.PowerSupply{ID: ps.ID, Name: ps.Name, Input: in, Raw: "LineInputStatus=" + ps.LineInputStatus})
	}
	return out, nil
}

func (cn *conn) legacySupplies(uri string) ([]bmc.PowerSupply, error) {
	var doc struct {
		PowerSupplies []struct {
			MemberID         string   `json:"MemberId"`
			Name             string   `json:"Name"`
			LineInputVoltage *float64 `json:"LineInputVoltage"`
			Status           struct {
				State  string `json:"State"`
				Health string `json:"Health"`
			} `json:"Status"`
		} `json:"PowerSupplies"`
	}
	if err := cn.get(uri, &doc); err != nil {
		return nil, err
	}
	var out []bmc.PowerSupply
	for i, ps := range doc.PowerSupplies {
		if ps.Status.State == "Absent" {
			continue
		}
		id := ps.MemberID
		if id == "" {
			id = strconv.Itoa(i)
		}
		raw := []string{"State=" + ps.Status.State}
		if ps.LineInputVoltage != nil {
			raw = append(raw, "LineInputVoltage="+strconv.FormatFloat(*ps.LineInputVoltage, 'f', -1, 64))
		}
		// Strict: Normal needs an enabled supply with line voltage where
		// the BMC reports it; Lost needs offline with none. Anything else
		// proves nothing either way.
		in := bmc.InputUnknown
		volts := ps.LineInputVoltage
		switch {
		case ps.Status.State == "Enabled" && (volts == nil || *volts > 0):
			in = bmc.InputNormal
		case ps.Status.State == "UnavailableOffline" && (volts == nil || *volts == 0):
			in = bmc.InputLost
		}
		out = append(out, bmc.PowerSupply{ID: id, Name: ps.Name, Input: in, Raw: strings.Join(raw, " ")})
	}
	return out, nil
}
