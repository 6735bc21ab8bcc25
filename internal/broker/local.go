package broker

import (
	"errors"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// ErrClosed is returned by calls on a closed broker.
var ErrClosed = errors.New("broker: closed")

// Publish publishes a message from the program that embeds the broker, as if a client
// had, with the broker as origin. The payload is copied.
func (b *Broker) Publish(topic string, payload []byte, qos uint8, retain bool) error {
	if err := validTopicName(topic); err != nil {
		return err
	}
	if qos > 2 {
		return errors.New("broker: QoS above 2")
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return ErrClosed
	}
	bt := b.getBatch()
	b.routeOwned(bt, session.NewLocalMessage(topic, payload, qos, retain))
	b.endBatch(bt)
	return nil
}

// Subscribe calls fn, on the publisher's goroutine, for every message published to a
// topic that filter matches, at the publisher's QoS. fn must not block: it runs on the
// network event loop. The returned function cancels the subscription.
func (b *Broker) Subscribe(filter string, fn func(topic string, payload []byte)) (cancel func(), err error) {
	if err := packet.ValidTopicFilter([]byte(filter)); err != nil {
		return nil, err
	}
	if !packet.ValidUTF8([]byte(filter)) {
		return nil, errors.New("broker: topic filter is not valid UTF-8")
	}
	id := b.allocID(target{local: fn})
	b.indexSubscribe([]byte(filter), filter, pubsub.Sub{Subscriber: pubsub.SubscriberID(id), QoS: 2}, nil)
	b.stats.subscriptions(1)
	done := false
	return func() {
		b.mu.Lock()
		if done {
			b.mu.Unlock()
			return
		}
		done = true
		b.mu.Unlock()
		if b.indexUnsubscribe([]byte(filter), pubsub.SubscriberID(id)) {
			b.stats.subscriptions(-1)
		}
		b.freeID(id)
	}, nil
}

func validTopicName(t string) error {
	if err := packet.ValidTopicName([]byte(t)); err != nil {
		return err
	}
	if !packet.ValidUTF8([]byte(t)) {
		return errors.New("broker: topic name is not valid UTF-8")
	}
	return nil
}
