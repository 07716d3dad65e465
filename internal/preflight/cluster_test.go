package preflight

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

// ---- builders ---------------------------------------------------------------

func setVersion(c *fake.Clientset, git string) {
	c.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: git}
}

// grant answers SubjectAccessReviews for the agent's ServiceAccount from a
// set of "verb resource[.group] namespace" keys; "*" allows everything.
func grant(c *fake.Clientset, allowed ...string) {
	set := map[string]bool{}
	for _, a := range allowed {
		set[a] = true
	}
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		ra := sar.Spec.ResourceAttributes
		res := ra.Resource
		if ra.Group != "" {
			res += "." + ra.Group
		}
		key := strings.TrimSpace(ra.Verb + " " + res + " " + ra.Namespace)
		right := sar.Spec.User == "system:serviceaccount:"+ns+":bmcfence-agent" &&
			cmp.Equal(sar.Spec.Groups, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"})
		sar.Status.Allowed = right && (set["*"] || set[key])
		return true, sar, nil
	})
}

func forbidSAR(c *fake.Clientset) {
	c.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "", errors.New(`user "dev" cannot create`))
	})
}

type podOpt func(*corev1.Pod)

func pod(nsName string, opts ...podOpt) *corev1.Pod {
	pns, name, _ := strings.Cut(nsName, "/")
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pns, Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func tolerates(t corev1.Toleration) podOpt {
	return func(p *corev1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, t) }
}

var (
	everything  = corev1.Toleration{Operator: corev1.TolerationOpExists}
	outOfSvc    = corev1.Toleration{Key: corev1.TaintNodeOutOfService, Operator: corev1.TolerationOpExists}
	unreachable = corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
	noSchedule  = corev1.Toleration{Key: corev1.TaintNodeOutOfService, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
)

func ownedBy(kind, apiVersion string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, APIVersion: apiVersion, Name: "x", Controller: ptr.To(true)}}
	}
}

// ownedByNamed: a controller owner by name; hash, when set, is the
// pod-template-hash label a Deployment's ReplicaSet puts on its pods.
func ownedByNamed(kind, name, hash string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, APIVersion: "apps/v1", Name: name, Controller: ptr.To(true)}}
		if hash != "" {
			p.Labels = map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash}
		}
	}
}

