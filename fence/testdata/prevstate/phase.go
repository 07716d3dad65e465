package fence

import "fmt"

// Phase is where a node is in the fence lifecycle (docs/design.md §1).
type Phase uint8

const (
	// Healthy: nothing to do. Also the phase of nodes we cannot fence
	// (excluded, no BMC), which are watched but never acted on.
	Healthy Phase = iota
	// Suspect: unhealthy for SuspectAfter; reading the BMC.
	Suspect
	// ConfirmingOff: the BMC read Off; collecting a settled run of Off reads.
	ConfirmingOff
	// PoweringOff: ForceOff sent; reading back until Off or PowerTimeout.
	PoweringOff
	// Tainting: Off is settled; applying the out-of-service taint.
	Tainting
	// Detaching: tainted; waiting for pods and VolumeAttachments to go.
	Detaching
	// Fenced: nothing of the node's workload remains bound to it.
	Fenced
	// PoweringOn: power-on sent after detach (policy or unfence).
	PoweringOn
	// Recovering: waiting for the node to be Ready with a fresh heartbeat.
	Recovering
	// Untainting: removing our taint.
	Untainting
	// Stuck: needs a human (lying BMC, abort). See State.StuckReason.
	Stuck
	// Maintenance: the node is under planned maintenance; never fenced.
	Maintenance

	numPhases
)

var phaseNames = [numPhases]string{
	Healthy:       "Healthy",
	Suspect:       "Suspect",
	ConfirmingOff: "ConfirmingOff",
	PoweringOff:   "PoweringOff",
	Tainting:      "Tainting",
	Detaching:     "Detaching",
	Fenced:        "Fenced",
	PoweringOn:    "PoweringOn",
	Recovering:    "Recovering",
	Untainting:    "Untainting",
	Stuck:         "Stuck",
	Maintenance:   "Maintenance",
}

// Phases lists every phase, for metrics and exhaustive tests.
func Phases() []Phase {
	ps := make([]Phase, numPhases)
	for i := range ps {
		ps[i] = Phase(i)
	}
	return ps
}

func (p Phase) String() string {
	if p < numPhases {
		return phaseNames[p]
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// ParsePhase is the inverse of String.
func ParsePhase(s string) (Phase, error) {
	for i, name := range phaseNames {
		if name == s {
			return Phase(i), nil
		}
	}
	return 0, fmt.Errorf("unknown phase %q", s)
}

// InFlight reports whether a node in this phase counts against
// MaxConcurrentFences: from admission until the taint is on. After that the
// decision is made and only waiting remains.
func (p Phase) InFlight() bool {
	switch p {
	case ConfirmingOff, PoweringOff, Tainting:
		return true
	case Healthy, Suspect, Detaching, Fenced, PoweringOn, Recovering, Untainting, Stuck, Maintenance:
		return false
	}
	return false
}

// PreTaint reports whether the out-of-service taint has not been applied yet
// in this phase, so that giving up leaves nothing behind.
func (p Phase) PreTaint() bool {
	switch p {
	case Healthy, Suspect, ConfirmingOff, PoweringOff, Tainting:
		return true
	case Detaching, Fenced, PoweringOn, Recovering, Untainting, Stuck, Maintenance:
		return false
	}
	return false
}
