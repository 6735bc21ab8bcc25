package broker

import (
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// sessionTable is the broker's sessions by client id and the timers and claims that wait
// on them; guarded by Broker.mu.
type sessionTable struct {
	m        map[string]*session.Session
	wills    map[*session.Session]*time.Timer // wills waiting for their delay
	expiries map[*session.Session]*time.Timer // offline sessions waiting to expire
	// claims counts the CONNECTs that have claimed a session but not yet attached to it:
	// an expiry firing in between must not end the session they are about to resume.
	claims map[*session.Session]int
}

func newSessionTable() sessionTable {
	return sessionTable{
		m:        make(map[string]*session.Session),
		wills:    make(map[*session.Session]*time.Timer),
		expiries: make(map[*session.Session]*time.Timer),
		claims:   make(map[*session.Session]int),
	}
}

// An owner is the identity of a CONNECT claiming a session (identity.go), with its auth
// block's foreign_session.
type owner struct {
	user   string
	realm  uint8
	refuse bool
}

// A claim is what claimSession found for a CONNECT.
type claim struct {
	s       *session.Session
	present bool
	old     *session.Session // the session, held by a live connection to take over
	// foreign: s belonged to another identity and has been cleared; will is its will
	// that waited for its delay, due now that the session ended.
	foreign bool
	will    *session.Will
	// refused: s belongs to another identity and the CONNECT is refused; s is untouched.
	refused bool
}

// claimSession finds or creates the session of client id cid for a new connection of
// identity o. With clean start, an existing session is cleared [MQTT-3.1.2-4]; without,
// it resumes and present is true [MQTT-3.2.2-2]. If a live connection holds the session,
// it is returned as old so the caller takes it over [MQTT-3.1.4-3]. A will waiting for
// its delay and an expiry timer are cancelled: the client is back [MQTT-3.1.3-9]. A
// session of another identity is never resumed: it is refused, untouched, or cleared as
// with clean start, its waiting will handed out to be published (identity.go). Unless
// refused, the caller must call attached once it has attached to s.
func (b *Broker) claimSession(cid string, clean bool, cl *client, o owner) (c claim) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return claim{}
	}
	s := b.sessions.m[cid]
	c.s = s
	if s == nil {
		id := b.allocID(target{})
		lim := &b.live.set.Load().lim
		if cl != nil {
			lim = &cl.set.lim // what its CONNACK tells
		}
		s = session.New(id, cid, lim)
		s.SetOwner(o.user, o.realm)
		b.setTarget(id, target{s: s})
		b.sessions.m[cid] = s
		b.sessions.claims[s]++
		b.mu.Unlock()
		c.s = s
		return c
	}
	if foreign(s, o.user, o.realm) {
		if _, realm := s.Identity(); o.refuse && realm != session.NoRealm {
			b.mu.Unlock()
			return claim{s: s, refused: true}
		}
		c.foreign, clean = true, true
	}
	b.sessions.claims[s]++
	if t := b.sessions.wills[s]; t != nil {
		t.Stop()
		delete(b.sessions.wills, s)
	}
	// The client is back before the will's delay: the will is not sent. A session of
	// another identity ends here instead, and its will is due (a session handed over by
	// another node has its will waiting without a timer).
	if w := s.PendingWill(); c.foreign {
		c.will = w
	}
	if t := b.sessions.expiries[s]; t != nil {
		t.Stop()
		delete(b.sessions.expiries, s)
	}
	if s.Online() {
		c.old = s
	}
	b.mu.Unlock()
	if clean {
		b.unsubscribeAll(s)
		return c
	}
	c.present = true
	return c
}

// attached ends the claim claimSession made on s: s is online now, and endSession
// leaves online sessions alone.
func (b *Broker) attached(s *session.Session) {
	b.mu.Lock()
	if b.sessions.claims[s]--; b.sessions.claims[s] <= 0 {
		delete(b.sessions.claims, s)
	}
	b.mu.Unlock()
}

// takeOver disconnects the connection that holds s, for a new CONNECT with the same
// client id: a v5 client is told why (0x8E) [MQTT-3.1.4-3]. The old connection's will is
// published as for any connection lost, unless a v5 will delay defers it and the new
// connection resumes the session (clean start 0), which cancels it [MQTT-3.1.3-9]; with
// clean start 1 the session ends, and the will goes with it (spec 3.1.3.2.2). What came
// through shared subscriptions unacknowledged goes to other members, as for any
// connection lost, or stays with s (redeliverShared).
func (b *Broker) takeOver(bt *batch, s *session.Session, cleanStart bool) {
	oldConn := s.Conn()
	if oldConn == nil {
		return
	}
	if oc, ok := oldConn.(interface{ Value() any }); ok {
		if ocl, _ := oc.Value().(*client); ocl != nil {
			ocl.takenOver.Store(true)
		}
	}
	will := s.TakeWill()
	v := s.Version()
	s.Disconnect(packet.SessionTakenOver)
	shared, _ := s.Detach(oldConn)
	b.online(v, -1)
	for _, d := range shared {
		b.redeliverShared(bt, s, d)
	}
	if will != nil && (will.Delay == 0 || cleanStart) {
		b.publishWill(bt, will)
	}
}