func mirror() podOpt {
	return func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func namespaceObj(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func serviceAccount(name string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// clusterOptions is a fake cluster with the agent installed unless told
// otherwise, on Kubernetes 1.34.
func clusterOptions(t *testing.T, objs ...runtime.Object) (Options, *fake.Clientset) {
	t.Helper()
	o := setup(t, nil, nil, nil, objs...)
	c := clientgo.Unwrap(o.Client).(*fake.Clientset)
	setVersion(c, "v1.34.4")
	return o, c
}

// ---- cluster checks ----------------------------------------------------------

func TestVersion(t *testing.T) {
	tests := []struct {
		name     string
		info     *version.Info
		err      error
		want     Status
		contains string
	}{
		{name: "1.34 is fine", info: &version.Info{GitVersion: "v1.34.4"}, want: StatusOK, contains: "GA (1.28+)"},
		{name: "exactly 1.30", info: &version.Info{GitVersion: "v1.30.0"}, want: StatusOK},
		{name: "a vendor suffix", info: &version.Info{GitVersion: "v1.31.10-eks-7f9249a"}, want: StatusOK},
		{name: "1.28 fences, but the manifests need 1.30", info: &version.Info{GitVersion: "v1.28.0"}, want: StatusWarn,
			contains: "deploy/base and the chart need 1.30: the ValidatingAdmissionPolicy that authenticates kubectl fence's requests is admissionregistration.k8s.io/v1 (GA in 1.30)"},
		{name: "1.29 with a vendor suffix", info: &version.Info{GitVersion: "v1.29.10-eks-7f9249a"}, want: StatusWarn, contains: "upgrade the control plane to 1.30"},
		{name: "1.27 is too old", info: &version.Info{GitVersion: "v1.27.16"}, want: StatusFail, contains: "upgrade the control plane"},
		{name: "Major.Minor when GitVersion is odd", info: &version.Info{GitVersion: "custom", Major: "1", Minor: "26+"}, want: StatusFail},
		{name: "unparseable", info: &version.Info{GitVersion: "custom"}, want: StatusWarn, contains: `cannot parse the server version "custom"`},
		{name: "discovery fails", err: errors.New("connection refused"), want: StatusWarn, contains: "cannot read the server version (connection refused)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientset()
			d := c.Discovery().(*fakediscovery.FakeDiscovery)
			d.FakedServerVersion = tt.info
			if tt.err != nil {
				c.PrependReactor("get", "version", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tt.err })
			}
			got := checkVersion(Options{Client: clientgo.Wrap(c)})
			if got.Status != tt.want || got.Scope != ScopeCluster || got.Check != CheckVersion || !strings.Contains(got.Message, tt.contains) {
				t.Errorf("got %+v, want %s containing %q", got, tt.want, tt.contains)
			}
		})
	}
}

// allGranted is every permission the agent needs, as grant keys.
func allGranted() []string {
	var keys []string
	for _, p := range agentPermissions(ns, "bmcfence-agent") {
		res := p.Resource
		if p.Group != "" {
			res += "." + p.Group
		}
		for _, v := range p.Verbs {
			keys = append(keys, strings.TrimSpace(v+" "+res+" "+p.Namespace))
		}
	}
	return keys
}

func without(keys []string, drop ...string) []string {
	var out []string
	for _, k := range keys {
		if !contains(drop, k) {
			out = append(out, k)
		}
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestRBAC(t *testing.T) {
	tests := []struct {
		name     string
		react    func(*fake.Clientset)
		want     Status
		contains string
	}{
		{name: "everything granted", react: func(c *fake.Clientset) { grant(c, allGranted()...) }, want: StatusOK,
			contains: "system:serviceaccount:bmcfence-system:bmcfence-agent has every permission the agent uses"},
		{name: "nothing granted names every rule", react: func(c *fake.Clientset) { grant(c) }, want: StatusFail,
			contains: "may not: get, list, watch, patch nodes; get, list, watch, delete pods; get, list, watch volumeattachments.storage.k8s.io; " +
				"get, list leases.coordination.k8s.io in kube-node-lease; get, update leases.coordination.k8s.io bmcfence-agent in bmcfence-system; " +
				"create leases.coordination.k8s.io in bmcfence-system; create, patch events in default; create tokenreviews.authentication.k8s.io; " +
				"create subjectaccessreviews.authorization.k8s.io; get, list, watch validatingadmissionpolicies.admissionregistration.k8s.io bmcfence-request-identity; get, list, watch validatingadmissionpolicybindings.admissionregistration.k8s.io bmcfence-request-identity; get secrets in bmcfence-system; get configmaps in bmcfence-system; apply deploy/base/rbac.yaml"},
		{name: "missing verbs are named", want: StatusFail,
			react: func(c *fake.Clientset) {
				grant(c, without(allGranted(), "delete pods", "patch nodes", "get secrets bmcfence-system")...)
			},
			contains: "may not: patch nodes; delete pods; get secrets in bmcfence-system; apply"},
		{name: "the caller may not ask", react: forbidSAR, want: StatusWarn, contains: "cannot check RBAC: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, c := clusterOptions(t)
			tt.react(c)
			got := checkRBAC(context.Background(), o)
			if got.Status != tt.want || !strings.Contains(got.Message, tt.contains) {
				t.Errorf("got %s: %s\nwant %s containing %q", got.Status, got.Message, tt.want, tt.contains)
			}
		})
	}
}

func TestTolerations(t *testing.T) {
	many := make([]runtime.Object, 12)
	for i := range many {
		many[i] = pod(fmt.Sprintf("db/p%02d", i), tolerates(everything))
	}
	tests := []struct {
		name     string
		pods     []runtime.Object
		want     Status
		contains string
	}{
		{name: "no pods", want: StatusOK, contains: "no pod tolerates the out-of-service taint"},
		{name: "ordinary tolerations are fine", want: StatusOK, pods: []runtime.Object{
			pod("db/a", tolerates(unreachable)), pod("db/b", tolerates(noSchedule)),
		}},
		{name: "a pod that tolerates every taint", want: StatusWarn, pods: []runtime.Object{pod("db/a", tolerates(everything))},
			contains: "1 workload tolerates node.kubernetes.io/out-of-service=nodeshutdown:NoExecute, so a fence does not move their pods off the fenced node: Pod db/a (tolerates every taint); fix: remove that toleration from the workload's pod template (a toleration with operator Exists and no key tolerates every taint: give it the key it is meant for)"},
		{name: "the key itself, and a delay", want: StatusWarn, pods: []runtime.Object{
			pod("db/b", tolerates(outOfSvc)),
			pod("db/a", tolerates(corev1.Toleration{Key: corev1.TaintNodeOutOfService, Operator: corev1.TolerationOpEqual, Value: "nodeshutdown", TolerationSeconds: ptr.To[int64](600)})),
		}, contains: ": Pod db/a (for 600s), Pod db/b;"},
		{name: "DaemonSet, static and finished pods belong to their node", want: StatusOK, pods: []runtime.Object{
			pod("kube-system/cni", tolerates(everything), ownedBy("DaemonSet", "apps/v1")),
			pod("kube-system/etcd-cp1", tolerates(everything), mirror()),
			pod("db/job", tolerates(everything), phase(corev1.PodSucceeded)),
		}},
		{name: "named by workload: a Deployment's pods through their ReplicaSet, a StatefulSet's", want: StatusWarn, pods: []runtime.Object{
			pod("db/web-7d9f8-abcde", tolerates(everything), ownedByNamed("ReplicaSet", "web-7d9f8", "7d9f8")),
			pod("db/web-7d9f8-fghij", tolerates(everything), ownedByNamed("ReplicaSet", "web-7d9f8", "7d9f8")),
			pod("db/pg-0", tolerates(outOfSvc), ownedByNamed("StatefulSet", "pg", "")),
			pod("db/legacy-x1", tolerates(everything), ownedByNamed("ReplicaSet", "legacy", "")),
		}, contains: ": Deployment db/web (2 pods, tolerates every taint), ReplicaSet db/legacy (tolerates every taint), StatefulSet db/pg;"},
		{name: "more than ten are summed up", want: StatusWarn, pods: many, contains: "Pod db/p09 (tolerates every taint) and 2 more;"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _ := clusterOptions(t, tt.pods...)
			got := checkTolerations(context.Background(), o)
			if got.Status != tt.want || !strings.Contains(got.Message, tt.contains) {
				t.Errorf("got %s: %s\nwant %s containing %q", got.Status, got.Message, tt.want, tt.contains)
			}
		})
	}
}

// kcmPod is a kube-controller-manager static pod's mirror as kubeadm
// writes it.
func kcmPod(name string, flags ...string) *corev1.Pod {
	p := pod("kube-system/"+name, mirror())
	p.Labels = map[string]string{"component": "kube-controller-manager", "tier": "control-plane"}
	p.Spec.Containers = []corev1.Container{{Name: "kube-controller-manager",
		Command: append([]string{"kube-controller-manager", "--controllers=*,bootstrapsigner,tokencleaner", "--leader-elect=true"}, flags...)}}
	return p
}

// kube-controller-manager's --disable-force-detach-on-timeout, read from its
// pod's command line where the API shows it; unknown (and how to check)
// where it does not.
func TestForceDetach(t *testing.T) {
	tests := []struct {
		name     string
		version  string
		objs     []runtime.Object
		forbid   bool
		want     Status
		contains string
	}{
		{name: "set", objs: []runtime.Object{kcmPod("kube-controller-manager-cp1", "--disable-force-detach-on-timeout=true")},
			want: StatusOK, contains: "runs with --disable-force-detach-on-timeout=true (kube-system/kube-controller-manager-cp1)"},
		{name: "a bare flag is true", objs: []runtime.Object{kcmPod("kube-controller-manager-cp1", "--disable-force-detach-on-timeout")}, want: StatusOK},
		{name: "not set", objs: []runtime.Object{kcmPod("kube-controller-manager-cp1")},
			want: StatusWarn, contains: "runs without --disable-force-detach-on-timeout=true (kube-system/kube-controller-manager-cp1): kube-controller-manager then force-detaches a volume from an unhealthy node 6 minutes after its pod is gone"},
		{name: "set, then unset: the last wins", objs: []runtime.Object{kcmPod("kube-controller-manager-cp1", "--disable-force-detach-on-timeout=true", "--disable-force-detach-on-timeout=false")},
			want: StatusWarn, contains: "Fix: add --disable-force-detach-on-timeout=true to its flags (kubeadm: controllerManager.extraArgs"},
		{name: "one control-plane node of three is not set", objs: []runtime.Object{
			kcmPod("kube-controller-manager-cp1", "--disable-force-detach-on-timeout=true"),
			kcmPod("kube-controller-manager-cp2"),
			kcmPod("kube-controller-manager-cp3", "--disable-force-detach-on-timeout=true"),
		}, want: StatusWarn, contains: "(kube-system/kube-controller-manager-cp2)"},
		{name: "no such pod: a managed control plane, k3s", objs: []runtime.Object{pod("kube-system/coredns-1")},
			want: StatusWarn, contains: "unknown: no kube-controller-manager pod in kube-system shows its flags"},
		{name: "kube-system unreadable", forbid: true, want: StatusWarn, contains: "unknown: cannot list the pods in kube-system"},
		{name: "before 1.30 there is no such flag", version: "v1.29.7", objs: []runtime.Object{kcmPod("kube-controller-manager-cp1")},
			want: StatusWarn, contains: "Kubernetes v1.29.7 has no --disable-force-detach-on-timeout (1.30+)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, c := clusterOptions(t, tt.objs...)
			if tt.version != "" {
				setVersion(c, tt.version)
			}
			if tt.forbid {
				c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New(`user "dev" cannot list pods in kube-system`))
				})
			}
			got := checkForceDetach(context.Background(), o)
			if got.Status != tt.want || !strings.Contains(got.Message, tt.contains) {
				t.Errorf("got %s: %s\nwant %s containing %q", got.Status, got.Message, tt.want, tt.contains)
			}
		})
	}
}

