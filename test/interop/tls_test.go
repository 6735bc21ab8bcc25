package interop_test

// MQTT over TLS and over WebSocket over TLS, with independent clients: Mosquitto's
// command-line clients (OpenSSL) against the bifrost binary, and paho.mqtt.golang
// (crypto/tls, gorilla/websocket) against a broker in the test process. The CA, the
// server's certificate and the clients' are made here, with crypto/x509, and written to
// the test's temporary directory: one listener with server authentication only, one
// that requires client certificates from that CA (mTLS, with use_identity_as_username),
// and a wss listener.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// tlsPKI is a test CA with a server certificate and client certificates, as PEM files.
type tlsPKI struct {
	ca, serverCert, serverKey string // files
	clientCert, clientKey     string // issued by the CA, CN device-1
	otherCert, otherKey       string // issued by another CA, CN intruder
	pool                      *x509.CertPool
	client                    tls.Certificate
}

// newTLSPKI makes the certificates and writes them to a temporary directory.
func newTLSPKI(t testing.TB) *tlsPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, block *pem.Block) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	serial := int64(0)
	issue := func(cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, ca, server bool) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		serial++
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		switch {
		case ca:
			tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
			tmpl.KeyUsage |= x509.KeyUsageCertSign
			tmpl.ExtKeyUsage = nil
		case server:
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
			tmpl.DNSNames = []string{"localhost"}
		}
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return cert, key, der, kder
	}
	caCert, caKey, caDER, _ := issue("bifrost interop CA", nil, nil, true, false)
	p := &tlsPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	p.ca = write("ca.pem", &pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	_, _, der, kder := issue("bifrost interop server", caCert, caKey, false, true)
	p.serverCert = write("server.pem", &pem.Block{Type: "CERTIFICATE", Bytes: der})
	p.serverKey = write("server.key", &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	_, _, der, kder = issue("device-1", caCert, caKey, false, false)
	p.clientCert = write("client.pem", &pem.Block{Type: "CERTIFICATE", Bytes: der})
	p.clientKey = write("client.key", &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	client, err := tls.LoadX509KeyPair(p.clientCert, p.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	p.client = client
	otherCA, otherKey, _, _ := issue("someone else's CA", nil, nil, true, false)
	_, _, der, kder = issue("intruder", otherCA, otherKey, false, false)
	p.otherCert = write("other.pem", &pem.Block{Type: "CERTIFICATE", Bytes: der})
	p.otherKey = write("other.key", &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	return p
}

// tlsListeners adds to cfg a tls listener, an mTLS listener and a wss listener, in that
// order after the tcp and ws listeners of mqConfig, all serving p's server certificate.
func (p *tlsPKI) tlsListeners(cfg *bifrost.Config) {
	server := conf.TLS{CertFile: p.serverCert, KeyFile: p.serverKey, MinVersion: "1.2"}
	mutual := server
	mutual.ClientCAFile, mutual.UseIdentityAsUsername = p.ca, true
	wss := server
	cfg.Listeners = append(cfg.Listeners,
		conf.Listener{Name: "tls", Type: conf.ListenerTLS, Address: "127.0.0.1:0", TLS: &server},
		conf.Listener{Name: "mtls", Type: conf.ListenerTLS, Address: "127.0.0.1:0", TLS: &mutual},
		conf.Listener{Name: "wss", Type: conf.ListenerWSS, Address: "127.0.0.1:0", Path: "/mqtt", TLS: &wss},
	)
}

// listenerAddr returns the address the broker logged for the listener named name.
func listenerAddr(t testing.TB, b *mqBroker, name string) string {
	t.Helper()
	for _, m := range mqListenRE.FindAllStringSubmatch(b.logs.String(), -1) {
		if m[1] == name {
			return m[2]
		}
	}
	t.Fatalf("the broker did not log listener %s:\n%s", name, b.logs)
	return ""
}

// TestTLSMosquitto runs mosquitto_sub and mosquitto_pub (OpenSSL) over TLS against the
// bifrost binary: with server authentication, and with client certificates, where a
// certificate from another CA, or none, is refused in the handshake.
func TestTLSMosquitto(t *testing.T) {
	mqTool(t, "mosquitto_sub")
	p := newTLSPKI(t)
	b := mqStartProcess(t, p.tlsListeners)
	plain, mutual := listenerAddr(t, b, "tls"), listenerAddr(t, b, "mtls")
	server := []string{"-h", "127.0.0.1", "--cafile", p.ca}
	withCert := append(append([]string(nil), server...), "--cert", p.clientCert, "--key", p.clientKey)

	for _, tc := range []struct {
		name, addr string
		args       []string
	}{
		{"server authentication", plain, server},
		{"client certificate", mutual, withCert},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range []string{mqV311, mqV5} {
				topic := "tls/" + strings.ReplaceAll(tc.name, " ", "-") + "/" + v
				payload := "over TLS " + strings.Repeat("x", 20000) // several records
				args := append(append([]string{"-p", mqPort(tc.addr), "-V", v}, tc.args...), "-t", topic)
				sub := mqSub(t, append(args, "-q", "1", "-C", "1", "-W", "20", "-F", "%q %t %p")...)
				sub.waitSubscribed()
				mqPub(t, nil, append(args, "-q", "1", "-m", payload)...)
				sub.expect(fmt.Sprintf("1 %s %s", topic, payload))
				sub.wait()
			}
		})
	}

	// Refused: no client certificate, one from another CA, a server certificate the
	// client does not trust (mosquitto checks it against its own CA file). A subscriber
	// on the topic then receives only a marker published after them: nothing got through.
	watch := mqSub(t, append([]string{"-p", mqPort(plain), "-V", mqV311, "-t", "tls/refused", "-C", "1", "-W", "20"}, server...)...)
	watch.waitSubscribed()
	for _, tc := range []struct {
		name, addr string
		args       []string
	}{
		{"no client certificate", mutual, server},
		{"untrusted client certificate", mutual, append(append([]string(nil), server...), "--cert", p.otherCert, "--key", p.otherKey)},
		{"untrusted server", plain, []string{"-h", "127.0.0.1", "--cafile", p.otherCert}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"-p", mqPort(tc.addr), "-V", mqV311}, tc.args...), "-t", "tls/refused", "-m", "let in")
			out, err := exec.Command(mqTool(t, "mosquitto_pub"), args...).CombinedOutput()
			if err == nil {
				t.Fatalf("mosquitto_pub %s succeeded; want a refused handshake\n%s", strings.Join(args, " "), out)
			}
			t.Logf("refused as expected: %v: %s", err, strings.TrimSpace(string(out)))
		})
	}
	mqPub(t, nil, append([]string{"-p", mqPort(mutual), "-V", mqV311, "-t", "tls/refused", "-m", "marker"}, withCert...)...)
	watch.expect("marker")
	watch.wait()
}

