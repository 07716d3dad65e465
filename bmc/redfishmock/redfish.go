package redfishmock

import (
	"github.com/bmcfence/bmcfence/bmc/machine"

	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// RedfishVersion is the protocol version the service root reports. bmclib
// trusts BootProgress only from 1.13 on.
const RedfishVersion = "1.15.0"

// maxBodyBytes bounds request bodies; Redfish requests here are tiny.
const maxBodyBytes = 64 << 10

// resource is a kind of Redfish resource the mock serves.
type resource int

const (
	resVersions resource = iota // /redfish
	resServiceRoot
	resSystems
	resSystem
	resSystemReset
	resChassisCollection
	resChassis
	resManagers
	resManager
	resSessionService
	resSessions
	resSession
	resMetadata      // /redfish/v1/$metadata (CSDL, no auth)
	resODataDocument // /redfish/v1/odata (OData service document, no auth)
	resResetActionInfo
	resAccountService
	resAccounts
	resAccount
	resRoles
	resRole
	resTaskService
	resTasks
	resTask
	resTaskMonitor
	resLogServices // evidence.go
	resLogService
	resLogEntries
	resLogEntry
)

// route is a parsed Redfish URI.
type route struct {
	res       resource
	systemID  string // for a system, its chassis, its manager, its Reset
	sessionID string // also the Id of an account, a role, a task, a subscription, a power supply, a log entry
	pduID     string // a rack PDU (routes_ext.go)
	outletID  string // one of its outlets
	logUnder  string // Systems or Managers, for the log routes (evidence.go)
	logID     string // the LogService's Id
}

// parseRoute maps a path without trailing slash to a route.
func parseRoute(path string) (route, bool) {
	rest, ok := strings.CutPrefix(path, "/redfish")
	if !ok {
		return route{}, false
	}
	if rest == "" {
		return route{res: resVersions}, true
	}
	seg := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	if seg[0] != "v1" {
		return route{}, false
	}
	seg = seg[1:]
	if rt, ok := parseExtRoute(seg); ok {
		return rt, true
	}
	if rt, ok := parseLogRoute(seg); ok {
		return rt, true
	}
	switch len(seg) {
	case 0:
		return route{res: resServiceRoot}, true
	case 1:
		switch seg[0] {
		case "Systems":
			return route{res: resSystems}, true
		case "Chassis":
			return route{res: resChassisCollection}, true
		case "Managers":
			return route{res: resManagers}, true
		case "SessionService":
			return route{res: resSessionService}, true
		case "$metadata":
			return route{res: resMetadata}, true
		case "odata":
			return route{res: resODataDocument}, true
		case "AccountService":
			return route{res: resAccountService}, true
		case "TaskService":
			return route{res: resTaskService}, true
		}
	case 2:
		switch {
		case seg[0] == "Systems":
			return route{res: resSystem, systemID: seg[1]}, true
		case seg[0] == "Chassis":
			return route{res: resChassis, systemID: seg[1]}, true
		case seg[0] == "Managers":
			return route{res: resManager, systemID: seg[1]}, true
		case seg[0] == "SessionService" && seg[1] == "Sessions":
			return route{res: resSessions}, true
		case seg[0] == "AccountService" && seg[1] == "Accounts":
			return route{res: resAccounts}, true
		case seg[0] == "AccountService" && seg[1] == "Roles":
			return route{res: resRoles}, true
		case seg[0] == "TaskService" && seg[1] == "Tasks":
			return route{res: resTasks}, true
		}
	case 3:
		switch {
		case seg[0] == "SessionService" && seg[1] == "Sessions" && seg[2] == "Members":
			// OData's alternate URI of a collection's members: DSP0266 lets
			// a client create a session by POST to it (the DMTF Protocol
			// Validator does).
			return route{res: resSessions}, true
		case seg[0] == "SessionService" && seg[1] == "Sessions":
			return route{res: resSession, sessionID: seg[2]}, true
		case seg[0] == "Systems" && seg[2] == "ResetActionInfo":
			return route{res: resResetActionInfo, systemID: seg[1]}, true
		case seg[0] == "AccountService" && seg[1] == "Accounts":
			return route{res: resAccount, sessionID: seg[2]}, true
		case seg[0] == "AccountService" && seg[1] == "Roles":
			return route{res: resRole, sessionID: seg[2]}, true
		case seg[0] == "TaskService" && seg[1] == "Tasks":
			return route{res: resTask, sessionID: seg[2]}, true
		case seg[0] == "TaskService" && seg[1] == "TaskMonitors":
			return route{res: resTaskMonitor, sessionID: seg[2]}, true
		}
	case 4:
		if seg[0] == "Systems" && seg[2] == "Actions" && seg[3] == "ComputerSystem.Reset" {
			return route{res: resSystemReset, systemID: seg[1]}, true
		}
	}
	return route{}, false
}

// methods lists the HTTP methods a resource answers (HEAD goes with GET).
func (rt route) methods() []string {
	if ms, ok := rt.extMethods(); ok {
		return ms
	}
	switch rt.res {
	case resSystemReset:
		return []string{http.MethodPost}
	case resSessions:
		return []string{http.MethodGet, http.MethodHead, http.MethodPost}
	case resSession, resTaskMonitor:
		return []string{http.MethodGet, http.MethodHead, http.MethodDelete}
	case resVersions, resServiceRoot, resSystems, resSystem, resChassisCollection, resChassis,
		resManagers, resManager, resSessionService, resMetadata, resODataDocument, resResetActionInfo,
		resAccountService, resAccounts, resAccount, resRoles, resRole, resTaskService, resTasks, resTask,
		resLogServices, resLogService, resLogEntries, resLogEntry:
	}
	return []string{http.MethodGet, http.MethodHead}
}

// public reports whether the request needs no authentication. The Redfish
// specification leaves /redfish and the service root open so clients can
// discover the service, and a login cannot need a login.
func (rt route) public(method string) bool {
	switch rt.res {
	case resVersions, resServiceRoot, resMetadata, resODataDocument:
		return true
	case resSessions:
		return method == http.MethodPost
	case resSystems, resSystem, resSystemReset, resChassisCollection, resChassis,
		resManagers, resManager, resSessionService, resSession, resResetActionInfo,
		resAccountService, resAccounts, resAccount, resRoles, resRole, resTaskService, resTasks, resTask, resTaskMonitor,
		resLogServices, resLogService, resLogEntries, resLogEntry:
	}
	return false
}

// sessionRoute reports whether the route belongs to the SessionService,
// which a basic-only service does not have.
func (rt route) sessionRoute() bool {
	return rt.res == resSessionService || rt.res == resSessions || rt.res == resSession
}

// serveRedfish answers one Redfish request: authenticate, find the
// resource, apply the faults of the system it concerns, then serve it.
func (m *Mock) serveRedfish(w http.ResponseWriter, r *http.Request, path string) {
	now := m.clock.Now()
	rt, found := parseRoute(path)
	if found && m.cfg.authMode == AuthBasicOnly && rt.sessionRoute() {
		found = false // no SessionService at all
	}

	// DSP0266: a service rejects a request for an OData version it does not
	// support with 412.
	if v := r.Header.Get("OData-Version"); v != "" && v != "4.0" {
		writeError(w, http.StatusPreconditionFailed, msgPreconditionFailed,
			fmt.Sprintf("The request asks for OData-Version %q; this service supports 4.0.", truncate(v, 20)), "Send OData-Version: 4.0 or none.")
		return
	}
	// Authenticate before admitting whether a resource exists, as BMCs do.
	public := found && rt.public(r.Method)
	if found && rt.res == resSessions && r.Method == http.MethodPost && m.cfg.authMode == AuthBasicOnly {
		public = false
	}
	var who principal
	if !public {
		p, ok := m.authenticate(r, now)
		if !ok {
			m.writeUnauthorized(w)
			return
		}
		who = p
	}
	if !found {
		writeNotFound(w, path)
		return
	}
	var target *system
	if rt.systemID != "" {
		s, ok := m.byID[rt.systemID]
		if !ok {
			if named := m.byName(rt.systemID, who); named != nil && named.profileSpec().nameRedirect {
				// sushy-tools: the Name is an alias, redirected to the Id.
				m.redirectToID(w, r, path, rt.systemID, named.spec.id)
				return
			}
		}
		if !ok || !who.sees(s) {
			writeNotFound(w, path)
			return
		}
		target = s
	}
	allowed := rt.methods()
	// DSP0266: the Allow header on GET and on 405 says what the resource
	// takes.
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	if !contains(allowed, r.Method) {
		writeError(w, http.StatusMethodNotAllowed, msgActionNotSupported,
			fmt.Sprintf("The method %s is not allowed on %s; allowed: %s.", truncate(r.Method, 20), path, strings.Join(allowed, ", ")), "")
		return
	}
	if rt.res == resSessions && r.Method == http.MethodPost {
		m.login(w, r)
		return
	}
	if s := m.attribute(target, who); s != nil {
		if _, ok := m.applyFaults(w, r, s, !public); !ok {
			return
		}
	}

	if rt.res >= resExtBase {
		m.serveExt(w, r, rt, who, target, path)
		return
	}
	switch rt.res {
	case resVersions:
		writeJSON(w, http.StatusOK, map[string]string{"v1": "/redfish/v1/"})
	case resServiceRoot:
		writeDescribed(w, "ServiceRoot.v1_15_0", m.serviceRoot())
	case resMetadata:
		writeMetadata(w)
	case resODataDocument:
		writeJSON(w, http.StatusOK, odataDocument(m.cfg.authMode != AuthBasicOnly))
	case resSystems:
		m.writeCollection(w, who, "/redfish/v1/Systems", "ComputerSystemCollection", "Computer System Collection")
	case resSystem:
		m.serveSystem(w, target)
	case resResetActionInfo:
		writeDescribed(w, "ActionInfo.v1_3_0", resetActionInfo(target))
	case resSystemReset:
		m.reset(w, r, target)
	case resChassisCollection:
		m.writeCollection(w, who, "/redfish/v1/Chassis", "ChassisCollection", "Chassis Collection")
	case resChassis:
		writeDescribed(w, "Chassis.v1_21_0", chassisDocument(target, m.clock.Now()))
	case resManagers:
		m.writeCollection(w, who, "/redfish/v1/Managers", "ManagerCollection", "Manager Collection")
	case resManager:
		writeDescribed(w, "Manager.v1_19_0", managerDocument(target))
	case resSessionService:
		writeDescribed(w, "SessionService.v1_1_8", m.sessionService())
	case resSessions:
		m.writeSessions(w, who)
	case resSession:
		m.serveSession(w, r, who, rt.sessionID)
	case resAccountService:
		writeDescribed(w, "AccountService.v1_15_0", accountService())
	case resAccounts:
		m.writeAccounts(w, who)
	case resAccount:
		m.writeAccount(w, who, rt.sessionID)
	case resRoles:
		writeRoles(w)
	case resRole:
		writeRole(w, rt.sessionID)
	case resTaskService:
		writeDescribed(w, "TaskService.v1_2_1", taskService())
	case resTasks:
		m.writeTasks(w)
	case resTask:
		m.writeTask(w, rt.sessionID)
	case resTaskMonitor:
		m.serveTaskMonitor(w, r, rt.sessionID)
	case resLogServices, resLogService, resLogEntries, resLogEntry:
		m.serveLog(w, rt, target)
	}
}

// byName finds the only system named name that who sees, or nil.
func (m *Mock) byName(name string, who principal) *system {
	var found *system
	for _, s := range m.systems {
		if s.spec.name == name && who.sees(s) {
			if found != nil {
				return nil
			}
			found = s
		}
	}
	return found
}

func (s *system) profileSpec() *profileSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.profile.spec()
}

