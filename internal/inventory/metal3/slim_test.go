package metal3

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"
)

// A host as the baremetal-operator leaves it after inspection: what the
// agent reads, and much it does not.
const inspectedHost = `
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata:
  name: bmh-1
  namespace: metal3
  uid: 6f1c
  resourceVersion: "42"
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{"huge": "json"}'
    reboot.metal3.io/capm3-remediation-x: '{"mode":"hard"}'
    reboot.metal3.io: ""
    baremetalhost.metal3.io/paused: ""
    inspect.metal3.io/hardwaredetails: '{"more": "json"}'
  managedFields:
    - manager: baremetal-operator
      operation: Update
  finalizers: [baremetalhost.metal3.io]
spec:
  online: true
  bootMACAddress: "00:11:22:33:44:55"
  bmc:
    address: redfish://10.0.0.5/redfish/v1/Systems/1
    credentialsName: bmh-1-bmc
    disableCertificateVerification: true
  consumerRef:
    apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
    kind: Metal3Machine
    name: m3m-1
    namespace: metal3
  image:
    url: http://images/x.qcow2
status:
  poweredOn: true
  provisioning:
    state: provisioned
    ID: ironic-1
  hardware:
    cpu: {arch: x86_64, count: 64}
    nics: [{name: eno1, mac: "00:11:22:33:44:55"}, {name: eno2, mac: "00:11:22:33:44:56"}]
    storage: [{name: /dev/sda, sizeBytes: 960197124096}]
`

func decode(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// The watch keeps only what the inventory reads: the host it reads from
// the slim object is the host it would read from the whole one.
func TestSlimHostKeepsWhatHostFromReads(t *testing.T) {
	full := decode(t, inspectedHost)
	want, err := HostFrom(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	slim, err := SlimHost(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got, err := HostFrom(slim.(*unstructured.Unstructured))
	if err != nil {
		t.Fatal(err)
	}
	// Only the baremetal-operator's annotations are kept.
	want.Annotations = map[string]string{
		"reboot.metal3.io/capm3-remediation-x": `{"mode":"hard"}`, "reboot.metal3.io": "", "baremetalhost.metal3.io/paused": "",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("HostFrom(SlimHost(h)) (-want +got):\n%s", diff)
	}
	if got.OthersHolding() == nil {
		t.Error("the slim host lost the reboot annotations that hold it")
	}
	u := slim.(*unstructured.Unstructured)
	for _, gone := range [][]string{{"status", "hardware"}, {"metadata", "managedFields"}, {"spec", "image"}, {"metadata", "finalizers"}} {
		if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, gone...); found {
			t.Errorf("the slim host keeps %s", strings.Join(gone, "."))
		}
	}
	if u.GetResourceVersion() != "42" || u.GetUID() != "6f1c" {
		t.Errorf("resourceVersion %q, uid %q: the hold's patch is conditional on them", u.GetResourceVersion(), u.GetUID())
	}
	again, _ := SlimHost(u.DeepCopy())
	if diff := cmp.Diff(u.Object, again.(*unstructured.Unstructured).Object); diff != "" {
		t.Errorf("SlimHost is not idempotent (-once +twice):\n%s", diff)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "metal3/bmh-1", Obj: full}
	if got, _ := SlimHost(tomb); got != any(tomb) {
		t.Errorf("a tombstone was changed: %v", got)
	}
}

func TestSlimMachines(t *testing.T) {
	m3m := decode(t, `
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3Machine
metadata: {name: m3m-1, namespace: metal3, uid: u1, resourceVersion: "7", managedFields: [{manager: capm3}]}
spec: {image: {url: http://x}, hostSelector: {matchLabels: {a: b}}}
`)
	m3m.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta1", Kind: "Machine", Name: "machine-1", UID: "u2"}})
	slim, _ := SlimMetal3Machine(m3m.DeepCopy())
	if diff := cmp.Diff(Metal3MachineFrom(m3m), Metal3MachineFrom(slim.(*unstructured.Unstructured))); diff != "" {
		t.Errorf("Metal3MachineFrom (-full +slim):\n%s", diff)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(slim.(*unstructured.Unstructured).Object, "spec"); found {
		t.Error("the slim Metal3Machine keeps its spec")
	}
	machine := decode(t, `
apiVersion: cluster.x-k8s.io/v1beta1
kind: Machine
metadata: {name: machine-1, namespace: metal3, uid: u2, resourceVersion: "8"}
spec: {clusterName: c, bootstrap: {dataSecretName: s}}
status: {nodeRef: {apiVersion: v1, kind: Node, name: w1}, addresses: [{type: InternalIP, address: 10.0.0.1}], conditions: [{type: Ready, status: "True"}]}
`)
	slimM, _ := SlimMachine(machine.DeepCopy())
	if got := MachineFrom(slimM.(*unstructured.Unstructured)); got != MachineFrom(machine) || got.NodeName != "w1" {
		t.Errorf("MachineFrom(slim) = %+v, want %+v", got, MachineFrom(machine))
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(slimM.(*unstructured.Unstructured).Object, "status", "conditions"); found {
		t.Error("the slim Machine keeps its conditions")
	}
}
