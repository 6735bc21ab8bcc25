package bifrost_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// liveConfig is a broker on one loopback listener called a, without a store or HTTP.
func liveConfig(t *testing.T) *bifrost.Config {
	cfg := bifrost.DefaultConfig()
	cfg.Store.Dir = bifrost.StoreOff
	cfg.HTTP.Address = bifrost.HTTPOff
	cfg.Listeners = []bifrost.Listener{{Name: "a", Type: bifrost.ListenerTCP, Address: "127.0.0.1:0"}}
	return cfg
}

// reconfigure applies next and fails the test unless want are among the applied fields.
func reconfigure(t *testing.T, b *bifrost.Broker, next *bifrost.Config, want ...string) bifrost.Report {
	t.Helper()
	rep, err := b.Reconfigure(next)
	if err != nil {
		t.Fatalf("Reconfigure: %v", err)
	}
	var got []string
	for _, ch := range rep.Applied {
		got = append(got, ch.Field)
	}
	for _, f := range want {
		if !slices.Contains(got, f) {
			t.Fatalf("applied %q; want %s among them", got, f)
		}
	}
	return rep
}

// connect opens a 5.0 connection to addr and returns it with its CONNACK, or the error
// of a connection the broker refused without a word.
func connect(t *testing.T, addr, id string) (*mqtttest.Raw, *packet.Connack, error) {
	t.Helper()
	c := mqtttest.DialRaw(t, addr)
	ack, err := c.Connect(&packet.Connect{CleanStart: true, ClientID: []byte(id)})
	return c, ack, err
}

func mustConnect(t *testing.T, addr, id string) (*mqtttest.Raw, *packet.Connack) {
	t.Helper()
	c, ack, err := connect(t, addr, id)
	if err != nil || ack.Code != packet.Success {
		t.Fatalf("CONNECT %s: %v %v", id, ack, err)
	}
	return c, ack
}

// TestReconfigureLimits: lowered limits take effect at once for every connection, and
// the connections already open count against the new max_connections.
func TestReconfigureLimits(t *testing.T) {
	cfg := liveConfig(t)
	b, _ := start(t, cfg)
	addr := b.Addrs()[0].String()
	c1, _ := mustConnect(t, addr, "c1")

	next := cfg.Clone()
	next.Limits.MaxConnections = ptr(2)
	next.Limits.MaxTopicLength = 5
	reconfigure(t, b, next, "limits.max_connections", "limits.max_topic_length")

	mustConnect(t, addr, "c2")
	if _, ack, err := connect(t, addr, "c3"); err == nil {
		t.Fatalf("third connection under max_connections 2: CONNACK %v", ack)
	}
	sa := c1.Expect(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("abcdefgh")}}}, packet.SUBACK)
	if codes := sa.(*packet.Suback).Codes; len(codes) != 1 || codes[0] != packet.TopicFilterInvalid {
		t.Fatalf("SUBACK %v for a filter beyond max_topic_length 5", codes)
	}
}

// TestReconfigureMQTT: the protocol limits a CONNACK states change for connections
// accepted after the reload; one accepted before keeps what it was told.
func TestReconfigureMQTT(t *testing.T) {
	cfg := liveConfig(t)
	b, _ := start(t, cfg)
	addr := b.Addrs()[0].String()
	old, ack := mustConnect(t, addr, "old")
	if ack.Props.MaximumQoS.Set {
		t.Fatalf("Maximum QoS %d before the reload", ack.Props.MaximumQoS.V)
	}

	next := cfg.Clone()
	next.MQTT.MaxQoS = ptr(1)
	next.MQTT.ReceiveMaximum = 7
	next.MQTT.SessionExpiryMax = 60
	reconfigure(t, b, next, "mqtt.max_qos", "mqtt.receive_maximum", "mqtt.session_expiry_max")

	c := mqtttest.DialRaw(t, addr)
	ack, err := c.Connect(&packet.Connect{CleanStart: true, ClientID: []byte("new"),
		Props: packet.Properties{SessionExpiry: packet.Some[uint32](3600)}})
	if err != nil || ack.Code != packet.Success {
		t.Fatalf("CONNECT after the reload: %v %v", ack, err)
	}
	if p := ack.Props; p.MaximumQoS != packet.Some[uint8](1) || p.ReceiveMaximum != packet.Some[uint16](7) || p.SessionExpiry != packet.Some[uint32](60) {
		t.Fatalf("CONNACK after the reload: max QoS %v, receive maximum %v, session expiry %v; want 1, 7, 60",
			p.MaximumQoS, p.ReceiveMaximum, p.SessionExpiry)
	}
	// The connection told Maximum QoS 2 may still publish at QoS 2.
	old.Expect(t, &packet.Publish{Topic: []byte("t"), QoS: 2, PacketID: 1}, packet.PUBREC)
}

