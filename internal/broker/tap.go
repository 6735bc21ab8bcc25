package broker

import (
	"errors"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// A TapFunc receives the messages of a tap's subscriptions: the message, and the QoS and
// retain flag of this delivery (the lower of the publisher's and the subscription's QoS;
// the publisher's retain flag, as Retain As Published keeps it). It runs on the
// publisher's goroutine, often a network event loop: it must not block, and m is valid
// only during the call (it may point into the publisher's read buffer), so fn copies what
// it keeps. fn reports whether it staged the message into the Journal (an owned queue,
// ownedqueue.go): the publisher's acknowledgement then waits until the store has it.
type TapFunc func(m *session.Message, qos uint8, retain bool) (stored bool)

// A Tap is an in-process subscriber that sees each message once with its QoS, retain flag
// and properties, as a bridge needs: its subscriptions are No Local and Retain As
// Published, so what the tap itself publishes (Tap.Publish, Tap.PublishStaged) never comes back to it. It
// has no session: what it keeps when its fn returns is its own affair.
type Tap struct {
	b  *Broker
	id uint32
}

// NewTap registers fn as a subscriber without subscriptions; Subscribe adds them.
func (b *Broker) NewTap(fn TapFunc) (*Tap, error) {
	if fn == nil {
		return nil, errors.New("broker: tap without a function")
	}
	return &Tap{b: b, id: b.allocID(target{tap: fn})}, nil
}

// Subscribe adds filter at qos to the tap's subscriptions.
func (t *Tap) Subscribe(filter string, qos uint8) error {
	if err := packet.ValidTopicFilter([]byte(filter)); err != nil {
		return err
	}
	if !packet.ValidUTF8([]byte(filter)) {
		return errors.New("broker: topic filter is not valid UTF-8")
	}
	b := t.b
	flags := uint8(pubsub.NoLocal | pubsub.RetainAsPublished)
	if _, _, shared := packet.SplitShared([]byte(filter)); shared {
		flags = pubsub.RetainAsPublished // No Local is not allowed on a shared subscription
	}
	if !b.indexSubscribe([]byte(filter), filter, pubsub.Sub{Subscriber: pubsub.SubscriberID(t.id), QoS: min(qos, b.live.set.Load().maxQoS), Flags: flags}, nil) {
		b.stats.subscriptions(1)
	}
	return nil
}

// Close removes every subscription in filters (those the tap was given) and frees the
// tap's id. The tap must not be used afterwards.
func (t *Tap) Close(filters []string) {
	b := t.b
	for _, f := range filters {
		if b.indexUnsubscribe([]byte(f), pubsub.SubscriberID(t.id)) {
			b.stats.subscriptions(-1)
		}
	}
	b.freeID(t.id)
}

// Publish publishes p as a client's PUBLISH would be (its pass-through properties and
// message expiry kept) with the tap as publisher, so the tap's own No Local
// subscriptions skip it. It returns the number of recipients. The message is copied.
func (t *Tap) Publish(p *packet.Publish) (int, error) {
	n, _, err := t.PublishStaged(p)
	t.b.commit()
	return n, err
}

// PublishStaged is Publish for a caller that acknowledges p to someone itself, as a
// bridge does to its remote: it also reports whether the store keeps p (a persistent
// recipient queued it, a retained message changed), and leaves what it staged
// uncommitted, so that the caller can take the Journal's generation for the
// acknowledgement (session.Journal.AwaitDurable) and commit the messages of a whole read
// at once.
func (t *Tap) PublishStaged(p *packet.Publish) (n int, durable bool, err error) {
	b := t.b
	if err := validTopicName(string(p.Topic)); err != nil {
		return 0, false, err
	}
	if p.QoS > 2 {
		return 0, false, errors.New("broker: QoS above 2")
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return 0, false, ErrClosed
	}
	m := session.NewMessage(p, p.Topic, t.id, time.Now())
	m.QoS = min(m.QoS, b.live.set.Load().maxQoS)
	bt := b.getBatch()
	n, durable = b.deliver(bt, m)
	b.endBatchStaged(bt)
	return n, durable, nil
}
