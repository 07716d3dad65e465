package testbed

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"

	"sigs.k8s.io/yaml"

	"github.com/bmcfence/bmcfence/test/controlplane"
)

// AgentServiceAccount is the identity deploy/base gives the agent.
const AgentServiceAccount = "system:serviceaccount:" + Namespace + ":bmcfence-agent"

// ApplyAgentRBAC renders deploy/base with kubectl kustomize, as an install
// does, and creates its ServiceAccount and RBAC objects: exactly what the
// manifest grants, nothing more. The rest (the DaemonSet above all) has no
// place on a testbed, where the agent is a local process.
func (b *Testbed) ApplyAgentRBAC(ctx context.Context) error {
	objs, err := b.render(ctx, "deploy/base")
	if err != nil {
		return err
	}
	c := b.CP.Client()
	applied := 0
	for _, obj := range objs {
		ok, err := createRBAC(ctx, c, obj)
		if err != nil {
			return fmt.Errorf("creating deploy/base's RBAC: %w", err)
		}
		if ok {
			applied++
		}
	}
	// The ServiceAccount; the ClusterRole and its binding; the Roles and
	// bindings in the agent's namespace, in kube-node-lease and in
	// kube-system (kured's DaemonSet, a planned-reboot signal); the
	// metrics reader ClusterRole; the viewer, operator and attester
	// ClusterRoles and the one NodeHealthCheck aggregates.
	if applied != 14 {
		return fmt.Errorf("deploy/base rendered %d ServiceAccount and RBAC objects, want 14", applied)
	}
	return nil
}

// render renders dir (relative to the repository) with kubectl kustomize,
// as an install does, and decodes the built-in kinds it holds. The CRDs it
// renders are skipped: ApplyAPI creates those.
func (b *Testbed) render(ctx context.Context, dir string) ([]runtime.Object, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(b.CP.BinDir(), "kubectl"), "kustomize", filepath.Join(root, filepath.FromSlash(dir)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %w\n%s", dir, err, stderr.String())
	}
	var objs []runtime.Object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", dir, err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			continue // a CRD: ApplyAPI's
		}
		if err != nil {
			return nil, fmt.Errorf("decoding %s: %w", dir, err)
		}
		objs = append(objs, obj)
	}
}

// crdGVR is apiextensions' CustomResourceDefinition (the main module has no
// apiextensions client: CRDs are created as unstructured objects).
var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ApplyAPI creates what deploy/base adds to the API: the CRDs of
// fencing.bmcfence.io, and the ValidatingAdmissionPolicy and its binding
// that authenticate requests. It waits until the CRDs are served.
func (b *Testbed) ApplyAPI(ctx context.Context) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(b.CP.BinDir(), "kubectl"), "kustomize", filepath.Join(root, "deploy", "base"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("kubectl kustomize deploy/base: %w\n%s", err, stderr.String())
	}
	dyn, err := dynamic.NewForConfig(b.CP.RESTConfig())
	if err != nil {
		return err
	}
	// Applied with kubectl's server-side apply, as an install does (and as
	// TestCLICheck applies all of deploy/base later: the same field
	// manager, so the two never conflict).
	var crds []string
	var api bytes.Buffer
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading deploy/base: %w", err)
		}
		var u unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return fmt.Errorf("decoding deploy/base: %w", err)
		}
		switch u.GetKind() {
		case "CustomResourceDefinition":
			crds = append(crds, u.GetName())
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
		default:
			continue
		}
		api.WriteString("---\n")
		api.Write(doc)
	}
	apply := exec.CommandContext(ctx, filepath.Join(b.CP.BinDir(), "kubectl"), "--kubeconfig", b.CP.Kubeconfig(), "apply", "--server-side", "-f", "-")
	apply.Stdin = &api
	if msg, err := apply.CombinedOutput(); err != nil {
		return fmt.Errorf("applying deploy/base's CRDs and admission policy: %w\n%s", err, msg)
	}
	if len(crds) == 0 {
		return errors.New("deploy/base rendered no CRDs")
	}
	for _, name := range crds {
		err := b.CP.WaitFor(ctx, "CRD "+name+" established", func() (bool, error) {
			u, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// createRBAC creates obj if it is a ServiceAccount or an RBAC object and
// says whether it was one.
func createRBAC(ctx context.Context, c kubernetes.Interface, obj any) (bool, error) {
	opts := metav1.CreateOptions{}
	var err error
	switch o := obj.(type) {
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.ClusterRole:
		_, err = c.RbacV1().ClusterRoles().Create(ctx, o, opts)
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, opts)
	case *rbacv1.Role:
		_, err = c.RbacV1().Roles(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.RoleBinding:
		_, err = c.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, opts)
	default:
		return false, nil
	}
	return true, err
}

// writeAgentKubeconfig writes a copy of the admin kubeconfig that
// impersonates the agent's ServiceAccount, so an agent started with it can
// do exactly what deploy/base grants: a missing grant fails the e2e instead
// of a production install.
// AgentKubeconfigVia writes a copy of the agent's kubeconfig that reaches
// the API server through server (https://HOST:PORT: a proxy that counts
// the agent's traffic) and returns its path, for StartAgent's extra
// "--kubeconfig" (the last one wins).
func (b *Testbed) AgentKubeconfigVia(server string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(b.agentKubeconfig)
	if err != nil {
		return "", fmt.Errorf("reading the agent's kubeconfig: %w", err)
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	f, err := os.CreateTemp(b.dir, "agent-via-*.kubeconfig")
	if err != nil {
		return "", err
	}
	path := f.Name()
	_ = f.Close()
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing the agent's kubeconfig: %w", err)
	}
	return path, nil
}

func (b *Testbed) writeAgentKubeconfig() (string, error) {
	cfg, err := clientcmd.LoadFromFile(b.CP.Kubeconfig())
	if err != nil {
		return "", fmt.Errorf("reading the admin kubeconfig: %w", err)
	}
	for _, user := range cfg.AuthInfos {
		user.Impersonate = AgentServiceAccount
	}
	path := filepath.Join(b.dir, "agent.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing the agent's kubeconfig: %w", err)
	}
	return path, nil
}
