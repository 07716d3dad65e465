package redfishmock

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Rack PDUs (Redfish PowerDistribution, EquipmentType RackPDU) whose
// outlets feed the systems' power supplies: an outlet switched off takes
// that supply's input away, which the system's chassis reports
// (Power.PowerSupplies and PowerSubsystem/PowerSupplies); a system whose
// every supply lost input is dead, its BMC included (it lives on the same
// standby power), until one comes back.

// PDUConfig describes one rack PDU. Every field is optional.
type PDUConfig struct {
	// ID is the Redfish Id under /redfish/v1/PowerEquipment/RackPDUs.
	// Default: its 1-based position.
	ID string
	// Name defaults to "RackPDU-<ID>"; SerialNumber to "PDU-<ID>".
	Name         string
	SerialNumber string
	// Outlets are the PDU's outlets, in order (SNMP indexes them 1..n).
	Outlets []OutletConfig
}

// OutletConfig describes one outlet.
type OutletConfig struct {
	// ID defaults to its 1-based position.
	ID string
	// Name defaults to "Outlet-<ID>".
	Name string
	// Feeds is the power supply the outlet feeds, "SYSTEM/N": "2/1" is
	// system 2's first supply. Empty: nothing is plugged in.
	Feeds string
	// PowerState is the initial state, On (default) or Off.
	PowerState PowerState
}

// Power draw of a system at its outlets, split evenly between the
// supplies that have input: a running server draws a few hundred watts;
// one that is off but whose BMC is up draws a few watts of standby; a dead
// one nothing. A PDU's "about 0 W" therefore means dead (or off).
const (
	OnWatts      = 320.0
	StandbyWatts = 6.0
)

// DefaultPowerSupplies is the number of power supplies of a system that
// does not set SystemConfig.PowerSupplies: servers come with two.
const DefaultPowerSupplies = 2

// PDUFaults are the ways a PDU misbehaves.
type PDUFaults struct {
	// IgnoreCommands accepts PowerControl (204) and changes nothing: a PDU
	// that accepts and ignores.
	IgnoreCommands bool `json:"ignoreCommands,omitempty"`
	// ConflictWhenOff answers Off to an outlet that is already off with
	// 409, as BMCs answer "already in that state".
	ConflictWhenOff bool `json:"conflictWhenOff,omitempty"`
	// Hang never answers the PDU's resources.
	Hang bool `json:"hang,omitempty"`
}

type pdu struct {
	id, name, serial string
	outlets          []*outlet
	byID             map[string]*outlet
	faults           PDUFaults
	spec             PDUConfig // resolved, for Reset
}

type outlet struct {
	id, name string
	on       bool
	feeds    *system
	psu      int // 0-based supply index of feeds
	cfg      OutletConfig
}

// pduTable holds the PDUs; one mutex guards every outlet. Lock order:
// pduTable.mu, then a system's mu.
type pduTable struct {
	mu   sync.Mutex
	list []*pdu
	byID map[string]*pdu
}

