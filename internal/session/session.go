// Package session is one client's MQTT state: what it negotiated at CONNECT, the QoS 1
// and 2 flows in both directions, its bounded outbound queue, its topic aliases, its
// subscriptions and its will. A session outlives its connections when the client asked for
// a persistent one; the broker attaches and detaches connections.
//
// # Memory
//
// An idle session is one small struct. Everything that only traffic needs (the inflight
// window, the queue, the aliases, the inbound QoS 2 ids) sits behind one pointer, created on
// first use and dropped when it empties again; the bytes waiting to be written sit in a
// pooled buffer held only until the next Flush.
//
// # Writing
//
// Deliver and Send encode packets into the session's pending buffer and report whether
// the buffer was empty before (the session became dirty). The caller collects dirty
// sessions and calls Flush on each once it has finished its batch of work, so that a
// publisher's burst reaches each subscriber in as few writes as possible.
//
// # Locking
//
// Every method takes the session's own lock; none is held on return. A caller never holds
// two sessions' locks. Bytes reach the socket in the order they were encoded: Conn.Write
// is called under the lock (it only queues), and Flush, which writes without it so that
// other goroutines go on delivering, takes the connection's write lock first
// (Conn.WriteAfter).
//
// # Persistence
//
// With a Journal in Limits, a persistent session stages every change of its state into
// the store under its own lock, then the Journal's, and holds output that reveals stored
// state until the store has it (journal.go, hold.go, persist.go, restore.go).
package session

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/bufpool"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// Conn is what a session needs of its network connection; listener.Conn satisfies it.
type Conn interface {
	// Write queues b for sending without blocking; b may be reused on return.
	Write(b []byte) (int, error)
	// Buffered is the number of bytes queued but not yet sent.
	Buffered() int
	// NotifyDrained asks the connection's owner to call Session.Pump once no more than
	// Limits.SlowBytes are queued (listener.Conn.NotifyDrained, answered by the broker's
	// OnDrained); several requests before that are one. It must not block.
	NotifyDrained()
	// Shutdown sends what is queued and closes gracefully.
	Shutdown()
	// Close closes at once.
	Close() error
}

// Limits are the broker-wide settings every session enforces. Shared and read-only.
type Limits struct {
	// ReceiveMaximum is the inbound window the broker advertises [MQTT-3.3.4-9]; it is also
	// the outbound window for clients that do not state one (before 5.0).
	ReceiveMaximum uint16
	// MaxPacketSize is the largest packet accepted from clients; 0 means the protocol's.
	MaxPacketSize uint32
	// TopicAliasMaximum is the highest inbound topic alias accepted; 0 refuses aliases.
	TopicAliasMaximum uint16
	// QueueMessages and QueueBytes bound the QoS 1 and 2 messages a session holds beyond
	// its inflight window, online or offline.
	QueueMessages int
	QueueBytes    int
	// SlowBytes: when this many bytes already wait to be sent to the client (a slow
	// consumer), a QoS 0 message is shed, and a QoS 1 or 2 one waits in the queue rather
	// than be written, until the connection drains (deliver.go).
	SlowBytes int
	// Pressed, if not nil, reports memory pressure (the broker's memory.Soft or above).
	// Then a QoS 0 message is shed once SlowBytes/16 wait to be sent to the client,
	// pending or in the connection (deliver.go), counted as memory_pressure.
	Pressed func() bool
	// Sent counts PUBLISH packets written, by QoS, and BytesSent the bytes flushed to
	// connections. Both may be nil.
	Sent      *[3]Counter
	BytesSent Counter
	// Journal, if not nil, keeps the state of persistent sessions in the store
	// (journal.go); nil keeps everything in memory.
	Journal *Journal
	// Sweeper, if not nil, drops expired messages from the queues of offline sessions
	// (sweep.go); nil leaves them until the client comes back.
	Sweeper *Sweeper
	// MayRead, if not nil, is the read ACL in force: whether user, in realm, with client
	// id clientID, may receive a message on topic. A queued message entering the window
	// and a message of the window sent again on a reconnect are checked with it, at that
	// moment: the ACL may have changed since they were delivered to the session (a
	// reload, a restart). One it denies is dropped (DropDenied, reported in Drops). It
	// must not keep topic.
	MayRead func(user string, realm uint8, clientID string, topic []byte) bool
	// Realms names the broker's realms by number, for the store (the owner's realm is
	// kept by name: the numbers are the broker's, per run); nil: realm 0 only, "".
	Realms []string
	// Drained, if not nil, is called under a session's lock when its queue, which held
	// publishers back (Holder, backpressure.go), has drained to half its bounds, or the
	// session went offline or was cleared. It must not take a session's lock.
	Drained func(s *Session)
}

