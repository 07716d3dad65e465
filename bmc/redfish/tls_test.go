package redfish

import (
	"crypto/tls"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/bmcfence/bmcfence/bmc"
)

// tlsPeer is an HTTPS server with Go's default key exchanges (the hybrid
// X25519MLKEM768 among them) and a target that trusts its certificate.
func tlsPeer(tb testing.TB) (*httptest.Server, bmc.Target) {
	tb.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	tb.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	ep, err := bmc.ParseAddress(srv.URL)
	if err != nil {
		tb.Fatal(err)
	}
	return srv, bmc.Target{Address: ep, CACertificates: ca}
}

func handshake(tb testing.TB, addr string, cfg *tls.Config) tls.ConnectionState {
	tb.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	st := c.ConnectionState()
	_ = c.Close()
	return st
}

func TestTLSToBMCNegotiatesX25519NotTheHybrid(t *testing.T) {
	srv, target := tlsPeer(t)
	cfg, err := tlsConfig(target)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ServerName = "127.0.0.1"
	goDefault := cfg.Clone()
	goDefault.CurvePreferences = nil
	if st := handshake(t, srv.Listener.Addr().String(), goDefault); st.CurveID != tls.X25519MLKEM768 {
		t.Fatalf("Go's default negotiated %v; the test's server should offer the hybrid X25519MLKEM768", st.CurveID)
	}
	if st := handshake(t, srv.Listener.Addr().String(), cfg); st.CurveID != tls.X25519 {
		t.Fatalf("negotiated %v with a server offering Go's defaults; want X25519", st.CurveID)
	}
}

func TestTargetsBehindOneCAShareOnePool(t *testing.T) {
	_, target := tlsPeer(t)
	a, err := tlsConfig(target)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tlsConfig(target)
	if err != nil {
		t.Fatal(err)
	}
	if a.RootCAs == nil || a.RootCAs != b.RootCAs {
		t.Fatalf("two targets with the same CA bundle got pools %p and %p; want one shared", a.RootCAs, b.RootCAs)
	}
	if _, err := tlsConfig(bmc.Target{Address: target.Address, CACertificates: []byte("not PEM")}); err == nil {
		t.Fatal("a CA bundle without a certificate was accepted")
	}
}

// BenchmarkTLSHandshake is the CPU of one full handshake to a BMC (client
// and server both in this process), with Go's default key exchanges and
// with the ones tlsConfig offers:
//
//	go test -run '^$' -bench TLSHandshake -benchmem ./bmc/redfish/
func BenchmarkTLSHandshake(b *testing.B) {
	srv, target := tlsPeer(b)
	for _, bc := range []struct {
		name   string
		curves []tls.CurveID
	}{
		{"go-default-hybrid", nil},
		{"classical", ClassicalCurves()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg, err := tlsConfig(target)
			if err != nil {
				b.Fatal(err)
			}
			cfg.ServerName, cfg.ClientSessionCache, cfg.CurvePreferences = "127.0.0.1", nil, bc.curves
			b.ReportAllocs()
			for b.Loop() {
				handshake(b, srv.Listener.Addr().String(), cfg)
			}
		})
	}
}
