package testbed

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/bmcfence/bmcfence/internal/inventory/metal3"
	"github.com/bmcfence/bmcfence/test/controlplane"
)

// Metal3Namespace holds the testbed's BareMetalHosts and their Secrets,
// as deploy/overlays/metal3 expects.
const Metal3Namespace = "metal3"

var crds = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Dynamic is an admin dynamic client.
func (b *Testbed) Dynamic() (dynamic.Interface, error) {
	return dynamic.NewForConfig(b.CP.RESTConfig())
}

// Link is how a testbed node is tied to its BareMetalHost.
type Link int

const (
	// LinkProviderID: the Node's spec.providerID, CAPM3's
	// metal3://<namespace>/<host>/<metal3machine>.
	LinkProviderID Link = iota
	// LinkConsumer: the host's spec.consumerRef names a Metal3Machine,
	// owned by a Machine whose status.nodeRef is the Node (the stand-in
	// CRDs of InstallCAPIStandInCRDs).
	LinkConsumer
)

// installCRDs creates the CustomResourceDefinitions in a YAML file of
// test/testdata/metal3 (already there is fine) and waits until gvrs are
// served.
func (b *Testbed) installCRDs(ctx context.Context, file string, gvrs ...schema.GroupVersionResource) error {
	return installCRDs(ctx, b.CP, file, gvrs...)
}

func installCRDs(ctx context.Context, cp *controlplane.ControlPlane, file string, gvrs ...schema.GroupVersionResource) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(root, "test", "testdata", "metal3", file))
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cp.RESTConfig())
	if err != nil {
		return err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if len(obj) == 0 {
			continue
		}
		crd := &unstructured.Unstructured{Object: obj}
		if _, err := dyn.Resource(crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.GetName(), err)
		}
	}
	for _, gvr := range gvrs {
		err := cp.WaitFor(ctx, gvr.Resource+" served", func() (bool, error) {
			_, err := dyn.Resource(gvr).Namespace(Metal3Namespace).List(ctx, metav1.ListOptions{})
			return err == nil, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// InstallCAPIStandInCRDs installs stand-ins for Cluster API's Machine and
// CAPM3's Metal3Machine (test/testdata/metal3/capi-standins.yaml).
func (b *Testbed) InstallCAPIStandInCRDs(ctx context.Context) error {
	return b.installCRDs(ctx, "capi-standins.yaml", metal3.Machines, metal3.Metal3Machines)
}

// InstallMetal3CRDs installs, on any control plane, the BareMetalHost CRD
// (InstallBareMetalHostCRD) and the Cluster API stand-ins
// (InstallCAPIStandInCRDs).
func InstallMetal3CRDs(ctx context.Context, cp *controlplane.ControlPlane) error {
	if err := installCRDs(ctx, cp, "metal3.io_baremetalhosts.yaml", metal3.BareMetalHosts); err != nil {
		return err
	}
	return installCRDs(ctx, cp, "capi-standins.yaml", metal3.Machines, metal3.Metal3Machines)
}

// InstallBareMetalHostCRD installs the BareMetalHost CRD generated from the
// baremetal-operator's pinned apis module (test/testdata/metal3, written by
// hack/metal3-crd.sh) and waits until the API server serves it. Installing
// it twice is fine.
func (b *Testbed) InstallBareMetalHostCRD(ctx context.Context) error {
	return b.installCRDs(ctx, "metal3.io_baremetalhosts.yaml", metal3.BareMetalHosts)
}

// ApplyMetal3RBAC renders deploy/overlays/metal3 and creates its objects
// in Metal3Namespace (the Role and RoleBinding the agent needs there): the
// agent reads the hosts with exactly what the overlay grants.
func (b *Testbed) ApplyMetal3RBAC(ctx context.Context) error {
	objs, err := b.render(ctx, "deploy/overlays/metal3")
	if err != nil {
		return err
	}
	c := b.CP.Client()
	applied := 0
	for _, obj := range objs {
		switch o := obj.(type) {
		case *rbacv1.Role:
			if o.Namespace != Metal3Namespace {
				continue
			}
		case *rbacv1.RoleBinding:
			if o.Namespace != Metal3Namespace {
				continue
			}
		default:
			continue
		}
		if _, err := createRBAC(ctx, c, obj); err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("creating deploy/overlays/metal3's RBAC: %w", err)
		}
		applied++
	}
	if applied != 2 {
		return fmt.Errorf("deploy/overlays/metal3 rendered %d RBAC objects in %s, want a Role and a RoleBinding", applied, Metal3Namespace)
	}
	return nil
}

// CreateBareMetalHost describes a node's BMC as a BareMetalHost named
// bmh-NODE in Metal3Namespace, with its credentials Secret and the status
// the baremetal-operator would give a provisioned host, tied to the Node by
// link. A Redfish node's address names its system by path, as BMO users
// write it; the IPMI node's is ipmi://HOST:PORT.
func (b *Testbed) CreateBareMetalHost(ctx context.Context, node string, link Link) (string, error) {
	n := b.Node(node)
	if n == nil {
		return "", fmt.Errorf("no node %s", node)
	}
	name := "bmh-" + node
	c := b.CP.Client()
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-bmc", Namespace: Metal3Namespace},
		StringData: map[string]string{"username": n.Username, "password": n.password},
	}
	if _, err := c.CoreV1().Secrets(Metal3Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating Secret %s: %w", sec.Name, err)
	}
	address := "redfish://" + strings.TrimPrefix(n.Address, "https://") + "/redfish/v1/Systems/" + n.System
	if n.ipmi {
		address = n.Address
	}
	host := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
		"metadata": map[string]any{"name": name, "namespace": Metal3Namespace},
		"spec": map[string]any{
			"online": true,
			"bmc":    map[string]any{"address": address, "credentialsName": sec.Name},
		},
	}}
	dyn, err := b.Dynamic()
	if err != nil {
		return "", err
	}
	if link == LinkConsumer {
		m3m, err := b.createMachines(ctx, dyn, node)
		if err != nil {
			return "", err
		}
		host.Object["spec"].(map[string]any)["consumerRef"] = map[string]any{
			"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3Machine", "name": m3m, "namespace": Metal3Namespace,
		}
	}
	created, err := dyn.Resource(metal3.BareMetalHosts).Namespace(Metal3Namespace).Create(ctx, host, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating BareMetalHost %s: %w", name, err)
	}
	// What the baremetal-operator reports for a host it provisioned (the
	// CRD requires these status fields).
	created.Object["status"] = map[string]any{
		"errorCount": int64(0), "errorMessage": "", "operationalStatus": "OK", "poweredOn": true,
		"provisioning": map[string]any{"ID": "ironic-" + node, "state": "provisioned"},
	}
	if _, err := dyn.Resource(metal3.BareMetalHosts).Namespace(Metal3Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return "", fmt.Errorf("setting BareMetalHost %s's status: %w", name, err)
	}
	if link == LinkProviderID {
		patch := fmt.Sprintf(`{"spec":{"providerID":%q}}`, metal3.ProviderIDPrefix+Metal3Namespace+"/"+name+"/m3m-"+node)
		if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return "", fmt.Errorf("setting %s's providerID: %w", node, err)
		}
	}
	return name, nil
}

