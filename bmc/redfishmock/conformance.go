package redfishmock

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The parts of DSP0266 (Redfish Specification 1.15) a client may rely on
// that cost the mock little: the CSDL metadata document, the OData service
// document, the describedby Link header, the Allow header (set in
// serveRedfish), OData-Version handling (412 for another version), an
// AccountService with the predefined roles, and a TaskService for the
// profiles that answer a Reset with 202.

// schemaBase is where DMTF publishes the JSON schemas a Link rel=describedby
// points to.
const schemaBase = "http://redfish.dmtf.org/schemas/v1/"

// writeDescribed answers 200 with v and a Link header naming its schema
// (DSP0266 "Link header": rel=describedby on GET of a resource).
func writeDescribed(w http.ResponseWriter, schema string, v any) {
	w.Header().Set("Link", "<"+schemaBase+schema+".json>; rel=describedby")
	// An ETag on every resource (DSP0266 "ETags": a service should give
	// one on GET of ManagerAccount; the Protocol Validator checks it), so
	// clients can make conditional requests.
	if w.Header().Get("ETag") == "" {
		w.Header().Set("ETag", etagOf(v))
	}
	writeJSON(w, http.StatusOK, v)
}

// etagOf is a strong ETag for a document: it changes whenever the
// document does.
func etagOf(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return `"` + fmt.Sprintf("%x", sum[:8]) + `"`
}

// metadataSchemas are the CSDL namespaces the mock's documents use.
var metadataSchemas = []string{
	"ServiceRoot", "ComputerSystemCollection", "ComputerSystem", "ChassisCollection", "Chassis",
	"ManagerCollection", "Manager", "SessionService", "SessionCollection", "Session",
	"AccountService", "ManagerAccountCollection", "ManagerAccount", "RoleCollection", "Role",
	"TaskService", "TaskCollection", "Task", "ActionInfo", "Message",
	"EventService", "EventDestinationCollection", "EventDestination", "Event",
	"Power", "PowerSubsystem", "PowerSupplyCollection", "PowerSupply",
	"PowerEquipment", "PowerDistributionCollection", "PowerDistribution", "OutletCollection", "Outlet",
	"LogServiceCollection", "LogService", "LogEntryCollection", "LogEntry",
}

// writeMetadata serves /redfish/v1/$metadata: the CSDL document that names
// every schema the service uses (DSP0266 "Service metadata").
func writeMetadata(w http.ResponseWriter) {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	b.WriteString(`<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">` + "\n")
	for _, ns := range metadataSchemas {
		fmt.Fprintf(&b, `  <edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/%s_v1.xml">`+"\n", ns)
		fmt.Fprintf(&b, `    <edmx:Include Namespace="%s"/>`+"\n", ns)
		b.WriteString("  </edmx:Reference>\n")
	}
	b.WriteString(`  <edmx:DataServices>` + "\n")
	b.WriteString(`    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Service">` + "\n")
	b.WriteString(`      <EntityContainer Name="Service" Extends="ServiceRoot.v1_15_0.ServiceContainer"/>` + "\n")
	b.WriteString("    </Schema>\n  </edmx:DataServices>\n</edmx:Edmx>\n")
	h := w.Header()
	h.Set("Content-Type", "application/xml")
	h.Set("OData-Version", "4.0")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(b.String()))
}

// odataDocument is /redfish/v1/odata: the service's top-level resources.
func odataDocument(sessions bool) map[string]any {
	type entry struct {
		Name string `json:"name"`
		Kind string `json:"kind"`
		URL  string `json:"url"`
	}
	value := []entry{
		{"Service", "Singleton", "/redfish/v1/"},
		{"Systems", "Singleton", "/redfish/v1/Systems"},
		{"Chassis", "Singleton", "/redfish/v1/Chassis"},
		{"Managers", "Singleton", "/redfish/v1/Managers"},
		{"AccountService", "Singleton", "/redfish/v1/AccountService"},
		{"TaskService", "Singleton", "/redfish/v1/TaskService"},
	}
	if sessions {
		value = append(value, entry{"SessionService", "Singleton", "/redfish/v1/SessionService"},
			entry{"Sessions", "Singleton", "/redfish/v1/SessionService/Sessions"})
	}
	return map[string]any{"@odata.context": "/redfish/v1/$metadata", "value": value}
}

// resetActionInfo is a system's ResetActionInfo (the profiles that
// advertise AllowableValues there: Lenovo XCC, OpenBMC).
func resetActionInfo(s *system) map[string]any {
	s.mu.Lock()
	allowed := s.allowedResets()
	s.mu.Unlock()
	return map[string]any{
		"@odata.id":   "/redfish/v1/Systems/" + s.spec.id + "/ResetActionInfo",
		"@odata.type": "#ActionInfo.v1_3_0.ActionInfo",
		"Id":          "ResetActionInfo",
		"Name":        "Reset Action Info",
		"Parameters": []any{map[string]any{
			"Name": "ResetType", "Required": true, "DataType": "String", "AllowableValues": allowed,
		}},
	}
}

