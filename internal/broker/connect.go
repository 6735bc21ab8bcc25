package broker

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/memory"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

func now() int64 { return time.Now().UnixNano() }

// onConnect handles the CONNECT packet: it validates what the codec cannot, admits the
// client, finds or creates its session (taking it over from a live connection if need be)
// and answers with CONNACK.
func (b *Broker) onConnect(bt *batch, cl *client, h packet.Header, body []byte) {
	c := &bt.connect
	if err := c.Decode(h, body, 0); err != nil {
		var rc packet.ReasonCode
		errors.As(err, &rc)
		switch {
		case rc == packet.UnsupportedProtocolVersion:
			// Answer in the version the client asked for, then close [MQTT-3.1.2-2].
			v := packet.V311
			if c.Version == packet.V5 {
				v = packet.V5
			}
			b.refuse(cl, v, rc, connectRefusal("unsupported protocol version", c, string(c.ClientID)))
		case c.Version == packet.V5 && rc != 0:
			// spec 3.1.4: CONNACK with 0x81/0x82, then close
			b.refuse(cl, packet.V5, rc, connectRefusal(err.Error(), c, string(c.ClientID)))
		default:
			b.logRefusal(cl, packet.MalformedPacket, connectRefusal(err.Error(), c, string(c.ClientID)))
			b.closeNow(cl)
		}
		return
	}
	v := c.Version
	cl.r.Version = v
	cl.bridge = c.Bridge
	if b.cluster != nil && b.refuseUnserved(cl, v, connectRefusal("", c, string(c.ClientID))) {
		return
	}
	if b.pressure() >= memory.Soft {
		// Admission control: near the memory limit new clients are refused, so the
		// clients already connected keep their share and the process does not grow until
		// the kernel kills it. Quota exceeded, "an implementation or administrative
		// imposed limit has been exceeded" (3.1.1: server unavailable): the limit is the
		// memory the broker may use; server busy would say a moment's load.
		b.refuse(cl, v, packet.QuotaExceeded, connectRefusal("memory pressure", c, string(c.ClientID)))
		return
	}
	if b.cluster != nil && v == packet.V5 {
		// A node above cluster.redirect_load sends new clients to the least loaded
		// node, before spending an authentication on them.
		if ref := b.cluster.Redirect(); ref != "" {
			b.redirect(cl, ref)
			return
		}
	}

	cid, assigned := string(c.ClientID), false
	if cid == "" {
		if v != packet.V5 && !c.CleanStart || v == packet.V31 {
			// A 3.1.1 client must set clean session with an empty id [MQTT-3.1.3-8];
			// 3.1 requires an id.
			b.refuse(cl, v, packet.ClientIdentifierNotValid, connectRefusal("empty client id", c, ""))
			return
		}
		cid, assigned = b.assignClientID(), true // [MQTT-3.1.3-6]
	}
	if _, rc := b.checkWill(cl.set, c); rc != packet.Success {
		b.refuse(cl, v, rc, connectRefusal(willRefused(rc), c, cid))
		return
	}
	b.authenticate(bt, cl, h, body, cid, assigned)
}

