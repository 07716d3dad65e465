package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

const (
	// CSIDriverName is the e2e CSI driver. attachRequired is true, so every
	// pod using one of its volumes goes through a VolumeAttachment handled by
	// the attach/detach controller, exactly the path the out-of-service taint
	// changes.
	CSIDriverName = "csi.e2e.bmcfence.dev"
	// StorageClassName provisions CSIDriverName volumes (Immediate binding,
	// reclaim Delete). It is the cluster's default StorageClass.
	StorageClassName = "e2e-csi"
	// AttacherFinalizer is what the real external-attacher puts on the
	// VolumeAttachments it attaches ("external-attacher/" + the driver name
	// with every character outside [A-Za-z0-9-] replaced by '-'); deleting
	// such a VolumeAttachment completes only when the (stand-in) attacher has
	// detached.
	AttacherFinalizer = "external-attacher/csi-e2e-bmcfence-dev"
)

// UniqueVolumeName is the name the kubelet and the attach/detach controller
// use for a CSI volume in node.status.volumesInUse/volumesAttached.
func UniqueVolumeName(driver, volumeHandle string) corev1.UniqueVolumeName {
	return corev1.UniqueVolumeName("kubernetes.io/csi/" + driver + "^" + volumeHandle)
}

// installStorage creates the CSIDriver and the StorageClass.
func (cp *ControlPlane) installStorage(ctx context.Context) error {
	driver := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: CSIDriverName},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired: ptr.To(true),
			PodInfoOnMount: ptr.To(false),
		},
	}
	if _, err := cp.client.StorageV1().CSIDrivers().Create(ctx, driver, metav1.CreateOptions{}); err != nil {
		return err
	}
	class := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassName,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		Provisioner:       CSIDriverName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}
	_, err := cp.client.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{})
	return err
}

// volumeSim runs the three in-process stand-ins (attacher, provisioner,
// volumesInUse reporter) as one level-triggered loop over informer caches:
// any event kicks it, it reconciles everything, and a failed write kicks it
// again shortly. A handful of objects makes a full pass cheap.
type volumeSim struct {
	cp      *ControlPlane
	kickC   chan struct{}
	pods    corelisters.PodLister
	pvcs    corelisters.PersistentVolumeClaimLister
	pvs     corelisters.PersistentVolumeLister
	nodes   corelisters.NodeLister
	vas     storagelisters.VolumeAttachmentLister
	mu      sync.Mutex
	lastErr map[string]string // per object, to log a repeating error once
}

func startVolumeSim(ctx context.Context, cp *ControlPlane, wg *sync.WaitGroup) (*volumeSim, error) {
	// The resync is only a safety net; events drive the loop.
	f := informers.NewSharedInformerFactory(cp.client, 30*time.Second)
	s := &volumeSim{
		cp:      cp,
		kickC:   make(chan struct{}, 1),
		pods:    f.Core().V1().Pods().Lister(),
		pvcs:    f.Core().V1().PersistentVolumeClaims().Lister(),
		pvs:     f.Core().V1().PersistentVolumes().Lister(),
		nodes:   f.Core().V1().Nodes().Lister(),
		vas:     f.Storage().V1().VolumeAttachments().Lister(),
		lastErr: map[string]string{},
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.kick() },
		UpdateFunc: func(any, any) { s.kick() },
		DeleteFunc: func(any) { s.kick() },
	}
	for _, inf := range []cache.SharedIndexInformer{
		f.Core().V1().Pods().Informer(),
		f.Core().V1().PersistentVolumeClaims().Informer(),
		f.Core().V1().PersistentVolumes().Informer(),
		f.Core().V1().Nodes().Informer(),
		f.Storage().V1().VolumeAttachments().Informer(),
	} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, err
		}
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("informer cache for %v did not sync", typ)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer f.Shutdown()
		s.run(ctx)
	}()
	return s, nil
}

// kick asks for a reconcile pass; it never blocks.
func (s *volumeSim) kick() {
	if s == nil {
		return
	}
	select {
	case s.kickC <- struct{}{}:
	default:
	}
}

