// Package inventory maps nodes to their BMCs for the agent and the CLI: the
// config file's entries (and, when enabled, bmcfence.dev/bmc-* annotations on
// Nodes), credentials from Secrets and CA bundles from ConfigMaps in the
// agent's namespace, and, with inventory.source metal3 or both, Metal3
// BareMetalHosts with their credentials Secrets (docs/metal3.md). It builds one BMC adapter per node, wraps it with
// metrics and an identity check (Node systemUUID vs the BMC's system UUID),
// and rebuilds it when its settings or credentials change.
package inventory

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/dial"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory/metal3"
	"github.com/bmcfence/bmcfence/internal/kube"
	"github.com/bmcfence/bmcfence/pdu"
)

// NodeSource gives the cached Node objects (systemUUID, annotations).
type NodeSource interface {
	NodeObject(name string) (*corev1.Node, bool)
}

// Observer records BMC operations, by protocol and by the BMC's vendor
// (bmc.Vendor: a closed list; "unknown" until the BMC's identity was read).
type Observer interface {
	BMC(protocol bmc.Protocol, vendor string, op bmc.Op, d time.Duration, err error)
}

// CipherObserver, when the Observer implements it too, counts BMCs whose
// IPMI sessions fell back to the entry's cipherSuiteFallback: once per BMC
// and change of suite.
type CipherObserver interface {
	CipherSuiteFallback(suite int)
}

// ErrIdentity is wrapped when a BMC's system is not the node it is listed
// for: fencing through it could power off the wrong machine.
var ErrIdentity = errors.New("BMC identity does not match the node")

// ErrUnverified is wrapped when a BMC's identity cannot be checked: the Node
// reports no systemUUID and the entry gives no expectedUUID, or the BMC
// reports no UUID. Such a node is not fenceable unless its entry sets
// allowUnverifiedIdentity (invariant 11).
var ErrUnverified = errors.New("BMC identity cannot be checked")

// Options configure an Inventory.
type Options struct {
	Config    config.Inventory
	Namespace string
	Timeout   time.Duration
	Client    kube.Interface
	Nodes     NodeSource
	Observer  Observer
	Log       *zap.Logger
	// NewController builds a BMC controller for a target; default
	// dial.New. Tests inject fakes.
	NewController func(bmc.Target) (bmc.Controller, error)
	// Dynamic reads BareMetalHosts, Metal3Machines and Machines and
	// annotates BareMetalHosts; needed with inventory.source metal3 or both.
	Dynamic dynamic.Interface
	// HostEvent, when set, records a Warning Event on a BareMetalHost the
	// inventory cannot use (once per problem and process). The agent sets
	// it; the CLI, which only reads, does not.
	HostEvent func(host *corev1.ObjectReference, reason, message string)
	// Policy is the agent's policy: each node's merged policy (it, with the
	// entry's or inventory.defaults' settle windows) is validated whenever
	// an entry is built; a node whose merged policy is invalid is
	// unfenceable, and Problems says why. Zero: fence.DefaultPolicy().
	Policy fence.Policy
	// SecretMaxAge, when positive, keeps a credentials Secret read by a
	// Refresh for between half of it and all of it (spread by the
	// Secret's name) before reading it again: a thousand nodes with a
	// Secret each then cost a steady trickle of GETs, not a thousand at
	// every Refresh. Zero reads every Secret on every Refresh.
	SecretMaxAge time.Duration
}

// Inventory resolves nodes to BMC controllers. Controller is a cache lookup
// (the runner asks on every step); Refresh does the I/O.
type Inventory struct {
	opts Options

	mu       sync.RWMutex
	nodes    map[string]*Controller
	problems map[string]error
	// proofs are the recorded outlet identity proofs by node (levels.go).
	proofs map[string][]pdu.OutletProof

	// metal3 is the last BareMetalHost listing that succeeded, kept when a
	// listing fails so an API blip does not drop every node's BMC; and the
	// per-host problems last logged, so each is logged once per change.
	metal3         *metal3Listing
	metal3Reported map[string]string
	metal3Insecure map[string]bool
	// m3src is the hosts' cluster (built on first use); watch its
	// informers (WatchMetal3), nil while Refresh lists the hosts itself;
	// kick asks Run for a refresh when they see a change.
	m3src *metal3Source
	watch *metal3Watch
	kick  chan struct{}

	// cached Secrets and when they were read (Options.SecretMaxAge):
	// Refresh fills them, a BMC's rejection drops one (forgetSecret);
	// under cacheMu.
	cacheMu sync.Mutex
	cached  map[string]cachedSecret
}