// redirectToID answers 307 to path with the system's Name replaced by its
// Id, as sushy-tools does (flask.redirect(url_for(...), code=307)): a
// relative Location, the same origin.
func (m *Mock) redirectToID(w http.ResponseWriter, r *http.Request, path, name, id string) {
	const prefix = "/redfish/v1/Systems/"
	to := prefix + id + strings.TrimPrefix(strings.TrimPrefix(path, prefix), name)
	w.Header().Set("Location", to)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusTemporaryRedirect)
	_, _ = fmt.Fprintf(w, "<p>You should be redirected automatically to the target URL: <a href=%q>%s</a>.</p>\n", to, to)
}

// serveSystem answers GET of a ComputerSystem: 503 while the machine reads
// Off on a profile whose BMC cannot reach an off host (AMI multi-node).
func (m *Mock) serveSystem(w http.ResponseWriter, s *system) {
	now := m.clock.Now()
	s.mu.Lock()
	spec := s.profile.spec()
	power := s.hw.Read(now).Power
	s.mu.Unlock()
	if spec.unavailableWhenOff && power == PowerOff {
		writeError(w, http.StatusServiceUnavailable, msgServiceTemporarilyUnavailable,
			"The system is not available while its host is powered off.", "Read the system's chassis for its power state.")
		return
	}
	doc := systemDocument(s, now)
	doc.Links.PoweredBy = m.poweredBy(s)
	// An ETag lets clients make conditional requests; gofish turns it into
	// If-Match on every POST, which is how iDRAC10's 412 bites.
	w.Header().Set("ETag", etagOf(doc))
	writeDescribed(w, "ComputerSystem.v1_20_0", doc)
}