// TestReconfigureListeners: a listener removed stops accepting and its clients get
// DISCONNECT 0x8B; one added accepts; one whose address changed moves.
func TestReconfigureListeners(t *testing.T) {
	cfg := liveConfig(t)
	cfg.Listeners = append(cfg.Listeners, bifrost.Listener{Name: "b", Type: bifrost.ListenerTCP, Address: "127.0.0.1:0"})
	b, _ := start(t, cfg)
	addrA, addrB := b.Addrs()[0].String(), b.Addrs()[1].String()
	onB, _ := mustConnect(t, addrB, "on-b")
	onA, _ := mustConnect(t, addrA, "on-a")

	next := cfg.Clone()
	next.Listeners = []bifrost.Listener{cfg.Listeners[0], {Name: "c", Type: bifrost.ListenerWS, Address: "127.0.0.1:0"}}
	rep := reconfigure(t, b, next, "listeners[b]", "listeners[c]")
	if len(rep.Restart) != 0 {
		t.Fatalf("restart %v", rep.Restart)
	}

	p, err := onB.Read(testenv.Timeout)
	if d, ok := p.(*packet.Disconnect); err != nil || !ok || d.Code != packet.ServerShuttingDown {
		t.Fatalf("client of the removed listener got %v, %v; want DISCONNECT 0x8B", p, err)
	}
	if _, err := onB.Read(testenv.Timeout); !errors.Is(err, io.EOF) {
		t.Fatalf("after DISCONNECT: %v; want the connection closed", err)
	}
	if c, err := net.Dial("tcp", addrB); err == nil {
		c.Close()
		t.Fatal("the removed listener still accepts")
	}
	addrs := b.Addrs()
	if len(addrs) != 2 || addrs[0].String() != addrA {
		t.Fatalf("Addrs %v", addrs)
	}
	resp, err := http.Get("http://" + addrs[1].String() + "/mqtt")
	if err != nil {
		t.Fatalf("the added ws listener: %v", err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != http.StatusBadRequest { // a plain GET, not an upgrade: served by the listener
		t.Fatalf("the added ws listener answered %d", resp.StatusCode)
	}
	onA.Expect(t, &packet.Pingreq{}, packet.PINGRESP) // untouched

	moved := next.Clone()
	moved.Listeners[0].Address = "127.0.0.2:0"
	reconfigure(t, b, moved, "listeners[a].address")
	if got := b.Addrs()[1].String(); !strings.HasPrefix(got, "127.0.0.2:") {
		t.Fatalf("Addrs after the move: %v", b.Addrs())
	}
	mustConnect(t, b.Addrs()[1].String(), "moved")
}

// TestReconfigureInvalid: a config with an error changes nothing, and the error names the
// field; a change that needs a restart is reported and not applied, beside a live one.
func TestReconfigureInvalid(t *testing.T) {
	cfg := liveConfig(t)
	var level slog.LevelVar
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: &level}))),
		bifrost.WithLogLevel(&level))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reconfigure(cfg); !errors.Is(err, bifrost.ErrNotStarted) {
		t.Fatalf("Reconfigure before Start: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	addr := b.Addrs()[0].String()

	bad := cfg.Clone()
	bad.Limits.MaxConnections = ptr(1)
	bad.Log.Level = "debug"
	bad.MQTT.MaxQoS = ptr(7)
	rep, err := b.Reconfigure(bad)
	if err == nil || !strings.Contains(err.Error(), "mqtt.max_qos") || len(rep.Applied) != 0 {
		t.Fatalf("Reconfigure(invalid) = %v, %v", rep, err)
	}
	mustConnect(t, addr, "one")
	mustConnect(t, addr, "two") // max_connections 1 was not applied
	if level.Level() != slog.LevelInfo {
		t.Fatalf("log level %v after an invalid config", level.Level())
	}

	mixed := cfg.Clone()
	mixed.Log.Level = "debug"
	mixed.Store.Dir = t.TempDir()
	rep = reconfigure(t, b, mixed, "log.level")
	if len(rep.Restart) != 1 || rep.Restart[0].Field != "store.dir" || rep.Restart[0].Restart == "" {
		t.Fatalf("restart %v; want store.dir", rep.Restart)
	}
	if level.Level() != slog.LevelDebug {
		t.Fatalf("log level %v, want debug", level.Level())
	}
	// Still pending: reported again, and nothing applied twice.
	if rep = reconfigure(t, b, mixed); len(rep.Applied) != 0 || len(rep.Restart) != 1 {
		t.Fatalf("second reload: %+v", rep)
	}
}

// TestReconfigureAuthSysMemory: a password file named by a reload refuses anonymous
// clients; sys_interval starts the $SYS publications; memory.limit reaches the runtime.
func TestReconfigureAuthSysMemory(t *testing.T) {
	cfg := liveConfig(t)
	cfg.SysInterval = ptr(bifrost.Duration(0))
	b, _ := start(t, cfg)
	addr := b.Addrs()[0].String()
	mustConnect(t, addr, "anonymous")
	var sys atomic.Int64
	unsub, err := b.Subscribe("$SYS/#", func(bifrost.Message) { sys.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()

	rec, err := bifrost.HashPassword("secret")
	if err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(pw, []byte("alice:"+rec+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	next := cfg.Clone()
	next.Auth.PasswordFile = pw
	next.SysInterval = ptr(bifrost.Duration(20 * time.Millisecond))
	next.Memory.Limit = 3 << 30
	reconfigure(t, b, next, "auth.password_file", "sys_interval", "memory.limit")

	if _, ack, err := connect(t, addr, "anonymous2"); err != nil || ack.Code == packet.Success {
		t.Fatalf("anonymous CONNECT after a password file: %v %v", ack, err)
	}
	c := mqtttest.DialRaw(t, addr)
	if ack, err := c.Connect(&packet.Connect{CleanStart: true, ClientID: []byte("alice"), UsernameFlag: true,
		Username: []byte("alice"), PasswordFlag: true, Password: []byte("secret")}); err != nil || ack.Code != packet.Success {
		t.Fatalf("alice: %v %v", ack, err)
	}
	testenv.WaitFor(t, "$SYS publications", func() bool { return sys.Load() > 0 })
	if got := debug.SetMemoryLimit(-1); got != 3<<30 {
		t.Fatalf("runtime memory limit %d, want 3GiB", got)
	}
}

// TestReloadAPI: POST /api/v1/reload re-reads the file given with WithConfigFile and
// answers with the report; a file with an error answers 422 naming file, line and field.
func TestReloadAPI(t *testing.T) {
	cfg := liveConfig(t)
	cfg.HTTP.Address = "127.0.0.1:0"
	path := filepath.Join(t.TempDir(), "bifrost.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), bifrost.WithConfigFile(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	post := func() (int, map[string]any) {
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Post("http://"+b.HTTPAddr().String()+"/api/v1/reload", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, m
	}
	base := "store:\n  dir: off\nhttp:\n  address: 127.0.0.1:0\nlisteners:\n  - name: a\n    type: tcp\n    address: 127.0.0.1:0\n"
	write(base + "limits:\n  max_connections: 5\nmemory:\n  profile: edge\n")
	code, m := post()
	out, _ := json.Marshal(m)
	if code != http.StatusOK || !strings.Contains(string(out), `{"field":"limits.max_connections","new":"5","old":"1000000"}`) ||
		!strings.Contains(string(out), `"field":"memory.profile"`) || !strings.Contains(string(out), `"restart":"takes effect only after a restart"`) {
		t.Fatalf("reload: %d %s", code, out)
	}

	write(base + "mqtt:\n  max_qos: 7\n")
	code, m = post()
	if msg, _ := m["error"].(map[string]any)["message"].(string); code != http.StatusUnprocessableEntity || !strings.Contains(msg, path+":10: mqtt.max_qos") {
		t.Fatalf("reload of an invalid file: %d %v", code, m)
	}
}

// TestReconfigureQueueAndTimeout: queue bounds reach a session from its next CONNECT (a
// resumed one included), and connect_timeout the connections accepted after the reload.
func TestReconfigureQueueAndTimeout(t *testing.T) {
	cfg := liveConfig(t)
	cfg.MQTT.ConnectTimeout = bifrost.Duration(time.Minute)
	b, _ := start(t, cfg)
	addr := b.Addrs()[0].String()
	persistent := func() (*mqtttest.Raw, *packet.Connack) {
		c := mqtttest.DialRaw(t, addr)
		ack, err := c.Connect(&packet.Connect{ClientID: []byte("q"), Props: packet.Properties{SessionExpiry: packet.Some[uint32](3600)}})
		if err != nil || ack.Code != packet.Success {
			t.Fatalf("CONNECT: %v %v", ack, err)
		}
		return c, ack
	}
	leave := func(c *mqtttest.Raw) {
		if err := c.Send(&packet.Disconnect{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(testenv.Timeout); !errors.Is(err, io.EOF) {
			t.Fatalf("after DISCONNECT: %v", err)
		}
	}
	c, _ := persistent()
	c.Expect(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("q/#"), QoS: 1}}}, packet.SUBACK)
	leave(c)

	next := cfg.Clone()
	next.Queue.OfflineMessages = 2
	next.MQTT.ConnectTimeout = bifrost.Duration(50 * time.Millisecond)
	reconfigure(t, b, next, "queue.offline_messages", "mqtt.connect_timeout")

	silent := mqtttest.DialRaw(t, addr)
	if _, err := silent.Read(testenv.Timeout); !errors.Is(err, io.EOF) {
		t.Fatalf("a connection that sends no CONNECT: %v; want closed after connect_timeout 50ms", err)
	}

	c, ack := persistent() // resumes the session under the new bounds
	if !ack.SessionPresent {
		t.Fatal("session not resumed")
	}
	leave(c)
	for range 5 {
		if err := b.Publish("q/x", []byte("m"), 1, false); err != nil {
			t.Fatal(err)
		}
	}
	c, _ = persistent()
	if err := c.Send(&packet.Pingreq{}); err != nil {
		t.Fatal(err)
	}
	queued := 0
	for {
		p, err := c.Read(testenv.Timeout)
		if err != nil {
			t.Fatal(err)
		}
		if p.Type() == packet.PINGRESP {
			break
		}
		if p.Type() == packet.PUBLISH {
			queued++
		}
	}
	if queued != 2 {
		t.Fatalf("%d messages kept for the offline session, want queue.offline_messages 2", queued)
	}
}

// TestReconfigureTLSFiles: a tls listener pointed at other certificate files serves the
// new certificate to new connections; a connection made before goes on.
func TestReconfigureTLSFiles(t *testing.T) {
	certA, keyA, rootsA := selfSigned(t.TempDir())
	certB, keyB, rootsB := selfSigned(t.TempDir())
	cfg := liveConfig(t)
	cfg.Listeners[0].Type = bifrost.ListenerTLS
	cfg.Listeners[0].TLS = &bifrost.TLS{CertFile: certA, KeyFile: keyA}
	b, _ := start(t, cfg)
	addr := b.Addrs()[0].String()
	dial := func(roots *x509.CertPool) (*tls.Conn, error) {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
		}
		return c, err
	}
	oc, err := dial(rootsA)
	if err != nil {
		t.Fatal(err)
	}
	old := mqtttest.NewRaw(oc)
	if ack, err := old.Connect(&packet.Connect{CleanStart: true, ClientID: []byte("old")}); err != nil || ack.Code != packet.Success {
		t.Fatalf("CONNECT over TLS: %v %v", ack, err)
	}

	next := cfg.Clone()
	next.Listeners[0].TLS = &bifrost.TLS{CertFile: certB, KeyFile: keyB}
	reconfigure(t, b, next, "listeners[a].tls.cert_file", "listeners[a].tls.key_file")
	if _, err := dial(rootsA); err == nil {
		t.Fatal("the old certificate is still served")
	}
	if _, err := dial(rootsB); err != nil {
		t.Fatalf("the new certificate: %v", err)
	}
	old.Expect(t, &packet.Pingreq{}, packet.PINGRESP)
}

func ptr[T any](v T) *T { return &v }