// NoRealm is the realm of a session whose owner is unknown: restored from a record of
// the store's format 1, or owned under an auth configuration that is gone. No connection
// has it, so no identity owns such a session.
const NoRealm uint8 = 255

// Counter is a monotonic counter the session reports to (the broker's statistics).
type Counter interface{ Add(n uint64) }

// Drop says why a message was not delivered; the broker counts each in metrics.
type Drop uint8

// The drop reasons. Their names label bifrost_messages_dropped_total.
const (
	Delivered Drop = iota
	DropQueueFull
	DropSlowConsumer
	DropExpired
	DropTooLarge
	DropOffline
	DropPressure
	DropDenied // the read ACL in force when the message was to leave denies it (Limits.MayRead)
	// The session ended (its expiry, or a CONNECT that starts clean or is another
	// identity's) with the message queued or unacknowledged (Clear, End).
	DropSessionEnded
)

var dropNames = [...]string{"", "queue_full", "slow_consumer", "expired", "too_large", "offline_qos0", "memory_pressure", "acl_denied", "session_ended"}

// NumDrops is the number of Drop values, Delivered included.
const NumDrops = len(dropNames)

// String is the metrics label of d.
func (d Drop) String() string { return dropNames[d] }

// Drops counts by reason the messages a session dropped on its own account, leaving its
// queue or its window (Attach, Ack, Pump): the caller counts and logs them as it does
// the drop Deliver reports. A value, so that reporting drops allocates nothing.
type Drops [NumDrops]uint32

// add counts one message dropped for d.
func (ds *Drops) add(d Drop) { ds[d]++ }

// String lists the counts that are not 0 by label, "expired=2 too_large=1"; "" if none.
func (ds Drops) String() string {
	var b []byte
	for d, n := range ds {
		if n != 0 && Drop(d) != Delivered {
			if len(b) > 0 {
				b = append(b, ' ')
			}
			b = strconv.AppendUint(append(append(b, Drop(d).String()...), '='), uint64(n), 10)
		}
	}
	return string(b)
}

// Will is a will message with its delay (v5 will delay interval, seconds) and its message
// expiry interval (seconds, 0: none), which starts when the will is published.
type Will struct {
	Msg    *Message
	Delay  uint32
	Expiry uint32
	// Due is when a will waiting for its delay is to be published, Unix nanoseconds (set
	// by SetPendingWill); 0 while its connection is open.
	Due int64
}

// Publishable returns the will's message as published at now (Unix nanoseconds).
func (w *Will) Publishable(now int64) *Message {
	if w.Expiry == 0 {
		return w.Msg
	}
	m := w.Msg.share() // a will's message is stored in its will record, never by id
	m.Expiry = now + int64(w.Expiry)*int64(time.Second)
	return m
}

// A Session is one client's state. See the package doc for the locking rules.
type Session struct {
	mu sync.Mutex

	lim      *Limits
	conn     Conn    // nil while offline
	out      *[]byte // pooled bytes not yet written; nil when none
	fl       *flows  // traffic state; nil while there is none
	subs     *subSet // this session's subscriptions; nil while it has none (subs.go)
	will     *Will   // the current connection's will; nil if none
	pending  *Will   // a will waiting for its delay after the connection closed
	clientID string
	username string

	// Expiry is the session expiry interval in seconds (0: ends with the connection;
	// NoExpiry: never).
	expiry uint32
	id     uint32

	// What the client told us at CONNECT (v5 properties, defaults otherwise).
	clientMaxPacket  uint32 // 0: no limit
	clientRecvMax    uint16
	clientAliasMax   uint16
	version          packet.Version
	noProblemDetails bool  // v5 Request Problem Information = 0
	realm            uint8 // the broker's: whose ACL applies (see ConnectInfo.Realm); NoRealm: owner unknown
	ended            bool  // End was called: the session is gone, nothing more is stored
	swept            bool  // in Limits.Sweeper's set (sweep.go)
	// inWrite is what a Flush is writing without mu, in KiB rounded up (so that it fits
	// the struct's 128 bytes); 0: no Flush is writing. See Flush and backedUpLocked.
	inWrite uint16
}

