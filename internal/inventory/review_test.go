package inventory

// Review (issue 23): what ManagementClients says about the management
// cluster ("where") goes into log lines (metal3watch.go), errors,
// `fence-agent validate` output (metal3check.go) and every Metal3 node's
// Controller.Source. A kubeconfig whose server URL carries user info (legal:
// client-go authenticates with it) puts that password there. Fails on main
// at a446e5e.

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestReviewManagementClusterNameShowsNoCredential(t *testing.T) {
	kc := strings.Replace(tokenKubeconfig, "https://mgmt.example.com:6443", "https://reader:s3cr3t-pw@mgmt.example.com:6443", 1)
	client := fake.NewClientset()
	if _, err := client.CoreV1().Secrets(ns).Create(context.Background(), kubeconfigSecret("mgmt", kc), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _, where, err := ManagementClients(context.Background(), client, ns, "mgmt")
	if err != nil {
		t.Fatalf("ManagementClients: %v", err)
	}
	if strings.Contains(where, "s3cr3t-pw") {
		t.Errorf("the cluster's name for logs, errors and validate shows the kubeconfig's password: %q", where)
	}
}
