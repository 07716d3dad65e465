package redfishmock_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

// The mock's resources against DMTF's published JSON schemas, the ones the
// DMTF Redfish Service Validator checks a service with (it reads their CSDL
// twins; the JSON and CSDL forms carry the same properties, types, enums
// and required lists). testdata/dmtf-schemas holds only the schema files
// the mock's documents name in @odata.type, and the two they lean on
// (Resource.json, odata-v4.json), from DMTF's Redfish-Publications 2025.4
// under its BSD 3-Clause licence (testdata/dmtf-schemas/LICENSE.md). A reference to
// a schema file not vendored is not followed: that part is unchecked.
//
// What is checked, as the validator does: every property a document has
// is one its schema defines (additionalProperties false), every property
// the schema requires is there, values have the schema's types and enum
// members, recursively through objects and arrays.

const schemaDir = "testdata/dmtf-schemas"

var (
	schemaMu    sync.Mutex
	schemaFiles = map[string]map[string]any{}
)

// schemaFile loads a vendored schema file, or nil if it is not vendored.
func schemaFile(t *testing.T, name string) map[string]any {
	t.Helper()
	schemaMu.Lock()
	defer schemaMu.Unlock()
	if f, ok := schemaFiles[name]; ok {
		return f
	}
	b, err := os.ReadFile(filepath.Join(schemaDir, name))
	if os.IsNotExist(err) {
		schemaFiles[name] = nil
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	schemaFiles[name] = f
	return f
}

// schemaRef is a node of a schema with the file it came from.
type schemaRef struct {
	file string
	node map[string]any
}

// resolve follows $ref to a vendored definition; ok is false for a
// reference outside the vendored files.
func resolve(t *testing.T, at schemaRef) (schemaRef, bool) {
	for range 20 {
		ref, ok := at.node["$ref"].(string)
		if !ok {
			return at, true
		}
		file, frag, _ := strings.Cut(ref, "#")
		if file == "" {
			file = at.file
		} else {
			file = filepath.Base(file)
		}
		f := schemaFile(t, file)
		if f == nil {
			return schemaRef{}, false
		}
		node := any(f)
		for _, seg := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
			if seg == "" {
				continue
			}
			m, _ := node.(map[string]any)
			node = m[seg]
		}
		m, ok := node.(map[string]any)
		if !ok {
			t.Fatalf("%s: unresolvable reference %s", at.file, ref)
		}
		at = schemaRef{file: file, node: m}
	}
	t.Fatalf("%s: reference loop", at.file)
	return schemaRef{}, false
}

// check validates v against the schema node and returns what is wrong.
func check(t *testing.T, at schemaRef, v any, where string) []string {
	at, ok := resolve(t, at)
	if !ok {
		return nil
	}
	if alts, ok := at.node["anyOf"].([]any); ok {
		var first []string
		for _, a := range alts {
			m, _ := a.(map[string]any)
			errs := check(t, schemaRef{at.file, m}, v, where)
			if len(errs) == 0 {
				return nil
			}
			if first == nil || (v != nil && len(errs) < len(first)) {
				first = errs
			}
		}
		return first
	}
	var errs []string
	if types := typesOf(at.node); len(types) > 0 && !slices.Contains(types, jsonType(v)) &&
		!(jsonType(v) == "integer" && slices.Contains(types, "number")) {
		return []string{fmt.Sprintf("%s: %s, want %s", where, jsonType(v), strings.Join(types, " or "))}
	}
	if enum, ok := at.node["enum"].([]any); ok && v != nil && !slices.Contains(enum, v) {
		errs = append(errs, fmt.Sprintf("%s: %v is not one of %v", where, v, enum))
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := at.node["properties"].(map[string]any)
		if props == nil {
			return errs
		}
		var patterns []*regexp.Regexp
		if pp, ok := at.node["patternProperties"].(map[string]any); ok {
			for p := range pp {
				patterns = append(patterns, regexp.MustCompile(p))
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if ps, ok := props[k].(map[string]any); ok {
				errs = append(errs, check(t, schemaRef{at.file, ps}, x[k], where+"/"+k)...)
				continue
			}
			if !slices.ContainsFunc(patterns, func(re *regexp.Regexp) bool { return re.MatchString(k) }) &&
				at.node["additionalProperties"] == false {
				errs = append(errs, fmt.Sprintf("%s: property %s is not in the schema", where, k))
			}
		}
		if req, ok := at.node["required"].([]any); ok {
			for _, r := range req {
				if _, ok := x[r.(string)]; !ok {
					errs = append(errs, fmt.Sprintf("%s: required property %s is missing", where, r))
				}
			}
		}
	case []any:
		if items, ok := at.node["items"].(map[string]any); ok {
			for i, e := range x {
				errs = append(errs, check(t, schemaRef{at.file, items}, e, fmt.Sprintf("%s[%d]", where, i))...)
			}
		}
	}
	return errs
}

func typesOf(node map[string]any) []string {
	switch ty := node["type"].(type) {
	case string:
		return []string{ty}
	case []any:
		var out []string
		for _, x := range ty {
			out = append(out, x.(string))
		}
		return out
	}
	return nil
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case float64:
		if x == float64(int64(x)) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// schemaOf names the vendored schema of a document's @odata.type
// ("#ComputerSystem.v1_20_0.ComputerSystem" → ComputerSystem.v1_20_0.json,
// definition ComputerSystem).
func schemaOf(t *testing.T, odataType string) (schemaRef, string) {
	parts := strings.Split(strings.TrimPrefix(odataType, "#"), ".")
	def := parts[len(parts)-1]
	file := strings.Join(parts[:len(parts)-1], ".") + ".json"
	f := schemaFile(t, file)
	if f == nil {
		return schemaRef{}, file
	}
	defs, _ := f["definitions"].(map[string]any)
	node, ok := defs[def].(map[string]any)
	if !ok {
		t.Fatalf("%s has no definition %s", file, def)
	}
	return schemaRef{file, node}, file
}

// links collects every @odata.id in a document.
func links(v any, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "@odata.id" {
				out[strings.TrimSuffix(s, "/")] = true
			}
			links(e, out)
		}
	case []any:
		for _, e := range x {
			links(e, out)
		}
	}
}

