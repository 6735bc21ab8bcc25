package listener

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/coder/websocket"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// stepWire is a server transport for crypto/tls that blocks on a pipe during the
// handshake and afterwards reads only what the test put in, saying errWouldBlock when
// that is used up, as tlsWire does.
type stepWire struct {
	net.Conn
	mu      sync.Mutex
	stepped bool
	in      []byte
}

func (w *stepWire) Read(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stepped {
		w.mu.Unlock()
		n, err := w.Conn.Read(p)
		w.mu.Lock()
		return n, err
	}
	if len(w.in) == 0 {
		return 0, errWouldBlock
	}
	n := copy(p, w.in)
	w.in = w.in[n:]
	return n, nil
}

// TestTLSWouldBlockNotSticky holds crypto/tls to what tls.go relies on: a temporary error
// from the transport is returned by Read without becoming the connection's error, and a
// record split anywhere (in its header, in its body) is read whole once its last byte
// comes. If a Go release changes that, TLS listeners break: this test says why.
func TestTLSWouldBlockNotSticky(t *testing.T) {
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		t.Run(tls.VersionName(version), func(t *testing.T) {
			cside, sside := net.Pipe()
			defer cside.Close()
			wire := &stepWire{Conn: sside}
			certs, err := newCertSource("test", *tlsFiles(t, false), testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			server := tls.Server(wire, certs.base)
			cfg := clientTLS()
			cfg.MaxVersion = version
			client := tls.Client(cside, cfg)
			errc := make(chan error, 1)
			go func() { errc <- client.Handshake() }()
			if err := server.Handshake(); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}

			// Capture the client's records as they go over the pipe (then its close_notify),
			// and feed them to the server a byte at a time.
			msgs := [][]byte{[]byte("first"), bytes.Repeat([]byte("x"), 20000), []byte("last")}
			go func() {
				for _, m := range msgs {
					if _, err := client.Write(m); err != nil {
						t.Error(err)
						return
					}
				}
				_ = client.Close()
			}()
			wire.mu.Lock()
			wire.stepped = true
			wire.mu.Unlock()
			raw, err := io.ReadAll(sside)
			if err != nil {
				t.Fatal(err)
			}

			var got []byte
			buf := make([]byte, 4096)
			blocked, eof := 0, false
			for i, b := range raw {
				wire.mu.Lock()
				wire.in = append(wire.in, b)
				wire.mu.Unlock()
				for {
					n, err := server.Read(buf)
					got = append(got, buf[:n]...)
					if errors.Is(err, errWouldBlock) {
						blocked++
						break
					}
					if err == io.EOF && i == len(raw)-1 {
						eof = true
						break
					}
					if err != nil {
						t.Fatalf("after %d bytes of plaintext, %d of %d fed: %v", len(got), i+1, len(raw), err)
					}
				}
			}
			if !eof {
				t.Error("no io.EOF after the close_notify")
			}
			if want := bytes.Join(msgs, nil); !bytes.Equal(got, want) {
				t.Fatalf("read %d bytes that differ from the %d written", len(got), len(want))
			}
			if blocked < len(raw)-10 {
				t.Fatalf("would block %d times for %d bytes fed one at a time", blocked, len(raw))
			}
		})
	}
}

