package broker

import (
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// One client id, one live connection, cluster-wide (internal/cluster, owner.go).
//
// A CONNECT accepted on a node of a cluster claims its client id before it gets a
// session: the claim is a Raft entry, so the CONNECT is parked as an authentication is
// (the client's packets are kept, no poller waits) and admitted when the cluster calls
// back, on the cluster's goroutine, under the client's lock. The claim's outcome says
// whether another node owned the id; then a session of it here is stale and dropped, and
// the session the other node handed over, if any, is installed in its place before the
// CONNECT takes it as any local session: session present 1.
//
// The fence: every node applying another node's claim closes its own connection of the
// id if that connection's claim is older (Fence, v5 DISCONNECT 0x8E). A CONNECT whose
// claim is overtaken before its CONNACK is closed the same way right after: it attaches,
// then looks at the applied log, and a later claim either is there already (it closes
// itself) or is applied afterwards and finds it attached (Fence closes it).
//
// The epoch of this node's claim of a client id it has a session of is the cluster's
// ownership entry of the id while that names this node (ours): the broker keeps no map of
// its own beside it, which would cost every connection of a cluster node its entry
// (~43 B). A claim applied after this node's latest one names another node, so the entry
// names this node exactly while that claim is the id's last; Owner answers a claim of
// this node as soon as its outcome is known, before this node's log has it (a follower's
// claims, internal/cluster/owner_pending.go). A CONNECT between its claim and its CONNACK
// (claiming) is the one case where the entry is newer than the session's claim, and each
// use below asks claiming first.
//
// The node that owned the id hands its session over (HandOver): it closes the connection,
// exports the session and deletes it. Every session ending on a node releases its claim
// (Release), so the cluster's table holds the live and persistent sessions only.
//
// A node that lost the Raft leader for the lease closes every connection (SelfFence) and
// refuses CONNECTs until it is back (refuseUnserved).

// ownerState is the broker's record of its claims; guarded by Broker.mu.
type ownerState struct {
	staleAfter time.Duration // see staleAfter; set by New

	// claiming counts the CONNECTs of a client id between their claim and their CONNACK,
	// with the highest epoch known of them (0 while none has its outcome).
	claiming map[string]claiming
}

type claiming struct {
	n     int
	epoch uint64
}

// claimInCluster parks an accepted CONNECT while the cluster claims its client id; the
// caller holds cl.mu.
func (b *Broker) claimInCluster(cl *client, a *admission) {
	st := cl.auth
	if st == nil {
		st = &authState{}
		cl.auth = st
	}
	st.working, st.claim = true, a
	b.mu.Lock()
	if b.own.claiming == nil {
		b.own.claiming = make(map[string]claiming)
	}
	c := b.own.claiming[a.cid]
	c.n++
	b.own.claiming[a.cid] = c
	b.mu.Unlock()
	// A clean start lets the previous owner node drop the session, unless it may belong
	// to another identity and the CONNECT is to be refused then: the session must come
	// here, whole, for admit to tell (identity.go).
	refuse := b.rules(cl.conn.Listener().Name()).refuse
	who := Claimant{ClientID: a.cid, Identity: b.identityName(a.info.Realm, a.info.Username),
		Discard: a.clean && !refuse, Refuse: refuse}
	b.cluster.Claim(who, func(o ClaimResult) { b.claimed(cl, st, a, who.Identity, o) })
}

// claimed admits a parked CONNECT once its claim is applied, on the cluster's goroutine.
// One that attaches names its identity where the claim left the entry's owner unknown;
// one that does not may leave an entry to release (unsettledLocked).
func (b *Broker) claimed(cl *client, st *authState, a *admission, identity string, o ClaimResult) {
	applied := o.Err == nil && !o.Foreign
	if applied {
		b.mu.Lock()
		c := b.own.claiming[a.cid]
		c.epoch = max(c.epoch, o.Epoch)
		b.own.claiming[a.cid] = c
		b.mu.Unlock()
		if o.Moved {
			b.adopt(a.cid, o.Session)
		}
	}
	bt := b.getBatch()
	attached := b.claimedLocked(bt, cl, st, a, o)
	b.mu.Lock()
	release := applied && !attached && b.unsettledLocked(a, o)
	if c := b.own.claiming[a.cid]; c.n <= 1 {
		delete(b.own.claiming, a.cid)
	} else {
		c.n--
		b.own.claiming[a.cid] = c
	}
	b.mu.Unlock()
	switch {
	case release:
		b.cluster.Release(a.cid, o.Epoch)
	case applied && attached && !o.Named:
		b.cluster.Attached(a.cid, o.Epoch, identity)
	}
	b.endBatch(bt)
}

// claimedLocked answers the CONNECT of claim outcome o, and reports whether it attached.
func (b *Broker) claimedLocked(bt *batch, cl *client, st *authState, a *admission, o ClaimResult) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closing || cl.auth != st {
		return false // the connection ended meanwhile; a session handed over stays, offline
	}
	st.working, st.claim = false, nil
	if st.method == "" {
		cl.auth = nil
	}
	v := a.info.Version
	switch {
	case o.Err != nil:
		b.log.Warn("cluster: client id not claimed; refusing the connect", "client", a.cid, "err", o.Err)
		b.refuse(cl, v, packet.ServerUnavailable, refusal{"cluster: client id not claimed", a.cid, a.info.Username})
		return false
	case o.Foreign:
		// The cluster knows the session is another identity's (identity.go): it took
		// nothing, and the owner's connection on its node is left alone.
		b.stats.denied("foreign_session")
		b.refuse(cl, v, packet.ClientIdentifierNotValid, refusal{"session of another user (the cluster's owner of the client id)", a.cid, a.info.Username})
		return false
	case b.refuseUnserved(cl, v, refusal{cid: a.cid, user: a.info.Username}):
		return false
	}
	a.epoch = o.Epoch
	attached := b.admit(bt, cl, a, &a.connack)
	b.handlePackets(bt, cl)
	return attached
}

