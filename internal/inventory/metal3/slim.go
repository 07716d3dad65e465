package metal3

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The transforms below keep only what HostFrom, Metal3MachineFrom and
// MachineFrom read, so that watching the hosts costs memory by their
// number, not their size: a BareMetalHost carries its inspection data
// (status.hardware: every NIC, disk and CPU), its managed fields and often
// a last-applied configuration, tens of KiB each. As the cluster view's
// transforms of Nodes, each is idempotent (client-go may hand it an object
// it already transformed) and passes anything else (tombstones) through.

// copyFields copies the fields at paths (each a dotted list) that exist.
func copyFields(from, to map[string]any, paths ...[]string) {
	for _, p := range paths {
		if v, found, _ := unstructured.NestedFieldNoCopy(from, p...); found {
			_ = unstructured.SetNestedField(to, v, p...)
		}
	}
}

// slimMeta keeps identity, the resourceVersion (patches are conditional on
// it), and the annotations and owner references keep says to keep.
func slimMeta(u *unstructured.Unstructured, keepAnnotation func(string) bool, keepOwners bool) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetNamespace(u.GetNamespace())
	out.SetName(u.GetName())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	if keepAnnotation != nil {
		var kept map[string]string
		for k, v := range u.GetAnnotations() {
			if keepAnnotation(k) {
				if kept == nil {
					kept = map[string]string{}
				}
				kept[k] = v
			}
		}
		if kept != nil {
			out.SetAnnotations(kept)
		}
	}
	if keepOwners {
		if refs := u.GetOwnerReferences(); len(refs) > 0 {
			out.SetOwnerReferences(refs)
		}
	}
	return out
}

// SlimHost keeps of a BareMetalHost what HostFrom reads: spec.bmc,
// spec.online, spec.consumerRef, status.provisioning.state, and the
// baremetal-operator's own annotations (reboot.metal3.io*, paused,
// detached).
func SlimHost(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := slimMeta(u, func(k string) bool {
		return k == RebootAnnotationPrefix || strings.HasPrefix(k, RebootAnnotationPrefix+"/") || strings.HasPrefix(k, "baremetalhost.metal3.io/")
	}, false)
	copyFields(u.Object, out.Object,
		[]string{"spec", "bmc", "address"},
		[]string{"spec", "bmc", "credentialsName"},
		[]string{"spec", "bmc", "disableCertificateVerification"},
		[]string{"spec", "online"},
		[]string{"spec", "consumerRef", "apiVersion"},
		[]string{"spec", "consumerRef", "kind"},
		[]string{"spec", "consumerRef", "namespace"},
		[]string{"spec", "consumerRef", "name"},
		[]string{"status", "provisioning", "state"},
	)
	return out, nil
}

// SlimMetal3Machine keeps a Metal3Machine's identity and owners (its
// Machine).
func SlimMetal3Machine(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	return slimMeta(u, nil, true), nil
}

// SlimMachine keeps a Machine's identity and status.nodeRef.name.
func SlimMachine(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := slimMeta(u, nil, false)
	copyFields(u.Object, out.Object, []string{"status", "nodeRef", "name"})
	return out, nil
}