type cachedSecret struct {
	obj  *corev1.Secret
	read time.Time
}

// freshSecrets returns the cached Secrets still within their age.
func (i *Inventory) freshSecrets(now time.Time) map[string]*corev1.Secret {
	out := map[string]*corev1.Secret{}
	if i.opts.SecretMaxAge <= 0 {
		return out
	}
	i.cacheMu.Lock()
	defer i.cacheMu.Unlock()
	for name, c := range i.cached {
		if now.Sub(c.read) < secretAge(name, i.opts.SecretMaxAge) {
			out[name] = c.obj
		}
	}
	return out
}

// secretAge spreads the Secrets' ages over [max/2, max) by name.
func secretAge(name string, maxAge time.Duration) time.Duration {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	half := maxAge / 2
	return half + time.Duration(uint64(h.Sum32())%uint64(half+1))
}

// remember caches the Secrets this Refresh read.
func (i *Inventory) remember(secrets, fresh map[string]*corev1.Secret, now time.Time) {
	if i.opts.SecretMaxAge <= 0 {
		return
	}
	i.cacheMu.Lock()
	defer i.cacheMu.Unlock()
	if i.cached == nil {
		i.cached = map[string]cachedSecret{}
	}
	for name, obj := range secrets {
		if _, old := fresh[name]; !old {
			i.cached[name] = cachedSecret{obj: obj, read: now}
		}
	}
}

// rereadAfterRejection is how old a cached Secret must be for a BMC's
// rejection to drop it: a rotated password is read at the first rejection
// after it (the copy is usually older), and a BMC that keeps rejecting
// (wrong password, or a 403 for a role that lacks a privilege, which reads
// the same) costs one read of its Secret in this time, no more than the
// periodic re-reads of a 5-minute SecretMaxAge did.
const rereadAfterRejection = 5 * time.Minute

// forgetSecret drops a cached Secret older than rereadAfterRejection: the
// next Refresh reads it again. A BMC that rejects the credentials calls it
// (Controller.refused).
func (i *Inventory) forgetSecret(key string) {
	i.cacheMu.Lock()
	defer i.cacheMu.Unlock()
	if c, ok := i.cached[key]; ok && time.Since(c.read) >= rereadAfterRejection {
		delete(i.cached, key)
	}
}

var _ runner.Inventory = (*Inventory)(nil)

// New returns an empty inventory; call Refresh (or Run) to fill it.
func New(opts Options) *Inventory {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.NewController == nil {
		opts.NewController = func(t bmc.Target) (bmc.Controller, error) { return dial.New(t) }
	}
	return &Inventory{opts: opts, nodes: map[string]*Controller{}, problems: map[string]error{}, metal3Reported: map[string]string{}, kick: make(chan struct{}, 1)}
}

// Controller implements runner.Inventory.
func (i *Inventory) Controller(node string) (runner.PowerController, bool) {
	c, err := i.Lookup(node)
	if err != nil {
		return nil, false
	}
	return c, true
}

// Lookup returns the node's controller, or why there is none.
func (i *Inventory) Lookup(node string) (*Controller, error) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	if c, ok := i.nodes[node]; ok {
		return c, nil
	}
	if err, ok := i.problems[node]; ok {
		return nil, err
	}
	return nil, fmt.Errorf("node %s has no BMC entry in the inventory", node)
}

// Problems returns, for each listed node without a usable BMC entry, why.
func (i *Inventory) Problems() map[string]error {
	i.mu.RLock()
	defer i.mu.RUnlock()
	out := make(map[string]error, len(i.problems))
	for k, v := range i.problems {
		out[k] = v
	}
	return out
}