// unsettledLocked reports whether the cluster's entry of a claim whose CONNECT did not
// attach (it ended, or was refused after the claim) is to be released, so that it stays
// true to what this node holds: when no session of the id is here, or when the entry
// names the claimant's identity and the session here is another's (a stale one, restored
// from the store, that the claim found no entry for). An entry naming an identity whose
// session does not exist would refuse others under foreign_session: refuse. The release
// takes the entry only while it is still this claim; none while another CONNECT of the id
// here is claiming (it settles the entry itself). b.mu is held.
func (b *Broker) unsettledLocked(a *admission, o ClaimResult) bool {
	if b.own.claiming[a.cid].n > 1 {
		return false
	}
	s := b.sessions.m[a.cid]
	return s == nil || o.Named && foreign(s, a.info.Username, a.info.Realm)
}

// ownedAttached fences a session just attached under the claim at epoch at once if a
// later claim of another node is applied already. A Fence of that claim that ran before
// the session attached (b.sessions.claims held it) has found it being claimed and left
// it: the claim was applied before its Fence ran, so this look at the table sees it.
func (b *Broker) ownedAttached(bt *batch, s *session.Session, epoch uint64) {
	if node, e := b.cluster.Owner(s.ClientID()); e > epoch && node != b.cluster.NodeName() && s.Online() {
		b.takeOver(bt, s, false)
		b.sessionOffline(bt, s, nil)
	}
}

// ours returns the epoch of this node's claim of cid, as the cluster's ownership entry
// says; ok false when the entry names another node or none. Asked with b.mu held, it is
// only exact for a client id no CONNECT here is claiming (see above).
func (b *Broker) ours(cid string) (epoch uint64, ok bool) {
	node, epoch := b.cluster.Owner(cid)
	return epoch, node == b.cluster.NodeName()
}