func (s *volumeSim) run(ctx context.Context) {
	// A failed write (conflict with the controller-manager, a stale cache)
	// is retried after retryAfter; new events retry sooner.
	const retryAfter = 300 * time.Millisecond
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kickC:
		case <-retry.C:
		}
		if err := s.reconcile(ctx); err != nil && ctx.Err() == nil {
			retry.Reset(retryAfter)
		}
	}
}

func (s *volumeSim) reconcile(ctx context.Context) error {
	return errors.Join(s.attach(ctx), s.provision(ctx), s.reportVolumesInUse(ctx))
}

// report logs an error once per object until it changes or clears.
func (s *volumeSim) report(key string, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.lastErr, key)
		return nil
	}
	if s.lastErr[key] != err.Error() && !apierrors.IsConflict(err) {
		s.cp.logf("controlplane: %s: %v (will retry)", key, err)
	}
	s.lastErr[key] = err.Error()
	return err
}

// attach is the external-attacher stand-in: the storage backend always
// succeeds, whatever the state of the node (a CSI ControllerPublish talks to
// the storage, not to the node).
func (s *volumeSim) attach(ctx context.Context) error {
	vas, err := s.vas.List(labels.Everything())
	if err != nil {
		return err
	}
	var errs []error
	for _, va := range vas {
		if va.Spec.Attacher != CSIDriverName {
			continue
		}
		key := "attacher: VolumeAttachment " + va.Name
		switch {
		case va.DeletionTimestamp != nil:
			// Detach: the real attacher calls ControllerUnpublish, then
			// drops its finalizer; the object then disappears.
			if !slices.Contains(va.Finalizers, AttacherFinalizer) {
				continue
			}
			c := va.DeepCopy()
			c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == AttacherFinalizer })
			_, err := s.cp.client.StorageV1().VolumeAttachments().Update(ctx, c, metav1.UpdateOptions{})
			if err == nil {
				s.cp.logf("controlplane: attacher: detached %s (pv %s, node %s)", va.Name, ptr.Deref(va.Spec.Source.PersistentVolumeName, ""), va.Spec.NodeName)
			}
			errs = append(errs, s.report(key, ignoreNotFound(err)))
		case !slices.Contains(va.Finalizers, AttacherFinalizer):
			c := va.DeepCopy()
			c.Finalizers = append(c.Finalizers, AttacherFinalizer)
			_, err := s.cp.client.StorageV1().VolumeAttachments().Update(ctx, c, metav1.UpdateOptions{})
			errs = append(errs, s.report(key, ignoreNotFound(err)))
		case !va.Status.Attached:
			c := va.DeepCopy()
			c.Status.Attached = true
			c.Status.AttachmentMetadata = map[string]string{"devicePath": "/dev/e2e/" + va.Name}
			c.Status.AttachError = nil
			_, err := s.cp.client.StorageV1().VolumeAttachments().UpdateStatus(ctx, c, metav1.UpdateOptions{})
			if err == nil {
				s.cp.logf("controlplane: attacher: attached %s (pv %s, node %s)", va.Name, ptr.Deref(va.Spec.Source.PersistentVolumeName, ""), va.Spec.NodeName)
			}
			errs = append(errs, s.report(key, ignoreNotFound(err)))
		}
	}
	return errors.Join(errs...)
}

