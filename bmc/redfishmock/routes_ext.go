package redfishmock

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Routes of the event service, the power equipment and the chassis's
// power supplies, kept apart from redfish.go's table.

const (
	resEventService resource = 1000 + iota
	resSubscriptions
	resSubscription
	resSubmitTestEvent
	resSSE
	resPowerEquipment
	resRackPDUs
	resRackPDU
	resOutlets
	resOutlet
	resOutletPowerControl
	resChassisPower
	resPowerSubsystem
	resPowerSupplies
	resPowerSupply
)

// resExtBase is the first resource served by serveExt.
const resExtBase = resEventService

// parseExtRoute maps the segments after /redfish/v1 to one of these
// resources.
func parseExtRoute(seg []string) (route, bool) {
	at := func(i int) string {
		if i < len(seg) {
			return seg[i]
		}
		return ""
	}
	switch {
	case len(seg) == 1 && seg[0] == "SSE":
		return route{res: resSSE}, true
	case at(0) == "EventService":
		switch {
		case len(seg) == 1:
			return route{res: resEventService}, true
		case len(seg) == 2 && (seg[1] == "SSE" || seg[1] == "ServerSentEvent"):
			return route{res: resSSE}, true
		case len(seg) == 2 && seg[1] == "Subscriptions":
			return route{res: resSubscriptions}, true
		case len(seg) == 3 && seg[1] == "Subscriptions":
			return route{res: resSubscription, sessionID: seg[2]}, true
		case len(seg) == 3 && seg[1] == "Actions" && seg[2] == "EventService.SubmitTestEvent":
			return route{res: resSubmitTestEvent}, true
		}
	case at(0) == "PowerEquipment":
		switch {
		case len(seg) == 1:
			return route{res: resPowerEquipment}, true
		case len(seg) == 2 && seg[1] == "RackPDUs":
			return route{res: resRackPDUs}, true
		case len(seg) == 3 && seg[1] == "RackPDUs":
			return route{res: resRackPDU, pduID: seg[2]}, true
		case len(seg) == 4 && seg[1] == "RackPDUs" && seg[3] == "Outlets":
			return route{res: resOutlets, pduID: seg[2]}, true
		case len(seg) == 5 && seg[1] == "RackPDUs" && seg[3] == "Outlets":
			return route{res: resOutlet, pduID: seg[2], outletID: seg[4]}, true
		case len(seg) == 7 && seg[1] == "RackPDUs" && seg[3] == "Outlets" && seg[5] == "Actions" && seg[6] == "Outlet.PowerControl":
			return route{res: resOutletPowerControl, pduID: seg[2], outletID: seg[4]}, true
		}
	case at(0) == "Chassis" && len(seg) >= 3:
		switch {
		case len(seg) == 3 && seg[2] == "Power":
			return route{res: resChassisPower, systemID: seg[1]}, true
		case len(seg) == 3 && seg[2] == "PowerSubsystem":
			return route{res: resPowerSubsystem, systemID: seg[1]}, true
		case len(seg) == 4 && seg[2] == "PowerSubsystem" && seg[3] == "PowerSupplies":
			return route{res: resPowerSupplies, systemID: seg[1]}, true
		case len(seg) == 5 && seg[2] == "PowerSubsystem" && seg[3] == "PowerSupplies":
			return route{res: resPowerSupply, systemID: seg[1], sessionID: seg[4]}, true
		}
	}
	return route{}, false
}

// extMethods is what the resource answers (HEAD goes with GET); false for
// the resources redfish.go serves.
func (rt route) extMethods() ([]string, bool) {
	switch rt.res {
	case resSubscriptions:
		return []string{http.MethodGet, http.MethodHead, http.MethodPost}, true
	case resSubscription:
		return []string{http.MethodGet, http.MethodHead, http.MethodPatch, http.MethodDelete}, true
	case resSubmitTestEvent, resOutletPowerControl:
		return []string{http.MethodPost}, true
	case resSSE:
		return []string{http.MethodGet}, true
	case resEventService, resPowerEquipment, resRackPDUs, resRackPDU, resOutlets, resOutlet,
		resChassisPower, resPowerSubsystem, resPowerSupplies, resPowerSupply:
		return []string{http.MethodGet, http.MethodHead}, true
	}
	return nil, false
}

