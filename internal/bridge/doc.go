// Package bridge connects the broker to remote MQTT brokers, as Mosquitto's bridges do:
// each configured bridge (conf.Bridge) is one client connection to its remote, carrying
// the messages of its topic lines out (local to remote), in (remote to local) or both,
// with Mosquitto's local and remote prefixes.
//
// The client is written on bifrost's own codec (internal/packet), not on a client
// library such as paho: a bridge is the hot path of all uplink traffic, and the codec
// encodes a forwarded message from the bytes the broker already holds (its topic, payload
// and pass-through properties, encoded once) into one buffered write, with no goroutine
// or channel per message and no second copy of the message model; the broker speaks MQTT
// already, so a library would only add a dependency and its allocations.
//
// # The path of a message
//
// Out: a broker.Tap subscribes to each out topic's local filter. The tap sees each
// message once, on the publisher's goroutine, with its QoS, retain flag and properties;
// it copies the message into the bridge's queue and returns (tap.go). The bridge's writer
// sends what the queue holds, QoS 1 and 2 messages up to max_inflight awaiting the
// remote's PUBACK or PUBCOMP (conn.go). In: the bridge subscribes on the remote to each
// in topic's remote filter; what arrives is published locally through the tap, and
// acknowledged to the remote once the store has what the local publish kept
// (inbound.go).
//
// # Guarantees
//
// The queue is bounded by queue_messages and queue_bytes; a full queue drops its oldest
// waiting QoS 0 message first, then the new message or, with queue_full: drop_oldest,
// its oldest waiting one, and counts each (bifrost_bridge_dropped_total). With the
// broker's store on, the QoS 1 and 2 messages are kept in it (store.go): the publisher's
// PUBACK or PUBREC waits until the store has the message under the store's sync policy,
// and the message leaves the store when the remote acknowledged it (PUBACK, PUBCOMP).
// So a message the local broker acknowledged, and that a full queue did not drop,
// reaches the remote at least once across reconnects and restarts of bifrost (a kill -9
// too, under sync: always). At QoS 2 it reaches it exactly once while bifrost runs: what
// was in flight when a connection broke is sent again under its packet id, as a PUBLISH
// with DUP or, after the PUBREC, a PUBREL. A QoS 2 message's packet id is stored before
// its PUBLISH leaves, so after a restart it is sent again under that id with DUP; its
// PUBREC is not stored, so one whose PUBREL went out may reach the remote twice. QoS 1
// messages in flight at a restart are sent again as new PUBLISHes (counted in restored).
// With the store off the queue is in memory only and a restart loses it. QoS 0 messages
// are sent at most once.
//
// # Loops
//
// The tap's subscriptions are No Local: what the bridge publishes locally never goes back
// out through the same bridge. On the remote, a 5.0 bridge subscribes with No Local and
// Retain As Published; a 3.1.1 bridge marks its CONNECT as a bridge's (protocol level |
// 0x80, Mosquitto's try_private), which Mosquitto, and bifrost (internal/broker), answer
// the same way. Two brokers each with its own bridge to the other, both carrying the same
// topics, still loop, as they do with Mosquitto: one bridge with direction both is the
// way.
//
// Files: bridge.go the Bridge and its reconnect loop; conn.go one connection's reader and
// writer; queue.go the bounded queue and the in-flight window; store.go the queue in the
// broker's store; inbound.go what comes from the remote; tap.go the local side;
// topics.go prefixes and matching; backoff.go the reconnect waits; metrics.go the
// collector; dial.go TCP and TLS.
package bridge