// createMachines creates a Machine machine-NODE whose status.nodeRef is
// the node, and a Metal3Machine m3m-NODE it owns, as Cluster API and CAPM3
// would; it returns the Metal3Machine's name.
func (b *Testbed) createMachines(ctx context.Context, dyn dynamic.Interface, node string) (string, error) {
	machine := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
		"metadata": map[string]any{"name": "machine-" + node, "namespace": Metal3Namespace},
		"spec":     map[string]any{"clusterName": "testbed"},
	}}
	m, err := dyn.Resource(metal3.Machines).Namespace(Metal3Namespace).Create(ctx, machine, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating Machine machine-%s: %w", node, err)
	}
	m.Object["status"] = map[string]any{"nodeRef": map[string]any{"apiVersion": "v1", "kind": "Node", "name": node}}
	if _, err := dyn.Resource(metal3.Machines).Namespace(Metal3Namespace).UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
		return "", fmt.Errorf("setting Machine machine-%s's nodeRef: %w", node, err)
	}
	m3m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3Machine",
		"metadata": map[string]any{"name": "m3m-" + node, "namespace": Metal3Namespace},
		"spec":     map[string]any{},
	}}
	m3m.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta1", Kind: "Machine", Name: m.GetName(), UID: m.GetUID()}})
	if _, err := dyn.Resource(metal3.Metal3Machines).Namespace(Metal3Namespace).Create(ctx, m3m, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating Metal3Machine m3m-%s: %w", node, err)
	}
	return m3m.GetName(), nil
}

// AgentConfigMetal3 writes an agent config whose inventory is the
// BareMetalHosts in Metal3Namespace (no node entries), with the mock's CA
// from the agent's namespace, and the given extra YAML.
func (b *Testbed) AgentConfigMetal3(extra string) (string, error) {
	cfg := fmt.Sprintf("namespace: %s\ninventory:\n  source: metal3\n  metal3:\n    namespaces: [%s]\n  defaults:\n    caConfigMap: bmc-ca\n%s", Namespace, Metal3Namespace, extra)
	f, err := os.CreateTemp(b.dir, "agent-metal3-*.yaml")
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.WriteString(cfg)
	return f.Name(), err
}
