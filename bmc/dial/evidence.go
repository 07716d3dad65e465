package dial

import (
	"context"
	"fmt"

	"github.com/bmcfence/bmcfence/bmc"
)

var _ bmc.EvidenceReader = (*Adapter)(nil)

// ReadEvidence reads the hung-node evidence of the target's BMC (its host
// watchdog, boot marker and log entries: bmc.EvidenceReport), where the
// protocol's client can.
func (a *Adapter) ReadEvidence(ctx context.Context) (bmc.EvidenceReport, error) {
	r, ok := a.Controller.(bmc.EvidenceReader)
	if !ok {
		return bmc.EvidenceReport{}, &bmc.OpError{Op: bmc.OpReadEvidence, Protocol: a.target.Address.Protocol,
			Address: a.target.Address.String(), Err: fmt.Errorf("%w: no evidence reader for this protocol", bmc.ErrUnsupported)}
	}
	return r.ReadEvidence(ctx)
}

var _ bmc.Diagnoser = (*Adapter)(nil)

// Diagnostic sends the host an NMI for a crash dump (Redfish ResetType Nmi
// where the system lists it; IPMI chassis power diag).
func (a *Adapter) Diagnostic(ctx context.Context) (bmc.Result, error) {
	d, ok := a.Controller.(bmc.Diagnoser)
	if !ok {
		return bmc.Result{}, &bmc.OpError{Op: bmc.OpDiagnostic, Protocol: a.target.Address.Protocol,
			Address: a.target.Address.String(), Err: fmt.Errorf("%w: no diagnostic interrupt for this protocol", bmc.ErrUnsupported)}
	}
	return d.Diagnostic(ctx)
}
