package session

// BorrowForwarded sets m to a borrowed view of a message another cluster node forwarded:
// topic, payload and the publisher's encoded pass-through properties stay in the
// caller's buffer, valid while the caller delivers m. expiry is the deadline in Unix
// nanoseconds (0: none), computed from the expiry left when the message was sent.
func (m *Message) BorrowForwarded(topic, payload, props []byte, qos uint8, retain bool, expiry int64) {
	*m = Message{topic: topic, payload: payload, props: props, QoS: qos, Retain: retain,
		Expiry: expiry, borrowed: true}
}
