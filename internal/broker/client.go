package broker

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/listener"
	"github.com/bifrost-mqtt/bifrost/internal/memory"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// client is one network connection: its packet reader and, after CONNECT, its session.
// Its fields are used under mu, by the connection's own event-loop calls (OnRoundData or
// OnData, OnClose, OnDrained) and the auth pool, except the atomic ones.
type client struct {
	// mu serializes the event loop's calls with the auth pool finishing a CONNECT or an
	// AUTH step (auth.go); uncontended otherwise.
	mu   sync.Mutex
	conn listener.Conn
	r    packet.Reader
	s    *session.Session // nil until CONNECT is accepted
	auth *authState       // an authentication in progress, or the method to re-authenticate with
	// closing: the connection is being closed; no further packet is handled.
	closing bool
	// willOnClose: publish the will when the connection closes (false after a normal
	// DISCONNECT [MQTT-3.1.2-10]).
	willOnClose bool
	realm       uint8 // the auth configuration of the client's listener (Broker.realms)
	// bridge: a 3.1/3.1.1 CONNECT carried Mosquitto's bridge marker (packet.Connect.Bridge):
	// its subscriptions are No Local and Retain As Published (subscribe.go).
	bridge bool
	// set is the protocol limits the connection was accepted under (settings.go).
	set *settings
	// For the admin API (admin.go): the keep alive in force, and when the CONNECT was
	// accepted, in seconds since the broker started.
	keepAlive uint16
	since     uint32
	// The publish rate bucket (limits.go): tokens, and the last refill in ms since start.
	pubTokens float32
	pubLast   uint32
	// takenOver is set by another connection's CONNECT that took the session over.
	takenOver atomic.Bool
	// held: backpressure holds its reads (backpressure.go); guarded by Broker.paused.mu.
	// A byte of the struct's padding.
	held bool
}

// batch is the scratch space of a poller's round (round) or of one call off the pollers:
// decode targets, match results and the sessions that have bytes to flush. Reused, so
// handling packets allocates nothing.
type batch struct {
	connect     packet.Connect
	connack     packet.Connack
	authReq     auth.Request // lent to a Quick authenticator (authenticate)
	publish     packet.Publish
	ack         packet.Ack
	subscribe   packet.Subscribe
	unsubscribe packet.Unsubscribe
	disconnect  packet.Disconnect
	auth        packet.Auth
	suback      packet.Suback
	unsuback    packet.Unsuback
	matches     pubsub.Matches
	recipients  []recipient
	retained    *retainHold      // the hold of the retained change this PUBLISH handed to the cluster
	from        *session.Session // the session whose PUBLISH is being routed; nil: the broker's own
	hold        holder           // its client, under when_full: backpressure (backpressure.go)
	msg         session.Message  // the borrowed message of the PUBLISH being routed
	props       []byte           // scratch for msg's encoded properties
	dirty       []*session.Session
	cluster     clusterScratch // nil Options.Cluster: never used
}

// mark records that s has bytes to flush.
func (bt *batch) mark(s *session.Session, dirtied bool) {
	if dirtied {
		bt.dirty = append(bt.dirty, s)
	}
}

// flush writes every dirty session's bytes, once each.
func (bt *batch) flush() {
	for i, s := range bt.dirty {
		s.Flush()
		bt.dirty[i] = nil
	}
	bt.dirty = bt.dirty[:0]
}

// reset makes bt ready for the next connection's packets; the dirty sessions stay.
func (bt *batch) reset() {
	bt.msg = session.Message{}
	clear(bt.recipients)
	bt.recipients = bt.recipients[:0]
	bt.matches.Reset()
	if cap(bt.recipients) > 1024 {
		bt.recipients = nil
	}
}

// end flushes bt's dirty sessions and lets a storm's dirty list go.
func (bt *batch) end() {
	bt.flush()
	if cap(bt.dirty) > 1024 {
		bt.dirty = nil
	}
}

// batches are where packets are handled: each poller's round, touched only by that
// poller's goroutine, and a pool of batches for the callbacks off the pollers. Set by
// New; rounds is never resized.
type batches struct {
	rounds []round // by poller (listener.Batcher's loop)
	pool   sync.Pool
}

