package redfish

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/internal/mutant"
)

// resolved is what the client learnt about its system and keeps between
// operations: none of it changes while a BMC runs, and knowing it turns a
// power read into one GET.
type resolved struct {
	systemURI  string
	chassisURI string // the system's first chassis; "" when it names none
	// service is what the service root says the BMC is, read once, when
	// the chassis rule first needs it.
	service *serviceID
	// unavailable is set once the system answered 503 without Retry-After
	// (AMI multi-system BMCs do while the host is off): from then on every
	// identity read from the system is bound (see bind), at two requests
	// more than the one a probe costs elsewhere.
	unavailable bool
	// known is the system's identity as read from the system itself right
	// before our last ForceOff (and, once the system has answered 503, at
	// every identity read), with what it was read beside; a system that
	// later answers 503 is identified by it, for knownIdentityMaxAge.
	known *knownIdentity
}

// knownIdentity is a system's identity read from the system, bound to
// what identifies its BMC and chassis at that time: the service root's
// UUID and the chassis's URI, UUID and serial number. Only while all of
// those read the same is it still the same machine's.
type knownIdentity struct {
	id          bmc.Identity
	at          time.Time
	fingerprint string
}

// knownIdentityMaxAge bounds how old an identity read from the system may
// be to identify it while it answers 503: the fence that sent our ForceOff
// needs it until its taint and through its detach (under the default
// policy at most three ForceOffs a minute apart, a 60 s unassisted settle
// and a 5 min detach: about 9 minutes). Older, it says nothing about this
// incident: the node is not tainted until the host answers again.
const knownIdentityMaxAge = 15 * time.Minute

type link struct {
	ODataID string `json:"@odata.id"`
}

// systemDoc is the part of a ComputerSystem the adapter reads.
type systemDoc struct {
	ODataID      string  `json:"@odata.id"`
	ID           string  `json:"Id"`
	Name         string  `json:"Name"`
	UUID         string  `json:"UUID"`
	Manufacturer string  `json:"Manufacturer"`
	Model        string  `json:"Model"`
	SerialNumber string  `json:"SerialNumber"`
	PowerState   *string `json:"PowerState"`
	BootProgress *struct {
		LastState string `json:"LastState"`
	} `json:"BootProgress"`
	Actions struct {
		Reset *struct {
			Target     string   `json:"target"`
			Allowed    []string `json:"ResetType@Redfish.AllowableValues"`
			ActionInfo string   `json:"@Redfish.ActionInfo"`
		} `json:"#ComputerSystem.Reset"`
	} `json:"Actions"`
	Links struct {
		Chassis []link `json:"Chassis"`
	} `json:"Links"`
}

type chassisDoc struct {
	ODataID      string  `json:"@odata.id"`
	UUID         string  `json:"UUID"`
	SerialNumber string  `json:"SerialNumber"`
	PowerState   *string `json:"PowerState"`
	Links        struct {
		ComputerSystems []link `json:"ComputerSystems"`
	} `json:"Links"`
}

type collectionDoc struct {
	Members []link `json:"Members"`
}

func (c *Client) cached() resolved {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cache
}

func (c *Client) remember(sys *systemDoc, uri string) {
	r := resolved{systemURI: uri}
	if len(sys.Links.Chassis) > 0 {
		r.chassisURI = sys.Links.Chassis[0].ODataID
	}
	c.mu.Lock()
	if c.cache.systemURI == uri {
		r.service, r.known, r.unavailable = c.cache.service, c.cache.known, c.cache.unavailable
	}
	c.cache = r
	c.mu.Unlock()
}

// sawUnavailable records that the system at uri answered 503 without
// Retry-After: unavailable while its host is off, as on AMI multi-system
// BMCs.
func (c *Client) sawUnavailable(uri string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cache.systemURI == "" {
		c.cache = resolved{systemURI: uri}
	}
	if c.cache.systemURI == uri {
		c.cache.unavailable = true
	}
}

// unavailable503 reports whether err is a system's 503 without
// Retry-After (not busy: unavailable while its host is off).
func unavailable503(err error, uri string) (*httpError, bool) {
	var herr *httpError
	if errors.As(err, &herr) && herr.status == http.StatusServiceUnavailable && herr.retryAfter == 0 && uri != "" {
		return herr, true
	}
	return nil, false
}

