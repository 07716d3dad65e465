package controlplane

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Versions pinned by hack/e2e-bins.sh; kept here for messages and checks.
const (
	KubernetesVersion = "v1.34.4"
	EtcdVersion       = "v3.6.4"
	KwokVersion       = "v0.8.0"
)

// Binaries lists the executables Start needs in Options.BinDir.
var Binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"}

// DefaultNodeMonitorGracePeriod is the controller-manager's
// --node-monitor-grace-period unless Options says otherwise. Upstream's
// default is 50 s (five missed 10 s kubelet heartbeats); tests want a dead
// node noticed sooner, but a healthy node must never flap. The worst-case age
// of a healthy node's last observed heartbeat is the Lease renew interval
// (10 s + 4 % jitter, kwok's kubelet-like 40 s / 4) plus one
// --node-monitor-period (5 s, default) = 15.4 s. 20 s keeps more than 4 s of
// margin for a loaded 2-core runner and still declares a dead node Unknown
// within 20–25 s.
const DefaultNodeMonitorGracePeriod = 20 * time.Second

// Options configures Start. The zero value works.
type Options struct {
	// BinDir holds the binaries (see Binaries). Default: $BMCFENCE_E2E_BINDIR,
	// else <repo>/bin/e2e, the repository root found from the working
	// directory (go test runs in the package directory).
	BinDir string
	// WorkDir holds certificates, kubeconfigs, etcd data and
	// logs/<component>.log. Default: a new temporary directory, removed by
	// Stop unless the run failed (see StartT).
	WorkDir string
	// NodeMonitorGracePeriod is kube-controller-manager's
	// --node-monitor-grace-period. Default DefaultNodeMonitorGracePeriod.
	NodeMonitorGracePeriod time.Duration
	// Nodes are added (in parallel) before Start returns; Start waits until
	// all of them are Ready.
	Nodes []NodeSpec
	// ExtraArgs appends flags to a component's command line, keyed by binary
	// name ("kube-controller-manager": {"--disable-force-detach-on-timeout=true"}).
	// Later flags win, so these override the defaults.
	ExtraArgs map[string][]string
	// Logf receives progress and the in-process controllers' actions.
	// Default: discard. StartT uses t.Logf.
	Logf func(format string, args ...any)
}

// ControlPlane is a running control plane. Its methods are safe for
// concurrent use.
type ControlPlane struct {
	binDir, workDir, logDir string
	ownsWorkDir             bool
	gracePeriod             time.Duration
	extraArgs               map[string][]string
	logf                    func(string, ...any)

	pki        *pki
	apiURL     string
	kubeconfig string
	restConfig *rest.Config
	client     kubernetes.Interface
	httpClient *http.Client // trusts the CA, presents the admin certificate
	kcmURL     string
	schedURL   string

	mu        sync.Mutex
	procs     []*process // etcd, apiserver, controller-manager, scheduler
	nodes     map[string]*node
	nodeSeq   int
	keep      bool
	stopped   bool
	stopOnce  sync.Once
	bgCancel  context.CancelFunc
	bgDone    sync.WaitGroup
	simulator *volumeSim
}

// BinariesAvailable returns nil when binDir holds every binary of a complete
// hack/e2e-bins.sh run ("" means the default BinDir), else an error that
// says how to build them.
func BinariesAvailable(binDir string) error {
	if binDir == "" {
		var err error
		if binDir, err = defaultBinDir(); err != nil {
			return fmt.Errorf("%w; run `make e2e-bins` (hack/e2e-bins.sh)", err)
		}
	}
	var missing []string
	for _, b := range Binaries {
		st, err := os.Stat(filepath.Join(binDir, b))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("e2e control-plane binaries missing in %s (%s): run `make e2e-bins` (hack/e2e-bins.sh)",
			binDir, strings.Join(missing, ", "))
	}
	// The script writes the stamp last: without it the build was interrupted.
	if _, err := os.Stat(filepath.Join(binDir, ".stamp")); err != nil {
		return fmt.Errorf("e2e control-plane binaries in %s are from an incomplete build (no .stamp): run `make e2e-bins` (hack/e2e-bins.sh)", binDir)
	}
	return nil
}

// defaultBinDir is <repo>/bin/e2e, unless BMCFENCE_E2E_BINDIR says otherwise.
func defaultBinDir() (string, error) {
	if d := os.Getenv("BMCFENCE_E2E_BINDIR"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin", "e2e"), nil
}

// RepoRoot finds the bmcfence repository by walking up from the working
// directory to this module's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil &&
			modulePath(data) == "github.com/bmcfence/bmcfence" {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("cannot find the bmcfence repository root above %s", dir)
		}
	}
}

