package redfishmock

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ServeHTTP serves the Redfish API under /redfish and the control API under
// /mock/.
func (m *Mock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.log != nil {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		w = rec
		defer func() {
			// Never the Authorization header or a body: they carry passwords.
			m.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", rec.status, "remote", r.RemoteAddr)
		}()
	}
	path := r.URL.Path
	if len(path) > 1 {
		path = strings.TrimRight(path, "/")
	}
	if path == "/mock" || strings.HasPrefix(path, "/mock/") {
		m.serveControl(w, r, path)
		return
	}
	m.serveRedfish(w, r, path)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// serveControl serves the test control API documented in the package
// comment. It has no authentication: the mock is a test peer and binds
// loopback by default.
func (m *Mock) serveControl(w http.ResponseWriter, r *http.Request, path string) {
	seg := strings.Split(strings.TrimPrefix(path, "/mock"), "/")[1:] // path starts with "/mock/" here, or is "/mock"
	if m.serveEventControl(w, r, seg) {
		return
	}
	switch {
	case len(seg) == 1 && seg[0] == "reset":
		if !allowMethod(w, r, http.MethodPost) {
			return
		}
		m.Reset()
		m.logControl("reset", "", nil)
		w.WriteHeader(http.StatusNoContent)
	case len(seg) == 1 && seg[0] == "systems":
		if !allowMethod(w, r, http.MethodGet, http.MethodHead) {
			return
		}
		writeJSON(w, http.StatusOK, m.Statuses())
	case len(seg) == 2 && seg[0] == "systems":
		if !allowMethod(w, r, http.MethodGet, http.MethodHead) {
			return
		}
		m.writeStatus(w, seg[1], nil)
	case len(seg) == 3 && seg[0] == "systems" && seg[2] == "events":
		m.controlEvent(w, r, seg[1])
	case len(seg) == 3 && seg[0] == "systems" && seg[2] == "faults":
		m.controlFaults(w, r, seg[1])
	case len(seg) == 3 && seg[0] == "systems" && seg[2] == "power":
		m.controlPower(w, r, seg[1])
	case len(seg) == 3 && seg[0] == "systems" && seg[2] == "profile":
		m.controlProfile(w, r, seg[1])
	case len(seg) == 3 && seg[0] == "systems" && (seg[2] == "petter" || seg[2] == "watchdog" || seg[2] == "log" || seg[2] == "kernel"):
		m.controlEvidence(w, r, seg[1], seg[2]) // evidence.go
	default:
		writeError(w, http.StatusNotFound, msgResourceMissingAtURI,
			fmt.Sprintf("No control endpoint at %s; see the redfishmock package documentation for /mock/systems, /mock/systems/{id}/events|faults|power|profile and /mock/reset.", truncate(path, 200)), "")
	}
}

func (m *Mock) controlEvent(w http.ResponseWriter, r *http.Request, id string) {
	if !allowMethod(w, r, http.MethodPost) {
		return
	}
	var body struct {
		Event *Event `json:"event"`
	}
	if !readControlBody(w, r, &body) {
		return
	}
	if body.Event == nil {
		writeBadRequest(w, fmt.Sprintf("event: required, one of %v, e.g. {\"event\":\"power-loss\"}", Events()))
		return
	}
	err := m.Event(id, *body.Event)
	m.writeStatus(w, id, err)
	m.logControl("event "+string(*body.Event), id, err)
}

func (m *Mock) controlFaults(w http.ResponseWriter, r *http.Request, id string) {
	var edit func(*Faults) error
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		st, err := m.Status(id)
		if err != nil {
			writeControlError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st.Faults)
		return
	case http.MethodPut:
		data, ok := readBody(w, r)
		if !ok {
			return
		}
		edit = func(f *Faults) error {
			var replacement Faults
			if err := replacement.UnmarshalJSON(data); err != nil {
				return err
			}
			*f = replacement
			return nil
		}
	case http.MethodPatch:
		data, ok := readBody(w, r)
		if !ok {
			return
		}
		edit = func(f *Faults) error { return f.UnmarshalJSON(data) } // merges
	case http.MethodDelete:
		edit = func(f *Faults) error {
			*f = Faults{}
			return nil
		}
	default:
		allowMethod(w, r, http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodDelete)
		return
	}
	err := m.editFaults(id, edit)
	if err != nil && errors.Is(err, ErrInvalidInput) {
		err = fmt.Errorf("faults: %w", err)
	}
	m.writeStatus(w, id, err)
	m.logControl(r.Method+" faults", id, err)
}

