package listener

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// A testCA issues certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial struct {
	sync.Mutex
	n int64
}

func nextSerial() *big.Int {
	serial.Lock()
	defer serial.Unlock()
	serial.n++
	return big.NewInt(serial.n)
}

// must panics on err: the test PKI fails only with a broken crypto library.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func newTestCA(name string) *testCA {
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key))
	cert := must(x509.ParseCertificate(der))
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate and key, PEM-encoded, for a server (valid for 127.0.0.1 and
// localhost) or a client.
func (ca *testCA) issue(cn string, server bool) (certPEM, keyPEM []byte) {
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key))
	kder := must(x509.MarshalECPrivateKey(key))
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// keyPair issues a client certificate as a tls.Certificate.
func (ca *testCA) keyPair(cn string) tls.Certificate {
	return must(tls.X509KeyPair(ca.issue(cn, false)))
}

// testPKI is the one CA, server certificate and client certificates of the TLS tests,
// made once per test binary.
var testPKI = sync.OnceValue(func() *pkiSet {
	ca := newTestCA("bifrost test CA")
	p := &pkiSet{ca: ca, pool: x509.NewCertPool()}
	p.pool.AddCert(ca.cert)
	p.serverCert, p.serverKey = ca.issue("bifrost test server", true)
	p.client = ca.keyPair("client-1")
	p.untrusted = newTestCA("someone else's CA").keyPair("intruder")
	return p
})

type pkiSet struct {
	ca                    *testCA
	pool                  *x509.CertPool // trusts ca
	serverCert, serverKey []byte
	client                tls.Certificate // issued by ca
	untrusted             tls.Certificate // issued by another CA
}

// writeFile writes data to name in dir and returns the path.
func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tlsFiles writes the server's certificate and key (and, with clientCA, the CA for client
// certificates) to a temporary directory and returns the tls block naming them.
func tlsFiles(t testing.TB, clientCA bool) *conf.TLS {
	t.Helper()
	p, dir := testPKI(), t.TempDir()
	c := &conf.TLS{
		CertFile:   writeFile(t, dir, "server.pem", p.serverCert),
		KeyFile:    writeFile(t, dir, "server.key", p.serverKey),
		MinVersion: "1.2",
	}
	if clientCA {
		c.ClientCAFile = writeFile(t, dir, "ca.pem", p.ca.pem)
	}
	return c
}

// clientTLS is the configuration of a test client: it trusts the test CA and presents
// the client certificate when asked.
func clientTLS() *tls.Config {
	p := testPKI()
	return &tls.Config{RootCAs: p.pool, ServerName: "localhost", Certificates: []tls.Certificate{p.client}}
}
