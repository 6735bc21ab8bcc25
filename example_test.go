package bifrost_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// A program embeds the broker, listens to what clients publish and publishes itself.
func Example() {
	cfg := bifrost.DefaultConfig()
	cfg.HTTP.Address = "off"
	cfg.Store.Dir = "off" // nothing kept across restarts; a directory keeps sessions and queues
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = "127.0.0.1:0" // any free port
	}
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	got := make(chan string, 1)
	unsubscribe, err := b.Subscribe("sensors/+/temperature", func(m bifrost.Message) {
		got <- m.Topic + " " + string(m.Payload) // runs on the publisher's goroutine: do not block
	})
	if err != nil {
		log.Fatal(err)
	}
	defer unsubscribe()

	if err := b.Publish("sensors/kitchen/temperature", []byte("21.5"), 1, false); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-got)
	// Output: sensors/kitchen/temperature 21.5
}

// A program configures a TLS listener and a password file from Go code alone, with the
// types package bifrost re-exports, and a client connects over TLS with its password.
func Example_tlsListenerAndPasswordFile() {
	dir, err := os.MkdirTemp("", "bifrost-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// A certificate for 127.0.0.1 (a real deployment has its own files) and a password
	// file with one user, as `bifrost passwd` would write it.
	certFile, keyFile, roots := selfSigned(dir)
	record, err := bifrost.HashPassword("s3cret")
	if err != nil {
		log.Fatal(err)
	}
	passwords := filepath.Join(dir, "passwd")
	if err := os.WriteFile(passwords, []byte("sensor:"+record+"\n"), 0o600); err != nil {
		log.Fatal(err)
	}

	cfg := bifrost.DefaultConfig()
	cfg.HTTP.Address = bifrost.HTTPOff
	cfg.Store.Dir = bifrost.StoreOff
	cfg.Listeners = []bifrost.Listener{{
		Name:    "mqtts",
		Type:    bifrost.ListenerTLS,
		Address: "127.0.0.1:0", // any free port; a deployment says 0.0.0.0:8883
		TLS:     &bifrost.TLS{CertFile: certFile, KeyFile: keyFile, MinVersion: "1.3"},
	}}
	cfg.Auth = bifrost.Auth{PasswordFile: passwords} // anonymous clients are refused
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	got := make(chan string, 1)
	unsubscribe, err := b.Subscribe("sensors/#", func(m bifrost.Message) {
		got <- m.Topic + " " + string(m.Payload)
	})
	if err != nil {
		log.Fatal(err)
	}
	defer unsubscribe()

	connect := func(password string) (mqtt.Client, error) {
		o := mqtt.NewClientOptions().AddBroker("tls://" + b.Addrs()[0].String()).
			SetTLSConfig(&tls.Config{RootCAs: roots}).SetClientID("sensor-1").
			SetUsername("sensor").SetPassword(password).SetProtocolVersion(4).
			SetAutoReconnect(false).SetConnectTimeout(10 * time.Second)
		c := mqtt.NewClient(o)
		tok := c.Connect()
		tok.Wait()
		return c, tok.Error()
	}
	if _, err := connect("wrong"); err != nil {
		fmt.Println("refused:", err)
	}
	c, err := connect("s3cret")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Disconnect(100)
	if tok := c.Publish("sensors/kitchen/temperature", 1, false, "21.5"); tok.Wait() && tok.Error() != nil {
		log.Fatal(tok.Error())
	}
	fmt.Println(<-got)
	// Output:
	// refused: bad user name or password
	// sensors/kitchen/temperature 21.5
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key into dir and
// returns their paths and a pool that trusts the certificate.
func selfSigned(dir string) (certFile, keyFile string, roots *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "bifrost example"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		log.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		log.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		log.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

// A program reads its configuration from YAML (LoadConfig for a file); every problem
// comes back at once, each naming its line and field.
func ExampleParseConfig() {
	_, err := bifrost.ParseConfig([]byte(`
listeners:
  - type: tls
    address: 127.0.0.1:8883
limits:
  max_connnections: 10
`))
	var errs *bifrost.ConfigErrors
	if errors.As(err, &errs) {
		for _, e := range errs.List {
			fmt.Printf("line %d: %s\n", e.Line, e.Field)
		}
	}

	cfg, err := bifrost.ParseConfig([]byte(`
listeners:
  - type: tcp
    address: 127.0.0.1:0
store:
  dir: "off"
limits:
  max_connections: 10
`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cfg.Listeners[0].Type, cfg.Store.Dir, *cfg.Limits.MaxConnections)
	// Output:
	// line 3: listeners[0].tls
	// line 6: limits.max_connnections
	// tcp off 10
}

// A program changes the configuration of the running broker: the live changes take
// effect at once, the others are named and wait for a restart.
func ExampleBroker_Reconfigure() {
	cfg := bifrost.DefaultConfig()
	cfg.HTTP.Address = "off"
	cfg.Store.Dir = "off"
	cfg.Listeners = []bifrost.Listener{{Name: "mqtt", Type: bifrost.ListenerTCP, Address: "127.0.0.1:0"}}
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	next := cfg.Clone()
	maxConns := 100
	next.Limits.MaxConnections = &maxConns
	next.Listeners = append(next.Listeners, bifrost.Listener{Name: "ws", Type: bifrost.ListenerWS, Address: "127.0.0.1:0"})
	next.Store.Dir = "/var/lib/bifrost"
	report, err := b.Reconfigure(next)
	if err != nil {
		log.Fatal(err)
	}
	for _, ch := range report.Applied {
		fmt.Println("applied:", ch)
	}
	for _, ch := range report.Restart {
		fmt.Println("restart:", ch)
	}
	fmt.Println("listeners:", len(b.Addrs()))
	// Output:
	// applied: limits.max_connections: 1000000 → 100
	// applied: listeners[ws]: (none) → ws 127.0.0.1:0
	// restart: store.dir: "off" → "/var/lib/bifrost" (takes effect only after a restart)
	// listeners: 2
}