func (c *Client) forget() {
	c.mu.Lock()
	c.cache = resolved{}
	c.mu.Unlock()
}

// system reads the ComputerSystem the target selects: the cached URI when
// the client knows it (one GET), else by Id (one GET of the member URI
// DSP0266 derives from the Id), else by Name among all members, else the
// only member. It refuses rather than guesses: several systems and no
// selector, an unknown selector, or a Name shared by several systems.
// When the system is known but cannot be read, the error comes with its
// URI.
func (cn *conn) system() (*systemDoc, string, error) {
	c := cn.c
	if uri := c.cached().systemURI; uri != "" {
		var sys systemDoc
		err := cn.get(uri, &sys)
		var herr *httpError
		switch {
		case errors.As(err, &herr) && herr.status == http.StatusNotFound:
			// The BMC was reconfigured under us: resolve afresh.
			c.forget()
		case err == nil && sys.ODataID != "" && !samePath(sys.ODataID, uri):
			// Another resource answered for ours (a redirect to another
			// system, a BMC serving the wrong document): what it says is
			// not our system's.
			return nil, "", fmt.Errorf("%w: GET %s answered the resource %s, not the system it was resolved to", bmc.ErrBMC, uri, truncateText(sys.ODataID, 120))
		default:
			return &sys, uri, err
		}
	}
	sys, uri, err := cn.resolve(c.target.System)
	if err != nil {
		return nil, uri, err
	}
	c.remember(sys, uri)
	return sys, uri, nil
}

// samePath reports whether two URIs a BMC gave name the same resource:
// the same path, a trailing slash aside.
func samePath(a, b string) bool {
	norm := func(u string) string {
		u = onlyPath(u)
		if i := strings.IndexAny(u, "?#"); i >= 0 {
			u = u[:i]
		}
		return strings.TrimSuffix(u, "/")
	}
	return norm(a) == norm(b)
}

func (cn *conn) resolve(selector string) (*systemDoc, string, error) {
	// The collection first, whatever the selector: a Name is looked up
	// among the members, never sent as a per-system URI (sushy-tools
	// answers one with a redirect, other BMCs with 404 or with another
	// system whose Id happens to be that Name).
	var coll collectionDoc
	if err := cn.get(systemsURI, &coll); err != nil {
		return nil, "", err
	}
	links := make([]string, 0, len(coll.Members))
	for _, m := range coll.Members {
		links = append(links, m.ODataID)
	}
	if selector == "" {
		switch len(links) {
		case 0:
			return nil, "", fmt.Errorf("%w: the BMC lists no systems", bmc.ErrSystem)
		case 1:
			var sys systemDoc
			if err := cn.get(links[0], &sys); err != nil {
				return nil, links[0], err
			}
			return &sys, links[0], nil
		default:
			return nil, "", fmt.Errorf("%w: the BMC has %d systems (Ids %s); choose one with %s",
				bmc.ErrSystem, len(links), strings.Join(linkIDs(links), ", "), cn.c.target.Names.System)
		}
	}
	// A member whose URI ends in the selector is the one to try first: one
	// GET for the usual selection by Id.
	for _, l := range links {
		if path.Base(strings.TrimSuffix(l, "/")) != selector {
			continue
		}
		var sys systemDoc
		if err := cn.get(l, &sys); err != nil {
			return nil, l, err
		}
		if sys.ID == selector {
			return &sys, l, nil
		}
		// A BMC whose member URI and Id disagree is not one whose
		// selection we trust.
		return nil, "", fmt.Errorf("%w: %s reports Id %q, not %q", bmc.ErrSystem, l, sys.ID, selector)
	}
	var named []*systemDoc
	var namedURIs []string
	for _, l := range links {
		var sys systemDoc
		if err := cn.get(l, &sys); err != nil {
			return nil, "", err
		}
		if sys.ID == selector {
			// Listed under a URI that does not end in its Id.
			return &sys, l, nil
		}
		if sys.Name == selector {
			named = append(named, &sys)
			namedURIs = append(namedURIs, l)
		}
	}
	switch len(named) {
	case 1:
		return named[0], namedURIs[0], nil
	case 0:
		return nil, "", fmt.Errorf("%w: no system with Id or Name %q (Ids %s); give %s one of those",
			bmc.ErrSystem, selector, strings.Join(linkIDs(links), ", "), cn.c.target.Names.System)
	default:
		return nil, "", fmt.Errorf("%w: %d systems are named %q (Ids %s); choose one by Id with %s",
			bmc.ErrSystem, len(named), selector, strings.Join(linkIDs(namedURIs), ", "), cn.c.target.Names.System)
	}
}

