package listener

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// A certSource serves a tls or wss listener's certificate, key and client CAs, and
// replaces them when their files change, without a restart and without touching open
// connections (a TLS session keeps the keys it was made with).
//
// Every handshake starts from base, whose GetConfigForClient returns the tls.Config of the
// current snapshot, an immutable value swapped atomically: certificate, key, client CA
// pool and settings change together, and a handshake sees either the old set or the new
// one. A reload that fails (a missing or malformed file, a key that does not match its
// certificate, a CA file without certificates) changes nothing.
//
// Changes are found by Server.watchCerts, one stat per file every Options.CertCheckInterval
// (a file counts as changed when its size, its modification time or the file itself,
// e.g. after a rename or a symlink swap as certbot and Kubernetes make, differ), and
// reloads are forced by Server.ReloadTLS (SIGHUP). fsnotify was rejected: a dependency
// and a descriptor per directory, to save a few stats every ten seconds, and it misses
// changes behind symlinks.
type certSource struct {
	name  string // the listener's, for logs
	files conf.TLS
	log   *slog.Logger
	base  *tls.Config
	cur   atomic.Pointer[certSnapshot]

	mu        sync.Mutex // serialises reloads; guards failed
	failed    fileStamps // the files as they were when the last reload failed
	hasFailed bool       // the last reload failed
}

// certSnapshot is one loaded set of files.
type certSnapshot struct {
	config *tls.Config
	stamps fileStamps
}

// fileStamps identifies the certificate, key and client CA files as they were loaded.
type fileStamps [3]os.FileInfo

// equal reports whether every file is the same, with the same size and modification time.
func (a fileStamps) equal(b fileStamps) bool {
	for i := range a {
		switch x, y := a[i], b[i]; {
		case x == nil || y == nil:
			if x != y {
				return false
			}
		case !os.SameFile(x, y) || x.Size() != y.Size() || !x.ModTime().Equal(y.ModTime()):
			return false
		}
	}
	return true
}

// newCertSource loads the files of a listener's tls block; an error names the file.
func newCertSource(name string, files conf.TLS, log *slog.Logger) (*certSource, error) {
	s := &certSource{name: name, files: files, log: log}
	snap, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cur.Store(snap)
	s.base = &tls.Config{
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return s.cur.Load().config, nil },
	}
	return s, nil
}

// reload loads the files again if they changed since the last load, or always if force;
// a failure keeps the current snapshot. Without force, files that failed to load and have
// not changed since are not tried (nor reported) again.
func (s *certSource) reload(force bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !force {
		stamps, err := s.stat()
		if err == nil && stamps.equal(s.cur.Load().stamps) {
			return nil
		}
		if s.hasFailed && stamps.equal(s.failed) {
			return nil // reported already
		}
	}
	snap, err := s.load()
	if err != nil {
		s.failed, s.hasFailed = snap.stamps, true
		return err
	}
	s.failed, s.hasFailed = fileStamps{}, false
	s.cur.Store(snap)
	leaf := snap.config.Certificates[0].Leaf
	s.log.Info("listener: TLS certificate loaded", slog.String("listener", s.name),
		slog.String("subject", leaf.Subject.String()), slog.Time("not_after", leaf.NotAfter))
	return nil
}

// use loads the files tls names and makes them the source's files; on error nothing
// changes.
func (s *certSource) use(tls conf.TLS) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.files
	s.files = tls
	snap, err := s.load()
	if err != nil {
		s.files = old
		return err
	}
	s.failed, s.hasFailed = fileStamps{}, false
	s.cur.Store(snap)
	return nil
}

// stat returns the stamps of the files.
func (s *certSource) stat() (fileStamps, error) {
	var st fileStamps
	for i, path := range [...]string{s.files.CertFile, s.files.KeyFile, s.files.ClientCAFile} {
		if path == "" {
			continue
		}
		fi, err := os.Stat(path)
		if err != nil {
			return st, err
		}
		st[i] = fi
	}
	return st, nil
}

// load reads the files into a snapshot. The stamps are taken first: a file that changes
// while it is read looks changed again at the next check, and is read again then. On
// error the snapshot returned holds only the stamps.
func (s *certSource) load() (*certSnapshot, error) {
	snap := &certSnapshot{}
	stamps, err := s.stat()
	snap.stamps = stamps
	if err != nil {
		return snap, s.errorf("%w", err)
	}
	cert, err := tls.LoadX509KeyPair(s.files.CertFile, s.files.KeyFile)
	if err != nil {
		return snap, s.errorf("cert_file %s, key_file %s: %w", s.files.CertFile, s.files.KeyFile, err)
	}
	if cert.Leaf == nil { // set by LoadX509KeyPair since Go 1.23
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return snap, s.errorf("cert_file %s: %w", s.files.CertFile, err)
		}
	}
	if now := time.Now(); now.After(cert.Leaf.NotAfter) || now.Before(cert.Leaf.NotBefore) {
		s.log.Warn("listener: TLS certificate is not valid now", slog.String("listener", s.name),
			slog.Time("not_before", cert.Leaf.NotBefore), slog.Time("not_after", cert.Leaf.NotAfter))
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		// MQTT messages are small and latency is not about first bytes: full records
		// from the start, fewer of them, fewer writes.
		DynamicRecordSizingDisabled: true,
	}
	if s.files.MinVersion == "1.3" {
		cfg.MinVersion = tls.VersionTLS13
	}
	// Session tickets are sealed with this snapshot's own keys (which crypto/tls makes and
	// rotates), not the base config's, which outlive reloads: a reload ends the
	// resumption of sessions made before it. crypto/tls does not verify a resumed
	// session's client certificate again, so otherwise a client whose CA was taken out of
	// client_ca_file could go on resuming for a ticket's lifetime (up to 7 days).
	cfg.WrapSession = cfg.EncryptTicket
	cfg.UnwrapSession = cfg.DecryptTicket
	if s.files.ClientCAFile != "" {
		pem, err := os.ReadFile(s.files.ClientCAFile)
		if err != nil {
			return snap, s.errorf("client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return snap, s.errorf("client_ca_file %s: no PEM certificate in it", s.files.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	snap.config = cfg
	return snap, nil
}

func (s *certSource) errorf(format string, args ...any) error {
	return fmt.Errorf("listener: %s: TLS: "+format, append([]any{s.name}, args...)...)
}
