// Package bmclib runs bmclib v2.3.5's Redfish provider (named "gofish",
// on the gofish v0.20.0 it requires) against bmcfence's Redfish mock: the
// client Tinkerbell and other bmclib users fence and provision with. A
// module of its own: bmclib v2.3.5 cannot build beside a newer gofish.
package bmclib

import (
	"context"
	"testing"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
	"github.com/bmcfence/bmcfence/bmc/redfishmock/redfishmocktest"
)

const (
	adminUser = "admin"
	adminPass = "secret-Pa55"
)

func TestBmclibGofishProvider(t *testing.T) {
	cfg := redfishmock.Config{Username: adminUser, Password: adminPass, Systems: []redfishmock.SystemConfig{{Name: "node-a"}, {Name: "node-b"}}}
	srv := redfishmocktest.Start(t, cfg)

	for _, tc := range []struct {
		name      string
		basicAuth bool
	}{{"session auth", false}, {"basic auth", true}} {
		t.Run(tc.name, func(t *testing.T) {
			if err := srv.Mock.SetPower("2", redfishmock.PowerOn); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := bmclib.NewClient(srv.Host, adminUser, adminPass,
				bmclib.WithRedfishPort(srv.Port),
				bmclib.WithSecureTLS(srv.CertPool),
				bmclib.WithRedfishSystemName("node-b"), // by Name, not Id
				bmclib.WithRedfishUseBasicAuth(tc.basicAuth),
				bmclib.WithPerProviderTimeout(10*time.Second),
			)
			cl.Registry.Drivers = cl.Registry.For("gofish")
			if err := cl.Open(ctx); err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer cl.Close(ctx)

			state, err := cl.GetPowerState(ctx)
			if err != nil || state != "On" {
				t.Fatalf("GetPowerState = %q, %v", state, err)
			}
			if ok, err := cl.SetPowerState(ctx, "off"); !ok || err != nil {
				t.Fatalf("SetPowerState(off) = %v, %v", ok, err)
			}
			if state, err := cl.GetPowerState(ctx); err != nil || state != "Off" {
				t.Errorf("after off: %q, %v", state, err)
			}
			if st := srv.Mock.Statuses(); st[0].PowerState != redfishmock.PowerOn {
				t.Errorf("node-a was touched: %s", st[0].PowerState)
			}
		})
	}
}
