package broker

import (
	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// settings are the protocol limits of the mqtt and queue sections as a connection lives
// under them: one immutable snapshot, swapped by Reconfigure, that a connection takes
// when it is accepted (client.set) and keeps until it closes, so that what its CONNACK
// told the client is what the broker enforces. A session takes lim from the connection
// that creates or resumes it (session.ConnectInfo.Limits).
type settings struct {
	lim          session.Limits
	certIdentity map[string]bool // listeners whose client certificate is the username
	// idRules are the client id and session ownership rules (identity.go) of the
	// listeners with an auth block of their own, by name; the others have topRules.
	idRules         map[string]*idRules
	topRules        *idRules
	expiryMax       uint32
	maxKeepalive    uint16
	maxQoS          uint8
	retainAvailable bool
}

// newSettings derives the settings of c from base, the counters and the store's journal
// that every snapshot shares.
func newSettings(c *conf.Config, base *session.Limits) *settings {
	s := &settings{
		lim:             *base,
		certIdentity:    make(map[string]bool),
		idRules:         make(map[string]*idRules),
		topRules:        newIDRules(&c.Auth),
		expiryMax:       uint32(c.MQTT.SessionExpiryMax),
		maxKeepalive:    uint16(c.MQTT.MaxKeepalive),
		maxQoS:          uint8(*c.MQTT.MaxQoS),
		retainAvailable: *c.MQTT.RetainAvailable,
	}
	s.lim.ReceiveMaximum = uint16(c.MQTT.ReceiveMaximum)
	s.lim.MaxPacketSize = uint32(c.MQTT.MaxPacketSize)
	s.lim.TopicAliasMaximum = uint16(*c.MQTT.TopicAliasMaximum)
	s.lim.QueueMessages = c.Queue.OfflineMessages
	s.lim.QueueBytes = int(c.Queue.OfflineBytes)
	for _, l := range c.Listeners {
		if l.TLS != nil && l.TLS.UseIdentityAsUsername {
			s.certIdentity[l.Name] = true
		}
		if l.Auth != nil {
			s.idRules[l.Name] = newIDRules(l.Auth)
		}
	}
	return s
}
