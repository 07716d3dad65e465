// Package deploy tests the two install paths, deploy/ (kustomize) and
// charts/bmcfence (Helm): the chart's defaults render the kustomize base's
// objects, its values render what they promise, and it installs on a real
// control plane with the agent coming up Ready under the chart's RBAC.
package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/test/controlplane"
)

type object = map[string]any

// helmBin is bin/tools/helm, built by hack/helm.sh (make helm). A missing
// helm fails the test, so CI can never pass by checking nothing.
func helmBin(t *testing.T) (helm, root string) {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm = filepath.Join(root, "bin", "tools", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%s missing: run `make helm` (hack/helm.sh builds it from its pinned Go module)", helm)
	}
	return helm, root
}

func kubectlBin(t *testing.T) string {
	t.Helper()
	if err := controlplane.BinariesAvailable(""); err != nil {
		t.Fatal(err)
	}
	root, _ := controlplane.RepoRoot()
	return filepath.Join(root, "bin", "e2e", "kubectl")
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// render runs helm template with --set values; it returns helm's error
// for the cases that must fail.
func render(t *testing.T, sets ...string) ([]object, error) {
	t.Helper()
	helm, root := helmBin(t)
	args := []string{"template", "bmcfence", filepath.Join(root, "charts", "bmcfence"), "--namespace", "bmcfence-system"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helm, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr.String())
	}
	return parse(t, out), nil
}