// attribute picks the system whose faults and counters a request belongs
// to: the one its URI names, else the one its credentials are scoped to,
// else the only one there is. With several systems and administrator
// credentials, the service root and collections belong to none.
func (m *Mock) attribute(target *system, who principal) *system {
	switch {
	case target != nil:
		return target
	case who.scope != nil:
		return who.scope
	case len(m.systems) == 1:
		return m.systems[0]
	}
	return nil
}

// applyFaults counts the request against s and plays s's request-level
// faults. It reports false when it has answered the request itself.
func (m *Mock) applyFaults(w http.ResponseWriter, r *http.Request, s *system, authenticated bool) (Faults, bool) {
	s.mu.Lock()
	f := s.faults
	dead := s.dead
	s.counters.Requests++
	s.mu.Unlock()

	if f.Hang || dead {
		// A dead BMC (every power supply lost its input) answers nothing.
		_ = m.block(r.Context()) // the client has given up; whatever we write is for the log
		writeUnavailable(w, "The service did not respond (hang fault).")
		return f, false
	}
	if err := m.wait(r.Context(), f.Latency); err != nil {
		writeUnavailable(w, "The request was abandoned during the latency fault: "+err.Error()+".")
		return f, false
	}
	if f.AuthFailure && authenticated {
		m.writeUnauthorized(w)
		return f, false
	}
	if f.ErrorRate > 0 {
		s.mu.Lock()
		draw := s.rng.Uint64()
		s.mu.Unlock()
		// The top 53 bits give a uniform float in [0,1); the lowest bit picks
		// which of the two error statuses to answer.
		if float64(draw>>11)/(1<<53) < f.ErrorRate {
			if draw&1 == 0 {
				writeError(w, http.StatusInternalServerError, msgInternalError,
					"The request failed due to an internal service error (errorRate fault).", "Resubmit the request.")
			} else {
				writeUnavailable(w, "The service is temporarily unavailable (errorRate fault).")
			}
			return f, false
		}
	}
	return f, true
}