// crawl GETs every resource reachable from the service root (and the
// resources only a client's actions create: a session, a task) and
// validates each against its schema.
func crawl(t *testing.T, h *harness, extra ...string) {
	t.Helper()
	todo := append([]string{"/redfish/v1"}, extra...)
	seen := map[string]bool{}
	checked := 0
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		if seen[p] || strings.Contains(p, "$metadata") || strings.Contains(p, "TaskMonitors") {
			continue
		}
		seen[p] = true
		resp := h.do(http.MethodGet, p, "", asAdmin())
		if resp.Code != http.StatusOK {
			t.Errorf("GET %s: %d", p, resp.Code)
			continue
		}
		doc := resp.JSON(t)
		typ, _ := doc["@odata.type"].(string)
		if typ == "" {
			t.Errorf("%s has no @odata.type", p)
			continue
		}
		sch, file := schemaOf(t, typ)
		if sch.node == nil {
			t.Errorf("%s: @odata.type %s names %s, which testdata/dmtf-schemas does not hold: vendor it from DMTF's Redfish-Publications", p, typ, file)
			continue
		}
		var v any
		if err := json.Unmarshal(resp.Body, &v); err != nil {
			t.Fatal(err)
		}
		for _, e := range check(t, sch, v, p) {
			t.Errorf("against %s: %s", file, e)
		}
		if link := resp.Header.Get("Link"); !strings.Contains(link, "rel=describedby") {
			t.Errorf("GET %s: no Link rel=describedby header (got %q)", p, link)
		}
		if resp.Header.Get("ETag") == "" {
			t.Errorf("GET %s: no ETag", p)
		}
		checked++
		next := map[string]bool{}
		links(v, next)
		for l := range next {
			// A "#/PowerSupplies/0" fragment names a part of a resource
			// already checked, not another resource.
			if i := strings.IndexByte(l, '#'); i >= 0 {
				l = l[:i]
			}
			if strings.HasPrefix(l, "/redfish/v1") && !seen[l] {
				todo = append(todo, l)
			}
		}
	}
	if checked < 10 {
		t.Errorf("only %d resources checked", checked)
	}
	t.Logf("%d resources checked against DMTF's schemas", checked)
}

func TestMockResourcesMatchDMTFSchemas(t *testing.T) {
	for _, p := range redfishmock.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			cfg := twoSystems()
			cfg.Profile = p
			cfg.PDUs = []redfishmock.PDUConfig{{Outlets: []redfishmock.OutletConfig{{Feeds: "1/1"}, {Feeds: "1/2"}, {}}}}
			h := newHarness(t, cfg)
			tok, location := h.login(adminUser, adminPass)
			_ = tok
			extra := []string{location, "/redfish/v1/SessionService/Sessions"}
			if sub := h.do(http.MethodPost, "/redfish/v1/EventService/Subscriptions",
				`{"Destination":"https://192.0.2.1/events","Protocol":"Redfish","SendHeartbeat":true,"HeartbeatIntervalMinutes":5}`, asAdmin()); sub.Code == http.StatusCreated {
				extra = append(extra, sub.Header.Get("Location"))
			} else if p != redfishmock.ProfileSushy {
				t.Fatalf("POST subscription: %d %s", sub.Code, sub.Body)
			}
			crawl(t, h, extra...)
		})
	}
}

// The DMTF Protocol Validator creates a session through the collection's
// Members URI and reads the sessions with a Link header.
func TestSessionsMembersTakesALogin(t *testing.T) {
	h := newHarness(t, twoSystems())
	resp := h.do(http.MethodPost, "/redfish/v1/SessionService/Sessions/Members", fmt.Sprintf(`{"UserName":%q,"Password":%q}`, adminUser, adminPass))
	if resp.Code != http.StatusCreated || resp.Header.Get("X-Auth-Token") == "" {
		t.Fatalf("POST Sessions/Members = %d %s, want 201 with a token", resp.Code, resp.Body)
	}
}
