package interop

import (
	"sync"
	"testing"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// client5 is an MQTT 5.0 client: Eclipse paho.golang over the mode's transport.
type client5 struct {
	c       *paho.Client
	in      *inbox
	connack *paho.Connack

	mu      sync.Mutex
	aliases map[uint16]string // topic aliases the broker set, to resolve messages sent by alias

	serverDisc chan *paho.Disconnect // a DISCONNECT from the broker
	byUs       chan struct{}         // closed by disconnect
	lostCh     chan struct{}
}

// dial5 connects a paho.golang client and returns its CONNACK; err is non-nil when the
// broker refused the connection (the CONNACK then carries the reason code).
func (e *env) dial5(t testing.TB, o opts) (*client5, *paho.Connack, error) {
	t.Helper()
	c := &client5{
		in:         newInbox(),
		aliases:    make(map[uint16]string),
		serverDisc: make(chan *paho.Disconnect, 1),
		byUs:       make(chan struct{}),
		lostCh:     make(chan struct{}),
	}
	conn := packets.NewThreadSafeConn(e.dial(t))
	c.c = paho.NewClient(paho.ClientConfig{
		ClientID:          o.id,
		Conn:              conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){c.receive},
		OnServerDisconnect: func(d *paho.Disconnect) {
			select {
			case c.serverDisc <- d:
			default:
			}
		},
		OnClientError: func(error) {},
	})
	cp := &paho.Connect{ClientID: o.id, CleanStart: o.clean, KeepAlive: o.keepAlive}
	if cp.KeepAlive == 0 {
		cp.KeepAlive = 30
	}
	props := &paho.ConnectProperties{SessionExpiryInterval: o.expiry}
	if o.recvMax > 0 {
		props.ReceiveMaximum = ptr(o.recvMax)
	}
	if o.aliasMax > 0 {
		props.TopicAliasMaximum = ptr(o.aliasMax)
	}
	cp.Properties = props
	if o.user != "" {
		cp.Username, cp.UsernameFlag = o.user, true
		cp.Password, cp.PasswordFlag = []byte(o.password), true
	}
	if w := o.will; w != nil {
		cp.WillMessage = &paho.WillMessage{Topic: w.topic, Payload: []byte(w.payload), QoS: w.qos, Retain: w.retain}
		cp.WillProperties = w.props
	}
	ack, err := c.c.Connect(ctx(t), cp)
	if err != nil {
		_ = conn.Close()
		return nil, ack, err
	}
	c.connack = ack
	go func() {
		<-c.c.Done()
		select {
		case <-c.byUs:
		default:
			close(c.lostCh)
		}
	}()
	t.Cleanup(func() {
		select {
		case <-c.c.Done():
		default:
			_ = c.c.Disconnect(&paho.Disconnect{})
		}
		<-c.c.Done()
	})
	return c, ack, nil
}

// connect5 is dial5 for a connection that must be accepted.
func (e *env) connect5(t testing.TB, o opts) (*client5, *paho.Connack) {
	t.Helper()
	c, ack, err := e.dial5(t, o)
	if err != nil {
		t.Fatalf("connect %q: %v", o.id, err)
	}
	return c, ack
}

// receive records a message, resolving a topic alias as the spec asks of a receiver
// (paho hands the PUBLISH over as it came).
func (c *client5) receive(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	m := msg{Topic: p.Topic, Payload: string(p.Payload), QoS: p.QoS, Retain: p.Retain, Dup: p.Duplicate(), Props: p.Properties}
	if a := p.Properties.TopicAlias; a != nil {
		c.mu.Lock()
		if p.Topic != "" {
			c.aliases[*a] = p.Topic
		} else {
			m.Topic, m.AliasOnly = c.aliases[*a], true
		}
		c.mu.Unlock()
	}
	c.in.put(m)
	return true, nil
}

func (c *client5) pub(t testing.TB, topic string, qos byte, retain bool, payload string) {
	t.Helper()
	c.publish(t, &paho.Publish{Topic: topic, QoS: qos, Retain: retain, Payload: []byte(payload)})
}

// publish sends p and, for QoS 1 and 2, waits for its acknowledgement.
func (c *client5) publish(t testing.TB, p *paho.Publish) *paho.PublishResponse {
	t.Helper()
	r, err := c.c.Publish(ctx(t), p)
	if err != nil {
		t.Fatalf("publish %q: %v", p.Topic, err)
	}
	return r
}

func (c *client5) sub(t testing.TB, qos byte, filters ...string) {
	t.Helper()
	s := &paho.Subscribe{}
	for _, f := range filters {
		s.Subscriptions = append(s.Subscriptions, paho.SubscribeOptions{Topic: f, QoS: qos})
	}
	c.subscribe(t, s)
}

// subscribe sends s and fails the test unless every subscription is granted.
func (c *client5) subscribe(t testing.TB, s *paho.Subscribe) *paho.Suback {
	t.Helper()
	ack, err := c.c.Subscribe(ctx(t), s)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	for i, r := range ack.Reasons {
		if r >= 0x80 {
			t.Fatalf("subscribe %q refused: %#x", s.Subscriptions[i].Topic, r)
		}
	}
	return ack
}

func (c *client5) unsub(t testing.TB, filters ...string) {
	t.Helper()
	if _, err := c.c.Unsubscribe(ctx(t), &paho.Unsubscribe{Topics: filters}); err != nil {
		t.Fatalf("unsubscribe: %v", err)
	}
}

func (c *client5) disconnect(t testing.TB) {
	t.Helper()
	c.disconnectWith(t, &paho.Disconnect{})
}

// disconnectWith sends d and waits for the connection to close.
func (c *client5) disconnectWith(t testing.TB, d *paho.Disconnect) {
	t.Helper()
	close(c.byUs)
	if err := c.c.Disconnect(d); err != nil {
		t.Fatalf("disconnect: %v", err)
	}
	<-c.c.Done()
}

func (c *client5) inbox() *inbox { return c.in }

func (c *client5) lost() <-chan struct{} { return c.lostCh }

func (c *client5) present() bool { return c.connack.SessionPresent }

// serverDisconnect waits for a DISCONNECT from the broker and returns its reason code.
func (c *client5) serverDisconnect(t testing.TB) byte {
	t.Helper()
	select {
	case d := <-c.serverDisc:
		return d.ReasonCode
	case <-timeout():
		t.Fatal("timed out waiting for the broker's DISCONNECT")
	}
	return 0
}
