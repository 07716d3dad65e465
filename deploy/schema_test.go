package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/test/controlplane"
)

// updateSchema rewrites the generated part of the values schema:
//
//	go test ./deploy -run TestValuesSchemaCoversTheAgentConfig -update-schema
var updateSchema = flag.Bool("update-schema", false, "rewrite the config and inventory parts of charts/bmcfence/values.schema.json")

func schemaPath(t *testing.T) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "charts", "bmcfence", "values.schema.json")
}

// The chart passes config (less namespace, which is the release's, and
// inventory, its own value) and inventory to the agent as its config.yaml:
// the schema of those two values is the agent's configuration, generated
// from internal/config's types so that a new setting cannot be refused by
// the chart, nor a removed one accepted.
func TestValuesSchemaCoversTheAgentConfig(t *testing.T) {
	path := schemaPath(t)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	props := schema["properties"].(map[string]any)
	cfg := schemaOf(reflect.TypeOf(config.Agent{}), "")
	delete(cfg["properties"].(map[string]any), "namespace")
	delete(cfg["properties"].(map[string]any), "inventory")
	delete(cfg["properties"].(map[string]any), "kubeconfig")
	cfg["description"] = "the agent's configuration (configs/agent.example.yaml) but namespace (the release's) and inventory (the inventory value)"
	inv := schemaOf(reflect.TypeOf(config.Inventory{}), "inventory")
	inv["description"] = "which node has which BMC: the agent's inventory (configs/agent.example.yaml)"
	want := map[string]any{"config": roundTrip(t, cfg), "inventory": roundTrip(t, inv)}
	got := map[string]any{"config": props["config"], "inventory": props["inventory"]}
	if *updateSchema {
		props["config"], props["inventory"] = want["config"], want["inventory"]
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(schema); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s: the config and inventory schemas are not internal/config's (-want +got); run\n  go test ./deploy -run TestValuesSchemaCoversTheAgentConfig -update-schema\n%s", path, diff)
	}
}

func roundTrip(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// enums are the settings with a fixed set of values, by dotted path (the
// agent's validation says the same).
var enums = map[string][]string{
	"detection":               {"builtin", "external", "both"},
	"log.format":              {"json", "console", "auto"},
	"log.level":               {"debug", "info", "warn", "error"},
	"inventory.source":        {"configmap", "metal3", "both"},
	"inventory.defaults.auth": {"basic", "session"},
	"inventory.nodes[].auth":  {"basic", "session"},
	// ignore is an entry's own word only (config refuses it in defaults).
	"inventory.defaults.chassisPower": {"auto", "check"},
	"inventory.nodes[].chassisPower":  {"auto", "check", "ignore"},
}

// intEnums are the integer settings with a fixed set of values: the IPMI
// cipher suites bmc/ipmi speaks (bmc.IPMICipherSuites), 0 for the default
// or no fallback.
var intEnums = map[string][]int{
	"inventory.defaults.cipherSuite":         {0, 3, 17},
	"inventory.defaults.cipherSuiteFallback": {0, 3, 17},
	"inventory.nodes[].cipherSuite":          {0, 3, 17},
	"inventory.nodes[].cipherSuiteFallback":  {0, 3, 17},
}

var durationType = reflect.TypeOf(time.Duration(0))

// schemaOf is the JSON schema of a config type as viper decodes it: keys
// as mapstructure names them (a field without a tag by its name with a
// lower-case first letter, as the documentation spells every key),
// embedded ",squash" structs inlined, durations as strings with a unit.
func schemaOf(t reflect.Type, path string) map[string]any {
	switch {
	case t == durationType:
		return map[string]any{"$ref": "#/definitions/duration"}
	case t.Kind() == reflect.Pointer:
		// An optional setting (nil: inherited), written as its value.
		return schemaOf(t.Elem(), path)
	case t.Kind() == reflect.Struct:
		props := map[string]any{}
		var add func(t reflect.Type)
		add = func(t reflect.Type) {
			for i := range t.NumField() {
				f := t.Field(i)
				if !f.IsExported() {
					continue
				}
				name, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
				if name == "-" {
					continue
				}
				if opts == "squash" {
					add(f.Type)
					continue
				}
				if name == "" {
					name = strings.ToLower(f.Name[:1]) + f.Name[1:]
				}
				sub := name
				if path != "" {
					sub = path + "." + name
				}
				props[name] = schemaOf(f.Type, sub)
			}
		}
		add(t)
		return map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	case t.Kind() == reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), path+"[]")}
	case t.Kind() == reflect.Bool:
		return map[string]any{"type": "boolean"}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		s := map[string]any{"type": "integer"}
		if e := intEnums[path]; e != nil {
			s["enum"] = e
		}
		return s
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		// helm --set passes 0.4 as a string; the agent decodes both.
		return map[string]any{"$ref": "#/definitions/number"}
	case t.Kind() == reflect.String:
		s := map[string]any{"type": "string"}
		if e := enums[path]; e != nil {
			s["enum"] = e
		}
		if path == "inventory.nodes[].system" {
			// A Redfish system Id is often a number (system: 1), which
			// the agent reads as the string it is.
			s["type"] = []string{"string", "integer"}
		}
		return s
	}
	panic("schemaOf: no JSON schema for " + t.String() + " at " + path)
}

