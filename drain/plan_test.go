package drain

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// decisionOnly compares what was decided, not the wording.
var decisionOnly = cmpopts.IgnoreFields(PodPlan{}, "UID", "Reason", "Bound")

func objs(os ...runtime.Object) []runtime.Object { return os }

// planFor plans a drain of n1 over objects, with n1 and n2 (empty, Ready)
// added unless the case brings its own nodes.
func planFor(t *testing.T, objects []runtime.Object, opts Options) Plan {
	t.Helper()
	hasNodes := false
	for _, o := range objects {
		if _, ok := o.(*corev1.Node); ok {
			hasNodes = true
		}
	}
	if !hasNodes {
		objects = append(objects, node("n1"), node("n2"))
	}
	c := fake.NewClientset(objects...)
	if opts.Clock == nil {
		opts.Clock = clocktesting.NewFakeClock(t0)
	}
	plan, err := MakePlan(context.Background(), c, "n1", opts)
	if err != nil {
		t.Fatalf("MakePlan: %v", err)
	}
	if w := writes(c); len(w) > 0 {
		t.Errorf("MakePlan wrote %v; it must only read", w)
	}
	for _, p := range plan.Pods {
		if p.Reason == "" {
			t.Errorf("pod %s: empty reason", p.Pod)
		}
	}
	return plan
}