func TestNamespaceAndServiceAccount(t *testing.T) {
	tests := []struct {
		name         string
		objs         []runtime.Object
		wantNS, want Status
	}{
		{name: "installed", objs: []runtime.Object{namespaceObj(ns), serviceAccount("bmcfence-agent")}, wantNS: StatusOK, want: StatusOK},
		{name: "no ServiceAccount", objs: []runtime.Object{namespaceObj(ns)}, wantNS: StatusOK, want: StatusFail},
		{name: "nothing", wantNS: StatusFail, want: StatusFail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _ := clusterOptions(t, tt.objs...)
			gotNS, got := checkNamespace(context.Background(), o), checkServiceAccount(context.Background(), o)
			if gotNS.Status != tt.wantNS || got.Status != tt.want {
				t.Errorf("namespace %s (%s), serviceaccount %s (%s); want %s, %s", gotNS.Status, gotNS.Message, got.Status, got.Message, tt.wantNS, tt.want)
			}
		})
	}
}

// Run puts the cluster first, then nodes by name, each node's checks in
// the order they were made.
func TestRunOrdersClusterFirstThenNodesByName(t *testing.T) {
	nodes := []*corev1.Node{node("w2"), node("w1", excluded()), node("a3")}
	entries := []config.NodeBMC{redfish("w2"), redfish("a3")}
	o := setup(t, nodes, entries, map[string]bmc.Controller{"w2": fakeBMC("w2"), "a3": fakeBMC("a3")},
		namespaceObj(ns), serviceAccount("bmcfence-agent"), kcmPod("kube-controller-manager-cp1", "--disable-force-detach-on-timeout=true"))
	c := clientgo.Unwrap(o.Client).(*fake.Clientset)
	setVersion(c, "v1.34.4")
	grant(c, "*")
	got, err := Run(context.Background(), Options{Client: clientgo.Wrap(c), Inventory: o.Inventory, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{ScopeCluster, CheckVersion, StatusOK}, {ScopeCluster, CheckNamespace, StatusOK}, {ScopeCluster, CheckServiceAccount, StatusOK},
		{ScopeCluster, CheckRBAC, StatusOK}, {ScopeCluster, CheckTolerations, StatusOK}, {ScopeCluster, CheckForceDetach, StatusOK},
		{ScopeCluster, CheckPlannedReboots, StatusOK},
	}
	want = append(want, healthy("a3")...)
	want = append(want, row{NodeScope("w1"), CheckExcluded, StatusOK})
	want = append(want, healthy("w2")...)
	if diff := cmp.Diff(want, rows(got)); diff != "" {
		t.Errorf("results (-want +got):\n%s\n%s", diff, messages(got))
	}
	if w := Worst(got); w != StatusOK {
		t.Errorf("Worst = %s", w)
	}
}

func TestRunRefusesMissingOptionsAndReportsCancellation(t *testing.T) {
	if _, err := Run(context.Background(), Options{}); err == nil {
		t.Error("Run without a client: no error")
	}
	o := setup(t, []*corev1.Node{node("w1")}, []config.NodeBMC{redfish("w1")}, map[string]bmc.Controller{"w1": fakeBMC("w1")})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, o); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context: %v, want context.Canceled", err)
	}
}

