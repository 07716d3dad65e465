// Package redfishmocktest starts a redfishmock.Mock on 127.0.0.1 for other
// packages' tests, the way net/http/httptest starts a handler.
package redfishmocktest

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/bmcfence/bmcfence/bmc/redfishmock"
)

// Server is a running mock. It stops by itself when the test ends.
type Server struct {
	// URL is the base URL, "https://127.0.0.1:PORT" (or http:// from StartHTTP).
	URL string
	// Host and Port split URL's host, for clients that take them apart.
	Host, Port string
	// Mock is the handler, for driving faults, events and power from the test.
	Mock *redfishmock.Mock
	// CAPEM is the served certificate in PEM and CertPool holds it (nil for
	// plain HTTP), so clients can verify TLS instead of skipping it.
	CAPEM    []byte
	CertPool *x509.CertPool

	srv *httptest.Server
}

// Start serves cfg over TLS with a fresh self-signed certificate for
// 127.0.0.1. It fails the test if cfg is invalid.
func Start(tb testing.TB, cfg redfishmock.Config, opts ...redfishmock.Option) *Server {
	tb.Helper()
	return start(tb, cfg, true, opts)
}

// StartHTTP serves cfg over plain HTTP.
func StartHTTP(tb testing.TB, cfg redfishmock.Config, opts ...redfishmock.Option) *Server {
	tb.Helper()
	return start(tb, cfg, false, opts)
}

func start(tb testing.TB, cfg redfishmock.Config, useTLS bool, opts []redfishmock.Option) *Server {
	tb.Helper()
	mock, err := redfishmock.New(cfg, opts...)
	if err != nil {
		tb.Fatalf("redfishmock.New: %v", err)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen on 127.0.0.1: %v", err)
	}
	srv := httptest.NewUnstartedServer(mock)
	srv.Listener = listener
	s := &Server{Mock: mock, srv: srv}
	if useTLS {
		cert, caPEM, err := redfishmock.SelfSignedCert("127.0.0.1")
		if err != nil {
			tb.Fatalf("self-signed certificate: %v", err)
		}
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		srv.StartTLS()
		s.CAPEM = caPEM
		s.CertPool = x509.NewCertPool()
		s.CertPool.AddCert(cert.Leaf)
	} else {
		srv.Start()
	}
	// Release hung requests first, or Close would wait for them forever.
	tb.Cleanup(func() {
		mock.Close()
		srv.Close()
	})
	s.URL = srv.URL
	u, err := url.Parse(srv.URL)
	if err != nil {
		tb.Fatalf("parse server URL: %v", err)
	}
	s.Host, s.Port = u.Hostname(), u.Port()
	return s
}

// Client returns an HTTP client that trusts the server's certificate.
func (s *Server) Client() *http.Client {
	return s.srv.Client()
}
