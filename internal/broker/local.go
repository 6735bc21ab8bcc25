package broker

import (
	"errors"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
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

func validTopicName(t string) error {
	if err := packet.ValidTopicName([]byte(t)); err != nil {
		return err
	}
	if !packet.ValidUTF8([]byte(t)) {
		return errors.New("broker: topic name is not valid UTF-8")
	}
	return nil
}
