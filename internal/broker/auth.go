package broker

import "github.com/bifrost-mqtt/bifrost/internal/packet"

// Authenticator decides whether a client may connect. It is called on the connection's
// event loop, so an implementation that is slow (a password hash, a remote call) must
// answer from a cache or hand the work elsewhere; the auth part provides such an
// implementation.
type Authenticator interface {
	// Authenticate returns nil to accept the CONNECT, or an error carrying the reason code
	// to refuse it with (packet.BadUserNameOrPassword, packet.NotAuthorized, ...).
	Authenticate(c *packet.Connect, remote string) error
}

// AllowAll admits every client.
type AllowAll struct{}

// Authenticate implements Authenticator.
func (AllowAll) Authenticate(*packet.Connect, string) error { return nil }