// serveExt serves the resources of this file. target is the system the
// URI names (chassis power), already checked to be visible.
func (m *Mock) serveExt(w http.ResponseWriter, r *http.Request, rt route, who principal, target *system, path string) {
	switch rt.res {
	case resEventService, resSubscriptions, resSubscription, resSubmitTestEvent, resSSE:
		if m.serviceProfile(who).eventSpec().none {
			writeNotFound(w, path)
			return
		}
	}
	switch rt.res {
	case resEventService:
		writeDescribed(w, "EventService.v1_10_0", m.eventServiceDocument(who))
	case resSubscriptions:
		if r.Method == http.MethodPost {
			m.createSubscription(w, r, who)
			return
		}
		m.writeSubscriptions(w, who)
	case resSubscription:
		m.serveSubscription(w, r, who, rt.sessionID)
	case resSubmitTestEvent:
		m.submitTestEvent(w, r, who)
	case resSSE:
		m.serveSSE(w, r, who, path)
	case resChassisPower:
		writeDescribed(w, "Power.v1_7_1", m.powerDocument(target))
	case resPowerSubsystem:
		writeDescribed(w, "PowerSubsystem.v1_1_1", m.powerSubsystemDocument(target))
	case resPowerSupplies:
		m.writePowerSupplies(w, target)
	case resPowerSupply:
		n, err := strconv.Atoi(rt.sessionID)
		if err != nil || n < 1 || n > target.spec.psus || strconv.Itoa(n) != rt.sessionID {
			writeNotFound(w, path)
			return
		}
		writeDescribed(w, "PowerSupply.v1_5_1", m.powerSupplyDocument(target, n))
	case resPowerEquipment, resRackPDUs, resRackPDU, resOutlets, resOutlet, resOutletPowerControl:
		m.servePDU(w, r, rt, who, path)
	}
}

// servePDU serves the power equipment. The PDUs are a device of their own:
// only the administrator sees them, never a system-scoped user (who
// stands for one BMC).
func (m *Mock) servePDU(w http.ResponseWriter, r *http.Request, rt route, who principal, path string) {
	if who.scope != nil || len(m.pdus.list) == 0 || m.serviceProfile(who) == ProfileSushy {
		writeNotFound(w, path)
		return
	}
	if rt.res == resPowerEquipment {
		writeDescribed(w, "PowerEquipment.v1_2_1", m.powerEquipmentDocument())
		return
	}
	if rt.res == resRackPDUs {
		m.writeRackPDUs(w)
		return
	}
	p, ok := m.pdus.byID[rt.pduID]
	if !ok {
		writeNotFound(w, path)
		return
	}
	m.pdus.mu.Lock()
	hang := p.faults.Hang
	m.pdus.mu.Unlock()
	if hang {
		_ = m.block(r.Context())
		writeUnavailable(w, "The PDU did not respond (hang fault).")
		return
	}
	switch rt.res {
	case resRackPDU:
		writeDescribed(w, "PowerDistribution.v1_3_2", rackPDUDocument(p))
		return
	case resOutlets:
		m.writeOutlets(w, p)
		return
	}
	o, ok := p.byID[rt.outletID]
	if !ok {
		writeNotFound(w, path)
		return
	}
	if rt.res == resOutletPowerControl {
		m.powerControl(w, r, p, o)
		return
	}
	writeDescribed(w, "Outlet.v1_4_3", m.outletDocument(p, o))
}

