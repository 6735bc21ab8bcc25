package bridge

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// freePort returns a loopback port for a broker or a Mosquitto the test starts later.
func freePort(t testing.TB) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(testenv.FreePort(t, false))
	n, _ := strconv.Atoi(port)
	return n
}

// A mosquitto is a Mosquitto broker process on a loopback port, with a config of the
// test's. It may be killed and started again on the same port and persistence directory.
// While it is stopped a holder keeps the port, accepting and closing each connection as
// a broker that is down would refuse it: a free port could be taken meanwhile by a
// broker of another test binary, which the bridge would then deliver to.
type mosquitto struct {
	t    testing.TB
	bin  string
	port int
	conf string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	log    bytes.Buffer
	holder net.Listener
}

// startMosquitto runs mosquitto with extra appended to a config that listens on a free
// loopback port, anonymous, persisting into a directory of the test's.
func startMosquitto(t testing.TB, extra string) *mosquitto {
	t.Helper()
	bin := testenv.Command(t, "mosquitto", "apt-get install -y mosquitto")
	dir := t.TempDir()
	m := &mosquitto{t: t, bin: bin, port: freePort(t), conf: filepath.Join(dir, "mosquitto.conf")}
	if os.Geteuid() == 0 {
		extra += "\nuser root\n" // started as root, mosquitto would become user mosquitto, locked out of dir
	}
	cfg := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location %s/\n"+
		"log_dest stderr\nlog_type all\nmax_queued_messages 100000\n%s\n", m.port, dir, extra)
	if err := os.WriteFile(m.conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	m.start()
	t.Cleanup(func() {
		m.stop(syscall.SIGTERM)
		m.release()
		if t.Failed() {
			m.mu.Lock()
			t.Logf("mosquitto log:\n%s", m.log.String())
			m.mu.Unlock()
		}
	})
	return m
}

func (m *mosquitto) addr() string { return "127.0.0.1:" + strconv.Itoa(m.port) }

