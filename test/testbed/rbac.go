package testbed

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bmcfence/bmcfence/test/controlplane"
)

// AgentServiceAccount is the identity deploy/base gives the agent.
const AgentServiceAccount = "system:serviceaccount:" + Namespace + ":bmcfence-agent"

// ApplyAgentRBAC renders deploy/base with kubectl kustomize, as an install
// does, and creates its ServiceAccount and RBAC objects: exactly what the
// manifest grants, nothing more. The rest (the DaemonSet above all) has no
// place on a testbed, where the agent is a local process.
func (b *Testbed) ApplyAgentRBAC(ctx context.Context) error {
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
	c := b.CP.Client()
	applied := 0
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading deploy/base: %w", err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return fmt.Errorf("decoding deploy/base: %w", err)
		}
		ok, err := createRBAC(ctx, c, obj)
		if err != nil {
			return fmt.Errorf("creating deploy/base's RBAC: %w", err)
		}
		if ok {
			applied++
		}
	}
	// The ServiceAccount; the ClusterRole and its binding; the Roles and
	// bindings in the agent's namespace and in kube-node-lease; the
	// metrics reader ClusterRole.
	if applied != 8 {
		return fmt.Errorf("deploy/base rendered %d ServiceAccount and RBAC objects, want 8", applied)
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
