//go:build !bmcfast

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
	"github.com/bmcfence/bmcfence/internal/version"
)

// kubeFlags are kubectl's own connection flags (k8s.io/cli-runtime's
// ConfigFlags: --kubeconfig, --context, --cluster, --user, --as, --as-group,
// --server, --token, --request-timeout, -n, ...) plus where the agent's
// configuration is.
type kubeFlags struct {
	cf         *genericclioptions.ConfigFlags
	configFile string
}

// defaultAgentNamespace is where deploy/ and the chart install the agent.
const defaultAgentNamespace = "bmcfence-system"

func (k *kubeFlags) register(fs *pflag.FlagSet) {
	k.cf = genericclioptions.NewConfigFlags(true)
	k.cf.AddFlags(fs)
	// -n names the agent's namespace, never the kubeconfig context's
	// namespace: a context pointing at "default" must not make the CLI look
	// for the agent there.
	if f := fs.Lookup("namespace"); f != nil {
		f.Usage = "namespace of the bmcfence agent: its ConfigMap, Secrets and leader Lease (default " + defaultAgentNamespace + "; the kubeconfig context's namespace is not used)"
	}
	if f := fs.Lookup("request-timeout"); f != nil {
		f.Usage = "time limit of each API request, e.g. 10s, 1m (0: kubectl fence's own 30s)"
	}
	fs.StringVar(&k.configFile, "config", "", "agent config file (default: the agent's ConfigMap bmcfence-agent in --namespace)")
}

// namespace is the agent's namespace.
func (k *kubeFlags) namespace() string {
	if k.cf != nil && k.cf.Namespace != nil && *k.cf.Namespace != "" {
		return *k.cf.Namespace
	}
	return defaultAgentNamespace
}

// restConfig is the client configuration kubectl would use with the same
// flags, with a default request timeout and kubectl's own rate limits. No
// kubeconfig and no cluster around is an error of its own: client-go would
// fall back to http://localhost:8080, a server nobody runs.
func (k *kubeFlags) restConfig() (*rest.Config, error) {
	rc, err := k.cf.ToRESTConfig()
	if err != nil {
		return nil, usageError("kubeconfig: %v", err)
	}
	if err := k.clusterConfigured(); err != nil {
		return nil, err
	}
	rc.UserAgent = "kubectl-fence/" + version.Get().Version
	if rc.Timeout == 0 {
		rc.Timeout = 30 * time.Second
	}
	// client-go's default 5 requests/s would make check (one access review
	// per permission) and the waits crawl; kubectl itself uses these.
	rc.QPS, rc.Burst = 50, 100
	return rc, nil
}

// errNoCluster: nothing names a cluster.
var errNoCluster = errors.New("no cluster configured: no kubeconfig ($KUBECONFIG, ~/.kube/config or --kubeconfig) and not running in a cluster; point kubectl fence at one with --kubeconfig FILE, KUBECONFIG=FILE, --context NAME or --server URL (the bmc commands need none)")

// clusterConfigured reports errNoCluster when no flag, no kubeconfig
// context and no in-cluster service account names a cluster. A kubeconfig
// that cannot be read is left to ToRESTConfig, which says why.
func (k *kubeFlags) clusterConfigured() error {
	set := func(p *string) bool { return p != nil && *p != "" }
	if set(k.cf.APIServer) || set(k.cf.Context) || set(k.cf.ClusterName) {
		return nil
	}
	raw, err := k.cf.ToRawKubeConfigLoader().RawConfig()
	if err != nil || raw.CurrentContext != "" {
		return nil
	}
	if _, err := rest.InClusterConfig(); err == nil {
		return nil
	}
	return withCode(exitNoCluster, errNoCluster)
}

// where says which cluster the flags chose, for messages.
func (k *kubeFlags) where() string {
	switch {
	case k.cf.APIServer != nil && *k.cf.APIServer != "":
		return "--server"
	case k.cf.Context != nil && *k.cf.Context != "":
		return "kubeconfig context " + *k.cf.Context
	}
	if raw, err := k.cf.ToRawKubeConfigLoader().RawConfig(); err == nil && raw.CurrentContext != "" {
		return "kubeconfig context " + raw.CurrentContext
	}
	return "in-cluster"
}