func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(strings.NewReader(string(gomod)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// StartT starts a control plane for t and stops it in t.Cleanup. Missing
// binaries fail the test (with the `make e2e-bins` hint) rather than skip it,
// so a CI job can never pass by testing nothing. When the test has failed,
// Cleanup logs the tail of every component's log and keeps WorkDir.
func StartT(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	if err := BinariesAvailable(opts.BinDir); err != nil {
		t.Fatal(err)
	}
	// Bring-up takes ~10 s; three minutes absorbs a cold page cache and a
	// busy runner without hiding a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			cp.mu.Lock()
			cp.keep = true
			cp.mu.Unlock()
			t.Logf("control plane logs (work dir kept: %s):\n%s", cp.workDir, cp.LogTails(25))
		}
		cp.Stop()
	})
	return cp
}

// Start brings up etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, the in-process storage stand-ins and opts.Nodes, and
// returns when all of it is ready. ctx bounds the bring-up only; the control
// plane runs until Stop. On error everything started is stopped and the
// error carries the failing component's log tail.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	cp := &ControlPlane{
		binDir:      opts.BinDir,
		workDir:     opts.WorkDir,
		gracePeriod: opts.NodeMonitorGracePeriod,
		extraArgs:   opts.ExtraArgs,
		logf:        opts.Logf,
		nodes:       map[string]*node{},
	}
	if cp.logf == nil {
		cp.logf = func(string, ...any) {}
	}
	if cp.gracePeriod == 0 {
		cp.gracePeriod = DefaultNodeMonitorGracePeriod
	}
	if cp.binDir == "" {
		if cp.binDir, err = defaultBinDir(); err != nil {
			return nil, err
		}
	}
	if err := BinariesAvailable(cp.binDir); err != nil {
		return nil, err
	}
	if cp.workDir == "" {
		if cp.workDir, err = os.MkdirTemp("", "bmcfence-e2e-"); err != nil {
			return nil, err
		}
		cp.ownsWorkDir = true
	}
	cp.logDir = filepath.Join(cp.workDir, "logs")
	if err := os.MkdirAll(cp.logDir, 0o700); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			// Keep the logs of a failed bring-up; the error names the directory.
			cp.keep = true
			cp.Stop()
			err = fmt.Errorf("%w (logs in %s)", err, cp.logDir)
		}
	}()

	t0 := time.Now()
	if cp.pki, err = newPKI(filepath.Join(cp.workDir, "pki")); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cp.pki.ca.cert)
	adminCert, err := tls.X509KeyPair(cp.pki.admin.CertPEM, cp.pki.admin.KeyPEM)
	if err != nil {
		return nil, err
	}
	cp.httpClient = &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{adminCert}}},
	}

	etcdURL, err := cp.startEtcd(ctx)
	if err != nil {
		return nil, err
	}
	cp.logf("controlplane: etcd ready at %s (%.1fs)", etcdURL, time.Since(t0).Seconds())
	if err := cp.startAPIServer(ctx, etcdURL); err != nil {
		return nil, err
	}
	cp.logf("controlplane: kube-apiserver ready at %s (%.1fs)", cp.apiURL, time.Since(t0).Seconds())

	cp.restConfig = &rest.Config{
		Host: cp.apiURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: cp.pki.ca.certPEM, CertData: cp.pki.admin.CertPEM, KeyData: cp.pki.admin.KeyPEM,
		},
		// Tests poll and the stand-in controllers write often; client-go's
		// default 5 QPS would make the harness, not the cluster, the bottleneck.
		QPS: 100, Burst: 200,
	}
	if cp.client, err = kubernetes.NewForConfig(cp.restConfig); err != nil {
		return nil, err
	}
	if cp.kubeconfig, err = cp.writeKubeconfig("admin", cp.pki.admin); err != nil {
		return nil, err
	}

	errs := make(chan error, 2)
	go func() { errs <- cp.startControllerManager(ctx) }()
	go func() { errs <- cp.startScheduler(ctx) }()
	if err := errors.Join(<-errs, <-errs); err != nil {
		return nil, err
	}
	cp.logf("controlplane: kube-controller-manager and kube-scheduler ready (%.1fs)", time.Since(t0).Seconds())

	// Pods cannot be created before the service-account controller has made
	// the namespace's default ServiceAccount (ServiceAccount admission).
	if err := cp.WaitFor(ctx, "ServiceAccount default/default", func() (bool, error) {
		_, err := cp.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, ignoreNotFound(err)
	}); err != nil {
		return nil, err
	}

	if err := cp.installKwokRBAC(ctx); err != nil {
		return nil, fmt.Errorf("kwok RBAC: %w", err)
	}
	if err := cp.installStorage(ctx); err != nil {
		return nil, fmt.Errorf("storage objects: %w", err)
	}
	bgCtx, cancel := context.WithCancel(context.Background())
	cp.bgCancel = cancel
	if cp.simulator, err = startVolumeSim(bgCtx, cp, &cp.bgDone); err != nil {
		return nil, fmt.Errorf("volume stand-ins: %w", err)
	}

	nodeErrs := make(chan error, len(opts.Nodes))
	for _, n := range opts.Nodes {
		go func() { nodeErrs <- cp.AddNode(ctx, n) }()
	}
	var all []error
	for range opts.Nodes {
		all = append(all, <-nodeErrs)
	}
	if err := errors.Join(all...); err != nil {
		return nil, err
	}
	cp.logf("controlplane: up with %d Ready node(s) in %.1fs (work dir %s)", len(opts.Nodes), time.Since(t0).Seconds(), cp.workDir)
	return cp, nil
}

