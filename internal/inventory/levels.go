package inventory

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
	"github.com/bmcfence/bmcfence/internal/config"
	"github.com/bmcfence/bmcfence/pdu"
	"github.com/bmcfence/bmcfence/pdu/redfishpdu"
	"github.com/bmcfence/bmcfence/pdu/snmppdu"
)

// Fencing levels below the BMC (config.Level): each a PDU level whose
// outlets are switched together. The runner tries a level only when the
// ones above it cannot fence (runner.Leveled).

// OutletProofsConfigMap is the ConfigMap, in the agent's namespace, that
// holds the recorded outlet identity proofs (pdu.VerifyOutlet): one key per
// node, its value a JSON list of pdu.OutletProof. A ConfigMap of the
// agent's namespace, not a Node annotation: a node can write its own
// annotations, and a proof names which machine an outlet may cut.
const OutletProofsConfigMap = config.OutletProofsConfigMap

// DrawlessWatts is the most an outlet may draw and still count as feeding
// a dead machine: below a BMC's standby draw (a machine whose host is off
// and whose BMC lives draws several watts), above a meter's noise.
const DrawlessWatts = 5.0

// ErrNoOutletProof is wrapped when an outlet has no recorded identity
// proof for the node's machine and its entry does not opt in
// (allowUnverifiedOutlet).
var ErrNoOutletProof = errors.New("no recorded outlet identity proof for this machine")

// levelOutlet is one outlet of a level, with its settings.
type levelOutlet struct {
	pdu.Outlet
	cfg config.Outlet
	// name is how Events and errors name it: address and outlet, never a
	// credential.
	name string
}

// pduLevel is one PDU level of a node: a runner.PowerController over every
// outlet that feeds its machine.
type pduLevel struct {
	node    string
	number  int
	outlets []levelOutlet
	inv     *Inventory
}

var (
	_ runner.PowerController = (*pduLevel)(nil)
	_ runner.Metered         = (*pduLevel)(nil)
)

// Key names the level: its outlets.
func (l *pduLevel) Key() string {
	names := make([]string, len(l.outlets))
	for i, o := range l.outlets {
		names[i] = o.name
	}
	return "pdu-level-" + strconv.Itoa(l.number) + ":" + strings.Join(names, "+")
}

// PowerStatus reads every outlet: Off only when every one reads exactly
// Off; an outlet that cannot be read makes the level unreadable.
func (l *pduLevel) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	off, unknown := 0, 0
	var raw []string
	for _, o := range l.outlets {
		st, err := o.PowerStatus(ctx)
		if err != nil {
			return bmc.PowerStatus{}, fmt.Errorf("outlet %s: %w", o.name, err)
		}
		switch st.State {
		case bmc.PowerOff:
			off++
		case bmc.PowerOn:
		default:
			unknown++
		}
		raw = append(raw, o.name+"="+string(st.State))
	}
	st := bmc.PowerStatus{State: bmc.PowerOn, Raw: strings.Join(raw, " ")}
	switch {
	case off == len(l.outlets):
		st.State = bmc.PowerOff
	case off > 0 && !fence.Enabled(fence.CheckOutletsAllOff):
		st.State = bmc.PowerOff // the mutant: one outlet off is the level off
	case unknown > 0:
		st.State = bmc.PowerUnknown
	}
	return st, nil
}

// PowerOff switches every outlet off. Accepted only when every outlet
// accepted: one that answered "already off" did nothing, and the level's
// Off is then not ours (the engine's unassisted window).
func (l *pduLevel) PowerOff(ctx context.Context) (bmc.Result, error) {
	return l.switchAll(ctx, func(o levelOutlet) (bmc.Result, error) { return o.PowerOff(ctx) })
}

// PowerOn switches every outlet on.
func (l *pduLevel) PowerOn(ctx context.Context) (bmc.Result, error) {
	return l.switchAll(ctx, func(o levelOutlet) (bmc.Result, error) { return o.PowerOn(ctx) })
}

func (l *pduLevel) switchAll(ctx context.Context, call func(levelOutlet) (bmc.Result, error)) (bmc.Result, error) {
	var res bmc.Result
	var already, failed error
	for _, o := range l.outlets {
		r, err := call(o)
		res.Attempts += r.Attempts
		switch {
		case err == nil:
		case errors.Is(err, bmc.ErrAlreadyInState):
			already = fmt.Errorf("outlet %s: %w", o.name, err)
		case failed == nil:
			failed = fmt.Errorf("outlet %s: %w", o.name, err)
		}
	}
	if failed != nil {
		return res, failed
	}
	return res, already
}