func writeUnavailable(w http.ResponseWriter, message string) {
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, msgServiceTemporarilyUnavailable, message, "Wait and resubmit the request.")
}

func writeNotFound(w http.ResponseWriter, path string) {
	writeError(w, http.StatusNotFound, msgResourceMissingAtURI,
		fmt.Sprintf("The resource at the URI %s was not found.", truncate(path, 200)),
		"Place a valid resource at the URI or correct the URI and resubmit the request.")
}

// reset serves POST .../Actions/ComputerSystem.Reset, as the system's
// profile answers it.
func (m *Mock) reset(w http.ResponseWriter, r *http.Request, s *system) {
	s.mu.Lock()
	spec := s.profile.spec()
	allowed := s.allowedResets()
	s.mu.Unlock()
	if spec.rejectIfMatch && r.Header.Get("If-Match") != "" {
		// iDRAC10: an ETag precondition on an action fails, whatever it is.
		writeError(w, http.StatusPreconditionFailed, "Base.1.18.PreconditionFailed",
			"The ETag supplied did not match the ETag required to change this resource.", "Try the operation again using the appropriate ETag.")
		return
	}
	var body struct {
		ResetType *string
	}
	if err := readJSON(w, r, &body, false); err != nil {
		writeError(w, http.StatusBadRequest, msgMalformedJSON, "The request body is not valid JSON: "+err.Error()+".", "")
		return
	}
	if body.ResetType == nil {
		writeError(w, http.StatusBadRequest, msgActionParameterMissing,
			"The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.",
			fmt.Sprintf("Supply ResetType, one of %v.", allowed))
		return
	}
	rt := ResetType(*body.ResetType)
	if !rt.Valid() || !slices.Contains(allowed, rt) {
		writeError(w, http.StatusBadRequest, msgActionParameterValueNotInList,
			fmt.Sprintf("The value %q for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values %v.", truncate(string(rt), 40), allowed),
			"Choose a value from the enumeration list and resubmit the request.")
		return
	}

	now := m.clock.Now()
	s.mu.Lock()
	if s.counters.Resets == nil {
		s.counters.Resets = map[ResetType]int64{}
	}
	s.counters.Resets[rt]++
	s.counters.LastResetType = rt
	s.counters.LastResetTime = &now
	var refused *refusal
	var err error
	power := s.hw.Read(now).Power
	switch {
	case s.busyLeft > 0 && spec.busy != nil:
		s.busyLeft--
		refused = spec.busy
	case spec.alreadyOff != nil && power == PowerOff && (rt == ResetForceOff || rt == ResetGracefulShutdown):
		// The BMC does nothing: during a restart's off-dwell, the restart
		// goes on.
		refused = spec.alreadyOff
	case spec.alreadyOn != nil && (power == PowerOn || power == PowerPoweringOn) && (rt == ResetOn || rt == ResetForceOn):
		refused = spec.alreadyOn
	default:
		err = s.hw.Reset(now, rt)
		if err == nil {
			s.busyLeft = spec.busyAfterReset
		}
	}
	var duration time.Duration
	if rt == ResetForceOff || rt == ResetGracefulShutdown {
		duration = s.hw.Timing().PowerOff
	}
	s.mu.Unlock()
	m.events.kick()

	switch {
	case refused != nil:
		refused.write(w)
	case errors.Is(err, machine.ErrAlreadyOff):
		writeError(w, http.StatusConflict, msgResourceInStandby, "The request could not be performed: "+err.Error()+".", "")
	case errors.Is(err, machine.ErrInTransition):
		writeError(w, http.StatusConflict, msgResourceInUse, "The change to the requested resource failed because the resource is in transition: "+err.Error()+".", "Wait and resubmit the request.")
	case err != nil:
		writeError(w, http.StatusInternalServerError, msgInternalError, err.Error(), "")
	default:
		m.writeResetAccepted(w, spec, s, rt, now, duration)
	}
	if m.log != nil {
		result := resultText(err)
		if refused != nil {
			result = fmt.Sprintf("refused %d %s", refused.status, refused.messageID)
		}
		m.log.Info("reset received", "system", s.spec.id, "profile", string(s.profile), "resetType", string(rt), "result", result)
	}
}