// connected completes an authenticated CONNECT: the client gets its session (taking it
// over from a live connection if need be) and CONNACK. res is who the client is; for
// enhanced authentication method names it and authData is the method's last word, sent in
// the CONNACK.
func (b *Broker) connected(bt *batch, cl *client, c *packet.Connect, cid string, assigned bool, res auth.Result, authData []byte, method string) {
	v := c.Version
	if !b.idAllowed(cl, v, cid, res.Username, assigned) {
		return // before any claim: a live connection of the id is not even taken over
	}
	will, rc := b.willOf(cl.set, c)
	if rc != packet.Success {
		b.refuse(cl, v, rc, connectRefusal(willRefused(rc), c, cid))
		return
	}
	if will != nil && !b.willAllowed(cl, res.Username, cid, will.Msg.Topic()) {
		// As Mosquitto does: a will the client could not publish refuses the CONNECT,
		// rather than failing silently when the connection is lost.
		b.stats.denied("will")
		b.refuse(cl, v, packet.NotAuthorized, connectRefusal("will topic denied by the ACL", c, cid))
		return
	}
	expiry, expiryCapped := b.sessionExpiry(cl.set, c)
	keepAlive, kaChanged := c.KeepAlive, false
	if v == packet.V5 && cl.set.maxKeepalive > 0 && (keepAlive == 0 || keepAlive > cl.set.maxKeepalive) {
		keepAlive, kaChanged = cl.set.maxKeepalive, true // told to the client as Server Keep Alive
	}

	connack := &bt.connack
	b.connack(connack, cl.set, c, cid, assigned, expiry, expiryCapped, keepAlive, kaChanged, authData, method)
	if max := c.Props.MaximumPacketSize.V; v == packet.V5 && !connack.Fit(max) {
		// Even without every property the client can do without, the CONNACK is above the
		// client's Maximum Packet Size [MQTT-3.1.2-24]: it cannot be served, and is refused
		// before it takes any session over. The bare refusal (5 bytes) if even that fits.
		why := connectRefusal("CONNACK above the client's maximum packet size", c, cid)
		if max >= 5 {
			b.refuse(cl, v, packet.ImplementationSpecificError, why)
		} else {
			b.stats.refusedCode(packet.ImplementationSpecificError)
			b.logRefusal(cl, packet.ImplementationSpecificError, why)
			b.closeNow(cl)
		}
		return
	}

	info := session.ConnectInfo{Version: v, Username: res.Username, Expiry: expiry, Will: will, Realm: cl.realm, Limits: &cl.set.lim}
	if v == packet.V5 {
		info.ClientMaxPacket = c.Props.MaximumPacketSize.V
		info.ClientRecvMax = c.Props.ReceiveMaximum.V
		info.ClientAliasMax = c.Props.TopicAliasMaximum.V
		info.NoProblemDetails = c.Props.RequestProblemInfo.Set && c.Props.RequestProblemInfo.V == 0
	}
	a := admission{cid: cid, clean: c.CleanStart, keepAlive: keepAlive, info: info}
	if b.cluster != nil {
		// Kept beyond this call: a copy on the heap, so that a single node's admission
		// stays on the stack.
		pa := new(admission)
		*pa = a
		pa.connack = *connack
		b.claimInCluster(cl, pa) // admits once the cluster has given this node the client id
		return
	}
	b.admit(bt, cl, &a, connack)
}

// An admission is a CONNECT accepted, for admit: what the session is attached with.
type admission struct {
	cid       string
	clean     bool
	keepAlive uint16
	info      session.ConnectInfo
	// For a cluster (cluster_owner.go): the CONNACK kept while the client id is claimed,
	// and the claim's epoch.
	connack packet.Connack
	epoch   uint64
}

// admit gives an accepted client its session (taking it over from a live connection if
// need be) and sends connack; false: it refused the client instead.
func (b *Broker) admit(bt *batch, cl *client, a *admission, connack *packet.Connack) bool {
	cid, v := a.cid, a.info.Version
	o := owner{user: a.info.Username, realm: a.info.Realm, refuse: b.rules(cl.conn.Listener().Name()).refuse}
	c := b.claimSession(cid, a.clean, cl, o)
	s, present := c.s, c.present
	switch {
	case c.refused:
		// The session belongs to another identity (identity.go).
		b.stats.denied("foreign_session")
		owner, _ := s.Identity()
		b.refuse(cl, v, packet.ClientIdentifierNotValid, refusal{"session of another user (" + owner + ")", cid, o.user})
		return false
	case s == nil:
		b.refuse(cl, v, packet.ServerUnavailable, refusal{"shutting down", cid, a.info.Username})
		return false
	case c.foreign:
		b.foreignDiscarded(s, o.user)
	}
	if c.old != nil {
		b.takeOver(bt, c.old, a.clean || c.foreign) // a foreign CONNECT ends the session
	}
	if c.will != nil {
		b.publishWill(bt, c.will)
	}
	connack.SessionPresent = present
	dirtied, dropped := s.Attach(cl.conn, a.info, connack, now())
	bt.mark(s, dirtied)
	b.droppedAll(s, &dropped)
	b.attached(s)
	cl.s = s
	cl.willOnClose = true
	cl.keepAlive, cl.since = a.keepAlive, uint32(time.Since(b.start)/time.Second)
	b.online(s.Version(), 1)
	b.stats.connects.Add(1)
	if b.cluster != nil {
		b.ownedAttached(bt, s, a.epoch)
	}
	if a.keepAlive > 0 {
		// Close after one and a half keep alive periods of silence [MQTT-3.1.2-22]
		// (3.1.1: [MQTT-3.1.2-24]).
		cl.conn.SetIdleTimeout(time.Duration(a.keepAlive) * 1500 * time.Millisecond)
	} else {
		cl.conn.SetIdleTimeout(0)
	}
	if b.debugging() {
		b.log.Debug("client connected", "client", cid, "version", v.String(), "clean", a.clean,
			"present", present, "remote", cl.conn.RemoteAddr().String())
	}
	return true
}

