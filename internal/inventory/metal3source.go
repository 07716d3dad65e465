package inventory

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/kube"
)

// ErrManagementKubeconfig is wrapped when inventory.metal3.kubeconfigSecret
// cannot give a client of the cluster that holds the BareMetalHosts.
var ErrManagementKubeconfig = errors.New("inventory.metal3.kubeconfigSecret")

// metal3Source is the cluster the BareMetalHosts, their Metal3Machines,
// Machines and credentials Secrets are read from: the agent's own, or
// (inventory.metal3.kubeconfigSecret) a management cluster, read as the
// user of that kubeconfig.
type metal3Source struct {
	dynamic dynamic.Interface
	// core reads the hosts' credentials Secrets.
	core kube.Interface
	// remote: a management cluster (its Secrets are cached apart from the
	// agent's own, which may have the same namespace and name).
	remote bool
	// where names the cluster in messages.
	where string
}

// metal3Source returns the clients of the hosts' cluster, building them on
// first use (and again after a failure, so a kubeconfig Secret created
// after the agent started is picked up). A kubeconfig that changes takes
// effect when the agent restarts.
func (i *Inventory) metal3Source(ctx context.Context) (*metal3Source, error) {
	i.mu.RLock()
	s := i.m3src
	i.mu.RUnlock()
	if s != nil {
		return s, nil
	}
	name := i.opts.Config.Metal3.KubeconfigSecret
	if name == "" {
		if i.opts.Dynamic == nil {
			return nil, errors.New("inventory.source reads BareMetalHosts, but the inventory has no dynamic client")
		}
		s = &metal3Source{dynamic: i.opts.Dynamic, core: i.opts.Client, where: "this cluster"}
	} else {
		dyn, core, where, err := ManagementClients(ctx, i.opts.Client, i.opts.Namespace, name)
		if err != nil {
			return nil, err
		}
		s = &metal3Source{dynamic: dyn, core: core, remote: true, where: where}
	}
	i.mu.Lock()
	i.m3src = s
	i.mu.Unlock()
	return s, nil
}

// ManagementClients builds the clients of the cluster whose kubeconfig is
// in Secret namespace/name (key "kubeconfig"): where Cluster API keeps the
// BareMetalHosts. The kubeconfig must carry its credentials and CA inline
// (a token or a client certificate; `kubectl config view --minify
// --flatten` writes one): the agent's image has no files to point at and
// no programs for exec credential plugins. where names the cluster for
// messages (never its credentials).
func ManagementClients(ctx context.Context, client kube.Interface, namespace, name string) (dynamic.Interface, kube.Interface, string, error) {
	sec, err := client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, "", fmt.Errorf("%w: Secret %s/%s not found (create it: kubectl -n %s create secret generic %s --from-file=%s=./management.kubeconfig)",
			ErrManagementKubeconfig, namespace, name, namespace, name, config.KubeconfigKey)
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("%w: reading Secret %s/%s: %w", ErrManagementKubeconfig, namespace, name, err)
	}
	raw := sec.Data[config.KubeconfigKey]
	if len(raw) == 0 {
		return nil, nil, "", fmt.Errorf("%w: Secret %s/%s has no key %q (keys: %v)", ErrManagementKubeconfig, namespace, name, config.KubeconfigKey, keysOf(sec.Data))
	}
	kc, err := clientcmd.Load(raw)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%w: Secret %s/%s key %q is not a kubeconfig: %v", ErrManagementKubeconfig, namespace, name, config.KubeconfigKey, err)
	}
	ctxName := kc.CurrentContext
	kctx := kc.Contexts[ctxName]
	if kctx == nil {
		return nil, nil, "", fmt.Errorf("%w: Secret %s/%s: the kubeconfig's current-context %q names no context", ErrManagementKubeconfig, namespace, name, ctxName)
	}
	if u := kc.AuthInfos[kctx.AuthInfo]; u != nil && (u.Exec != nil || u.AuthProvider != nil) {
		return nil, nil, "", fmt.Errorf("%w: Secret %s/%s: the kubeconfig's user %q runs a credential plugin (exec or auth-provider), which the agent cannot run: use a ServiceAccount token or a client certificate (docs/metal3.md)",
			ErrManagementKubeconfig, namespace, name, kctx.AuthInfo)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*kc, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, nil, "", fmt.Errorf("%w: Secret %s/%s: %v (embed the certificates and token: kubectl config view --minify --flatten)", ErrManagementKubeconfig, namespace, name, err)
	}
	rc.UserAgent = "bmcfence"
	server, userinfo := serverOrigin(rc.Host)
	if userinfo {
		// client-go would authenticate with it; every log line, error and
		// validate report naming the cluster would then show it.
		return nil, nil, "", fmt.Errorf("%w: Secret %s/%s: the kubeconfig's server URL (%s) carries a user name or password: remove it from the URL and give the credentials as the user's token or client certificate",
			ErrManagementKubeconfig, namespace, name, server)
	}
	where := fmt.Sprintf("the management cluster %s (kubeconfig Secret %s/%s)", server, namespace, name)
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%w: %s: %v", ErrManagementKubeconfig, where, err)
	}
	core, err := kube.NewForConfig(rc)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%w: %s: %v", ErrManagementKubeconfig, where, err)
	}
	return dyn, core, where, nil
}

// serverOrigin is what may be said of an API server URL: scheme://host:port
// and nothing more (no user info, path or query), and whether the URL
// carries user info.
func serverOrigin(host string) (origin string, userinfo bool) {
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		// Not a URL client-go would take either; its host part only.
		h := host
		if i := strings.Index(h, "://"); i >= 0 {
			h = h[i+3:]
		}
		if i := strings.LastIndex(h, "@"); i >= 0 {
			h, userinfo = h[i+1:], true
		}
		if i := strings.IndexAny(h, "/?#"); i >= 0 {
			h = h[:i]
		}
		return h, userinfo
	}
	return u.Scheme + "://" + u.Host, u.User != nil
}

func keysOf(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
