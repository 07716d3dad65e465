package redfish

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/bmcfence/bmcfence/bmc"
)

// resetNmi is the ResetType of a diagnostic interrupt.
const resetNmi = "Nmi"

var _ bmc.Diagnoser = (*Client)(nil)

// Diagnostic sends ComputerSystem.Reset Nmi: a diagnostic interrupt, for a
// kernel set up for kdump to write its crash dump. Only where the system
// lists Nmi in its allowed ResetTypes (iDRAC, iLO, XCC, OpenBMC,
// Supermicro do; AMI's multi-system BMCs do not): a system that advertises
// nothing, or not Nmi, is refused with ErrUnsupported before anything is
// sent, since an unknown ResetType may be taken for another. The power
// state does not change; what the kernel does is up to it.
func (c *Client) Diagnostic(ctx context.Context) (bmc.Result, error) {
	var res bmc.Result
	err := c.run(ctx, bmc.OpDiagnostic, &res, func(cn *conn) error {
		sys, _, target, allowed, err := cn.resetAction()
		if err != nil {
			return err
		}
		if !slices.Contains(allowed, resetNmi) {
			what := "advertises no ResetType"
			switch {
			case sys == nil:
				what = "answers 503 without Retry-After, as an AMI system does while its host is off, so its ResetTypes are unknown"
			case len(allowed) > 0:
				what = "allows " + strings.Join(allowed, ", ")
			}
			return fmt.Errorf("%w: the system does not list Nmi among its ResetTypes (it %s); nothing was sent", bmc.ErrUnsupported, what)
		}
		res.Sent = "ComputerSystem.Reset " + resetNmi
		return cn.post(target, resetNmi, &res)
	})
	return res, err
}