// listenTLS opens a tls or wss listener with the given tls block.
func listenTLS(t testing.TB, s *Server, typ string, files *conf.TLS) *Listener {
	t.Helper()
	l, err := s.Listen(conf.Listener{Type: typ, Address: "127.0.0.1:0", TLS: files})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// tlsDial connects to l with cfg and completes the handshake; it returns the error of
// the handshake, or of a first read when the server may refuse after it (TLS 1.3 checks
// the client certificate after the client's handshake is done).
func tlsDial(t testing.TB, l *Listener, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	raw := dialTCP(t, l)
	c := tls.Client(raw, cfg)
	t.Cleanup(func() { _ = c.Close() })
	return c, c.Handshake()
}

// TestTLSMinVersion: min_version 1.3 refuses a TLS 1.2 client; 1.2 serves both.
func TestTLSMinVersion(t *testing.T) {
	r := newRecorder(t)
	r.echo = true
	s := newTestServer(t, r, Options{})
	files12 := tlsFiles(t, false)
	files13 := *files12
	files13.MinVersion = "1.3"
	l12, l13 := listenTLS(t, s, conf.ListenerTLS, files12), listenTLS(t, s, conf.ListenerTLS, &files13)
	for _, tc := range []struct {
		l          *Listener
		maxVersion uint16
		ok         bool
	}{
		{l12, tls.VersionTLS12, true},
		{l12, tls.VersionTLS13, true},
		{l13, tls.VersionTLS12, false},
		{l13, tls.VersionTLS13, true},
	} {
		cfg := clientTLS()
		cfg.MaxVersion = tc.maxVersion
		c, err := tlsDial(t, tc.l, cfg)
		if !tc.ok {
			if err == nil || !strings.Contains(err.Error(), "protocol version") {
				t.Errorf("a %s client to a min 1.3 listener: %v, want a protocol version alert", tls.VersionName(tc.maxVersion), err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s client: %v", tls.VersionName(tc.maxVersion), err)
		}
		sc := recv(t, r.opened, "OnOpen")
		if v := sc.TLS().Version; v != tc.maxVersion {
			t.Errorf("server side version %s, want %s", tls.VersionName(v), tls.VersionName(tc.maxVersion))
		}
		if _, err := c.Write([]byte("hi")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 2)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "hi" {
			t.Fatalf("echo %q %v", b, err)
		}
	}
	if len(r.opened) != 0 {
		t.Errorf("%d connections opened that should not have", len(r.opened))
	}
}

// TestTLSClientCertificates: with client_ca_file, a client certificate issued by that CA
// is required; the handler sees it through Conn.TLS. A certificate from another CA, or
// none, is refused in the handshake: no OnOpen.
func TestTLSClientCertificates(t *testing.T) {
	for _, typ := range []string{conf.ListenerTLS, conf.ListenerWSS} {
		t.Run(typ, func(t *testing.T) {
			r := newRecorder(t)
			s := newTestServer(t, r, Options{})
			l := listenTLS(t, s, typ, tlsFiles(t, true))
			plain := listen(t, s, conf.ListenerTCP)

			c, err := tlsDial(t, l, clientTLS())
			if err != nil {
				t.Fatal(err)
			}
			if typ == conf.ListenerWSS {
				if _, res, err := wsHandshake(c, "/mqtt", "mqtt"); err != nil || res.StatusCode != http.StatusSwitchingProtocols {
					t.Fatalf("upgrade: %v %v", res, err)
				}
			}
			sc := recv(t, r.opened, "OnOpen")
			cs := sc.TLS()
			if cs == nil || !cs.HandshakeComplete || len(cs.PeerCertificates) == 0 {
				t.Fatalf("TLS() = %+v, want the client's certificate", cs)
			}
			if cn := cs.PeerCertificates[0].Subject.CommonName; cn != "client-1" {
				t.Errorf("client certificate CN %q, want client-1", cn)
			}

			// Go's client sends only a certificate the server's CA list accepts: the
			// untrusted one is forced on the server with GetClientCertificate.
			for _, tc := range []struct {
				name string
				cert *tls.Certificate
				want string // in the alert the client receives
			}{
				{"untrusted", &testPKI().untrusted, "unknown certificate authority"},
				{"none", &tls.Certificate{}, "certificate required"},
			} {
				cfg := clientTLS()
				cfg.Certificates = nil
				cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return tc.cert, nil }
				c, err := tlsDial(t, l, cfg)
				if err == nil { // TLS 1.3: the server's verdict comes after the client's Finished
					_ = c.SetReadDeadline(time.Now().Add(testenv.Timeout))
					_, err = c.Read(make([]byte, 1))
				}
				if err == nil || !strings.Contains(err.Error(), "remote error: tls: "+tc.want) {
					t.Errorf("%s client certificate: %v, want the alert %q", tc.name, err, tc.want)
				}
			}

			dialTCP(t, plain)
			if pc := recv(t, r.opened, "OnOpen"); pc.TLS() != nil {
				t.Errorf("TLS() on a tcp connection: %+v, want nil", pc.TLS())
			}
			if len(r.opened) != 0 {
				t.Errorf("%d refused clients were opened", len(r.opened))
			}
		})
	}
}

// serverCN returns the common name of the certificate the server presents to a new
// connection.
func serverCN(t testing.TB, l *Listener) string {
	t.Helper()
	c, err := tlsDial(t, l, clientTLS())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// replaceFile writes data to path through a rename, as certificate tools do.
func replaceFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := writeFile(t, filepath.Dir(path), filepath.Base(path)+".new", data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestTLSReload replaces the certificate while a connection is open: ReloadTLS, and the
// periodic check, give new connections the new certificate, the open one goes on; files
// that do not load keep the old certificate and make ReloadTLS fail.
func TestTLSReload(t *testing.T) {
	r := newRecorder(t)
	r.echo = true
	s := newTestServer(t, r, Options{CertCheckInterval: 20 * time.Millisecond})
	files := tlsFiles(t, false)
	l := listenTLS(t, s, conf.ListenerTLS, files)
	if cn := serverCN(t, l); cn != "bifrost test server" {
		t.Fatalf("server CN %q", cn)
	}
	recv(t, r.opened, "OnOpen")
	old, err := tlsDial(t, l, clientTLS())
	if err != nil {
		t.Fatal(err)
	}
	recv(t, r.opened, "OnOpen")
	echo := func(c *tls.Conn, msg string) {
		t.Helper()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, len(msg))
		if _, err := io.ReadFull(c, b); err != nil || string(b) != msg {
			t.Fatalf("echo %q: %q %v", msg, b, err)
		}
	}
	echo(old, "before")

	// A bad certificate file: ReloadTLS fails, the listener keeps its certificate.
	replaceFile(t, files.CertFile, []byte("not a certificate"))
	if err := s.ReloadTLS(); err == nil || !strings.Contains(err.Error(), files.CertFile) {
		t.Fatalf("ReloadTLS with a bad file: %v, want an error naming %s", err, files.CertFile)
	}
	if cn := serverCN(t, l); cn != "bifrost test server" {
		t.Fatalf("server CN %q after a failed reload", cn)
	}
	recv(t, r.opened, "OnOpen")

	// A new pair, made on demand.
	cert, key := testPKI().ca.issue("renewed", true)
	replaceFile(t, files.KeyFile, key)
	replaceFile(t, files.CertFile, cert)
	if err := s.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if cn := serverCN(t, l); cn != "renewed" {
		t.Fatalf("server CN %q after ReloadTLS, want renewed", cn)
	}
	recv(t, r.opened, "OnOpen")
	echo(old, "after") // the open connection keeps its session

	// Another, found by the periodic check.
	cert, key = testPKI().ca.issue("renewed again", true)
	replaceFile(t, files.KeyFile, key)
	replaceFile(t, files.CertFile, cert)
	testenv.WaitFor(t, "the new certificate", func() bool {
		ok := serverCN(t, l) == "renewed again"
		recv(t, r.opened, "OnOpen")
		return ok
	})
	echo(old, "still")
}

// TestWSSCoder talks to a wss listener with an independent WebSocket client library.
func TestWSSCoder(t *testing.T) {
	r := newRecorder(t)
	r.echo = true
	s := newTestServer(t, r, Options{})
	l := listen(t, s, conf.ListenerWSS)
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS()}}
	url := "wss://localhost:" + strings.Split(l.Addr().String(), ":")[1] + "/mqtt"
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: client, Subprotocols: []string{"mqtt"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Subprotocol() != "mqtt" {
		t.Fatalf("subprotocol %q", c.Subprotocol())
	}
	c.SetReadLimit(1 << 20)
	sc := recv(t, r.opened, "OnOpen")
	if sc.TLS() == nil {
		t.Error("TLS() is nil on a wss connection")
	}
	for i := range 10 {
		msg := randomBytes(1 + i*7000)
		if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
			t.Fatal(err)
		}
		readEcho(ctx, t, c, i, msg)
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatalf("close handshake: %v", err)
	}
	if ev := recv(t, r.closed, "OnClose"); !errors.Is(ev.err, io.EOF) {
		t.Errorf("OnClose(%v), want io.EOF", ev.err)
	}
}

// clientHello returns the first record a Go TLS client sends.
func clientHello(t testing.TB) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _ = tls.Client(a, clientTLS()).Handshake() }()
	var rec []byte
	buf := make([]byte, 4096)
	for len(rec) < recordHeaderLen || len(rec) < recordHeaderLen+int(rec[3])<<8|int(rec[4]) {
		n, err := b.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		rec = append(rec, buf[:n]...)
	}
	return rec
}