// Names lists the nodes with a usable entry, sorted.
func (i *Inventory) Names() []string {
	i.mu.RLock()
	defer i.mu.RUnlock()
	names := make([]string, 0, len(i.nodes))
	for n := range i.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Run refreshes the inventory every interval until ctx ends, and soon
// after the BareMetalHost informers (WatchMetal3) see a change.
func (i *Inventory) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		i.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-i.kick:
			delay := time.NewTimer(kickDelay)
			select {
			case <-ctx.Done():
				delay.Stop()
				return
			case <-delay.C:
			}
			select {
			case <-i.kick:
			default:
			}
		}
	}
}

// Refresh re-reads every entry's Secret and ConfigMap and rebuilds the
// controllers whose settings changed. A node whose entry cannot be resolved
// (missing Secret, bad annotation) has no controller, and Problems says why:
// it is reported unfenceable rather than fenced with a guess.
func (i *Inventory) Refresh(ctx context.Context) {
	entries, problems := i.entries(ctx)
	now := time.Now()
	fresh := i.freshSecrets(now)
	secrets := maps.Clone(fresh)
	defer func() { i.remember(secrets, fresh, now) }()
	cas := map[string][]byte{}
	nodes := map[string]*Controller{}
	resolved := map[string]bmc.Target{}
	secretKeys := map[string]string{}
	for name, e := range entries {
		if err := i.policyError(e); err != nil {
			problems[name] = err
			continue
		}
		t, key, err := i.resolve(ctx, e, secrets, cas)
		if err != nil {
			problems[name] = fmt.Errorf("node %s: %w", name, err)
			continue
		}
		resolved[name] = t
		secretKeys[name] = key
	}
	// Two nodes on one BMC: both refused, each naming the other.
	names, targets := make([]string, 0, len(resolved)), make([]bmc.Target, 0, len(resolved))
	for name, t := range resolved {
		names, targets = append(names, name), append(targets, t)
	}
	for name, err := range config.DuplicateTargets(names, targets) {
		problems[name] = fmt.Errorf("node %s: %w", name, err)
		delete(resolved, name)
	}
	shared := i.sharedOutlets(entries, resolved)
	proofs, perr := i.readOutletProofs(ctx, entries)
	if perr != nil {
		i.opts.Log.Warn("outlet identity proofs unreadable; outlets count only with allowUnverifiedOutlet until they are", zap.Error(perr))
	}
	for name, t := range resolved {
		e := entries[name]
		key := targetKey(t, e)
		levels, levelsKey, lerr := i.resolveLevels(ctx, e, secrets)
		if serr := shared[name]; serr != nil {
			levels, levelsKey, lerr = nil, "", serr
		}
		if lerr != nil {
			// The BMC level still fences; the levels below it wait
			// until their entry is fixed.
			i.opts.Log.Warn("fencing levels unusable; the node is fenced through its BMC only", zap.String("node", name), zap.Error(lerr))
		}
		key += levelsKey
		i.mu.RLock()
		old := i.nodes[name]
		i.mu.RUnlock()
		if old != nil && old.key == key && old.secretKey == secretKeys[name] {
			nodes[name] = old
			continue
		}
		ctrl, err := i.opts.NewController(t)
		if err != nil {
			problems[name] = fmt.Errorf("node %s: %w", name, err)
			continue
		}
		c := &Controller{
			Node: name, Target: t, key: key, ctrl: ctrl,
			expectedUUID: e.ExpectedUUID, allowUnverified: e.AllowUnverifiedIdentity,
			settings: e.Resolved(i.opts.Config.Defaults),
			nodes:    i.opts.Nodes, obs: i.opts.Observer, log: i.opts.Log,
			levels:    levels,
			secretKey: secretKeys[name], refused: i.forgetSecret,
		}
		if e.host != nil {
			c.Source = "BareMetalHost " + e.host.Key() + " (" + e.via + ")"
			if e.src != nil && e.src.remote {
				c.Source = "BareMetalHost " + e.host.Key() + " in " + e.src.where + " (" + e.via + ")"
			}
			var dyn dynamic.Interface
			if e.src != nil {
				dyn = e.src.dynamic
			}
			c.hold = &metal3Hold{client: dyn, host: *e.host}
		}
		nodes[name] = c
	}
	i.mu.Lock()
	i.nodes, i.problems = nodes, problems
	if perr == nil {
		i.proofs = proofs
	}
	i.mu.Unlock()
	for name, err := range problems {
		i.opts.Log.Warn("inventory entry unusable; the node cannot be fenced", zap.String("node", name), zap.Error(err))
	}
}