// connack makes *connack the CONNACK accepting c (Session Present aside): in 5.0, the properties that
// tell the client what it must know. Properties whose value is the one their absence
// means are left out (Wildcard, Subscription Identifier and Shared Subscription Available,
// all 1 here; Retain Available 1; Maximum QoS 2; Receive Maximum 65,535; Topic Alias
// Maximum 0): bytes saved on every CONNACK, and room under a small Maximum Packet Size.
func (b *Broker) connack(connack *packet.Connack, set *settings, c *packet.Connect, cid string, assigned bool, expiry uint32, expiryCapped bool,
	keepAlive uint16, kaChanged bool, authData []byte, method string) {
	*connack = packet.Connack{}
	if c.Version != packet.V5 {
		return
	}
	p := &connack.Props
	if assigned {
		p.AssignedClientID = []byte(cid)
	}
	if kaChanged {
		p.ServerKeepAlive = packet.Some(keepAlive)
	}
	if expiryCapped {
		p.SessionExpiry = packet.Some(expiry)
	}
	if set.lim.ReceiveMaximum != 65535 {
		p.ReceiveMaximum = packet.Some(set.lim.ReceiveMaximum)
	}
	if set.lim.MaxPacketSize != 0 {
		p.MaximumPacketSize = packet.Some(set.lim.MaxPacketSize)
	}
	if set.lim.TopicAliasMaximum != 0 {
		p.TopicAliasMaximum = packet.Some(set.lim.TopicAliasMaximum)
	}
	if set.maxQoS < 2 {
		p.MaximumQoS = packet.Some(set.maxQoS)
	}
	if !set.retainAvailable {
		p.RetainAvailable = packet.Some[uint8](0)
	}
	if method != "" {
		p.AuthMethod = []byte(method)
		p.AuthData = authData
	}
}

// assignClientID makes a unique client identifier for a client that sent none.
func (b *Broker) assignClientID() string {
	var r [10]byte
	_, _ = rand.Read(r[:])
	return "bifrost-" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(r[:])
}

// sessionExpiry is the session expiry interval the session gets: the v5 property (absent:
// 0), or for older clients 0 with clean session and "never" without; capped by
// mqtt.session_expiry_max. capped reports that a v5 client must be told.
func (b *Broker) sessionExpiry(set *settings, c *packet.Connect) (expiry uint32, capped bool) {
	switch {
	case c.Version == packet.V5:
		expiry = c.Props.SessionExpiry.V
	case !c.CleanStart:
		expiry = session.NoExpiry
	}
	if set.expiryMax > 0 && expiry > set.expiryMax {
		return set.expiryMax, c.Version == packet.V5
	}
	return expiry, false
}

// willOf builds the will message of a CONNECT, refusing what the broker does not offer:
// a will QoS above the maximum [MQTT-3.2.2-12] or a retained will without retain support
// [MQTT-3.2.2-13] (5.0; older clients get their will downgraded instead).
func (b *Broker) willOf(set *settings, c *packet.Connect) (*session.Will, packet.ReasonCode) {
	if !c.WillFlag {
		return nil, packet.Success
	}
	p, rc := b.checkWill(set, c)
	if rc != packet.Success {
		return nil, rc
	}
	w := &session.Will{Msg: session.NewMessage(&p, p.Topic, 0, time.Time{}), Delay: c.WillProps.WillDelay.V,
		Expiry: c.WillProps.MessageExpiry.V}
	return w, packet.Success
}

// checkWill is the will of a CONNECT as the broker will publish it, or the reason code to
// refuse it with (see willOf): also a will on a topic that starts with $, but for a
// bridge's state, which connected checks against the client's identity (connstate.go).
func (b *Broker) checkWill(set *settings, c *packet.Connect) (packet.Publish, packet.ReasonCode) {
	if !c.WillFlag {
		return packet.Publish{}, packet.Success
	}
	if len(c.WillTopic) > 0 && c.WillTopic[0] == '$' && !isConnectionState(c.WillTopic) {
		// Topics starting with $ belong to the broker (spec 4.7.2: a server SHOULD keep
		// clients from exchanging messages on them). A client's PUBLISH to $SYS is
		// never routed (publish.go); its will, which the broker would publish for it
		// when the connection is lost, must not get in there either. Refused like a
		// will the ACL denies: 0x87, 3.1.1 return code 5.
		return packet.Publish{}, packet.NotAuthorized
	}
	qos, retain := c.WillQoS, c.WillRetain
	if qos > set.maxQoS {
		if c.Version == packet.V5 {
			return packet.Publish{}, packet.QoSNotSupported
		}
		qos = set.maxQoS
	}
	if retain && !set.retainAvailable {
		if c.Version == packet.V5 {
			return packet.Publish{}, packet.RetainNotSupported
		}
		retain = false
	}
	p := packet.Publish{Topic: c.WillTopic, Payload: c.WillPayload, QoS: qos, Retain: retain, Props: c.WillProps}
	// The will's expiry counts from when it is published, not from CONNECT (3.1.3.2.4).
	p.Props.MessageExpiry = packet.Opt[uint32]{}
	return p, packet.Success
}
