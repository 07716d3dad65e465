package drain

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/cluster"
)

// t0 is where every fake clock starts.
var t0 = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)

const ns = "shop"

// ---- nodes ----

type nodeOpt func(*corev1.Node)

// node builds a Ready node with 4 CPUs, 16Gi and 110 pods allocatable.
func node(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
			Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")},
		},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func cordoned() nodeOpt { return func(n *corev1.Node) { n.Spec.Unschedulable = true } }
func notReady() nodeOpt {
	return func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown }
}

func maintenance(value string) nodeOpt {
	return func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[cluster.AnnotationMaintenance] = value
	}
}

func nodeLabel(k, v string) nodeOpt { return func(n *corev1.Node) { n.Labels[k] = v } }

func taint(k, v string, e corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Value: v, Effect: e}) }
}

func allocatable(cpu string, pods int) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse(cpu)
		n.Status.Allocatable[corev1.ResourcePods] = *resource.NewQuantity(int64(pods), resource.DecimalSI)
	}
}

// ---- pods ----

type podOpt func(*corev1.Pod)

// pod builds a Running, Ready pod on node (UID "uid-NAME").
func pod(name, nodeName string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{}},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func controlledBy(kind, name string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: ptr.To(true)}}
	}
}

func podLabel(k, v string) podOpt { return func(p *corev1.Pod) { p.Labels[k] = v } }

func requests(cpu string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
}

func nodeSelector(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{k: v} }
}

func requiredNodeAffinity(key string, op corev1.NodeSelectorOperator, values ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}},
			}}},
		}}
	}
}

// antiAffinity keeps the pod away from pods labelled app=app per topologyKey.
func antiAffinity(app, topologyKey string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
				TopologyKey:   topologyKey,
			}},
		}}
	}
}

func tolerates(k string, e corev1.TaintEffect) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: k, Operator: corev1.TolerationOpExists, Effect: e})
	}
}

func emptyDir(name string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
}

func claim(name string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}})
	}
}

func terminating() podOpt {
	return func(p *corev1.Pod) {
		p.DeletionTimestamp = &metav1.Time{Time: t0}
		p.DeletionGracePeriodSeconds = ptr.To[int64](30)
		p.Finalizers = []string{"test/keep"} // the fake tracker keeps it
	}
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func mirror() podOpt {
	return func(p *corev1.Pod) {
		p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
	}
}

func notReadyPod() podOpt {
	return func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
}

// ---- workloads ----

type deployOpt func(*appsv1.Deployment)

// deployment builds a Deployment with replicas, available of them
// available, at revision 1, rolled out; and its ReplicaSet NAME-rs1.
// Pods join it with inDeployment(name).
func deployment(name string, replicas, available int32, opts ...deployOpt) (*appsv1.Deployment, *appsv1.ReplicaSet) {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Generation: 1,
			Annotations: map[string]string{revisionAnnotation: "1"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}},
		},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: replicas, UpdatedReplicas: replicas, ReadyReplicas: available, AvailableReplicas: available},
	}
	for _, o := range opts {
		o(d)
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-rs1", UID: types.UID("uid-" + name + "-rs1"),
		Annotations:     map[string]string{revisionAnnotation: "1"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: d.UID, Controller: ptr.To(true)}}}}
	return d, rs
}

func maxSurgeZero() deployOpt {
	return func(d *appsv1.Deployment) {
		d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	}
}

func paused() deployOpt { return func(d *appsv1.Deployment) { d.Spec.Paused = true } }

// inDeployment puts a pod in Deployment name's ReplicaSet, labelled app=name.
func inDeployment(name string) podOpt {
	return func(p *corev1.Pod) {
		controlledBy("ReplicaSet", name+"-rs1")(p)
		p.Labels["app"] = name
	}
}

func bareReplicaSet(name string, available int32) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Status: appsv1.ReplicaSetStatus{AvailableReplicas: available}}
}

func statefulSet(name string, replicas int32, strategy appsv1.StatefulSetUpdateStrategyType) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas), UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: strategy},
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
		Status: appsv1.StatefulSetStatus{Replicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas},
	}
}

func inStatefulSet(name string) podOpt {
	return func(p *corev1.Pod) {
		controlledBy("StatefulSet", name)(p)
		p.Labels["app"] = name
	}
}

func budget(name, app string, allowed, healthy, desired int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed, CurrentHealthy: healthy, DesiredHealthy: desired},
	}
}

// localVolume is a bound claim on a local PV pinned to nodeName.
func localVolume(claimName, pvName, nodeName string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claimName},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pvName}}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disk"}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}},
		}}}},
	}}
	return pvc, pv
}

// ---- fake cluster and clock ----

// fakeOptions are Options for tests: a fake clock at t0, 1 s polls.
func fakeOptions() (Options, *clocktesting.FakeClock) {
	fc := clocktesting.NewFakeClock(t0)
	return Options{Clock: fc, PollInterval: time.Second, User: "ops@example.com", Reason: "firmware"}, fc
}

// drive runs fn and steps the fake clock by step whenever at least waiters
// timers are pending (Execute's own timeout is one; each sleeping task
// adds one), so time only moves when the code under test waits on it. A
// hang fails the test after 20 s of real time.
func drive(t *testing.T, fc *clocktesting.FakeClock, waiters int, step time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	guard := time.After(20 * time.Second)
	for {
		select {
		case <-done:
			return
		case <-guard:
			t.Fatalf("still running after 20 s of real time (fake clock at +%s)", fc.Since(t0))
		default:
		}
		if fc.Waiters() >= waiters {
			fc.Step(step)
		} else {
			runtime.Gosched()
		}
	}
}

// writes returns the verbs and resources of the mutating actions.
func writes(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		r := a.GetResource().Resource
		if s := a.GetSubresource(); s != "" {
			r += "/" + s
		}
		out = append(out, a.GetVerb()+" "+r)
	}
	return out
}

// eventReasons returns the reasons of the Events created on the fake.
func eventReasons(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		if ca, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "events" {
			out = append(out, ca.GetObject().(*corev1.Event).Reason)
		}
	}
	return out
}

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// deletePod removes a pod from the fake's tracker (as kwok/kubelet would
// after an eviction). For use inside reactors, which hold the fake's lock.
func deletePod(c *fake.Clientset, name string) {
	if err := c.Tracker().Delete(podsResource, ns, name); err != nil {
		panic(fmt.Sprintf("delete pod %s: %v", name, err))
	}
}

func hasWarning(warnings []string, fragment string) bool {
	for _, w := range warnings {
		if strings.Contains(w, fragment) {
			return true
		}
	}
	return false
}

func hostPath(name, path string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: path}}})
	}
}

// unavailable sets the Deployment's maxUnavailable (maxSurge stays 1).
func unavailable(n int32) deployOpt {
	return func(d *appsv1.Deployment) {
		d.Spec.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(n))
	}
}