// policyError validates the node's merged policy (issue 17, defect 7): the
// runner fences it under the agent's policy with the entry's settle
// windows, or inventory.defaults' where the entry sets none. The file's
// entries were checked at load; this holds for every source, whenever it
// changes (a BareMetalHost appears, an annotation is written).
func (i *Inventory) policyError(e entry) error {
	base := i.opts.Policy
	if base == (fence.Policy{}) {
		base = fence.DefaultPolicy()
	}
	subject, field := "node "+e.Name, ""
	switch {
	case e.host != nil:
		subject += " (BareMetalHost " + e.host.Key() + ")"
	case e.annotated:
		subject += " (annotations)"
	case e.fileIndex >= 0:
		field = "inventory.nodes[" + strconv.Itoa(e.fileIndex) + "]"
		subject = field + " (" + e.Name + ")"
	}
	return config.NodePolicyError(base, i.opts.Config.Defaults, subject, field, e.BMCSettings)
}

// entry is one node's inventory entry and where it came from.
type entry struct {
	config.NodeBMC
	// secretNamespace holds the credentials Secret: the agent's namespace
	// for the file's entries, the host's for a BareMetalHost's.
	secretNamespace string
	// host is the BareMetalHost the entry comes from (nil: the file or an
	// annotation), via how it was tied to the node.
	host *metal3.Host
	via  string
	// src is the host's cluster: its credentials Secret is read there.
	src *metal3Source
	// annotated: the entry comes from the node's bmcfence.dev/bmc-*
	// annotations.
	annotated bool
	// fileIndex is the entry's index in the file's inventory.nodes (-1:
	// not from the file), for the messages that name it.
	fileIndex int
}

// entries merges the sources: BareMetalHosts (source metal3 or both), then
// annotated nodes (when enabled), then the config file's nodes. The file
// wins: it is the operator's. Problems are nodes a source names but cannot
// give a usable entry for.
func (i *Inventory) entries(ctx context.Context) (map[string]entry, map[string]error) {
	out := map[string]entry{}
	problems := map[string]error{}
	if i.opts.Config.UsesMetal3() {
		out, problems = i.metal3Entries(ctx)
	}
	if !i.opts.Config.UsesConfigMap() {
		return out, problems
	}
	set := func(e config.NodeBMC, annotated bool, fileIndex int) {
		out[e.Name] = entry{NodeBMC: e, secretNamespace: i.opts.Namespace, annotated: annotated, fileIndex: fileIndex}
		delete(problems, e.Name)
	}
	if i.opts.Config.FromAnnotations {
		for _, n := range i.nodeObjects() {
			if e, ok := fromAnnotations(n); ok {
				set(e, true, -1)
			}
		}
	}
	for j, e := range i.opts.Config.Nodes {
		set(e, false, j)
	}
	return out, problems
}

// nodeObjects lists the cached Nodes (none when the node source cannot
// list).
func (i *Inventory) nodeObjects() []*corev1.Node {
	var out []*corev1.Node
	if i.opts.Nodes == nil {
		return nil
	}
	if lister, ok := i.opts.Nodes.(interface{ Nodes() []runner.NodeInfo }); ok {
		for _, info := range lister.Nodes() {
			if n, ok := i.opts.Nodes.NodeObject(info.Name); ok {
				out = append(out, n)
			}
		}
	}
	return out
}

