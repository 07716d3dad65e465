package bmclib

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/ipmisim"
)

func ipmiAdapter(t *testing.T, addr, user, password string, timeout time.Duration) *Adapter {
	t.Helper()
	ep, err := bmc.ParseAddress("ipmi://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(bmc.Target{Address: ep, Credentials: bmc.Credentials{Username: user, Password: bmc.Secret(password)}, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestIPMIPowerStatus(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprint("on=", on), func(t *testing.T) {
			sim := ipmisim.StartT(t, ipmisim.Options{InitialPower: on})
			a := ipmiAdapter(t, sim.Address(), sim.Username(), sim.Password(), 5*time.Second)
			got, err := a.PowerStatus(context.Background())
			if err != nil {
				t.Fatalf("PowerStatus: %v", err)
			}
			want, raw := bmc.PowerOff, "Chassis Power is off\n"
			if on {
				want, raw = bmc.PowerOn, "Chassis Power is on\n"
			}
			if got.State != want || got.Raw != raw || got.Provider != "ipmitool" || got.Attempts != 1 || got.Latency <= 0 {
				t.Errorf("PowerStatus = %+v, want state %v raw %q from ipmitool in 1 attempt", got, want, raw)
			}
		})
	}
}

func TestIPMIPowerOffAndOn(t *testing.T) {
	sim := ipmisim.StartT(t, ipmisim.Options{InitialPower: true})
	a := ipmiAdapter(t, sim.Address(), sim.Username(), sim.Password(), 5*time.Second)
	ctx := context.Background()

	if _, err := a.PowerOff(ctx); err != nil {
		t.Fatalf("PowerOff: %v", err)
	}
	if on, _ := sim.Power(); on {
		t.Fatal("machine still on after PowerOff")
	}
	if !slices.Contains(sim.Commands(), "set power 0") {
		t.Errorf("commands %q: want a chassis power off", sim.Commands())
	}
	if slices.ContainsFunc(sim.Commands(), func(c string) bool { return strings.Contains(c, "reset") || strings.Contains(c, "cycle") }) {
		t.Errorf("commands %q: power-off must never reset or cycle", sim.Commands())
	}
	if st, err := a.PowerStatus(ctx); err != nil || st.State != bmc.PowerOff {
		t.Fatalf("read-back = %v, %v; want Off", st.State, err)
	}
	if _, err := a.PowerOn(ctx); err != nil {
		t.Fatalf("PowerOn: %v", err)
	}
	if st, err := a.PowerStatus(ctx); err != nil || st.State != bmc.PowerOn {
		t.Fatalf("read-back = %v, %v; want On", st.State, err)
	}
}

// A lying BMC: ForceOff is acknowledged and ignored. The adapter reports
// success (that is all the BMC said); only the read-back tells the truth.
func TestIPMIStuckBMCIsCaughtByReadBack(t *testing.T) {
	sim := ipmisim.StartT(t, ipmisim.Options{InitialPower: true})
	if err := sim.SetBehavior(ipmisim.Behavior{Stuck: true}); err != nil {
		t.Fatal(err)
	}
	a := ipmiAdapter(t, sim.Address(), sim.Username(), sim.Password(), 5*time.Second)
	if _, err := a.PowerOff(context.Background()); err != nil {
		t.Fatalf("PowerOff: %v", err)
	}
	st, err := a.PowerStatus(context.Background())
	if err != nil || st.State != bmc.PowerOn {
		t.Fatalf("read-back = %v, %v; want On (the BMC ignored the command)", st.State, err)
	}
}

func TestIPMIErrors(t *testing.T) {
	tests := []struct {
		name     string
		behavior ipmisim.Behavior
		password string
		op       func(context.Context, *Adapter) error
		want     error
	}{
		{"failing power-off", ipmisim.Behavior{Failing: true}, "", func(ctx context.Context, a *Adapter) error { _, err := a.PowerOff(ctx); return err }, bmc.ErrBMC},
		{"failing status", ipmisim.Behavior{StatusFails: true}, "", func(ctx context.Context, a *Adapter) error { _, err := a.PowerStatus(ctx); return err }, bmc.ErrBMC},
		{"wrong password", ipmisim.Behavior{}, "not-the-password", func(ctx context.Context, a *Adapter) error { _, err := a.PowerStatus(ctx); return err }, bmc.ErrAuth},
		{"identity", ipmisim.Behavior{}, "", func(ctx context.Context, a *Adapter) error { _, err := a.Identity(ctx); return err }, bmc.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim := ipmisim.StartT(t, ipmisim.Options{InitialPower: true})
			if err := sim.SetBehavior(tt.behavior); err != nil {
				t.Fatal(err)
			}
			password := sim.Password()
			if tt.password != "" {
				password = tt.password
			}
			a := ipmiAdapter(t, sim.Address(), sim.Username(), password, 5*time.Second)
			err := tt.op(context.Background(), a)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error = %v, want %v", err, tt.want)
			}
			var op *bmc.OpError
			if !errors.As(err, &op) || op.Protocol != bmc.IPMI {
				t.Errorf("error %v is not an IPMI *bmc.OpError", err)
			}
			if strings.Contains(err.Error(), password) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q leaks the password or spans lines", err)
			}
		})
	}
}

func TestIPMIUnreachableIsBoundedByTimeout(t *testing.T) {
	if err := ipmisim.Available(); err != nil {
		t.Skip(err)
	}
	// A UDP port nobody listens on.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	a := ipmiAdapter(t, addr, "admin", "secret-pw", 1500*time.Millisecond)
	start := time.Now()
	_, err = a.PowerStatus(context.Background())
	if !errors.Is(err, bmc.ErrTimeout) && !errors.Is(err, bmc.ErrUnreachable) {
		t.Fatalf("error = %v, want ErrTimeout or ErrUnreachable", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("unreachable BMC took %s; the 1.5 s timeout must bound it", took)
	}
}

// The password must travel only in ipmitool's environment: wrap ipmitool
// in a script that records its argv.
func TestIPMIPasswordNeverInArgv(t *testing.T) {
	sim := ipmisim.StartT(t, ipmisim.Options{InitialPower: true})
	real, err := exec.LookPath("ipmitool")
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	argvLog := filepath.Join(dir, "argv")
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s\\n' \"$*\" >> '%s'\nexec '%s' \"$@\"\n", argvLog, real)
	if err := os.WriteFile(filepath.Join(dir, "ipmitool"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	a := ipmiAdapter(t, sim.Address(), sim.Username(), sim.Password(), 5*time.Second)
	if _, err := a.PowerOff(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(argvLog)
	if err != nil {
		t.Fatal(err)
	}
	argv := string(b)
	if !strings.Contains(argv, "-E") || !strings.Contains(argv, "-C 3") {
		t.Errorf("ipmitool argv %q: want -E (password from env) and -C 3", argv)
	}
	if strings.Contains(argv, sim.Password()) {
		t.Errorf("ipmitool argv %q contains the password", argv)
	}
}
