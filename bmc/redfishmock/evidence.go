package redfishmock

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bmcfence/bmcfence/bmc/machine"
)

// Hung-node evidence as each vendor's BMC shows it: the host watchdog
// (ComputerSystem.HostWatchdogTimer), when the system was last reset
// (ComputerSystem.LastResetTime) and the log entries a watchdog expiry, a
// kernel panic and a boot leave (LogServices). The machine (bmc/machine)
// decides what happens; a profile decides only how it reads.

// logStyle is how a profile writes its log entries.
type logStyle int

const (
	// styleSEL: DSP0268 LogEntry with EntryType SEL and the IPMI sensor's
	// SensorType, EntryCode and SensorNumber; the timer use and action in
	// the Message.
	styleSEL logStyle = iota
	// styleIDRAC: iDRAC's SEL, MessageIds from Dell's Error and Event
	// Message Reference (ASR0000–ASR0003 for the watchdog), no timer use.
	styleIDRAC
	// styleILO: HPE's Integrated Management Log, EntryType Oem,
	// OemRecordFormat Hpe-IML, no timer use.
	styleILO
	// styleOpenBMC: bmcweb's EventLog, EntryType Event, MessageIds of the
	// OpenBMC registry (IPMIWatchdog, SELEntryAdded, DCPowerOn).
	styleOpenBMC
)

// evidenceSpec is what a profile shows of the watchdog and its log.
type evidenceSpec struct {
	source        string
	hostWatchdog  bool // ComputerSystem.HostWatchdogTimer
	lastResetTime bool // ComputerSystem.LastResetTime
	// logUnder is "Systems" or "Managers": which resource's LogServices
	// holds the log; logID is the LogService's Id.
	logUnder string
	logID    string
	style    logStyle
}

var evidenceSpecs = map[Profile]evidenceSpec{
	ProfileGeneric: {
		source: "DSP0268: ComputerSystem.HostWatchdogTimer (FunctionEnabled, Status, TimeoutAction), ComputerSystem.LastResetTime, " +
			"LogEntry with EntryType SEL, SensorType (Watchdog, OS Stop/Shutdown, SystemBoot/Restart), EntryCode, SensorNumber; " +
			"IPMI 2.0 table 42-3 for the offsets",
		hostWatchdog: true, lastResetTime: true, logUnder: "Systems", logID: "SEL", style: styleSEL,
	},
	ProfileIDRAC9: {
		source: "Dell iDRAC9 Redfish API guide (ComputerSystem.HostWatchdogTimer; the SEL under Managers/iDRAC.Embedded.1/LogServices/Sel); " +
			"Dell PowerEdge Error and Event Messages Reference: ASR0000 \"The watchdog timer expired.\", ASR0001 \"The watchdog timer reset the system.\", " +
			"ASR0002 powered off, ASR0003 power cycled; OSE0001 \"A runtime critical stop occurred.\" (the OS Stop/Shutdown offsets, " +
			"numbered like ASR's: assumed); no timer use in the message",
		hostWatchdog: true, logUnder: "Managers", logID: "Sel", style: styleIDRAC,
	},
	ProfileIDRAC10: {
		source:       "as iDRAC9",
		hostWatchdog: true, logUnder: "Managers", logID: "Sel", style: styleIDRAC,
	},
	ProfileILO5: {
		source: "HPE iLO 5 log services (servermanagementportal.ext.hpe.com, Log services: the IML at Systems/1/LogServices/IML, " +
			"EntryType Oem, Oem.Hpe.Class/Code); no HostWatchdogTimer in the ComputerSystem we read; the ASR message text " +
			"(\"ASR Detected by System ROM\") from ProLiant guides, its IML class and code assumed; no timer use",
		logUnder: "Systems", logID: "IML", style: styleILO,
	},
	ProfileILO6: {
		source:   "as iLO 5",
		logUnder: "Systems", logID: "IML", style: styleILO,
	},
	ProfileOpenBMC: {
		source: "bmcweb redfish-core/lib/systems.hpp (HostWatchdogTimer from xyz.openbmc_project.State.Watchdog, LastResetTime) " +
			"and log_services.hpp (Systems/system/LogServices/EventLog, EntryType Event); the OpenBMC message registry " +
			"(openbmc.json: IPMIWatchdog \"Host Watchdog Event: %1\", SELEntryAdded, DCPowerOn); phosphor-watchdog's expiry " +
			"arguments \"Timer expired. timer use: SMS/OS\"",
		hostWatchdog: true, lastResetTime: true, logUnder: "Systems", logID: "EventLog", style: styleOpenBMC,
	},
	ProfileXCC: {
		source:       "Lenovo XCC: a SEL-style log modelled like the generic profile (not vendor-specific here)",
		hostWatchdog: true, logUnder: "Systems", logID: "SEL", style: styleSEL,
	},
	ProfileSupermicro: {
		source:   "Supermicro: a SEL-style log modelled like the generic profile, no HostWatchdogTimer (not vendor-specific here)",
		logUnder: "Managers", logID: "Log1", style: styleSEL,
	},
	ProfileAMIMulti: {
		source:   "AMI MegaRAC: a SEL-style log modelled like the generic profile (not vendor-specific here)",
		logUnder: "Managers", logID: "SEL", style: styleSEL,
	},
	ProfileSushy: {
		source: "sushy-tools' emulator templates (system.json, manager.json) have no HostWatchdogTimer, LastResetTime or " +
			"LogServices: nothing to read",
	},
}