func TestWorst(t *testing.T) {
	for _, tt := range []struct {
		in   []Status
		want Status
	}{
		{nil, StatusOK},
		{[]Status{StatusOK, StatusWarn}, StatusWarn},
		{[]Status{StatusWarn, StatusFail, StatusOK}, StatusFail},
	} {
		var rs []Result
		for _, s := range tt.in {
			rs = append(rs, Result{Status: s})
		}
		if got := Worst(rs); got != tt.want {
			t.Errorf("Worst(%v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// The check must never demand what deploy/base/rbac.yaml does not grant:
// then a fresh install would fail its own preflight.
func TestManifestGrantsEveryCheckedPermission(t *testing.T) {
	b, err := os.ReadFile("../../deploy/base/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cluster []rbacv1.PolicyRule
	roles := map[string][]rbacv1.PolicyRule{} // namespace → its Roles' rules
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		switch obj.Kind {
		case "ClusterRole":
			cluster = append(cluster, obj.Rules...)
		case "Role":
			roles[obj.Metadata.Namespace] = append(roles[obj.Metadata.Namespace], obj.Rules...)
		}
	}
	if len(cluster) == 0 || len(roles[ns]) == 0 {
		t.Fatalf("rbac.yaml: %d ClusterRole rules, %d Role rules in %s; the test no longer understands the manifest", len(cluster), len(roles[ns]), ns)
	}
	for _, p := range append(agentPermissions(ns, "bmcfence-agent"), plannedPermissions()...) {
		for _, v := range p.Verbs {
			if !allows(cluster, p, v) && !(p.Namespace != "" && allows(roles[p.Namespace], p, v)) {
				t.Errorf("the check requires %q, which deploy/base/rbac.yaml does not grant", p.describe([]string{v}))
			}
		}
	}
}

func TestMetal3OverlayGrantsEveryCheckedPermission(t *testing.T) {
	b, err := os.ReadFile("../../deploy/overlays/metal3/rbac-metal3.yaml")
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string][]rbacv1.PolicyRule{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind == "Role" {
			roles[obj.Metadata.Namespace] = append(roles[obj.Metadata.Namespace], obj.Rules...)
		}
	}
	if len(roles["metal3"]) == 0 {
		t.Fatal("rbac-metal3.yaml: no Role rules in metal3; the test no longer understands the manifest")
	}
	for _, p := range metal3Permissions("metal3") {
		for _, v := range p.Verbs {
			if !allows(roles["metal3"], p, v) {
				t.Errorf("the check requires %q, which deploy/overlays/metal3 does not grant", p.describe([]string{v}))
			}
		}
	}
}

func allows(rules []rbacv1.PolicyRule, p permission, verb string) bool {
	for _, r := range rules {
		if (contains(r.APIGroups, p.Group) || contains(r.APIGroups, "*")) &&
			(contains(r.Resources, p.Resource) || contains(r.Resources, "*")) &&
			(len(r.ResourceNames) == 0 || (p.Name != "" && contains(r.ResourceNames, p.Name))) &&
			(contains(r.Verbs, verb) || contains(r.Verbs, "*")) {
			return true
		}
	}
	return false
}
