package redfish

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
)

// ReadEvidence reads the hung-node evidence a Redfish BMC holds about the
// target's system, in one operation: the system (its identity,
// HostWatchdogTimer, LastResetTime, BootProgress), then the log services
// of the system and of the manager that manages it whose Id names a
// system event log (SEL, Sel, EventLog, IML, Log1), and their entries.
//
// Entries are classified by what each vendor writes (see classify); the
// watchdog's timer use is reported only where the BMC says it (OpenBMC's
// "timer use:" argument, a SEL message that names it): iDRAC's ASR
// messages and HPE's IML do not. An entry's boot is judged on the BMC's own
// clock and order: at or after LastResetTime, or after the latest boot
// record in the same log, is the current boot. Nothing here decides.
func (c *Client) ReadEvidence(ctx context.Context) (bmc.EvidenceReport, error) {
	var rep bmc.EvidenceReport
	err := c.run(ctx, bmc.OpReadEvidence, &rep.Result, func(cn *conn) error {
		return retryRead(cn, &rep.Result, func() error {
			r, err := cn.readEvidence()
			if err == nil {
				res := rep.Result
				rep = r
				rep.Result = res
			}
			return err
		})
	})
	return rep, err
}

var _ bmc.EvidenceReader = (*Client)(nil)

// evidenceSystemDoc is the part of a ComputerSystem the evidence needs.
type evidenceSystemDoc struct {
	HostWatchdogTimer *struct {
		FunctionEnabled *bool  `json:"FunctionEnabled"`
		TimeoutAction   string `json:"TimeoutAction"`
	} `json:"HostWatchdogTimer"`
	LastResetTime string `json:"LastResetTime"`
	LogServices   *link  `json:"LogServices"`
	BootProgress  *struct {
		LastState string `json:"LastState"`
	} `json:"BootProgress"`
	Links struct {
		ManagedBy []link `json:"ManagedBy"`
	} `json:"Links"`
}

// evidenceLogIDs are the LogService Ids read: the system event logs. Other
// logs (iDRAC's Lifecycle log, audit and security logs) are long and say
// nothing about the host's OS.
var evidenceLogIDs = map[string]bool{"sel": true, "eventlog": true, "iml": true, "log1": true}

// maxEntryPages bounds how many pages of a log are read.
const maxEntryPages = 8

type logEntryDoc struct {
	ODataID    string   `json:"@odata.id"`
	ID         string   `json:"Id"`
	Created    string   `json:"Created"`
	EntryType  string   `json:"EntryType"`
	SensorType string   `json:"SensorType"`
	EntryCode  string   `json:"EntryCode"`
	MessageID  string   `json:"MessageId"`
	Message    string   `json:"Message"`
	Args       []string `json:"MessageArgs"`
	Links      struct {
		OriginOfCondition *link `json:"OriginOfCondition"`
	} `json:"Links"`
}

func (cn *conn) readEvidence() (bmc.EvidenceReport, error) {
	var rep bmc.EvidenceReport
	sys, uri, err := cn.system()
	if err != nil {
		return rep, err
	}
	rep.Identity = bmc.Identity{SystemID: sys.ID, SystemName: sys.Name, UUID: sys.UUID,
		SerialNumber: sys.SerialNumber, Manufacturer: sys.Manufacturer, Model: sys.Model}
	var ev evidenceSystemDoc
	if err := cn.get(uri, &ev); err != nil {
		return rep, err
	}
	if w := ev.HostWatchdogTimer; w != nil {
		rep.Watchdog = bmc.HostWatchdog{Reported: true, Enabled: w.FunctionEnabled != nil && *w.FunctionEnabled, TimeoutAction: w.TimeoutAction}
	} else {
		rep.Unsupported = append(rep.Unsupported, "HostWatchdogTimer")
	}
	if t, err := time.Parse(time.RFC3339, ev.LastResetTime); err == nil {
		rep.Boot.LastReset = t
	}
	if ev.BootProgress != nil {
		rep.Boot.BootProgress = ev.BootProgress.LastState
	}

	var collections []string
	if ev.LogServices != nil {
		collections = append(collections, ev.LogServices.ODataID)
	}
	if len(ev.Links.ManagedBy) > 0 {
		var mgr struct {
			LogServices *link `json:"LogServices"`
		}
		err := cn.get(ev.Links.ManagedBy[0].ODataID, &mgr)
		var herr *httpError
		switch {
		case errors.As(err, &herr) && herr.status == http.StatusNotFound:
		case err != nil:
			return rep, err
		case mgr.LogServices != nil:
			collections = append(collections, mgr.LogServices.ODataID)
		}
	}
	var logs []readLog
	for _, coll := range collections {
		var members collectionDoc
		if err := cn.get(coll, &members); err != nil {
			return rep, err
		}
		for _, m := range members.Members {
			if !evidenceLogIDs[strings.ToLower(lastSegment(m.ODataID))] {
				continue
			}
			entries, err := cn.logEntries(m.ODataID)
			if err != nil {
				return rep, err
			}
			logs = append(logs, readLog{source: onlyPath(m.ODataID), entries: entries})
		}
	}
	if len(logs) == 0 {
		rep.Unsupported = append(rep.Unsupported, "LogServices (SEL, EventLog, IML)")
	}
	for _, l := range logs {
		rep.Entries = append(rep.Entries, l.evidence(uri, &rep.Boot)...)
	}
	return rep, nil
}