func linkIDs(links []string) []string {
	ids := make([]string, len(links))
	for i, l := range links {
		ids[i] = path.Base(strings.TrimSuffix(l, "/"))
	}
	return ids
}

// PowerStatus reads the power state and BootProgress. A system that reads
// Off is checked against its chassis where the chassis reports power: Off
// counts only if both say so (the chassis rule), unless the chassis is set
// aside (see bmc.ChassisPower). A system that answers 503 (AMI multi-node
// BMCs do while the host is off) is read through its chassis. The status
// says which resource's power it trusted, and why.
func (c *Client) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	var st bmc.PowerStatus
	err := c.run(ctx, bmc.OpPowerStatus, &st.Result, func(cn *conn) error {
		return retryRead(cn, &st.Result, func() error {
			s, err := cn.powerStatus()
			if err == nil {
				st.State, st.Raw, st.ChassisRaw, st.BootProgress, st.Trusted = s.State, s.Raw, s.ChassisRaw, s.BootProgress, s.Trusted
			}
			return err
		})
	})
	return st, err
}

// Why a reading trusted what it trusted (bmc.PowerSource.Why).
const (
	whySystemOn     = "the system reads power; the chassis is read only to confirm an Off"
	whyBothOff      = "the system reads Off and its chassis, which carries the real power (OpenBMC derives the system's PowerState from the host's firmware state), agrees"
	whyChassisOn    = "the system reads Off but its chassis reads %s: the chassis carries the real power (OpenBMC derives the system's PowerState from the host's firmware state), so the machine is not off"
	whyNoChassis    = "the system reads Off and names no chassis that reports power"
	whySetAside     = "the system reads Off; its chassis reads %s and is set aside: %s"
	whyConfigured   = "by configuration (%s %s): the operator says this BMC's system PowerState is the machine's power"
	whyUnavailable  = "the system answers 503 while its host is off (AMI multi-system BMCs do); the power is its chassis's"
	resourceSystem  = "system"
	resourceChassis = "chassis"
	resourceBoth    = "system and chassis"
)