// TestTLSHandshakeTimeout: clients that connect and say nothing, send half a ClientHello,
// dribble one, or stop after their ClientHello, are closed by the connect timeout without
// any event; only the last ever had a handshake goroutine, and it is gone.
func TestTLSHandshakeTimeout(t *testing.T) {
	r := newRecorder(t)
	s := newTestServer(t, r, Options{ConnectTimeout: 300 * time.Millisecond})
	l := listen(t, s, conf.ListenerTLS)
	base := sharedGoroutines(t, s) // accept loop, wheel, certificate watcher
	hello := clientHello(t)

	silent := dialTCP(t, l)
	half := dialTCP(t, l)
	if _, err := half.Write(hello[:len(hello)/2]); err != nil {
		t.Fatal(err)
	}
	whole := dialTCP(t, l)
	if _, err := whole.Write(hello); err != nil {
		t.Fatal(err)
	}
	dribble := dialTCP(t, l)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < len(hello); i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if _, err := dribble.Write(hello[i : i+1]); err != nil {
				return // closed by the server
			}
		}
	})
	// The complete ClientHello starts the one handshake goroutine.
	testenv.WaitFor(t, "the handshake goroutine", func() bool { return sharedGoroutines(t, s) == base+1 })
	for _, c := range []net.Conn{silent, half, whole, dribble} {
		_ = c.SetReadDeadline(time.Now().Add(testenv.Timeout))
		if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("client: %v, want the connection closed", err)
		}
	}
	close(stop)
	wg.Wait()
	testenv.WaitFor(t, "the handshake goroutine to end", func() bool { return sharedGoroutines(t, s) == base })
	testenv.WaitFor(t, "no close reason kept for connections that never opened", func() bool { return reasonsHeld(s) == 0 })
	if len(r.opened) != 0 || len(r.closed) != 0 {
		t.Fatalf("events for connections never opened: %d opens, %d closes", len(r.opened), len(r.closed))
	}
	if l.Conns() != 0 {
		t.Fatalf("Conns() = %d", l.Conns())
	}
}

