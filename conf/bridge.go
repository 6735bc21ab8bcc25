package conf

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Bridge directions: the values of BridgeTopic.Direction.
const (
	BridgeOut  = "out"  // local messages go to the remote broker
	BridgeIn   = "in"   // the remote broker's messages come here
	BridgeBoth = "both" // both ways
)

// Bridge protocols: the values of Bridge.Protocol.
const (
	BridgeV5   = "5.0"   // MQTT 5.0
	BridgeV311 = "3.1.1" // MQTT 3.1.1
)

// What a bridge's full queue drops: the values of Bridge.QueueFull. Either way, QoS 0
// messages go first.
const (
	BridgeDropNew    = "drop_new"    // the new message, as Mosquitto's max_queued_messages
	BridgeDropOldest = "drop_oldest" // the oldest waiting one, as EMQX's bridge buffer
)

// Bridge connects this broker to a remote MQTT broker as a client and carries messages
// between them (bridges[i]; docs/bridges.md), as Mosquitto's `connection` does; each
// field's doc names the Mosquitto option it stands for, where there is one. Every field
// needs a restart to change.
type Bridge struct {
	// Name (bridges[i].name) names the bridge in logs and metrics, and in the default
	// ClientID; required, unique, without /, + or #.
	Name string `yaml:"name"`
	// Address (bridges[i].address; address) is the remote broker's host:port, both
	// required.
	Address string `yaml:"address"`
	// Protocol (bridges[i].protocol; bridge_protocol_version) is the MQTT version spoken
	// to the remote: BridgeV5, "5.0", the default, or BridgeV311, "3.1.1".
	Protocol string `yaml:"protocol"`
	// Topics (bridges[i].topics; topic) are the topics carried, at least one.
	Topics []BridgeTopic `yaml:"topics"`
	// ClientID (bridges[i].remote_clientid; remote_clientid) is the client id on the
	// remote. Default "<host name>.<name>", as Mosquitto's.
	ClientID string `yaml:"remote_clientid"`
	// Username (bridges[i].remote_username; remote_username) is the user name sent to
	// the remote. Default "": none.
	Username string `yaml:"remote_username"`
	// Password (bridges[i].remote_password; remote_password) is the password sent to the
	// remote; over 3.1.1 only with a Username. Default "": none. Reload reports mask it.
	Password string `yaml:"remote_password"`
	// CleanSession (bridges[i].cleansession; cleansession) makes the remote forget the
	// bridge's subscriptions and queued messages when it disconnects. Default false: a
	// persistent session (5.0: one that never expires), so messages for "in" topics wait
	// on the remote.
	CleanSession bool `yaml:"cleansession"`
	// KeepAlive (bridges[i].keepalive_interval; keepalive_interval) is the keep alive
	// sent to the remote: 5s, as Mosquitto requires, to 65535s. Default 60s.
	KeepAlive Duration `yaml:"keepalive_interval"`
	// RestartTimeout (bridges[i].restart_timeout; restart_timeout's base) is the shortest
	// wait before a reconnect; waits are drawn with decorrelated jitter between it and
	// RestartTimeoutMax, as Mosquitto's, and equal values give a constant wait. Above 0;
	// default 5s.
	RestartTimeout Duration `yaml:"restart_timeout"`
	// RestartTimeoutMax (bridges[i].restart_timeout_max; restart_timeout's cap) is the
	// longest wait before a reconnect; not below RestartTimeout. Default 30s, or
	// RestartTimeout when that is longer.
	RestartTimeoutMax Duration `yaml:"restart_timeout_max"`
	// TryPrivate (bridges[i].try_private; try_private) marks a 3.1.1 CONNECT as a
	// bridge's (protocol level | 0x80), so that a Mosquitto or bifrost remote does not
	// echo the bridge's messages back. nil: true. 5.0 bridges use No Local instead and
	// ignore it.
	TryPrivate *bool `yaml:"try_private"`
	// Notifications (bridges[i].notifications; notifications) publishes the bridge's
	// state, retained, on the local broker at NotificationTopic: "1" when connected, "0"
	// when not. nil: true.
	Notifications *bool `yaml:"notifications"`
	// NotificationTopic (bridges[i].notification_topic; notification_topic) is where the
	// state is published: a topic name, without wildcards. Default
	// $SYS/broker/connection/<remote_clientid>/state.
	NotificationTopic string `yaml:"notification_topic"`
	// QueueMessages (bridges[i].queue_messages; max_queued_messages) bounds the count of
	// the messages kept for the remote while it is down or slow, in flight ones included;
	// with the store on, the QoS 1 and 2 ones are kept in it and survive a restart.
	// 1..2147483647; default 1000.
	QueueMessages int `yaml:"queue_messages"`
	// QueueBytes (bridges[i].queue_bytes; max_queued_bytes) bounds the same queue in
	// bytes: payload, topic and properties. At least 1 byte; default 16MiB.
	QueueBytes ByteSize `yaml:"queue_bytes"`
	// QueueFull (bridges[i].queue_full) says what a full queue drops, counted: first its
	// oldest waiting QoS 0 message, then, for a new QoS 1 or 2 message, BridgeDropNew
	// (the default) the new one or BridgeDropOldest the oldest waiting one. A new QoS 0
	// message finding no QoS 0 message to drop is dropped; messages in flight never are.
	QueueFull string `yaml:"queue_full"`
	// MaxInflight (bridges[i].max_inflight; max_inflight_messages) is how many QoS 1 and 2
	// messages may await the remote's PUBACK or PUBCOMP; the remote's Receive Maximum
	// lowers it. 1..65535; default 20.
	MaxInflight int `yaml:"max_inflight"`
	// TLS (bridges[i].tls) makes the bridge connect with TLS. nil, the default: plain
	// TCP.
	TLS *BridgeTLS `yaml:"tls"`
}

