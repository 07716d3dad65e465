package deploy

import (
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/bmcfence/bmcfence/test/controlplane"
)

// The watchdog petter's overlay needs the device and nothing else: no API
// access at all (no token, no RBAC), no host namespaces, a read-only root,
// the one hostPath being the device, in a namespace of its own.
func TestWatchdogOverlayNeedsTheDeviceAndNothingElse(t *testing.T) {
	root, _ := controlplane.RepoRoot()
	objs := parse(t, run(t, kubectlBin(t), "kustomize", filepath.Join(root, "deploy", "overlays", "watchdog")))
	kinds := map[string]int{}
	var ds appsv1.DaemonSet
	var sa corev1.ServiceAccount
	for _, o := range objs {
		kind, _ := o["kind"].(string)
		kinds[kind]++
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		switch kind {
		case "DaemonSet":
			err = yaml.Unmarshal(b, &ds)
		case "ServiceAccount":
			err = yaml.Unmarshal(b, &sa)
		case "Namespace":
			if ns := get(o, "metadata", "name"); ns != "bmcfence-watchdog" || get(o, "metadata", "labels", "pod-security.kubernetes.io/enforce") != "privileged" {
				t.Errorf("namespace %v: want its own, bmcfence-watchdog, labelled privileged (the device needs it)", ns)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if want := map[string]int{"Namespace": 1, "ServiceAccount": 1, "DaemonSet": 1}; len(kinds) != len(want) || kinds["DaemonSet"] != 1 || kinds["ServiceAccount"] != 1 || kinds["Namespace"] != 1 {
		t.Errorf("objects %v, want only %v: no Role, binding or anything else", kinds, want)
	}
	spec := ds.Spec.Template.Spec
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("a ServiceAccount token is mounted; the petter never talks to the API server")
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("host namespaces: network %v, PID %v, IPC %v", spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	if len(spec.Volumes) != 1 || spec.Volumes[0].HostPath == nil || spec.Volumes[0].HostPath.Path != "/dev/watchdog" ||
		spec.Volumes[0].HostPath.Type == nil || *spec.Volumes[0].HostPath.Type != corev1.HostPathCharDev {
		t.Errorf("volumes %+v: want only the /dev/watchdog character device", spec.Volumes)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the root filesystem is writable")
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/dev/watchdog" || len(c.Ports) != 0 || len(c.Env) != 0 || len(c.EnvFrom) != 0 {
		t.Errorf("container mounts %+v, ports %v, env %v: want the device only", c.VolumeMounts, c.Ports, c.Env)
	}
	if c.Resources.Limits.Memory().IsZero() || !strings.HasSuffix(c.Command[0], "/bmc-watchdog") {
		t.Errorf("container %s %v: want bmc-watchdog with a memory limit", c.Name, c.Command)
	}
	for _, tol := range spec.Tolerations {
		if tol.Effect != corev1.TaintEffectNoSchedule {
			t.Errorf("toleration %+v: a NoExecute taint (the fence's out-of-service taint) must evict it", tol)
		}
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds < 5 {
		t.Error("no time to write the magic close on SIGTERM")
	}
}
