// Package redfishmocktest starts a redfishmock.Mock on 127.0.0.1 for other
// packages' tests, the way net/http/httptest starts a handler.
package redfishmocktest

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
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
	s, err := Serve(cfg, useTLS, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Serve starts a mock on 127.0.0.1 on a free port, over TLS with a fresh
// self-signed certificate or over plain HTTP, outside any test (the demo
// uses it). Close stops it.
func Serve(cfg redfishmock.Config, useTLS bool, opts ...redfishmock.Option) (*Server, error) {
	mock, err := redfishmock.New(cfg, opts...)
	if err != nil {
		return nil, fmt.Errorf("redfishmock.New: %w", err)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen on 127.0.0.1: %w", err)
	}
	srv := httptest.NewUnstartedServer(mock)
	srv.Listener = listener
	s := &Server{Mock: mock, srv: srv}
	if useTLS {
		cert, caPEM, err := redfishmock.SelfSignedCert("127.0.0.1")
		if err != nil {
			listener.Close()
			return nil, fmt.Errorf("self-signed certificate: %w", err)
		}
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		srv.StartTLS()
		s.CAPEM = caPEM
		s.CertPool = x509.NewCertPool()
		s.CertPool.AddCert(cert.Leaf)
	} else {
		srv.Start()
	}
	s.URL = srv.URL
	u, err := url.Parse(srv.URL)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("parse server URL: %w", err)
	}
	s.Host, s.Port = u.Hostname(), u.Port()
	return s, nil
}

// Close stops the server, releasing hung requests first (else it would wait
// for them forever).
func (s *Server) Close() {
	s.Mock.Close()
	s.srv.Close()
}

// Client returns an HTTP client that trusts the server's certificate.
func (s *Server) Client() *http.Client {
	return s.srv.Client()
}