// buildPDUs resolves the PDU configs against the systems, naming every
// problem.
func buildPDUs(cfgs []PDUConfig, byID map[string]*system) (*pduTable, []string) {
	t := &pduTable{byID: map[string]*pdu{}}
	var problems []string
	fed := map[string]string{}
	for i, c := range cfgs {
		field := fmt.Sprintf("pdus[%d]", i)
		p := &pdu{id: c.ID, name: c.Name, serial: c.SerialNumber, byID: map[string]*outlet{}}
		if p.id == "" {
			p.id = strconv.Itoa(i + 1)
		}
		if !validID.MatchString(p.id) {
			problems = append(problems, fmt.Sprintf("%s.id: %q is not a plain URI segment", field, p.id))
		}
		if _, dup := t.byID[p.id]; dup {
			problems = append(problems, fmt.Sprintf("%s.id: %q is already used", field, p.id))
		}
		if p.name == "" {
			p.name = "RackPDU-" + p.id
		}
		if p.serial == "" {
			p.serial = "PDU-" + p.id
		}
		for j, oc := range c.Outlets {
			of := fmt.Sprintf("%s.outlets[%d]", field, j)
			o := &outlet{id: oc.ID, name: oc.Name, on: oc.PowerState != PowerOff}
			if o.id == "" {
				o.id = strconv.Itoa(j + 1)
			}
			if !validID.MatchString(o.id) {
				problems = append(problems, fmt.Sprintf("%s.id: %q is not a plain URI segment", of, o.id))
			}
			if _, dup := p.byID[o.id]; dup {
				problems = append(problems, fmt.Sprintf("%s.id: %q is already used on this PDU", of, o.id))
			}
			if o.name == "" {
				o.name = "Outlet-" + o.id
			}
			if oc.PowerState != "" && oc.PowerState != PowerOn && oc.PowerState != PowerOff {
				problems = append(problems, fmt.Sprintf("%s.powerState: %q is not On or Off", of, oc.PowerState))
			}
			if oc.Feeds != "" {
				sysID, n, ok := strings.Cut(oc.Feeds, "/")
				psu, err := strconv.Atoi(n)
				s := byID[sysID]
				switch {
				case !ok || err != nil:
					problems = append(problems, fmt.Sprintf("%s.feeds: %q: want SYSTEM/N, e.g. \"1/2\" for system 1's second power supply", of, oc.Feeds))
				case s == nil:
					problems = append(problems, fmt.Sprintf("%s.feeds: no system %q", of, sysID))
				case psu < 1 || psu > s.spec.psus:
					problems = append(problems, fmt.Sprintf("%s.feeds: system %q has power supplies 1..%d, not %d", of, sysID, s.spec.psus, psu))
				default:
					o.feeds, o.psu = s, psu-1
					if other, dup := fed[oc.Feeds]; dup {
						// Two outlets on one supply is legal (an ATS), but
						// rare enough that it is more likely a typo.
						problems = append(problems, fmt.Sprintf("%s.feeds: %q is already fed by %s", of, oc.Feeds, other))
					}
					fed[oc.Feeds] = of
				}
			}
			o.cfg = oc
			p.outlets = append(p.outlets, o)
			p.byID[o.id] = o
		}
		p.spec = c
		t.list = append(t.list, p)
		t.byID[p.id] = p
	}
	return t, problems
}

// reset puts every outlet back in its configured state and clears the
// faults. The caller then re-derives the systems' inputs.
func (t *pduTable) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.list {
		p.faults = PDUFaults{}
		for _, o := range p.outlets {
			o.on = o.cfg.PowerState != PowerOff
		}
	}
}

// inputsLocked reports which of s's supplies have input: one no outlet
// feeds always has; one fed by outlets has while any of them is on. The
// caller holds t.mu.
func (t *pduTable) inputsLocked(s *system) []bool {
	in := make([]bool, s.spec.psus)
	wired := make([]bool, s.spec.psus)
	for _, p := range t.list {
		for _, o := range p.outlets {
			if o.feeds == s {
				wired[o.psu] = true
				if o.on {
					in[o.psu] = true
				}
			}
		}
	}
	for i := range in {
		if !wired[i] {
			in[i] = true
		}
	}
	return in
}

// feedersLocked lists the outlets that feed s, as URIs.
func (t *pduTable) feedersLocked(s *system) []link {
	var out []link
	for _, p := range t.list {
		for _, o := range p.outlets {
			if o.feeds == s {
				out = append(out, link{outletURI(p, o)})
			}
		}
	}
	return out
}

// poweredBy is ComputerSystem.Links.PoweredBy: the outlets feeding s.
func (m *Mock) poweredBy(s *system) []link {
	if m.serviceProfile(principal{}) == ProfileSushy {
		return nil // the emulator serves no PDUs
	}
	m.pdus.mu.Lock()
	defer m.pdus.mu.Unlock()
	return m.pdus.feedersLocked(s)
}

func outletURI(p *pdu, o *outlet) string {
	return "/redfish/v1/PowerEquipment/RackPDUs/" + p.id + "/Outlets/" + o.id
}

