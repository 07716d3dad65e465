package hack

// The README says what the code does: every package path, flag, metric and
// make target it names exists, the agent's grants it lists are exactly what
// deploy/base renders, the versions the manifests pin agree with the
// CHANGELOG, and no document describes an ipmitool the code dropped (issue
// 23: README, docs/design.md and a Dockerfile did).

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/bmcfence/bmcfence/internal/metrics"
)

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// codeOf returns what a Markdown text shows as code: each line of a fenced
// block, and each inline span (a span may wrap across lines; its line
// breaks become spaces).
func codeOf(md string) []string {
	var code []string
	var prose strings.Builder
	fenced, cont := false, ""
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			prose.WriteString("\n")
			continue
		}
		if fenced {
			// A shell line continued with a backslash is one command.
			if l, ok := strings.CutSuffix(line, "\\"); ok {
				cont += l + " "
				continue
			}
			code = append(code, cont+line)
			cont = ""
			continue
		}
		prose.WriteString(line + "\n")
	}
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(prose.String(), -1) {
		code = append(code, strings.Join(strings.Fields(m[1]), " "))
	}
	return code
}

// repoPath finds what reads as a path into the repository (not bin/, not
// part of a URL or another path).
var repoPath = regexp.MustCompile(`(?:^|[\s(\[=:,'"])(?:\./)?((?:api|bmc|client|cluster|cmd|configs|deploy|charts|docs|drain|fence|hack|internal|test)/[A-Za-z0-9_./…-]*)`)

func TestReadmePathsExist(t *testing.T) {
	problems, n := pathProblems(readFile(t, "README.md"), "..")
	report(t, problems)
	if n < 20 {
		t.Errorf("found only %d paths in README.md: the pattern is broken", n)
	}
}

// pathProblems checks every repository path md names (in code and links)
// against the tree at root.
func pathProblems(md, root string) (problems []string, n int) {
	texts := codeOf(md)
	for _, m := range regexp.MustCompile(`\]\(([^)#]+)`).FindAllStringSubmatch(md, -1) {
		texts = append(texts, " "+m[1])
	}
	seen := map[string]bool{}
	for _, text := range texts {
		for _, m := range repoPath.FindAllStringSubmatch(text, -1) {
			p := strings.TrimRight(m[1], ".,:;…")
			p = strings.TrimSuffix(strings.TrimSuffix(p, "..."), "/")
			if seen[p] {
				continue
			}
			seen[p] = true
			// A Go identifier in a package: bmc/redfish.Stream.
			if m := regexp.MustCompile(`^(.+)\.[A-Z]\w*$`).FindStringSubmatch(p); m != nil {
				p = m[1]
			}
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				problems = append(problems, fmt.Sprintf("README.md names %s, which is not in the repository", p))
			}
		}
	}
	return problems, len(seen)
}

func report(t *testing.T, problems []string) {
	t.Helper()
	for _, p := range problems {
		t.Error(p)
	}
}

func TestReadmeMakeTargetsExist(t *testing.T) {
	problems, n := makeTargetProblems(readFile(t, "README.md"), readFile(t, "Makefile"))
	report(t, problems)
	if n < 5 {
		t.Errorf("found only %d make targets in README.md: the pattern is broken", n)
	}
}