// adopt makes a handed-over session (image; nil: none came) the session of cid on this
// node, dropping a stale one: another node owned cid since.
func (b *Broker) adopt(cid string, image []byte) {
	b.mu.Lock()
	stale := b.sessions.m[cid]
	if stale != nil && b.sessions.claims[stale] == 0 {
		b.forgetLocked(stale)
	} else {
		stale = nil
	}
	b.mu.Unlock()
	if stale != nil {
		bt := b.getBatch()
		b.takeOver(bt, stale, false)
		b.endBatch(bt)
		subs, ds := stale.End()
		b.ended(stale, subs, ds)
		b.freeID(stale.ID())
	}
	if image == nil {
		b.commit()
		return
	}
	id := b.allocID(target{})
	s, err := session.Import(id, image, &b.live.set.Load().lim)
	if err != nil {
		b.freeID(id)
		b.log.Error("cluster: a handed-over session could not be read; it is lost", "client", cid, "err", err)
		return
	}
	b.setTarget(id, target{s: s})
	for _, sub := range s.Subs() {
		b.indexSub(s, sub)
	}
	// A will waiting for its delay stays with the session: the CONNECT's claimSession
	// cancels it [MQTT-3.1.3-9], or publishes it if the session is another identity's.
	installed := false
	b.mu.Lock()
	if b.sessions.m[cid] == nil && !b.closed {
		b.sessions.m[cid] = s
		installed = true
	}
	b.mu.Unlock()
	switch e := s.Expiry(); {
	case !installed: // a local CONNECT made a session meanwhile, or the broker closed
		subs, ds := s.End()
		b.ended(s, subs, ds)
		b.freeID(s.ID())
	case e != 0 && e != session.NoExpiry:
		// Offline until the CONNECT attaches (claimSession stops this), or for good if
		// the client went away meanwhile.
		b.scheduleExpiry(s, time.Duration(e)*time.Second)
	}
	b.commit()
}

// forgetLocked takes s out of the registry with its timers, without ending it. b.mu is
// held.
func (b *Broker) forgetLocked(s *session.Session) {
	cid := s.ClientID()
	if b.sessions.m[cid] == s {
		delete(b.sessions.m, cid)
	}
	if t := b.sessions.wills[s]; t != nil {
		t.Stop()
		delete(b.sessions.wills, s)
	}
	if t := b.sessions.expiries[s]; t != nil {
		t.Stop()
		delete(b.sessions.expiries, s)
	}
}

// releaseLocked is endSession's: the ended session's claim, to release once b.mu is let
// go: the applied table's entry if it names this node (a session restored from the
// store has no claim of this run, and releases the entry of the run before), unless a
// CONNECT of the id is claiming it now, whose claim may be that entry. b.mu is held.
func (b *Broker) releaseLocked(cid string) (epoch uint64, ok bool) {
	if b.cluster == nil {
		return 0, false
	}
	if _, claiming := b.own.claiming[cid]; claiming {
		return 0, false
	}
	return b.ours(cid)
}

// Fence is ClusterHost's: client ids claimed by another node at epoch; this node's
// connections of them under older claims are closed (v5 0x8E). Their sessions stay for
// the new owner's hand-over; one it never asks for (it could not reach this node) is
// dropped after staleAfter (dropStale). Every session here is under an older claim,
// unless Owner names this node at epoch or later (a claim of this node that a follower's
// log has not applied yet when it applies the earlier one of another).
func (b *Broker) Fence(epoch uint64, ids []string) {
	var fenced []*session.Session
	b.mu.Lock()
	for _, cid := range ids {
		s := b.sessions.m[cid]
		if s == nil || b.sessions.claims[s] > 0 {
			continue // none, or a CONNECT here about to attach: ownedAttached decides
		}
		if e, ok := b.ours(cid); ok && e >= epoch {
			continue
		}
		fenced = append(fenced, s)
	}
	b.mu.Unlock()
	if len(fenced) == 0 {
		return
	}
	bt := b.getBatch()
	for _, s := range fenced {
		if s.Online() {
			b.takeOver(bt, s, false)
			b.sessionOffline(bt, s, nil) // until the new owner asks for it, or it expires
		}
		time.AfterFunc(b.own.staleAfter, func() { b.dropStale(s) })
	}
	b.endBatch(bt)
}

// staleAfter is how long a fenced session waits for the new owner's hand-over before it
// is dropped: the hand-over's own bound (10s) and a lease wait, with room to spare.
func staleAfter(lease time.Duration) time.Duration { return max(30*time.Second, 3*lease) }

