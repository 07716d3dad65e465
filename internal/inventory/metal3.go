package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/internal/inventory/metal3"
)

// ErrPowerHeld is wrapped when bmcfence will not send a power command
// because the host's other manager holds its power: a power-on while the
// baremetal-operator keeps the host off (spec.online false, someone else's
// reboot annotation), or a ForceOff whose hold could not be written.
var ErrPowerHeld = errors.New("the host's power is held by its BareMetalHost")

// metal3Listing is one successful listing of the Metal3 objects.
type metal3Listing struct {
	objs metal3.Objects
	// hostErrs are the hosts that could not be read, by key.
	hostErrs map[string]error
}

// listMetal3 reads BareMetalHosts, Metal3Machines and Machines in the
// configured namespaces: from the informers when WatchMetal3 started them,
// else by listing. Only the hosts are required: without Cluster API (no
// Metal3Machine or Machine resource, or no grant to read them) nodes are
// matched by providerID alone.
func (i *Inventory) listMetal3(ctx context.Context) (*metal3Listing, *metal3Source, error) {
	src, err := i.metal3Source(ctx)
	if err != nil {
		return nil, nil, err
	}
	if l, err := i.watched(); err == nil {
		return l, src, nil
	}
	l := &metal3Listing{hostErrs: map[string]error{}}
	for _, ns := range i.opts.Config.Metal3.Namespaces {
		hosts, err := src.dynamic.Resource(metal3.BareMetalHosts).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("listing BareMetalHosts in %s (%s): %w", ns, src.where, err)
		}
		for k := range hosts.Items {
			h, err := metal3.HostFrom(&hosts.Items[k])
			if err != nil {
				l.hostErrs[h.Key()] = err
				continue
			}
			l.objs.Hosts = append(l.objs.Hosts, h)
		}
		m3ms, err := src.dynamic.Resource(metal3.Metal3Machines).Namespace(ns).List(ctx, metav1.ListOptions{})
		switch {
		case err == nil:
			for k := range m3ms.Items {
				l.objs.Metal3Machines = append(l.objs.Metal3Machines, metal3.Metal3MachineFrom(&m3ms.Items[k]))
			}
		case apierrors.IsNotFound(err):
			// No CAPM3 here: providerIDs only.
		default:
			i.opts.Log.Warn("cannot list Metal3Machines; matching nodes by providerID only", zap.String("namespace", ns), zap.Error(err))
		}
		machines, err := src.dynamic.Resource(metal3.Machines).Namespace(ns).List(ctx, metav1.ListOptions{})
		switch {
		case err == nil:
			for k := range machines.Items {
				l.objs.Machines = append(l.objs.Machines, metal3.MachineFrom(&machines.Items[k]))
			}
		case apierrors.IsNotFound(err):
		default:
			i.opts.Log.Warn("cannot list Machines; matching nodes by providerID only", zap.String("namespace", ns), zap.Error(err))
		}
	}
	return l, src, nil
}

// metal3Entries builds an entry for every node a BareMetalHost is tied to,
// and a problem for every node whose host cannot give one (ambiguous
// match, unsupported address, no credentials, a host the
// baremetal-operator is provisioning).
func (i *Inventory) metal3Entries(ctx context.Context) (map[string]entry, map[string]error) {
	l, src, err := i.listMetal3(ctx)
	if err != nil {
		i.mu.RLock()
		last, lastSrc := i.metal3, i.m3src
		i.mu.RUnlock()
		if last == nil || lastSrc == nil {
			i.opts.Log.Warn("cannot read BareMetalHosts; no node has a BareMetalHost entry yet", zap.Error(err))
			return map[string]entry{}, map[string]error{}
		}
		i.opts.Log.Warn("cannot read BareMetalHosts; keeping the last listing", zap.Error(err))
		l, src = last, lastSrc
	} else {
		i.mu.Lock()
		i.metal3 = l
		i.mu.Unlock()
	}
	var nodes []metal3.Node
	for _, n := range i.nodeObjects() {
		nodes = append(nodes, metal3.Node{Name: n.Name, ProviderID: n.Spec.ProviderID})
	}
	matches, matchProblems := metal3.MatchNodes(nodes, l.objs)
	entries := map[string]entry{}
	problems := map[string]error{}
	for node, err := range matchProblems {
		problems[node] = err
	}
	hostProblems := map[string]error{}
	for key, err := range l.hostErrs {
		hostProblems[key] = err
	}
	for _, h := range l.objs.Hosts {
		if _, err := metal3.ParseAddress(h.Address); err != nil {
			hostProblems[h.Key()] = fmt.Errorf("BareMetalHost %s: spec.bmc.address: %w", h.Key(), err)
		}
	}
	var insecure []string
	for node, m := range matches {
		e, err := metal3Entry(node, m, i.opts.Config.Defaults)
		if err != nil {
			problems[node] = err
			continue
		}
		e.src = src
		entries[node] = e
		if e.InsecureSkipVerify {
			insecure = append(insecure, m.Host.Key())
		}
	}
	i.reportHostProblems(hostProblems, l.objs.Hosts)
	i.reportInsecure(insecure)
	return entries, problems
}