// getBatch takes a batch from the pool for the packets of one callback off the pollers
// (an OnData, a drain notice, the auth pool, an in-process publish); endBatch ends it.
func (b *Broker) getBatch() *batch { return b.batches.pool.Get().(*batch) }

// endBatch ends a callback's batch: the sessions it wrote to are flushed, what it staged
// for the store is committed, and the batch goes back to the pool.
func (b *Broker) endBatch(bt *batch) {
	b.endBatchStaged(bt)
	b.commit() // what the batch staged for the store (persist.go)
}

// endBatchStaged is endBatch for a caller that commits what the batch staged itself
// (Tap.PublishStaged).
func (b *Broker) endBatchStaged(bt *batch) {
	bt.end()
	bt.reset()
	b.batches.pool.Put(bt)
}

// A round is a poller's batch, kept over the OnRoundData calls of one round of events and
// ended by EndRound (listener.Batcher): a session written to by many connections of the
// round, a fan-in subscriber most of all, is flushed once, in one write, where a batch per
// call would write once per publisher; the round's durable messages go to the store in one
// commit. Only the poller's goroutine touches its round. A round that has handled
// roundBytes ends early, so the bytes it holds for its sessions stay bounded.
type round struct {
	bt batch
	in int      // bytes handled since the round's last end
	_  [64]byte // rounds of different pollers on different cache lines
}

// roundBytes bounds what a round handles before it flushes: two full reads.
const roundBytes = 64 << 10

// OnRoundData implements listener.Batcher: OnData, but the flush and the commit wait for
// the end of the round.
func (b *Broker) OnRoundData(c listener.Conn, data []byte, loop int) {
	r := &b.batches.rounds[loop]
	b.onData(&r.bt, c, data)
	r.bt.reset()
	r.in += len(data)
	if r.in >= roundBytes {
		b.endRound(r)
	}
}

// EndRound implements listener.Batcher.
func (b *Broker) EndRound(loop int) {
	if r := &b.batches.rounds[loop]; r.in > 0 {
		b.endRound(r)
	}
}

func (b *Broker) endRound(r *round) {
	r.in = 0
	r.bt.end()
	b.commit()
}

// admitAccepted is the listener's Admit hook: the per-address connect rate, checked on
// the accept goroutine before the connection costs anything more.
func (b *Broker) admitAccepted(_ *listener.Listener, remote netip.Addr) bool {
	if b.live.limits.Load().connectRateOK(remote, now()) {
		return true
	}
	b.stats.refused("connect_rate")
	return false
}

// OnOpen implements listener.Handler.
func (b *Broker) OnOpen(c listener.Conn) {
	if ok, reason := b.live.limits.Load().admit(c, now()); !ok {
		// Closed before a byte is read: a flood costs the accept and nothing more.
		b.stats.refused(reason)
		_ = c.Close()
		return
	}
	cl := &client{conn: c, realm: b.realms.of[c.Listener().Name()], set: b.live.set.Load()}
	cl.r.MaxSize = int(cl.set.lim.MaxPacketSize)
	c.SetValue(cl)
	b.stats.connection(c.Listener().Name(), 1)
}

// OnData implements listener.Handler: it reads every complete packet in data and handles
// it, then flushes the sessions those packets wrote to.
func (b *Broker) OnData(c listener.Conn, data []byte) {
	bt := b.getBatch()
	b.onData(bt, c, data)
	b.endBatch(bt)
}

var _ listener.Batcher = (*Broker)(nil)