// fromAnnotations reads a node's bmcfence.dev/bmc-* annotations.
func fromAnnotations(n *corev1.Node) (config.NodeBMC, bool) {
	a := n.Annotations
	addr := a[cluster.AnnotationBMCAddress]
	if addr == "" {
		return config.NodeBMC{}, false
	}
	e := config.NodeBMC{Name: n.Name, Address: addr, System: a[cluster.AnnotationBMCSystem], ExpectedUUID: a[cluster.AnnotationBMCExpectedUUID]}
	e.CredentialsSecret = a[cluster.AnnotationBMCCredentials]
	e.CAConfigMap = a[cluster.AnnotationBMCCA]
	e.InsecureSkipVerify, _ = strconv.ParseBool(a[cluster.AnnotationBMCInsecureSkipVerify])
	return e, true
}

// resolve completes a target with its credentials and CA bundle, and names
// its credentials Secret's place in the cache (forgetSecret).
func (i *Inventory) resolve(ctx context.Context, e entry, secrets map[string]*corev1.Secret, cas map[string][]byte) (bmc.Target, string, error) {
	t, err := e.Target(i.opts.Config.Defaults)
	if err != nil {
		return t, "", err
	}
	t.Timeout = i.opts.Timeout
	s := e.Resolved(i.opts.Config.Defaults)
	ns := e.secretNamespace
	client, cacheKey, where := i.opts.Client, ns+"/"+s.CredentialsSecret, ""
	if e.src != nil && e.src.remote {
		// The management cluster's Secret, cached apart from a namesake
		// of the agent's own cluster.
		client, cacheKey, where = e.src.core, "management:"+cacheKey, " in "+e.src.where
	}
	sec, ok := secrets[cacheKey]
	if !ok {
		sec, err = client.CoreV1().Secrets(ns).Get(ctx, s.CredentialsSecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return t, "", fmt.Errorf("credentials Secret %s/%s%s not found (keys: username, password)", ns, s.CredentialsSecret, where)
		}
		if err != nil {
			return t, "", fmt.Errorf("reading credentials Secret %s/%s%s: %w", ns, s.CredentialsSecret, where, err)
		}
		secrets[cacheKey] = sec
	}
	user, pass := strings.TrimSpace(string(sec.Data["username"])), strings.TrimRight(string(sec.Data["password"]), "\r\n")
	if user == "" || pass == "" {
		return t, "", fmt.Errorf("credentials Secret %s/%s%s needs non-empty keys username and password", ns, s.CredentialsSecret, where)
	}
	t.Credentials = bmc.Credentials{Username: user, Password: bmc.Secret(pass)}
	if s.CAConfigMap != "" && t.Address.Scheme == "https" {
		pem, ok := cas[s.CAConfigMap]
		if !ok {
			cm, err := i.opts.Client.CoreV1().ConfigMaps(i.opts.Namespace).Get(ctx, s.CAConfigMap, metav1.GetOptions{})
			if err != nil {
				return t, "", fmt.Errorf("reading CA ConfigMap %s/%s: %w", i.opts.Namespace, s.CAConfigMap, err)
			}
			pem = []byte(cm.Data["ca.crt"])
			if len(pem) == 0 {
				return t, "", fmt.Errorf("CA ConfigMap %s/%s has no key ca.crt", i.opts.Namespace, s.CAConfigMap)
			}
			cas[s.CAConfigMap] = pem
		}
		t.CACertificates = pem
	}
	return t.WithDefaults(), cacheKey, t.WithDefaults().Validate()
}

// targetKey identifies an entry's settings, password included (hashed), so
// a rotated Secret or a changed setting rebuilds the controller.
func targetKey(t bmc.Target, e entry) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%s|%s|%s|%v|%s|%d|%d|%s|%s|%s|%v|%s|%s|", t.Address, t.System, t.Credentials.Username, t.Auth, t.InsecureSkipVerify, t.Timeout, t.IPMICipherSuite,
		t.IPMICipherSuiteFallback, t.ChassisPower, t.Credentials.Password.Reveal(), e.ExpectedUUID, e.AllowUnverifiedIdentity, e.SettleWindow, e.UnassistedSettleWindow)
	if e.host != nil {
		// Another host (or the same one re-created) is another entry.
		fmt.Fprintf(h, "%s|%s|%s|", e.host.Key(), e.host.UID, e.via)
	}
	h.Write(t.CACertificates)
	return fmt.Sprintf("%x", h.Sum(nil))
}

