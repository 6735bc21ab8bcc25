package cluster

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"time"
)

// What cluster.secret becomes. Every key is derived from the secret with HKDF-SHA256,
// each for one use, so no key serves two purposes:
//
//   - gossip: memberlist's 32-byte keyring key (AES-256-GCM on every gossip packet and
//     stream); a node without it cannot read or write gossip;
//   - rpc: an Ed25519 certificate authority. Every node presents the one certificate
//     this key signs and requires the peer's to verify against it, in TLS 1.3 both ways,
//     on the gRPC and the Raft paths of the rpc port (net_mux.go, net_transport.go).
//
// Why TLS and not a home-made HMAC handshake: an HMAC of a nonce proves the peer knows
// the secret when the connection opens, but leaves what follows (client ids, sessions,
// messages) readable and alterable by anyone on the path. Go's crypto/tls has no
// pre-shared-key mode, so the shared key is made into an authority instead: one
// handshake per connection (Raft and gRPC keep theirs open), and an audited protocol for
// authentication, confidentiality and integrity at once.

// tlsServerName is the name in the certificate, which every node dials.
const tlsServerName = "bifrost-cluster"

func deriveKey(secret, purpose string, n int) []byte {
	k, err := hkdf.Key(sha256.New, []byte(secret), []byte("bifrost cluster"), purpose, n)
	if err != nil { // only for n beyond 255 hash lengths
		panic(err)
	}
	return k
}

// gossipKey is memberlist's key for secret.
func gossipKey(secret string) []byte { return deriveKey(secret, "memberlist gossip key v1", 32) }

// tlsConfigs returns the rpc port's TLS settings for secret: server for the mux, client
// for dialling peers.
func tlsConfigs(secret string) (server, client *tls.Config, err error) {
	key := ed25519.NewKeyFromSeed(deriveKey(secret, "rpc tls authority v1", ed25519.SeedSize))
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "bifrost cluster"},
		DNSNames:              []string{tlsServerName},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC), // the secret is the credential; rotate it
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: rpc certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: rpc certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	pair := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}
	server = &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS13,
	}
	client = &tls.Config{
		Certificates: []tls.Certificate{pair},
		RootCAs:      pool,
		ServerName:   tlsServerName,
		MinVersion:   tls.VersionTLS13,
	}
	return server, client, nil
}
