package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certLifetime only has to outlive a test run; a day leaves room for a
// debugger session and keeps clock skew irrelevant.
const certLifetime = 24 * time.Hour

// ca is the one certificate authority of a control plane. It signs the
// serving certificates and every client certificate, and the apiserver, the
// controller-manager and the scheduler all trust it for client auth.
type ca struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// keyPair is a signed certificate with its key, PEM-encoded, as written to
// disk and embedded in kubeconfigs.
type keyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// ECDSA P-256 throughout: key generation takes microseconds (RSA-2048 takes
// tens of milliseconds per key), and every component accepts it, including
// the service-account token signer (ES256).
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newCA() (*ca, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "bmcfence-e2e-ca"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &ca{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// certSpec describes a leaf certificate: a serving certificate when it has
// SANs, a client certificate (user CN, groups O) otherwise.
type certSpec struct {
	cn     string
	orgs   []string
	ips    []net.IP
	dns    []string
	server bool
}

func (c *ca) issue(spec certSpec) (keyPair, error) {
	key, err := newKey()
	if err != nil {
		return keyPair{}, err
	}
	sn, err := serial()
	if err != nil {
		return keyPair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: spec.cn, Organization: spec.orgs},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		IPAddresses:  spec.ips,
		DNSNames:     spec.dns,
	}
	if spec.server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("issue certificate %q: %w", spec.cn, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// write stores the pair as DIR/NAME.crt and DIR/NAME.key and returns the paths.
func (kp keyPair) write(dir, name string) (certFile, keyFile string, err error) {
	certFile = filepath.Join(dir, name+".crt")
	keyFile = filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, kp.CertPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, kp.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// pki holds everything the control plane's components need on disk.
type pki struct {
	dir          string
	ca           *ca
	caFile       string
	apiserver    keyPair // serving: 127.0.0.1, localhost, kubernetes.default.svc…, service IP
	components   keyPair // serving cert for controller-manager and scheduler (127.0.0.1)
	admin        keyPair // system:masters
	kcm          keyPair // system:kube-controller-manager
	scheduler    keyPair // system:kube-scheduler
	saKeyFile    string  // service-account signing key (controller-manager, apiserver)
	saPubFile    string  // its public half (apiserver --service-account-key-file)
	apiserverCrt string
	apiserverKey string
	compCrt      string
	compKey      string
}

// serviceIP is the first address of --service-cluster-ip-range, the
// ClusterIP of the "kubernetes" Service; the serving certificate must name it.
var serviceIP = net.ParseIP("10.96.0.1")

const serviceCIDR = "10.96.0.0/16"

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c, err := newCA()
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, ca: c, caFile: filepath.Join(dir, "ca.crt")}
	if err := os.WriteFile(p.caFile, c.certPEM, 0o600); err != nil {
		return nil, err
	}
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	specs := []struct {
		dst  *keyPair
		spec certSpec
	}{
		{&p.apiserver, certSpec{cn: "kube-apiserver", server: true,
			ips: []net.IP{net.IPv4(127, 0, 0, 1), serviceIP},
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local"}}},
		{&p.components, certSpec{cn: "e2e-components", server: true, ips: loopback, dns: []string{"localhost"}}},
		{&p.admin, certSpec{cn: "e2e-admin", orgs: []string{"system:masters"}}},
		{&p.kcm, certSpec{cn: "system:kube-controller-manager"}},
		{&p.scheduler, certSpec{cn: "system:kube-scheduler"}},
	}
	for _, s := range specs {
		kp, err := c.issue(s.spec)
		if err != nil {
			return nil, err
		}
		*s.dst = kp
	}
	if p.apiserverCrt, p.apiserverKey, err = p.apiserver.write(dir, "apiserver"); err != nil {
		return nil, err
	}
	if p.compCrt, p.compKey, err = p.components.write(dir, "components"); err != nil {
		return nil, err
	}

	saKey, err := newKey()
	if err != nil {
		return nil, err
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	p.saKeyFile = filepath.Join(dir, "sa.key")
	p.saPubFile = filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(p.saKeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saPubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// nodeClient issues the client certificate a kubelet would hold, so each
// node's kwok acts with the node's own identity and is confined by the Node
// authorizer and NodeRestriction exactly as a kubelet is.
func (p *pki) nodeClient(node string) (keyPair, error) {
	return p.ca.issue(certSpec{cn: "system:node:" + node, orgs: []string{"system:nodes"}})
}
