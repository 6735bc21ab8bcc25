package broker

import "github.com/bifrost-mqtt/bifrost/internal/packet"

var (
	errExpiryAfterZero = &packet.Error{Code: packet.ProtocolError, Rule: "MQTT-3.14.2-2", Text: "session expiry set on DISCONNECT after 0 at CONNECT"}
)

// onDisconnect handles a client's DISCONNECT: the will is discarded [MQTT-3.14.4-3] unless
// a v5 client asks for it with 0x04, a v5 session expiry may change, and the connection
// is closed [MQTT-3.14.4-1].
func (b *Broker) onDisconnect(bt *batch, cl *client, d *packet.Disconnect) error {
	s := cl.s
	if d.Props.SessionExpiry.Set {
		if s.Expiry() == 0 && d.Props.SessionExpiry.V != 0 {
			return errExpiryAfterZero
		}
		e := d.Props.SessionExpiry.V
		if cl.set.expiryMax > 0 && e > cl.set.expiryMax {
			e = cl.set.expiryMax
		}
		s.SetExpiry(e)
	}
	cl.willOnClose = d.Code == packet.DisconnectWithWillMessage
	cl.closing = true
	bt.flush()
	b.detach(bt, cl) // before the close the client may see and reconnect after
	cl.conn.Close()
	return nil
}
