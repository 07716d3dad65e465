package controlplane

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// outOfService is the taint the product applies after fencing.
var outOfService = corev1.Taint{
	Key:    corev1.TaintNodeOutOfService,
	Value:  "nodeshutdown",
	Effect: corev1.TaintEffectNoExecute,
}

func TestBinariesAvailableSaysHowToBuild(t *testing.T) {
	err := BinariesAvailable(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "make e2e-bins") || !strings.Contains(err.Error(), "hack/e2e-bins.sh") {
		t.Fatalf("BinariesAvailable(empty dir) = %v, want an error naming `make e2e-bins` (hack/e2e-bins.sh)", err)
	}
}

// TestNonGracefulShutdownSmoke proves the mechanism the product relies on,
// with real controllers: a dead node's StatefulSet pod and its volume stay
// put until the out-of-service taint, then podgc force-deletes the pod, the
// attach/detach controller force-detaches the volume, and the pod runs
// elsewhere with the volume attached there.
func TestNonGracefulShutdownSmoke(t *testing.T) {
	testStart := time.Now()
	cp := StartT(t, Options{Nodes: []NodeSpec{
		{Name: "node-a", SystemUUID: "4c4c4544-0000-0000-0000-00000000000a"},
		{Name: "node-b", SystemUUID: "4c4c4544-0000-0000-0000-00000000000b"},
		{Name: "node-c", SystemUUID: "4c4c4544-0000-0000-0000-00000000000c"},
	}})
	bringUp := time.Since(testStart)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cp.Client()
	const ns, claim, podName = "smoke", "data-db-0", "db-0"

	timeline := newTimeline(t)
	timeline.mark("control plane up with 3 Ready nodes", testStart)
	t.Logf("control plane RSS after bring-up: %s", controlPlaneRSS(cp))

	if v, err := c.Discovery().ServerVersion(); err != nil || v.GitVersion != KubernetesVersion {
		t.Errorf("apiserver /version = %+v, %v; want %s (hack/e2e-bins.sh -ldflags)", v, err, KubernetesVersion)
	} else {
		t.Logf("apiserver /version: %s %s built %s", v.GitVersion, v.GoVersion, v.BuildDate)
	}
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	rec := recordPods(ctx, t, cp, ns)
	if _, err := c.AppsV1().StatefulSets(ns).Create(ctx, StatefulSet(ns, "db", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	var pod *corev1.Pod
	mustWait(t, cp.WaitFor(ctx, "pod db-0 Running", func() (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		pod = p
		return p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning, nil
	}))
	deadNode, oldUID := pod.Spec.NodeName, pod.UID
	timeline.mark("pod db-0 Running on "+deadNode, created)

	var pv *corev1.PersistentVolume
	var volume corev1.UniqueVolumeName
	mustWait(t, cp.WaitFor(ctx, "claim "+claim+" bound", func() (bool, error) {
		var err error
		pv, volume, err = cp.VolumeOfClaim(ctx, ns, claim)
		return pv != nil, err
	}))
	mustWait(t, cp.WaitFor(ctx, "VolumeAttachment attached on "+deadNode, func() (bool, error) {
		va, err := attachmentOn(ctx, cp, pv.Name, deadNode)
		return va != nil && va.Status.Attached, err
	}))
	// The kubelet stand-in reports the mount; the attach/detach controller
	// (not us) reports the attachment in node status.
	mustWait(t, cp.WaitFor(ctx, deadNode+" reports the volume in use and attached", func() (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, deadNode, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		attached := slices.ContainsFunc(n.Status.VolumesAttached, func(a corev1.AttachedVolume) bool { return a.Name == volume })
		return slices.Contains(n.Status.VolumesInUse, volume) && attached, nil
	}))
	timeline.mark("volume "+string(volume)+" attached and in use on "+deadNode, created)

	// The node's kubelet dies.
	killed := time.Now()
	if err := cp.KillNode(deadNode); err != nil {
		t.Fatal(err)
	}
	var readyStatus corev1.ConditionStatus
	mustWait(t, cp.WaitFor(ctx, deadNode+" not Ready", func() (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, deadNode, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		readyStatus = nodeCondition(n, corev1.NodeReady)
		return readyStatus != corev1.ConditionTrue, nil
	}))
	timeline.mark(fmt.Sprintf("%s Ready=%s (grace period %s)", deadNode, readyStatus, DefaultNodeMonitorGracePeriod), killed)
	if readyStatus != corev1.ConditionUnknown {
		t.Errorf("dead node Ready=%s, want Unknown (node controller: kubelet stopped posting status)", readyStatus)
	}

	// Without the taint nothing may move: the pod stays bound to the dead
	// node and the volume stays attached there. 10 s is enough to catch an
	// eager controller (they act within a second or two) and keeps the test
	// short; the unsafe 6-minute force detach is out of reach by design.
	const observe = 10 * time.Second
	err := Consistently(ctx, observe, "pod and volume stay on the dead node without the taint", func() (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("pod: %w", err)
		}
		if p.UID != oldUID {
			return false, fmt.Errorf("pod replaced by %s", p.UID)
		}
		va, err := attachmentOn(ctx, cp, pv.Name, deadNode)
		if err != nil || va == nil || !va.Status.Attached || va.DeletionTimestamp != nil {
			return false, fmt.Errorf("volume attachment on %s: %v, err %v", deadNode, va, err)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after %s without the taint: pod %s phase=%s terminating=%v ready=%s; VolumeAttachment on %s still attached",
		observe, podName, p.Status.Phase, p.DeletionTimestamp != nil, podCondition(p, corev1.PodReady), deadNode)

	// What bmcfence does after confirming the node is off.
	tainted := time.Now()
	if err := setTaint(ctx, cp, deadNode, true); err != nil {
		t.Fatal(err)
	}
	timeline.mark("out-of-service taint applied", tainted)
	mustWait(t, cp.WaitFor(ctx, "old pod db-0 gone", func() (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && p.UID != oldUID, err
	}))
	timeline.mark("old pod deleted", tainted)
	mustWait(t, cp.WaitFor(ctx, "VolumeAttachment on "+deadNode+" deleted", func() (bool, error) {
		va, err := attachmentOn(ctx, cp, pv.Name, deadNode)
		return va == nil, err
	}))
	timeline.mark("VolumeAttachment on "+deadNode+" deleted (detached)", tainted)
	var newNode string
	mustWait(t, cp.WaitFor(ctx, "replacement pod Running elsewhere with the volume attached", func() (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		if p.UID == oldUID || p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		newNode = p.Spec.NodeName
		va, err := attachmentOn(ctx, cp, pv.Name, newNode)
		return va != nil && va.Status.Attached, err
	}))
	timeline.mark("replacement pod Running on "+newNode+", volume attached there", tainted)
	if newNode == deadNode {
		t.Errorf("replacement pod landed on the dead node %s", deadNode)
	}

	// Who did it: the controllers' own counters, and the old pod's history.
	metrics, err := cp.Metrics(ctx, "kube-controller-manager")
	if err != nil {
		t.Fatal(err)
	}
	podGC := metricValue(metrics, "pod_gc_collector_force_delete_pods_total", `reason="out-of-service"`)
	forced := metricValue(metrics, "attachdetach_controller_forced_detaches", `reason="out-of-service"`)
	t.Logf("kube-controller-manager: pod_gc_collector_force_delete_pods_total{reason=out-of-service}=%v attachdetach_controller_forced_detaches{reason=out-of-service}=%v", podGC, forced)
	if podGC < 1 {
		t.Errorf("podgc did not force-delete the terminating pod (counter %v)", podGC)
	}
	if forced < 1 {
		t.Errorf("attach/detach controller did not force-detach for out-of-service (counter %v)", forced)
	}
	for _, e := range rec.history(oldUID) {
		t.Logf("old pod: +%5.1fs after taint: %s", e.at.Sub(tainted).Seconds(), e.what)
	}

	// Contrast, on a live node: scaling to zero makes kwok finish the pod,
	// the kubelet stand-in drops the mount, and the attach/detach controller
	// detaches normally (no forced detach).
	scaled := time.Now()
	if _, err := c.AppsV1().StatefulSets(ns).Patch(ctx, "db", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	mustWait(t, cp.WaitFor(ctx, "pod gone and volume detached from live "+newNode, func() (bool, error) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		va, err := attachmentOn(ctx, cp, pv.Name, newNode)
		return va == nil, err
	}))
	timeline.mark("scaled to 0: pod deleted by "+newNode+"'s kwok, volume detached normally", scaled)
	if metrics, err = cp.Metrics(ctx, "kube-controller-manager"); err != nil {
		t.Fatal(err)
	}
	if got := metricValue(metrics, "attachdetach_controller_forced_detaches"); got != forced {
		t.Errorf("detach from a live node was forced: forced_detaches went from %v to %v", forced, got)
	}

	// The node comes back: kubelet restarts, the taint is removed, Ready again.
	restarted := time.Now()
	if err := cp.RestartNode(ctx, deadNode); err != nil {
		t.Fatal(err)
	}
	if err := setTaint(ctx, cp, deadNode, false); err != nil {
		t.Fatal(err)
	}
	mustWait(t, cp.WaitFor(ctx, deadNode+" Ready, untainted, volumesInUse cleared", func() (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, deadNode, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return nodeReady(n) && !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == outOfService.Key }) &&
			len(n.Status.VolumesInUse) == 0, nil
	}))
	timeline.mark(deadNode+" Ready again, taint removed", restarted)
	t.Logf("bring-up %.1fs; whole test %.1fs", bringUp.Seconds(), time.Since(testStart).Seconds())
	t.Logf("control plane RSS at the end: %s", controlPlaneRSS(cp))
}

// TestKwokKeepsVolumesInUse checks that kwok's node status writes (the
// node-initialize stage; the heartbeat stage writes a subset of the same
// fields) leave node.status.volumesInUse alone, so a restarted or
// heartbeating kwok never erases what the kubelet stand-in reported.
func TestKwokKeepsVolumesInUse(t *testing.T) {
	cp := StartT(t, Options{Nodes: []NodeSpec{{Name: "node-a"}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := cp.Client()
	if err := cp.KillNode("node-a"); err != nil { // stops the reporter too
		t.Fatal(err)
	}
	const fake = corev1.UniqueVolumeName("kubernetes.io/csi/" + CSIDriverName + "^kwok-must-keep-this")
	// NotReady (as the node controller would make it after the grace period)
	// so that the new kwok's node-initialize stage rewrites the status.
	patch := fmt.Sprintf(`{"status":{"volumesInUse":[%q],"conditions":[{"type":"Ready","status":"False","reason":"Test","message":"test","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`,
		fake, metav1.Now().UTC().Format(time.RFC3339), metav1.Now().UTC().Format(time.RFC3339))
	if _, err := c.CoreV1().Nodes().PatchStatus(ctx, "node-a", []byte(patch)); err != nil {
		t.Fatal(err)
	}
	if err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A kwok for the node, without marking the node alive for the reporter.
	n, err := cp.node("node-a")
	if err != nil {
		t.Fatal(err)
	}
	args, err := cp.kwokArgs(n)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now().Truncate(time.Second)
	p, err := startProcess("kwok-node-a-check", filepath.Join(cp.BinDir(), "kwok"), args, minimalEnv("HOME="+n.home), cp.LogPath("kwok-node-a-check"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.kill()
	var node *corev1.Node
	mustWait(t, cp.WaitFor(ctx, "kwok marks node-a Ready again", func() (bool, error) {
		if p.exited() {
			return false, p.exitError()
		}
		node, err = c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue && !cond.LastHeartbeatTime.Time.Before(started), nil
			}
		}
		return false, nil
	}))
	if !slices.Contains(node.Status.VolumesInUse, fake) {
		t.Errorf("kwok's status update dropped volumesInUse: got %v", node.Status.VolumesInUse)
	}
}

func mustWait(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// attachmentOn returns the VolumeAttachment of pv on node, nil if none.
func attachmentOn(ctx context.Context, cp *ControlPlane, pv, node string) (*storagev1.VolumeAttachment, error) {
	vas, err := cp.VolumeAttachments(ctx, pv)
	if err != nil {
		return nil, err
	}
	for i := range vas {
		if vas[i].Spec.NodeName == node {
			return &vas[i], nil
		}
	}
	return nil, nil
}

// setTaint adds or removes the out-of-service taint, against the read
// object with conflict detection, as the product does.
func setTaint(ctx context.Context, cp *ControlPlane, node string, add bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == outOfService.Key })
		if add {
			ts := outOfService
			ts.TimeAdded = &metav1.Time{Time: time.Now()}
			taints = append(taints, ts)
		}
		n.Spec.Taints = taints
		_, err = cp.Client().CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// metricValue sums the samples of the metrics named ...name whose labels
// contain every given label pair (e.g. `reason="out-of-service"`).
func metricValue(text, name string, labelPairs ...string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		// Match on the name's end: component-base prefixes the subsystem
		// (the attach/detach counter is exposed as
		// attachdetach_controller_attachdetach_controller_forced_detaches).
		metric, _, _ := strings.Cut(line, "{")
		metric, _, _ = strings.Cut(metric, " ")
		if !strings.HasSuffix(metric, name) {
			continue
		}
		ok := true
		for _, lp := range labelPairs {
			ok = ok && strings.Contains(line, lp)
		}
		if !ok {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// timeline prints "what happened, how long after what" lines.
type timeline struct{ t *testing.T }

func newTimeline(t *testing.T) timeline { return timeline{t} }

func (tl timeline) mark(what string, since time.Time) {
	tl.t.Logf("TIMING %-70s %6.1fs", what, time.Since(since).Seconds())
}

// podRecorder keeps every observed change of the namespace's pods, from a
// watch, so the test can tell who did what to the old pod.
type podRecorder struct {
	mu     sync.Mutex
	events map[types.UID][]podEvent
}

type podEvent struct {
	at   time.Time
	what string
}

func recordPods(ctx context.Context, t *testing.T, cp *ControlPlane, ns string) *podRecorder {
	r := &podRecorder{events: map[types.UID][]podEvent{}}
	f := informers.NewSharedInformerFactoryWithOptions(cp.Client(), 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	describe := func(p *corev1.Pod) string {
		s := fmt.Sprintf("phase=%s node=%s", p.Status.Phase, p.Spec.NodeName)
		if p.DeletionTimestamp != nil {
			s += fmt.Sprintf(" terminating(grace=%ds)", *p.DeletionGracePeriodSeconds)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
				s += " DisruptionTarget=" + c.Reason
			}
		}
		return s
	}
	add := func(p *corev1.Pod, what string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		evs := r.events[p.UID]
		if len(evs) > 0 && evs[len(evs)-1].what == what {
			return
		}
		r.events[p.UID] = append(evs, podEvent{time.Now(), what})
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { p := o.(*corev1.Pod); add(p, "created "+describe(p)) },
		UpdateFunc: func(_, o any) { p := o.(*corev1.Pod); add(p, describe(p)) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				add(p, "deleted")
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() { close(stop); f.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("pod informer did not sync")
	}
	return r
}

func (r *podRecorder) history(uid types.UID) []podEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events[uid])
}

// controlPlaneRSS sums VmRSS of every process of the control plane (for the
// measurements in the report; Linux only).
func controlPlaneRSS(cp *ControlPlane) string {
	cp.mu.Lock()
	procs := slices.Clone(cp.procs)
	for _, n := range cp.nodes {
		n.mu.Lock()
		if n.proc != nil && !n.proc.exited() {
			procs = append(procs, n.proc)
		}
		n.mu.Unlock()
	}
	cp.mu.Unlock()
	var total int
	var parts []string
	for _, p := range procs {
		kb := rssKB(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		total += kb
		parts = append(parts, fmt.Sprintf("%s=%dMB", p.name, kb/1024))
	}
	return fmt.Sprintf("%d MB total (%s); this test process (in-process stand-ins, informers) %d MB",
		total/1024, strings.Join(parts, " "), rssKB("/proc/self/status")/1024)
}

func rssKB(statusFile string) int {
	data, err := os.ReadFile(statusFile)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb
		}
	}
	return 0
}