// onData handles every complete packet in data, with bt. While the client's CONNECT or an
// AUTH step is being decided, data is only kept (auth.go).
func (b *Broker) onData(bt *batch, c listener.Conn, data []byte) {
	cl, _ := c.Value().(*client)
	if cl == nil {
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closing {
		return
	}
	b.stats.bytesRecv.Add(uint64(len(data)))
	if b.cluster != nil && cl.s != nil && !b.cluster.ServingAt(now()) {
		b.unserved(bt, cl) // cluster_owner.go: the lease ran out, a pause perhaps
		return
	}
	if cl.auth != nil && cl.auth.working {
		cl.r.Keep(data)
		if cl.r.Held() > maxHeldBytes {
			if b.debugging() {
				b.log.Debug("closing connection", "remote", c.RemoteAddr().String(), "err", errHeldBytes)
			}
			b.closeNow(cl)
			cl.r.Release()
		}
		return
	}
	cl.r.Feed(data)
	b.handlePackets(bt, cl)
}

var _ listener.Drainer = (*Broker)(nil) // else the listener would never say a connection drained

// OnDrained implements listener.Drainer: c's session held QoS 1 and 2 messages back
// while c was backed up (session.Deliver), and c has drained; the next ones are written.
// It runs on the listener's notice goroutine, possibly beside c's OnData: cl.mu is held
// only to read the session, as any publisher delivering to it would.
func (b *Broker) OnDrained(c listener.Conn) {
	cl, _ := c.Value().(*client)
	if cl == nil {
		return
	}
	cl.mu.Lock()
	s, closing := cl.s, cl.closing
	cl.mu.Unlock()
	if s == nil || closing {
		return
	}
	bt := b.getBatch()
	dirtied, dropped := s.Pump(c, now())
	bt.mark(s, dirtied)
	b.droppedAll(s, &dropped)
	b.endBatch(bt) // flushes, and commits what the pump staged for the store
}

// handlePackets handles the packets the reader has, until it runs out or the connection must
// wait for an authentication step; then the reader keeps what is left. The caller holds
// cl.mu.
//
// A complete packet is what keeps the connection alive: the server closes one that sends
// no Control Packet within 1.5 times its keep alive [MQTT-3.1.2-22] ([MQTT-3.1.2-24] in
// 3.1.1), however many bytes of an unfinished one trickle in. So the listener refreshes
// nothing by itself and handlePackets touches the connection once per call that completed a
// packet: the packets of one read arrived together, and one clock read covers them all.
func (b *Broker) handlePackets(bt *batch, cl *client) {
	touched := false
	for !cl.closing {
		if cl.auth != nil && cl.auth.working {
			cl.r.Hold() // the input is the caller's: copy what is left
			if touched {
				cl.conn.Touch()
			}
			return
		}
		if cl.takenOver.Load() {
			cl.closing = true
			break
		}
		h, body, ok, err := cl.r.Next()
		if err != nil {
			b.protocolError(bt, cl, err)
			break
		}
		if !ok {
			break
		}
		touched = true
		b.handle(bt, cl, h, body)
	}
	if touched {
		cl.conn.Touch()
	}
	if cl.closing {
		cl.r.Release()
	}
}

// handle dispatches one packet.
func (b *Broker) handle(bt *batch, cl *client, h packet.Header, body []byte) {
	if cl.s == nil {
		if cl.auth != nil {
			b.handleAuthing(bt, cl, h, body)
			return
		}
		if h.Type != packet.CONNECT {
			// The first packet must be CONNECT [MQTT-3.1.0-1].
			b.closeNow(cl)
			return
		}
		b.onConnect(bt, cl, h, body)
		return
	}
	v := cl.r.Version
	var err error
	switch h.Type {
	case packet.PUBLISH:
		b.mem.budget.Spend(len(body)) // before the level is read below (memory/budget.go)
		if err = bt.publish.Decode(h, body, v); err == nil {
			err = bt.publish.CheckFromClient()
		}
		if err == nil {
			err = b.onPublish(bt, cl, &bt.publish)
		}
		if err == nil && b.pressure() >= memory.Hard {
			b.pausePublisher(cl) // pause.go
		}
	case packet.PUBACK, packet.PUBREC, packet.PUBCOMP:
		if err = bt.ack.Decode(h, body, v); err == nil {
			dirtied, dropped := cl.s.Ack(&bt.ack, now())
			bt.mark(cl.s, dirtied)
			b.droppedAll(cl.s, &dropped)
		}
	case packet.PUBREL:
		if err = bt.ack.Decode(h, body, v); err == nil {
			b.onPubrel(bt, cl, &bt.ack)
		}
	case packet.SUBSCRIBE:
		if err = bt.subscribe.Decode(h, body, v); err == nil {
			err = b.onSubscribe(bt, cl, &bt.subscribe)
		}
	case packet.UNSUBSCRIBE:
		if err = bt.unsubscribe.Decode(h, body, v); err == nil {
			b.onUnsubscribe(bt, cl, &bt.unsubscribe)
		}
	case packet.PINGREQ:
		if err = (packet.Pingreq{}).Decode(h, body, v); err == nil {
			bt.mark(cl.s, cl.s.Send(packet.Pingresp{})) // [MQTT-3.12.4-1]
		}
	case packet.DISCONNECT:
		if err = bt.disconnect.Decode(h, body, v); err == nil {
			err = b.onDisconnect(bt, cl, &bt.disconnect)
		}
	case packet.AUTH:
		if err = bt.auth.Decode(h, body, v); err == nil {
			err = b.onAuth(cl, &bt.auth)
		}
	case packet.CONNECT:
		err = errSecondConnect
	default: // CONNACK, SUBACK, UNSUBACK, PINGRESP: a server never receives these
		err = errServerPacket
	}
	if err != nil {
		b.protocolError(bt, cl, err)
	}
}

var (
	errSecondConnect = &packet.Error{Code: packet.ProtocolError, Rule: "MQTT-3.1.0-2", Text: "second CONNECT"}
	errServerPacket  = &packet.Error{Code: packet.ProtocolError, Rule: "MQTT-2.1.3-1", Text: "packet type only a server sends"}
)

// protocolError ends a connection over a violation: a v5 client first gets a DISCONNECT
// (or, before CONNACK, a CONNACK) with the reason code the error carries [MQTT-4.13.1-1];
// the connection is then shut down gracefully so it can read it. The will is published:
// this is not a normal disconnect.
func (b *Broker) protocolError(bt *batch, cl *client, err error) {
	rc := packet.MalformedPacket
	var code packet.ReasonCode
	if errors.As(err, &code) {
		rc = code
	}
	if b.debugging() {
		b.log.Debug("closing connection on protocol error", "remote", cl.conn.RemoteAddr().String(), "err", err)
	}
	if cl.s == nil {
		if cl.auth != nil && cl.r.Version == packet.V5 {
			// During enhanced authentication: spec 4.13.1.
			b.refuse(cl, packet.V5, rc, refusal{why: err.Error(), cid: cl.auth.cid})
			return
		}
		cl.closing = true
		cl.conn.Shutdown()
		return
	}
	cl.closing = true
	bt.flush() // what was queued before the violation goes first
	cl.s.Disconnect(rc)
	b.detach(bt, cl)
}

// debugging reports whether Debug records are logged: a Debug line whose arguments cost
// something (the peer's address is a system call and two allocations) is built only then.
func (b *Broker) debugging() bool { return b.log.Enabled(context.Background(), slog.LevelDebug) }

// closeNow closes a connection without a word: before CONNECT nothing may be sent.
func (b *Broker) closeNow(cl *client) {
	cl.closing = true
	cl.conn.Close()
}

// OnClose implements listener.Handler: the connection is gone. The session is detached,
// the will published or scheduled, and the session ended or left to expire.
func (b *Broker) OnClose(c listener.Conn, err error) {
	cl, _ := c.Value().(*client)
	if cl == nil {
		return
	}
	b.live.limits.Load().open.Add(-1)
	bt := b.getBatch()
	cl.mu.Lock()
	cl.closing = true
	b.unpause(cl)
	cl.auth = nil
	cl.r.Release()
	b.stats.connection(c.Listener().Name(), -1)
	if cl.s != nil {
		b.detach(bt, cl)
	}
	cl.mu.Unlock()
	b.endBatch(bt) // its commit may wait for the store: not under cl.mu
}

// detach takes cl's session off its connection: unacknowledged shared-subscription
// messages go to other members, the will is published or scheduled, and the session ends
// or is left to expire. The broker calls it as soon as it decides to end a connection (a
// DISCONNECT, a protocol error), before the socket closes: a client that sees the close and
// reconnects at once must find the session offline, not a live connection to take over
// (with expiry 0, not find it at all). OnClose calls it for every other end; a second call,
// or one after a takeover, finds the session detached and does nothing.
func (b *Broker) detach(bt *batch, cl *client) {
	s := cl.s
	shared, detached := s.Detach(cl.conn)
	if !detached {
		return // taken over (takeOver counted it), or detached already
	}
	b.online(s.Version(), -1)
	for _, d := range shared {
		b.redeliverShared(bt, s, d)
	}
	will := s.TakeWill()
	if !cl.willOnClose {
		will = nil
	}
	b.sessionOffline(bt, s, will)
}