func parse(t *testing.T, b []byte) []object {
	t.Helper()
	var objs []object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatal(err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
}

func key(o object) string {
	m, _ := o["metadata"].(object)
	return fmt.Sprintf("%s %v/%v", o["kind"], m["namespace"], m["name"])
}

func byKey(objs []object) map[string]object {
	out := map[string]object{}
	for _, o := range objs {
		out[key(o)] = o
	}
	return out
}

func get(o object, path ...string) any {
	var v any = o
	for _, p := range path {
		m, ok := v.(object)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// normalize drops what only one install path has: Helm's own labels, the
// checksum that rolls the pods on a config change; and reads config.yaml,
// so that the two spellings of one configuration compare equal.
func normalize(t *testing.T, o object) object {
	t.Helper()
	if labels, ok := get(o, "metadata", "labels").(object); ok {
		for _, l := range []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"} {
			delete(labels, l)
		}
	}
	if ann, ok := get(o, "spec", "template", "metadata", "annotations").(object); ok {
		delete(ann, "checksum/config")
		if len(ann) == 0 {
			delete(get(o, "spec", "template", "metadata").(object), "annotations")
		}
	}
	if o["kind"] == "ConfigMap" {
		if data, ok := o["data"].(object); ok {
			if raw, ok := data["config.yaml"].(string); ok {
				cfg, err := config.Parse([]byte(raw))
				if err != nil {
					t.Fatalf("%s: %v", key(o), err)
				}
				data["config.yaml"] = cfg
			}
		}
	}
	return o
}

// One source of truth, checked: the chart with its default values renders
// exactly deploy/base's objects. The differences are the Namespace (Helm
// installs into one; namespace.create renders it) and the Secret grant
// (the chart's rbac.secretsByName, on by default, names the inventory's
// Secrets; the base cannot know them).
func TestChartDefaultsAreTheKustomizeBase(t *testing.T) {
	_, root := helmBin(t)
	chart, err := render(t, "rbac.secretsByName=false")
	if err != nil {
		t.Fatal(err)
	}
	base := parse(t, run(t, kubectlBin(t), "kustomize", filepath.Join(root, "deploy", "base")))
	want, got := map[string]object{}, map[string]object{}
	for k, o := range byKey(base) {
		if o["kind"] != "Namespace" {
			want[k] = normalize(t, o)
		}
	}
	for k, o := range byKey(chart) {
		got[k] = normalize(t, o)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kubectl kustomize deploy/base (-) vs helm template charts/bmcfence (+):\n%s", diff)
	}
}

// The Metal3 grants are one source of truth too: deploy/overlays/metal3's
// Role and RoleBinding are the chart's with inventory.source metal3 and the
// same namespace.
func TestMetal3OverlayIsTheChart(t *testing.T) {
	_, root := helmBin(t)
	chart, err := render(t, "rbac.secretsByName=false", "inventory.source=metal3", "inventory.metal3.namespaces[0]=metal3")
	if err != nil {
		t.Fatal(err)
	}
	overlay := byKey(parse(t, run(t, kubectlBin(t), "kustomize", filepath.Join(root, "deploy", "overlays", "metal3"))))
	want, got := map[string]object{}, map[string]object{}
	for k, o := range byKey(chart) {
		if strings.HasSuffix(k, "metal3/bmcfence-agent-metal3") {
			got[k] = normalize(t, o)
			want[k] = normalize(t, overlay[k])
		}
	}
	if len(got) != 2 {
		t.Fatalf("the chart rendered %d Metal3 RBAC objects, want a Role and a RoleBinding: %v", len(got), keys(byKey(chart)))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kubectl kustomize deploy/overlays/metal3 (-) vs helm template with inventory.source=metal3 (+):\n%s", diff)
	}
	env := get(overlay["DaemonSet bmcfence-system/bmcfence-agent"], "spec", "template", "spec", "containers").([]any)[0].(object)["env"]
	if s := fmt.Sprint(env); !strings.Contains(s, "BMCFENCE_INVENTORY_SOURCE value:metal3") || !strings.Contains(s, "BMCFENCE_INVENTORY_METAL3_NAMESPACES value:metal3") {
		t.Errorf("the overlay's DaemonSet env %s does not select the metal3 source", s)
	}
}

// The identity for a management cluster's BareMetalHosts
// (deploy/metal3-management) has exactly the grants the agent has for
// hosts in its own cluster (deploy/overlays/metal3), and a token.
func TestMetal3ManagementRBACIsTheOverlays(t *testing.T) {
	_, root := helmBin(t)
	kubectl := kubectlBin(t)
	mgmt := byKey(parse(t, run(t, kubectl, "kustomize", filepath.Join(root, "deploy", "metal3-management"))))
	overlay := byKey(parse(t, run(t, kubectl, "kustomize", filepath.Join(root, "deploy", "overlays", "metal3"))))
	want := get(overlay["Role metal3/bmcfence-agent-metal3"], "rules")
	got := get(mgmt["Role metal3/bmcfence-metal3-reader"], "rules")
	if want == nil || got == nil {
		t.Fatalf("Roles: overlay %v, management %v", keys(overlay), keys(mgmt))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deploy/overlays/metal3's Role (-) vs deploy/metal3-management's (+):\n%s", diff)
	}
	b := mgmt["RoleBinding metal3/bmcfence-metal3-reader"]
	if s := fmt.Sprint(get(b, "subjects")); !strings.Contains(s, "name:bmcfence-metal3-reader") || !strings.Contains(s, "kind:ServiceAccount") {
		t.Errorf("RoleBinding subjects %s: want the ServiceAccount bmcfence-metal3-reader", s)
	}
	tok := mgmt["Secret metal3/bmcfence-metal3-reader-token"]
	if tok["type"] != "kubernetes.io/service-account-token" || get(tok, "metadata", "annotations", "kubernetes.io/service-account.name") != "bmcfence-metal3-reader" {
		t.Errorf("token Secret %v: want a service-account-token for bmcfence-metal3-reader", tok)
	}
}

func TestChartValues(t *testing.T) {
	tests := []struct {
		name    string
		sets    []string
		wantErr string
		check   func(t *testing.T, objs map[string]object)
	}{
		{name: "image by digest", sets: []string{"image.tag=v1.2.3", "image.digest=sha256:" + strings.Repeat("a", 64)},
			check: func(t *testing.T, objs map[string]object) {
				c := get(objs["DaemonSet bmcfence-system/bmcfence-agent"], "spec", "template", "spec", "containers").([]any)[0].(object)
				if want := "ghcr.io/bmcfence/bmcfence:v1.2.3@sha256:" + strings.Repeat("a", 64); c["image"] != want {
					t.Errorf("image %v, want %s", c["image"], want)
				}
			}},
		{name: "latest is refused", sets: []string{"image.tag=latest"}, wantErr: "never latest"},
		{name: "the memory budget is GOMEMLIMIT; empty leaves it to the agent (90% of the container's limit)", sets: []string{"memoryBudget="},
			check: func(t *testing.T, objs map[string]object) {
				c := get(objs["DaemonSet bmcfence-system/bmcfence-agent"], "spec", "template", "spec", "containers").([]any)[0].(object)
				if s := fmt.Sprint(c["env"]); strings.Contains(s, "GOMEMLIMIT") {
					t.Errorf("env %s: want no GOMEMLIMIT with an empty memoryBudget", s)
				}
			}},
		// A fixed budget below the live heap makes the collector run
		// continuously: GOMEMLIMIT=90MiB at 1000 nodes x 30 pods held 95 MiB
		// live and burned 79% of a core (README, "Scale"). By default the
		// agent takes 90% of its container's limit instead.
		{name: "no fixed memory budget by default", check: func(t *testing.T, objs map[string]object) {
			c := get(objs["DaemonSet bmcfence-system/bmcfence-agent"], "spec", "template", "spec", "containers").([]any)[0].(object)
			if s := fmt.Sprint(c["env"]); strings.Contains(s, "GOMEMLIMIT") {
				t.Errorf("env %s: want no GOMEMLIMIT by default (the agent takes 90%% of limits.memory)", s)
			}
		}},
		{name: "a memory budget when asked", sets: []string{"memoryBudget=200MiB"}, check: func(t *testing.T, objs map[string]object) {
			c := get(objs["DaemonSet bmcfence-system/bmcfence-agent"], "spec", "template", "spec", "containers").([]any)[0].(object)
			if s := fmt.Sprint(c["env"]); !strings.Contains(s, "name:GOMEMLIMIT value:200MiB") {
				t.Errorf("env %s: want GOMEMLIMIT=200MiB", s)
			}
		}},
		{name: "unknown placement", sets: []string{"placement.mode=everywhere"}, wantErr: "at '/placement/mode': value must be one of"},
		{name: "control plane, kubeadm and k3s alike", check: func(t *testing.T, objs map[string]object) {
			terms := get(objs["DaemonSet bmcfence-system/bmcfence-agent"], "spec", "template", "spec", "affinity", "nodeAffinity",
				"requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms").([]any)
			expr := terms[0].(object)["matchExpressions"].([]any)[0].(object)
			if expr["key"] != "node-role.kubernetes.io/control-plane" || expr["operator"] != "Exists" {
				t.Errorf("node affinity %v: want the control-plane label with any value (\"\" or \"true\")", expr)
			}
		}},
		{name: "workers for managed control planes", sets: []string{"placement.mode=workers", "placement.replicas=3"},
			check: func(t *testing.T, objs map[string]object) {
				d := objs["Deployment bmcfence-system/bmcfence-agent"]
				if d == nil || objs["DaemonSet bmcfence-system/bmcfence-agent"] != nil {
					t.Fatalf("want a Deployment and no DaemonSet; objects: %v", keys(objs))
				}
				if get(d, "spec", "replicas") != float64(3) {
					t.Errorf("replicas %v", get(d, "spec", "replicas"))
				}
				if get(d, "spec", "template", "spec", "affinity", "podAntiAffinity") == nil {
					t.Error("no anti-affinity: two replicas could share a node")
				}
				// GKE admits system-cluster-critical outside kube-system only
				// under a ResourceQuota scoped to that class.
				q := objs["ResourceQuota bmcfence-system/bmcfence-agent-priority"]
				if q == nil {
					t.Fatalf("no ResourceQuota for the priority class: GKE refuses the pods; objects: %v", keys(objs))
				}
				if sel := fmt.Sprint(get(q, "spec", "scopeSelector", "matchExpressions")); !strings.Contains(sel, "scopeName:PriorityClass") || !strings.Contains(sel, "system-cluster-critical") {
					t.Errorf("ResourceQuota scope %s: want PriorityClass In [system-cluster-critical]", sel)
				}
				if pods := get(q, "spec", "hard", "pods"); pods != "7" {
					t.Errorf("ResourceQuota pods %v, want 7 (3 replicas, a surge, and a dead node's Terminating pods)", pods)
				}
				pdb := objs["PodDisruptionBudget bmcfence-system/bmcfence-agent"]
				if pdb == nil || get(pdb, "spec", "maxUnavailable") != float64(1) {
					t.Errorf("PodDisruptionBudget %v: want maxUnavailable 1 (a drain takes one replica at a time)", pdb)
				}
				spread, _ := get(d, "spec", "template", "spec", "topologySpreadConstraints").([]any)
				if len(spread) != 1 || get(spread[0].(object), "topologyKey") != "topology.kubernetes.io/zone" {
					t.Errorf("topologySpreadConstraints %v: want the replicas spread over zones", spread)
				}
			}},
		{name: "workers without a system class: no quota", sets: []string{"placement.mode=workers", "priorityClassName=bmcfence-critical"},
			check: func(t *testing.T, objs map[string]object) {
				if objs["ResourceQuota bmcfence-system/bmcfence-agent-priority"] != nil {
					t.Error("a ResourceQuota for a class that needs none")
				}
				if objs["PodDisruptionBudget bmcfence-system/bmcfence-agent"] == nil {
					t.Error("no PodDisruptionBudget")
				}
			}},
		{name: "control plane: no quota, no PodDisruptionBudget", check: func(t *testing.T, objs map[string]object) {
			for k := range objs {
				if strings.HasPrefix(k, "ResourceQuota ") || strings.HasPrefix(k, "PodDisruptionBudget ") {
					t.Errorf("%s rendered for the DaemonSet", k)
				}
			}
		}},
		{name: "hostNetwork with the matching Pod Security level", sets: []string{"hostNetwork=true", "namespace.create=true"},
			check: func(t *testing.T, objs map[string]object) {
				if get(objs["DaemonSet bmcfence-system/bmcfence-agent"], "spec", "template", "spec", "hostNetwork") != true {
					t.Error("hostNetwork not set")
				}
				if l := get(objs["Namespace <nil>/bmcfence-system"], "metadata", "labels", "pod-security.kubernetes.io/enforce"); l != "privileged" {
					t.Errorf("namespace enforce label %v, want privileged (PSS baseline and restricted forbid hostNetwork)", l)
				}
			}},
		{name: "restricted without hostNetwork", sets: []string{"namespace.create=true"},
			check: func(t *testing.T, objs map[string]object) {
				if l := get(objs["Namespace <nil>/bmcfence-system"], "metadata", "labels", "pod-security.kubernetes.io/enforce"); l != "restricted" {
					t.Errorf("namespace enforce label %v, want restricted", l)
				}
			}},
		{name: "Secrets and CA ConfigMaps granted by name", sets: []string{
			"inventory.defaults.caConfigMap=bmc-ca",
			"inventory.nodes[0].name=w1", "inventory.nodes[0].address=https://10.0.0.1",
			"inventory.nodes[1].name=w2", "inventory.nodes[1].address=https://10.0.0.2", "inventory.nodes[1].credentialsSecret=bmc-w2",
			"inventory.nodes[2].name=w3", "inventory.nodes[2].address=https://10.0.0.3", "inventory.nodes[2].insecureSkipVerify=true", "inventory.nodes[2].credentialsSecret=bmc-w2",
			"config.leaderElection.name=fencer",
		}, check: func(t *testing.T, objs map[string]object) {
			rules := get(objs["Role bmcfence-system/bmcfence-agent"], "rules").([]any)
			got := map[string]any{}
			for _, r := range rules {
				r := r.(object)
				got[fmt.Sprint(r["resources"], r["verbs"])] = r["resourceNames"]
			}
			want := map[string]any{
				"[leases] [get update]": []any{"fencer"},
				"[leases] [create]":     nil,
				"[secrets] [get]":       []any{"bmc-credentials", "bmc-w2"},
				"[configmaps] [get]":    []any{"bmc-ca"},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Role rules (-want +got):\n%s", diff)
			}
		}},
		{name: "Metal3 BareMetalHosts: grants in their namespaces only", sets: []string{
			"inventory.source=metal3", "inventory.metal3.namespaces[0]=metal3", "inventory.metal3.namespaces[1]=rack-2",
		}, check: func(t *testing.T, objs map[string]object) {
			// The hosts' Secrets are in their namespaces: none in the agent's.
			for _, r := range get(objs["Role bmcfence-system/bmcfence-agent"], "rules").([]any) {
				if res := fmt.Sprint(r.(object)["resources"]); strings.Contains(res, "secrets") {
					t.Errorf("the agent's namespace Role grants %v with inventory.source metal3", r)
				}
			}
			for _, ns := range []string{"metal3", "rack-2"} {
				role := objs["Role "+ns+"/bmcfence-agent-metal3"]
				if role == nil || objs["RoleBinding "+ns+"/bmcfence-agent-metal3"] == nil {
					t.Fatalf("no Role and RoleBinding bmcfence-agent-metal3 in %s; objects: %v", ns, keys(objs))
				}
				got := map[string]any{}
				for _, r := range get(role, "rules").([]any) {
					r := r.(object)
					got[fmt.Sprint(r["apiGroups"], r["resources"])] = r["verbs"]
				}
				want := map[string]any{
					"[metal3.io] [baremetalhosts]":                       []any{"get", "list", "watch", "patch"},
					"[infrastructure.cluster.x-k8s.io] [metal3machines]": []any{"list", "watch"},
					"[cluster.x-k8s.io] [machines]":                      []any{"list", "watch"},
					"[] [secrets]":                                       []any{"get"},
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Role %s/bmcfence-agent-metal3 rules (-want +got):\n%s", ns, diff)
				}
			}
		}},
		{name: "metrics certificate verified by Prometheus", sets: []string{"metrics.serviceMonitor.enabled=true",
			"metrics.serviceMonitor.tlsConfig.ca.secret.name=metrics-ca", "metrics.serviceMonitor.tlsConfig.ca.secret.key=ca.crt",
			"metrics.serviceMonitor.tlsConfig.serverName=bmcfence-agent-metrics.bmcfence-system.svc", "metrics.tls.secretName=agent-metrics-cert"},
			check: func(t *testing.T, objs map[string]object) {
				ep := get(objs["ServiceMonitor bmcfence-system/bmcfence-agent"], "spec", "endpoints").([]any)[0].(object)
				if get(ep, "tlsConfig", "insecureSkipVerify") != nil || get(ep, "tlsConfig", "serverName") != "bmcfence-agent-metrics.bmcfence-system.svc" {
					t.Errorf("tlsConfig %v: want the values' tlsConfig, nothing else", ep["tlsConfig"])
				}
				var secret any
				for _, v := range get(objs["DaemonSet bmcfence-system/bmcfence-agent"], "spec", "template", "spec", "volumes").([]any) {
					if v.(object)["name"] == "metrics-tls" {
						secret = get(v.(object), "secret", "secretName")
					}
				}
				if secret != "agent-metrics-cert" {
					t.Errorf("the metrics-tls volume mounts %v, want metrics.tls.secretName", secret)
				}
			}},
		{name: "Metal3 without namespaces is refused", sets: []string{"inventory.source=both"}, wantErr: "inventory.metal3.namespaces"},
		{name: "Metal3 hosts in a management cluster: no grants here but the kubeconfig Secret", sets: []string{
			"inventory.source=metal3", "inventory.metal3.namespaces[0]=metal3", "inventory.metal3.kubeconfigSecret=mgmt-kubeconfig",
		}, check: func(t *testing.T, objs map[string]object) {
			for k := range objs {
				if strings.Contains(k, "bmcfence-agent-metal3") {
					t.Errorf("%s rendered: the hosts' grants belong in the management cluster", k)
				}
			}
			for _, r := range get(objs["Role bmcfence-system/bmcfence-agent"], "rules").([]any) {
				r := r.(object)
				if fmt.Sprint(r["resources"]) == "[secrets]" {
					if names := fmt.Sprint(r["resourceNames"]); names != "[mgmt-kubeconfig]" {
						t.Errorf("the agent may get Secrets %s, want exactly the kubeconfig's [mgmt-kubeconfig]", names)
					}
					return
				}
			}
			t.Error("no grant to read the kubeconfig Secret")
		}},
		{name: "monitoring", sets: []string{"metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true", "networkPolicy.enabled=true",
			"metrics.readers[0].kind=ServiceAccount", "metrics.readers[0].name=prometheus", "metrics.readers[0].namespace=monitoring"},
			check: func(t *testing.T, objs map[string]object) {
				for _, k := range []string{"ServiceMonitor bmcfence-system/bmcfence-agent", "PrometheusRule bmcfence-system/bmcfence-agent",
					"NetworkPolicy bmcfence-system/bmcfence-agent", "ClusterRoleBinding <nil>/bmcfence-metrics-reader"} {
					if objs[k] == nil {
						t.Errorf("%s not rendered", k)
					}
				}
				// Scraped over HTTPS; the self-signed certificate is not
				// verified unless tlsConfig says how.
				ep := get(objs["ServiceMonitor bmcfence-system/bmcfence-agent"], "spec", "endpoints").([]any)[0].(object)
				if ep["scheme"] != "https" || get(ep, "tlsConfig", "insecureSkipVerify") != true {
					t.Errorf("ServiceMonitor endpoint %v: want scheme https and tlsConfig.insecureSkipVerify by default", ep)
				}
				var alerts []string
				for _, g := range get(objs["PrometheusRule bmcfence-system/bmcfence-agent"], "spec", "groups").([]any) {
					for _, r := range g.(object)["rules"].([]any) {
						alerts = append(alerts, r.(object)["alert"].(string))
					}
				}
				for _, a := range []string{"BMCFenceUnfenceableNodes", "BMCFenceStuck", "BMCFenceContradiction", "BMCFencePoweredOnDuringFence", "BMCFenceRefused", "BMCFenceBMCErrors"} {
					if !strings.Contains(strings.Join(alerts, " "), a) {
						t.Errorf("no alert %s in %v", a, alerts)
					}
				}
			}},
		{name: "Grafana dashboard, for kube-prometheus-stack's sidecar", sets: []string{"metrics.grafanaDashboard.enabled=true",
			"metrics.grafanaDashboard.namespace=monitoring", "metrics.grafanaDashboard.annotations.grafana_folder=Infrastructure"},
			check: func(t *testing.T, objs map[string]object) {
				cm := objs["ConfigMap monitoring/bmcfence-grafana-dashboard"]
				if cm == nil {
					t.Fatalf("no dashboard ConfigMap in the namespace asked for; objects: %v", keys(objs))
				}
				if l := get(cm, "metadata", "labels", "grafana_dashboard"); l != "1" {
					t.Errorf("label grafana_dashboard %v, want \"1\" (the sidecar's default)", l)
				}
				if a := get(cm, "metadata", "annotations", "grafana_folder"); a != "Infrastructure" {
					t.Errorf("annotation grafana_folder %v", a)
				}
				raw, _ := get(cm, "data", "bmcfence.json").(string)
				var d struct {
					UID    string `json:"uid"`
					Panels []struct {
						Type string `json:"type"`
					} `json:"panels"`
				}
				if err := json.Unmarshal([]byte(raw), &d); err != nil || d.UID != "bmcfence" || len(d.Panels) < 10 {
					t.Errorf("bmcfence.json: %v, uid %q, %d panels; want the dashboard of charts/bmcfence/files/dashboards", err, d.UID, len(d.Panels))
				}
			}},
		{name: "Grafana dashboard in the release's namespace by default", sets: []string{"metrics.grafanaDashboard.enabled=true"},
			check: func(t *testing.T, objs map[string]object) {
				if objs["ConfigMap bmcfence-system/bmcfence-grafana-dashboard"] == nil {
					t.Errorf("no dashboard ConfigMap in the release's namespace; objects: %v", keys(objs))
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := render(t, tt.sets...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Whatever the values, the agent's configuration is valid.
			m := byKey(objs)
			raw, _ := get(m["ConfigMap bmcfence-system/bmcfence-agent"], "data", "config.yaml").(string)
			if _, err := config.Parse([]byte(raw)); err != nil {
				t.Errorf("the rendered config.yaml is invalid: %v\n%s", err, raw)
			}
			tt.check(t, m)
		})
	}
}

// The chart installs the ValidatingAdmissionPolicy v1 (GA in 1.30) that
// authenticates requests: Chart.yaml's kubeVersion says so, and helm
// refuses an older cluster up front instead of failing halfway.
func TestChartNeedsKubernetes130(t *testing.T) {
	helm, root := helmBin(t)
	chart := filepath.Join(root, "charts", "bmcfence")
	out, err := exec.Command(helm, "template", "bmcfence", chart, "--kube-version", "1.29.9").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "kubeVersion") {
		t.Errorf("helm template --kube-version 1.29.9: %v\n%s\nwant a refusal naming kubeVersion", err, out)
	}
	if out, err := exec.Command(helm, "template", "bmcfence", chart, "--kube-version", "1.30.0").CombinedOutput(); err != nil {
		t.Errorf("helm template --kube-version 1.30.0: %v\n%s", err, out)
	}
	for _, o := range parse(t, run(t, helm, "template", "bmcfence", chart)) {
		if o["kind"] == "ValidatingAdmissionPolicy" && o["apiVersion"] != "admissionregistration.k8s.io/v1" {
			t.Errorf("%s is %v; the kubeVersion bound assumes v1", key(o), o["apiVersion"])
		}
	}
}

func keys(m map[string]object) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// kubectl kustomize deploy/base renders the project's API: the four CRDs,
// the request admission policy and its binding, the three ClusterRoles for
// people and the one NodeHealthCheck aggregates.
func TestBaseRendersTheAPI(t *testing.T) {
	_, root := helmBin(t)
	base := byKey(parse(t, run(t, kubectlBin(t), "kustomize", filepath.Join(root, "deploy", "base"))))
	for _, k := range []string{
		"CustomResourceDefinition <nil>/bmcfenceremediations.fencing.bmcfence.io",
		"CustomResourceDefinition <nil>/bmcfenceremediationtemplates.fencing.bmcfence.io",
		"CustomResourceDefinition <nil>/bmcfencerequests.fencing.bmcfence.io",
		"CustomResourceDefinition <nil>/bmcfencerecords.fencing.bmcfence.io",
		"ValidatingAdmissionPolicy <nil>/bmcfence-request-identity",
		"ValidatingAdmissionPolicyBinding <nil>/bmcfence-request-identity",
		"ClusterRole <nil>/bmcfence-operator",
		"ClusterRole <nil>/bmcfence-attester",
		"ClusterRole <nil>/bmcfence-viewer",
		"ClusterRole <nil>/bmcfence-ext-remediation",
	} {
		if base[k] == nil {
			t.Errorf("deploy/base does not render %s", k)
		}
	}
	if l := get(base["ClusterRole <nil>/bmcfence-ext-remediation"], "metadata", "labels", "rbac.ext-remediation/aggregate-to-ext-remediation"); l != "true" {
		t.Errorf("bmcfence-ext-remediation aggregation label = %v, want \"true\"", l)
	}
	if a := get(base["ValidatingAdmissionPolicyBinding <nil>/bmcfence-request-identity"], "spec", "validationActions"); !cmp.Equal(a, []any{"Deny"}) {
		t.Errorf("binding validationActions = %v, want [Deny]", a)
	}
}