func makeTargetProblems(md, makefile string) (problems []string, n int) {
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Za-z][\w-]*)\s*:`).FindAllStringSubmatch(makefile, -1) {
		targets[m[1]] = true
	}
	for _, code := range codeOf(md) {
		for _, m := range regexp.MustCompile(`(?:^|[\s;&|(])make\s+([a-z][a-z0-9-]*)`).FindAllStringSubmatch(code, -1) {
			n++
			if !targets[m[1]] {
				problems = append(problems, fmt.Sprintf("README.md names `make %s`: the Makefile has no target %s", m[1], m[1]))
			}
		}
	}
	return problems, n
}

// The README's metrics, with their labels, are the agent's.
func TestReadmeMetricsExist(t *testing.T) {
	problems, n := metricProblems(readFile(t, "README.md"), exportedMetrics(t))
	report(t, problems)
	if n < 10 {
		t.Errorf("found only %d metrics in README.md: the pattern is broken", n)
	}
}

// exportedMetrics is every bmcfence_* metric of the agent → its labels
// ("result,reason").
func exportedMetrics(t *testing.T) map[string]string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 64)
	go func() { metrics.New().Describe(ch); close(ch) }()
	exported := map[string]string{}
	descRE := regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)
	for d := range ch {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		exported[m[1]] = m[2]
	}
	return exported
}

func metricProblems(md string, exported map[string]string) (problems []string, n int) {
	named := regexp.MustCompile(`\b(bmcfence_[a-z_]+)(\{([a-z_,]*)(=[^}]*)?\})?`)
	for _, code := range codeOf(md) {
		for _, m := range named.FindAllStringSubmatch(code, -1) {
			n++
			labels, ok := exported[m[1]]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("README.md names the metric %s, which the agent does not export", m[1]))
			case m[2] != "" && m[4] == "" && m[3] != labels:
				problems = append(problems, fmt.Sprintf("README.md gives %s the labels {%s}; the agent's are {%s}", m[1], m[3], labels))
			case m[4] != "" && !slices.Contains(strings.Split(labels, ","), m[3]):
				problems = append(problems, fmt.Sprintf("README.md selects %s by %s; the agent's labels are {%s}", m[1], m[3], labels))
			}
		}
	}
	return problems, n
}

// commandFlags are the flags each command accepts: "kubectl-fence bmc
// status" → {address, system, …}, read from the built binaries' --help.
type commandFlags map[string]map[string]bool

var (
	flagsOnce sync.Once
	flagsOf   commandFlags
	flagsErr  error
)

var (
	flagLine    = regexp.MustCompile(`^\s+(?:-\S, )?--([a-z0-9][a-z0-9-]*)`)
	commandLine = regexp.MustCompile(`^  ([a-z][a-z0-9-]*)\s`)
)

// builtFlags reads every command's flags from its --help (fence-agent,
// redfish-mock and the whole kubectl-fence CLI, as make builds them).
func builtFlags(t *testing.T) commandFlags {
	t.Helper()
	flagsOnce.Do(func() {
		dir := builtCommands(t)
		flagsOf = commandFlags{}
		for _, c := range []string{"fence-agent", "redfish-mock", "bmcfence-cli"} {
			name := c
			if c == "bmcfence-cli" {
				name = "kubectl-fence" // the whole CLI, as kubectl runs it
			}
			if err := readHelp(filepath.Join(dir, c), name, nil, flagsOf); err != nil {
				flagsErr = err
				return
			}
		}
	})
	if flagsErr != nil {
		t.Fatal(flagsErr)
	}
	return flagsOf
}

// readHelp records the flags of `bin path… --help` and descends into its
// subcommands.
func readHelp(bin, name string, path []string, into commandFlags) error {
	out, _ := exec.Command(bin, append(slices.Clone(path), "--help")...).CombinedOutput()
	key := strings.Join(append([]string{name}, path...), " ")
	into[key] = map[string]bool{"help": true}
	var subs []string
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " ") {
			section = line
			continue
		}
		if m := flagLine.FindStringSubmatch(line); m != nil {
			into[key][m[1]] = true
		}
		if m := commandLine.FindStringSubmatch(line); m != nil && section == "Available Commands:" && m[1] != "help" && m[1] != "completion" {
			subs = append(subs, m[1])
		}
	}
	if len(into[key]) < 2 {
		return fmt.Errorf("%s --help lists no flags:\n%s", key, out)
	}
	for _, s := range subs {
		if err := readHelp(bin, name, append(slices.Clone(path), s), into); err != nil {
			return err
		}
	}
	return nil
}

// Every --flag the README shows for one of our commands is that command's;
// a flag shown alone is some command's.
func TestReadmeFlagsExist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the three commands")
	}
	problems, n := flagProblems(readFile(t, "README.md"), builtFlags(t))
	report(t, problems)
	if n < 30 {
		t.Errorf("checked only %d flags in README.md: the pattern is broken", n)
	}
}

// othersFlags are flags the README shows alone, in prose about another
// program, with that program.
var othersFlags = map[string]string{
	"disable-force-detach-on-timeout": "kube-controller-manager",
	"ca-bundle":                       "DMTF's Redfish-Protocol-Validator",
}

func flagProblems(md string, cmds commandFlags) (problems []string, n int) {
	anyOf := map[string]bool{}
	for _, fl := range cmds {
		for f := range fl {
			anyOf[f] = true
		}
	}
	flagRE := regexp.MustCompile(`^--([a-z0-9][a-z0-9-]*)`)
	envRE := regexp.MustCompile(`^[A-Z_]+=`)
	for _, code := range codeOf(md) {
		code, _, _ = strings.Cut(code, " #")
		for _, part := range regexp.MustCompile(`\||&&|;`).Split(code, -1) {
			words := strings.Fields(part)
			for len(words) > 0 && envRE.MatchString(words[0]) {
				words = words[1:] // BMC_PASSWORD=… kubectl-fence …
			}
			if len(words) == 0 {
				continue
			}
			var valid map[string]bool
			shownAs := ""
			switch base := filepath.Base(words[0]); {
			case base == "kubectl" && len(words) > 1 && words[1] == "fence":
				valid, shownAs = commandOf(cmds, "kubectl-fence", words[2:])
			case base == "kubectl-fence" || base == "bmcfence-cli":
				valid, shownAs = commandOf(cmds, "kubectl-fence", words[1:])
			case base == "fence-agent" || base == "redfish-mock":
				valid, shownAs = cmds[base], base
			case strings.HasPrefix(words[0], "--"):
				valid, shownAs = anyOf, "any of our commands"
			default:
				continue // another program's flags (kubectl, helm, fence_redfish, …)
			}
			for _, w := range words {
				m := flagRE.FindStringSubmatch(w)
				if m == nil {
					continue
				}
				n++
				if shownAs == "any of our commands" && othersFlags[m[1]] != "" {
					continue
				}
				if !valid[m[1]] {
					problems = append(problems, fmt.Sprintf("README.md shows --%s for %s, which has no such flag (in %q)", m[1], shownAs, strings.TrimSpace(part)))
				}
			}
		}
	}
	return problems, n
}

// commandOf walks args down the command tree: "bmc status --address x" is
// kubectl-fence bmc status.
func commandOf(cmds commandFlags, root string, args []string) (map[string]bool, string) {
	key := root
	for _, a := range args {
		if _, ok := cmds[key+" "+a]; !ok {
			break
		}
		key += " " + a
	}
	return cmds[key], key
}

// grant is one verb on one resource (and name) somewhere.
type grant struct{ where, group, resource, name, verb string }

func (g grant) String() string {
	return fmt.Sprintf("%s %s %s %s %s", g.where, g.group, g.resource, g.name, g.verb)
}

// The README's table of the agent's grants is exactly what deploy/base
// binds to its ServiceAccount; every ClusterRole deploy/base renders is
// named in the README.
func TestReadmeListsTheAgentsGrants(t *testing.T) {
	rendered, clusterRoles := renderedGrants(t)
	report(t, grantProblems(readFile(t, "README.md"), rendered, clusterRoles))
}

// grantProblems compares the README's table of the agent's grants with
// what deploy/base binds to it, both ways.
func grantProblems(md string, rendered map[grant]bool, clusterRoles []string) (problems []string) {
	listed := map[grant]bool{}
	i := strings.Index(md, "**What the agent may do.**")
	if i < 0 {
		return []string{`README.md has no "**What the agent may do.**" table`}
	}
	rows := 0
	for _, line := range strings.Split(md[i:], "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			if rows > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		if len(cells) < 5 || cells[0] == "Where" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		rows++
		for _, res := range splitList(cells[2]) {
			for _, name := range splitList(cells[3]) {
				for _, verb := range splitList(cells[4]) {
					listed[grant{cells[0], cells[1], res, name, verb}] = true
				}
			}
		}
	}
	for _, g := range sortedGrants(rendered) {
		if !listed[g] {
			problems = append(problems, fmt.Sprintf("deploy/base grants the agent %q; README.md's table does not list it", g))
		}
	}
	for _, g := range sortedGrants(listed) {
		if !rendered[g] {
			problems = append(problems, fmt.Sprintf("README.md lists %q; deploy/base does not grant it", g))
		}
	}
	for _, name := range clusterRoles {
		if !strings.Contains(md, "`"+name+"`") {
			problems = append(problems, fmt.Sprintf("deploy/base renders the ClusterRole %s; README.md does not name it", name))
		}
	}
	return problems
}

func splitList(cell string) []string {
	var out []string
	for _, s := range strings.Split(cell, ",") {
		if s = strings.Trim(strings.TrimSpace(s), "`"); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func sortedGrants(m map[grant]bool) []grant {
	var out []grant
	for g := range m {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

type rbacObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Rules []struct {
		APIGroups       []string `json:"apiGroups"`
		Resources       []string `json:"resources"`
		ResourceNames   []string `json:"resourceNames"`
		NonResourceURLs []string `json:"nonResourceURLs"`
		Verbs           []string `json:"verbs"`
	} `json:"rules"`
	RoleRef struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	} `json:"roleRef"`
	Subjects []struct {
		Kind      string `json:"kind"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"subjects"`
}