func TestMakePlanDecidesPerOwner(t *testing.T) {
	web1, web1rs := deployment("web", 1, 1)
	web2, web2rs := deployment("web", 2, 2)
	web3, web3rs := deployment("web", 3, 3, unavailable(2))
	webPaused, webPausedRS := deployment("web", 2, 2, paused())
	webPausedRoom, webPausedRoomRS := deployment("web", 2, 2, paused(), unavailable(1))
	webNotReady, webNotReadyRS := deployment("web", 2, 0)
	localPVC, localPV := localVolume("data-cache-0", "pv-local", "n1")

	tests := []struct {
		name    string
		objects []runtime.Object
		opts    Options
		want    []PodPlan
	}{{
		name:    "a single-replica Deployment is rollout-restarted",
		objects: objs(web1, web1rs, pod("web-a", "n1", inDeployment("web"))),
		want:    []PodPlan{{Pod: "shop/web-a", Owner: "Deployment/web", Action: ActionRolloutRestart, Target: "n2"}},
	}, {
		name:    "a Deployment with all its available replicas on the node is rollout-restarted",
		objects: objs(web2, web2rs, pod("web-a", "n1", inDeployment("web")), pod("web-b", "n1", inDeployment("web"))),
		want: []PodPlan{
			{Pod: "shop/web-a", Owner: "Deployment/web", Action: ActionRolloutRestart, Target: "n2"},
			{Pod: "shop/web-b", Owner: "Deployment/web", Action: ActionRolloutRestart, Target: "n2"},
		},
	}, {
		name:    "a Deployment with no available replica anywhere is rollout-restarted",
		objects: objs(webNotReady, webNotReadyRS, pod("web-a", "n1", inDeployment("web"), notReadyPod()), pod("web-b", "n2", inDeployment("web"), notReadyPod())),
		want:    []PodPlan{{Pod: "shop/web-a", Owner: "Deployment/web", Action: ActionRolloutRestart, Target: "n2"}},
	}, {
		name: "a Deployment with replicas elsewhere is evicted",
		objects: objs(web3, web3rs, pod("web-a", "n1", inDeployment("web")), pod("web-b", "n1", inDeployment("web")),
			pod("web-c", "n2", inDeployment("web"))),
		want: []PodPlan{
			{Pod: "shop/web-a", Owner: "Deployment/web", Action: ActionEvict, Target: "n2"},
			{Pod: "shop/web-b", Owner: "Deployment/web", Action: ActionEvict, Target: "n2"},
		},
	}, {
		name:    "a paused Deployment cannot roll, and evicting takes it below its strategy: refused",
		objects: objs(webPaused, webPausedRS, pod("web-a", "n1", inDeployment("web")), pod("web-b", "n1", inDeployment("web"))),
		want: []PodPlan{
			{Pod: "shop/web-a", Owner: "Deployment/web", Action: ActionRefuse, Would: ActionEvict, Target: "n2"},
			{Pod: "shop/web-b", Owner: "Deployment/web", Action: ActionRefuse, Would: ActionEvict, Target: "n2"},
		},
	}, {
		name:    "Force evicts a paused Deployment's pods",
		objects: objs(webPaused, webPausedRS, pod("web-a", "n1", inDeployment("web")), pod("web-b", "n1", inDeployment("web"))),
		opts:    Options{Force: true},
		want: []PodPlan{
			{Pod: "shop/web-a", Owner: "Deployment/web", Action: ActionEvict, Target: "n2"},
			{Pod: "shop/web-b", Owner: "Deployment/web", Action: ActionEvict, Target: "n2"},
		},
	}, {
		name:    "a paused Deployment whose strategy allows one missing replica goes one at a time",
		objects: objs(webPausedRoom, webPausedRoomRS, pod("web-a", "n1", inDeployment("web")), pod("web-b", "n1", inDeployment("web"))),
		want: []PodPlan{
			{Pod: "shop/web-a", Owner: "Deployment/web", Action: ActionEvictOneAtATime, Target: "n2"},
			{Pod: "shop/web-b", Owner: "Deployment/web", Action: ActionEvictOneAtATime, Target: "n2"},
		},
	}, {
		name:    "a ReplicaSet without a Deployment is evicted",
		objects: objs(bareReplicaSet("cache", 1), pod("cache-a", "n1", controlledBy("ReplicaSet", "cache"))),
		want:    []PodPlan{{Pod: "shop/cache-a", Owner: "ReplicaSet/cache", Action: ActionEvict, Target: "n2"}},
	}, {
		name: "a RollingUpdate StatefulSet's pods go one at a time",
		objects: objs(statefulSet("db", 3, appsv1.RollingUpdateStatefulSetStrategyType),
			pod("db-0", "n1", inStatefulSet("db")), pod("db-1", "n1", inStatefulSet("db")), pod("db-2", "n2", inStatefulSet("db"))),
		want: []PodPlan{
			{Pod: "shop/db-0", Owner: "StatefulSet/db", Action: ActionEvictOneAtATime, Target: "n2"},
			{Pod: "shop/db-1", Owner: "StatefulSet/db", Action: ActionEvictOneAtATime, Target: "n2"},
		},
	}, {
		name:    "an OnDelete StatefulSet's pods go one at a time too (a restart would never roll)",
		objects: objs(statefulSet("db", 1, appsv1.OnDeleteStatefulSetStrategyType), pod("db-0", "n1", inStatefulSet("db"))),
		want:    []PodPlan{{Pod: "shop/db-0", Owner: "StatefulSet/db", Action: ActionEvictOneAtATime, Target: "n2"}},
	}, {
		name:    "a Job's pod is evicted",
		objects: objs(pod("batch-x", "n1", controlledBy("Job", "batch"))),
		want:    []PodPlan{{Pod: "shop/batch-x", Owner: "Job/batch", Action: ActionEvict, Target: "n2"}},
	}, {
		name:    "a custom controller's pod is evicted",
		objects: objs(pod("x-0", "n1", controlledBy("CloneSet", "x"))),
		want:    []PodPlan{{Pod: "shop/x-0", Owner: "CloneSet/x", Action: ActionEvict, Target: "n2"}},
	}, {
		name:    "a DaemonSet's pod stays",
		objects: objs(pod("proxy-x", "n1", controlledBy("DaemonSet", "proxy"))),
		want:    []PodPlan{{Pod: "shop/proxy-x", Owner: "DaemonSet/proxy", Action: ActionSkip}},
	}, {
		name:    "a static pod stays",
		objects: objs(pod("etcd-n1", "n1", mirror(), controlledBy("Node", "n1"))),
		want:    []PodPlan{{Pod: "shop/etcd-n1", Owner: "Node/n1", Action: ActionSkip}},
	}, {
		name:    "a finished pod stays",
		objects: objs(pod("done", "n1", controlledBy("Job", "batch"), phase(corev1.PodSucceeded))),
		want:    []PodPlan{{Pod: "shop/done", Owner: "Job/batch", Action: ActionSkip}},
	}, {
		name:    "a terminating pod is waited for",
		objects: objs(web2, web2rs, pod("web-a", "n1", inDeployment("web"), terminating())),
		want:    []PodPlan{{Pod: "shop/web-a", Owner: "Deployment/web", Action: ActionWait}},
	}, {
		name:    "a pod without a controller is refused",
		objects: objs(pod("debug", "n1")),
		want:    []PodPlan{{Pod: "shop/debug", Action: ActionRefuse, Would: ActionEvict}},
	}, {
		name:    "Force evicts a pod without a controller",
		objects: objs(pod("debug", "n1")),
		opts:    Options{Force: true},
		want:    []PodPlan{{Pod: "shop/debug", Action: ActionEvict}},
	}, {
		name:    "a pod whose ReplicaSet is gone is refused like one without a controller",
		objects: objs(pod("orphan", "n1", controlledBy("ReplicaSet", "gone"))),
		want:    []PodPlan{{Pod: "shop/orphan", Owner: "ReplicaSet/gone", Action: ActionRefuse, Would: ActionEvict}},
	}, {
		name:    "an emptyDir pod is refused",
		objects: objs(web1, web1rs, pod("web-a", "n1", inDeployment("web"), emptyDir("cache"))),
		want: []PodPlan{{Pod: "shop/web-a", Owner: "Deployment/web", Action: ActionRefuse, Would: ActionRolloutRestart,
			Target: "n2", LocalStorage: []string{"emptyDir cache"}}},
	}, {
		name:    "DeleteLocalData moves an emptyDir pod",
		objects: objs(web1, web1rs, pod("web-a", "n1", inDeployment("web"), emptyDir("cache"))),
		opts:    Options{DeleteLocalData: true},
		want: []PodPlan{{Pod: "shop/web-a", Owner: "Deployment/web", Action: ActionRolloutRestart,
			Target: "n2", LocalStorage: []string{"emptyDir cache"}}},
	}, {
		name: "a local PersistentVolume pins its pod: refused even with DeleteLocalData, as it has nowhere to go",
		objects: objs(statefulSet("cache", 1, appsv1.RollingUpdateStatefulSetStrategyType), localPVC, localPV,
			pod("cache-0", "n1", inStatefulSet("cache"), claim("data-cache-0"))),
		opts: Options{DeleteLocalData: true},
		want: []PodPlan{{Pod: "shop/cache-0", Owner: "StatefulSet/cache", Action: ActionRefuse, Would: ActionEvictOneAtATime,
			LocalStorage: []string{"local PersistentVolume pv-local"},
			Nowhere:      []Unfit{{Cause: UnfitVolumeAffinity, Detail: "pv-local", Nodes: []string{"n2"}}}}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := planFor(t, tc.objects, tc.opts)
			if diff := cmp.Diff(tc.want, plan.Pods, decisionOnly); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			refused := false
			for _, p := range tc.want {
				refused = refused || p.Action == ActionRefuse
			}
			if err := plan.Err(); refused != errors.Is(err, ErrRefused) {
				t.Errorf("Plan.Err() = %v; want ErrRefused: %v", err, refused)
			}
		})
	}
}

