package agent

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	clocktesting "k8s.io/utils/clock/testing"
)

var tlsT0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// writePair writes a certificate for 127.0.0.1 into dir as a
// kubernetes.io/tls Secret's files, and returns it.
func writePair(t *testing.T, dir string) *tls.Certificate {
	t.Helper()
	c, err := selfSignedCert([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, c, c)
	return c
}

// writeFiles writes cert's certificate and key's key.
func writeFiles(t *testing.T, dir string, cert, key *tls.Certificate) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// metricsServer serves a fake /metrics over TLS from certs, on a free
// loopback port, as the agent's serve does.
func metricsServer(t *testing.T, certs *certSource) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "bmcfence_build_info 1\n") })
	s := start(ln, mux, certs.tlsConfig(), zap.NewNop())
	t.Cleanup(func() { _ = s.Close() })
	return ln.Addr().String()
}

// served returns the certificate a new TLS connection to addr is given.
func served(t *testing.T, addr string) []byte {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test compares the certificate itself
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

// A rotated certificate (the Secret's files replaced, as cert-manager does)
// is served on the next connection once certCheckInterval has passed,
// without a restart; a half-written rotation (a new certificate with the
// old key) keeps the previous pair.
func TestMetricsTLSReloadsARotatedCertificate(t *testing.T) {
	dir := t.TempDir()
	first := writePair(t, dir)
	clk := clocktesting.NewFakeClock(tlsT0)
	certs, err := newCertSource(dir, nil, clk, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	addr := metricsServer(t, certs)
	if got := served(t, addr); !bytes.Equal(got, first.Certificate[0]) {
		t.Fatal("not serving the certificate from the directory")
	}
	second := writePair(t, dir)
	if got := served(t, addr); !bytes.Equal(got, first.Certificate[0]) {
		t.Error("read the files again before certCheckInterval")
	}
	clk.Step(certCheckInterval)
	if got := served(t, addr); !bytes.Equal(got, second.Certificate[0]) {
		t.Fatal("the rotated certificate is not served")
	}
	third, err := selfSignedCert([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, third, second) // the certificate rotated, its key not yet
	clk.Step(certCheckInterval)
	if got := served(t, addr); !bytes.Equal(got, second.Certificate[0]) {
		t.Error("a half-written rotation replaced the pair")
	}
	writeFiles(t, dir, third, third)
	clk.Step(certCheckInterval)
	if got := served(t, addr); !bytes.Equal(got, third.Certificate[0]) {
		t.Error("the completed rotation is not served")
	}
	// A client that trusts the served certificate verifies it.
	pool := x509.NewCertPool()
	pool.AddCert(third.Leaf)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("a client trusting the certificate: %v", err)
	}
	resp.Body.Close()
}

// With no certificate given (or none there yet) /metrics is still TLS, with
// a self-signed certificate; one that appears later is picked up.
func TestMetricsTLSSelfSignedUntilACertificateAppears(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(tlsT0)
	certs, err := newCertSource(dir, []string{"127.0.0.1", "bmcfence-agent-metrics.bmcfence-system.svc"}, clk, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	addr := metricsServer(t, certs)
	self, err := x509.ParseCertificate(served(t, addr))
	if err != nil {
		t.Fatal(err)
	}
	if err := self.VerifyHostname("bmcfence-agent-metrics.bmcfence-system.svc"); err != nil {
		t.Errorf("the self-signed certificate does not name the Service: %v", err)
	}
	pair := writePair(t, dir)
	clk.Step(certCheckInterval)
	if got := served(t, addr); !bytes.Equal(got, pair.Certificate[0]) {
		t.Error("the certificate that appeared is not served")
	}
}

// A scrape over plain HTTP gets a 400 and no metrics: the bearer token it
// sent in clear reached nothing.
func TestMetricsRefusesAPlainHTTPScrape(t *testing.T) {
	clk := clocktesting.NewFakeClock(tlsT0)
	certs, err := newCertSource("", []string{"127.0.0.1"}, clk, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	addr := metricsServer(t, certs)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("plain HTTP scrape: %v, want the server's 400", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(body), "bmcfence_build_info") {
		t.Errorf("plain HTTP scrape: %d %q, want a 400 and no metrics", resp.StatusCode, body)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a self-signed certificate
	resp, err = (&http.Client{Transport: tr}).Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "bmcfence_build_info") {
		t.Errorf("HTTPS scrape: %d %q", resp.StatusCode, body)
	}
}

// /healthz fails while this replica leads and has stopped renewing its
// Lease (cluster.LeaderHealth; TestLeaderHealthFailsWhenRenewalsStop drives
// it through client-go's elector on a fake clock), so the kubelet restarts
// it.
func TestHealthzFailsWhenTheLeaderStopsRenewing(t *testing.T) {
	h := &fakeLeaderHealth{}
	a := &Agent{leaderHealth: h}
	probe := func() (int, string) {
		rec := httptest.NewRecorder()
		a.healthz(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, _ := probe(); code != http.StatusOK {
		t.Fatalf("renewing: %d", code)
	}
	h.err = errors.New("leading, but the Lease was last renewed 36s ago (limit 35s): this replica stopped renewing and must be restarted")
	if code, body := probe(); code != http.StatusInternalServerError || !strings.Contains(body, "stopped renewing") {
		t.Errorf("a leader that stopped renewing: %d %q, want 500 saying why", code, body)
	}
}

type fakeLeaderHealth struct{ err error }

func (f *fakeLeaderHealth) Check() error { return f.err }