// renderedGrants renders deploy/base as `kubectl apply -k` would (kustomize's
// own library) and expands every rule bound to the agent's ServiceAccount.
func renderedGrants(t *testing.T) (map[grant]bool, []string) {
	t.Helper()
	const agentNS, agentSA = "bmcfence-system", "bmcfence-agent"
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join("..", "deploy", "base"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]rbacObject{} // "ClusterRole/x", "Role/ns/x"
	var bindings []rbacObject
	var clusterRoles []string
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var o rbacObject
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatal(err)
		}
		switch o.Kind {
		case "ClusterRole":
			roles["ClusterRole/"+o.Metadata.Name] = o
			clusterRoles = append(clusterRoles, o.Metadata.Name)
		case "Role":
			roles["Role/"+o.Metadata.Namespace+"/"+o.Metadata.Name] = o
		case "ClusterRoleBinding", "RoleBinding":
			bindings = append(bindings, o)
		}
	}
	grants := map[grant]bool{}
	for _, b := range bindings {
		ours := false
		for _, s := range b.Subjects {
			ours = ours || (s.Kind == "ServiceAccount" && s.Name == agentSA && s.Namespace == agentNS)
		}
		if !ours {
			continue
		}
		where, key := "cluster", "ClusterRole/"+b.RoleRef.Name
		if b.Kind == "RoleBinding" {
			where = b.Metadata.Namespace
			if where == agentNS {
				where = "its namespace"
			}
			if b.RoleRef.Kind == "Role" {
				key = "Role/" + b.Metadata.Namespace + "/" + b.RoleRef.Name
			}
		}
		role, ok := roles[key]
		if !ok {
			t.Fatalf("%s %s binds %s, which deploy/base does not render", b.Kind, b.Metadata.Name, key)
		}
		for _, rule := range role.Rules {
			if len(rule.NonResourceURLs) > 0 {
				t.Errorf("%s grants the agent non-resource URLs %v: the README's table has no row for them", key, rule.NonResourceURLs)
			}
			names := rule.ResourceNames
			if len(names) == 0 {
				names = []string{"any"}
			}
			for _, g := range rule.APIGroups {
				if g == "" {
					g = "core"
				}
				for _, res := range rule.Resources {
					for _, n := range names {
						for _, v := range rule.Verbs {
							grants[grant{where, g, res, n, v}] = true
						}
					}
				}
			}
		}
	}
	if len(grants) < 20 {
		t.Fatalf("found only %d grants of the agent in deploy/base", len(grants))
	}
	return grants, clusterRoles
}

