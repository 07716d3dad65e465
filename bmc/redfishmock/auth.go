package redfishmock

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// principal is who a request authenticated as.
type principal struct {
	username string
	// scope is the only system a system-scoped user sees; nil for the
	// administrator, who sees all.
	scope *system
}

func (p principal) sees(s *system) bool { return p.scope == nil || p.scope == s }

// credential is a configured password and what it grants, kept as a hash
// so the comparison takes the same time whatever the input's length.
type credential struct {
	pass     [32]byte
	username string
	scope    *system
}

// credentials indexes credentials by the SHA-256 of the username: a lookup
// by hash says nothing useful about the usernames that exist, and stays
// O(1) with a thousand system-scoped users.
type credentials map[[32]byte]credential

func (c credentials) add(username, password string, scope *system) {
	c[sha256.Sum256([]byte(username))] = credential{pass: sha256.Sum256([]byte(password)), username: username, scope: scope}
}

// checkPassword finds who username and password authenticate as. The
// password is compared in constant time.
func (m *Mock) checkPassword(username, password string) (principal, bool) {
	c, ok := m.creds[sha256.Sum256([]byte(username))]
	pass := sha256.Sum256([]byte(password))
	if subtle.ConstantTimeCompare(pass[:], c.pass[:]) != 1 || !ok {
		return principal{}, false
	}
	return principal{username: c.username, scope: c.scope}, true
}

// authenticate accepts an X-Auth-Token from a live session or HTTP Basic
// credentials. A stale token falls back to Basic, as BMCs do for clients
// that send both.
func (m *Mock) authenticate(r *http.Request, now time.Time) (principal, bool) {
	if token := r.Header.Get("X-Auth-Token"); token != "" {
		if s, ok := m.sessions.use(now, token); ok {
			return s.principal, true
		}
	}
	if username, password, ok := r.BasicAuth(); ok && m.cfg.authMode != AuthSessionOnly {
		return m.checkPassword(username, password)
	}
	return principal{}, false
}

// writeUnauthorized answers 401, offering Basic authentication only where
// the service takes it: a client learns from WWW-Authenticate what works.
func (m *Mock) writeUnauthorized(w http.ResponseWriter) {
	msg := "Authentication required: send HTTP Basic credentials or an X-Auth-Token from POST /redfish/v1/SessionService/Sessions."
	switch m.cfg.authMode {
	case AuthSessionOnly:
		msg = "Authentication required: HTTP Basic authentication is disabled; send an X-Auth-Token from POST /redfish/v1/SessionService/Sessions."
	case AuthBasicOnly:
		msg = "Authentication required: send HTTP Basic credentials."
		w.Header().Set("WWW-Authenticate", `Basic realm="redfish-mock"`)
	default:
		w.Header().Set("WWW-Authenticate", `Basic realm="redfish-mock"`)
	}
	writeError(w, http.StatusUnauthorized, msgNoValidSession, msg, "Establish a session or supply valid credentials.")
}

// session is a Redfish login session.
type session struct {
	id        string
	tokenHash [32]byte
	principal principal
	// owner is the system whose BMC the session counts against
	// (Faults.SessionLimit); nil when the login was not for one system.
	owner    *system
	created  time.Time
	lastUsed time.Time
}

// sessionTable is the BMC's bounded session table. Sessions expire after
// an idle timeout, checked lazily against the mock's clock.
type sessionTable struct {
	mu      sync.Mutex
	max     int
	timeout time.Duration
	lastID  uint64
	byID    map[string]*session
	byToken map[[32]byte]*session
}

func newSessionTable(max int, timeout time.Duration) *sessionTable {
	return &sessionTable{max: max, timeout: timeout, byID: map[string]*session{}, byToken: map[[32]byte]*session{}}
}

var errSessionLimit = errors.New("session limit reached")

// create opens a session for p, counted against owner. ownerLimit (when
// positive) caps owner's sessions below the table's size.
func (t *sessionTable) create(now time.Time, p principal, owner *system, ownerLimit int) (*session, string, error) {
	var raw [20]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, "", err
	}
	token := hex.EncodeToString(raw[:])

	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	if len(t.byID) >= t.max {
		return nil, "", errSessionLimit
	}
	if owner != nil && ownerLimit > 0 {
		n := 0
		for _, s := range t.byID {
			if s.owner == owner {
				n++
			}
		}
		if n >= ownerLimit {
			return nil, "", errSessionLimit
		}
	}
	t.lastID++
	s := &session{
		id:        strconv.FormatUint(t.lastID, 10),
		tokenHash: sha256.Sum256([]byte(token)),
		principal: p,
		owner:     owner,
		created:   now,
		lastUsed:  now,
	}
	t.byID[s.id] = s
	t.byToken[s.tokenHash] = s
	return s, token, nil
}

// use finds the live session holding token and marks it used. The lookup is
// by the token's hash, so its timing reveals nothing useful about the token.
func (t *sessionTable) use(now time.Time, token string) (session, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.byToken[sha256.Sum256([]byte(token))]
	if !ok {
		return session{}, false
	}
	if t.expired(s, now) {
		t.deleteLocked(s)
		return session{}, false
	}
	s.lastUsed = now
	return *s, true
}

// visible lists the live sessions p may see, oldest first.
func (t *sessionTable) visible(now time.Time, p principal) []session {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	var out []session
	for _, s := range t.byID {
		if p.scope == nil || s.principal.scope == p.scope {
			out = append(out, *s)
		}
	}
	slices.SortFunc(out, func(a, b session) int { return compareIDs(a.id, b.id) })
	return out
}

// get returns session id if it is live and visible to p.
func (t *sessionTable) get(now time.Time, p principal, id string) (session, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.byID[id]
	if !ok || t.expired(s, now) || (p.scope != nil && s.principal.scope != p.scope) {
		return session{}, false
	}
	return *s, true
}

// remove ends session id if it is visible to p.
func (t *sessionTable) remove(now time.Time, p principal, id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.byID[id]
	if !ok || t.expired(s, now) || (p.scope != nil && s.principal.scope != p.scope) {
		return false
	}
	t.deleteLocked(s)
	return true
}

func (t *sessionTable) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.byID)
	clear(t.byToken)
}

func (t *sessionTable) expired(s *session, now time.Time) bool {
	return !now.Before(s.lastUsed.Add(t.timeout))
}

func (t *sessionTable) expireLocked(now time.Time) {
	for _, s := range t.byID {
		if t.expired(s, now) {
			t.deleteLocked(s)
		}
	}
}

func (t *sessionTable) deleteLocked(s *session) {
	delete(t.byID, s.id)
	delete(t.byToken, s.tokenHash)
}

// compareIDs orders numeric ids numerically ("2" before "10").
func compareIDs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