// Drawless reports whether every outlet meters at most DrawlessWatts.
func (l *pduLevel) Drawless(ctx context.Context) (bool, error) {
	for _, o := range l.outlets {
		m, err := o.Metering(ctx)
		if err != nil {
			return false, fmt.Errorf("outlet %s: %w", o.name, err)
		}
		if m.Watts > DrawlessWatts {
			return false, nil
		}
	}
	return true, nil
}

// Verify passes when every outlet has a recorded identity proof naming
// this node's machine (the Node's systemUUID) and this very outlet (the
// PDU's serial number and outlet id as it reports them now), or its entry
// opts in with allowUnverifiedOutlet.
func (l *pduLevel) Verify(ctx context.Context) error {
	if !fence.Enabled(fence.CheckOutletProof) {
		return nil // the mutant: the configuration alone ties outlets to machines
	}
	uuid := ""
	if l.inv.opts.Nodes != nil {
		if n, ok := l.inv.opts.Nodes.NodeObject(l.node); ok {
			uuid = strings.TrimSpace(n.Status.NodeInfo.SystemUUID)
		}
	}
	proofs := l.inv.outletProofs(l.node)
	for _, o := range l.outlets {
		if o.cfg.AllowUnverifiedOutlet {
			continue
		}
		if uuid == "" {
			return fmt.Errorf("%w: outlet %s: the Node reports no systemUUID to match a proof against (set allowUnverifiedOutlet if you vouch for the outlet)", ErrNoOutletProof, o.name)
		}
		id, err := o.OutletIdentity(ctx)
		if err != nil {
			return fmt.Errorf("outlet %s: %w", o.name, err)
		}
		found := false
		for _, p := range proofs {
			if p.Outlet.Key() == id.Key() && strings.EqualFold(strings.TrimSpace(p.Machine.UUID), uuid) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("%w: outlet %s (%s) has none for systemUUID %s in ConfigMap %s (record one with the outlet identity test, or set allowUnverifiedOutlet if you vouch for the outlet)",
				ErrNoOutletProof, o.name, id.Key(), uuid, OutletProofsConfigMap)
		}
	}
	return nil
}

// Levels implements runner.Leveled: the node's levels below its BMC.
func (c *Controller) Levels() []runner.PowerController { return c.levels }

// outletProofs is the node's recorded proofs, as last read.
func (i *Inventory) outletProofs(node string) []pdu.OutletProof {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.proofs[node]
}

// readOutletProofs reads the proofs ConfigMap (none when it is absent),
// only when some entry has fencing levels: the agent is granted it by name
// only then.
func (i *Inventory) readOutletProofs(ctx context.Context, entries map[string]entry) (map[string][]pdu.OutletProof, error) {
	levels := false
	for _, e := range entries {
		levels = levels || len(e.ResolvedLevels(i.opts.Config.Defaults)) > 0
	}
	if i.opts.Client == nil || !levels {
		return nil, nil
	}
	cm, err := i.opts.Client.CoreV1().ConfigMaps(i.opts.Namespace).Get(ctx, OutletProofsConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", i.opts.Namespace, OutletProofsConfigMap, err)
	}
	out := map[string][]pdu.OutletProof{}
	for node, raw := range cm.Data {
		var ps []pdu.OutletProof
		if err := json.Unmarshal([]byte(raw), &ps); err != nil {
			i.opts.Log.Warn("outlet proofs unreadable; the node's outlets count only with allowUnverifiedOutlet")
			continue
		}
		out[node] = ps
	}
	return out, nil
}

// resolveLevels builds the node's levels from its entry, with credentials
// from the Secrets in the entry's namespace. key changes whenever a
// setting or a credential does.
func (i *Inventory) resolveLevels(ctx context.Context, e entry, secrets map[string]*corev1.Secret) ([]runner.PowerController, string, error) {
	levels := e.ResolvedLevels(i.opts.Config.Defaults)
	if len(levels) == 0 {
		return nil, "", nil
	}
	h := sha256.New()
	var out []runner.PowerController
	for li, lv := range levels {
		l := &pduLevel{node: e.Name, number: li + 2, inv: i}
		for oi, oc := range lv.Outlets {
			sec, err := i.secret(ctx, e.secretNamespace, oc.CredentialsSecret, secrets)
			if err != nil {
				return nil, "", fmt.Errorf("levels[%d].outlets[%d]: %w", li, oi, err)
			}
			o, err := i.newOutlet(oc, sec.Data)
			if err != nil {
				return nil, "", fmt.Errorf("levels[%d].outlets[%d]: %w", li, oi, err)
			}
			name := oc.Address + "/" + oc.Outlet
			if oc.PDU != "" {
				name = oc.Address + "/" + oc.PDU + "/" + oc.Outlet
			}
			l.outlets = append(l.outlets, levelOutlet{Outlet: o, cfg: oc, name: name})
			fmt.Fprintf(h, "%d|%d|%+v|", li, oi, oc)
			for _, k := range []string{"community", "username", "password", "privPassword"} {
				fmt.Fprintf(h, "%s=%x|", k, sha256.Sum256(sec.Data[k]))
			}
		}
		out = append(out, l)
	}
	return out, fmt.Sprintf("%x", h.Sum(nil)), nil
}