// TestTLSPaho connects paho.mqtt.golang over tls:// (server authentication and client
// certificates) and over wss://, and sends a message around through each, to a broker in
// the test process; a client certificate from another CA is refused.
func TestTLSPaho(t *testing.T) {
	p := newTLSPKI(t)
	b := mqStart(t, p.tlsListeners)
	addrs := b.Addrs()
	if len(addrs) != 5 {
		t.Fatalf("broker has %d listeners, want 5", len(addrs))
	}
	tlsAddr, mtlsAddr, wssAddr := addrs[2].String(), addrs[3].String(), addrs[4].String()
	server := &tls.Config{RootCAs: p.pool}
	withCert := &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.client}}

	connect := func(t *testing.T, url, id string, cfg *tls.Config, got chan<- string) (mqtt.Client, error) {
		t.Helper()
		o := mqtt.NewClientOptions().AddBroker(url).SetClientID(id).SetTLSConfig(cfg).
			SetProtocolVersion(4).SetAutoReconnect(false).SetConnectRetry(false).
			SetConnectTimeout(testenv.Timeout).SetOrderMatters(true)
		if got != nil {
			o.SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) { got <- m.Topic() + " " + string(m.Payload()) })
		}
		c := mqtt.NewClient(o)
		tok := c.Connect()
		if !tok.WaitTimeout(testenv.Timeout) {
			t.Fatalf("%s: connect timed out", url)
		}
		if err := tok.Error(); err != nil {
			return nil, err
		}
		t.Cleanup(func() { c.Disconnect(100) })
		return c, nil
	}
	wait := func(t *testing.T, what string, tok mqtt.Token) {
		t.Helper()
		if !tok.WaitTimeout(testenv.Timeout) {
			t.Fatalf("%s: timed out", what)
		}
		if err := tok.Error(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	for _, tc := range []struct {
		name, url string
		cfg       *tls.Config
	}{
		{"tls", "tls://" + tlsAddr, server},
		{"mtls", "tls://" + mtlsAddr, withCert},
		{"wss", "wss://" + wssAddr + "/mqtt", server},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan string, 16)
			sub, err := connect(t, tc.url, "sub-"+tc.name, tc.cfg, got)
			if err != nil {
				t.Fatal(err)
			}
			topic := "paho/" + tc.name
			wait(t, "subscribe", sub.Subscribe(topic, 1, nil))
			pub, err := connect(t, tc.url, "pub-"+tc.name, tc.cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, payload := range []string{"small", strings.Repeat("y", 100<<10)} {
				wait(t, "publish", pub.Publish(topic, byte(i%2), false, payload))
				m, _ := mqRecv(t, got, "the message")
				if want := topic + " " + payload; m != want {
					t.Fatalf("received %d bytes, want %d", len(m), len(want))
				}
			}
		})
	}

	t.Run("untrusted client certificate", func(t *testing.T) {
		other, err := tls.LoadX509KeyPair(p.otherCert, p.otherKey)
		if err != nil {
			t.Fatal(err)
		}
		// Go sends only a certificate the server's CA list names: force the other one.
		cfg := &tls.Config{RootCAs: p.pool, GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &other, nil
		}}
		if _, err := connect(t, "tls://"+mtlsAddr, "intruder", cfg, nil); err == nil {
			t.Fatal("connected with a client certificate from another CA")
		} else {
			t.Logf("refused as expected: %v", err)
		}
	})
}