// settle re-derives whether s is alive after its supplies' inputs changed:
// every input gone is a power loss that takes the BMC with it; an input
// back brings the BMC back, with the host off. The caller holds t.mu.
func (m *Mock) settleLocked(s *system, now time.Time) {
	in := m.pdus.inputsLocked(s)
	alive := false
	for _, x := range in {
		alive = alive || x
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	alive = alive && !s.suppliesFailed
	switch {
	case !alive && !s.dead:
		_ = s.hw.Event(now, EventPowerLoss)
		s.dead = true
	case alive && s.dead:
		s.dead = false
	}
}

// wattsLocked is what outlet o meters now. The caller holds t.mu.
func (m *Mock) wattsLocked(o *outlet, now time.Time) float64 {
	if !o.on || o.feeds == nil {
		return 0
	}
	s := o.feeds
	fed := 0
	for _, x := range m.pdus.inputsLocked(s) {
		if x {
			fed++
		}
	}
	s.mu.Lock()
	power, dead := s.hw.Read(now).Power, s.dead
	s.mu.Unlock()
	if dead || fed == 0 {
		return 0
	}
	if power == PowerOff {
		return StandbyWatts / float64(fed)
	}
	return OnWatts / float64(fed)
}

// OutletStatus is an outlet as the control API reports it.
type OutletStatus struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	PowerState PowerState `json:"powerState"`
	Watts      float64    `json:"watts"`
	Feeds      string     `json:"feeds,omitempty"`
}

// PDUStatus is a PDU as the control API reports it.
type PDUStatus struct {
	ID           string         `json:"id"`
	Name         string         `json:"name"`
	SerialNumber string         `json:"serialNumber"`
	Faults       PDUFaults      `json:"faults"`
	Outlets      []OutletStatus `json:"outlets"`
}

var ErrUnknownPDU = fmt.Errorf("%w (PDU or outlet)", ErrUnknownSystem)

func (m *Mock) pduStatusLocked(p *pdu, now time.Time) PDUStatus {
	st := PDUStatus{ID: p.id, Name: p.name, SerialNumber: p.serial, Faults: p.faults, Outlets: []OutletStatus{}}
	for _, o := range p.outlets {
		os := OutletStatus{ID: o.id, Name: o.name, PowerState: PowerOff, Watts: m.wattsLocked(o, now), Feeds: o.cfg.Feeds}
		if o.on {
			os.PowerState = PowerOn
		}
		st.Outlets = append(st.Outlets, os)
	}
	return st
}

// PDU reports one PDU and its outlets.
func (m *Mock) PDU(id string) (PDUStatus, error) {
	m.pdus.mu.Lock()
	defer m.pdus.mu.Unlock()
	p, ok := m.pdus.byID[id]
	if !ok {
		return PDUStatus{}, fmt.Errorf("%w: %q", ErrUnknownPDU, id)
	}
	return m.pduStatusLocked(p, m.clock.Now()), nil
}

// PDUs reports every PDU in configured order.
func (m *Mock) PDUs() []PDUStatus {
	m.pdus.mu.Lock()
	defer m.pdus.mu.Unlock()
	now := m.clock.Now()
	out := []PDUStatus{}
	for _, p := range m.pdus.list {
		out = append(out, m.pduStatusLocked(p, now))
	}
	return out
}

// SetOutlet switches an outlet as if at the PDU itself (a hand on the
// switch, a tripped breaker): no PowerControl, no faults.
func (m *Mock) SetOutlet(pduID, outletID string, state PowerState) error {
	if state != PowerOn && state != PowerOff {
		return fmt.Errorf("%w: state %q is not On or Off", ErrInvalidInput, state)
	}
	m.pdus.mu.Lock()
	defer m.pdus.mu.Unlock()
	p, ok := m.pdus.byID[pduID]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownPDU, pduID)
	}
	o, ok := p.byID[outletID]
	if !ok {
		return fmt.Errorf("%w: PDU %q has no outlet %q", ErrUnknownPDU, pduID, outletID)
	}
	m.switchLocked(o, state == PowerOn)
	return nil
}

// switchLocked turns an outlet on or off and lets the system behind it
// feel it. The caller holds m.pdus.mu.
func (m *Mock) switchLocked(o *outlet, on bool) {
	o.on = on
	if o.feeds != nil {
		m.settleLocked(o.feeds, m.clock.Now())
		m.events.kick()
	}
}

