//go:build scale

package scale

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The workload: about podsPerNode pods on every node, as a real cluster
// runs them: most from Deployments, some from StatefulSets (Parallel pod
// management: the StatefulSet controller starts all replicas at once instead
// of one after another), spread over namespaces, each pod with a container
// spec, labels and a projected service-account token volume (added by
// admission), and a status kwok fills in (IP, conditions, container
// statuses). kwok runs a pod as cheaply as a node: no container runs.
const (
	deploymentReplicas  = 10
	statefulSetReplicas = 5
	// statefulSetShare of the pods come from StatefulSets, the rest from
	// Deployments.
	statefulSetShare = 0.2
	// workloadsPerNamespace: a namespace per team or application.
	workloadsPerNamespace = 100
)

// workloadPlan is how many Deployments and StatefulSets carry pods pods.
type workloadPlan struct {
	pods, deployments, statefulSets, namespaces int
}

func planWorkload(pods int) workloadPlan {
	sts := int(float64(pods)*statefulSetShare) / statefulSetReplicas
	deps := (pods - sts*statefulSetReplicas + deploymentReplicas - 1) / deploymentReplicas
	ns := (deps + sts + workloadsPerNamespace - 1) / workloadsPerNamespace
	return workloadPlan{pods: deps*deploymentReplicas + sts*statefulSetReplicas, deployments: deps, statefulSets: sts, namespaces: max(ns, 1)}
}

// podTemplate is a typical application pod: one container with resources,
// ports, environment and probes, and the labels tools put on it.
func podTemplate(app string) corev1.PodTemplateSpec {
	labels := map[string]string{
		"app":                          app,
		"app.kubernetes.io/name":       app,
		"app.kubernetes.io/part-of":    "scale",
		"app.kubernetes.io/managed-by": "bmcfence-scale",
		"tier":                         "backend",
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      labels,
			Annotations: map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.example.com/team/" + app + ":1.4.2",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
				Env: []corev1.EnvVar{
					{Name: "APP_NAME", Value: app},
					{Name: "LOG_LEVEL", Value: "info"},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}, PeriodSeconds: 10},
				LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}, PeriodSeconds: 20},
			}},
		},
	}
}