// start runs the process and returns once it accepts connections.
func (m *mosquitto) start() {
	m.t.Helper()
	m.release()
	cmd := exec.Command(m.bin, "-c", m.conf)
	m.mu.Lock()
	cmd.Stderr = lockedWriter{&m.mu, &m.log}
	m.mu.Unlock()
	if err := cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	testenv.WaitFor(m.t, "mosquitto to accept connections", func() bool {
		c, err := net.Dial("tcp", m.addr())
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// inFlightTo is how many QoS 1 and 2 PUBLISHes Mosquitto has sent the client id whose
// exchange has not ended (PUBACK, PUBCOMP), read from its log, which says what it did in
// the order it did it. A restart's restored messages are not in the log: the count holds
// until Mosquitto restarts with messages in flight.
func (m *mosquitto) inFlightTo(id string) int {
	m.mu.Lock()
	log := m.log.String()
	m.mu.Unlock()
	q := regexp.QuoteMeta(id)
	sent := regexp.MustCompile(`Sending PUBLISH to ` + q + ` \(d\d, q[12], r\d, m(\d+),`)
	ended := regexp.MustCompile(`Received PUB(?:ACK|COMP) from ` + q + ` \(Mid: (\d+)`)
	open := map[string]bool{}
	for line := range strings.Lines(log) {
		if s := sent.FindStringSubmatch(line); s != nil {
			open[s[1]] = true
		} else if e := ended.FindStringSubmatch(line); e != nil {
			delete(open, e[1])
		}
	}
	return len(open)
}

// stop sends sig to the process (by its PID) and waits for it to exit.
func (m *mosquitto) stop(sig syscall.Signal) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(testenv.Timeout):
		_ = cmd.Process.Kill()
		<-done
		m.t.Errorf("mosquitto did not exit on %s", sig)
	}
	m.hold()
}

// hold keeps the stopped broker's port (see mosquitto); a failure to bind it is only
// logged, as the test ran before the holder.
func (m *mosquitto) hold() {
	l, err := net.Listen("tcp", m.addr())
	if err != nil {
		m.t.Logf("holding mosquitto's port: %v", err)
		return
	}
	m.mu.Lock()
	m.holder = l
	m.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
}

// release frees the port for mosquitto to bind again.
func (m *mosquitto) release() {
	m.mu.Lock()
	l := m.holder
	m.holder = nil
	m.mu.Unlock()
	if l != nil {
		_ = l.Close()
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// testConfig is the config of a broker under test, validated: one loopback TCP listener,
// no HTTP endpoint, no $SYS, the store as store sets it, and bridges; and its logger,
// into the test's log.
func testConfig(t testing.TB, store func(*conf.Store), bridges []conf.Bridge) (*conf.Config, *slog.Logger) {
	t.Helper()
	cfg := conf.Default()
	cfg.Listeners = []conf.Listener{{Type: conf.ListenerTCP, Address: "127.0.0.1:0"}}
	store(&cfg.Store)
	cfg.HTTP.Address = conf.HTTPOff
	cfg.SysInterval = new(conf.Duration)
	cfg.Bridges = bridges
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg, slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// startBifrost runs a broker with one loopback TCP listener, no store and no HTTP
// endpoint, and the bridges given; it returns the broker, its MQTT address and the
// bridges.
func startBifrost(t testing.TB, bridges ...conf.Bridge) (*broker.Broker, string, *Set) {
	t.Helper()
	cfg, log := testConfig(t, func(s *conf.Store) { s.Dir = conf.StoreOff }, bridges)
	b, err := broker.New(broker.Options{Config: cfg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	set, err := Start(cfg.Bridges, b, log, nil) // before the listeners, as bifrost.Start does
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		set.Close()
		b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		set.Close()
		b.Close()
	})
	return b, b.Listeners()[0].Addr().String(), set
}

// testWriter sends the broker's log to the test's, shown when it fails.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// An inbox records the messages a client receives.
type inbox struct {
	mu   sync.Mutex
	msgs []paho.Message
}

func (in *inbox) add(_ paho.Client, m paho.Message) {
	in.mu.Lock()
	in.msgs = append(in.msgs, m)
	in.mu.Unlock()
}

// count is how many messages with this payload arrived.
func (in *inbox) count(payload string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := 0
	for _, m := range in.msgs {
		if string(m.Payload()) == payload {
			n++
		}
	}
	return n
}

// topicOf is the topic of the first message with this payload, "" if none.
func (in *inbox) topicOf(payload string) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, m := range in.msgs {
		if string(m.Payload()) == payload {
			return m.Topic()
		}
	}
	return ""
}

// payloads returns how often each payload arrived.
func (in *inbox) payloads() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[string]int{}
	for _, m := range in.msgs {
		out[string(m.Payload())]++
	}
	return out
}

// client connects a 3.1.1 client (Paho) to addr; with filter, it subscribes to it at QoS
// 1 and records what arrives.
func client(t testing.TB, addr, id string, clean bool, filter string) (paho.Client, *inbox) {
	t.Helper()
	return clientQoS(t, addr, id, clean, filter, 1)
}

// clientQoS is client with a subscription at qos.
func clientQoS(t testing.TB, addr, id string, clean bool, filter string, qos byte) (paho.Client, *inbox) {
	t.Helper()
	in := &inbox{}
	return clientInto(t, addr, id, clean, filter, qos, in), in
}

// clientInto is clientQoS recording into in: a client that comes back to its broker
// (after a restart) adds to what it had received.
//
// The client never reconnects by itself: paho.mqtt.golang v1.5.1's reconnect races, its
// resume marking DUP on a stored PUBLISH that the lost connection's writer may still be
// encoding (the race detector reports it; eclipse-paho/paho.mqtt.golang#703). A test
// whose broker goes away disconnects the client and connects a new one when the broker
// is back.
func clientInto(t testing.TB, addr, id string, clean bool, filter string, qos byte, in *inbox) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetCleanSession(clean).
		SetAutoReconnect(false).SetConnectRetry(true).SetConnectRetryInterval(50 * time.Millisecond).SetOrderMatters(false)
	if filter != "" {
		// A resumed session's messages may come before Subscribe registers its handler:
		// without a default one, Paho acknowledges and drops them.
		o.SetDefaultPublishHandler(in.add)
	}
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
		t.Fatalf("%s: connect to %s: %v", id, addr, tok.Error())
	}
	if filter != "" {
		if tok := c.Subscribe(filter, qos, in.add); !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
			t.Fatalf("%s: subscribe: %v", id, tok.Error())
		}
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// publish publishes and waits for the broker's acknowledgement (QoS 1) or the write.
func publish(t testing.TB, c paho.Client, topic string, qos byte, payload string) {
	t.Helper()
	tok := c.Publish(topic, qos, false, payload)
	if !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
		t.Fatalf("publish %s: %v", topic, tok.Error())
	}
}

// probe publishes numbered probes on topic through pub until one reaches in: the path
// from one broker to the other (subscriptions on both sides) is then in place.
func probe(t testing.TB, pub paho.Client, topic string, in *inbox) {
	t.Helper()
	i := 0
	testenv.WaitFor(t, "a probe on "+topic+" to cross the bridge", func() bool {
		for j := range i {
			if in.count(fmt.Sprintf("probe-%s-%d", topic, j)) > 0 {
				return true
			}
		}
		publish(t, pub, topic, 0, fmt.Sprintf("probe-%s-%d", topic, i))
		i++
		return false
	})
}

// bridgeConf is a bridge to addr with quick reconnects and the given topics.
func bridgeConf(name, addr, protocol string, topics ...conf.BridgeTopic) conf.Bridge {
	return conf.Bridge{Name: name, Address: addr, Protocol: protocol, ClientID: "bifrost." + name,
		RestartTimeout: conf.Duration(50 * time.Millisecond), RestartTimeoutMax: conf.Duration(200 * time.Millisecond),
		Topics: topics}
}

// retained reports whether a message with this payload arrived with the retain flag.
func (in *inbox) retained(payload string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, m := range in.msgs {
		if string(m.Payload()) == payload && m.Retained() {
			return true
		}
	}
	return false
}

// on reports whether a message with this topic and payload arrived (with the retain
// flag, if retained).
func (in *inbox) on(topic, payload string, retained bool) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, m := range in.msgs {
		if m.Topic() == topic && string(m.Payload()) == payload && (m.Retained() || !retained) {
			return true
		}
	}
	return false
}
