package metal3

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The resources bmcfence reads (and, for BareMetalHosts, annotates).
var (
	BareMetalHosts = schema.GroupVersionResource{Group: "metal3.io", Version: "v1alpha1", Resource: "baremetalhosts"}
	Metal3Machines = schema.GroupVersionResource{Group: "infrastructure.cluster.x-k8s.io", Version: "v1beta1", Resource: "metal3machines"}
	Machines       = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machines"}
)

// Annotations the baremetal-operator reads on a BareMetalHost.
const (
	// RebootAnnotationPrefix: while any reboot.metal3.io or
	// reboot.metal3.io/<key> annotation is on a host, the baremetal-operator
	// powers it off and keeps it off; when the last one goes, it powers the
	// host on again if spec.online is true.
	RebootAnnotationPrefix = "reboot.metal3.io"
	// HoldAnnotation is bmcfence's own reboot annotation: set before our
	// ForceOff, removed before our power-on (docs/metal3.md).
	HoldAnnotation = RebootAnnotationPrefix + "/bmcfence"
	// HoldValue asks for a hard power-off: no soft shutdown attempt, which
	// a dead OS would only delay.
	HoldValue = `{"mode":"hard"}`
	// PausedAnnotation stops the baremetal-operator reconciling the host.
	PausedAnnotation = "baremetalhost.metal3.io/paused"
)

// Provisioning states in which a host runs its workload and the
// baremetal-operator leaves its power alone unless asked (spec.online, a
// reboot annotation). In every other state (registering, inspecting,
// preparing, provisioning, deprovisioning, powering off before delete,
// deleting, ...) the baremetal-operator drives the host's power itself.
var fenceableStates = map[string]bool{"provisioned": true, "externally provisioned": true}

// ErrBusy is wrapped when the baremetal-operator is operating a host's
// power (its provisioning state) or another party holds it off (a reboot
// annotation not ours): bmcfence does not act on power then.
var ErrBusy = errors.New("the baremetal-operator is operating this host's power")

// ObjectRef is a reference to another object, as in spec.consumerRef.
type ObjectRef struct {
	APIVersion, Kind, Namespace, Name string
}

// Host is what bmcfence reads of a BareMetalHost.
type Host struct {
	Namespace, Name, UID string
	// Address is spec.bmc.address, unparsed.
	Address string
	// CredentialsName is spec.bmc.credentialsName: a Secret in the host's
	// namespace with keys username and password.
	CredentialsName                string
	DisableCertificateVerification bool
	// Online is spec.online: the power state the baremetal-operator keeps.
	Online bool
	// ConsumerRef is spec.consumerRef (nil if none).
	ConsumerRef       *ObjectRef
	ProvisioningState string
	Annotations       map[string]string
}

// Key is "namespace/name".
func (h Host) Key() string { return h.Namespace + "/" + h.Name }

// HostFrom reads a BareMetalHost. Fields of the wrong type are errors:
// a host bmcfence cannot read is not fenced through a guess.
func HostFrom(u *unstructured.Unstructured) (Host, error) {
	h := Host{Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID()), Annotations: u.GetAnnotations()}
	var errs []error
	str := func(dst *string, fields ...string) {
		v, _, err := unstructured.NestedString(u.Object, fields...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", strings.Join(fields, "."), err))
		}
		*dst = v
	}
	boolean := func(dst *bool, fields ...string) {
		v, _, err := unstructured.NestedBool(u.Object, fields...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", strings.Join(fields, "."), err))
		}
		*dst = v
	}
	str(&h.Address, "spec", "bmc", "address")
	str(&h.CredentialsName, "spec", "bmc", "credentialsName")
	boolean(&h.DisableCertificateVerification, "spec", "bmc", "disableCertificateVerification")
	boolean(&h.Online, "spec", "online")
	str(&h.ProvisioningState, "status", "provisioning", "state")
	if _, found, _ := unstructured.NestedMap(u.Object, "spec", "consumerRef"); found {
		ref := &ObjectRef{}
		str(&ref.APIVersion, "spec", "consumerRef", "apiVersion")
		str(&ref.Kind, "spec", "consumerRef", "kind")
		str(&ref.Namespace, "spec", "consumerRef", "namespace")
		str(&ref.Name, "spec", "consumerRef", "name")
		if ref.Namespace == "" {
			ref.Namespace = h.Namespace
		}
		h.ConsumerRef = ref
	}
	if len(errs) > 0 {
		return h, fmt.Errorf("BareMetalHost %s: %w", h.Key(), errors.Join(errs...))
	}
	return h, nil
}

// OthersHolding lists the reboot annotations on the host that are not
// bmcfence's, sorted: someone else (Cluster API's Metal3Remediation, an
// operator) has asked the baremetal-operator to keep it off.
func (h Host) OthersHolding() []string {
	var out []string
	for k := range h.Annotations {
		if (k == RebootAnnotationPrefix || strings.HasPrefix(k, RebootAnnotationPrefix+"/")) && k != HoldAnnotation {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// HeldByUs reports whether bmcfence's reboot annotation is on the host.
func (h Host) HeldByUs() bool {
	_, ok := h.Annotations[HoldAnnotation]
	return ok
}

// Fenceable says why the baremetal-operator's own work on the host forbids
// a fence, or nil. A host in a provisioning state other than provisioned or
// externally provisioned is being registered, inspected, provisioned or
// torn down: the operator powers it on and off itself, so neither a lost
// heartbeat nor an Off reading means what it means for a running node.
func (h Host) Fenceable() error {
	if !fenceableStates[h.ProvisioningState] {
		state := h.ProvisioningState
		if state == "" {
			state = "none yet"
		}
		return fmt.Errorf("%w: BareMetalHost %s is in provisioning state %q (bmcfence fences provisioned or externally provisioned hosts only)", ErrBusy, h.Key(), state)
	}
	return nil
}

// Machine is what bmcfence reads of a Cluster API Machine.
type Machine struct {
	Namespace, Name string
	// NodeName is status.nodeRef.name ("" before the node joins).
	NodeName string
}

// MachineFrom reads a Cluster API Machine (v1beta1 and v1beta2 both carry
// status.nodeRef.name).
func MachineFrom(u *unstructured.Unstructured) Machine {
	node, _, _ := unstructured.NestedString(u.Object, "status", "nodeRef", "name")
	return Machine{Namespace: u.GetNamespace(), Name: u.GetName(), NodeName: node}
}

// Metal3Machine is what bmcfence reads of a CAPM3 Metal3Machine.
type Metal3Machine struct {
	Namespace, Name string
	// Machine is the name of its owner Cluster API Machine ("" if none).
	Machine string
}

// Metal3MachineFrom reads a Metal3Machine: its owner reference of kind
// Machine in the cluster.x-k8s.io group (any version).
func Metal3MachineFrom(u *unstructured.Unstructured) Metal3Machine {
	m := Metal3Machine{Namespace: u.GetNamespace(), Name: u.GetName()}
	for _, o := range u.GetOwnerReferences() {
		group, _, _ := strings.Cut(o.APIVersion, "/")
		if o.Kind == "Machine" && group == Machines.Group {
			m.Machine = o.Name
			break
		}
	}
	return m
}