func (m *Mock) controlPower(w http.ResponseWriter, r *http.Request, id string) {
	if !allowMethod(w, r, http.MethodPut) {
		return
	}
	var body struct {
		State *PowerState `json:"state"`
	}
	if !readControlBody(w, r, &body) {
		return
	}
	if body.State == nil {
		writeBadRequest(w, `state: required, "On" or "Off", e.g. {"state":"Off"}`)
		return
	}
	err := m.SetPower(id, *body.State)
	m.writeStatus(w, id, err)
	m.logControl("power "+string(*body.State), id, err)
}

func (m *Mock) controlProfile(w http.ResponseWriter, r *http.Request, id string) {
	if !allowMethod(w, r, http.MethodPut) {
		return
	}
	var body struct {
		Profile *Profile `json:"profile"`
	}
	if !readControlBody(w, r, &body) {
		return
	}
	if body.Profile == nil {
		writeBadRequest(w, fmt.Sprintf(`profile: required, one of %v, e.g. {"profile":"idrac9"}`, Profiles()))
		return
	}
	err := m.SetProfile(id, *body.Profile)
	m.writeStatus(w, id, err)
	m.logControl("profile "+string(*body.Profile), id, err)
}

// writeStatus answers a control request: the error if there is one, else
// the system's status after the change.
func (m *Mock) writeStatus(w http.ResponseWriter, id string, err error) {
	if err != nil {
		writeControlError(w, err)
		return
	}
	st, err := m.Status(id)
	if err != nil {
		writeControlError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func writeControlError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrUnknownSystem):
		writeError(w, http.StatusNotFound, msgResourceMissingAtURI, err.Error()+"; GET /mock/systems lists the ids", "")
	case errors.Is(err, ErrNotApplicable):
		writeError(w, http.StatusConflict, msgResourceInUse, err.Error(), "")
	case errors.Is(err, ErrInvalidInput):
		writeBadRequest(w, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, msgInternalError, err.Error(), "")
	}
}

func writeBadRequest(w http.ResponseWriter, message string) {
	writeError(w, http.StatusBadRequest, msgPropertyValueNotInList, message, "")
}

// readControlBody strictly decodes the body into v, answering 400 itself on
// failure.
func readControlBody(w http.ResponseWriter, r *http.Request, v any) bool {
	data, ok := readBody(w, r)
	if !ok {
		return false
	}
	if err := decodeStrict(data, v); err != nil {
		writeError(w, http.StatusBadRequest, msgMalformedJSON, "The request body is not acceptable JSON: "+err.Error(), "")
		return false
	}
	return true
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	data, err := readAllLimited(w, r)
	if err != nil {
		writeError(w, http.StatusBadRequest, msgMalformedJSON, "Cannot read the request body: "+err.Error(), "")
		return nil, false
	}
	return data, true
}

// allowMethod answers 405 itself unless r uses one of methods.
func allowMethod(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	if contains(methods, r.Method) {
		return true
	}
	allowed := strings.Join(methods, ", ")
	w.Header().Set("Allow", allowed)
	writeError(w, http.StatusMethodNotAllowed, msgActionNotSupported,
		fmt.Sprintf("The method %s is not allowed on %s; allowed: %s.", truncate(r.Method, 20), truncate(r.URL.Path, 200), allowed), "")
	return false
}

func (m *Mock) logControl(action, id string, err error) {
	if m.log != nil {
		m.log.Info("control", "action", action, "system", id, "result", resultText(err))
	}
}
