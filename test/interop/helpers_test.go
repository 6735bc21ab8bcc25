package interop

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse/paho.golang/paho"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// quiet is the one window these tests wait out: proving that something does NOT happen
// needs one, kept short, and used only where no later event can stand in for it. Every
// other wait is on a condition (testenv.WaitFor), bounded by testenv.Timeout.
const quiet = 300 * time.Millisecond

// drain calls take until done reports true, waiting while take finds nothing; it fails
// the test if done is not reached within testenv.Timeout.
func drain(t testing.TB, take, done func() bool) {
	t.Helper()
	testenv.WaitFor(t, "the messages to drain", func() bool {
		for !done() && take() {
		}
		return done()
	})
}

// timeout fires after testenv.Timeout.
func timeout() <-chan time.Time { return time.After(testenv.Timeout) }

// ptr returns a pointer to v, for the optional fields of the client libraries.
func ptr[T any](v T) *T { return &v }

// A msg is an application message as a client received it, whatever the library.
type msg struct {
	Topic   string // resolved from the topic alias when the wire carried none
	Payload string
	QoS     byte
	Retain  bool
	Dup     bool
	// 5.0 only: the properties as received, and whether the topic name was empty on the
	// wire (sent by topic alias only).
	Props     *paho.PublishProperties
	AliasOnly bool
}

// An inbox collects the messages a client receives, in order.
type inbox struct{ ch chan msg }

func newInbox() *inbox { return &inbox{ch: make(chan msg, 4096)} }

func (in *inbox) put(m msg) { in.ch <- m }

// next returns the next message, failing the test if none comes within testenv.Timeout.
func (in *inbox) next(t testing.TB) msg {
	t.Helper()
	select {
	case m := <-in.ch:
		return m
	case <-time.After(testenv.Timeout):
		t.Fatal("timed out waiting for a message")
	}
	return msg{}
}

// take returns the next n messages.
func (in *inbox) take(t testing.TB, n int) []msg {
	t.Helper()
	out := make([]msg, 0, n)
	for range n {
		out = append(out, in.next(t))
	}
	return out
}

// until returns the messages received up to and including the first on topic marker. A
// marker published after the messages under test, through the same broker path, proves
// they have all been routed: nothing that was going to arrive can still be on its way.
func (in *inbox) until(t testing.TB, marker string) []msg {
	t.Helper()
	var out []msg
	for {
		m := in.next(t)
		if m.Topic == marker {
			return out
		}
		out = append(out, m)
	}
}

// none fails the test if a message arrives within quiet.
func (in *inbox) none(t testing.TB) {
	t.Helper()
	select {
	case m := <-in.ch:
		t.Fatalf("unexpected message on %q: %q", m.Topic, m.Payload)
	case <-time.After(quiet):
	}
}

// empty fails the test if a message has already arrived.
func (in *inbox) empty(t testing.TB) {
	t.Helper()
	select {
	case m := <-in.ch:
		t.Fatalf("unexpected message on %q: %q", m.Topic, m.Payload)
	default:
	}
}

// A client is a Paho client of either version, behind the operations the scenarios that
// run in both versions need. Every method fails the test on error.
type client interface {
	pub(t testing.TB, topic string, qos byte, retain bool, payload string)
	sub(t testing.TB, qos byte, filters ...string)
	unsub(t testing.TB, filters ...string)
	// disconnect sends a normal DISCONNECT and closes the connection.
	disconnect(t testing.TB)
	// inbox holds the messages received.
	inbox() *inbox
	// lost is closed when the connection ends other than by disconnect.
	lost() <-chan struct{}
	// present is the session present flag of the CONNACK.
	present() bool
}

// opts are what a client says in CONNECT.
type opts struct {
	id        string
	clean     bool    // clean session (3.1.1) or clean start (5.0)
	expiry    *uint32 // 5.0 session expiry interval; nil: absent (0)
	keepAlive uint16  // seconds; 0: 30
	will      *will
	recvMax   uint16 // 5.0 receive maximum; 0: absent
	aliasMax  uint16 // 5.0 topic alias maximum; 0: absent
	// user and password: sent when user is not empty.
	user, password string
}

// will is a will message.
type will struct {
	topic, payload string
	qos            byte
	retain         bool
	props          *paho.WillProperties // 5.0: delay, expiry and pass-through properties
}

// persistent returns the options of a session that outlives its connection: clean session
// off in 3.1.1, clean start off and a session expiry of five minutes in 5.0.
func persistent(id string) opts {
	return opts{id: id, expiry: ptr[uint32](300)}
}

// clean returns the options of a session that ends with its connection.
func clean(id string) opts { return opts{id: id, clean: true} }

// connect connects a Paho client of the mode's version, failing the test if refused.
func (e *env) connect(t testing.TB, o opts) client {
	t.Helper()
	if e.v5() {
		c, _ := e.connect5(t, o)
		return c
	}
	return e.connect3(t, o)
}

// dial opens a network connection to the broker in the mode's transport: a TCP socket, or
// a WebSocket (subprotocol mqtt) wrapped as a net.Conn.
func (e *env) dial(t testing.TB) net.Conn {
	t.Helper()
	if e.transport == conf.ListenerTCP {
		c, err := net.DialTimeout("tcp", e.tcp, testenv.Timeout)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+e.ws+"/mqtt", &websocket.DialOptions{Subprotocols: []string{"mqtt"}})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(1 << 24)
	// The NetConn's context lives as long as the connection.
	return websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
}

// ctx returns a context bounded by testenv.Timeout for one client call.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	t.Cleanup(cancel)
	return c
}