// Kubeconfig is the path of an admin kubeconfig (client certificate in
// system:masters), usable with bin/e2e/kubectl or any client.
func (cp *ControlPlane) Kubeconfig() string { return cp.kubeconfig }

// RESTConfig returns a copy of the admin client configuration.
func (cp *ControlPlane) RESTConfig() *rest.Config { return rest.CopyConfig(cp.restConfig) }

// Client is an admin clientset.
func (cp *ControlPlane) Client() kubernetes.Interface { return cp.client }

// WorkDir is the directory holding certificates, kubeconfigs and logs.
func (cp *ControlPlane) WorkDir() string { return cp.workDir }

// BinDir is the directory the binaries came from (kubectl is there too).
func (cp *ControlPlane) BinDir() string { return cp.binDir }

// LogPath is the log file of a component ("kube-controller-manager",
// "kwok-NODE"...).
func (cp *ControlPlane) LogPath(component string) string {
	return filepath.Join(cp.logDir, component+".log")
}

// Metrics fetches the Prometheus text exposition of
// "kube-controller-manager" or "kube-scheduler" (e.g. to read
// attachdetach_controller_forced_detaches{reason=...}).
func (cp *ControlPlane) Metrics(ctx context.Context, component string) (string, error) {
	var base string
	switch component {
	case "kube-controller-manager":
		base = cp.kcmURL
	case "kube-scheduler":
		base = cp.schedURL
	default:
		return "", fmt.Errorf("no metrics endpoint for %q", component)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := cp.httpClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s /metrics: %s: %s", component, resp.Status, body)
	}
	return string(body), nil
}

// LogTails returns the last n lines of every log in WorkDir/logs.
func (cp *ControlPlane) LogTails(n int) string {
	entries, _ := os.ReadDir(cp.logDir)
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "----- %s (last %d lines) -----\n%s\n", name, n, tailFile(filepath.Join(cp.logDir, name), n))
	}
	return b.String()
}

// Stop kills every node's kwok, the scheduler, the controller-manager, the
// apiserver and etcd (process groups, SIGKILL), waits for them and for the
// in-process controllers, and removes a temporary WorkDir unless the run
// failed. It is idempotent.
func (cp *ControlPlane) Stop() {
	cp.stopOnce.Do(func() {
		if cp.bgCancel != nil {
			cp.bgCancel()
		}
		cp.bgDone.Wait()
		cp.mu.Lock()
		cp.stopped = true
		nodes := make([]*node, 0, len(cp.nodes))
		for _, n := range cp.nodes {
			nodes = append(nodes, n)
		}
		procs := cp.procs
		keep := cp.keep
		cp.mu.Unlock()
		for _, n := range nodes {
			n.mu.Lock()
			n.alive = false
			n.proc.kill()
			n.mu.Unlock()
		}
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].kill()
		}
		if cp.ownsWorkDir && !keep {
			_ = os.RemoveAll(cp.workDir)
		}
	})
}

// addProc records a control-plane process so Stop kills it.
func (cp *ControlPlane) addProc(p *process) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.procs = append(cp.procs, p)
}

// writeKubeconfig writes WorkDir/NAME.kubeconfig with embedded credentials.
func (cp *ControlPlane) writeKubeconfig(name string, kp keyPair) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cp.apiURL, CertificateAuthorityData: cp.pki.ca.certPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: name}
	cfg.CurrentContext = "e2e"
	path := filepath.Join(cp.workDir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}