// dropStale drops a fenced session that no hand-over took: offline, not claimed here
// again, owned by another node. Its will goes with it: the session lives on (or was lost)
// with its new owner.
func (b *Broker) dropStale(s *session.Session) {
	cid := s.ClientID()
	b.mu.Lock()
	_, claiming := b.own.claiming[cid]
	if b.closed || b.sessions.m[cid] != s || s.Online() || b.sessions.claims[s] > 0 || claiming {
		b.mu.Unlock()
		return
	}
	if node, _ := b.cluster.Owner(cid); node == b.cluster.NodeName() || node == "" {
		b.mu.Unlock()
		return
	}
	b.forgetLocked(s)
	b.mu.Unlock()
	subs, ds := s.End()
	b.ended(s, subs, ds)
	b.freeID(s.ID())
	b.commit()
}

// HandOver is ClusterHost's: cid's session leaves this node for the node that claimed
// it at epoch, unless a CONNECT of cid here is claiming (Busy, or Superseded when its
// claim is newer) or this node claimed cid again since (Superseded).
func (b *Broker) HandOver(cid string, epoch uint64, discard bool) HandoverResult {
	b.mu.Lock()
	if c, ok := b.own.claiming[cid]; ok {
		b.mu.Unlock()
		if c.epoch > epoch {
			return HandoverResult{Outcome: Superseded}
		}
		return HandoverResult{Outcome: Busy} // it attaches soon; then it is taken
	}
	if e, ok := b.ours(cid); ok && e > epoch {
		b.mu.Unlock()
		return HandoverResult{Outcome: Superseded} // claimed here again since
	}
	s := b.sessions.m[cid]
	if s == nil {
		b.mu.Unlock()
		return HandoverResult{Outcome: NoSession}
	}
	if b.sessions.claims[s] > 0 {
		b.mu.Unlock()
		return HandoverResult{Outcome: Busy}
	}
	b.forgetLocked(s)
	b.mu.Unlock()
	bt := b.getBatch()
	b.takeOver(bt, s, discard)
	b.endBatch(bt)
	b.removeSubs(s, s.Subs()) // nothing more is queued here once it is exported
	var image []byte
	if !discard {
		var im store.Image
		s.Export(&im)
		image = im.Bytes()
	}
	subs, ds := s.End()
	if !discard {
		ds = session.Drops{} // exported: they go on in the image
	}
	b.ended(s, subs, ds)
	b.freeID(s.ID())
	b.commit()
	return HandoverResult{Outcome: HandedOver, Image: image}
}

// SelfFence is ClusterHost's: this node lost the Raft leader; every client is
// disconnected (v5 0x9C, use another server).
func (b *Broker) SelfFence() {
	b.mu.Lock()
	var online []*session.Session
	for _, s := range b.sessions.m {
		if s.Online() {
			online = append(online, s)
		}
	}
	b.mu.Unlock()
	for _, s := range online {
		s.Disconnect(packet.UseAnotherServer)
	}
	b.log.Warn("cluster: lost the raft leader; disconnected every client", "clients", len(online))
}

// writeFence is the listener's write fence of a node of cluster cl: a node whose lease
// has ended writes nothing to its clients; nil (no fence) without a cluster.
func writeFence(cl Cluster) func() bool {
	if cl == nil {
		return nil
	}
	return func() bool { return cl.WritableAt(now()) }
}

// unserved closes a connected client whose bytes arrive while this node may not serve
// (v5 DISCONNECT 0x9C): the lease watch closes every client too, but a node waking from
// a pause reads its sockets before the watch has run. The caller holds cl.mu.
func (b *Broker) unserved(bt *batch, cl *client) {
	cl.closing = true
	cl.r.Release()
	bt.flush()
	cl.s.Disconnect(packet.UseAnotherServer)
	b.detach(bt, cl)
}

// refuseUnserved refuses a CONNECT while this node may not serve clients: v5 0x9C with a
// Server Reference when another node is known, else 0x88; 3.1.1 return code 3.
// who is the CONNECT's client id and user name, for the refusal log.
func (b *Broker) refuseUnserved(cl *client, v packet.Version, who refusal) bool {
	ok, ref := b.cluster.Serving()
	if ok {
		return false
	}
	if v != packet.V5 || ref == "" {
		who.why = "cluster: this node serves no clients now"
		b.refuse(cl, v, packet.ServerUnavailable, who)
		return true
	}
	b.redirect(cl, ref)
	return true
}