func (cn *conn) powerStatus() (bmc.PowerStatus, error) {
	var st bmc.PowerStatus
	sys, uri, err := cn.system()
	if herr, ok := unavailable503(err, uri); ok {
		cn.c.sawUnavailable(uri)
		return cn.statusFromChassis(uri, herr)
	}
	if err != nil {
		return st, err
	}
	if sys.PowerState != nil {
		st.Raw = *sys.PowerState
	}
	st.State = bmc.ParseRedfishPowerState(st.Raw)
	if sys.BootProgress != nil {
		st.BootProgress = sys.BootProgress.LastState
	}
	st.Trusted = bmc.PowerSource{Resource: resourceSystem, Why: whySystemOn}
	if st.State != bmc.PowerOff {
		return st, nil
	}
	t := cn.c.target
	if t.ChassisPower == bmc.ChassisPowerIgnore {
		st.Trusted = bmc.PowerSource{Resource: resourceSystem, Why: fmt.Sprintf(whyConfigured, t.Names.ChassisPower, bmc.ChassisPowerIgnore), ChassisSetAside: true}
		return st, nil
	}
	chassis := cn.c.cached().chassisURI
	st.Trusted = bmc.PowerSource{Resource: resourceSystem, Why: whyNoChassis}
	if chassis == "" {
		return st, nil
	}
	var ch chassisDoc
	err = cn.get(chassis, &ch)
	var herr *httpError
	switch {
	case errors.As(err, &herr) && herr.status == http.StatusNotFound:
		// A dangling link: the chassis reports nothing to disagree with.
		return st, nil
	case err != nil:
		return st, err
	case ch.PowerState == nil:
		return st, nil
	}
	st.ChassisRaw = *ch.PowerState
	chState := bmc.ParseRedfishPowerState(st.ChassisRaw)
	if chState == bmc.PowerOff {
		st.Trusted = bmc.PowerSource{Resource: resourceBoth, Why: whyBothOff}
		return st, nil
	}
	if t.ChassisPower != bmc.ChassisPowerCheck {
		svc, err := cn.service()
		if err != nil {
			return st, err
		}
		if svc.staticChassis != "" || mutant.On(mutant.ChassisSetAside) {
			st.Trusted = bmc.PowerSource{Resource: resourceSystem, Why: fmt.Sprintf(whySetAside, strconv.Quote(st.ChassisRaw), svc.staticChassis), ChassisSetAside: true}
			return st, nil
		}
		if svc.sushy != "" && mutant.On(mutant.SushyChassisByConfiguration) {
			st.Trusted = bmc.PowerSource{Resource: resourceSystem, Why: fmt.Sprintf(whySetAside, strconv.Quote(st.ChassisRaw), svc.sushy), ChassisSetAside: true}
			return st, nil
		}
		if svc.sushy != "" {
			// The chassis says nothing, and neither, on some of its
			// drivers, does the system's Off: only the operator knows
			// which driver this is.
			return st, fmt.Errorf("%w: the system reads Off and its chassis %s; %s, so nothing here confirms the Off: with sushy-tools' libvirt or fake driver set %s for this BMC; never fence through its nova or ironic driver, which read a paused, suspended, crashed or unknown machine as Off (and nova's ForceOff of an instance that is not running does nothing)",
				bmc.ErrUnsupported, strconv.Quote(st.ChassisRaw), svc.sushy, setting(t.Names.ChassisPower, string(bmc.ChassisPowerIgnore)))
		}
	}
	switch chState {
	case bmc.PowerOn, bmc.PoweringOn, bmc.PoweringOff:
		// The chassis has power: whatever the system says, it is not off.
		st.State = chState
	case bmc.PowerUnknown, bmc.PowerOff:
		st.State = bmc.PowerUnknown
	}
	st.Trusted = bmc.PowerSource{Resource: resourceChassis, Why: fmt.Sprintf(whyChassisOn, strconv.Quote(st.ChassisRaw))}
	return st, nil
}

// serviceID is what the service root says about the BMC.
type serviceID struct {
	uuid string
	// staticChassis, when set, says why this service's chassis PowerState
	// is no evidence while its system's is: it names the emulator,
	// identified positively from its service root, whose chassis is a
	// static template and whose system follows the machine.
	staticChassis string
	// sushy, when set, says the service root is sushy-tools': its chassis
	// is a static template too, but what its system's Off means depends
	// on the driver behind it, which the service root does not say (see
	// identifyService).
	sushy string
}

// setting spells "name value" in the reader's words: a flag takes its
// value after a space, a configuration key after a colon.
func setting(name, value string) string {
	if strings.HasPrefix(name, "-") {
		return name + " " + value
	}
	return name + ": " + value
}

// Service roots of emulators whose chassis never follows the machine,
// from their public sources.
const (
	// sushy-tools (opendev.org/openstack/sushy-tools,
	// sushy_tools/emulator/templates/root.json): the service root is a
	// fixed template, Id "RedvirtService", Name "Redvirt Service"; its
	// chassis.json template hard-codes "PowerState": "On". The same root
	// fronts every driver: libvirt and fake follow the machine, but nova
	// reads PAUSED, SUSPENDED, CRASHED and NOSTATE as Off and answers a
	// ForceOff of an instance that is not running with 204 doing nothing
	// (novadriver.py get_power_state, set_power_state), and ironic reads
	// every Ironic power state but "power on", None (unknown) included, as
	// Off (ironicdriver.py), at sushy-tools 2b51921.
	sushyRootID   = "RedvirtService"
	sushyRootName = "Redvirt Service"
	// HPE's ilo-redfish-emulator (github.com/HewlettPackard/ilo-redfish-
	// emulator) replays recorded iLO mockups whose service root Product
	// ends in "SIMULATED" ("ProLiant DL360 Gen10 Plus - SIMULATED"); its
	// ComputerSystem.Reset changes the system and never Chassis/1.
	iloEmulatorVendor  = "HPE"
	iloEmulatorProduct = "SIMULATED"
)