func (p Profile) evidence() evidenceSpec {
	if s, ok := evidenceSpecs[p]; ok {
		return s
	}
	return evidenceSpecs[ProfileGeneric]
}

// EvidenceSource is the public documentation a profile's watchdog and log
// are modelled from.
func (p Profile) EvidenceSource() string { return p.evidence().source }

// ---- the ComputerSystem's part ---------------------------------------------

type hostWatchdogDoc struct {
	FunctionEnabled bool      `json:"FunctionEnabled"`
	Status          statusDoc `json:"Status"`
	TimeoutAction   string    `json:"TimeoutAction"`
	WarningAction   string    `json:"WarningAction"`
}

// addEvidence fills in the watchdog, the last reset and the log services
// link of a system document. The caller holds nothing.
func addEvidence(doc *systemDoc, s *system, now time.Time) {
	s.mu.Lock()
	spec := s.profile.evidence()
	wd := s.hw.Watchdog(now)
	snap := s.hw.Read(now)
	s.mu.Unlock()
	if spec.hostWatchdog {
		doc.HostWatchdogTimer = &hostWatchdogDoc{
			FunctionEnabled: wd.Configured && wd.Armed,
			Status:          statusDoc{State: "Enabled", Health: "OK"},
			TimeoutAction:   wd.Action.Redfish(),
			WarningAction:   "None",
		}
	}
	if spec.lastResetTime && !snap.LastBoot.IsZero() {
		doc.LastResetTime = snap.LastBoot.UTC().Format(time.RFC3339)
	}
	if spec.logUnder == "Systems" {
		doc.LogServices = &link{"/redfish/v1/Systems/" + s.spec.id + "/LogServices"}
	}
}

// ---- LogServices -------------------------------------------------------------

// parseLogRoute recognises .../{Systems|Managers}/{id}/LogServices[/{svc}[/Entries[/{n}]]].
func parseLogRoute(seg []string) (route, bool) {
	if len(seg) < 3 || (seg[0] != "Systems" && seg[0] != "Managers") || seg[2] != "LogServices" {
		return route{}, false
	}
	rt := route{systemID: seg[1], logUnder: seg[0]}
	switch {
	case len(seg) == 3:
		rt.res = resLogServices
	case len(seg) == 4:
		rt.res, rt.logID = resLogService, seg[3]
	case len(seg) == 5 && seg[4] == "Entries":
		rt.res, rt.logID = resLogEntries, seg[3]
	case len(seg) == 6 && seg[4] == "Entries":
		rt.res, rt.logID, rt.sessionID = resLogEntry, seg[3], seg[5]
	default:
		return route{}, false
	}
	return rt, true
}