// sessionOffline decides the fate of a session whose connection closed: its will is
// published now or after its delay, and the session ends now (expiry 0) or when its
// expiry interval runs out.
func (b *Broker) sessionOffline(bt *batch, s *session.Session, will *session.Will) {
	expiry := s.Expiry()
	if will != nil {
		if will.Delay == 0 || expiry == 0 {
			b.publishWill(bt, will) // [MQTT-3.1.2-8]; the session ends before the delay
		} else {
			b.scheduleWill(s, will, time.Duration(min(will.Delay, expiry))*time.Second)
		}
	}
	if expiry == 0 {
		b.endSession(s)
		return
	}
	if expiry != session.NoExpiry {
		b.scheduleExpiry(s, time.Duration(expiry)*time.Second)
	}
}

// endSession removes an offline session: its subscriptions leave the index, its ID is
// freed and a will still waiting is published [MQTT-3.1.3-9].
func (b *Broker) endSession(s *session.Session) {
	b.mu.Lock()
	if b.sessions.m[s.ClientID()] != s || s.Online() || b.sessions.claims[s] > 0 {
		b.mu.Unlock()
		return // reconnected, or about to be
	}
	delete(b.sessions.m, s.ClientID())
	epoch, release := b.releaseLocked(s.ClientID())
	wt := b.sessions.wills[s]
	delete(b.sessions.wills, s)
	if t := b.sessions.expiries[s]; t != nil {
		t.Stop()
		delete(b.sessions.expiries, s)
	}
	b.mu.Unlock()
	if release {
		b.cluster.Release(s.ClientID(), epoch)
	}
	subs, ds := s.End()
	b.ended(s, subs, ds)
	b.freeID(s.ID())
	if wt != nil {
		// The will was still waiting: the session ending sends it now. PendingWill hands
		// it out once, so a timer firing at this moment cannot send it twice.
		wt.Stop()
		if w := s.PendingWill(); w != nil {
			bt := b.getBatch()
			b.publishWill(bt, w)
			b.endBatch(bt)
		}
	}
	b.commit()
}

// unsubscribeAll removes all of s's subscriptions from the index and drops its stored
// state (a clean start, or the session's end).
func (b *Broker) unsubscribeAll(s *session.Session) {
	subs, ds := s.Clear()
	b.ended(s, subs, ds)
}

// ended takes the subscriptions of s, cleared or ended, out of the index, and counts and
// logs the messages that went with it.
func (b *Broker) ended(s *session.Session, subs []session.Sub, ds session.Drops) {
	b.removeSubs(s, subs)
	b.droppedAll(s, &ds)
}

// removeSubs takes s's subscriptions subs out of the index.
func (b *Broker) removeSubs(s *session.Session, subs []session.Sub) {
	for _, sub := range subs {
		if b.indexUnsubscribe([]byte(sub.Filter), pubsub.SubscriberID(s.ID())) {
			b.stats.subscriptions(-1)
		}
	}
}

// scheduleWill publishes will after delay unless the client reconnects first. It runs
// under b.mu, as claimSession does: a CONNECT that claimed s after its connection went
// offline, and before this runs (another poller, another goroutine), has brought the
// client back, and the will is not scheduled at all [MQTT-3.1.3-9].
func (b *Broker) scheduleWill(s *session.Session, will *session.Will, delay time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sessions.claims[s] > 0 || s.Online() {
		return
	}
	s.SetPendingWill(will, time.Now().Add(delay).UnixNano())
	if b.closed {
		return
	}
	b.sessions.wills[s] = time.AfterFunc(delay, func() {
		b.mu.Lock()
		delete(b.sessions.wills, s)
		b.mu.Unlock()
		if w := s.PendingWill(); w != nil {
			bt := b.getBatch()
			b.publishWill(bt, w)
			b.endBatch(bt)
		}
	})
}

// scheduleExpiry ends s after d unless a client resumes it first.
func (b *Broker) scheduleExpiry(s *session.Session, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.sessions.expiries[s] = time.AfterFunc(d, func() {
		b.mu.Lock()
		_, waiting := b.sessions.expiries[s]
		delete(b.sessions.expiries, s)
		b.mu.Unlock()
		if waiting {
			b.endSession(s)
		}
	})
}

// publishWill publishes a will message as the broker. A will on a topic starting with $
// is dropped, but for a bridge's state: CONNECT refuses the others (checkWill), and this
// guard keeps one that got past it (a will stored by an older version, restored at
// startup) out of $SYS and of the retained store all the same.
func (b *Broker) publishWill(bt *batch, w *session.Will) {
	m := w.Publishable(now())
	if t := m.Topic(); len(t) > 0 && t[0] == '$' && !isConnectionState(t) {
		b.stats.denied("will")
		return
	}
	b.routeOwned(bt, m)
}