// writeResetAccepted answers an accepted Reset the way the profile does.
func (m *Mock) writeResetAccepted(w http.ResponseWriter, spec *profileSpec, s *system, rt ResetType, now time.Time, d time.Duration) {
	switch spec.answer {
	case answerILOOK:
		writeJSON(w, http.StatusOK, map[string]any{"error": map[string]any{
			"code": "iLO.0.10.ExtendedInfo", "message": "See @Message.ExtendedInfo for more information.",
			"@Message.ExtendedInfo": []any{map[string]any{"MessageId": "Base.1.4.Success"}},
		}})
	case answerSuccess:
		writeJSON(w, http.StatusOK, map[string]any{"@Message.ExtendedInfo": []any{map[string]any{
			"@odata.type": "#Message.v1_1_1.Message", "MessageId": "Base.1.8.Success",
			"Message": "Successfully Completed Request", "Severity": "OK", "Resolution": "None",
		}}})
	case answerTask:
		id := m.tasks.add(s.spec.id, rt, now, now.Add(d))
		w.Header().Set("Location", "/redfish/v1/TaskService/TaskMonitors/"+id)
		writeJSON(w, http.StatusAccepted, m.tasks.document(id, now))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func resultText(err error) string {
	if err != nil {
		return err.Error()
	}
	return "accepted"
}

// login serves POST /redfish/v1/SessionService/Sessions.
func (m *Mock) login(w http.ResponseWriter, r *http.Request) {
	var body struct {
		UserName *string
		Password *string
	}
	if err := readJSON(w, r, &body, false); err != nil {
		writeError(w, http.StatusBadRequest, msgMalformedJSON, "The request body is not valid JSON: "+err.Error()+".", "")
		return
	}
	if body.UserName == nil || body.Password == nil {
		writeError(w, http.StatusBadRequest, msgCreateFailedMissingReqProperty,
			"The create operation failed because the required properties UserName and Password were missing from the request.", "")
		return
	}
	who, ok := m.checkPassword(*body.UserName, *body.Password)
	if !ok {
		m.writeUnauthorized(w)
		return
	}
	owner := m.attribute(nil, who)
	var faults Faults
	if owner != nil {
		if faults, ok = m.applyFaults(w, r, owner, true); !ok {
			return
		}
	}
	if faults.SessionsExhausted {
		writeSessionLimit(w)
		return
	}
	s, token, err := m.sessions.create(m.clock.Now(), who, owner, faults.SessionLimit)
	switch {
	case errors.Is(err, errSessionLimit):
		writeSessionLimit(w)
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, msgInternalError, "Cannot create a session token.", "")
		return
	}
	location := "/redfish/v1/SessionService/Sessions/" + s.id
	w.Header().Set("X-Auth-Token", token)
	w.Header().Set("Location", location)
	writeJSON(w, http.StatusCreated, sessionDocument(s))
}

func writeSessionLimit(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "30")
	writeError(w, http.StatusServiceUnavailable, msgSessionLimitExceeded,
		"The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation.",
		"Reduce the number of other sessions before trying to establish the session or increase the limit of simultaneous sessions (if supported).")
}

