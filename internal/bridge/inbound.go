package bridge

import (
	"errors"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// Messages in from the remote
//
// A PUBLISH from the remote is published here as it is read (onRemote). Its
// acknowledgement (PUBACK, or PUBREC for QoS 2) tells the remote it may forget the
// message, so it waits, as a local publisher's does (broker.sendAck), until the store has
// what the local publish staged for persistent subscribers and retained topics, under the
// store's sync policy. The reader never waits for the disk: after the packets of one read
// it takes the Journal's generation for those that staged something (AwaitDurable),
// commits once, and queues every acknowledgement of the read, in order, behind the ones
// still held [MQTT-4.6.0-2]. Whatever the store has reported goes out at once; the rest
// goes out from the writer when the store's report wakes it. A generation that fails
// closes the connection with its acknowledgements unsent, so the remote sends those
// messages again (to a persistent bridge session) rather than drop them.
//
// QoS 2 (method B of spec 4.3.3 on the receiving side): the packet id of a message
// published here is kept until the remote's PUBREL, so a PUBLISH the remote sends again
// with that id (DUP, after a lost PUBREC) is acknowledged but not published twice. The
// ids are the bridge's session state on the remote's side: they survive reconnects
// while the remote resumes the session (CONNACK Session Present), and are forgotten
// when it does not. They are not stored: after a restart of bifrost, a
// message whose PUBREC had not reached the remote may be published here twice.

// A heldAck is an acknowledgement for the remote, in the order its packet came.
type heldAck struct {
	t     packet.Type
	id    uint16
	stage bool   // it waits for what its publish staged: holdAcks sets gen
	gen   uint64 // the Journal generation it waits for; 0: none
}

var errStoreFailed = errors.New("bridge: the store failed to keep a message from the remote")

// onDurable is the Journal's report of generation gen (AwaitDurable), on the store's
// committer goroutine: it records it and wakes the writer to send what waited for it.
func (br *Bridge) onDurable(gen uint64, err error) {
	if err != nil {
		br.ackFailed.Store(gen)
	}
	br.ackDone.Store(gen)
	for _, ch := range [...]chan struct{}{br.wake, br.durable} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// received handles a PUBLISH from the remote at QoS 1 or 2: it publishes it here,
// unless it is a QoS 2 message published already, and returns its acknowledgement. Only
// the reader calls it.
func (cn *conn) received(p *packet.Publish) heldAck {
	br := cn.br
	if p.QoS == 1 {
		return heldAck{t: packet.PUBACK, id: p.PacketID, stage: br.onRemote(p)}
	}
	a := heldAck{t: packet.PUBREC, id: p.PacketID}
	if gen, seen := br.inbound[p.PacketID]; seen {
		a.gen = gen // acknowledged no sooner than the first copy
		return a
	}
	a.stage = br.onRemote(p)
	br.inbound[p.PacketID] = 0
	return a
}

// released handles the remote's PUBREL: the packet id is free again, and the PUBCOMP
// goes out behind the acknowledgements before it.
func (cn *conn) released(id uint16) heldAck {
	delete(cn.br.inbound, id)
	return heldAck{t: packet.PUBCOMP, id: id}
}

// holdAcks gives the acknowledgements of one read that wait for the store the Journal's
// current generation, commits what the read staged, and queues them all for the remote.
// Only the reader calls it; wmu is not held.
func (cn *conn) holdAcks(acks []heldAck, staged bool) {
	br := cn.br
	if j := br.q.j; j != nil {
		if staged {
			gen := j.AwaitDurable(br.awaitGen, br.onDurable)
			br.awaitGen = gen
			for i := range acks {
				if a := &acks[i]; a.stage {
					a.gen = gen
					if a.t == packet.PUBREC {
						br.inbound[a.id] = gen
					}
				}
			}
		}
		j.Commit()
	}
	cn.wmu.Lock()
	cn.acks = append(cn.acks, acks...)
	cn.wmu.Unlock()
}

// writeAcks writes, in order, the queued acknowledgements whose generation the store has
// reported, and reports whether it wrote any. A failed generation ends the connection
// (errStoreFailed). wmu is held.
func (cn *conn) writeAcks() (bool, error) {
	br := cn.br
	done, failed := br.ackDone.Load(), br.ackFailed.Load()
	n := 0
	for ; n < len(cn.acks); n++ {
		a := cn.acks[n]
		if a.gen > done {
			break
		}
		if a.gen != 0 && a.gen <= failed {
			return false, errStoreFailed
		}
		if err := cn.writeAckLocked(a.t, a.id); err != nil {
			return false, err
		}
	}
	if n == 0 {
		return false, nil
	}
	k := copy(cn.acks, cn.acks[n:])
	cn.acks = cn.acks[:k]
	return true, nil
}