// FailSupplies fails (or, with failed false, repairs) every power supply
// of a system while their inputs stay: the host and its BMC die at once
// (the commonest real power loss: the BMC lives on the same standby
// power), and the outlets that feed it stay on and meter 0 W. Repaired,
// the BMC answers again (the host reads Off) as soon as one supply has
// input.
func (m *Mock) FailSupplies(id string, failed bool) error {
	s, err := m.system(id)
	if err != nil {
		return err
	}
	m.pdus.mu.Lock()
	defer m.pdus.mu.Unlock()
	s.mu.Lock()
	s.suppliesFailed = failed
	s.mu.Unlock()
	m.settleLocked(s, m.clock.Now())
	m.events.kick()
	return nil
}

// SetPDUFaults replaces a PDU's faults.
func (m *Mock) SetPDUFaults(id string, f PDUFaults) error {
	m.pdus.mu.Lock()
	defer m.pdus.mu.Unlock()
	p, ok := m.pdus.byID[id]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownPDU, id)
	}
	p.faults = f
	return nil
}

// PSUStatus is one power supply as the chassis reports it.
type PSUStatus struct {
	ID    string `json:"id"`
	Input bool   `json:"input"`
}

// PowerSupplies reports a system's supplies and whether each has input.
func (m *Mock) PowerSupplies(systemID string) ([]PSUStatus, error) {
	s, err := m.system(systemID)
	if err != nil {
		return nil, err
	}
	m.pdus.mu.Lock()
	in := m.pdus.inputsLocked(s)
	m.pdus.mu.Unlock()
	out := make([]PSUStatus, len(in))
	for i, x := range in {
		out[i] = PSUStatus{ID: strconv.Itoa(i + 1), Input: x}
	}
	return out, nil
}

// OutletBank is one PDU's outlets as an SNMP agent serves them (indexes
// 1..n in configured order); see pdu/snmpsim.
type OutletBank struct {
	m *Mock
	p *pdu
}

// PDUBank returns a PDU's outlets for an SNMP agent.
func (m *Mock) PDUBank(id string) (*OutletBank, error) {
	m.pdus.mu.Lock()
	defer m.pdus.mu.Unlock()
	p, ok := m.pdus.byID[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownPDU, id)
	}
	return &OutletBank{m: m, p: p}, nil
}

// OutletCount is the number of outlets.
func (b *OutletBank) OutletCount() int { return len(b.p.outlets) }

// Outlet reports outlet i (1-based).
func (b *OutletBank) Outlet(i int) (name string, on bool, watts int, err error) {
	b.m.pdus.mu.Lock()
	defer b.m.pdus.mu.Unlock()
	if i < 1 || i > len(b.p.outlets) {
		return "", false, 0, fmt.Errorf("%w: outlet index %d of %d", ErrUnknownPDU, i, len(b.p.outlets))
	}
	o := b.p.outlets[i-1]
	return o.name, o.on, int(b.m.wattsLocked(o, b.m.clock.Now()) + 0.5), nil
}

// SetOutlet switches outlet i (1-based), as a command to the PDU: the
// PDU's IgnoreCommands fault applies.
func (b *OutletBank) SetOutlet(i int, on bool) error {
	b.m.pdus.mu.Lock()
	defer b.m.pdus.mu.Unlock()
	if i < 1 || i > len(b.p.outlets) {
		return fmt.Errorf("%w: outlet index %d of %d", ErrUnknownPDU, i, len(b.p.outlets))
	}
	if !b.p.faults.IgnoreCommands {
		b.m.switchLocked(b.p.outlets[i-1], on)
	}
	return nil
}

// Identity is the PDU's model and serial number.
func (b *OutletBank) Identity() (model, serial string) { return pduModel, b.p.serial }

const (
	pduManufacturer = "bmcfence"
	pduModel        = "rack-pdu-mock"
)

// ---- Redfish documents

func (m *Mock) powerEquipmentDocument() map[string]any {
	return map[string]any{
		"@odata.id":   "/redfish/v1/PowerEquipment",
		"@odata.type": "#PowerEquipment.v1_2_1.PowerEquipment",
		"Id":          "PowerEquipment",
		"Name":        "Power Equipment",
		"Status":      statusOK,
		"RackPDUs":    link{"/redfish/v1/PowerEquipment/RackPDUs"},
	}
}