// BridgeTopic is one topic line of a bridge (bridges[i].topics[j]), as Mosquitto's
// `topic pattern direction qos local_prefix remote_prefix`: the local topic is
// local_prefix+pattern, the remote one remote_prefix+pattern.
type BridgeTopic struct {
	// Pattern (bridges[i].topics[j].pattern) is the topic filter carried; required, and
	// not a shared subscription ($share/).
	Pattern string `yaml:"pattern"`
	// Direction (bridges[i].topics[j].direction) is BridgeIn, BridgeOut (the default) or
	// BridgeBoth.
	Direction string `yaml:"direction"`
	// QoS (bridges[i].topics[j].qos) is the highest QoS a message crosses at: 0 (the
	// default), 1 or 2.
	QoS int `yaml:"qos"`
	// LocalPrefix (bridges[i].topics[j].local_prefix) is put before Pattern on this
	// broker; no wildcards. Default "".
	LocalPrefix string `yaml:"local_prefix"`
	// RemotePrefix (bridges[i].topics[j].remote_prefix) is put before Pattern on the
	// remote; no wildcards. Default "".
	RemotePrefix string `yaml:"remote_prefix"`
}

// BridgeTLS makes the bridge connect with TLS (bridges[i].tls; Mosquitto's
// bridge_cafile, bridge_certfile, bridge_keyfile, bridge_insecure). The files are PEM.
type BridgeTLS struct {
	// CAFile (bridges[i].tls.ca_file; bridge_cafile) is the remote's certificate
	// authority. Default "": the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile (bridges[i].tls.cert_file; bridge_certfile) is a client certificate, set
	// together with KeyFile. Default "": none.
	CertFile string `yaml:"cert_file"`
	// KeyFile (bridges[i].tls.key_file; bridge_keyfile) is the client certificate's
	// private key, set together with CertFile.
	KeyFile string `yaml:"key_file"`
	// ServerName (bridges[i].tls.server_name) is the name checked in the remote's
	// certificate. Default Address's host.
	ServerName string `yaml:"server_name"`
	// Insecure (bridges[i].tls.insecure; bridge_insecure) skips the check of the remote's
	// certificate: for tests only. Default false.
	Insecure bool `yaml:"insecure"`
}

// Bridge defaults, with Mosquitto's values where it has one.
const (
	defaultBridgeKeepAlive   = Duration(60 * time.Second)
	minBridgeKeepAlive       = Duration(5 * time.Second)
	defaultBridgeRestart     = Duration(5 * time.Second)
	defaultBridgeRestartMax  = Duration(30 * time.Second)
	defaultBridgeQueue       = 1000
	defaultBridgeQueueBytes  = ByteSize(16 << 20)
	defaultBridgeMaxInflight = 20
)

func (br *Bridge) ensureDefaults(host string) {
	orDefault(&br.Protocol, BridgeV5)
	orDefault(&br.ClientID, host+"."+br.Name)
	orDefault(&br.KeepAlive, defaultBridgeKeepAlive)
	orDefault(&br.RestartTimeout, defaultBridgeRestart)
	orDefault(&br.RestartTimeoutMax, max(defaultBridgeRestartMax, br.RestartTimeout))
	nilDefault(&br.TryPrivate, ptr(true))
	nilDefault(&br.Notifications, ptr(true))
	orDefault(&br.NotificationTopic, "$SYS/broker/connection/"+br.ClientID+"/state")
	orDefault(&br.QueueMessages, defaultBridgeQueue)
	orDefault(&br.QueueBytes, defaultBridgeQueueBytes)
	orDefault(&br.QueueFull, BridgeDropNew)
	orDefault(&br.MaxInflight, defaultBridgeMaxInflight)
	for i := range br.Topics {
		orDefault(&br.Topics[i].Direction, BridgeOut)
	}
}