// identifyService says whether a service root is a known emulator with a
// static chassis. Only a positive match counts: an unknown service keeps
// the chassis rule (a chassis that never changes is no evidence: on
// OpenBMC a chassis whose power-off failed never changes either). HPE's
// iLO emulator is a pure emulator, its chassis set aside; sushy-tools is
// named, never set aside: its system's Off may be a paused VM or a machine
// Ironic cannot read, and only the operator, who knows its driver, can say
// chassisPower: ignore.
func identifyService(root serviceRootDoc) serviceID {
	id := serviceID{uuid: root.UUID}
	switch {
	case root.ID == sushyRootID && root.Name == sushyRootName:
		id.sushy = fmt.Sprintf("the service root (Id %q, Name %q) is sushy-tools', whose chassis is a static template that always reads On", root.ID, root.Name)
	case root.Vendor == iloEmulatorVendor && strings.HasSuffix(strings.TrimSpace(root.Product), iloEmulatorProduct):
		id.staticChassis = fmt.Sprintf("the service root (Vendor %q, Product %q) is HPE's iLO emulator, whose ForceOff never changes the chassis", root.Vendor, root.Product)
	}
	return id
}

type serviceRootDoc struct {
	ID      string `json:"Id"`
	Name    string `json:"Name"`
	UUID    string `json:"UUID"`
	Vendor  string `json:"Vendor"`
	Product string `json:"Product"`
}

// service reads the service root once per resolved system and keeps what
// it says.
func (cn *conn) service() (serviceID, error) {
	if s := cn.c.cached().service; s != nil {
		return *s, nil
	}
	var root serviceRootDoc
	if err := cn.get(serviceRootURI, &root); err != nil {
		return serviceID{}, err
	}
	id := identifyService(root)
	cn.c.mu.Lock()
	cn.c.cache.service = &id
	cn.c.mu.Unlock()
	return id, nil
}

// statusFromChassis reads the power of a system that answered 503 (without
// Retry-After: not busy, but unavailable) from its chassis. Only a chassis
// that reports power answers; otherwise the system's error stands.
func (cn *conn) statusFromChassis(sysURI string, sysErr *httpError) (bmc.PowerStatus, error) {
	var st bmc.PowerStatus
	uri := cn.c.cached().chassisURI
	if uri == "" {
		var err error
		if uri, err = cn.findChassis(sysURI); err != nil || uri == "" {
			return st, sysErr
		}
	}
	var ch chassisDoc
	if err := cn.get(uri, &ch); err != nil || ch.PowerState == nil {
		return st, sysErr
	}
	st.ChassisRaw = *ch.PowerState
	st.State = bmc.ParseRedfishPowerState(st.ChassisRaw)
	st.Trusted = bmc.PowerSource{Resource: resourceChassis, Why: whyUnavailable}
	return st, nil
}

// findChassis finds the chassis whose Links.ComputerSystems names the
// target's system, for a system that cannot be read itself.
func (cn *conn) findChassis(sysURI string) (string, error) {
	var coll collectionDoc
	if err := cn.get(chassisURI, &coll); err != nil {
		return "", err
	}
	for _, m := range coll.Members {
		var ch chassisDoc
		if err := cn.get(m.ODataID, &ch); err != nil {
			return "", err
		}
		for _, s := range ch.Links.ComputerSystems {
			if strings.TrimSuffix(s.ODataID, "/") == strings.TrimSuffix(sysURI, "/") {
				cn.c.mu.Lock()
				switch cn.c.cache.systemURI {
				case sysURI:
					cn.c.cache.chassisURI = m.ODataID
				case "":
					cn.c.cache = resolved{systemURI: sysURI, chassisURI: m.ODataID}
				}
				cn.c.mu.Unlock()
				return m.ODataID, nil
			}
		}
	}
	return "", nil
}

// retryRead runs an idempotent read, once more after a transient failure,
// and counts the attempts.
func retryRead(cn *conn, res *bmc.Result, read func() error) error {
	var err error
	for res.Attempts = 1; ; res.Attempts++ {
		err = read()
		if err == nil || res.Attempts >= readAttempts || !transient(err) || cn.ctx.Err() != nil {
			return err
		}
		var herr *httpError
		if errors.As(err, &herr) && herr.retryAfter > 0 {
			if serr := sleep(cn.ctx, min(herr.retryAfter, remaining(cn.ctx)/2)); serr != nil {
				return err
			}
		}
	}
}

