package fence

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func remediation() nodeOpt { return func(n *NodeView) { n.Remediation = true } }

// Detection gates only the start of a fence: a silent node is suspected
// under external detection only when a remediation CR asks for it.
func TestDetectionGatesTheStartOfAFence(t *testing.T) {
	tests := []struct {
		name      string
		detection Detection
		node      NodeView
		want      Phase
	}{
		{"builtin: silence is enough", DetectBuiltin, view(), Suspect},
		{"builtin: a remediation CR changes nothing", DetectBuiltin, view(remediation()), Suspect},
		{"external: silence alone is not enough", DetectExternal, view(), Healthy},
		{"external: silence and a remediation CR", DetectExternal, view(remediation()), Suspect},
		{"both: silence is enough", DetectBoth, view(), Suspect},
		{"both: silence and a remediation CR", DetectBoth, view(remediation()), Suspect},
		// The remediation CR never replaces the Lease witness.
		{"external: a remediation CR for a renewing node", DetectExternal, view(remediation(), heartbeat(sec(15))), Healthy},
		{"external: a remediation CR for an excluded node", DetectExternal, view(remediation(), excluded()), Healthy},
		{"external: a remediation CR for a node without a BMC", DetectExternal, view(remediation(), noBMC()), Healthy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(t)
			d.p.Detection = tt.detection
			d.step(tick(tt.node, at(sec(20))), at(sec(20)))
			d.wantPhase(tt.want)
		})
	}
}

// Under external detection, a withdrawn remediation CR (NHC saw the node
// healthy, or timed out) stops a fence whose ForceOff the BMC has not
// accepted; after an accepted ForceOff the node is off and the fence goes
// on to the taint.
func TestWithdrawnRemediationStopsOnlyBeforeAnAcceptedForceOff(t *testing.T) {
	withdrawBeforeAcceptance := func(d *driver) {
		d.suspect(view(remediation()))
		d.step(reading(view(), at(sec(21)), PowerOn), at(sec(21)))
	}
	withdrawAfterAcceptance := func(d *driver) {
		n := view(remediation())
		d.suspect(n)
		d.step(reading(n, at(sec(20.1)), PowerOff), at(sec(20.2)))
		d.step(result(n, at(sec(20.3)), ActPowerOff, ""), at(sec(20.3)))
		d.step(reading(view(), at(sec(22.2)), PowerOff), at(sec(22.2)))
		d.step(reading(view(), at(sec(25.2)), PowerOff), at(sec(25.2)))
		d.step(reading(view(), at(sec(28.2)), PowerOff), at(sec(28.2)))
	}
	tests := []struct {
		name string
		run  func(*driver)
		want Phase
	}{
		{"withdrawn while the BMC reads On", withdrawBeforeAcceptance, Healthy},
		{"withdrawn after our ForceOff was accepted", withdrawAfterAcceptance, Tainting},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(t)
			d.p.Detection = DetectExternal
			tt.run(d)
			d.wantPhase(tt.want)
		})
	}
}

func TestParseDetection(t *testing.T) {
	tests := []struct {
		in      string
		want    Detection
		wantErr error
	}{
		{"builtin", DetectBuiltin, nil},
		{"external", DetectExternal, nil},
		{"both", DetectBoth, nil},
		{"nhc", DetectBuiltin, ErrInvalidPolicy},
		{"", DetectBuiltin, ErrInvalidPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDetection(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	p := DefaultPolicy()
	p.Detection = numDetections
	if err := p.Validate(); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("Validate with detection %d: %v, want ErrInvalidPolicy", p.Detection, err)
	}
}