// secret reads a Secret once per Refresh.
func (i *Inventory) secret(ctx context.Context, ns, name string, secrets map[string]*corev1.Secret) (*corev1.Secret, error) {
	key := ns + "/" + name
	if sec, ok := secrets[key]; ok {
		return sec, nil
	}
	sec, err := i.opts.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("credentials Secret %s not found", key)
	}
	if err != nil {
		return nil, fmt.Errorf("reading credentials Secret %s: %w", key, err)
	}
	secrets[key] = sec
	return sec, nil
}

// newOutlet builds one outlet's client.
func (i *Inventory) newOutlet(oc config.Outlet, data map[string][]byte) (pdu.Outlet, error) {
	switch oc.Protocol {
	case config.OutletSNMP:
		host, port := oc.Address, 0
		if h, p, err := splitPort(oc.Address); err == nil {
			host, port = h, p
		}
		n, _ := strconv.Atoi(oc.Outlet)
		v := snmppdu.Version(oc.SNMPVersion)
		if v == "" {
			v = snmppdu.V3
		}
		t := snmppdu.Target{Host: host, Port: port, Outlet: n, Version: v, AuthProtocol: oc.AuthProtocol, PrivProtocol: oc.PrivProtocol, Timeout: i.opts.Timeout}
		t, err := snmppdu.CredentialsFromSecret(t, data)
		if err != nil {
			return nil, err
		}
		return snmppdu.New(t)
	case config.OutletRedfish:
		ep, err := bmc.ParseAddress(oc.Address)
		if err != nil {
			return nil, err
		}
		user, pass := strings.TrimSpace(string(data["username"])), strings.TrimRight(string(data["password"]), "\r\n")
		if user == "" || pass == "" {
			return nil, errors.New("the credentials Secret needs non-empty keys username and password")
		}
		d := bmc.Target{Address: ep, Credentials: bmc.Credentials{Username: user, Password: bmc.Secret(pass)}, Auth: bmc.AuthBasic,
			InsecureSkipVerify: oc.InsecureSkipVerify, Timeout: i.opts.Timeout}
		return redfishpdu.New(redfishpdu.Target{Device: d, PDU: oc.PDU, Outlet: oc.Outlet})
	default:
		return nil, fmt.Errorf("protocol %q: want redfish or snmp", oc.Protocol)
	}
}

func splitPort(s string) (string, int, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 || strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
		return s, 0, errors.New("no port")
	}
	p, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return s, 0, err
	}
	return strings.Trim(s[:i], "[]"), p, nil
}

// sharedOutlets finds every node whose outlet another node's levels name
// too: an outlet feeds one machine, and whichever of the two it is,
// fencing the other through it cuts the wrong one. Those nodes' levels are
// not used.
func (i *Inventory) sharedOutlets(entries map[string]entry, resolved map[string]bmc.Target) map[string]error {
	owners := map[string][]string{}
	for name := range resolved {
		for _, l := range entries[name].ResolvedLevels(i.opts.Config.Defaults) {
			for _, o := range l.Outlets {
				k := strings.ToLower(o.Address + "/" + o.PDU + "/" + o.Outlet)
				owners[k] = append(owners[k], name)
			}
		}
	}
	problems := map[string]error{}
	for outlet, names := range owners {
		if len(names) < 2 {
			continue
		}
		sort.Strings(names)
		for _, n := range names {
			problems[n] = fmt.Errorf("outlet %s is listed for nodes %s: an outlet feeds one machine, so none of them uses its fencing levels", outlet, strings.Join(names, ", "))
		}
	}
	return problems
}

// Unverified names the level's outlets that count on the entry's
// allowUnverifiedOutlet, without an identity proof.
func (l *pduLevel) Unverified() []string {
	var out []string
	for _, o := range l.outlets {
		if o.cfg.AllowUnverifiedOutlet {
			out = append(out, o.name)
		}
	}
	return out
}