// serveEventControl serves the control API's event and PDU endpoints; it
// reports false for a path that is not one of them.
//
//	GET|PUT|PATCH|DELETE /mock/systems/{id}/event-faults
//	POST /mock/systems/{id}/drop-streams       → {"dropped": n}
//	POST /mock/systems/{id}/inject-event       {"origin": "/redfish/v1/Systems/2", "change": "PoweredOff"}
//	GET  /mock/pdus, /mock/pdus/{id}
//	PUT  /mock/pdus/{id}/outlets/{outlet}      {"state": "Off"}
//	GET|PUT /mock/pdus/{id}/faults             {"ignoreCommands": true, "conflictWhenOff": true, "hang": true}
func (m *Mock) serveEventControl(w http.ResponseWriter, r *http.Request, seg []string) bool {
	switch {
	case len(seg) == 3 && seg[0] == "systems" && seg[2] == "event-faults":
		m.controlEventFaults(w, r, seg[1])
	case len(seg) == 3 && seg[0] == "systems" && seg[2] == "drop-streams":
		if !allowMethod(w, r, http.MethodPost) {
			return true
		}
		n, err := m.DropStreams(seg[1])
		if err != nil {
			writeControlError(w, err)
			return true
		}
		writeJSON(w, http.StatusOK, map[string]int{"dropped": n})
	case len(seg) == 3 && seg[0] == "systems" && seg[2] == "inject-event":
		if !allowMethod(w, r, http.MethodPost) {
			return true
		}
		var in EventInjection
		if !readControlBody(w, r, &in) {
			return true
		}
		if err := m.InjectEvent(seg[1], in); err != nil {
			writeControlError(w, err)
			return true
		}
		w.WriteHeader(http.StatusNoContent)
	case len(seg) == 1 && seg[0] == "pdus":
		if allowMethod(w, r, http.MethodGet, http.MethodHead) {
			writeJSON(w, http.StatusOK, m.PDUs())
		}
	case len(seg) == 2 && seg[0] == "pdus":
		if allowMethod(w, r, http.MethodGet, http.MethodHead) {
			st, err := m.PDU(seg[1])
			if err != nil {
				writeControlError(w, err)
				return true
			}
			writeJSON(w, http.StatusOK, st)
		}
	case len(seg) == 4 && seg[0] == "pdus" && seg[2] == "outlets":
		if !allowMethod(w, r, http.MethodPut) {
			return true
		}
		var body struct {
			State *PowerState `json:"state"`
		}
		if !readControlBody(w, r, &body) {
			return true
		}
		if body.State == nil {
			writeBadRequest(w, `state: required, "On" or "Off", e.g. {"state":"Off"}`)
			return true
		}
		if err := m.SetOutlet(seg[1], seg[3], *body.State); err != nil {
			writeControlError(w, err)
			return true
		}
		st, _ := m.PDU(seg[1])
		writeJSON(w, http.StatusOK, st)
	case len(seg) == 3 && seg[0] == "pdus" && seg[2] == "faults":
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			st, err := m.PDU(seg[1])
			if err != nil {
				writeControlError(w, err)
				return true
			}
			writeJSON(w, http.StatusOK, st.Faults)
		case http.MethodPut:
			var f PDUFaults
			if !readControlBody(w, r, &f) {
				return true
			}
			if err := m.SetPDUFaults(seg[1], f); err != nil {
				writeControlError(w, err)
				return true
			}
			writeJSON(w, http.StatusOK, f)
		default:
			allowMethod(w, r, http.MethodGet, http.MethodHead, http.MethodPut)
		}
	default:
		return false
	}
	return true
}

func (m *Mock) controlEventFaults(w http.ResponseWriter, r *http.Request, id string) {
	cur, err := m.EventFaultsOf(id)
	if err != nil {
		writeControlError(w, err)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		writeJSON(w, http.StatusOK, cur)
		return
	case http.MethodPut, http.MethodPatch:
		data, ok := readBody(w, r)
		if !ok {
			return
		}
		next := cur
		if r.Method == http.MethodPut {
			next = EventFaults{}
		}
		if err := decodeStrict(data, &next); err != nil {
			writeError(w, http.StatusBadRequest, msgMalformedJSON, "event-faults: "+err.Error(), "")
			return
		}
		cur = next
	case http.MethodDelete:
		cur = EventFaults{}
	default:
		allowMethod(w, r, http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodDelete)
		return
	}
	if err := m.SetEventFaults(id, cur); err != nil {
		if errors.Is(err, ErrInvalidInput) {
			err = fmt.Errorf("event-faults: %w", err)
		}
		writeControlError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, cur)
	m.logControl(r.Method+" event-faults", id, nil)
}