// firstContactTimeout bounds the first request to the API server when
// --request-timeout is not given: a server that does not answer in 10 s
// is down or elsewhere, and saying so beats a minute of retries.
const firstContactTimeout = 10 * time.Second

// firstContact asks the API server who we are (SelfSubjectReview, GA in
// 1.28; the kubeconfig's user when it cannot say) and is the one place an
// API server that does not answer is found: one line that names it,
// within --request-timeout or firstContactTimeout, before anything starts
// retrying.
func firstContact(ctx context.Context, client kubernetes.Interface, rc *rest.Config, k *kubeFlags) (string, error) {
	timeout, bound := firstContactTimeout, ""
	if t := k.cf.Timeout; t != nil && *t != "" && *t != "0" && rc.Timeout > 0 {
		timeout, bound = rc.Timeout, " (--request-timeout)"
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(cctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	var status apierrors.APIStatus
	switch {
	case err == nil && r.Status.UserInfo.Username != "":
		return r.Status.UserInfo.Username, nil
	case err != nil && !errors.As(err, &status) && ctx.Err() == nil:
		why := transportCause(err)
		if cctx.Err() != nil || isTimeout(err) {
			why = fmt.Sprintf("no answer within %s%s", timeout, bound)
		}
		return "", withCode(exitNoAPIServer, fmt.Errorf("cannot reach the API server %s (%s): %s; check --kubeconfig, --context or --server", rc.Host, k.where(), why))
	}
	// Answered, without a name (an older server, or not allowed to say).
	if raw, err := k.cf.ToRawKubeConfigLoader().RawConfig(); err == nil {
		if c, ok := raw.Contexts[raw.CurrentContext]; ok && c.AuthInfo != "" {
			return c.AuthInfo, nil
		}
	}
	return "unknown", nil
}

// transportCause is the innermost reason a request never got an answer:
// "connection refused", not the URL and the dial that wrap it.
func transportCause(err error) string {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "connection refused"
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "cannot resolve " + dns.Name
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &te) && te.Timeout())
}

// session is a connection to the cluster with the agent's configuration.
type session struct {
	client kubernetes.Interface
	// fencing writes and reads BMCFenceRequests.
	fencing fencingclient.Interface
	cfg     config.Agent
	inv     *inventory.Inventory
	view    *cluster.Cluster // started by startView
	user    string
	// dynamic reads BareMetalHosts (inventory.source metal3 or both).
	dynamic dynamic.Interface
}

// agentConfigMap is where deploy/ puts the agent's configuration.
const agentConfigMap = "bmcfence-agent"

func openSession(ctx context.Context, k *kubeFlags) (*session, error) {
	rc, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	fencing, err := fencingclient.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	user, err := firstContact(ctx, client, rc, k)
	if err != nil {
		return nil, err
	}
	cfg, err := agentConfig(ctx, client, k)
	if err != nil {
		return nil, err
	}
	// inv and view come with startView: the inventory needs the view's
	// Nodes to resolve annotations and identities.
	return &session{client: client, fencing: fencing, dynamic: dyn, cfg: cfg, user: user}, nil
}

// agentConfig reads --config, else the agent's ConfigMap. A missing
// ConfigMap is an error that names the namespace: with a wrong -n the
// defaults would mean an empty inventory, and every node "has no BMC".
func agentConfig(ctx context.Context, client kubernetes.Interface, k *kubeFlags) (config.Agent, error) {
	if k.configFile != "" {
		b, err := os.ReadFile(k.configFile)
		if err != nil {
			return config.Agent{}, usageError("--config: %v", err)
		}
		cfg, err := config.Parse(b)
		if err != nil {
			return config.Agent{}, withCode(exitUsage, fmt.Errorf("--config %s: %w", k.configFile, err))
		}
		return cfg, nil
	}
	ns := k.namespace()
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, agentConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return config.Agent{}, usageError("the agent's ConfigMap %s/%s was not found: is bmcfence installed in namespace %q? Name its namespace with -n NAMESPACE, or give its configuration with --config FILE", ns, agentConfigMap, ns)
	}
	if err != nil {
		return config.Agent{}, fmt.Errorf("reading the agent's ConfigMap %s/%s (or pass --config): %w", ns, agentConfigMap, err)
	}
	cfg, err := config.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		return config.Agent{}, fmt.Errorf("the agent's ConfigMap %s/%s: %w", ns, agentConfigMap, err)
	}
	return cfg, nil
}

