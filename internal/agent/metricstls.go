package agent

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"
)

// certCheckInterval is how often, at most, the certificate files are read
// again to see whether they changed: on a TLS handshake, never between
// (Prometheus keeps its connections, so handshakes are few). A rotated
// Secret reaches the mounted files within the kubelet's sync period (about
// a minute); ten seconds more is nothing next to a certificate's lifetime.
const certCheckInterval = 10 * time.Second

// selfSignedValidity: the self-signed certificate lives as long as the
// process, which a year outlasts.
const selfSignedValidity = 365 * 24 * time.Hour

// The files of a kubernetes.io/tls Secret.
const (
	certFile = "tls.crt"
	keyFile  = "tls.key"
)

// certSource gives the /metrics server its certificate: tls.crt and
// tls.key from dir, read again when they change, else a self-signed one
// made at start. A rotation caught half-way (a new certificate with the old
// key) keeps the previous pair until the files agree again.
type certSource struct {
	dir   string
	clock clock.PassiveClock
	log   *zap.Logger

	mu         sync.Mutex
	current    *tls.Certificate
	fromFiles  bool
	loadedSum  [32]byte // of the files' contents we loaded, or last refused
	checked    time.Time
	selfSigned *tls.Certificate
}

// newCertSource loads dir's pair, or makes the self-signed certificate
// (names: the hosts it answers for, as SANs) when dir is empty or has no
// pair yet.
func newCertSource(dir string, names []string, clk clock.PassiveClock, log *zap.Logger) (*certSource, error) {
	s := &certSource{dir: dir, clock: clk, log: log}
	self, err := selfSignedCert(names, clk.Now())
	if err != nil {
		return nil, fmt.Errorf("making a self-signed certificate for /metrics: %w", err)
	}
	s.selfSigned, s.current = self, self
	if dir == "" {
		log.Info("serving /metrics over TLS with a self-signed certificate made at start: scrapers cannot verify it (set server.metricsCertDir to a mounted kubernetes.io/tls Secret to serve one they can)")
		return s, nil
	}
	s.mu.Lock()
	s.reloadLocked(true)
	fromFiles := s.fromFiles
	s.mu.Unlock()
	if !fromFiles {
		log.Warn("no usable tls.crt and tls.key in server.metricsCertDir yet: serving /metrics with a self-signed certificate until they appear", zap.String("dir", dir))
	}
	return s, nil
}

// GetCertificate is tls.Config's: the current pair, after reading the
// files again if certCheckInterval has passed.
func (s *certSource) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir != "" && s.clock.Since(s.checked) >= certCheckInterval {
		s.reloadLocked(false)
	}
	return s.current, nil
}

// reloadLocked reads the pair and swaps it in if it changed and is valid.
func (s *certSource) reloadLocked(first bool) {
	s.checked = s.clock.Now()
	certPEM, err1 := os.ReadFile(filepath.Join(s.dir, certFile))
	keyPEM, err2 := os.ReadFile(filepath.Join(s.dir, keyFile))
	if err := errors.Join(err1, err2); err != nil {
		if s.fromFiles {
			s.log.Warn("cannot read the /metrics certificate files; serving the last ones loaded", zap.String("dir", s.dir), zap.Error(err))
		}
		return
	}
	sum := sha256.Sum256(append(append(bytes.Clone(certPEM), 0), keyPEM...))
	if sum == s.loadedSum && !first {
		return
	}
	s.loadedSum = sum
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// Mid-rotation (the certificate written, not yet its key), or a
		// bad Secret: keep what we serve, say so once per content.
		s.log.Warn("the /metrics certificate files are not a valid pair; serving the previous certificate", zap.String("dir", s.dir), zap.Error(err))
		return
	}
	if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil {
		pair.Leaf = leaf
		if !first {
			s.log.Info("reloaded the /metrics certificate", zap.String("dir", s.dir), zap.Time("notAfter", leaf.NotAfter))
		}
	}
	s.current, s.fromFiles = &pair, true
}

// tlsConfig is the /metrics server's: TLS 1.2 and later, HTTP/1.1 only
// (controller-runtime's metrics server turns HTTP/2 off too: its rapid
// reset attacks need no authentication).
func (s *certSource) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.GetCertificate, NextProtos: []string{"http/1.1"}}
}

// selfSignedCert makes an ECDSA P-256 certificate for names (DNS names or
// IP addresses).
func selfSignedCert(names []string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "bmcfence-agent metrics (self-signed)"},
		NotBefore:             now.Add(-time.Hour), // a scraper's clock a little behind ours
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if n != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// metricsNames are the names the self-signed certificate is made for: the
// metrics Service's, the pod's, and loopback.
func metricsNames(namespace string) []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	if host, err := os.Hostname(); err == nil {
		names = append(names, host)
	}
	if pod := os.Getenv("POD_NAME"); pod != "" {
		names = append(names, pod)
	}
	if namespace != "" {
		svc := "bmcfence-agent-metrics"
		names = append(names, svc, svc+"."+namespace, svc+"."+namespace+".svc", svc+"."+namespace+".svc.cluster.local")
	}
	return names
}