// serveLog answers the log routes of a system (or its manager).
func (m *Mock) serveLog(w http.ResponseWriter, rt route, s *system) {
	now := m.clock.Now()
	s.mu.Lock()
	spec := s.profile.evidence()
	log := s.hw.Log(now)
	s.mu.Unlock()
	base := "/redfish/v1/" + rt.logUnder + "/" + s.spec.id + "/LogServices"
	if rt.logUnder != spec.logUnder || (rt.res != resLogServices && rt.logID != spec.logID) {
		writeNotFound(w, base+"/"+rt.logID)
		return
	}
	svc := base + "/" + spec.logID
	switch rt.res {
	case resLogServices:
		writeDescribed(w, "LogServiceCollection", collectionDoc{
			ODataContext: "/redfish/v1/$metadata#LogServiceCollection.LogServiceCollection", ODataID: base,
			ODataType: "#LogServiceCollection.LogServiceCollection", Name: "Log Service Collection",
			Count: 1, Members: []link{{svc}},
		})
	case resLogService:
		writeDescribed(w, "LogService.v1_5_0", map[string]any{
			"@odata.id": svc, "@odata.type": "#LogService.v1_5_0.LogService", "Id": spec.logID,
			"Name": spec.logID + " Log Service", "ServiceEnabled": true, "OverWritePolicy": "WrapsWhenFull",
			"MaxNumberOfRecords": 256, "DateTime": now.UTC().Format(time.RFC3339), "LogEntryType": logEntryType(spec.style),
			"Entries": link{svc + "/Entries"}, "Status": statusOK,
		})
	case resLogEntries:
		members := make([]any, 0, len(log))
		for _, e := range log {
			if doc, ok := logEntryDoc(spec, svc, s.spec.id, e); ok {
				members = append(members, doc)
			}
		}
		writeDescribed(w, "LogEntryCollection", map[string]any{
			"@odata.id": svc + "/Entries", "@odata.type": "#LogEntryCollection.LogEntryCollection",
			"Name": spec.logID + " Entries", "Members@odata.count": len(members), "Members": members,
		})
	case resLogEntry:
		for _, e := range log {
			if strconv.Itoa(e.ID) != rt.sessionID {
				continue
			}
			if doc, ok := logEntryDoc(spec, svc, s.spec.id, e); ok {
				writeDescribed(w, "LogEntry.v1_15_0", doc)
				return
			}
		}
		writeNotFound(w, svc+"/Entries/"+rt.sessionID)
	}
}

func logEntryType(st logStyle) string {
	switch st {
	case styleSEL, styleIDRAC:
		return "SEL"
	case styleILO:
		return "OEM" // LogService's LogEntryTypes enum spells it so (LogEntry's EntryType: Oem)
	case styleOpenBMC:
		return "Event"
	}
	return "Multiple"
}

// IPMI sensor types and the numbers the mock gives its sensors.
const (
	sensorTypeWatchdog2  = 0x23
	sensorTypeOSStop     = 0x20
	sensorTypeSystemBoot = 0x1d
)