// The manifests pin the release they belong to, and the CHANGELOG knows it:
// either that release is there, or it is the one [Unreleased] becomes.
func TestManifestVersionsAgreeWithTheChangelog(t *testing.T) {
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "charts/bmcfence/Chart.yaml")), &chart); err != nil {
		t.Fatal(err)
	}
	var kust struct {
		Images []struct {
			NewTag string `json:"newTag"`
		} `json:"images"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "deploy/base/kustomization.yaml")), &kust); err != nil {
		t.Fatal(err)
	}
	if len(kust.Images) != 1 {
		t.Fatalf("deploy/base/kustomization.yaml: %d images, want 1", len(kust.Images))
	}
	tag := kust.Images[0].NewTag
	if chart.AppVersion != tag || "v"+chart.Version != tag {
		t.Errorf("deploy/base's image tag %s, the chart's appVersion %s and version %s must name one release", tag, chart.AppVersion, chart.Version)
	}
	headings := regexp.MustCompile(`(?m)^## \[([^\]]+)\]`).FindAllStringSubmatch(readFile(t, "CHANGELOG.md"), -1)
	if len(headings) == 0 {
		t.Fatal("CHANGELOG.md has no release headings")
	}
	for _, h := range headings {
		if h[1] == tag {
			return // released
		}
	}
	if headings[0][1] != "Unreleased" {
		t.Errorf("the manifests pin %s, which CHANGELOG.md neither lists nor holds as [Unreleased] (its newest is [%s])", tag, headings[0][1])
	}
	if want := "The next release is " + tag; !strings.Contains(strings.Join(strings.Fields(readFile(t, "README.md")), " "), want) {
		t.Errorf("README.md does not say %q: the manifests pin an image that is not published yet", want)
	}
}

