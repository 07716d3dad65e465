//go:build !bmcfast

package main

import (
	"context"
	"fmt"
	"os"
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
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory"
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
// flags, with a default request timeout and kubectl's own rate limits.
func (k *kubeFlags) restConfig() (*rest.Config, error) {
	rc, err := k.cf.ToRESTConfig()
	if err != nil {
		return nil, usageError("kubeconfig: %v", err)
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
	kc := k.cf.ToRawKubeConfigLoader()
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
	cfg, err := agentConfig(ctx, client, k)
	if err != nil {
		return nil, err
	}
	// inv and view come with startView: the inventory needs the view's
	// Nodes to resolve annotations and identities.
	return &session{client: client, fencing: fencing, dynamic: dyn, cfg: cfg, user: whoAmI(ctx, client, kc)}, nil
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

// whoAmI names the human for requests and attestations: the API server's
// answer (SelfSubjectReview, GA in 1.28), else the kubeconfig's user.
func whoAmI(ctx context.Context, client kubernetes.Interface, kc clientcmd.ClientConfig) string {
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err == nil && r.Status.UserInfo.Username != "" {
		return r.Status.UserInfo.Username
	}
	if raw, err := kc.RawConfig(); err == nil {
		ctxName := raw.CurrentContext
		if c, ok := raw.Contexts[ctxName]; ok && c.AuthInfo != "" {
			return c.AuthInfo
		}
	}
	return "unknown"
}

// startView starts the same cluster view the agent uses.
func (s *session) startView(ctx context.Context) error {
	if s.view != nil {
		return nil
	}
	v, err := cluster.New(s.client, cluster.Options{Clock: clock.RealClock{}, Log: zap.NewNop(), Component: "kubectl-fence", SyncTimeout: time.Minute})
	if err != nil {
		return err
	}
	if err := v.Start(ctx); err != nil {
		return fmt.Errorf("reading the cluster: %w", err)
	}
	s.view = v
	s.inv = inventory.New(inventory.Options{
		Config: s.cfg.Inventory, Namespace: s.cfg.Namespace, Timeout: s.cfg.BMC.Timeout, Client: s.client, Dynamic: s.dynamic, Nodes: v,
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