// args returns the default flags followed by Options.ExtraArgs[bin].
func (cp *ControlPlane) args(bin string, defaults ...string) []string {
	return append(defaults, cp.extraArgs[bin]...)
}

// startServing starts a server process on fresh ports and waits for ready,
// retrying (up to three times) when the process lost the race for a port
// between freePort and its own bind.
func (cp *ControlPlane) startServing(ctx context.Context, name string, nPorts int,
	launch func(ports []int) (*process, error), ready func(ctx context.Context, ports []int) error,
) error {
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		ports := make([]int, nPorts)
		for i := range ports {
			p, err := FreePort()
			if err != nil {
				return err
			}
			ports[i] = p
		}
		p, err := launch(ports)
		if err != nil {
			return err
		}
		err = waitReady(ctx, p, func(ctx context.Context) error { return ready(ctx, ports) })
		if err == nil {
			cp.addProc(p)
			return nil
		}
		p.kill()
		lastErr = err
		if !errors.Is(err, errAddrInUse) {
			return err
		}
		cp.logf("controlplane: %s lost a port race (attempt %d), retrying", name, attempt)
	}
	return lastErr
}

// waitReady polls check until it succeeds, the process exits (error with its
// log tail) or ctx ends (error with the last check error and the log tail).
// Polling every 100 ms: readiness arrives within seconds and a check costs
// one loopback request.
func waitReady(ctx context.Context, p *process, check func(context.Context) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if p.exited() {
			return p.exitError()
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %v (%w); last log lines from %s:\n%s",
				p.name, last, ctx.Err(), p.logPath, tailFile(p.logPath, 30))
		case <-p.done:
		case <-tick.C:
		}
	}
}

