package bridge

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
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestTLSClientCertificate: the bridge connects to a Mosquitto listener that requires a
// client certificate, verifying the remote's against the configured CA.
func TestTLSClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCert(t, dir, "ca", nil, nil)
	newCert(t, dir, "server", ca, caKey)
	newCert(t, dir, "client", ca, caKey)
	plain := freePort(t)
	mq := startMosquitto(t, fmt.Sprintf("cafile %[1]s/ca.pem\ncertfile %[1]s/server.pem\nkeyfile %[1]s/server-key.pem\n"+
		"require_certificate true\nuse_identity_as_username true\nlistener %[2]d 127.0.0.1\n", dir, plain))
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			bc := bridgeConf("tls"+proto, mq.addr(), proto, conf.BridgeTopic{Pattern: "s/#", Direction: conf.BridgeOut, QoS: 1})
			bc.TLS = &conf.BridgeTLS{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "client.pem"),
				KeyFile: filepath.Join(dir, "client-key.pem")}
			_, addr, set := startBifrost(t, bc)
			_, remote := client(t, fmt.Sprintf("127.0.0.1:%d", plain), "remote-sub", true, "s/#")
			pub, _ := client(t, addr, "local", true, "")
			probe(t, pub, "s/probe", remote)
			publish(t, pub, "s/x", 1, "over-tls")
			testenv.WaitFor(t, "the message over TLS", func() bool { return remote.count("over-tls") > 0 })
			if !set.Bridges()[0].Stats().Up {
				t.Error("bridge not up")
			}
		})
	}
}

// newCert writes name.pem and name-key.pem into dir: a CA when parent is nil, else a
// certificate for 127.0.0.1 signed by parent, usable by a server and a client.
func newCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
		parent, parentKey = tmpl, key
	} else {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(name+".pem", "CERTIFICATE", der)
	write(name+"-key.pem", "EC PRIVATE KEY", kder)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