// transient reports whether a failed read may succeed if tried again at
// once: a 5xx, or a connection that broke.
func transient(err error) bool {
	var herr *httpError
	if errors.As(err, &herr) {
		return herr.status >= 500
	}
	return !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, bmc.ErrSystem) && !errors.Is(err, bmc.ErrUnsupported) && !errors.Is(err, bmc.ErrBMC) &&
		!isTLSError(err)
}

// isTLSError reports a TLS failure, which no retry cures.
func isTLSError(err error) bool {
	var (
		unknownCA   x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		invalidCert x509.CertificateInvalidError
		verifyErr   *tls.CertificateVerificationError
		recordErr   tls.RecordHeaderError
		alert       tls.AlertError
	)
	return errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &invalidCert) ||
		errors.As(err, &verifyErr) || errors.As(err, &recordErr) || errors.As(err, &alert) ||
		strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

// remaining is the time left before ctx's deadline (an hour without one).
func remaining(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d)
	}
	return time.Hour
}

// Identity reads what identifies the machine, and the reset types it
// allows (from AllowableValues, or the action's ActionInfo): one GET of
// the system once its URI is known (the agent's probe, every minute).
//
// A system that answers 503 while its host is off (AMI multi-system BMCs)
// is identified by the identity read from it by this client while it
// answered, bound to what identified its BMC and chassis then (the service
// root's UUID, the chassis's URI, UUID and serial number): only while all
// of those still read the same, and for knownIdentityMaxAge; Source says
// so. That identity is bound right before our ForceOff (in PowerOff's own
// read of the system) and, once this client has seen the system answer
// 503, at every identity read. Never read so, such a system cannot be
// identified.
func (c *Client) Identity(ctx context.Context) (bmc.Identity, error) {
	var id bmc.Identity
	err := c.run(ctx, bmc.OpIdentity, &id.Result, func(cn *conn) error {
		return retryRead(cn, &id.Result, func() error {
			sys, uri, err := cn.system()
			if herr, ok := unavailable503(err, uri); ok {
				cn.c.sawUnavailable(uri)
				known, kerr := cn.identityWhileUnavailable(uri, herr)
				if kerr == nil {
					res := id.Result
					id = known
					id.Result = res
				}
				return kerr
			}
			if err != nil {
				return err
			}
			identityOf(sys, &id)
			allowed, err := cn.allowedResets(sys)
			id.AllowedResets = allowed
			if err != nil {
				return err
			}
			if cn.c.cached().unavailable {
				cn.bind(uri, id)
			} else {
				cn.c.dropKnownUnless(uri, id)
			}
			return nil
		})
	})
	return id, err
}

// fingerprint is what identifies the system's BMC and chassis now: the
// service root's UUID (another BMC at this address has another) and the
// chassis the system names (URI, UUID, serial number), which must list
// the system among its ComputerSystems. "" when any of it is missing:
// nothing to bind to.
func (cn *conn) fingerprint(sysURI string) (string, error) {
	var root serviceRootDoc
	if err := cn.get(serviceRootURI, &root); err != nil {
		return "", err
	}
	chURI := cn.c.cached().chassisURI
	if chURI == "" {
		var err error
		if chURI, err = cn.findChassis(sysURI); err != nil {
			return "", err
		}
	}
	if root.UUID == "" || chURI == "" {
		return "", nil
	}
	var ch chassisDoc
	if err := cn.get(chURI, &ch); err != nil {
		return "", err
	}
	if ch.UUID == "" && ch.SerialNumber == "" {
		return "", nil
	}
	listed := false
	for _, s := range ch.Links.ComputerSystems {
		listed = listed || strings.TrimSuffix(s.ODataID, "/") == strings.TrimSuffix(sysURI, "/")
	}
	if !listed {
		return "", nil
	}
	return fmt.Sprintf("service %s; chassis %s UUID %q serial %q", root.UUID, chURI, ch.UUID, ch.SerialNumber), nil
}

// identityOf copies what identifies the machine from its system.
func identityOf(sys *systemDoc, id *bmc.Identity) {
	id.SystemID, id.SystemName, id.UUID = sys.ID, sys.Name, sys.UUID
	id.SerialNumber, id.Manufacturer, id.Model = sys.SerialNumber, sys.Manufacturer, sys.Model
}