// NoExpiry is the session expiry interval that never expires (v5 3.1.2.11.2).
const NoExpiry = ^uint32(0)

// New returns an offline session with the broker-wide limits lim.
func New(id uint32, clientID string, lim *Limits) *Session {
	return &Session{id: id, clientID: clientID, lim: lim}
}

// ID is the session's small integer handle, used by the topic index.
func (s *Session) ID() uint32 { return s.id }

// ClientID is the client identifier.
func (s *Session) ClientID() string { return s.clientID }

// ConnectInfo is what a CONNECT sets on a session.
type ConnectInfo struct {
	Version          packet.Version
	Username         string
	Expiry           uint32
	ClientMaxPacket  uint32
	ClientRecvMax    uint16 // 0: the default (the broker's ReceiveMaximum)
	ClientAliasMax   uint16
	NoProblemDetails bool
	Will             *Will
	// Realm is the broker's name for the auth configuration the client connected under
	// (listeners may have their own), kept with the identity for the ACL checks of later
	// deliveries.
	Realm uint8
	// Limits, if not nil, replace the session's from this connection on: a resumed session
	// takes the limits its CONNACK states (the broker's may have changed since it began).
	Limits *Limits
}

// Attach binds the session to a new connection after CONNECT, sends it connack (unless
// nil), then the inflight window again and what the queue holds, and reports whether the
// session became dirty and the messages it dropped instead of sending them (the new
// connection's Maximum Packet Size, the read ACL in force, expiry). All of it is one step
// under the session's lock: a message another goroutine delivers to the session once it
// is online comes after the CONNACK [MQTT-3.2.0-1] and after the resent window
// [MQTT-4.6.0-2].
func (s *Session) Attach(c Conn, info ConnectInfo, connack *packet.Connack, now int64) (dirtied bool, dropped Drops) {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.persistentLocked()
	if info.Limits != nil {
		s.lim = info.Limits
	}
	s.conn = c
	s.version = info.Version
	s.username = info.Username
	s.expiry = info.Expiry
	s.clientMaxPacket = info.ClientMaxPacket
	s.clientRecvMax = info.ClientRecvMax
	if s.clientRecvMax == 0 {
		s.clientRecvMax = s.lim.ReceiveMaximum
	}
	s.clientAliasMax = info.ClientAliasMax
	s.noProblemDetails = info.NoProblemDetails
	s.realm = info.Realm
	s.will = info.Will
	if s.fl != nil {
		s.fl.resetConnectionState()
	}
	s.restageLocked(was, true)
	if connack != nil {
		dirtied = s.sendLocked(connack)
	}
	return s.resumeLocked(now, &dropped) || dirtied, dropped
}

// Online reports whether a connection is attached.
func (s *Session) Online() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn != nil
}

// Conn returns the attached connection, nil while offline.
func (s *Session) Conn() Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

// Version is the protocol version of the current (or last) connection.
func (s *Session) Version() packet.Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// Username is the user name the current (or last) connection authenticated with.
func (s *Session) Username() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.username
}

// Identity is the username and realm of the last connection (ConnectInfo): the
// session's owner, since a CONNECT of another identity never resumes it (the broker's
// admit). realm is NoRealm when the owner is unknown.
func (s *Session) Identity() (username string, realm uint8) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.username, s.realm
}

// SetOwner makes user in realm the identity of a session its first CONNECT has just
// created, before that CONNECT attaches: another CONNECT of the client id meanwhile is
// judged against it.
func (s *Session) SetOwner(user string, realm uint8) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.username, s.realm = user, realm
}

// Expiry is the session expiry interval in seconds.
func (s *Session) Expiry() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expiry
}

// SetExpiry changes the session expiry interval (v5 DISCONNECT may).
func (s *Session) SetExpiry(e uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.persistentLocked()
	s.expiry = e
	s.restageLocked(was, false)
}