type readLog struct {
	source  string
	entries []logEntryDoc
}

// logEntries reads a log service's entries (following nextLink a few pages).
func (cn *conn) logEntries(service string) ([]logEntryDoc, error) {
	var svc struct {
		Entries *link `json:"Entries"`
	}
	if err := cn.get(service, &svc); err != nil {
		return nil, err
	}
	next := strings.TrimSuffix(service, "/") + "/Entries"
	if svc.Entries != nil {
		next = svc.Entries.ODataID
	}
	var out []logEntryDoc
	for page := 0; next != "" && page < maxEntryPages; page++ {
		var coll struct {
			Members  []logEntryDoc `json:"Members"`
			NextLink string        `json:"Members@odata.nextLink"`
		}
		if err := cn.get(next, &coll); err != nil {
			return nil, err
		}
		for _, m := range coll.Members {
			if m.ID == "" && m.ODataID != "" {
				// A collection of links only: read the entry itself.
				if err := cn.get(m.ODataID, &m); err != nil {
					return nil, err
				}
			}
			out = append(out, m)
		}
		next = coll.NextLink
	}
	return out, nil
}

// evidence classifies a log's entries and places them relative to the
// current boot.
func (l readLog) evidence(systemURI string, boot *bmc.BootMarker) []bmc.Evidence {
	type classified struct {
		bmc.Evidence
		at    time.Time
		order int
	}
	var found []classified
	var lastBoot *classified
	for i, e := range l.entries {
		kind, use, action, isBoot := classify(e)
		at, _ := time.Parse(time.RFC3339, e.Created)
		c := classified{at: at, order: i}
		if isBoot {
			if lastBoot == nil || laterEntry(c.at, i, lastBoot.at, lastBoot.order) {
				b := c
				b.EntryID = e.ID
				lastBoot = &b
			}
			continue
		}
		if kind == "" {
			continue
		}
		c.Evidence = bmc.Evidence{Kind: kind, Key: l.source + "/" + e.ID, EntryID: e.ID, BMCTime: at,
			TimerUse: use, Action: action, Source: l.source, Message: e.Message}
		if o := e.Links.OriginOfCondition; o != nil && o.ODataID != "" {
			c.Origin = onlyPath(o.ODataID)
			c.OtherSystem = strings.Contains(c.Origin, "/Systems/") &&
				strings.TrimSuffix(c.Origin, "/") != strings.TrimSuffix(onlyPath(systemURI), "/")
		}
		found = append(found, c)
	}
	if lastBoot != nil && boot.EntryID == "" {
		boot.EntryID = lastBoot.EntryID
	}
	out := make([]bmc.Evidence, 0, len(found))
	for _, c := range found {
		switch {
		case !boot.LastReset.IsZero() && !c.at.IsZero():
			c.Boot = bmc.BootPrevious
			if !c.at.Before(boot.LastReset) {
				c.Boot = bmc.BootCurrent
			}
		case lastBoot != nil:
			c.Boot = bmc.BootPrevious
			if laterEntry(c.at, c.order, lastBoot.at, lastBoot.order) {
				c.Boot = bmc.BootCurrent
			}
		}
		out = append(out, c.Evidence)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// laterEntry orders two entries of one log: by the BMC's time when both
// have one and they differ, else by their place in the log.
func laterEntry(at time.Time, order int, than time.Time, thanOrder int) bool {
	if !at.IsZero() && !than.IsZero() && !at.Equal(than) {
		return at.After(than)
	}
	return order > thanOrder
}

var (
	timerUseRE = regexp.MustCompile(`(?i)timer use:?\s*(BIOS FRB2|BIOS/POST|OS ?Load|SMS/OS|OEM)`)
	// ASR0000–ASR0003: iDRAC's watchdog messages, by action.
	asrRE = regexp.MustCompile(`(?:^|\.)ASR000([0-3])$`)
	// OSE0000 (during OS load), OSE0001 (run time): iDRAC's critical stops.
	oseRE = regexp.MustCompile(`(?:^|\.)OSE000[01]$`)
)

// classify says what an entry records: a watchdog expiry (with the timer
// use and action where the BMC says them), an OS critical stop, a boot
// (the marker of a new boot), or nothing of interest ("").
func classify(e logEntryDoc) (kind bmc.EvidenceKind, use bmc.TimerUse, action string, isBoot bool) {
	msg := strings.ToLower(e.Message)
	id := e.MessageID
	switch {
	case asrRE.MatchString(id):
		return bmc.EvidenceWatchdogExpired, bmc.TimerUseUnknown,
			[]string{"None", "ResetSystem", "PowerDown", "PowerCycle"}[asrRE.FindStringSubmatch(id)[1][0]-'0'], false
	case oseRE.MatchString(id):
		return bmc.EvidenceOSCriticalStop, "", "", false
	case strings.HasSuffix(id, ".IPMIWatchdog"):
		arg := msg
		if len(e.Args) > 0 {
			arg = strings.ToLower(strings.Join(e.Args, ","))
		}
		if !strings.Contains(arg, "watchdog timeout") && !strings.HasPrefix(arg, "timer expired") {
			return "", "", "", false // enabled, disabled, a pre-timeout interrupt
		}
		return bmc.EvidenceWatchdogExpired, timerUse(arg), watchdogAction(arg), false
	case strings.HasSuffix(id, ".SELEntryAdded"):
		if len(e.Args) > 0 && platformEventIsCriticalStop(e.Args[0]) {
			return bmc.EvidenceOSCriticalStop, "", "", false
		}
		return "", "", "", false
	case strings.HasSuffix(id, ".DCPowerOn") || strings.HasSuffix(id, ".SYS1003"):
		return "", "", "", true
	}
	switch e.SensorType {
	case "Watchdog":
		if e.EntryCode != "" && e.EntryCode != "Assert" {
			return "", "", "", false
		}
		if strings.Contains(msg, "interrupt") && !strings.Contains(msg, "expired") {
			return "", "", "", false
		}
		return bmc.EvidenceWatchdogExpired, timerUse(msg), watchdogAction(msg), false
	case "OS Stop/Shutdown":
		if strings.Contains(msg, "critical stop") {
			return bmc.EvidenceOSCriticalStop, "", "", false
		}
		return "", "", "", false
	case "SystemBoot/Restart":
		return "", "", "", e.EntryCode == "" || e.EntryCode == "Assert"
	}
	if e.EntryType == "Oem" {
		switch {
		case strings.Contains(msg, "asr detected"):
			return bmc.EvidenceWatchdogExpired, bmc.TimerUseUnknown, "", false
		case strings.Contains(msg, "critical stop"):
			return bmc.EvidenceOSCriticalStop, "", "", false
		}
	}
	return "", "", "", false
}

func timerUse(text string) bmc.TimerUse {
	m := timerUseRE.FindStringSubmatch(text)
	if m == nil {
		return bmc.TimerUseUnknown
	}
	switch strings.ToUpper(strings.ReplaceAll(m[1], " ", "")) {
	case "BIOSFRB2":
		return bmc.TimerUseBIOSFRB2
	case "BIOS/POST":
		return bmc.TimerUseBIOSPOST
	case "OSLOAD":
		return bmc.TimerUseOSLoad
	case "SMS/OS":
		return bmc.TimerUseSMSOS
	case "OEM":
		return bmc.TimerUseOEM
	}
	return bmc.TimerUseUnknown
}

func watchdogAction(text string) string {
	t := strings.ToLower(text)
	switch {
	case strings.Contains(t, "hard reset"):
		return "ResetSystem"
	case strings.Contains(t, "power down"):
		return "PowerDown"
	case strings.Contains(t, "power cycle"):
		return "PowerCycle"
	case strings.Contains(t, "timer expired"):
		return "None"
	}
	return ""
}

// platformEventIsCriticalStop reads the hex of a Platform Event Message as
// OpenBMC's SELEntryAdded carries it (generator ID, EvM revision, sensor
// type, sensor number or event type, event data 1): sensor type 20h with
// offset 00h or 01h is an OS critical stop.
func platformEventIsCriticalStop(hex string) bool {
	b := make([]byte, 0, len(hex)/2)
	for i := 0; i+2 <= len(hex); i += 2 {
		v, err := strconv.ParseUint(hex[i:i+2], 16, 8)
		if err != nil {
			return false
		}
		b = append(b, byte(v))
	}
	return len(b) >= 6 && b[3] == 0x20 && (b[5]&0x0f == 0x00 || b[5]&0x0f == 0x01)
}

func lastSegment(uri string) string {
	uri = strings.TrimSuffix(onlyPath(uri), "/")
	return uri[strings.LastIndex(uri, "/")+1:]
}
