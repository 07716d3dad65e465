package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/fence"
)

// Diagnoser is optionally implemented by a PowerController whose BMC can
// send its host a diagnostic interrupt (an NMI: Redfish ResetType Nmi where
// the system lists it, IPMI chassis power diag): bmc.Diagnoser. A node whose
// controller lacks it gets no crash dump; its fence goes on (the engine says
// so: FenceDiagnoseSkipped).
type Diagnoser interface {
	Diagnostic(ctx context.Context) (bmc.Result, error)
}

// diagnose sends the diagnostic interrupt of the state s (fence.ActDiagnose),
// decided on the view decided, through the gate every ForceOff of a machine
// that may run passes in the runner: the server recheck against the
// decided view and the fencing token, then the BMC target's identity
// checked right before. The interrupt goes to the node's BMC itself (level
// 1): a PDU level has none. Result.NotSent says it never reached the BMC
// (the engine then skips the dump); an error wrapping ErrConflict means the
// fencing token is no longer ours.
func (r *Runner) diagnose(ctx context.Context, name string, rec *record, decided fence.NodeView) (fence.Result, error) {
	res := fence.Result{Action: fence.ActDiagnose, NotSent: true}
	c, err := r.opts.Cluster.Recheck(ctx, name)
	if err != nil {
		return res, fmt.Errorf("not acting: cannot read the node from the API server: %w", err)
	}
	if err := c.blocks(r.token(rec), true, decided); err != nil {
		return res, err
	}
	ctrl, ok := r.opts.Inventory.Controller(name)
	if !ok {
		return res, errors.New("no BMC entry")
	}
	res.Target = ctrl.Key()
	d, ok := ctrl.(Diagnoser)
	if !ok {
		return res, fmt.Errorf("%w: this node's BMC entry has no diagnostic interrupt", bmc.ErrUnsupported)
	}
	if err := r.acquire(ctx); err != nil {
		return res, err
	}
	defer r.release()
	if fence.Enabled(fence.CheckIdentity) {
		if err := r.verify(ctx, rec, ctrl); err != nil {
			return res, fmt.Errorf("not acting: identity check failed: %w", err)
		}
	}
	_, err = d.Diagnostic(ctx)
	// A BMC that refuses before sending (a Redfish system that does not
	// list Nmi, a protocol without one) sent nothing either.
	res.NotSent = errors.Is(err, bmc.ErrUnsupported)
	return res, err
}
