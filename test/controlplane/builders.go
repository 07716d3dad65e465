package controlplane

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// StatefulSet builds a StatefulSet whose pods each mount a "data" claim
// from StorageClassName (1Gi, ReadWriteOnce), labelled app=NAME. The image is
// never pulled (kwok runs nothing). Pods get the default tolerations only
// (DefaultTolerationSeconds admission: not-ready/unreachable for 300 s), so
// they are evicted by the out-of-service taint like ordinary workloads.
func StatefulSet(namespace, name string, replicas int32) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(replicas),
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:         "app",
						Image:        "registry.k8s.io/pause:3.10",
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: ptr.To(StorageClassName),
					Resources: corev1.VolumeResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					},
				},
			}},
		},
	}
}

// CreateNamespace creates a namespace and waits for its default
// ServiceAccount (pods are refused until the controller-manager has made it).
func (cp *ControlPlane) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cp.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	return cp.WaitFor(ctx, "ServiceAccount "+name+"/default", func() (bool, error) {
		_, err := cp.client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, ignoreNotFound(err)
	})
}

// VolumeOfClaim returns the PV bound to a claim and its CSI unique volume
// name ("" and no error while unbound).
func (cp *ControlPlane) VolumeOfClaim(ctx context.Context, namespace, claim string) (*corev1.PersistentVolume, corev1.UniqueVolumeName, error) {
	pvc, err := cp.client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil || pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		return nil, "", ignoreNotFound(err)
	}
	pv, err := cp.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return nil, "", err
	}
	if pv.Spec.CSI == nil {
		return nil, "", fmt.Errorf("pv %s is not a CSI volume", pv.Name)
	}
	return pv, UniqueVolumeName(pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle), nil
}

// AttachedNode returns the node the claim's volume is attached to: an
// attached VolumeAttachment not being deleted ("" if none, or unreadable).
func (cp *ControlPlane) AttachedNode(ctx context.Context, ns, claim string) string {
	pv, _, err := cp.VolumeOfClaim(ctx, ns, claim)
	if err != nil || pv == nil {
		return ""
	}
	vas, err := cp.VolumeAttachments(ctx, pv.Name)
	if err != nil {
		return ""
	}
	for _, va := range vas {
		if va.Status.Attached && va.DeletionTimestamp == nil {
			return va.Spec.NodeName
		}
	}
	return ""
}

// VolumeAttachments returns the VolumeAttachments of a PV.
func (cp *ControlPlane) VolumeAttachments(ctx context.Context, pvName string) ([]storagev1.VolumeAttachment, error) {
	list, err := cp.client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []storagev1.VolumeAttachment
	for _, va := range list.Items {
		if ptr.Deref(va.Spec.Source.PersistentVolumeName, "") == pvName {
			out = append(out, va)
		}
	}
	return out, nil
}
