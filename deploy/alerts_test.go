package deploy

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/bmcfence/bmcfence/test/controlplane"
)

// updateRules rewrites the rule file the alert tests read:
//
//	go test ./deploy -run TestPrometheusRulesFileIsTheChart -update-rules
var updateRules = flag.Bool("update-rules", false, "rewrite deploy/testdata/prometheus-rules.yaml from the chart's PrometheusRule")

const rulesHeader = `# Generated from charts/bmcfence's PrometheusRule (spec, with the chart's
# default thresholds) by
#   go test ./deploy -run TestPrometheusRulesFileIsTheChart -update-rules
# Do not edit: change the chart's template and rerun. A Prometheus rule file
# (what rule_files and promtool check rules read): hack/dashboard's
# TestAlertsFireWhenTheyShould evaluates it with Prometheus's own rule
# manager against the series the agent exports. This test fails while it is
# not what the chart renders.
`

// The alert tests (hack/dashboard, a module of their own, without helm)
// read the chart's alerting rules from a committed file: this test keeps
// that file what the chart renders today.
func TestPrometheusRulesFileIsTheChart(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render(t, "metrics.prometheusRule.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	rule := byKey(objs)["PrometheusRule bmcfence-system/bmcfence-agent"]
	if rule == nil {
		t.Fatalf("no PrometheusRule rendered; objects: %v", keys(byKey(objs)))
	}
	spec, err := yaml.Marshal(rule["spec"])
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte(rulesHeader), spec...)
	path := filepath.Join(root, "deploy", "testdata", "prometheus-rules.yaml")
	if *updateRules {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; run\n  go test ./deploy -run TestPrometheusRulesFileIsTheChart -update-rules", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not the chart's PrometheusRule (-file +chart); run\n  go test ./deploy -run TestPrometheusRulesFileIsTheChart -update-rules\n%s",
			path, cmp.Diff(string(got), string(want)))
	}
}