// startView starts the same cluster view the agent uses.
func (s *session) startView(ctx context.Context) error {
	if s.view != nil {
		return nil
	}
	v, err := cluster.New(clientgo.Wrap(s.client), cluster.Options{Clock: clock.RealClock{}, Log: zap.NewNop(), Component: "kubectl-fence", SyncTimeout: time.Minute})
	if err != nil {
		return err
	}
	if err := v.Start(ctx); err != nil {
		return fmt.Errorf("reading the cluster: %w", err)
	}
	s.view = v
	s.inv = inventory.New(inventory.Options{
		Config: s.cfg.Inventory, Namespace: s.cfg.Namespace, Timeout: s.cfg.BMC.Timeout, Client: clientgo.Wrap(s.client), Dynamic: s.dynamic, Nodes: v,
		Policy: s.cfg.Policy,
	})
	s.inv.Refresh(ctx)
	return nil
}

// agentLeader names the agent replica that currently leads, or "" when none
// does (no agent running).
func (s *session) agentLeader(ctx context.Context) (string, error) {
	le := s.cfg.LeaderElection
	return leaderAlive(ctx, s.client, s.cfg.Namespace, le.Name, le.LeaseDuration, le.RetryPeriod/4)
}

// leaderAlive reports the holder of the leader Lease if we see the Lease
// renewed while we watch, on our own clock, within one lease duration. The
// renewTime the leader wrote is never compared with our clock: a laptop's
// clock may be minutes off the agent's, which made a dead agent look alive
// (and a live one dead). A leader renews every retryPeriod (2 s by default),
// so a live one shows within a couple of seconds.
func leaderAlive(ctx context.Context, client kubernetes.Interface, ns, name string, duration, poll time.Duration) (string, error) {
	get := func() (*coordinationv1.Lease, error) {
		l, err := client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the agent's leader Lease %s/%s: %w", ns, name, err)
		}
		return l, nil
	}
	first, err := get()
	if err != nil || first == nil || first.Spec.HolderIdentity == nil || *first.Spec.HolderIdentity == "" {
		return "", err
	}
	if first.Spec.LeaseDurationSeconds != nil {
		duration = time.Duration(*first.Spec.LeaseDurationSeconds) * time.Second
	}
	poll = max(poll, 10*time.Millisecond)
	var holder string
	err = wait.PollUntilContextTimeout(ctx, poll, duration, false, func(context.Context) (bool, error) {
		l, err := get()
		if err != nil || l == nil {
			return l == nil && err == nil, err
		}
		if l.ResourceVersion != first.ResourceVersion && l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
			return true, nil
		}
		return false, nil
	})
	if err != nil && !wait.Interrupted(err) {
		return "", err
	}
	return holder, nil
}

// getNode gets a Node or says it does not exist.
func (s *session) getNode(ctx context.Context, name string) (*corev1.Node, error) {
	n, err := s.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, usageError("node %q not found", name)
	}
	return n, err
}

// openNode opens a session and reads the named node.
func openNode(ctx context.Context, k *kubeFlags, name string) (*session, *corev1.Node, error) {
	sess, err := openSession(ctx, k)
	if err != nil {
		return nil, nil, err
	}
	n, err := sess.getNode(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	return sess, n, nil
}

// openView opens a session with the cluster view (and the inventory that
// needs it) started.
func openView(ctx context.Context, k *kubeFlags) (*session, error) {
	sess, err := openSession(ctx, k)
	if err != nil {
		return nil, err
	}
	if err := sess.startView(ctx); err != nil {
		return nil, err
	}
	return sess, nil
}