func (m *Mock) serveSession(w http.ResponseWriter, r *http.Request, who principal, id string) {
	now := m.clock.Now()
	if r.Method == http.MethodDelete {
		if !m.sessions.remove(now, who, id) {
			writeNotFound(w, "/redfish/v1/SessionService/Sessions/"+id)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	s, ok := m.sessions.get(now, who, id)
	if !ok {
		writeNotFound(w, "/redfish/v1/SessionService/Sessions/"+id)
		return
	}
	writeDescribed(w, "Session.v1_7_0", sessionDocument(&s))
}

// readJSON decodes a bounded request body into v. Redfish services ignore
// nothing they do not understand, but clients send OEM extras, so the
// Redfish surface is lenient (strict=false); the control API is strict.
func readJSON(w http.ResponseWriter, r *http.Request, v any, strict bool) error {
	data, err := readAllLimited(w, r)
	if err != nil {
		return fmt.Errorf("cannot read the body: %w", err)
	}
	if strict {
		return decodeStrict(data, v)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return err
	}
	return nil
}

func readAllLimited(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Redfish documents. Only what clients read is here; each carries the
// @odata annotations gofish, sushy and redfishtool rely on.

type link struct {
	ODataID string `json:"@odata.id"`
}

type statusDoc struct {
	State  string `json:"State"`
	Health string `json:"Health"`
}

var statusOK = statusDoc{State: "Enabled", Health: "OK"}

type serviceRootDoc struct {
	ODataContext   string `json:"@odata.context"`
	ODataID        string `json:"@odata.id"`
	ODataType      string `json:"@odata.type"`
	ID             string `json:"Id"`
	Name           string `json:"Name"`
	RedfishVersion string `json:"RedfishVersion"`
	UUID           string `json:"UUID"`
	Product        string `json:"Product,omitempty"`
	Vendor         string `json:"Vendor,omitempty"`
	Systems        link   `json:"Systems"`
	Chassis        link   `json:"Chassis"`
	Managers       link   `json:"Managers"`
	SessionService *link  `json:"SessionService,omitempty"`
	AccountService *link  `json:"AccountService,omitempty"`
	// Tasks is the TaskService (DSP0268 ServiceRoot names the property
	// Tasks, not TaskService).
	Tasks          *link `json:"Tasks,omitempty"`
	EventService   *link `json:"EventService,omitempty"`
	PowerEquipment *link `json:"PowerEquipment,omitempty"`
	Links          struct {
		Sessions *link `json:"Sessions,omitempty"`
	} `json:"Links"`
}

func (m *Mock) serviceRoot() serviceRootDoc {
	doc := serviceRootDoc{
		ODataContext:   "/redfish/v1/$metadata#ServiceRoot.ServiceRoot",
		ODataID:        "/redfish/v1/",
		ODataType:      "#ServiceRoot.v1_15_0.ServiceRoot",
		ID:             "RootService",
		Name:           "Root Service",
		RedfishVersion: RedfishVersion,
		UUID:           nameUUID("service"),
		Product:        "bmcfence redfish-mock",
		Vendor:         "bmcfence",
		Systems:        link{"/redfish/v1/Systems"},
		Chassis:        link{"/redfish/v1/Chassis"},
		Managers:       link{"/redfish/v1/Managers"},
		AccountService: &link{"/redfish/v1/AccountService"},
		Tasks:          &link{"/redfish/v1/TaskService"},
		EventService:   &link{eventServiceURI},
	}
	if len(m.pdus.list) > 0 {
		doc.PowerEquipment = &link{"/redfish/v1/PowerEquipment"}
	}
	if m.cfg.profile == ProfileSushy {
		// sushy-tools' root.json, which clients identify it by. The
		// emulator has no EventService.
		doc.ID, doc.Name, doc.UUID, doc.RedfishVersion = sushyRoot.id, sushyRoot.name, sushyRoot.uuid, sushyRoot.version
		doc.ODataType = "#ServiceRoot.v1_5_0.ServiceRoot"
		doc.Product, doc.Vendor = "", ""
		doc.AccountService, doc.Tasks, doc.EventService, doc.PowerEquipment = nil, nil, nil, nil
	}
	if m.cfg.authMode != AuthBasicOnly {
		doc.SessionService = &link{"/redfish/v1/SessionService"}
		doc.Links.Sessions = &link{"/redfish/v1/SessionService/Sessions"}
	}
	return doc
}

type collectionDoc struct {
	ODataContext string `json:"@odata.context"`
	ODataID      string `json:"@odata.id"`
	ODataType    string `json:"@odata.type"`
	Name         string `json:"Name"`
	Count        int    `json:"Members@odata.count"`
	Members      []link `json:"Members"`
}

func (m *Mock) writeCollection(w http.ResponseWriter, who principal, base, typ, name string) {
	doc := collectionDoc{
		ODataContext: "/redfish/v1/$metadata#" + typ + "." + typ,
		ODataID:      base,
		ODataType:    "#" + typ + "." + typ,
		Name:         name,
		Members:      []link{},
	}
	for _, s := range m.systems {
		if who.sees(s) {
			doc.Members = append(doc.Members, link{base + "/" + s.spec.id})
		}
	}
	doc.Count = len(doc.Members)
	writeDescribed(w, typ, doc)
}

type systemDoc struct {
	ODataContext string           `json:"@odata.context"`
	ODataID      string           `json:"@odata.id"`
	ODataType    string           `json:"@odata.type"`
	ID           string           `json:"Id"`
	Name         string           `json:"Name"`
	SystemType   string           `json:"SystemType"`
	UUID         string           `json:"UUID"`
	Manufacturer string           `json:"Manufacturer"`
	Model        string           `json:"Model"`
	SerialNumber string           `json:"SerialNumber"`
	PowerState   string           `json:"PowerState"`
	BootProgress *bootProgressDoc `json:"BootProgress,omitempty"`
	// Boot is read-only here; sushy refuses a system without it.
	Boot struct {
		Enabled string   `json:"BootSourceOverrideEnabled"`
		Target  string   `json:"BootSourceOverrideTarget"`
		Allowed []string `json:"BootSourceOverrideTarget@Redfish.AllowableValues"`
		Mode    string   `json:"BootSourceOverrideMode"`
	} `json:"Boot"`
	Status  statusDoc `json:"Status"`
	Actions struct {
		Reset struct {
			Target     string      `json:"target"`
			Allowed    []ResetType `json:"ResetType@Redfish.AllowableValues,omitempty"`
			ActionInfo string      `json:"@Redfish.ActionInfo,omitempty"`
		} `json:"#ComputerSystem.Reset"`
	} `json:"Actions"`
	Links struct {
		Chassis   []link `json:"Chassis"`
		ManagedBy []link `json:"ManagedBy"`
		// PoweredBy: the PDU outlets that feed the system (pdu.go).
		PoweredBy []link `json:"PoweredBy,omitempty"`
	} `json:"Links"`
	// Hung-node evidence, per profile (evidence.go).
	HostWatchdogTimer *hostWatchdogDoc `json:"HostWatchdogTimer,omitempty"`
	LastResetTime     string           `json:"LastResetTime,omitempty"`
	LogServices       *link            `json:"LogServices,omitempty"`
}

type bootProgressDoc struct {
	LastState     string `json:"LastState"`
	LastStateTime string `json:"LastStateTime"`
}

var bootTargets = []string{"None", "Pxe", "Hdd", "Cd", "BiosSetup"}

// allowedResets is what the system advertises and accepts. The caller
// holds s.mu.
func (s *system) allowedResets() []ResetType {
	if s.spec.resetTypes != nil {
		return s.spec.resetTypes
	}
	return s.profile.spec().allowed
}

// systemPowerState is the system's Redfish PowerState as its profile
// reports it. OpenBMC derives it from the host state: a host that is not
// yet running (the chassis powering on) reads Off.
func systemPowerState(spec *profileSpec, p PowerState) PowerState {
	if spec.systemFromHost && p == PowerPoweringOn {
		return PowerOff
	}
	return p
}

const (
	manufacturer = "bmcfence"
	model        = "redfish-mock"
)

func systemDocument(s *system, now time.Time) systemDoc {
	s.mu.Lock()
	snap := s.hw.Read(now)
	uuid := s.reportedUUID
	spec := s.profile.spec()
	allowed := s.allowedResets()
	s.mu.Unlock()

	id := s.spec.id
	doc := systemDoc{
		ODataContext: "/redfish/v1/$metadata#ComputerSystem.ComputerSystem",
		ODataID:      "/redfish/v1/Systems/" + id,
		ODataType:    "#ComputerSystem.v1_20_0.ComputerSystem",
		ID:           id,
		Name:         s.spec.name,
		SystemType:   "Physical",
		UUID:         uuid,
		Manufacturer: spec.manufacturer,
		Model:        spec.model,
		SerialNumber: s.spec.serial,
		PowerState:   string(systemPowerState(spec, snap.Power)),
		Status:       statusOK,
	}
	doc.Boot.Enabled = "Disabled"
	doc.Boot.Target = "None"
	doc.Boot.Allowed = bootTargets
	doc.Boot.Mode = "UEFI"
	if spec.bootProgress {
		doc.BootProgress = &bootProgressDoc{LastState: snap.BootState, LastStateTime: snap.BootSince.UTC().Format(time.RFC3339)}
	}
	doc.Actions.Reset.Target = "/redfish/v1/Systems/" + id + "/Actions/ComputerSystem.Reset"
	if spec.actionInfo && s.spec.resetTypes == nil {
		doc.Actions.Reset.ActionInfo = "/redfish/v1/Systems/" + id + "/ResetActionInfo"
	} else {
		doc.Actions.Reset.Allowed = allowed
	}
	doc.Links.Chassis = []link{{"/redfish/v1/Chassis/" + id}}
	doc.Links.ManagedBy = []link{{"/redfish/v1/Managers/" + id}}
	addEvidence(&doc, s, now)
	return doc
}

type chassisDoc struct {
	ODataContext string    `json:"@odata.context"`
	ODataID      string    `json:"@odata.id"`
	ODataType    string    `json:"@odata.type"`
	ID           string    `json:"Id"`
	Name         string    `json:"Name"`
	ChassisType  string    `json:"ChassisType"`
	Manufacturer string    `json:"Manufacturer"`
	Model        string    `json:"Model"`
	SerialNumber string    `json:"SerialNumber"`
	UUID         string    `json:"UUID,omitempty"`
	PowerState   string    `json:"PowerState"`
	Status       statusDoc `json:"Status"`
	// Power and PowerSubsystem report the power supplies (pdu.go).
	Power          link `json:"Power"`
	PowerSubsystem link `json:"PowerSubsystem"`
	Links          struct {
		ComputerSystems []link `json:"ComputerSystems"`
		ManagedBy       []link `json:"ManagedBy"`
	} `json:"Links"`
}

// chassisDocument reports the chassis power, which is the machine's real
// power whatever the system's profile makes the system report.
func chassisDocument(s *system, now time.Time) chassisDoc {
	s.mu.Lock()
	snap := s.hw.Read(now)
	spec := s.profile.spec()
	s.mu.Unlock()

	id := s.spec.id
	doc := chassisDoc{
		ODataContext: "/redfish/v1/$metadata#Chassis.Chassis",
		ODataID:      "/redfish/v1/Chassis/" + id,
		ODataType:    "#Chassis.v1_21_0.Chassis",
		ID:           id,
		Name:         "Chassis-" + id,
		ChassisType:  "RackMount",
		Manufacturer: spec.manufacturer,
		Model:        spec.model,
		SerialNumber: s.spec.serial,
		UUID:         nameUUID("chassis/" + s.spec.uuid),
		PowerState:   string(snap.Power),
		Status:       statusOK,
	}
	if spec.staticChassis {
		doc.PowerState = string(PowerOn) // sushy-tools' chassis.json
	}
	doc.Power = link{"/redfish/v1/Chassis/" + id + "/Power"}
	doc.PowerSubsystem = link{"/redfish/v1/Chassis/" + id + "/PowerSubsystem"}
	doc.Links.ComputerSystems = []link{{"/redfish/v1/Systems/" + id}}
	doc.Links.ManagedBy = []link{{"/redfish/v1/Managers/" + id}}
	return doc
}

type managerDoc struct {
	ODataContext    string    `json:"@odata.context"`
	ODataID         string    `json:"@odata.id"`
	ODataType       string    `json:"@odata.type"`
	ID              string    `json:"Id"`
	Name            string    `json:"Name"`
	ManagerType     string    `json:"ManagerType"`
	UUID            string    `json:"UUID"`
	Model           string    `json:"Model"`
	FirmwareVersion string    `json:"FirmwareVersion"`
	PowerState      string    `json:"PowerState"`
	Status          statusDoc `json:"Status"`
	Links           struct {
		ManagerForServers []link `json:"ManagerForServers"`
		ManagerForChassis []link `json:"ManagerForChassis"`
	} `json:"Links"`
	LogServices *link `json:"LogServices,omitempty"` // evidence.go
}

func managerDocument(s *system) managerDoc {
	id := s.spec.id
	doc := managerDoc{
		ODataContext:    "/redfish/v1/$metadata#Manager.Manager",
		ODataID:         "/redfish/v1/Managers/" + id,
		ODataType:       "#Manager.v1_19_0.Manager",
		ID:              id,
		Name:            "Manager-" + id,
		ManagerType:     "BMC",
		UUID:            nameUUID("manager/" + s.spec.uuid),
		Model:           model,
		FirmwareVersion: "1.0.0",
		PowerState:      string(PowerOn), // the BMC itself is always on: it has standby power
		Status:          statusOK,
	}
	doc.Links.ManagerForServers = []link{{"/redfish/v1/Systems/" + id}}
	doc.Links.ManagerForChassis = []link{{"/redfish/v1/Chassis/" + id}}
	s.mu.Lock()
	if s.profile.evidence().logUnder == "Managers" {
		doc.LogServices = &link{"/redfish/v1/Managers/" + id + "/LogServices"}
	}
	s.mu.Unlock()
	return doc
}

type sessionServiceDoc struct {
	ODataContext   string    `json:"@odata.context"`
	ODataID        string    `json:"@odata.id"`
	ODataType      string    `json:"@odata.type"`
	ID             string    `json:"Id"`
	Name           string    `json:"Name"`
	ServiceEnabled bool      `json:"ServiceEnabled"`
	SessionTimeout int64     `json:"SessionTimeout"`
	Status         statusDoc `json:"Status"`
	Sessions       link      `json:"Sessions"`
}

func (m *Mock) sessionService() sessionServiceDoc {
	return sessionServiceDoc{
		ODataContext:   "/redfish/v1/$metadata#SessionService.SessionService",
		ODataID:        "/redfish/v1/SessionService",
		ODataType:      "#SessionService.v1_1_8.SessionService",
		ID:             "SessionService",
		Name:           "Session Service",
		ServiceEnabled: true,
		SessionTimeout: int64(m.cfg.sessionTimeout / time.Second),
		Status:         statusOK,
		Sessions:       link{"/redfish/v1/SessionService/Sessions"},
	}
}

func (m *Mock) writeSessions(w http.ResponseWriter, who principal) {
	const base = "/redfish/v1/SessionService/Sessions"
	doc := collectionDoc{
		ODataContext: "/redfish/v1/$metadata#SessionCollection.SessionCollection",
		ODataID:      base,
		ODataType:    "#SessionCollection.SessionCollection",
		Name:         "Session Collection",
		Members:      []link{},
	}
	for _, s := range m.sessions.visible(m.clock.Now(), who) {
		doc.Members = append(doc.Members, link{base + "/" + s.id})
	}
	doc.Count = len(doc.Members)
	writeDescribed(w, "SessionCollection", doc)
}

type sessionDoc struct {
	ODataContext string `json:"@odata.context"`
	ODataID      string `json:"@odata.id"`
	ODataType    string `json:"@odata.type"`
	ID           string `json:"Id"`
	Name         string `json:"Name"`
	UserName     string `json:"UserName"`
	CreatedTime  string `json:"CreatedTime"`
}

func sessionDocument(s *session) sessionDoc {
	return sessionDoc{
		ODataContext: "/redfish/v1/$metadata#Session.Session",
		ODataID:      "/redfish/v1/SessionService/Sessions/" + s.id,
		ODataType:    "#Session.v1_7_0.Session",
		ID:           s.id,
		Name:         "User Session " + s.id,
		UserName:     s.principal.username,
		CreatedTime:  s.created.UTC().Format(time.RFC3339),
	}
}