// `grep -rn ipmitool README.md docs/design.md` finds only the test peers:
// the agent and the CLI speak IPMI themselves. And no second build: a
// Dockerfile that installed ipmitool described an image `make image` never
// made.
func TestNoIpmitoolOutsideTheTestPeers(t *testing.T) {
	for _, f := range []string{"README.md", "docs/design.md"} {
		for i, line := range strings.Split(readFile(t, f), "\n") {
			if strings.Contains(line, "ipmitool") && !strings.Contains(line, "test") {
				t.Errorf("%s:%d names ipmitool outside the test peers: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
	if _, err := os.Stat(filepath.Join("..", "Dockerfile")); err == nil {
		t.Errorf("a Dockerfile is back: `make image` is the one build (hack/mkimage); a second one drifts from it")
	}
}

// Each check finds the mistake it is for: a README naming what does not
// exist, or leaving out a grant, fails.
func TestReadmeChecksFindTheirMistakes(t *testing.T) {
	md := "Build with `make build` and `make deploy-all`; see `bmc/dial/` and `bmc/bmclib/`.\n" +
		"Metrics: `bmcfence_fences_total{result,reason}`, `bmcfence_fences_total{node}`, `bmcfence_no_such_total`.\n" +
		"```sh\nkubectl fence bmc status --address https://x --adress https://y\nfence-agent --dry-run --dryrun\n```\n" +
		"Alone: `--settle-reads`, `--settle-read`.\n\n" +
		"**What the agent may do.**\n\n| Where | API group | Resources | Names | Verbs | Why |\n|---|---|---|---|---|---|\n" +
		"| cluster | core | nodes | any | get, list, delete | |\n\nThe `bmcfence-viewer` role.\n"
	cmds := commandFlags{
		"kubectl-fence":            {"help": true},
		"kubectl-fence bmc":        {"help": true},
		"kubectl-fence bmc status": {"help": true, "address": true},
		"fence-agent":              {"help": true, "dry-run": true},
		"kubectl-fence bmc off":    {"help": true, "settle-reads": true},
	}
	rendered := map[grant]bool{{"cluster", "core", "nodes", "any", "get"}: true, {"cluster", "core", "nodes", "any", "list"}: true, {"cluster", "core", "nodes", "any", "patch"}: true}
	var got []string
	p, _ := pathProblems(md, "..")
	got = append(got, p...)
	p, _ = makeTargetProblems(md, "build:\n\techo\n")
	got = append(got, p...)
	p, _ = metricProblems(md, map[string]string{"bmcfence_fences_total": "result,reason"})
	got = append(got, p...)
	p, _ = flagProblems(md, cmds)
	got = append(got, p...)
	got = append(got, grantProblems(md, rendered, []string{"bmcfence-viewer", "bmcfence-operator"})...)
	want := []string{
		"README.md names bmc/bmclib, which is not in the repository",
		"README.md names `make deploy-all`: the Makefile has no target deploy-all",
		"README.md gives bmcfence_fences_total the labels {node}; the agent's are {result,reason}",
		"README.md names the metric bmcfence_no_such_total, which the agent does not export",
		`README.md shows --adress for kubectl-fence bmc status, which has no such flag (in "kubectl fence bmc status --address https://x --adress https://y")`,
		`README.md shows --dryrun for fence-agent, which has no such flag (in "fence-agent --dry-run --dryrun")`,
		`README.md shows --settle-read for any of our commands, which has no such flag (in "--settle-read")`,
		`deploy/base grants the agent "cluster core nodes any patch"; README.md's table does not list it`,
		`README.md lists "cluster core nodes any delete"; deploy/base does not grant it`,
		"deploy/base renders the ClusterRole bmcfence-operator; README.md does not name it",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems found (-want +got):\n%s", diff)
	}
}