// The schema refuses what would otherwise render silently (a misspelt
// key is dropped by the templates, a bare number becomes a duration the
// agent refuses at start, i.e. a crash loop), in `helm template` and in
// `helm lint` alike, naming the value.
func TestValuesSchemaRefusesTyposAndWrongTypes(t *testing.T) {
	helm, root := helmBin(t)
	chart := filepath.Join(root, "charts", "bmcfence")
	tests := []struct {
		name string
		sets []string
		// want is in helm's message: the value's path.
		want string
	}{
		{"misspelt placement.mode", []string{"placement.mod=workers"}, "mod"},
		{"misspelt top-level key", []string{"hostNetwrok=true"}, "hostNetwrok"},
		{"a duration without its unit", []string{"config.policy.suspectAfter=20"}, "suspectAfter"},
		{"a duration that is no duration", []string{"config.policy.fenceAfter=soon"}, "fenceAfter"},
		{"misspelt policy key", []string{"config.polcy.suspectAfter=20s"}, "polcy"},
		{"misspelt policy setting", []string{"config.policy.suspectAftr=20s"}, "suspectAftr"},
		{"unknown placement mode", []string{"placement.mode=everywhere"}, "mode"},
		{"replicas is a number", []string{"placement.replicas=two"}, "replicas"},
		{"hostNetwork is a boolean", []string{"hostNetwork=yes"}, "hostNetwork"},
		{"misspelt inventory node key", []string{"inventory.nodes[0].name=w1", "inventory.nodes[0].adress=https://10.0.0.1"}, "adress"},
		{"unknown inventory source", []string{"inventory.source=ironic"}, "source"},
		{"memory is a quantity", []string{"resources.limits.memory=lots"}, "memory"},
		{"misspelt resources key", []string{"resources.limit.memory=1Gi"}, "limit"},
		{"log level", []string{"logLevel=verbose"}, "logLevel"},
		{"a memory budget Go cannot read (GOMEMLIMIT takes MiB, not Mi)", []string{"memoryBudget=90Mi"}, "memoryBudget"},
		{"requests ttl without its unit", []string{"config.requests.ttl=24"}, "ttl"},
		{"chassis rule set aside for every node", []string{"inventory.defaults.chassisPower=ignore"}, "chassisPower"},
		{"a cipher suite the agent does not speak", []string{"inventory.defaults.cipherSuite=1"}, "cipherSuite"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, verb := range []string{"template", "lint"} {
				args := []string{verb}
				if verb == "template" {
					args = append(args, "bmcfence")
				}
				args = append(args, chart, "--namespace", "bmcfence-system")
				for _, s := range tt.sets {
					args = append(args, "--set", s)
				}
				out, err := exec.Command(helm, args...).CombinedOutput()
				if err == nil {
					t.Errorf("helm %s --set %s: accepted; want the schema to refuse it", verb, strings.Join(tt.sets, " --set "))
					continue
				}
				if !strings.Contains(string(out), "schema") || !strings.Contains(string(out), tt.want) {
					t.Errorf("helm %s --set %s: %v\n%s\nwant a schema error naming %q", verb, strings.Join(tt.sets, " --set "), err, out, tt.want)
				}
			}
		})
	}
}

