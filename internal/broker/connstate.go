package broker

import (
	"bytes"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
)

// Bridge notifications
//
// A Mosquitto bridge with notifications on (its default) tells the broker it connects to
// whether it is up: its CONNECT carries a will, retained, payload "0", on
// $SYS/broker/connection/<its client id>/state, and once connected it publishes "1"
// there, retained (Mosquitto's src/bridge.c). Mosquitto, on the receiving side, lets any
// client write $SYS/broker/connection/+/state, the one topic under $SYS a client may
// write, if its ACL allows (security.c, acl__check_dollar). Everything else under $SYS
// is the broker's: a will there refuses the CONNECT (checkWill), a PUBLISH there is
// acknowledged and dropped (onPublish).
//
// bifrost accepts such a will or PUBLISH, and routes and retains it as any other message
// (subscribers of $SYS/broker/connection/# see the states, beside those of bifrost's own
// bridges), when:
//
//   - the id level is the client's own client id, and the client announced itself as a
//     bridge (3.1/3.1.1 protocol level | 0x80, Mosquitto's try_private) or the broker has
//     no ACL: a client may always say whether it is itself up;
//   - or the ACL allows the client to write the topic: Mosquitto's documented rule
//     "pattern write $SYS/broker/connection/%c/state" for 5.0 bridges, which carry no
//     marker, under an ACL.
//
// A state topic naming another client id is refused without an ACL rule that allows it:
// one client must not overwrite another's state, nor that of one of bifrost's bridges.

// connectionPrefix and stateSuffix frame a bridge's state topic.
var (
	connectionPrefix = []byte("$SYS/broker/connection/")
	stateSuffix      = []byte("/state")
)

// connectionStateID returns the client id level of a $SYS/broker/connection/<id>/state
// topic name, and false for any other topic.
func connectionStateID(topic []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(topic, connectionPrefix)
	if !ok {
		return nil, false
	}
	id, ok := bytes.CutSuffix(rest, stateSuffix)
	if !ok || len(id) == 0 || bytes.IndexByte(id, '/') >= 0 {
		return nil, false
	}
	return id, true
}

// isConnectionState reports whether topic is a bridge's state topic.
func isConnectionState(topic []byte) bool {
	_, ok := connectionStateID(topic)
	return ok
}

// connectionStateAllowed reports whether the client cid (user name user, on realm, with
// the bridge marker or not) may write topic as a bridge's state: a will or a PUBLISH
// (see Bridge notifications). False for any topic that is not a state topic.
func (b *Broker) connectionStateAllowed(realm uint8, bridge bool, user, cid string, topic []byte) bool {
	id, ok := connectionStateID(topic)
	if !ok {
		return false
	}
	own := string(id) == cid
	z := b.realms.sec[realm].Authorizer
	switch {
	case own && (bridge || z == nil):
		return true
	case z == nil:
		return false
	}
	return z.Allow(user, cid, auth.Write, borrowString(topic))
}

// willAllowed reports whether the client may have a will on topic: as it may publish
// there (the ACL), or, under $, only as a bridge's state.
func (b *Broker) willAllowed(cl *client, user, cid string, topic []byte) bool {
	if len(topic) > 0 && topic[0] == '$' {
		return b.connectionStateAllowed(cl.realm, cl.bridge, user, cid, topic)
	}
	return b.allow(cl.realm, user, cid, auth.Write, topic)
}

// publishState reports whether a client's PUBLISH on topic, under $SYS, is a bridge's
// state it may write (routed), rather than a write to the broker's own tree (dropped).
func (b *Broker) publishState(cl *client, topic []byte) bool {
	user, _ := cl.s.Identity()
	return b.connectionStateAllowed(cl.realm, cl.bridge, user, cl.s.ClientID(), topic)
}
