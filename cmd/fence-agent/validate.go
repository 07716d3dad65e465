package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/kube"
)

// validateTimeout bounds the whole cluster part of validate: a check-only
// command must never hang on an unreachable API server.
const validateTimeout = 15 * time.Second

// runValidate checks a configuration without starting anything: every
// error of the file, environment and flags, the risky settings, and, when a
// cluster is configured, that the Secrets and CA ConfigMaps the inventory
// names exist in the agent's namespace with the keys the agent reads.
func runValidate(ctx context.Context, fs *pflag.FlagSet, environ []string, stdout, stderr io.Writer) int {
	if path, _ := fs.GetString("config"); path == "" {
		fmt.Fprintln(stderr, "fence-agent validate: --config FILE is required")
		return exitUsage
	}
	path, _ := fs.GetString("config")
	cfg, err := config.Load(fs, environ)
	if err != nil {
		// What the agent would refuse to start on, with the agent's code.
		printErrors(stderr, "fence-agent validate: ", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "ok: %s: %d inventory nodes, policy and settings valid\n", path, len(cfg.Inventory.Nodes))
	for _, r := range cfg.Risks() {
		fmt.Fprintf(stdout, "warning: %s\n", r.Message)
	}
	client, rc, how, err := validateClient(cfg.Kubeconfig, environ)
	if client == nil {
		if err != nil {
			fmt.Fprintf(stderr, "fence-agent validate: %v\n", err)
			return exitProblems
		}
		fmt.Fprintf(stdout, "skipped: Secrets and CA ConfigMaps not checked (%s)\n", how)
		return exitOK
	}
	ctx, cancel := context.WithTimeout(ctx, validateTimeout)
	defer cancel()
	problems := checkReferences(ctx, client, cfg)
	if len(problems) == 1 && errors.Is(problems[0], errUnreachable) && cfg.Kubeconfig == "" {
		fmt.Fprintf(stdout, "skipped: Secrets and CA ConfigMaps not checked (%s: %v)\n", how, problems[0])
		return exitOK
	}
	for _, p := range problems {
		fmt.Fprintf(stderr, "fence-agent validate: %v\n", p)
	}
	if len(problems) == 0 {
		fmt.Fprintf(stdout, "ok: the inventory's Secrets and CA ConfigMaps in %s (%s)\n", cfg.Namespace, how)
	}
	if cfg.Inventory.UsesMetal3() && !checkBareMetalHosts(ctx, client, rc, cfg, stdout, stderr) {
		return exitProblems
	}
	if len(problems) > 0 {
		return exitProblems
	}
	return exitOK
}

var errUnreachable = errors.New("cluster unreachable")

// validateClient connects the way the agent would (--kubeconfig, else
// in-cluster), and also through $KUBECONFIG or ~/.kube/config, as kubectl
// would, so an operator can check before deploying. No client and no error
// means no cluster is configured.
func validateClient(kubeconfig string, environ []string) (kube.Interface, *rest.Config, string, error) {
	var rc *rest.Config
	var how string
	switch {
	case kubeconfig != "":
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, nil, "", fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		rc, how = c, "kubeconfig "+kubeconfig
	default:
		if c, err := rest.InClusterConfig(); err == nil {
			rc, how = c, "in-cluster"
			break
		}
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if v, ok := lookupEnv(environ, "KUBECONFIG"); ok {
			rules.Precedence = strings.Split(v, string(os.PathListSeparator))
		}
		c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
		if err != nil {
			return nil, nil, "no cluster configured: no --kubeconfig, not in a cluster, no usable $KUBECONFIG or ~/.kube/config", nil
		}
		rc, how = c, "your kubeconfig"
	}
	rc.Timeout = validateTimeout
	client, err := kube.NewForConfig(rc)
	if err != nil {
		return nil, nil, "", err
	}
	return client, rc, how, nil
}

func lookupEnv(environ []string, key string) (string, bool) {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key && v != "" {
			return v, true
		}
	}
	return "", false
}

// checkReferences reads every Secret and CA ConfigMap the inventory names.
func checkReferences(ctx context.Context, client kube.Interface, cfg config.Agent) []error {
	// name → the nodes that use it (or "inventory.defaults")
	secrets, configMaps := map[string][]string{}, map[string][]string{}
	inv := cfg.Inventory
	secretNames, configMapNames := inv.ReferencedNames()
	for _, n := range secretNames {
		secrets[n] = nil
	}
	for _, n := range configMapNames {
		configMaps[n] = nil
	}
	for _, n := range inv.Nodes {
		s := n.Resolved(inv.Defaults)
		if s.CredentialsSecret != "" {
			secrets[s.CredentialsSecret] = append(secrets[s.CredentialsSecret], n.Name)
		}
		if s.CAConfigMap != "" {
			configMaps[s.CAConfigMap] = append(configMaps[s.CAConfigMap], n.Name)
		}
	}
	for _, m := range []map[string][]string{secrets, configMaps} {
		for name, who := range m {
			if len(who) == 0 {
				m[name] = []string{"inventory.defaults"}
			}
		}
	}
	var problems []error
	ns := cfg.Namespace
	for _, name := range sortedKeys(secrets) {
		if inv.UsesMetal3() && name == inv.Metal3.KubeconfigSecret {
			continue // a kubeconfig, not credentials: checkBareMetalHosts reads it
		}
		who := strings.Join(secrets[name], ", ")
		sec, err := client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if p := apiProblem(err, "Secret", ns, name, who); p != nil {
				if errors.Is(p, errUnreachable) {
					return []error{p}
				}
				problems = append(problems, p)
			}
			continue
		}
		for _, key := range []string{"username", "password"} {
			if len(sec.Data[key]) == 0 {
				problems = append(problems, fmt.Errorf("Secret %s/%s (for %s): key %q is missing or empty", ns, name, who, key))
			}
		}
	}
	for _, name := range sortedKeys(configMaps) {
		who := strings.Join(configMaps[name], ", ")
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if p := apiProblem(err, "ConfigMap", ns, name, who); p != nil {
				if errors.Is(p, errUnreachable) {
					return []error{p}
				}
				problems = append(problems, p)
			}
			continue
		}
		pool := x509.NewCertPool()
		if pem := cm.Data["ca.crt"]; pem == "" || !pool.AppendCertsFromPEM([]byte(pem)) {
			problems = append(problems, fmt.Errorf("ConfigMap %s/%s (for %s): key \"ca.crt\" holds no PEM certificate", ns, name, who))
		}
	}
	return problems
}

func apiProblem(err error, kind, ns, name, who string) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s %s/%s (for %s): not found", kind, ns, name, who)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s %s/%s (for %s): your credentials may not read it (the agent's ServiceAccount may): %w", kind, ns, name, who, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s %s/%s: the cluster refused your credentials: %w", kind, ns, name, err)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return fmt.Errorf("%s %s/%s (for %s): %w", kind, ns, name, who, err)
	}
	return fmt.Errorf("%w: %v", errUnreachable, err)
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