// logEntryDoc renders one entry in a profile's style; false for entries the
// style does not log (iLO logs no boot markers here).
func logEntryDoc(spec evidenceSpec, svc, self string, e machine.LogEntry) (map[string]any, bool) {
	id := strconv.Itoa(e.ID)
	origin := self
	if e.Origin != "" {
		origin = e.Origin
	}
	doc := map[string]any{
		"@odata.id":   svc + "/Entries/" + id,
		"@odata.type": "#LogEntry.v1_15_0.LogEntry",
		"Id":          id,
		"Name":        "Log Entry " + id,
		"Created":     e.At.UTC().Format(time.RFC3339),
		"Links":       map[string]any{"OriginOfCondition": link{"/redfish/v1/Systems/" + origin}},
	}
	switch spec.style {
	case styleSEL:
		doc["EntryType"] = "SEL"
		doc["EntryCode"] = "Assert"
		switch e.Kind {
		case machine.LogWatchdogExpired:
			doc["SensorType"], doc["SensorNumber"], doc["Severity"] = "Watchdog", 3, "Critical"
			doc["Message"] = fmt.Sprintf("Watchdog 2: %s; timer use: %s", e.Action, e.Use)
		case machine.LogOSCriticalStop:
			doc["SensorType"], doc["SensorNumber"], doc["Severity"] = "OS Stop/Shutdown", 4, "Critical"
			doc["Message"] = "OS Stop/Shutdown: Run-time critical stop"
		case machine.LogSystemBoot:
			doc["SensorType"], doc["SensorNumber"], doc["Severity"] = "SystemBoot/Restart", 5, "OK"
			doc["Message"] = "System Boot/Restart Initiated: Initiated by power up"
		default:
			return nil, false
		}
	case styleIDRAC:
		doc["EntryType"] = "SEL"
		doc["Severity"] = "Critical"
		switch e.Kind {
		case machine.LogWatchdogExpired:
			msgs := map[machine.WatchdogAction]string{
				machine.WatchdogNoAction:   "The watchdog timer expired.",
				machine.WatchdogHardReset:  "The watchdog timer reset the system.",
				machine.WatchdogPowerDown:  "The watchdog timer powered off the system.",
				machine.WatchdogPowerCycle: "The watchdog timer power cycled the system.",
			}
			doc["MessageId"] = fmt.Sprintf("IDRAC.2.9.ASR%04d", int(e.Action))
			doc["Message"] = msgs[e.Action]
			doc["SensorType"] = "Watchdog"
		case machine.LogOSCriticalStop:
			doc["MessageId"], doc["Message"], doc["SensorType"] = "IDRAC.2.9.OSE0001", "A runtime critical stop occurred.", "OS Stop/Shutdown"
		case machine.LogSystemBoot:
			doc["MessageId"], doc["Message"], doc["SensorType"], doc["Severity"] = "IDRAC.2.9.SYS1003", "System CPU Resetting.", "SystemBoot/Restart", "OK"
		default:
			return nil, false
		}
	case styleILO:
		doc["EntryType"] = "Oem"
		doc["OemRecordFormat"] = "Hpe-IML"
		switch e.Kind {
		case machine.LogWatchdogExpired:
			doc["Severity"], doc["Message"] = "Critical", "ASR Detected by System ROM"
			doc["Oem"] = map[string]any{"Hpe": map[string]any{"Class": 0x02, "Code": 0x19, "Count": 1}}
		case machine.LogOSCriticalStop:
			doc["Severity"], doc["Message"] = "Critical", "An Unrecoverable System Error (NMI) has occurred (Operating System run-time critical stop)"
			doc["Oem"] = map[string]any{"Hpe": map[string]any{"Class": 0x13, "Code": 0x01, "Count": 1}}
		default:
			return nil, false
		}
	case styleOpenBMC:
		doc["EntryType"] = "Event"
		switch e.Kind {
		case machine.LogWatchdogExpired:
			arg := "Timer expired"
			if e.Action != machine.WatchdogNoAction {
				arg = map[machine.WatchdogAction]string{
					machine.WatchdogHardReset:  "Hard Reset - System reset",
					machine.WatchdogPowerDown:  "Power Down - System power down",
					machine.WatchdogPowerCycle: "Power Cycle - System power cycle",
				}[e.Action] + " due to Watchdog timeout"
			}
			arg += ". timer use: " + openBMCTimerUse(e.Use)
			doc["MessageId"], doc["Severity"] = "OpenBMC.0.1.IPMIWatchdog", "OK"
			doc["Message"], doc["MessageArgs"] = "Host Watchdog Event: "+arg, []string{arg}
		case machine.LogOSCriticalStop:
			// A Platform Event Message: generator 0x0041 (system software
			// ID 20h, the kernel), sensor type 20h, offset 01h.
			raw := fmt.Sprintf("%02X%02X%02X%02X%02X%02X", 0x41, 0x00, 0x04, sensorTypeOSStop, 0x6f, 0x01)
			doc["MessageId"], doc["Severity"] = "OpenBMC.0.1.SELEntryAdded", "OK"
			doc["Message"], doc["MessageArgs"] = "SEL Entry Added: "+raw, []string{raw}
		case machine.LogSystemBoot:
			doc["MessageId"], doc["Severity"], doc["Message"] = "OpenBMC.0.1.DCPowerOn", "OK", "Host system DC power is on"
		default:
			return nil, false
		}
	}
	return doc, true
}

// openBMCTimerUse is phosphor-watchdog's name for a timer use.
func openBMCTimerUse(u machine.TimerUse) string {
	switch u {
	case machine.TimerUseOSLoad:
		return "OSLoad"
	case machine.TimerUseNone:
		return "Reserved"
	default:
		return u.String()
	}
}

// ---- the Go and control API ------------------------------------------------