// metal3Entry is the inventory entry a node's BareMetalHost gives.
func metal3Entry(node string, m metal3.Match, d config.BMCSettings) (entry, error) {
	h := m.Host
	if err := h.Fenceable(); err != nil {
		return entry{}, err
	}
	addr, err := metal3.ParseAddress(h.Address)
	if err != nil {
		return entry{}, fmt.Errorf("BareMetalHost %s: spec.bmc.address: %w", h.Key(), err)
	}
	if h.CredentialsName == "" {
		return entry{}, fmt.Errorf("BareMetalHost %s has no spec.bmc.credentialsName", h.Key())
	}
	e := config.NodeBMC{Name: node, Address: addr.Endpoint.String(), System: addr.System}
	e.CredentialsSecret = h.CredentialsName
	// disableCertificateVerification is the host owner's explicit choice,
	// as insecureSkipVerify is in the file; otherwise the defaults' CA
	// ConfigMap (or the system roots) verifies the BMC.
	e.InsecureSkipVerify = h.DisableCertificateVerification && addr.Endpoint.Scheme == "https"
	if _, err := e.Target(d); err != nil {
		return entry{}, fmt.Errorf("BareMetalHost %s: %w", h.Key(), err)
	}
	via := m.Via
	if addr.Via != "" {
		via += "; " + addr.Via
	}
	return entry{NodeBMC: e, secretNamespace: h.Namespace, host: &h, via: via, fileIndex: -1}, nil
}