// Controller is one node's BMC, with metrics and the identity check.
type Controller struct {
	Node   string
	Target bmc.Target
	// Source names where the entry came from when it is not the config
	// file ("BareMetalHost metal3/bmh-1 (providerID ...)").
	Source string
	// hold coordinates power with the host's other manager (the
	// baremetal-operator) before our power commands; nil for the file's
	// entries.
	hold powerHold

	key             string
	ctrl            bmc.Controller
	expectedUUID    string
	allowUnverified bool
	settings        config.BMCSettings
	nodes           NodeSource
	obs             Observer
	log             *zap.Logger

	// suite is the IPMI cipher suite the BMC's last session used (0 until
	// one did): a change is logged, and counted when it is the fallback.
	suiteMu sync.Mutex
	suite   int
	// vendor is bmc.Vendor of the Manufacturer the BMC's last identity
	// reported (nil: none read yet).
	vendor atomic.Pointer[string]

	// levels are the node's fencing levels below its BMC (levels.go).
	levels []runner.PowerController

	// secretKey names the credentials Secret in the inventory's cache;
	// refused, called with it when the BMC rejects the credentials, has
	// the next Refresh read that Secret again (forgetSecret).
	secretKey string
	refused   func(secretKey string)
}

var (
	_ bmc.Controller         = (*Controller)(nil)
	_ runner.PowerController = (*Controller)(nil)
)

// Key identifies the BMC target (bmc.Target.Key): the runner verifies the
// identity of every new one.
func (c *Controller) Key() string { return c.Target.Key() }

// Policy gives the entry's settle windows in place of the policy's, where
// the entry sets them.
func (c *Controller) Policy(p fence.Policy) fence.Policy { return c.settings.Policy(p) }

// observe records an operation and returns its error with the password
// removed from its text: whatever the adapter or the BMC put in it, no
// credential leaves the inventory (invariant 10).
func (c *Controller) observe(op bmc.Op, start time.Time, err error) error {
	err = bmc.RedactCredentialsError(err, c.Target.Credentials)
	if c.refused != nil && errors.Is(err, bmc.ErrAuth) {
		c.refused(c.secretKey)
	}
	if c.obs != nil {
		c.obs.BMC(c.Target.Address.Protocol, c.Vendor(), op, time.Since(start), err)
	}
	return err
}

// noteSuite logs, once per change, the IPMI cipher suite the BMC's
// session used when it is not the entry's cipherSuite (the BMC refused
// that one, and cipherSuiteFallback was tried), and when it is back to it.
// A fallback the operator allowed is still a weaker suite than asked for,
// and invisible in every reading.
func (c *Controller) noteSuite(used int) {
	if used == 0 {
		return // Redfish, or no session was opened
	}
	c.suiteMu.Lock()
	prev := c.suite
	c.suite = used
	c.suiteMu.Unlock()
	if used == prev {
		return
	}
	asked := c.Target.IPMICipherSuite
	log := c.log
	if log == nil {
		log = zap.NewNop()
	}
	fields := []zap.Field{zap.String("node", c.Node), zap.String("bmc", c.Target.Address.String()), zap.Int("cipherSuite", asked), zap.Int("suiteUsed", used)}
	switch {
	case used != asked:
		log.Warn(fmt.Sprintf("IPMI cipher suite fallback: the BMC refused cipher suite %d (or answered it with weaker algorithms); its sessions use suite %d, the entry's cipherSuiteFallback", asked, used), fields...)
		if co, ok := c.obs.(CipherObserver); ok {
			co.CipherSuiteFallback(used)
		}
	case prev != 0:
		log.Info(fmt.Sprintf("IPMI cipher suite: the BMC takes cipher suite %d again", asked), fields...)
	}
}

func (c *Controller) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	start := time.Now()
	st, err := c.ctrl.PowerStatus(ctx)
	c.noteSuite(st.CipherSuite)
	return st, c.observe(bmc.OpPowerStatus, start, err)
}