func TestMakePlanWarns(t *testing.T) {
	surge0, surge0RS := deployment("web", 2, 2, maxSurgeZero())
	webPaused, webPausedRS := deployment("web", 2, 2, paused())
	web2, web2RS := deployment("web", 2, 2, unavailable(1))
	tests := []struct {
		name     string
		objects  []runtime.Object
		opts     Options
		fragment string
	}{{
		name:     "a rollout with maxSurge 0 dips below desired",
		objects:  objs(surge0, surge0RS, pod("web-a", "n1", inDeployment("web")), pod("web-b", "n1", inDeployment("web"))),
		fragment: "maxSurge 0",
	}, {
		name:     "Force takes a paused Deployment below its strategy",
		objects:  objs(webPaused, webPausedRS, pod("web-a", "n1", inDeployment("web")), pod("web-b", "n1", inDeployment("web"))),
		opts:     Options{Force: true},
		fragment: "is paused",
	}, {
		name: "a PodDisruptionBudget that allows nothing now",
		objects: objs(web2, web2RS, budget("web-pdb", "web", 0, 2, 2),
			pod("web-a", "n1", inDeployment("web")), pod("web-b", "n2", inDeployment("web"))),
		fragment: "PodDisruptionBudget shop/web-pdb allows no disruption now",
	}, {
		name:     "a single-replica StatefulSet is down until its replacement is Ready",
		objects:  objs(statefulSet("db", 1, appsv1.RollingUpdateStatefulSetStrategyType), pod("db-0", "n1", inStatefulSet("db"))),
		fragment: "has one replica",
	}, {
		name:     "a node that is not Ready may never finish deleting pods",
		objects:  objs(node("n1", notReady()), node("n2"), pod("x-0", "n1", controlledBy("Job", "x"))),
		fragment: "is not Ready",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := planFor(t, tc.objects, tc.opts)
			if !hasWarning(plan.Warnings, tc.fragment) {
				t.Errorf("warnings %q lack %q", plan.Warnings, tc.fragment)
			}
		})
	}
}