// StartPetter starts the node-side watchdog petter on a system's running OS
// (timer use SMS/OS, the timeout and action given).
func (m *Mock) StartPetter(id string, timeout time.Duration, action machine.WatchdogAction) error {
	s, err := m.system(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hw.StartPetter(m.clock.Now(), timeout, action)
}

// StopPetter stops the petter: disarm true is a stop on purpose (the magic
// close); false is a killed petter whose timer runs on.
func (m *Mock) StopPetter(id string, disarm bool) error {
	s, err := m.system(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hw.StopPetter(m.clock.Now(), disarm)
	return nil
}

// SetPanicOnNMI says whether the system's kernel panics on an NMI (kdump).
func (m *Mock) SetPanicOnNMI(id string, panics bool) error {
	s, err := m.system(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hw.SetPanicOnNMI(m.clock.Now(), panics)
	return nil
}

// Watchdog reports a system's watchdog.
func (m *Mock) Watchdog(id string) (machine.WatchdogStatus, error) {
	s, err := m.system(id)
	if err != nil {
		return machine.WatchdogStatus{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hw.Watchdog(m.clock.Now()), nil
}

// Log returns a system's log entries, oldest first.
func (m *Mock) Log(id string) ([]machine.LogEntry, error) {
	s, err := m.system(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hw.Log(m.clock.Now()), nil
}

// AppendLog adds an entry to a system's log as its BMC would: a stale
// entry (At before the last boot), a POST expiry (timer use BIOS/POST), an
// entry about another system (Origin).
func (m *Mock) AppendLog(id string, e machine.LogEntry) (machine.LogEntry, error) {
	s, err := m.system(id)
	if err != nil {
		return machine.LogEntry{}, err
	}
	if e.Kind < machine.LogWatchdogExpired || e.Kind > machine.LogSystemBoot {
		return machine.LogEntry{}, fmt.Errorf("%w: log entry kind %d", ErrInvalidInput, e.Kind)
	}
	if e.Origin != "" {
		if _, err := m.system(e.Origin); err != nil && !validID.MatchString(e.Origin) {
			return machine.LogEntry{}, fmt.Errorf("%w: origin %q is not a system id", ErrInvalidInput, e.Origin)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := m.clock.Now()
	if e.At.IsZero() {
		e.At = now
	}
	return s.hw.AppendLog(now, e), nil
}

// controlEvidence serves /mock/systems/{id}/petter|watchdog|log|kernel.
func (m *Mock) controlEvidence(w http.ResponseWriter, r *http.Request, id, what string) {
	switch what {
	case "petter":
		m.controlPetter(w, r, id)
	case "watchdog":
		if !allowMethod(w, r, http.MethodGet, http.MethodHead) {
			return
		}
		st, err := m.Watchdog(id)
		if err != nil {
			writeControlError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, watchdogJSON(st))
	case "log":
		m.controlLog(w, r, id)
	case "kernel":
		if !allowMethod(w, r, http.MethodPut) {
			return
		}
		var body struct {
			PanicOnNMI *bool `json:"panicOnNMI"`
		}
		if !readControlBody(w, r, &body) {
			return
		}
		if body.PanicOnNMI == nil {
			writeBadRequest(w, `panicOnNMI: required, e.g. {"panicOnNMI":true} (a kernel set up for kdump)`)
			return
		}
		err := m.SetPanicOnNMI(id, *body.PanicOnNMI)
		m.writeStatus(w, id, err)
		m.logControl("kernel", id, err)
	}
}

// controlPetter: PUT {"timeout":"30s","action":"None"} starts the petter;
// DELETE stops it on purpose, DELETE ?disarm=false kills it.
func (m *Mock) controlPetter(w http.ResponseWriter, r *http.Request, id string) {
	var err error
	switch r.Method {
	case http.MethodPut:
		var body struct {
			Timeout *machine.Duration `json:"timeout"`
			Action  string            `json:"action"`
		}
		if !readControlBody(w, r, &body) {
			return
		}
		if body.Timeout == nil {
			writeBadRequest(w, `timeout: required, e.g. {"timeout":"30s","action":"None"}`)
			return
		}
		action, ok := parseTimeoutAction(body.Action)
		if !ok {
			writeBadRequest(w, fmt.Sprintf("action: %q: want None, ResetSystem, PowerDown or PowerCycle", body.Action))
			return
		}
		err = m.StartPetter(id, time.Duration(*body.Timeout), action)
	case http.MethodDelete:
		disarm := r.URL.Query().Get("disarm") != "false"
		err = m.StopPetter(id, disarm)
	default:
		allowMethod(w, r, http.MethodPut, http.MethodDelete)
		return
	}
	if err != nil {
		writeControlError(w, err)
		return
	}
	st, _ := m.Watchdog(id)
	writeJSON(w, http.StatusOK, watchdogJSON(st))
	m.logControl(r.Method+" petter", id, nil)
}

func parseTimeoutAction(s string) (machine.WatchdogAction, bool) {
	for _, a := range []machine.WatchdogAction{machine.WatchdogNoAction, machine.WatchdogHardReset, machine.WatchdogPowerDown, machine.WatchdogPowerCycle} {
		if s == a.Redfish() || (s == "" && a == machine.WatchdogNoAction) {
			return a, true
		}
	}
	return 0, false
}

func watchdogJSON(st machine.WatchdogStatus) map[string]any {
	return map[string]any{
		"armed": st.Armed, "configured": st.Configured, "petted": st.Petted,
		"timerUse": st.Use.String(), "action": st.Action.Redfish(),
		"timeout": machine.Duration(st.Timeout), "remaining": machine.Duration(st.Remaining),
		"expiredFlags": st.Expired,
	}
}

// logEntryJSON is a log entry on the control API.
type logEntryJSON struct {
	ID       int       `json:"id,omitempty"`
	At       time.Time `json:"at"`
	Kind     string    `json:"kind"`
	TimerUse string    `json:"timerUse,omitempty"`
	Action   string    `json:"action,omitempty"`
	Boot     int       `json:"boot,omitempty"`
	Origin   string    `json:"origin,omitempty"`
}

func (m *Mock) controlLog(w http.ResponseWriter, r *http.Request, id string) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		log, err := m.Log(id)
		if err != nil {
			writeControlError(w, err)
			return
		}
		out := make([]logEntryJSON, 0, len(log))
		for _, e := range log {
			j := logEntryJSON{ID: e.ID, At: e.At, Kind: e.Kind.String(), Boot: e.Boot, Origin: e.Origin}
			if e.Kind == machine.LogWatchdogExpired {
				j.TimerUse, j.Action = e.Use.String(), e.Action.Redfish()
			}
			out = append(out, j)
		}
		writeJSON(w, http.StatusOK, out)
	case http.MethodPost:
		var body logEntryJSON
		if !readControlBody(w, r, &body) {
			return
		}
		e, err := parseLogEntryJSON(body)
		if err == nil {
			e, err = m.AppendLog(id, e)
		}
		if err != nil {
			if !errors.Is(err, ErrUnknownSystem) && !errors.Is(err, ErrInvalidInput) {
				err = fmt.Errorf("%w: %w", ErrInvalidInput, err)
			}
			writeControlError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, logEntryJSON{ID: e.ID, At: e.At, Kind: e.Kind.String(), TimerUse: e.Use.String(), Action: e.Action.Redfish(), Boot: e.Boot, Origin: e.Origin})
		m.logControl("log "+e.Kind.String(), id, nil)
	default:
		allowMethod(w, r, http.MethodGet, http.MethodHead, http.MethodPost)
	}
}

func parseLogEntryJSON(j logEntryJSON) (machine.LogEntry, error) {
	e := machine.LogEntry{At: j.At, Boot: j.Boot, Origin: j.Origin}
	switch j.Kind {
	case "watchdog-expired":
		e.Kind = machine.LogWatchdogExpired
	case "os-critical-stop":
		e.Kind = machine.LogOSCriticalStop
	case "system-boot":
		e.Kind = machine.LogSystemBoot
	default:
		return e, fmt.Errorf("%w: kind %q: want watchdog-expired, os-critical-stop or system-boot", ErrInvalidInput, j.Kind)
	}
	if e.Kind == machine.LogWatchdogExpired {
		e.Use = machine.TimerUseSMSOS
		if j.TimerUse != "" {
			found := false
			for u := machine.TimerUseBIOSFRB2; u <= machine.TimerUseOEM; u++ {
				if strings.EqualFold(j.TimerUse, u.String()) {
					e.Use, found = u, true
				}
			}
			if !found {
				return e, fmt.Errorf("%w: timerUse %q: want BIOS FRB2, BIOS/POST, OS Load, SMS/OS or OEM", ErrInvalidInput, j.TimerUse)
			}
		}
		a, ok := parseTimeoutAction(j.Action)
		if !ok {
			return e, fmt.Errorf("%w: action %q: want None, ResetSystem, PowerDown or PowerCycle", ErrInvalidInput, j.Action)
		}
		e.Action = a
	}
	return e, nil
}

// MarshalJSON is for tests that print entries.
func (j logEntryJSON) String() string {
	b, _ := json.Marshal(j)
	return string(b)
}
