package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/test/controlplane"
)

// nhcWebhookPort is where NodeHealthCheck v0.12.0's manager serves its
// webhook: controller-runtime's default, on every interface, and its main
// has no flag to change it. The test checks the port is free first.
const nhcWebhookPort = 9443

// nhcManager is NodeHealthCheck's manager built by hack/nhc.sh (the wrapper
// module test/k8sbins/nhc), and its CRD. Missing, the test fails: CI must
// never pass by checking nothing.
func nhcManager(t *testing.T) (bin, crd string) {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "bin", "tools", "nhc")
	bin, crd = filepath.Join(dir, "nhc-manager"), filepath.Join(dir, "remediation.medik8s.io_nodehealthchecks.yaml")
	for _, f := range []string{bin, crd, filepath.Join(dir, ".stamp")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s missing: run hack/nhc.sh (builds NodeHealthCheck v0.12.0 from test/k8sbins/nhc)", f)
		}
	}
	return bin, crd
}

// startNHC installs NodeHealthCheck's CRD and runs its manager out of
// cluster with the admin kubeconfig, as its own process group, until the
// test ends.
func (e *env) startNHC(namespace string) {
	e.t.Helper()
	bin, crd := nhcManager(e.t)
	if l, err := net.Listen("tcp", fmt.Sprintf(":%d", nhcWebhookPort)); err != nil {
		e.t.Fatalf("NodeHealthCheck's manager serves its webhook on :%d (not configurable in v0.12.0), which is taken: %v", nhcWebhookPort, err)
	} else {
		_ = l.Close()
	}
	kubectl := filepath.Join(e.tb.CP.BinDir(), "kubectl")
	if out, err := exec.Command(kubectl, "--kubeconfig", e.tb.CP.Kubeconfig(), "apply", "--server-side", "-f", crd).CombinedOutput(); err != nil {
		e.t.Fatalf("installing the NodeHealthCheck CRD: %v\n%s", err, out)
	}
	e.waitFor(time.Minute, "the NodeHealthCheck CRD served", func() (bool, error) {
		_, err := e.dynamic().Resource(nhcGVR).List(context.Background(), metav1.ListOptions{})
		return err == nil, nil
	})
	if err := e.tb.CP.CreateNamespace(context.Background(), namespace); err != nil {
		e.t.Fatal(err)
	}
	// The webhook server's certificate, where controller-runtime looks
	// for it by default ($TMPDIR/k8s-webhook-server/serving-certs).
	tmp := e.t.TempDir()
	writeServingCert(e.t, filepath.Join(tmp, "k8s-webhook-server", "serving-certs"))
	mport, err := controlplane.FreePort()
	if err != nil {
		e.t.Fatal(err)
	}
	hport, err := controlplane.FreePort()
	if err != nil {
		e.t.Fatal(err)
	}
	logPath := filepath.Join(tmp, "nhc.log")
	logf, err := os.Create(logPath)
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(bin, "-kubeconfig", e.tb.CP.Kubeconfig(), "-leader-elect=false",
		fmt.Sprintf("-metrics-bind-address=127.0.0.1:%d", mport), fmt.Sprintf("-health-probe-bind-address=127.0.0.1:%d", hport))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + tmp, "DEPLOYMENT_NAMESPACE=" + namespace, "POD_NAME=nhc-e2e"}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	e.t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if e.t.Failed() {
			b, _ := os.ReadFile(logPath)
			e.t.Logf("NodeHealthCheck manager log (tail):\n%s", lastLines(string(b), 40))
		}
	})
	e.waitFor(time.Minute, "NodeHealthCheck's manager healthy", func() (bool, error) {
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			return false, fmt.Errorf("NodeHealthCheck's manager exited:\n%s", lastLines(string(b), 30))
		default:
		}
		resp, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/readyz", hport))
		return err == nil && resp == 200, nil
	})
}

var (
	nhcGVR     = schema.GroupVersionResource{Group: "remediation.medik8s.io", Version: "v1alpha1", Resource: "nodehealthchecks"}
	machineGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machines"}
)