// TestPlacement runs the placement check on one single-replica Deployment
// pod on n1 (plus what each case adds) and compares where it could go.
func TestPlacement(t *testing.T) {
	type result struct {
		Action  Action
		Target  string
		Nowhere []Unfit
	}
	tests := []struct {
		name  string
		nodes []runtime.Object
		pod   []podOpt
		other []runtime.Object // more objects (pods on other nodes)
		opts  Options
		want  result
	}{{
		name:  "the other Ready node takes it",
		nodes: objs(node("n1"), node("n2")),
		want:  result{Action: ActionRolloutRestart, Target: "n2"},
	}, {
		name:  "the fitting node with the most free CPU is picked",
		nodes: objs(node("n1"), node("n2", allocatable("2", 110)), node("n3", allocatable("8", 110)), node("n4", allocatable("4", 110))),
		want:  result{Action: ActionRolloutRestart, Target: "n3"},
	}, {
		name:  "no other node at all",
		nodes: objs(node("n1")),
		want:  result{Action: ActionRefuse, Nowhere: []Unfit{{Cause: UnfitNoOtherNode}}},
	}, {
		name:  "cordoned, maintenance and not-Ready nodes are no place",
		nodes: objs(node("n1"), node("n2", cordoned()), node("n3", maintenance(`{"by":"ops"}`)), node("n4", notReady())),
		want: result{Action: ActionRefuse, Nowhere: []Unfit{
			{Cause: UnfitCordoned, Nodes: []string{"n2"}},
			{Cause: UnfitMaintenance, Nodes: []string{"n3"}},
			{Cause: UnfitNotReady, Nodes: []string{"n4"}},
		}},
	}, {
		name:  "a nodeSelector pinning the pod to the drained node",
		nodes: objs(node("n1"), node("n2"), node("n3")),
		pod:   []podOpt{nodeSelector(corev1.LabelHostname, "n1")},
		want:  result{Action: ActionRefuse, Nowhere: []Unfit{{Cause: UnfitNodeAffinity, Nodes: []string{"n2", "n3"}}}},
	}, {
		name:  "a nodeSelector another node satisfies",
		nodes: objs(node("n1", nodeLabel("disk", "ssd")), node("n2"), node("n3", nodeLabel("disk", "ssd"))),
		pod:   []podOpt{nodeSelector("disk", "ssd")},
		want:  result{Action: ActionRolloutRestart, Target: "n3"},
	}, {
		name:  "required node affinity",
		nodes: objs(node("n1", nodeLabel("zone", "a")), node("n2", nodeLabel("zone", "b")), node("n3", nodeLabel("zone", "a"))),
		pod:   []podOpt{requiredNodeAffinity("zone", corev1.NodeSelectorOpIn, "a")},
		want:  result{Action: ActionRolloutRestart, Target: "n3"},
	}, {
		name:  "required node affinity nothing else satisfies",
		nodes: objs(node("n1", nodeLabel("zone", "a")), node("n2", nodeLabel("zone", "b"))),
		pod:   []podOpt{requiredNodeAffinity("zone", corev1.NodeSelectorOpNotIn, "b")},
		want:  result{Action: ActionRefuse, Nowhere: []Unfit{{Cause: UnfitNodeAffinity, Nodes: []string{"n2"}}}},
	}, {
		name:  "an untolerated taint",
		nodes: objs(node("n1"), node("n2", taint("dedicated", "gpu", corev1.TaintEffectNoSchedule)), node("n3", taint("out", "", corev1.TaintEffectNoExecute))),
		want: result{Action: ActionRefuse, Nowhere: []Unfit{
			{Cause: UnfitTaint, Detail: "dedicated=gpu:NoSchedule", Nodes: []string{"n2"}},
			{Cause: UnfitTaint, Detail: "out:NoExecute", Nodes: []string{"n3"}},
		}},
	}, {
		name:  "a PreferNoSchedule taint does not keep it away",
		nodes: objs(node("n1"), node("n2", taint("dedicated", "gpu", corev1.TaintEffectPreferNoSchedule))),
		want:  result{Action: ActionRolloutRestart, Target: "n2"},
	}, {
		name:  "a tolerated taint",
		nodes: objs(node("n1"), node("n2", taint("dedicated", "gpu", corev1.TaintEffectNoSchedule))),
		pod:   []podOpt{tolerates("dedicated", corev1.TaintEffectNoSchedule)},
		want:  result{Action: ActionRolloutRestart, Target: "n2"},
	}, {
		name:  "not enough CPU left next to the pods already there",
		nodes: objs(node("n1"), node("n2", allocatable("2", 110))),
		pod:   []podOpt{requests("1")},
		other: objs(pod("big", "n2", requests("1500m"), controlledBy("Job", "big"))),
		want:  result{Action: ActionRefuse, Nowhere: []Unfit{{Cause: UnfitResources, Detail: "cpu", Nodes: []string{"n2"}}}},
	}, {
		name:  "finished pods hold no resources",
		nodes: objs(node("n1"), node("n2", allocatable("2", 110))),
		pod:   []podOpt{requests("1")},
		other: objs(pod("big", "n2", requests("1500m"), controlledBy("Job", "big"), phase(corev1.PodSucceeded))),
		want:  result{Action: ActionRolloutRestart, Target: "n2"},
	}, {
		name:  "no pod slot left",
		nodes: objs(node("n1"), node("n2", allocatable("4", 1))),
		other: objs(pod("other", "n2", controlledBy("Job", "j"))),
		want:  result{Action: ActionRefuse, Nowhere: []Unfit{{Cause: UnfitResources, Detail: "pods", Nodes: []string{"n2"}}}},
	}, {
		name:  "required pod anti-affinity with a replica on the only other node",
		nodes: objs(node("n1"), node("n2")),
		pod:   []podOpt{antiAffinity("web", corev1.LabelHostname)},
		other: objs(pod("web-other", "n2", controlledBy("Job", "j"), podLabel("app", "web"))),
		want:  result{Action: ActionRefuse, Nowhere: []Unfit{{Cause: UnfitPodAntiAffinity, Detail: "shop/web-other on n2", Nodes: []string{"n2"}}}},
	}, {
		name:  "another pod's required anti-affinity keeps it away (symmetry)",
		nodes: objs(node("n1"), node("n2"), node("n3")),
		other: objs(pod("loner", "n2", controlledBy("Job", "j"), antiAffinity("web", corev1.LabelHostname))),
		want:  result{Action: ActionRolloutRestart, Target: "n3"},
	}, {
		name:  "Force moves a pod with nowhere to go",
		nodes: objs(node("n1"), node("n2", cordoned())),
		opts:  Options{Force: true},
		want:  result{Action: ActionRolloutRestart, Nowhere: []Unfit{{Cause: UnfitCordoned, Nodes: []string{"n2"}}}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dep, rs := deployment("web", 1, 1)
			objects := append(objs(dep, rs, pod("web-a", "n1", append([]podOpt{inDeployment("web")}, tc.pod...)...)), tc.nodes...)
			objects = append(objects, tc.other...)
			plan := planFor(t, objects, tc.opts)
			var got result
			for _, p := range plan.Pods {
				if p.Pod == "shop/web-a" {
					got = result{Action: p.Action, Target: p.Target, Nowhere: p.Nowhere}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("placement of shop/web-a (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlacementBooksEarlierMovers: two pods needing 1 CPU each and a node
// with 1.5 CPUs free: one fits, the other has nowhere to go.
func TestPlacementBooksEarlierMovers(t *testing.T) {
	a, aRS := deployment("a", 1, 1)
	b, bRS := deployment("b", 1, 1)
	plan := planFor(t, objs(node("n1"), node("n2", allocatable("1500m", 110)), a, aRS, b, bRS,
		pod("a-1", "n1", inDeployment("a"), requests("1")), pod("b-1", "n1", inDeployment("b"), requests("1"))), Options{})
	got := map[string]Action{}
	for _, p := range plan.Pods {
		got[p.Pod] = p.Action
	}
	want := map[string]Action{"shop/a-1": ActionRolloutRestart, "shop/b-1": ActionRefuse}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
}

// TestPlanJSON pins the wire shape the CLI prints with -o json.
func TestPlanJSON(t *testing.T) {
	dep, rs := deployment("web", 1, 1)
	plan := planFor(t, objs(dep, rs, pod("web-a", "n1", inDeployment("web")), pod("debug", "n1"),
		node("n1"), node("n2", cordoned())), Options{})
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	pods := got["pods"].([]any)
	first := pods[0].(map[string]any)
	var keys []string
	for k := range first {
		keys = append(keys, k)
	}
	// debug has no controller: refused, and "owner" is there, empty, so
	// every entry has pod, owner, action and reason.
	wantKeys := []string{"action", "bound", "owner", "pod", "reason", "uid", "would"}
	if diff := cmp.Diff(wantKeys, keys, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("keys of %s (-want +got):\n%s", b, diff)
	}
	second := pods[1].(map[string]any)
	// The bound the drain keeps of the workload, per pod: replicas −
	// maxUnavailable for a Deployment.
	if diff := cmp.Diff(map[string]any{"replicas": 1.0, "minAvailable": 1.0, "rule": "RollingUpdate: 1 replicas − maxUnavailable 0"}, second["bound"]); diff != "" {
		t.Errorf("bound of %s (-want +got):\n%s", second["pod"], diff)
	}
	nowhere := second["nowhere"].([]any)[0].(map[string]any)
	if nowhere["cause"] != string(UnfitCordoned) || second["owner"] != "Deployment/web" || got["node"] != "n1" {
		t.Errorf("unexpected JSON: %s", b)
	}
	var back Plan
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(plan, back); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
}