func (m *Mock) writeRackPDUs(w http.ResponseWriter) {
	m.pdus.mu.Lock()
	doc := collectionDoc{
		ODataContext: "/redfish/v1/$metadata#PowerDistributionCollection.PowerDistributionCollection",
		ODataID:      "/redfish/v1/PowerEquipment/RackPDUs",
		ODataType:    "#PowerDistributionCollection.PowerDistributionCollection",
		Name:         "Rack PDUs",
		Members:      []link{},
	}
	for _, p := range m.pdus.list {
		doc.Members = append(doc.Members, link{"/redfish/v1/PowerEquipment/RackPDUs/" + p.id})
	}
	m.pdus.mu.Unlock()
	doc.Count = len(doc.Members)
	writeDescribed(w, "PowerDistributionCollection", doc)
}

func rackPDUDocument(p *pdu) map[string]any {
	base := "/redfish/v1/PowerEquipment/RackPDUs/" + p.id
	return map[string]any{
		"@odata.id":     base,
		"@odata.type":   "#PowerDistribution.v1_3_2.PowerDistribution",
		"Id":            p.id,
		"Name":          p.name,
		"EquipmentType": "RackPDU",
		"Manufacturer":  pduManufacturer,
		"Model":         pduModel,
		"SerialNumber":  p.serial,
		"UUID":          nameUUID("pdu/" + p.id),
		"Status":        statusOK,
		"Outlets":       link{base + "/Outlets"},
	}
}

func (m *Mock) writeOutlets(w http.ResponseWriter, p *pdu) {
	base := "/redfish/v1/PowerEquipment/RackPDUs/" + p.id + "/Outlets"
	doc := collectionDoc{
		ODataContext: "/redfish/v1/$metadata#OutletCollection.OutletCollection",
		ODataID:      base,
		ODataType:    "#OutletCollection.OutletCollection",
		Name:         "Outlets",
		Members:      []link{},
	}
	m.pdus.mu.Lock()
	for _, o := range p.outlets {
		doc.Members = append(doc.Members, link{base + "/" + o.id})
	}
	m.pdus.mu.Unlock()
	doc.Count = len(doc.Members)
	writeDescribed(w, "OutletCollection", doc)
}

func (m *Mock) outletDocument(p *pdu, o *outlet) map[string]any {
	m.pdus.mu.Lock()
	on := o.on
	watts := m.wattsLocked(o, m.clock.Now())
	m.pdus.mu.Unlock()
	uri := outletURI(p, o)
	state := PowerOff
	if on {
		state = PowerOn
	}
	return map[string]any{
		"@odata.id":       uri,
		"@odata.type":     "#Outlet.v1_4_3.Outlet",
		"Id":              o.id,
		"Name":            o.name,
		"PowerState":      state,
		"PowerEnabled":    true,
		"OutletType":      "C13",
		"PhaseWiringType": "OnePhase3Wire",
		"VoltageType":     "AC",
		"NominalVoltage":  "AC230V",
		"PowerWatts":      map[string]any{"DataSourceUri": uri + "#/PowerWatts", "Reading": watts},
		"Status":          statusOK,
		"Actions": map[string]any{
			"#Outlet.PowerControl": map[string]any{
				"target":                             uri + "/Actions/Outlet.PowerControl",
				"PowerState@Redfish.AllowableValues": []string{"On", "Off", "PowerCycle"},
			},
		},
	}
}

