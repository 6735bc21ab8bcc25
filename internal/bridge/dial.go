package bridge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// dial opens the connection to the remote, TCP or TLS, within timeout.
func dial(ctx context.Context, c *conf.Bridge, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if c.TLS == nil {
		return d.DialContext(ctx, "tcp", c.Address)
	}
	tc, err := tlsConfig(c)
	if err != nil {
		return nil, err
	}
	td := &tls.Dialer{NetDialer: d, Config: tc}
	return td.DialContext(ctx, "tcp", c.Address)
}

// tlsConfig reads the bridge's TLS files; it runs at every dial, so renewed files are
// picked up by the next connection.
func tlsConfig(c *conf.Bridge) (*tls.Config, error) {
	t := c.TLS
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.Insecure}
	if tc.ServerName == "" {
		host, _, _ := net.SplitHostPort(c.Address)
		tc.ServerName = host
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("tls.ca_file: no PEM certificate in " + t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file, tls.key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