// reportHostProblems logs each host's problem once per change: an
// unsupported scheme is said where the operator looks, per host, whether
// or not a node is tied to it yet.
func (i *Inventory) reportHostProblems(problems map[string]error, hosts []metal3.Host) {
	uids := map[string]string{}
	for _, h := range hosts {
		uids[h.Key()] = h.UID
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	keys := make([]string, 0, len(problems))
	for k := range problems {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	seen := map[string]bool{}
	for _, k := range keys {
		seen[k] = true
		msg := problems[k].Error()
		if i.metal3Reported[k] == msg {
			continue
		}
		i.metal3Reported[k] = msg
		i.opts.Log.Warn("BareMetalHost unusable: its node cannot be fenced through it", zap.String("host", k), zap.Error(problems[k]))
		if i.opts.HostEvent != nil {
			ns, name, _ := strings.Cut(k, "/")
			reason := "FenceHostUnusable"
			if errors.Is(problems[k], metal3.ErrUnsupportedScheme) {
				reason = "FenceUnsupportedBMC"
			}
			ref := &corev1.ObjectReference{APIVersion: metal3.BareMetalHosts.GroupVersion().String(), Kind: "BareMetalHost", Namespace: ns, Name: name, UID: types.UID(uids[k])}
			i.opts.HostEvent(ref, reason, "bmcfence cannot fence this host's node through it: "+msg)
		}
	}
	for k := range i.metal3Reported {
		if !seen[k] {
			delete(i.metal3Reported, k)
		}
	}
}

// reportInsecure says once per host that its BMC's certificate is not
// verified (spec.bmc.disableCertificateVerification): the risky setting
// insecureSkipVerify, set by the host's owner rather than in our file.
func (i *Inventory) reportInsecure(hosts []string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.metal3Insecure == nil {
		i.metal3Insecure = map[string]bool{}
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		if i.metal3Insecure[h] {
			continue
		}
		i.metal3Insecure[h] = true
		i.opts.Log.Warn("risky setting: BareMetalHost "+h+" sets spec.bmc.disableCertificateVerification: the BMC's TLS certificate is not verified, so whoever answers on its address gets its credentials and can answer \"Off\" for it",
			zap.String("setting", config.RiskInsecureSkipVerify), zap.String("host", h))
	}
}

// HostProblems returns, by host (namespace/name), why a listed
// BareMetalHost cannot serve as a BMC entry.
func (i *Inventory) HostProblems() map[string]string {
	i.mu.RLock()
	defer i.mu.RUnlock()
	out := make(map[string]string, len(i.metal3Reported))
	for k, v := range i.metal3Reported {
		out[k] = v
	}
	return out
}

// powerHold coordinates our power commands with the host's other manager.
type powerHold interface {
	// Hold makes the manager keep the host off; called before a ForceOff.
	Hold(ctx context.Context) error
	// Release lifts our hold and checks that nothing else keeps the host
	// off; called before a power-on.
	Release(ctx context.Context) error
}

// metal3Hold is the rule of docs/metal3.md: bmcfence's own reboot
// annotation (reboot.metal3.io/bmcfence, mode hard) is on the host from
// before our ForceOff until our power-on, so the baremetal-operator keeps
// the host off while we fence it and never powers it on under us; and we
// never power on a host the baremetal-operator is told to keep off.
type metal3Hold struct {
	client dynamic.Interface
	host   metal3.Host
}

// current reads the host afresh and checks it is still the one the entry
// was built from: a re-created host may be another machine.
func (m *metal3Hold) current(ctx context.Context) (*unstructured.Unstructured, metal3.Host, error) {
	if m.client == nil {
		return nil, metal3.Host{}, fmt.Errorf("%w: no client to read BareMetalHost %s", ErrPowerHeld, m.host.Key())
	}
	// The hosts' cluster (a management cluster's, with its kubeconfig).
	u, err := m.client.Resource(metal3.BareMetalHosts).Namespace(m.host.Namespace).Get(ctx, m.host.Name, metav1.GetOptions{})
	if err != nil {
		return nil, metal3.Host{}, fmt.Errorf("%w: reading BareMetalHost %s: %w", ErrPowerHeld, m.host.Key(), err)
	}
	h, err := metal3.HostFrom(u)
	if err != nil {
		return nil, h, fmt.Errorf("%w: %w", ErrPowerHeld, err)
	}
	if h.UID != m.host.UID {
		return nil, h, fmt.Errorf("%w: BareMetalHost %s was re-created (uid %s, the entry has %s): waiting for the inventory to re-read it", ErrPowerHeld, m.host.Key(), h.UID, m.host.UID)
	}
	return u, h, nil
}

// annotate sets (value non-nil) or removes our annotation, conditional on
// the resourceVersion read: what was checked is what is patched.
func (m *metal3Hold) annotate(ctx context.Context, u *unstructured.Unstructured, value *string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": u.GetResourceVersion(),
		"annotations":     map[string]any{metal3.HoldAnnotation: value},
	}})
	if err != nil {
		return err
	}
	_, err = m.client.Resource(metal3.BareMetalHosts).Namespace(m.host.Namespace).Patch(ctx, m.host.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "bmcfence"})
	if err != nil {
		return fmt.Errorf("%w: annotating BareMetalHost %s: %w", ErrPowerHeld, m.host.Key(), err)
	}
	return nil
}

func (m *metal3Hold) Hold(ctx context.Context) error {
	u, h, err := m.current(ctx)
	if err != nil {
		return err
	}
	if h.HeldByUs() {
		return nil
	}
	v := metal3.HoldValue
	return m.annotate(ctx, u, &v)
}

func (m *metal3Hold) Release(ctx context.Context) error {
	u, h, err := m.current(ctx)
	if err != nil {
		return err
	}
	if !h.Online {
		return fmt.Errorf("%w: BareMetalHost %s has spec.online false: the baremetal-operator keeps it off; set spec.online: true to bring it back", ErrPowerHeld, h.Key())
	}
	if others := h.OthersHolding(); len(others) > 0 {
		return fmt.Errorf("%w: BareMetalHost %s carries %v: someone else has the baremetal-operator keep it off", ErrPowerHeld, h.Key(), others)
	}
	if !h.HeldByUs() {
		return nil
	}
	return m.annotate(ctx, u, nil)
}