// TakeWill removes and returns the will, so that it is published at most once.
func (s *Session) TakeWill() *Will {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.will
	s.will = nil
	if w != nil && s.persistentLocked() {
		j := s.lim.Journal
		j.begin().DeleteWill(s.clientID)
		j.end()
	}
	return w
}

// SetPendingWill keeps a will that waits for its delay while the session is offline; it
// is due at due (Unix nanoseconds).
func (s *Session) SetPendingWill(w *Will, due int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Due = due
	s.pending = w
	if s.persistentLocked() {
		j := s.lim.Journal
		j.begin().PutWill(s.clientID, w.record())
		j.end()
	}
}

// PendingWill removes and returns the will waiting for its delay, so that it is published
// (or, when the client comes back, discarded) at most once.
func (s *Session) PendingWill() *Will {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.pending
	s.pending = nil
	if w != nil && s.persistentLocked() {
		j := s.lim.Journal
		j.begin().DeleteWill(s.clientID)
		j.end()
	}
	return w
}

// Detach unbinds the connection c when it closes (a no-op if another connection has taken
// the session over meanwhile). It releases the pending buffer and returns, for
// redistribution to other members of their shared subscription groups, the messages that
// came through a shared subscription and were not acknowledged. Each holds the reference
// its entry held (msgpool.go): the caller lets it go (Message.Release) once it has
// delivered the message again.
func (s *Session) Detach(c Conn) (shared []Delivery, detached bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c {
		return nil, false
	}
	s.conn = nil
	if s.out != nil {
		bufpool.Put(s.out)
		s.out = nil
	}
	persist := s.persistentLocked()
	if s.fl != nil {
		// Offline, the queue drains only when the client is back: it holds no publisher
		// (backpressure.go).
		s.unholdLocked(s.fl)
		// Topic aliases die with the connection (spec 3.3.2.3.4): an offline session
		// that has nothing in flight keeps no traffic state.
		s.fl.dropHold()
		s.fl.resetConnectionState()
		var removed func(e *entry)
		if persist {
			removed = s.deleteEntryLocked
		}
		shared = s.fl.takeShared(removed)
		s.watchQueueLocked() // offline now: its expired messages are swept
		s.releaseFlowsIfIdle()
	}
	if persist {
		// The record says when the session went offline: its expiry counts from then,
		// across a restart.
		j := s.lim.Journal
		j.begin().PutSession(s.recordLocked(time.Now().UnixNano()))
		j.end()
	}
	return shared, true
}

// Clear drops all state kept across connections, as a clean start or the end of the
// session requires: it returns the subscriptions, for the caller to remove from the
// index, and the messages queued or unacknowledged that went with it, for the caller to
// count (session_ended).
//
// The output held for the store (hold.go) is discarded: the connection that held it, if
// any, is being taken over.
func (s *Session) Clear() ([]Sub, Drops) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clearLocked()
}

// End clears the session for good, when it expires or its connection ends with expiry 0:
// like Clear, and nothing of it is stored any more. It returns the subscriptions and the
// messages it dropped (session_ended); a caller that exported the session first has
// moved them, not dropped them.
func (s *Session) End() ([]Sub, Drops) {
	s.mu.Lock()
	defer s.mu.Unlock()
	subs, ds := s.clearLocked()
	s.ended = true
	return subs, ds
}

func (s *Session) clearLocked() ([]Sub, Drops) {
	s.unwatchLocked()
	if s.persistentLocked() {
		j := s.lim.Journal
		s.dropAllLocked(j.begin(), j)
		j.end()
	}
	s.dropHeldLocked()
	var ds Drops
	if f := s.fl; f != nil {
		s.unholdLocked(f) // its queue is gone
		for i := range f.inflight {
			e := &f.inflight[i]
			if e.msg != nil {
				ds.add(DropSessionEnded)
			}
			e.done()
		}
		for i := f.qhead; i < len(f.queue); i++ {
			ds.add(DropSessionEnded)
			f.queue[i].done()
		}
	}
	subs := s.subs.all()
	s.subs = nil
	s.fl = nil
	return subs, ds
}

// Send encodes p into the pending buffer and reports whether the session became dirty.
// Packets the client's Maximum Packet Size cannot take are not sent: reason strings and
// user properties are removed first where the spec allows it [MQTT-3.1.2-25].
func (s *Session) Send(p packet.Packet) (dirtied bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sendLocked(p)
}