func (e *env) dynamic() dynamic.Interface {
	e.t.Helper()
	d, err := dynamic.NewForConfig(e.tb.CP.RESTConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

func (e *env) fencing() fencingclient.Interface {
	e.t.Helper()
	c, err := fencingclient.NewForConfig(e.tb.CP.RESTConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// The NHC flow with the real NodeHealthCheck v0.12.0, configured with
// configs/nodehealthcheck.example.yaml applied as it is (the example the
// docs give): a node loses power, NHC creates our BMCFenceRemediation from
// our template, the agent (detection external) fences it, the
// StatefulSet's pod fails over; the node comes back, NHC deletes the CR,
// our taint goes. Prints "failover (NHC): X.Xs".
func TestNodeHealthCheckRemediation(t *testing.T) {
	e := newEnv(t)
	e.startNHC("nhc-system")
	ctx := context.Background()
	fc := e.fencing().FencingV1alpha1()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	example := filepath.Join(root, "configs", "nodehealthcheck.example.yaml")
	kubectl := filepath.Join(e.tb.CP.BinDir(), "kubectl")
	if out, err := exec.Command(kubectl, "--kubeconfig", e.tb.CP.Kubeconfig(), "apply", "-f", example).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -f configs/nodehealthcheck.example.yaml: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "--kubeconfig", e.tb.CP.Kubeconfig(), "delete", "--ignore-not-found", "-f", example).Run()
	})
	// Where the example's template makes NHC create the CRs.
	const ns = "bmcfence-system"
	e.agent("a1", "detection: external\n")
	node := e.statefulSet("nhcdb", "web")

	start := time.Now()
	if err := e.tb.PowerLoss(node); err != nil {
		t.Fatal(err)
	}
	var created, tainted, running time.Duration
	e.waitFor(2*time.Minute, "NHC's BMCFenceRemediation for "+node+", the taint, web-0 Running elsewhere", func() (bool, error) {
		el := time.Since(start)
		if created == 0 {
			if _, err := fc.BMCFenceRemediations(ns).Get(ctx, node, metav1.GetOptions{}); err == nil {
				created = el
			}
		}
		if tainted == 0 && cluster.HasOutOfServiceTaint(e.node(node)) {
			tainted = el
		}
		p, err := e.c.CoreV1().Pods("nhcdb").Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == node || p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		if on := e.tb.CP.AttachedNode(ctx, "nhcdb", "data-web-0"); on == "" || on == node {
			return false, nil
		}
		running = el
		return true, nil
	})
	t.Logf("timeline: NHC created the CR +%.1fs, tainted +%.1fs, replacement Running +%.1fs", created.Seconds(), tainted.Seconds(), running.Seconds())
	fmt.Printf("failover (NHC): %.1fs\n", running.Seconds())
	if created == 0 || tainted < created {
		t.Errorf("tainted at +%.1fs, NHC's CR at +%.1fs: with detection external the fence must follow the CR", tainted.Seconds(), created.Seconds())
	}
	e.waitFor(30*time.Second, "the CR Succeeded=True with our finalizer", func() (bool, error) {
		cr, err := fc.BMCFenceRemediations(ns).Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(cr.Status.Conditions, v1alpha1.ConditionSucceeded) &&
			strings.Contains(strings.Join(cr.Finalizers, ","), v1alpha1.FinalizerRemediation), nil
	})

	// The machine comes back: NHC sees the node healthy and deletes its CR;
	// the agent releases its finalizer and removes its taint.
	back := time.Now()
	if err := e.tb.PowerRestore(node); err != nil {
		t.Fatal(err)
	}
	e.waitFor(3*time.Minute, "NHC deleted the CR and our taint is gone", func() (bool, error) {
		_, err := fc.BMCFenceRemediations(ns).Get(ctx, node, metav1.GetOptions{})
		gone := apierrors.IsNotFound(err)
		return gone && !cluster.HasOutOfServiceTaint(e.node(node)), nil
	})
	t.Logf("node back, CR deleted and untainted +%.1fs after power restore", time.Since(back).Seconds())
	// The fence's record names NHC's CR as who asked.
	recs := e.historyRecords(node)
	if len(recs) == 0 || recs[0].Trigger != "nhc" {
		t.Errorf("history of %s: %+v; want the newest record triggered by nhc", node, recs)
	}
}

// The Cluster API MachineHealthCheck contract, against a Machine CRD stand-in:
// the CR has the Machine's name and an ownerRef to it, the node is the
// Machine's status.nodeRef; MHC deletes the CR once the node is healthy.
func TestMachineHealthCheckShapedRemediation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.installMachineCRD()
	const ns = "capi-e2e"
	if err := e.tb.CP.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	e.agent("a1", "detection: external\n")
	node := e.statefulSet("mhcdb", "web")
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
		"metadata": map[string]any{"name": "machine-" + node, "namespace": ns},
		"spec":     map[string]any{"clusterName": "e2e"},
	}}
	created, err := e.dynamic().Resource(machineGVR).Namespace(ns).Create(ctx, m, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(created.Object, node, "status", "nodeRef", "name"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dynamic().Resource(machineGVR).Namespace(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })

	start := time.Now()
	if err := e.tb.PowerLoss(node); err != nil {
		t.Fatal(err)
	}
	// What MHC does once the Machine is unhealthy: a CR from the template,
	// named after the Machine, owned by it.
	fc := e.fencing().FencingV1alpha1()
	cr := &v1alpha1.BMCFenceRemediation{ObjectMeta: metav1.ObjectMeta{
		Name: created.GetName(), Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta1", Kind: "Machine", Name: created.GetName(), UID: created.GetUID()}},
	}}
	if _, err := fc.BMCFenceRemediations(ns).Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(2*time.Minute, node+" tainted and the CR Succeeded=True naming it", func() (bool, error) {
		got, err := fc.BMCFenceRemediations(ns).Get(ctx, cr.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cluster.HasOutOfServiceTaint(e.node(node)) && got.Status.NodeName == node &&
			meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionSucceeded), nil
	})
	t.Logf("MHC-shaped fence: tainted and Succeeded +%.1fs after the power loss", time.Since(start).Seconds())
	e.podMovedOff("mhcdb", "web-0", node, 90*time.Second)

	if err := e.tb.PowerRestore(node); err != nil {
		t.Fatal(err)
	}
	e.waitFor(2*time.Minute, node+" Ready", func() (bool, error) { return cluster.NodeReady(e.node(node)), nil })
	// MHC deletes the CR when the Machine is healthy again.
	if err := fc.BMCFenceRemediations(ns).Delete(ctx, cr.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(2*time.Minute, "CR gone (finalizer released) and our taint removed", func() (bool, error) {
		_, err := fc.BMCFenceRemediations(ns).Get(ctx, cr.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && !cluster.HasOutOfServiceTaint(e.node(node)), nil
	})
}

// installMachineCRD installs a minimal stand-in for Cluster API's Machine
// CRD (v1beta1, status subresource, anything else preserved).
func (e *env) installMachineCRD() {
	e.t.Helper()
	crd := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: machines.cluster.x-k8s.io
spec:
  group: cluster.x-k8s.io
  names: {kind: Machine, listKind: MachineList, plural: machines, singular: machine}
  scope: Namespaced
  versions:
    - name: v1beta1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
`
	kubectl := filepath.Join(e.tb.CP.BinDir(), "kubectl")
	cmd := exec.Command(kubectl, "--kubeconfig", e.tb.CP.Kubeconfig(), "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(crd)
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("installing the Machine CRD stand-in: %v\n%s", err, out)
	}
	e.waitFor(time.Minute, "the Machine CRD served", func() (bool, error) {
		_, err := e.dynamic().Resource(machineGVR).List(context.Background(), metav1.ListOptions{})
		return err == nil, nil
	})
}

// writeServingCert writes a self-signed tls.crt/tls.key for 127.0.0.1.
func writeServingCert(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nhc-webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var crt, k bytes.Buffer
	_ = pem.Encode(&crt, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	_ = pem.Encode(&k, &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), crt.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), k.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// httpGet returns the status code of a GET.
func httpGet(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