// provision is the external-provisioner stand-in: a CSI PV for every
// pending claim the PV controller has handed to CSIDriverName (annotation
// volume.kubernetes.io/storage-provisioner), pre-bound to the claim so the PV
// controller binds the pair; and deletion of released PVs it provisioned
// (reclaim policy Delete). The PVs carry no node affinity: the volume can be
// attached anywhere, which is what lets a StatefulSet pod move.
func (s *volumeSim) provision(ctx context.Context) error {
	claims, err := s.pvcs.List(labels.Everything())
	if err != nil {
		return err
	}
	var errs []error
	for _, pvc := range claims {
		if pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil || pvc.Status.Phase != corev1.ClaimPending ||
			(pvc.Annotations["volume.kubernetes.io/storage-provisioner"] != CSIDriverName &&
				pvc.Annotations["volume.beta.kubernetes.io/storage-provisioner"] != CSIDriverName) {
			continue
		}
		name := "pvc-" + string(pvc.UID)
		if _, err := s.pvs.Get(name); err == nil {
			continue // created; the PV controller binds it
		}
		size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": CSIDriverName},
			},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
				AccessModes:                   pvc.Spec.AccessModes,
				VolumeMode:                    pvc.Spec.VolumeMode,
				StorageClassName:              StorageClassName,
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
				ClaimRef: &corev1.ObjectReference{
					APIVersion: "v1", Kind: "PersistentVolumeClaim",
					Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
				},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
					Driver:       CSIDriverName,
					VolumeHandle: "vol-" + string(pvc.UID),
					FSType:       "ext4",
				}},
			},
		}
		_, err := s.cp.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
		if err == nil {
			s.cp.logf("controlplane: provisioner: created %s for %s/%s", name, pvc.Namespace, pvc.Name)
		}
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		errs = append(errs, s.report("provisioner: claim "+pvc.Namespace+"/"+pvc.Name, err))
	}

	pvs, err := s.pvs.List(labels.Everything())
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, pv := range pvs {
		if pv.Annotations["pv.kubernetes.io/provisioned-by"] != CSIDriverName || pv.DeletionTimestamp != nil ||
			pv.Status.Phase != corev1.VolumeReleased ||
			pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
			continue
		}
		err := s.cp.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
		errs = append(errs, s.report("provisioner: delete "+pv.Name, ignoreNotFound(err)))
	}
	return errors.Join(errs...)
}

// reportVolumesInUse is the kubelet volume manager's node-status half: for
// every node whose kwok is alive, status.volumesInUse lists the CSI volumes
// of the pods bound to it that have not finished (a kubelet reports a volume
// from the moment a pod needing it is assigned until it is unmounted after
// the pod's containers are gone). A dead node's list is left as it was.
func (s *volumeSim) reportVolumesInUse(ctx context.Context) error {
	want := map[string][]corev1.UniqueVolumeName{}
	pods, err := s.pods.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, pod := range pods {
		if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			pvc, err := s.pvcs.PersistentVolumeClaims(pod.Namespace).Get(v.PersistentVolumeClaim.ClaimName)
			if err != nil || pvc.Spec.VolumeName == "" {
				continue // not bound yet: the kubelet would wait too
			}
			pv, err := s.pvs.Get(pvc.Spec.VolumeName)
			if err != nil || pv.Spec.CSI == nil {
				continue
			}
			want[pod.Spec.NodeName] = append(want[pod.Spec.NodeName], UniqueVolumeName(pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle))
		}
	}

	s.cp.mu.Lock()
	nodes := make([]*node, 0, len(s.cp.nodes))
	for _, n := range s.cp.nodes {
		nodes = append(nodes, n)
	}
	s.cp.mu.Unlock()

	var errs []error
	for _, n := range nodes {
		errs = append(errs, s.report("volume reporter: node "+n.spec.Name, s.reportNode(ctx, n, want[n.spec.Name])))
	}
	return errors.Join(errs...)
}

func (s *volumeSim) reportNode(ctx context.Context, n *node, want []corev1.UniqueVolumeName) error {
	// Held across the write: KillNode waits for it, and afterwards this
	// node's list is never touched again until RestartNode.
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.alive {
		return nil
	}
	obj, err := s.nodes.Get(n.spec.Name)
	if err != nil {
		return ignoreNotFound(err)
	}
	slices.Sort(want)
	want = slices.Compact(want)
	have := slices.Clone(obj.Status.VolumesInUse)
	sort.Slice(have, func(i, j int) bool { return have[i] < have[j] })
	if slices.Equal(want, have) {
		return nil
	}
	// A JSON merge patch replaces just this list; the attach/detach
	// controller's volumesAttached and kwok's conditions are left alone.
	var list any = want
	if len(want) == 0 {
		list = nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"volumesInUse": list}})
	if err != nil {
		return err
	}
	_, err = s.cp.client.CoreV1().Nodes().Patch(ctx, n.spec.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err == nil {
		s.cp.logf("controlplane: kubelet stand-in: node %s volumesInUse=%v", n.spec.Name, want)
	}
	return ignoreNotFound(err)
}