// powerControl serves Outlet.PowerControl: On, Off or PowerCycle (off,
// then on at once).
func (m *Mock) powerControl(w http.ResponseWriter, r *http.Request, p *pdu, o *outlet) {
	var body struct {
		PowerState *string
	}
	if err := readJSON(w, r, &body, false); err != nil {
		writeError(w, http.StatusBadRequest, msgMalformedJSON, "The request body is not valid JSON: "+err.Error()+".", "")
		return
	}
	if body.PowerState == nil {
		writeError(w, http.StatusBadRequest, msgActionParameterMissing,
			"The action Outlet.PowerControl requires the parameter PowerState to be present in the request body.", "Supply PowerState: On, Off or PowerCycle.")
		return
	}
	m.pdus.mu.Lock()
	defer m.pdus.mu.Unlock()
	f := p.faults
	switch *body.PowerState {
	case "Off":
		if !o.on && f.ConflictWhenOff {
			writeError(w, http.StatusConflict, msgResourceInStandby, "The outlet is already powered off.", "")
			return
		}
		if !f.IgnoreCommands {
			m.switchLocked(o, false)
		}
	case "On":
		if !f.IgnoreCommands {
			m.switchLocked(o, true)
		}
	case "PowerCycle":
		if !f.IgnoreCommands {
			m.switchLocked(o, false)
			m.switchLocked(o, true)
		}
	default:
		writeError(w, http.StatusBadRequest, msgActionParameterValueNotInList,
			fmt.Sprintf("The value %q for the parameter PowerState in the action Outlet.PowerControl is not in the list of acceptable values [On Off PowerCycle].", truncate(*body.PowerState, 40)),
			"Choose a value from the enumeration list and resubmit the request.")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// powerDocument is the chassis's legacy Power resource: its supplies,
// and whether each has input (iDRAC reports a supply without input as
// UnavailableOffline, Critical: "The power input for power supply N is
// lost", PSU0003).
func (m *Mock) powerDocument(s *system) map[string]any {
	m.pdus.mu.Lock()
	in := m.pdus.inputsLocked(s)
	m.pdus.mu.Unlock()
	base := "/redfish/v1/Chassis/" + s.spec.id + "/Power"
	var psus []any
	for i, x := range in {
		psus = append(psus, map[string]any{
			"@odata.id":        fmt.Sprintf("%s#/PowerSupplies/%d", base, i),
			"MemberId":         strconv.Itoa(i),
			"Name":             fmt.Sprintf("PS%d Status", i+1),
			"PowerSupplyType":  "AC",
			"Status":           psuStatus(x),
			"LineInputVoltage": lineVoltage(x),
		})
	}
	return map[string]any{
		"@odata.id":     base,
		"@odata.type":   "#Power.v1_7_1.Power",
		"Id":            "Power",
		"Name":          "Power",
		"PowerSupplies": psus,
	}
}

func psuStatus(input bool) statusDoc {
	if input {
		return statusOK
	}
	return statusDoc{State: "UnavailableOffline", Health: "Critical"}
}

func lineVoltage(input bool) float64 {
	if input {
		return 230
	}
	return 0
}

func lineInputStatus(input bool) string {
	if input {
		return "Normal"
	}
	return "NoInput"
}

func (m *Mock) powerSubsystemDocument(s *system) map[string]any {
	base := "/redfish/v1/Chassis/" + s.spec.id + "/PowerSubsystem"
	return map[string]any{
		"@odata.id":     base,
		"@odata.type":   "#PowerSubsystem.v1_1_1.PowerSubsystem",
		"Id":            "PowerSubsystem",
		"Name":          "Power Subsystem",
		"Status":        statusOK,
		"PowerSupplies": link{base + "/PowerSupplies"},
	}
}

func (m *Mock) writePowerSupplies(w http.ResponseWriter, s *system) {
	base := "/redfish/v1/Chassis/" + s.spec.id + "/PowerSubsystem/PowerSupplies"
	doc := collectionDoc{
		ODataContext: "/redfish/v1/$metadata#PowerSupplyCollection.PowerSupplyCollection",
		ODataID:      base,
		ODataType:    "#PowerSupplyCollection.PowerSupplyCollection",
		Name:         "Power Supplies",
		Members:      []link{},
	}
	for i := 0; i < s.spec.psus; i++ {
		doc.Members = append(doc.Members, link{base + "/" + strconv.Itoa(i+1)})
	}
	doc.Count = len(doc.Members)
	writeDescribed(w, "PowerSupplyCollection", doc)
}

func (m *Mock) powerSupplyDocument(s *system, n int) map[string]any {
	m.pdus.mu.Lock()
	in := m.pdus.inputsLocked(s)[n-1]
	m.pdus.mu.Unlock()
	return map[string]any{
		"@odata.id":       fmt.Sprintf("/redfish/v1/Chassis/%s/PowerSubsystem/PowerSupplies/%d", s.spec.id, n),
		"@odata.type":     "#PowerSupply.v1_5_1.PowerSupply",
		"Id":              strconv.Itoa(n),
		"Name":            fmt.Sprintf("PSU %d", n),
		"PowerSupplyType": "AC",
		"LineInputStatus": lineInputStatus(in),
		"Status":          psuStatus(in),
	}
}