// The predefined roles of DSP0268's Role schema.
var predefinedRoles = map[string][]string{
	"Administrator": {"Login", "ConfigureManager", "ConfigureUsers", "ConfigureSelf", "ConfigureComponents"},
	"Operator":      {"Login", "ConfigureSelf", "ConfigureComponents"},
	"ReadOnly":      {"Login", "ConfigureSelf"},
}

var roleOrder = []string{"Administrator", "Operator", "ReadOnly"}

func accountService() map[string]any {
	return map[string]any{
		"@odata.id":      "/redfish/v1/AccountService",
		"@odata.type":    "#AccountService.v1_15_0.AccountService",
		"Id":             "AccountService",
		"Name":           "Account Service",
		"ServiceEnabled": true,
		"Accounts":       link{"/redfish/v1/AccountService/Accounts"},
		"Roles":          link{"/redfish/v1/AccountService/Roles"},
	}
}

func writeRoles(w http.ResponseWriter) {
	members := make([]link, 0, len(roleOrder))
	for _, r := range roleOrder {
		members = append(members, link{"/redfish/v1/AccountService/Roles/" + r})
	}
	writeDescribed(w, "RoleCollection", collectionDoc{
		ODataContext: "/redfish/v1/$metadata#RoleCollection.RoleCollection", ODataID: "/redfish/v1/AccountService/Roles",
		ODataType: "#RoleCollection.RoleCollection", Name: "Roles", Count: len(members), Members: members,
	})
}

func writeRole(w http.ResponseWriter, id string) {
	privs, ok := predefinedRoles[id]
	if !ok {
		writeNotFound(w, "/redfish/v1/AccountService/Roles/"+id)
		return
	}
	writeDescribed(w, "Role.v1_3_1", map[string]any{
		"@odata.id":          "/redfish/v1/AccountService/Roles/" + id,
		"@odata.type":        "#Role.v1_3_1.Role",
		"Id":                 id,
		"Name":               id + " Role",
		"RoleId":             id,
		"IsPredefined":       true,
		"AssignedPrivileges": privs,
	})
}

// accounts lists the users a principal may see: the administrator sees
// everyone, a system-scoped user only itself. Account Ids are positions.
func (m *Mock) accounts(who principal) []string {
	names := []string{m.cfg.username}
	for _, s := range m.systems {
		if s.spec.username != "" {
			names = append(names, s.spec.username)
		}
	}
	if who.scope == nil {
		return names
	}
	return []string{who.username}
}

func (m *Mock) writeAccounts(w http.ResponseWriter, who principal) {
	all := m.accounts(principal{})
	var members []link
	for i, name := range all {
		for _, v := range m.accounts(who) {
			if v == name {
				members = append(members, link{"/redfish/v1/AccountService/Accounts/" + strconv.Itoa(i+1)})
			}
		}
	}
	writeDescribed(w, "ManagerAccountCollection", collectionDoc{
		ODataContext: "/redfish/v1/$metadata#ManagerAccountCollection.ManagerAccountCollection",
		ODataID:      "/redfish/v1/AccountService/Accounts", ODataType: "#ManagerAccountCollection.ManagerAccountCollection",
		Name: "Accounts", Count: len(members), Members: members,
	})
}

func (m *Mock) writeAccount(w http.ResponseWriter, who principal, id string) {
	all := m.accounts(principal{})
	n, err := strconv.Atoi(id)
	if err != nil || n < 1 || n > len(all) {
		writeNotFound(w, "/redfish/v1/AccountService/Accounts/"+id)
		return
	}
	name := all[n-1]
	visible := false
	for _, v := range m.accounts(who) {
		visible = visible || v == name
	}
	if !visible {
		writeNotFound(w, "/redfish/v1/AccountService/Accounts/"+id)
		return
	}
	role := "Administrator"
	if n > 1 {
		role = "Operator" // a system-scoped user may power its system, nothing more
	}
	writeDescribed(w, "ManagerAccount.v1_10_0", map[string]any{
		"@odata.id":   "/redfish/v1/AccountService/Accounts/" + id,
		"@odata.type": "#ManagerAccount.v1_10_0.ManagerAccount",
		"Id":          id,
		"Name":        "User Account",
		"UserName":    name,
		"RoleId":      role,
		// Required by ManagerAccount v1.4 and later.
		"AccountTypes": []string{"Redfish"},
		"Enabled":      true,
		"Locked":       false,
		"Password":     nil, // DSP0268: the password reads null
		"Links":        map[string]any{"Role": link{"/redfish/v1/AccountService/Roles/" + role}},
	})
}
