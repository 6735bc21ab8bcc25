package broker

import (
	"log/slog"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/logging"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// Refused CONNECTs
//
// Every CONNECT the broker refuses is counted (bifrost_connects_refused_total, by reason
// code) and logged at info, "connect refused", with why in a few words, the reason code,
// the client id and user name the CONNECT carried and the remote address. An operator
// must be able to tell a misconfigured bridge or a wrong password from the broker's side
// alone. The log is rate-limited broker-wide (refusalLogBurst lines a second; the last
// line held back in a second is logged when it ends, saying how many in "suppressed"), so that a password
// guesser or a fleet with a bad config cannot fill the disk; the counter counts them all.

// refusalLogBurst is how many refused CONNECTs are logged a second at most.
const refusalLogBurst = 10

// newRefusalLog is the limiter of the refusal log (and of the auth throttle's lines).
func newRefusalLog() *logging.Limiter { return logging.NewLimiter(refusalLogBurst, time.Second) }

// A refusal says why a CONNECT was refused and what it carried, for the refusal log.
type refusal struct {
	why  string // what was wrong, in a few words
	cid  string // the client identifier the CONNECT carried ("" if none)
	user string // its user name ("" if none)
}

// connectRefusal is a refusal of c for why; cid is the client id in force (c's, or the
// one assigned).
func connectRefusal(why string, c *packet.Connect, cid string) refusal {
	return refusal{why: why, cid: cid, user: string(c.Username)}
}

// refuse answers a CONNECT with a failing CONNACK and closes the connection
// [MQTT-3.2.2-7]; the refusal is counted and logged.
func (b *Broker) refuse(cl *client, v packet.Version, rc packet.ReasonCode, r refusal) {
	b.stats.refusedCode(rc)
	b.logRefusal(cl, rc, r)
	ack := packet.Connack{Code: rc}
	buf := ack.AppendTo(make([]byte, 0, 8), v)
	_, _ = cl.conn.Write(buf)
	cl.closing = true
	cl.conn.Shutdown()
}

// logRefusal logs a refused CONNECT, within the refusal log's rate.
func (b *Broker) logRefusal(cl *client, rc packet.ReasonCode, r refusal) {
	b.auth.refusals.Log(b.log, slog.LevelInfo, "connect refused", "connect refused", "reason", r.why, "code", rc.String(),
		"client", r.cid, "user", r.user, "remote", cl.conn.RemoteAddr().String())
}

// willRefused says why checkWill refused a will with rc.
func willRefused(rc packet.ReasonCode) string {
	switch rc {
	case packet.QoSNotSupported:
		return "will QoS above mqtt.max_qos"
	case packet.RetainNotSupported:
		return "retained will while retain is not available"
	}
	return "will topic reserved to the broker"
}