// The values the documentation shows pass the schema: the defaults (helm
// lint --strict, as make chart runs it) and a full example.
func TestValuesSchemaAcceptsTheDocumentedValues(t *testing.T) {
	helm, root := helmBin(t)
	chart := filepath.Join(root, "charts", "bmcfence")
	if out, err := exec.Command(helm, "lint", "--strict", chart).CombinedOutput(); err != nil {
		t.Fatalf("helm lint --strict: %v\n%s", err, out)
	}
	if _, err := render(t,
		"config.dryRun=true", "config.detection=both", "config.policy.fenceAfter=10m", "config.policy.maxUnhealthyFraction=0.4",
		"config.policy.powerOffNotReadyAfter=0s", "config.requests.ttl=48h", "config.history.maxPerNode=20",
		"inventory.nodes[0].name=w1", "inventory.nodes[0].address=https://10.0.0.1", "inventory.nodes[0].system=1",
		"inventory.nodes[0].expectedUUID=4c4c4544-0042-3510-8052-b4c04f4e3532", "inventory.defaults.cipherSuite=17",
		"placement.mode=workers", "placement.replicas=3", "resources.requests.memory=256Mi", "resources.limits.memory=384Mi",
		"resources.requests.cpu=0.1", "metrics.prometheusRule.bmcErrorRate=0.2", "memoryBudget=300MiB",
	); err != nil {
		t.Fatal(err)
	}
}

// sizingRow is one row of the sizing table: values.yaml's "# sizing:" lines
// and the README's table under "Sizing".
type sizingRow struct {
	Nodes                               int
	RSS, CPU                            string
	RequestsCPU, RequestsMem, LimitsMem string
	Default                             bool
}

func cells(line string) []string {
	var out []string
	for _, c := range strings.Split(strings.Trim(line, "| "), "|") {
		out = append(out, strings.TrimSpace(c))
	}
	return out
}

func parseSizing(t *testing.T, c []string) sizingRow {
	t.Helper()
	var r sizingRow
	if _, err := fmt.Sscan(c[0], &r.Nodes); err != nil {
		t.Fatalf("sizing row %q: %v", c, err)
	}
	r.RSS, r.CPU, r.RequestsCPU, r.RequestsMem, r.LimitsMem = c[1], c[2], c[3], c[4], c[5]
	r.Default = len(c) > 6 && c[6] == "default"
	return r
}

// mebibytes reads "101.0 MiB" or "256Mi".
func mebibytes(t *testing.T, s string) float64 {
	t.Helper()
	var v float64
	s = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(s), "MiB"), "Mi")
	if _, err := fmt.Sscan(s, &v); err != nil {
		t.Fatalf("%q is not a size in MiB: %v", s, err)
	}
	return v
}