// httpOK GETs url and wants 200.
func (cp *ControlPlane) httpOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := cp.httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func (cp *ControlPlane) startEtcd(ctx context.Context) (string, error) {
	var url string
	dataDir := filepath.Join(cp.workDir, "etcd")
	err := cp.startServing(ctx, "etcd", 2, func(ports []int) (*process, error) {
		// A failed attempt may have initialised the data dir with other ports.
		if err := os.RemoveAll(dataDir); err != nil {
			return nil, err
		}
		url = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
		return startProcess("etcd", filepath.Join(cp.binDir, "etcd"), cp.args("etcd",
			"--name=e2e",
			"--data-dir="+dataDir,
			"--listen-client-urls="+url,
			"--advertise-client-urls="+url,
			"--listen-peer-urls="+peer,
			"--initial-advertise-peer-urls="+peer,
			"--initial-cluster=e2e="+peer,
			// Test data is disposable; fsync dominates etcd latency on CI disks.
			"--unsafe-no-fsync",
			"--log-level=warn",
		), minimalEnv(), cp.LogPath("etcd"))
	}, func(ctx context.Context, ports []int) error {
		return cp.httpOK(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", ports[0]))
	})
	return url, err
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, etcdURL string) error {
	p := cp.pki
	certDir := filepath.Join(cp.workDir, "apiserver")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	return cp.startServing(ctx, "kube-apiserver", 1, func(ports []int) (*process, error) {
		cp.apiURL = fmt.Sprintf("https://127.0.0.1:%d", ports[0])
		return startProcess("kube-apiserver", filepath.Join(cp.binDir, "kube-apiserver"), cp.args("kube-apiserver",
			"--etcd-servers="+etcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", ports[0]),
			"--cert-dir="+certDir, // never /var/run/kubernetes
			"--tls-cert-file="+p.apiserverCrt,
			"--tls-private-key-file="+p.apiserverKey,
			"--client-ca-file="+p.caFile,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file="+p.saPubFile,
			"--service-account-signing-key-file="+p.saKeyFile,
			"--service-cluster-ip-range="+serviceCIDR,
			// Node authorizer + NodeRestriction confine each kwok to its own
			// node, as a kubelet is confined.
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			// A single apiserver on loopback: no kubernetes Endpoints to keep.
			"--endpoint-reconciler-type=none",
		), minimalEnv(), cp.LogPath("kube-apiserver"))
	}, func(ctx context.Context, ports []int) error {
		return cp.httpOK(ctx, fmt.Sprintf("https://127.0.0.1:%d/readyz", ports[0]))
	})
}

func (cp *ControlPlane) startControllerManager(ctx context.Context) error {
	p := cp.pki
	kubeconfig, err := cp.writeKubeconfig("kube-controller-manager", p.kcm)
	if err != nil {
		return err
	}
	return cp.startServing(ctx, "kube-controller-manager", 1, func(ports []int) (*process, error) {
		cp.kcmURL = fmt.Sprintf("https://127.0.0.1:%d", ports[0])
		return startProcess("kube-controller-manager", filepath.Join(cp.binDir, "kube-controller-manager"), cp.args("kube-controller-manager",
			"--kubeconfig="+kubeconfig,
			"--authentication-kubeconfig="+kubeconfig,
			"--authorization-kubeconfig="+kubeconfig,
			"--client-ca-file="+p.caFile,
			// Client certificates (--client-ca-file) are the only
			// authentication; do not look up front-proxy settings the
			// apiserver does not have.
			"--authentication-skip-lookup=true",
			"--bind-address=127.0.0.1",
			// A serving port (not 0) so readiness is /healthz and tests can
			// read /metrics (attach/detach reasons).
			fmt.Sprintf("--secure-port=%d", ports[0]),
			"--tls-cert-file="+p.compCrt,
			"--tls-private-key-file="+p.compKey,
			"--controllers=*",
			"--leader-elect=false",
			"--use-service-account-credentials=true",
			"--service-account-private-key-file="+p.saKeyFile,
			"--root-ca-file="+p.caFile,
			"--node-monitor-grace-period="+cp.gracePeriod.String(),
		), minimalEnv(), cp.LogPath("kube-controller-manager"))
	}, func(ctx context.Context, ports []int) error {
		return cp.httpOK(ctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", ports[0]))
	})
}

func (cp *ControlPlane) startScheduler(ctx context.Context) error {
	p := cp.pki
	kubeconfig, err := cp.writeKubeconfig("kube-scheduler", p.scheduler)
	if err != nil {
		return err
	}
	return cp.startServing(ctx, "kube-scheduler", 1, func(ports []int) (*process, error) {
		cp.schedURL = fmt.Sprintf("https://127.0.0.1:%d", ports[0])
		return startProcess("kube-scheduler", filepath.Join(cp.binDir, "kube-scheduler"), cp.args("kube-scheduler",
			"--kubeconfig="+kubeconfig,
			"--authentication-kubeconfig="+kubeconfig,
			"--authorization-kubeconfig="+kubeconfig,
			"--client-ca-file="+p.caFile,
			// Client certificates (--client-ca-file) are the only
			// authentication; do not look up front-proxy settings the
			// apiserver does not have.
			"--authentication-skip-lookup=true",
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", ports[0]),
			"--tls-cert-file="+p.compCrt,
			"--tls-private-key-file="+p.compKey,
			"--leader-elect=false",
		), minimalEnv(), cp.LogPath("kube-scheduler"))
	}, func(ctx context.Context, ports []int) error {
		return cp.httpOK(ctx, fmt.Sprintf("https://127.0.0.1:%d/readyz", ports[0]))
	})
}

// installKwokRBAC grants every node identity (group system:nodes) the two
// reads kwok needs beyond a kubelet's rights. The Node authorizer answers
// NoOpinion to both (so RBAC decides) since AuthorizeNodeWithSelectors (GA,
// locked on in 1.34):
//   - list nodes without a field selector: kwok's start-up probe
//     ("node 'X' cannot read all nodes, only its own Node object"; kwok exits
//     after ~15 s of retries);
//   - list/watch Leases in kube-node-lease: kwok keeps an informer on its
//     node's Lease, a kubelet only gets/updates it ("can only get, create,
//     update, patch, or delete a node lease"; kwok then never sees that it
//     holds the Lease and manages no pods).
//
// Both are read-only; every write kwok makes is still confined to its own
// node by the Node authorizer and NodeRestriction.
func (cp *ControlPlane) installKwokRBAC(ctx context.Context) error {
	const name = "bmcfence-e2e:kwok-reads"
	nodes := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}}
	rbac := cp.client.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   nodes,
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := rbac.Roles(corev1.NamespaceNodeLease).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch"},
		}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := rbac.RoleBindings(corev1.NamespaceNodeLease).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   nodes,
	}, metav1.CreateOptions{})
	return err
}

// minimalEnv keeps the children away from the developer's environment
// (KUBECONFIG, proxies, KWOK_* overrides, ~/.kwok): only PATH and a private
// HOME per caller are passed.
func minimalEnv(extra ...string) []string {
	return append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent"}, extra...)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// nodeReady reports whether the node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	return nodeCondition(n, corev1.NodeReady) == corev1.ConditionTrue
}

// nodeCondition returns the status of a node condition ("" if absent).
func nodeCondition(n *corev1.Node, t corev1.NodeConditionType) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}
