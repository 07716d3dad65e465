package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/fence"
)

// Request is a human's command to the agent, written by the CLI as JSON in
// the AnnotationRequest annotation:
//
//	{"id":"…","kind":"fence|confirm|abort|unfence","user":"…","reason":"…","powerOn":false,"at":"RFC3339"}
//
// The agent acknowledges it by ID: the state write that takes it in also
// removes the annotation, unless a newer request (another ID) replaced it.
type Request struct {
	ID      string
	Kind    fence.CommandKind
	User    string
	Reason  string
	PowerOn bool // unfence: power the node on first
	// Force: a confirm that overrides a contrary live witness (needs a
	// reason).
	Force bool
	At    time.Time
}

// Command is the engine's view of the request.
func (r Request) Command() fence.Command {
	return fence.Command{Kind: r.Kind, User: r.User, Reason: r.Reason, PowerOn: r.PowerOn, Force: r.Force}
}

// ErrMalformedRequest is wrapped by DecodeRequest and EncodeRequest errors.
// A malformed request is ignored (with a warning), never acted upon.
var ErrMalformedRequest = errors.New("malformed fence request")

// ErrAnnotationRequest: a request written as the node annotation
// AnnotationRequest, the channel of kubectl-fence before BMCFenceRequest.
// It is never acted upon: Node-patch rights alone must trigger nothing.
var ErrAnnotationRequest = errors.New("the bmcfence.dev/request annotation is no longer read")

// ErrStaleRequest: a fence or confirm request older than MaxRequestAge when
// first seen. It is ignored (with a warning), never acted upon.
var ErrStaleRequest = errors.New("stale fence request")

// maxRequestLen bounds what DecodeRequest reads: a request is a few hundred
// bytes; anything much larger is not one of ours.
const maxRequestLen = 8 << 10

type wireRequest struct {
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	User    string `json:"user"`
	Reason  string `json:"reason"`
	PowerOn bool   `json:"powerOn"`
	Force   bool   `json:"force,omitempty"`
	At      string `json:"at,omitempty"`
}

// EncodeRequest validates r and returns the annotation value.
func EncodeRequest(r Request) (string, error) {
	kind, err := kindName(r.Kind)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(r.ID) == "" {
		return "", fmt.Errorf("%w: empty id", ErrMalformedRequest)
	}
	w := wireRequest{ID: r.ID, Kind: kind, User: r.User, Reason: r.Reason, PowerOn: r.PowerOn, Force: r.Force}
	if !r.At.IsZero() {
		w.At = r.At.UTC().Format(time.RFC3339Nano)
	}
	b, err := json.Marshal(w)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrMalformedRequest, err)
	}
	return string(b), nil
}

// DecodeRequest parses an annotation value. It is strict about what matters
// (a known kind, an id to acknowledge it by, a valid time) and lenient about
// unknown fields, so a newer CLI's request still works with an older agent.
func DecodeRequest(s string) (Request, error) {
	if len(s) > maxRequestLen {
		return Request{}, fmt.Errorf("%w: %d bytes (at most %d)", ErrMalformedRequest, len(s), maxRequestLen)
	}
	var w wireRequest
	if err := json.Unmarshal([]byte(s), &w); err != nil {
		return Request{}, fmt.Errorf("%w: %w", ErrMalformedRequest, err)
	}
	if strings.TrimSpace(w.ID) == "" {
		return Request{}, fmt.Errorf("%w: no id", ErrMalformedRequest)
	}
	kind, err := parseKind(w.Kind)
	if err != nil {
		return Request{}, err
	}
	r := Request{ID: w.ID, Kind: kind, User: w.User, Reason: w.Reason, PowerOn: w.PowerOn, Force: w.Force}
	if w.At != "" {
		if r.At, err = time.Parse(time.RFC3339, w.At); err != nil {
			return Request{}, fmt.Errorf("%w: at: %w", ErrMalformedRequest, err)
		}
	}
	return r, nil
}

func parseKind(s string) (fence.CommandKind, error) {
	for _, k := range []fence.CommandKind{fence.CmdFence, fence.CmdConfirm, fence.CmdAbort, fence.CmdUnfence} {
		if s == k.String() {
			return k, nil
		}
	}
	return fence.CmdNone, fmt.Errorf("%w: unknown kind %q (want fence, confirm, abort or unfence)", ErrMalformedRequest, truncate(s, 32))
}

func kindName(k fence.CommandKind) (string, error) {
	switch k {
	case fence.CmdFence, fence.CmdConfirm, fence.CmdAbort, fence.CmdUnfence:
		return k.String(), nil
	case fence.CmdNone:
	}
	return "", fmt.Errorf("%w: kind %v is not a request", ErrMalformedRequest, k)
}

// Maintenance is the conventional value of AnnotationMaintenance (any
// non-empty value counts; this one says who and why, what the drain did,
// and how long it holds).
type Maintenance struct {
	By     string `json:"by"`
	Reason string `json:"reason"`
	// Since is when the writer (a CLI, on a laptop's clock) set the mark:
	// shown to humans, never used to judge the expiry (one clock per proof).
	Since time.Time `json:"since"`
	// Cordoned: the drain cordoned the node, which was schedulable before.
	// Undrain uncordons only then: a cordon from before the drain is
	// someone else's.
	Cordoned bool `json:"cordoned,omitempty"`
	// For bounds the maintenance: the agent honours the mark until it has
	// seen it, unchanged, for this long on its own clock (from its first
	// sight of this value; never from Since), then may fence the node again
	// like any other, and says so (FenceMaintenanceExpired). Unset: until
	// undrain.
	For *metav1.Duration `json:"for,omitempty"`
}

// Expiry is m.For, zero when the mark does not expire.
func (m Maintenance) Expiry() time.Duration {
	if m.For == nil || m.For.Duration <= 0 {
		return 0
	}
	return m.For.Duration
}

// EncodeMaintenance returns the annotation value for m.
func EncodeMaintenance(m Maintenance) (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode maintenance: %w", err)
	}
	return string(b), nil
}

// DecodeMaintenance reads an annotation value written by EncodeMaintenance.
// Any other non-empty value still means maintenance; it just says nothing
// more.
func DecodeMaintenance(s string) (Maintenance, error) {
	var m Maintenance
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return Maintenance{}, fmt.Errorf("maintenance annotation is not bmcfence JSON: %w", err)
	}
	return m, nil
}

// truncate keeps error messages about foreign annotation values short.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