// TestTLSInputLent: this Go release's crypto/tls was read for lending (tls_input_lend.go),
// tls_input_lend.go finds tls.Conn's input buffers, and a connection that received large
// records (and records split across reads) holds none of them once idle.
func TestTLSInputLent(t *testing.T) {
	switch {
	case !tlsLending && nolendTag:
		t.Skip("built with bifrost_nolend: crypto/tls keeps its own input buffers")
	case !tlsLending:
		t.Fatalf("%s: this release's crypto/tls was not read for lending, so tls_input.go lends "+
			"nothing and every idle TLS connection keeps its input buffers (3.5 KiB and more): "+
			"read its conn.go for each point of tls_input_lend.go and extend the build constraint",
			runtime.Version())
	case !inputFieldsFound():
		t.Fatalf("%s: tls.Conn's rawInput, input or hand is gone or retyped: tls_input_lend.go "+
			"lends nothing, and every idle TLS connection keeps its input buffers (3.5 KiB and "+
			"more); update findTLSFields", runtime.Version())
	}
	for _, typ := range []string{conf.ListenerTLS, conf.ListenerWSS} {
		t.Run(typ, func(t *testing.T) {
			r := newRecorder(t)
			r.echo = true
			s := newTestServer(t, r, Options{ReadBufferSize: 4096}) // records split across reads
			l := listen(t, s, typ)
			c := dial(t, l)
			sc := recv(t, r.opened, "OnOpen").(*conn)
			tc := sc.tls()
			for _, n := range []int{100 << 10, 10, 40000} {
				msg := randomBytes(n)
				c.send(t, msg)
				if got := c.recv(t, n); !bytes.Equal(got, msg) {
					t.Fatalf("echo of %d bytes differs", n)
				}
				testenv.WaitFor(t, "the pump to stop", func() bool {
					tc.mu.Lock()
					defer tc.mu.Unlock()
					return !tc.pumping
				})
				tc.mu.Lock()
				idle := inputIdle(tc.tc)
				tc.mu.Unlock()
				if !idle {
					t.Fatalf("after %d bytes the idle connection still holds crypto/tls's input buffers", n)
				}
			}
		})
	}
}

// TestTLSReloadEndsResumption: a session made before a reload is not resumed after it,
// so that a changed client_ca_file applies to every new connection (crypto/tls does not
// verify a resumed session's client certificate again); before the reload it is.
func TestTLSReloadEndsResumption(t *testing.T) {
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		t.Run(tls.VersionName(version), func(t *testing.T) {
			r := newRecorder(t)
			r.echo = true
			s := newTestServer(t, r, Options{})
			l := listenTLS(t, s, conf.ListenerTLS, tlsFiles(t, true))
			cfg := clientTLS()
			cfg.MaxVersion = version
			cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
			resumed := func() bool {
				t.Helper()
				c, err := tlsDial(t, l, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				// An echo: the client reads, and so takes in a TLS 1.3 session ticket.
				if _, err := c.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
					t.Fatal(err)
				}
				cs := c.ConnectionState()
				sc := recv(t, r.opened, "OnOpen").TLS()
				if len(sc.PeerCertificates) == 0 {
					t.Fatal("no client certificate on the server side")
				}
				return cs.DidResume
			}
			if resumed() {
				t.Fatal("the first connection resumed a session")
			}
			if !resumed() {
				t.Fatal("test broken: the second connection did not resume the first's session")
			}
			if err := s.ReloadTLS(); err != nil {
				t.Fatal(err)
			}
			if resumed() {
				t.Fatal("a session made before ReloadTLS was resumed after it")
			}
			if !resumed() {
				t.Error("sessions made after the reload are not resumed")
			}
		})
	}
}