// bind remembers an identity just read from the system with its
// fingerprint, replacing any older one. A fingerprint that cannot be read
// leaves nothing bound (an older identity is dropped too): the system
// itself answered, and that is what counts now; an identity read before
// it proves nothing about what answers 503 later.
func (cn *conn) bind(sysURI string, id bmc.Identity) {
	fp, err := cn.fingerprint(sysURI)
	var k *knownIdentity
	if err == nil && fp != "" {
		k = &knownIdentity{id: id, at: cn.c.now(), fingerprint: fp}
		k.id.Result = bmc.Result{}
	}
	cn.c.mu.Lock()
	if cn.c.cache.systemURI == sysURI {
		cn.c.cache.known = k
	}
	cn.c.mu.Unlock()
}

// dropKnownUnless drops the bound identity when the system, read without
// binding (one request), now reports another one.
func (c *Client) dropKnownUnless(sysURI string, id bmc.Identity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.cache.known
	if c.cache.systemURI != sysURI || k == nil {
		return
	}
	if k.id.UUID != id.UUID || k.id.SystemID != id.SystemID || k.id.SerialNumber != id.SerialNumber {
		c.cache.known = nil
	}
}

// identityWhileUnavailable identifies a system that answers 503 by the
// identity last read from it, if its BMC and chassis still read as they
// did then.
func (cn *conn) identityWhileUnavailable(sysURI string, sysErr *httpError) (bmc.Identity, error) {
	known := cn.c.cached().known
	if known == nil {
		return bmc.Identity{}, fmt.Errorf("%w: the system answers %s (it is unavailable while its host is off, as on AMI multi-system BMCs) and its identity was never read from it while it answered: it cannot be checked until the host is on",
			bmc.ErrBMC, sysErr)
	}
	if age := cn.c.now().Sub(known.at); age > knownIdentityMaxAge {
		return bmc.Identity{}, fmt.Errorf("%w: the system answers %s (it is unavailable while its host is off, as on AMI multi-system BMCs) and its identity was last read from it %s ago, longer than %s: too old to say whose machine answers now; it cannot be checked until the host is on",
			bmc.ErrBMC, sysErr, age.Round(time.Second), knownIdentityMaxAge)
	}
	fp, err := cn.fingerprint(sysURI)
	if err != nil {
		return bmc.Identity{}, err
	}
	if fp != known.fingerprint && !mutant.On(mutant.AMIIdentityBinding) {
		return bmc.Identity{}, fmt.Errorf("%w: the system answers %s while its host is off, and what identified its BMC and chassis when its identity was read has changed (then: %s; now: %s): not the same machine for certain",
			bmc.ErrBMC, sysErr, known.fingerprint, orNone(fp))
	}
	id := known.id
	id.Source = fmt.Sprintf("read from the system at %s, while it answered (it answers 503 while its host is off); the BMC and chassis still read the same (%s)",
		known.at.UTC().Format(time.RFC3339), fp)
	return id, nil
}

func orNone(s string) string {
	if s == "" {
		return "nothing to compare"
	}
	return s
}

// allowedResets returns the ResetType values the system advertises: inline
// AllowableValues, else the ActionInfo's ResetType parameter (Lenovo XCC
// and OpenBMC advertise them there). nil means "not advertised".
func (cn *conn) allowedResets(sys *systemDoc) ([]string, error) {
	r := sys.Actions.Reset
	if r == nil {
		return nil, nil
	}
	if len(r.Allowed) > 0 || r.ActionInfo == "" {
		return slices.Clone(r.Allowed), nil
	}
	var info struct {
		Parameters []struct {
			Name    string   `json:"Name"`
			Allowed []string `json:"AllowableValues"`
		} `json:"Parameters"`
	}
	if err := cn.get(r.ActionInfo, &info); err != nil {
		var herr *httpError
		if errors.As(err, &herr) && herr.status == http.StatusNotFound {
			return nil, nil
		}
		return nil, err
	}
	for _, p := range info.Parameters {
		if p.Name == "ResetType" {
			return slices.Clone(p.Allowed), nil
		}
	}
	return nil, nil
}
