package redfish

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
)

// resolved is what the client learnt about its system and keeps between
// operations: none of it changes while a BMC runs, and knowing it turns a
// power read into one GET.
type resolved struct {
	systemURI  string
	chassisURI string // the system's first chassis; "" when it names none
}

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
	ODataID    string  `json:"@odata.id"`
	PowerState *string `json:"PowerState"`
	Links      struct {
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
	c.cache = r
	c.mu.Unlock()
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
		if errors.As(err, &herr) && herr.status == http.StatusNotFound {
			// The BMC was reconfigured under us: resolve afresh.
			c.forget()
		} else {
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

func (cn *conn) resolve(selector string) (*systemDoc, string, error) {
	if selector != "" && validSegment(selector) {
		uri := systemsURI + "/" + url.PathEscape(selector)
		var sys systemDoc
		err := cn.get(uri, &sys)
		var herr *httpError
		switch {
		case err == nil:
			// A BMC whose member URI and Id disagree is not one whose
			// selection we trust.
			if sys.ID != selector {
				return nil, "", fmt.Errorf("%w: %s reports Id %q, not %q", bmc.ErrSystem, uri, sys.ID, selector)
			}
			return &sys, uri, nil
		case errors.As(err, &herr) && (herr.status == http.StatusNotFound || herr.status == http.StatusBadRequest):
			// Not an Id: perhaps a Name.
		default:
			return nil, uri, err
		}
	}
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
			return nil, "", fmt.Errorf("%w: the BMC has %d systems (Ids %s); choose one by Id", bmc.ErrSystem, len(links), strings.Join(linkIDs(links), ", "))
		}
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
		return nil, "", fmt.Errorf("%w: no system with Id or Name %q (Ids %s)", bmc.ErrSystem, selector, strings.Join(linkIDs(links), ", "))
	default:
		return nil, "", fmt.Errorf("%w: %d systems are named %q (Ids %s); choose one by Id", bmc.ErrSystem, len(named), selector, strings.Join(linkIDs(namedURIs), ", "))
	}
}

// validSegment reports whether s can be a URI segment as it is: an Id with
// a slash or a dot segment cannot be, and is looked for by Name instead.
func validSegment(s string) bool {
	return s != "." && s != ".." && !strings.ContainsAny(s, "/?#")
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
// counts only if both say so. A system that answers 503 (AMI multi-node
// BMCs do while the host is off) is read through its chassis.
func (c *Client) PowerStatus(ctx context.Context) (bmc.PowerStatus, error) {
	var st bmc.PowerStatus
	err := c.run(ctx, bmc.OpPowerStatus, &st.Result, func(cn *conn) error {
		return retryRead(cn, &st.Result, func() error {
			s, err := cn.powerStatus()
			if err == nil {
				st.State, st.Raw, st.ChassisRaw, st.BootProgress = s.State, s.Raw, s.ChassisRaw, s.BootProgress
			}
			return err
		})
	})
	return st, err
}

func (cn *conn) powerStatus() (bmc.PowerStatus, error) {
	var st bmc.PowerStatus
	sys, uri, err := cn.system()
	var herr *httpError
	if errors.As(err, &herr) && herr.status == http.StatusServiceUnavailable && herr.retryAfter == 0 && uri != "" {
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
	if st.State != bmc.PowerOff {
		return st, nil
	}
	chassis := cn.c.cached().chassisURI
	if chassis == "" {
		return st, nil
	}
	var ch chassisDoc
	err = cn.get(chassis, &ch)
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
	switch chState := bmc.ParseRedfishPowerState(st.ChassisRaw); chState {
	case bmc.PowerOff:
	case bmc.PowerOn, bmc.PoweringOn, bmc.PoweringOff:
		// The chassis has power: whatever the system says, it is not off.
		st.State = chState
	case bmc.PowerUnknown:
		st.State = bmc.PowerUnknown
	}
	return st, nil
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
				if cn.c.cache.systemURI == "" || cn.c.cache.systemURI == sysURI {
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
// allows (from AllowableValues, or the action's ActionInfo).
func (c *Client) Identity(ctx context.Context) (bmc.Identity, error) {
	var id bmc.Identity
	err := c.run(ctx, bmc.OpIdentity, &id.Result, func(cn *conn) error {
		return retryRead(cn, &id.Result, func() error {
			sys, _, err := cn.system()
			if err != nil {
				return err
			}
			id.SystemID, id.SystemName, id.UUID = sys.ID, sys.Name, sys.UUID
			id.SerialNumber, id.Manufacturer, id.Model = sys.SerialNumber, sys.Manufacturer, sys.Model
			allowed, err := cn.allowedResets(sys)
			id.AllowedResets = allowed
			return err
		})
	})
	return id, err
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