func (s *Session) sendLocked(p packet.Packet) bool {
	if s.conn == nil {
		return false
	}
	n := p.Size(s.version)
	if s.clientMaxPacket != 0 && uint32(n) > s.clientMaxPacket {
		props := propsOf(p)
		if props == nil {
			return false
		}
		props.ReasonString, props.User = nil, nil
		if n = p.Size(s.version); uint32(n) > s.clientMaxPacket {
			return false
		}
	}
	dirtied := s.out == nil
	if dirtied {
		s.out = bufpool.Get(n)
	} else {
		s.out = bufpool.Grow(s.out, n)
	}
	*s.out = p.AppendTo(*s.out, s.version)
	return dirtied
}

// propsOf returns the properties of the packet types whose reason string and user
// properties a server may drop to fit the client's maximum packet size.
func propsOf(p packet.Packet) *packet.Properties {
	switch p := p.(type) {
	case *packet.Ack:
		return &p.Props
	case *packet.Suback:
		return &p.Props
	case *packet.Unsuback:
		return &p.Props
	case *packet.Disconnect:
		return &p.Props
	case *packet.Connack:
		return &p.Props
	}
	return nil
}

// Flush writes the pending bytes to the connection, unless they are held for the store
// (hold.go): the Journal writes them once they may go.
//
// The write runs without s.mu, so that other goroutines go on appending meanwhile (every
// poller delivers to a fan-in subscriber, and a system call under its lock would hold
// them all up): the connection's write lock is taken before s.mu is let go (WriteAfter),
// so bytes reach the socket in the order they were appended, whoever writes them. One
// Flush writes at a time: one that finds another writing leaves its bytes to it, and the
// writer takes them when its write returns. The other writers (flushLocked) write under
// s.mu, after the writer's write.
func (s *Session) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inWrite != 0 {
		return // the writer takes these bytes next
	}
	wrote := false
	for s.out != nil && len(*s.out) > 0 && (s.fl == nil || !s.fl.held()) {
		w, ok := s.conn.(afterWriter)
		if !ok {
			break // offline, or a connection that cannot: flushLocked
		}
		out := s.out
		s.out, s.inWrite = nil, uint16(min((len(*out)+1023)>>10, math.MaxUint16))
		sent := s.lim.BytesSent          // read under s.mu: Attach may replace s.lim
		_, _ = w.WriteAfter(*out, &s.mu) // unlocks s.mu; a failed write closes the connection
		if sent != nil {
			sent.Add(uint64(len(*out)))
		}
		bufpool.Put(out)
		s.mu.Lock()
		s.inWrite, wrote = 0, true
	}
	if wrote && s.out == nil {
		s.awaitDrainLocked() // as flushLocked does after its write
		return
	}
	s.flushLocked()
}

// afterWriter is a Conn that can write after the session's lock is let go, in its order
// (listener.Conn.WriteAfter).
type afterWriter interface {
	WriteAfter(b []byte, held sync.Locker) (int, error)
}

func (s *Session) flushLocked() {
	if s.out == nil || s.fl != nil && s.fl.held() {
		return // nothing, or held for the store: released by the Journal
	}
	if s.conn != nil && len(*s.out) > 0 {
		_, _ = s.conn.Write(*s.out) // a failed write closes the connection: OnClose follows
		if s.lim.BytesSent != nil {
			s.lim.BytesSent.Add(uint64(len(*s.out)))
		}
	}
	bufpool.Put(s.out)
	s.out = nil
	s.awaitDrainLocked()
}

// Disconnect sends a server DISCONNECT (5.0 only) with reason code rc, flushes, and shuts
// the connection down gracefully so the client reads the reason code.
func (s *Session) Disconnect(rc packet.ReasonCode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return
	}
	s.dropHeldLocked() // not durable: never sent
	if s.version == packet.V5 {
		s.sendLocked(&packet.Disconnect{Code: rc})
	}
	s.flushLocked()
	s.conn.Shutdown()
}

// ProblemDetails reports whether reason strings and user properties may be sent on
// packets other than PUBLISH, CONNACK and DISCONNECT (v5 Request Problem Information).
func (s *Session) ProblemDetails() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.noProblemDetails
}