func (c *Controller) PowerOff(ctx context.Context) (bmc.Result, error) {
	if c.hold != nil {
		// Before the ForceOff: once it lands, the host's manager must keep
		// it off too, or it powers it back on under a fence in progress.
		if err := c.hold.Hold(ctx); err != nil {
			return bmc.Result{}, fmt.Errorf("no ForceOff sent: %w", err)
		}
	}
	start := time.Now()
	r, err := c.ctrl.PowerOff(ctx)
	c.noteSuite(r.CipherSuite)
	return r, c.observe(bmc.OpPowerOff, start, err)
}

func (c *Controller) PowerOn(ctx context.Context) (bmc.Result, error) {
	if c.hold != nil {
		// Before the power-on: our hold released, and no one else's or
		// the host's own spec.online holding it off, or the power-on
		// would be undone at once.
		if err := c.hold.Release(ctx); err != nil {
			return bmc.Result{}, fmt.Errorf("no power-on sent: %w", err)
		}
	}
	start := time.Now()
	r, err := c.ctrl.PowerOn(ctx)
	c.noteSuite(r.CipherSuite)
	return r, c.observe(bmc.OpPowerOn, start, err)
}

func (c *Controller) Identity(ctx context.Context) (bmc.Identity, error) {
	start := time.Now()
	id, err := c.ctrl.Identity(ctx)
	c.noteSuite(id.CipherSuite)
	if err == nil && id.Manufacturer != "" {
		v := bmc.Vendor(id.Manufacturer)
		c.vendor.Store(&v)
	}
	return id, c.observe(bmc.OpIdentity, start, err)
}

// Vendor is the BMC's vendor for metrics (bmc.Vendor), learnt from its
// identity; bmc.VendorUnknown before one was read.
func (c *Controller) Vendor() string {
	if v := c.vendor.Load(); v != nil {
		return *v
	}
	return bmc.VendorUnknown
}

// AllowUnverified reports whether the entry lets the node be fenced without
// a checked identity (allowUnverifiedIdentity).
func (c *Controller) AllowUnverified() bool { return c.allowUnverified }

// nodeUUID is the Node's status.nodeInfo.systemUUID ("" if none).
func (c *Controller) nodeUUID() string {
	if c.nodes != nil {
		if n, ok := c.nodes.NodeObject(c.Node); ok {
			return strings.TrimSpace(n.Status.NodeInfo.SystemUUID)
		}
	}
	return ""
}

// ExpectedUUID is what the BMC's system UUID must be: the inventory's
// expectedUUID, else the Node's status.nodeInfo.systemUUID ("" if neither).
func (c *Controller) ExpectedUUID() (uuid, source string) {
	if c.expectedUUID != "" {
		return c.expectedUUID, "inventory expectedUUID"
	}
	if c.nodes != nil {
		if n, ok := c.nodes.NodeObject(c.Node); ok && n.Status.NodeInfo.SystemUUID != "" {
			return n.Status.NodeInfo.SystemUUID, "Node status.nodeInfo.systemUUID"
		}
	}
	return "", ""
}