// The memory figures are true: each row of the sizing table (values.yaml
// and the README alike) has the RSS the README's scale table measured for
// that many nodes, a memory limit above it and a request at least it; the
// chart's default resources are the row it calls the default (and
// deploy/base's, by TestChartDefaultsAreTheKustomizeBase).
func TestSizingTableIsMeasured(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	values, err := os.ReadFile(filepath.Join(root, "charts", "bmcfence", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The scale runs before the README's growth table (its other node
	// counts) are kept in docs/scale/README.md.
	earlier, err := os.ReadFile(filepath.Join(root, "docs", "scale", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var fromValues []sizingRow
	for _, l := range strings.Split(string(values), "\n") {
		if rest, ok := strings.CutPrefix(l, "# sizing:"); ok && !strings.Contains(rest, "nodes") {
			fromValues = append(fromValues, parseSizing(t, cells(rest)))
		}
	}
	// The README's sizing table (its header names limits.memory) and the
	// scale tables: the README's growth table (its header starts "| nodes
	// × pods | agent RSS (peak)"; the peak counts) and the earlier runs'
	// (docs/scale/README.md: "| nodes | agent RSS"), each up to the first
	// line that is not a row.
	tableIn := func(name string, text []byte, header string) [][]string {
		_, after, ok := strings.Cut(string(text), header)
		if !ok {
			t.Fatalf("%s has no table headed %q", name, header)
		}
		var rows [][]string
		for _, l := range strings.Split(after, "\n")[2:] {
			if !strings.HasPrefix(l, "|") {
				break
			}
			rows = append(rows, cells(l))
		}
		return rows
	}
	table := func(header string) [][]string { return tableIn("README.md", readme, header) }
	var fromReadme []sizingRow
	for _, c := range table("| nodes | measured RSS | idle CPU | requests.cpu | requests.memory | limits.memory |") {
		fromReadme = append(fromReadme, parseSizing(t, c))
	}
	measured := map[int]float64{}
	for _, c := range tableIn("docs/scale/README.md", earlier, "| nodes | agent RSS |") {
		var n int
		fmt.Sscan(c[0], &n)
		measured[n] = max(measured[n], mebibytes(t, c[1]))
	}
	for _, c := range table("| nodes × pods | agent RSS (peak) |") {
		var n int
		var rss, peak float64
		fmt.Sscan(c[0], &n)
		if _, err := fmt.Sscanf(c[1], "%f MiB (%f)", &rss, &peak); err != nil {
			t.Fatalf("the README's growth table gives %d nodes the RSS %q, not \"N MiB (PEAK)\"", n, c[1])
		}
		measured[n] = max(measured[n], peak)
	}
	// A steady line gives the peak too, where one was measured; the
	// table the RSS at the end. The largest of them is the measured RSS.
	for _, text := range [][]byte{readme, earlier} {
		for _, m := range regexp.MustCompile(`scale: steady: ([0-9]+) nodes, [^:]*: agent RSS [0-9.]+ MiB \(peak ([0-9.]+)`).FindAllStringSubmatch(string(text), -1) {
			var n int
			fmt.Sscan(m[1], &n)
			measured[n] = max(measured[n], mebibytes(t, m[2]+" MiB"))
		}
	}
	if len(fromValues) == 0 {
		t.Fatal("values.yaml has no \"# sizing:\" rows")
	}
	readmeRows := map[int]sizingRow{}
	for _, r := range fromReadme {
		r.Default = false
		readmeRows[r.Nodes] = r
	}
	defaults := 0
	for _, r := range fromValues {
		rss, ok := measured[r.Nodes]
		if !ok {
			t.Errorf("sizing for %d nodes: the README's scale table has no measurement for %d nodes", r.Nodes, r.Nodes)
			continue
		}
		if got := mebibytes(t, r.RSS); got != rss {
			t.Errorf("sizing for %d nodes says RSS %s; the README measured %.1f MiB", r.Nodes, r.RSS, rss)
		}
		if lim := mebibytes(t, r.LimitsMem); lim < rss {
			t.Errorf("sizing for %d nodes: limits.memory %s is below the measured RSS %.1f MiB: the agent would be OOM-killed", r.Nodes, r.LimitsMem, rss)
		}
		if req := mebibytes(t, r.RequestsMem); req < rss {
			t.Errorf("sizing for %d nodes: requests.memory %s is below the measured RSS %.1f MiB", r.Nodes, r.RequestsMem, rss)
		}
		want := r
		want.Default = false
		if diff := cmp.Diff(want, readmeRows[r.Nodes]); diff != "" {
			t.Errorf("the README's sizing row for %d nodes is not values.yaml's (-values +README):\n%s", r.Nodes, diff)
		}
		if r.Default {
			defaults++
			objs, err := render(t)
			if err != nil {
				t.Fatal(err)
			}
			c := get(byKey(objs)["DaemonSet bmcfence-system/bmcfence-agent"], "spec", "template", "spec", "containers").([]any)[0].(object)
			wantRes := object{"requests": object{"cpu": r.RequestsCPU, "memory": r.RequestsMem}, "limits": object{"memory": r.LimitsMem}}
			if diff := cmp.Diff(wantRes, c["resources"]); diff != "" {
				t.Errorf("the chart's default resources are not the default row's (%d nodes) (-row +chart):\n%s", r.Nodes, diff)
			}
		}
	}
	if defaults != 1 {
		t.Errorf("%d sizing rows marked default, want one", defaults)
	}
	if len(fromReadme) != len(fromValues) {
		t.Errorf("README has %d sizing rows, values.yaml %d", len(fromReadme), len(fromValues))
	}
}