// workload creates the plan's objects (the namespaces first) and waits until
// every pod is Running: ready replicas of every Deployment and StatefulSet,
// as their controllers count them. It returns the plan.
func (h *harness) workload(ctx context.Context, pods int) workloadPlan {
	p := planWorkload(pods)
	if p.pods == 0 {
		return p
	}
	c := h.c
	for i := range p.namespaces {
		if err := h.tb.CP.CreateNamespace(ctx, nsName(i)); err != nil {
			h.t.Fatal(err)
		}
	}
	// Created from 8 goroutines: thousands of creates, one at a time,
	// would take minutes on their own; more would only queue in etcd,
	// which is busy enough with the pods the controllers create meanwhile.
	type item struct {
		ns, name string
		sts      bool
	}
	items := make(chan item)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range items {
				err := retryBusy(ctx, func() error {
					var err error
					if it.sts {
						ss := &appsv1.StatefulSet{
							ObjectMeta: metav1.ObjectMeta{Namespace: it.ns, Name: it.name, Labels: map[string]string{"app": it.name}},
							Spec: appsv1.StatefulSetSpec{
								Replicas:            ptr.To(int32(statefulSetReplicas)),
								ServiceName:         it.name,
								PodManagementPolicy: appsv1.ParallelPodManagement,
								Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": it.name}},
								Template:            podTemplate(it.name),
							},
						}
						_, err = c.AppsV1().StatefulSets(it.ns).Create(ctx, ss, metav1.CreateOptions{})
					} else {
						d := &appsv1.Deployment{
							ObjectMeta: metav1.ObjectMeta{Namespace: it.ns, Name: it.name, Labels: map[string]string{"app": it.name}},
							Spec: appsv1.DeploymentSpec{
								Replicas: ptr.To(int32(deploymentReplicas)),
								Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": it.name}},
								Template: podTemplate(it.name),
							},
						}
						_, err = c.AppsV1().Deployments(it.ns).Create(ctx, d, metav1.CreateOptions{})
					}
					return err
				})
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("creating %s/%s: %w", it.ns, it.name, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	k := 0
	for i := range p.deployments {
		items <- item{ns: nsName(k / workloadsPerNamespace), name: fmt.Sprintf("web-%04d", i)}
		k++
	}
	for i := range p.statefulSets {
		items <- item{ns: nsName(k / workloadsPerNamespace), name: fmt.Sprintf("store-%04d", i), sts: true}
		k++
	}
	close(items)
	wg.Wait()
	if firstErr != nil {
		h.t.Fatal(firstErr)
	}
	// best is the most pods ever counted ready, bestAt when that count was
	// first reached: on a loaded machine the count wavers (late heartbeats
	// mark pods NotReady and back), and a wavering count is no progress.
	last, best, bestAt, loggedAt := -1, -1, time.Now(), time.Time{}
	h.waitFor(90*time.Minute, fmt.Sprintf("%d workload pods Running", p.pods), func() (bool, error) {
		ready := h.workloadReady(ctx)
		if ready > best {
			best, bestAt = ready, time.Now()
		}
		if ready < p.pods && time.Since(bestAt) > 2*time.Minute {
			// The count can stall short for good on a loaded machine:
			// kwok's heartbeat comes late, the node lifecycle controller
			// marks every pod of that node NotReady (its managed fields
			// say kube-controller-manager), and nothing makes them Ready
			// again once the heartbeat is back: a kubelet would, kwok's
			// pod-ready stage only handles Pending pods. A 300-node
			// set-up stalled at 8 835 of 9 000 ready, 162 pods Running
			// and NotReady on nodes that were Ready. Ready or not, a pod
			// Running on its node is what the agent watches and caches:
			// count those.
			if st := h.podStates(ctx); st.err == nil && st.ready+st.runningNotReady >= p.pods {
				h.t.Logf("workload: the controllers count %d of %d pods ready; %d pods are Running on their nodes (%d of them marked NotReady by the node lifecycle controller after a late heartbeat): going on",
					ready, p.pods, st.ready+st.runningNotReady, st.runningNotReady)
				return true, nil
			}
		}
		if ready != last {
			last = ready
			if time.Since(loggedAt) >= 30*time.Second {
				loggedAt = time.Now()
				h.t.Logf("workload: %d of %d pods ready", ready, p.pods)
			}
		}
		if time.Since(bestAt) > 10*time.Minute {
			return false, fmt.Errorf("workload: stuck at %d of %d pods ready for 10 minutes (%s)", ready, p.pods, h.notReady(ctx))
		}
		return ready >= p.pods, nil
	})
	return p
}

// podStates counts the workload's pods by where they stand: Ready, not
// scheduled (the scheduler), scheduled but not Running (kwok's pod-ready
// stage), Running but not Ready, with a few examples of those not Ready.
type podStates struct {
	err                                      error
	total, ready                             int
	unscheduled, notRunning, runningNotReady int
	examples                                 []string
}

func (h *harness) podStates(ctx context.Context) podStates {
	var st podStates
	pods, err := h.c.CoreV1().Pods("").List(ctx, metav1.ListOptions{ResourceVersion: "0", LabelSelector: "app.kubernetes.io/part-of=scale"})
	if err != nil {
		st.err = err
		return st
	}
	for _, pod := range pods.Items {
		st.total++
		ready := false
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		switch {
		case ready && pod.DeletionTimestamp == nil:
			st.ready++
			continue
		case pod.Spec.NodeName == "":
			st.unscheduled++
		case pod.Status.Phase != corev1.PodRunning:
			st.notRunning++
		default:
			st.runningNotReady++
		}
		if len(st.examples) < 5 {
			st.examples = append(st.examples, fmt.Sprintf("%s/%s on %q %s", pod.Namespace, pod.Name, pod.Spec.NodeName, pod.Status.Phase))
		}
	}
	return st
}

// notReady says where the pods that are not Ready stand: a stuck set-up
// says which component to read the log of.
func (h *harness) notReady(ctx context.Context) string {
	st := h.podStates(ctx)
	if st.err != nil {
		return fmt.Sprintf("listing the pods: %v", st.err)
	}
	return fmt.Sprintf("%d pods exist, %d Ready: %d not scheduled, %d scheduled but not Running, %d Running but not Ready (or terminating); e.g. %s",
		st.total, st.ready, st.unscheduled, st.notRunning, st.runningNotReady, strings.Join(st.examples, ", "))
}

func nsName(i int) string { return fmt.Sprintf("app-%02d", i) }

// workloadReady sums the ready replicas the controllers report (a list of
// the Deployments and StatefulSets from the watch cache, far cheaper than
// listing every pod).
func (h *harness) workloadReady(ctx context.Context) int {
	k := 0
	deps, err := h.c.AppsV1().Deployments("").List(ctx, metav1.ListOptions{ResourceVersion: "0", LabelSelector: "app"})
	if err != nil {
		return 0
	}
	for _, d := range deps.Items {
		k += int(d.Status.ReadyReplicas)
	}
	sts, err := h.c.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0
	}
	for _, s := range sts.Items {
		if s.Namespace != "scale" {
			k += int(s.Status.ReadyReplicas)
		}
	}
	return k
}

// retryBusy retries f while the API server is too busy to answer (a
// timeout, 429, 5xx): on a loaded machine etcd stalls for seconds while the
// controllers create thousands of pods. A create that timed out may have
// happened: AlreadyExists on a retry is success.
func retryBusy(ctx context.Context, f func() error) error {
	var err error
	for attempt := range 10 {
		err = f()
		switch {
		case err == nil, attempt > 0 && apierrors.IsAlreadyExists(err):
			return nil
		case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err),
			apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err):
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 2 * time.Second):
		}
	}
	return err
}