// validateBridges checks every bridge, naming each field as bridges[i].field.
func (c *Config) validateBridges(errs *errorList) {
	names := map[string]int{}
	for i := range c.Bridges {
		br := &c.Bridges[i]
		at := fmt.Sprintf("bridges[%d]", i)
		switch j, dup := names[br.Name]; {
		case br.Name == "":
			errs.add(at+".name", "required")
		case dup:
			errs.add(at+".name", "%q is also the name of bridges[%d]", br.Name, j)
		case strings.ContainsAny(br.Name, "/+#"):
			errs.add(at+".name", "%q must not contain /, + or #", br.Name)
		default:
			names[br.Name] = i
		}
		if host, port, err := splitAddress(br.Address); err != "" {
			errs.add(at+".address", "%q is not host:port: %s", br.Address, err)
		} else if host == "" || port == "0" {
			errs.add(at+".address", "%q needs a host and a port", br.Address)
		}
		oneOf(errs, at+".protocol", br.Protocol, BridgeV5, BridgeV311)
		if br.ClientID == "" {
			errs.add(at+".remote_clientid", "required")
		}
		if br.Password != "" && br.Username == "" && br.Protocol == BridgeV311 {
			errs.add(at+".remote_password", "set without remote_username, which 3.1.1 does not allow")
		}
		if br.KeepAlive < minBridgeKeepAlive || br.KeepAlive > Duration(math.MaxUint16*time.Second) {
			errs.add(at+".keepalive_interval", "%s is out of range 5s..65535s", br.KeepAlive)
		}
		positive(errs, at+".restart_timeout", br.RestartTimeout)
		if br.RestartTimeoutMax < br.RestartTimeout {
			errs.add(at+".restart_timeout_max", "%s is below restart_timeout (%s)", br.RestartTimeoutMax, br.RestartTimeout)
		}
		if t := br.NotificationTopic; *br.Notifications && (t == "" || strings.ContainsAny(t, "+#")) {
			errs.add(at+".notification_topic", "%q is not a topic name", t)
		}
		between(errs, at+".queue_messages", br.QueueMessages, 1, math.MaxInt32)
		size(errs, at+".queue_bytes", br.QueueBytes, 1, math.MaxInt64)
		oneOf(errs, at+".queue_full", br.QueueFull, BridgeDropNew, BridgeDropOldest)
		between(errs, at+".max_inflight", br.MaxInflight, 1, math.MaxUint16)
		if t := br.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
			errs.add(at+".tls", "cert_file and key_file go together")
		}
		if len(br.Topics) == 0 {
			errs.add(at+".topics", "at least one topic is required")
		}
		for j, tp := range br.Topics {
			tat := fmt.Sprintf("%s.topics[%d]", at, j)
			if msg := filterProblem(tp.Pattern); msg != "" {
				errs.add(tat+".pattern", "%q %s", tp.Pattern, msg)
			} else if strings.HasPrefix(tp.LocalPrefix+tp.Pattern, "$share/") || strings.HasPrefix(tp.RemotePrefix+tp.Pattern, "$share/") {
				errs.add(tat+".pattern", "%q: a bridge cannot carry a shared subscription", tp.Pattern)
			}
			oneOf(errs, tat+".direction", tp.Direction, BridgeIn, BridgeOut, BridgeBoth)
			if tp.QoS < 0 || tp.QoS > 2 {
				errs.add(tat+".qos", "%d is out of range 0..2", tp.QoS)
			}
			for _, p := range []struct{ field, v string }{{"local_prefix", tp.LocalPrefix}, {"remote_prefix", tp.RemotePrefix}} {
				if strings.ContainsAny(p.v, "+#") {
					errs.add(tat+"."+p.field, "%q must not contain a wildcard", p.v)
				}
			}
		}
	}
}

// filterProblem says what is wrong with an MQTT topic filter, or "" when nothing is: it
// must not be empty, and + and # must each fill a level, # only the last (spec 4.7.1).
func filterProblem(f string) string {
	if f == "" {
		return "is empty"
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		switch {
		case l == "#" && i != len(levels)-1:
			return "has # before its last level"
		case l != "#" && l != "+" && strings.ContainsAny(l, "+#"):
			return "has a wildcard that does not fill its level"
		}
	}
	return ""
}

func (br Bridge) clone() Bridge {
	br.Topics = slices.Clone(br.Topics)
	br.TryPrivate = clonePtr(br.TryPrivate)
	br.Notifications = clonePtr(br.Notifications)
	br.TLS = clonePtr(br.TLS)
	return br
}