// Verify checks that the BMC's system is the node's machine (invariant 3):
// its UUID (Redfish system UUID, IPMI system GUID) against the entry's
// expectedUUID or the Node's systemUUID. It fails when the two differ, and
// when there is nothing to compare (no UUID on either side) unless the
// entry sets allowUnverifiedIdentity.
func (c *Controller) Verify(ctx context.Context) error {
	want, source := c.ExpectedUUID()
	if want == "" {
		if c.allowUnverified {
			return nil
		}
		return fmt.Errorf("%w: the Node reports no status.nodeInfo.systemUUID and the entry has no expectedUUID: set expectedUUID (kubectl fence check shows the BMC's), or allowUnverifiedIdentity if you vouch for the entry", ErrUnverified)
	}
	id, err := c.Identity(ctx)
	if err != nil {
		if errors.Is(err, bmc.ErrUnsupported) && c.allowUnverified {
			return nil
		}
		if errors.Is(err, bmc.ErrUnsupported) {
			return fmt.Errorf("%w: %v (set allowUnverifiedIdentity if you vouch for the entry)", ErrUnverified, err)
		}
		return err
	}
	got := strings.TrimSpace(id.UUID)
	if node := c.nodeUUID(); c.expectedUUID != "" && node != "" && !strings.EqualFold(node, strings.TrimSpace(c.expectedUUID)) && !bmc.SMBIOSSwapped(node, c.expectedUUID) {
		// The expectedUUID is there for firmware that prints the Node's
		// UUID byte-swapped; one that is neither is stale (the node was
		// re-created on another machine, or the entry was copied).
		return fmt.Errorf("%w: the entry's expectedUUID %q is neither the Node's systemUUID %q nor its SMBIOS byte-swap: the entry is stale or belongs to another machine", ErrIdentity, c.expectedUUID, node)
	}
	switch {
	case got == "" && c.allowUnverified:
		return nil
	case got == "":
		return fmt.Errorf("%w: the BMC reports no system UUID (set allowUnverifiedIdentity if you vouch for the entry)", ErrUnverified)
	case !strings.EqualFold(got, strings.TrimSpace(want)):
		return fmt.Errorf("%w: the BMC's system UUID is %q, but the %s is %q: the inventory may point at another machine", ErrIdentity, id.UUID, source, want)
	}
	return nil
}

// Probe checks the node can be fenced: credentials, TLS, reachability and
// identity, in one identity request (the agent verifies before every
// ForceOff and taint with the same check).
func (c *Controller) Probe(ctx context.Context) error {
	if want, _ := c.ExpectedUUID(); want == "" && c.allowUnverified {
		_, err := c.PowerStatus(ctx) // nothing to compare: prove it answers
		return err
	}
	return c.Verify(ctx)
}

var _ runner.EvidenceReader = (*Controller)(nil)

// ReadEvidence reads the BMC's hung-node evidence (runner.EvidenceReader),
// where the entry's protocol can. The report names the system it came
// from, read in the same operation: evidence from another system than the
// one the entry is verified against is refused (ErrIdentity).
func (c *Controller) ReadEvidence(ctx context.Context) (bmc.EvidenceReport, error) {
	r, ok := c.ctrl.(bmc.EvidenceReader)
	if !ok {
		return bmc.EvidenceReport{}, c.unsupported(bmc.OpReadEvidence, "no evidence reader for this BMC")
	}
	start := time.Now()
	rep, err := r.ReadEvidence(ctx)
	c.noteSuite(rep.CipherSuite)
	if err == nil {
		want, source := c.ExpectedUUID()
		got := strings.TrimSpace(rep.Identity.UUID)
		if want != "" && got != "" && !strings.EqualFold(got, strings.TrimSpace(want)) && !bmc.SMBIOSSwapped(got, want) {
			err = fmt.Errorf("%w: the evidence came from system %q, but the %s is %q", ErrIdentity, got, source, want)
		}
	}
	return rep, c.observe(bmc.OpReadEvidence, start, err)
}

// unsupported is the error of an operation the entry's protocol cannot
// do: nothing was sent.
func (c *Controller) unsupported(op bmc.Op, what string) error {
	return &bmc.OpError{Op: op, Protocol: c.Target.Address.Protocol,
		Address: c.Target.Address.String(), Err: fmt.Errorf("%w: %s", bmc.ErrUnsupported, what)}
}

var _ runner.Diagnoser = (*Controller)(nil)

// Diagnostic sends the host a diagnostic interrupt (an NMI for a crash
// dump: runner.Diagnoser), where the entry's protocol can; otherwise an
// error wrapping bmc.ErrUnsupported, and nothing is sent. The runner checks
// the identity right before, as for a ForceOff. No hold of the host's
// manager is taken: the power state does not change.
func (c *Controller) Diagnostic(ctx context.Context) (bmc.Result, error) {
	d, ok := c.ctrl.(bmc.Diagnoser)
	if !ok {
		return bmc.Result{}, c.unsupported(bmc.OpDiagnostic, "no diagnostic interrupt for this BMC")
	}
	start := time.Now()
	r, err := d.Diagnostic(ctx)
	c.noteSuite(r.CipherSuite)
	return r, c.observe(bmc.OpDiagnostic, start, err)
}
