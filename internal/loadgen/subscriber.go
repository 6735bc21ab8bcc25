package loadgen

import (
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// A subscriber reads PUBLISHes on one connection, records their latency and credits the
// publisher each came from, checks each publisher's sequence numbers, and acknowledges
// them as their QoS requires.
type subscriber struct {
	c    *client
	pubs []*publisher // by index, as carried in the payload
	// seqs are the sequence numbers received from the publishers first to
	// first+len(seqs)-1, the ones whose messages this subscriber is due; recvLoop's
	// until it returns.
	seqs  []seqSet
	first int
	slot  int       // this subscriber's counter in each of those publishers' recv
	hist  Histogram // owned by recvLoop until it returns

	received atomic.Int64 // deliveries, each message once: duplicates are in seqs
	last     atomic.Int64 // now() of the last delivery
	foreign  int64        // PUBLISHes not from this run's publishers due here; recvLoop only
}

// newSubscriber returns a subscriber on c due the messages of pubs[first:first+n],
// counting them in the publishers' recv[slot].
func newSubscriber(c *client, pubs []*publisher, first, n, slot int) *subscriber {
	return &subscriber{c: c, pubs: pubs, first: first, seqs: make([]seqSet, n), slot: slot}
}

// recvLoop reads until the connection ends and returns the error that ended it, nil when
// the broker closed it. Acknowledgements are gathered while complete packets remain in the
// read buffer and written together before the next read.
func (s *subscriber) recvLoop() error {
	c := s.c
	// Deliveries arrive in bulk. The reader no longer needs the handshake's buffer when it
	// next asks for more input.
	c.rbuf = make([]byte, 64<<10)
	var (
		pub  packet.Publish
		ack  packet.Ack
		acks []byte
		n    int64
	)
	for {
		h, body, ok, err := c.rd.Next()
		if err != nil {
			return err
		}
		if !ok {
			if n > 0 {
				s.received.Add(n)
				s.last.Store(now())
				n = 0
			}
			if len(acks) > 0 {
				if err := c.write(acks); err != nil {
					return c.ended(err)
				}
				acks = acks[:0]
			}
			if err := c.fill(); err != nil {
				return c.ended(err)
			}
			continue
		}
		switch h.Type {
		case packet.PUBLISH:
			if err := pub.Decode(h, body, c.v); err != nil {
				return err
			}
			if s.deliver(pub.Payload) {
				n++
			}
			switch pub.QoS {
			case 1:
				acks = (&packet.Ack{PacketType: packet.PUBACK, PacketID: pub.PacketID}).AppendTo(acks, c.v)
			case 2:
				acks = (&packet.Ack{PacketType: packet.PUBREC, PacketID: pub.PacketID}).AppendTo(acks, c.v)
			}
		case packet.PUBREL:
			if err := ack.Decode(h, body, c.v); err != nil {
				return err
			}
			acks = (&packet.Ack{PacketType: packet.PUBCOMP, PacketID: ack.PacketID}).AppendTo(acks, c.v)
		}
	}
}

// deliver records one delivery: its sequence number and, the first time, its latency and
// a credit to its publisher, whom it wakes when the publisher waits for that many. It
// reports whether this was the message's first delivery from a publisher due here.
func (s *subscriber) deliver(payload []byte) bool {
	if len(payload) < headerSize {
		s.foreign++
		return false
	}
	i := int(binary.BigEndian.Uint32(payload[8:]))
	if i < s.first || i >= s.first+len(s.seqs) || i >= len(s.pubs) {
		s.foreign++
		return false
	}
	if !s.seqs[i-s.first].add(binary.BigEndian.Uint32(payload[12:])) {
		return false // a duplicate
	}
	sentAt := int64(binary.BigEndian.Uint64(payload))
	s.hist.Record(time.Duration(now() - sentAt))
	p := s.pubs[i]
	if p.recv[s.slot].Add(1) >= p.wakeAt.Load() {
		p.signal()
	}
	return true
}
