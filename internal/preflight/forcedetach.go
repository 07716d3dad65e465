package preflight

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
)

// forceDetachFlag is kube-controller-manager's switch (1.30+) for the
// attach/detach controller's force detach on timeout.
const forceDetachFlag = "--disable-force-detach-on-timeout"

// forceDetachSince is the release that added forceDetachFlag.
var forceDetachSince = version.MajorMinor(1, 30)

// forceDetachWhy is what the attach/detach controller does without the
// flag, and why it matters with a fencing agent (Kubernetes 1.34:
// pkg/controller/volume/attachdetach/reconciler, maxWaitForUnmountDuration).
const forceDetachWhy = "kube-controller-manager then force-detaches a volume from an unhealthy node 6 minutes after its pod is gone (force-deleted, e.g. by hand), with no proof that the node is off: a partitioned node that still runs keeps writing to a volume attached elsewhere. With bmcfence, a dead node's volumes are detached at once on the out-of-service taint, after its BMC confirmed it off"

// checkForceDetach reads kube-controller-manager's command line where the
// API shows it (its static pod's mirror in kube-system: kubeadm, kops,
// most self-managed control planes) and reports whether
// --disable-force-detach-on-timeout is set. Where no such pod is readable
// (a managed control plane, k3s and RKE2 which run it in-process, or no
// grant to list kube-system's pods) the answer is unknown, and says how to
// find out.
func checkForceDetach(ctx context.Context, o Options) Result {
	r := Result{Scope: ScopeCluster, Check: CheckForceDetach, Status: StatusWarn}
	if info, err := o.Client.Discovery().ServerVersion(); err == nil {
		if v, err := version.ParseGeneric(info.GitVersion); err == nil && !v.AtLeast(forceDetachSince) {
			r.Message = fmt.Sprintf("Kubernetes %s has no %s (1.30+): %s. Fix: upgrade the control plane to 1.30 or later and set %s=true", info.GitVersion, forceDetachFlag, forceDetachWhy, forceDetachFlag)
			return r
		}
	}
	pods, err := o.Client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.Message = fmt.Sprintf("unknown: cannot list the pods in %s to read kube-controller-manager's flags (%v). Check that it runs with %s=true; without it %s",
			metav1.NamespaceSystem, err, forceDetachFlag, forceDetachWhy)
		return r
	}
	var on, off []string
	for i := range pods.Items {
		p := &pods.Items[i]
		args, ok := controllerManagerArgs(p)
		if !ok {
			continue
		}
		name := p.Namespace + "/" + p.Name
		if forceDetachDisabled(args) {
			on = append(on, name)
		} else {
			off = append(off, name)
		}
	}
	sort.Strings(on)
	sort.Strings(off)
	switch {
	case len(on) == 0 && len(off) == 0:
		r.Message = fmt.Sprintf("unknown: no kube-controller-manager pod in %s shows its flags (a managed control plane, or k3s/RKE2, which run it in-process). Check that it runs with %s=true (k3s/RKE2: kube-controller-manager-arg: [disable-force-detach-on-timeout=true] in the server's config); without it %s",
			metav1.NamespaceSystem, forceDetachFlag, forceDetachWhy)
	case len(off) > 0:
		r.Message = fmt.Sprintf("kube-controller-manager runs without %s=true (%s): %s. Fix: add %s=true to its flags (kubeadm: controllerManager.extraArgs in the ClusterConfiguration, or the static pod manifest /etc/kubernetes/manifests/kube-controller-manager.yaml on each control-plane node)",
			forceDetachFlag, list(off, 5), forceDetachWhy, forceDetachFlag)
	default:
		r.Status = StatusOK
		r.Message = fmt.Sprintf("kube-controller-manager runs with %s=true (%s): volumes leave an unhealthy node only on the out-of-service taint, after a fence", forceDetachFlag, list(on, 5))
	}
	return r
}

// controllerManagerArgs returns the command line of a kube-controller-manager
// pod's container: the container whose command (or, without one, args)
// starts with the kube-controller-manager binary.
func controllerManagerArgs(p *corev1.Pod) ([]string, bool) {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil, false
	}
	for _, c := range p.Spec.Containers {
		line := append(append([]string{}, c.Command...), c.Args...)
		if len(line) > 0 && filepath.Base(line[0]) == "kube-controller-manager" {
			return line[1:], true
		}
		// An image whose entrypoint is the binary: only args, named by
		// the container.
		if len(c.Command) == 0 && c.Name == "kube-controller-manager" {
			return c.Args, true
		}
	}
	return nil, false
}

// forceDetachDisabled reads the flag as pflag does: the last occurrence
// wins; a bare flag means true.
func forceDetachDisabled(args []string) bool {
	disabled := false
	for _, a := range args {
		name, value, hasValue := strings.Cut(a, "=")
		if name != forceDetachFlag {
			continue
		}
		if !hasValue {
			disabled = true
			continue
		}
		b, err := strconv.ParseBool(value)
		disabled = err == nil && b
	}
	return disabled
}