// TestTLSAlertOnBadRecord: a record that does not decrypt makes crypto/tls send an alert
// from the goroutine that reads (the poller), not from a Writev: the wire writes it under
// the connection's write lock all the same, the client reads the alert, and OnClose
// reports the TLS error.
func TestTLSAlertOnBadRecord(t *testing.T) {
	for _, typ := range []string{conf.ListenerTLS, conf.ListenerWSS} {
		t.Run(typ, func(t *testing.T) {
			r := newRecorder(t)
			r.echo = true
			s := newTestServer(t, r, Options{})
			l := listen(t, s, typ)
			c := dial(t, l)
			recv(t, r.opened, "OnOpen")
			c.send(t, []byte("before"))
			if got := c.recv(t, 6); string(got) != "before" {
				t.Fatalf("echo: %q", got)
			}
			// An application-data record of 32 bytes that no key encrypted.
			bad := append([]byte{23, 3, 3, 0, 32}, make([]byte, 32)...)
			if _, err := c.raw.Write(bad); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(testenv.Timeout))
			_, err := c.Conn.Read(make([]byte, 64))
			if err == nil || !strings.Contains(err.Error(), "bad record MAC") {
				t.Errorf("client read: %v, want the server's bad_record_mac alert", err)
			}
			ev := recv(t, r.closed, "OnClose")
			if ev.err == nil || errors.Is(ev.err, io.EOF) || !strings.Contains(ev.err.Error(), "listener: TLS") {
				t.Errorf("OnClose(%v), want the TLS error", ev.err)
			}
		})
	}
}

// TestTLSConnLayout guards conn.tls(), which converts a *conn of a tls or wss listener to
// its *tlsConn: that is only sound while conn is tlsConn's first field.
func TestTLSConnLayout(t *testing.T) {
	if off := unsafe.Offsetof(tlsConn{}.conn); off != 0 {
		t.Fatalf("conn is at offset %d in tlsConn, want 0 (conn.tls() depends on it)", off)
	}
}

// TestSetTLS points a listener at other certificate files (a reload that changed the
// paths): new connections get the new certificate, the open one goes on; files that do
// not load change nothing; a plain listener refuses.
func TestSetTLS(t *testing.T) {
	r := newRecorder(t)
	r.echo = true
	s := newTestServer(t, r, Options{})
	l := listenTLS(t, s, conf.ListenerTLS, tlsFiles(t, false))
	old, err := tlsDial(t, l, clientTLS())
	if err != nil {
		t.Fatal(err)
	}
	recv(t, r.opened, "OnOpen")

	dir := t.TempDir()
	cert, key := testPKI().ca.issue("elsewhere", true)
	next := conf.TLS{CertFile: writeFile(t, dir, "other.pem", cert), KeyFile: writeFile(t, dir, "other.key", key), MinVersion: "1.2"}
	bad := next
	bad.KeyFile = filepath.Join(dir, "missing.key")
	if err := l.SetTLS(bad); err == nil || !strings.Contains(err.Error(), "missing.key") {
		t.Fatalf("SetTLS(missing key) = %v", err)
	}
	if cn := serverCN(t, l); cn != "bifrost test server" {
		t.Fatalf("server CN %q after a failed SetTLS", cn)
	}
	recv(t, r.opened, "OnOpen")
	if err := l.SetTLS(next); err != nil {
		t.Fatal(err)
	}
	if cn := serverCN(t, l); cn != "elsewhere" {
		t.Fatalf("server CN %q after SetTLS, want elsewhere", cn)
	}
	recv(t, r.opened, "OnOpen")
	if _, err := old.Write([]byte("still")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 5)
	if _, err := io.ReadFull(old, b); err != nil || string(b) != "still" {
		t.Fatalf("the open connection: %q %v", b, err)
	}

	plain, err := s.Listen(conf.Listener{Type: conf.ListenerTCP, Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.SetTLS(next); err == nil {
		t.Fatal("SetTLS on a tcp listener succeeded")
	}
}
